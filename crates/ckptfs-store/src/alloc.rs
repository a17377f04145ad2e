//! Chunk allocation: popping chunks from the free stacks (memory first, then spill),
//! giving them to a file, and releasing them.
//!
//! Affinity: a process prefers the free memory chunks it has page tables for. The free
//! stack is shared, so with two writers about half of the chunks one process frees are
//! popped by the other, which must then build page tables for them (about 70 ms per GiB
//! on 4 KiB pages, more than the copy). Before popping, a process whose own populated
//! chunks are on the stack swaps the nearest one to the top. The stack is derived
//! state: the order of its entries carries no meaning, and a process dying mid-swap
//! holds the allocation lock, so recovery rebuilds the stack from the owners.

use crate::error::{Result, StoreError};
use crate::integrity::seal_data;
use crate::store::Store;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Entries of the free stack looked at per search for one of this process's chunks
/// (from the last find down, then from the top down to it).
const AFFINITY_WINDOW: u32 = 4096;

/// `CKPTFS_NO_AFFINITY=1` turns the affinity off (for A/B measurements).
fn affinity_off() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| ckptfs_settings::job::no_affinity(&|k| std::env::var(k).ok()))
}

impl Store {
    /// Pop a free chunk (memory first, then spill) and give it to `fid` at `logical`.
    pub(crate) fn alloc_chunk(&self, fid: u32, logical: u32) -> Result<u32> {
        let _g = self.alloc_lock();
        self.pop_chunk_locked(fid + 1, logical, false)
    }

    /// Pop a free chunk (memory first, then spill unless `mem_only`) and give it to
    /// `owner` (a file id + 1, or [`crate::layout::SMALL_OWNER`]) at `logical`. Caller holds the
    /// allocation lock.
    pub(crate) fn pop_chunk_locked(&self, owner: u32, logical: u32, mem_only: bool) -> Result<u32> {
        let seg = &*self.seg;
        let sb = seg.sb();
        let (top, stack): (&std::sync::atomic::AtomicU32, &dyn Fn(u32) -> u32) =
            if sb.mem_top.load(Relaxed) > 0 {
                (&sb.mem_top, &|i| seg.mem_stack(i).load(Relaxed))
            } else if sb.spill_top.load(Relaxed) > 0 && !mem_only {
                (&sb.spill_top, &|i| seg.spill_stack(i).load(Relaxed))
            } else {
                return Err(StoreError::NoSpace);
            };
        let t = top.load(Relaxed);
        let cap = if std::ptr::eq(top, &sb.mem_top) {
            seg.layout.mem_chunks
        } else {
            seg.layout.spill_chunks
        };
        if std::ptr::eq(top, &sb.mem_top) && t <= cap {
            self.bring_own_chunk_to_top(t);
        }
        let c = if t <= cap { stack(t - 1) } else { u32::MAX };
        if c >= seg.nchunks() || seg.chunk(c).owner.load(Acquire) != 0 {
            // A damaged stack top or entry (the stacks are derived: rebuild them).
            tracing::warn!(store = %seg.name, top = t, id = c, "free chunk stack damaged; rebuilding it");
            self.mark_dirty();
            self.rebuild_free_stacks();
            return self.pop_chunk_locked(owner, logical, mem_only);
        }
        let e = seg.chunk(c);
        e.logical.store(logical, Relaxed);
        e.sum.store(0, Relaxed);
        e.meta
            .store(crate::integrity::chunk_meta(c, owner, logical), Relaxed);
        crate::fault::crash_point("alloc-before-owner");
        // Commit point: from here the chunk belongs to the file. A crash before the pop
        // below leaves it also on the stack; recovery rebuilds stacks from owners.
        e.owner.store(owner, Release);
        crate::fault::crash_point("alloc-after-owner");
        top.store(t - 1, Release);
        seg.affinity.set(c, false);
        Ok(c)
    }

    /// If the top of the free memory stack (`t` entries) is not one of the chunks this
    /// process freed with page tables mapped, but one of those is on the stack, swap it
    /// to the top. Allocation lock held. Not on huge pages (a chunk's page tables cost
    /// microseconds there) and not when this process has freed none (a fresh process).
    fn bring_own_chunk_to_top(&self, t: u32) {
        let seg = &*self.seg;
        let a = &seg.affinity;
        if seg.huge || t == 0 || a.freed.load(Relaxed) == 0 || affinity_off() {
            return;
        }
        let ours = |i: u32| {
            let c = seg.mem_stack(i).load(Relaxed);
            seg.is_mem(c) && a.is_mine(c) && seg.chunk(c).owner.load(Acquire) == 0 && seg.is_populated(c)
        };
        if ours(t - 1) {
            return;
        }
        let start = a.hint.load(Relaxed).min(t - 1);
        let below = (start.saturating_sub(AFFINITY_WINDOW - 1)..=start).rev();
        let above = (start + 1..t - 1).rev().take(AFFINITY_WINDOW as usize);
        match below.chain(above).find(|&i| ours(i)) {
            Some(i) => {
                let (mine, other) = (seg.mem_stack(i).load(Relaxed), seg.mem_stack(t - 1).load(Relaxed));
                crate::fault::crash_point("affinity-before-swap");
                seg.mem_stack(i).store(other, Relaxed);
                crate::fault::crash_point("affinity-mid-swap");
                seg.mem_stack(t - 1).store(mine, Relaxed);
                a.hint.store(i, Relaxed);
            }
            None => a.freed.store(0, Relaxed),
        }
    }

    /// Release every chunk of `fid` whose logical index is `>= from`. Returns how many.
    /// Caller holds the file lock.
    pub(crate) fn free_chunks_from(&self, fid: u32, from: u32) -> u32 {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        if ino.nchunks.load(Relaxed) == 0 {
            return 0;
        }
        let _g = self.alloc_lock();
        let mut n = 0;
        for c in 0..seg.nchunks() {
            let e = seg.chunk(c);
            if e.owner.load(Relaxed) == fid + 1 && e.logical.load(Relaxed) >= from {
                e.owner.store(0, Release);
                // A free chunk keeps no proof of ownership (see fsck's reclaim).
                e.meta.store(0, Relaxed);
                crate::fault::crash_point("free-after-owner");
                self.push_free(c);
                n += 1;
            }
        }
        ino.nchunks.fetch_sub(n.min(ino.nchunks.load(Relaxed)), Relaxed);
        seal_data(seg, fid);
        ino.cgen.fetch_add(1, Release);
        n
    }

    pub(crate) fn push_free(&self, c: u32) {
        let seg = &*self.seg;
        let sb = seg.sb();
        let (top, cap) = if seg.is_mem(c) {
            (&sb.mem_top, seg.layout.mem_chunks)
        } else {
            (&sb.spill_top, seg.layout.spill_chunks)
        };
        let t = top.load(Relaxed);
        if t >= cap {
            // A damaged top: the stacks are derived from the owners, rebuild them.
            tracing::warn!(store = %seg.name, top = t, "free chunk stack top damaged; rebuilding it");
            self.mark_dirty();
            self.rebuild_free_stacks();
            return;
        }
        if seg.is_mem(c) {
            seg.mem_stack(t).store(c, Relaxed);
            if !seg.huge && seg.is_populated(c) {
                seg.affinity.set(c, true);
                seg.affinity.hint.store(t, Relaxed);
            }
        } else {
            seg.spill_stack(t).store(c, Relaxed);
        }
        top.store(t + 1, Release);
    }
}

#[cfg(test)]
mod tests {
    use crate::{OpenFlags, Store, StoreOptions};
    use std::collections::BTreeSet;

    fn write(s: &Store, path: &str, len: usize, seed: u8) {
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        let mut f = s.open(path, OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&data).unwrap();
        f.close().unwrap();
        let mut r = s.open(path, OpenFlags::READ, 0).unwrap();
        let mut got = vec![0u8; len];
        assert_eq!(r.read_full(&mut got).unwrap(), len);
        assert!(got == data, "{path} read back different bytes");
    }

    fn chunks(s: &Store, path: &str) -> BTreeSet<u32> {
        s.chunk_list(path).unwrap().iter().map(|c| c.chunk_id).collect()
    }

    #[test]
    fn a_process_takes_back_the_chunks_it_has_page_tables_for() {
        let name = format!("hz-affinity-{}", std::process::id());
        let _ = Store::destroy(&name);
        let cs = 64usize << 10;
        let opts = StoreOptions {
            mem_size: Some(64 * cs as u64),
            chunk_size: Some(cs as u64),
            max_files: Some(16),
            ..StoreOptions::named(&name)
        };
        let creator = Store::create(&opts).unwrap();
        // Two processes (two mappings, each with its own page tables): each writes a
        // file of 16 chunks, then both delete theirs, B last (B's chunks on top).
        let (a, b) = (Store::attach(&opts).unwrap(), Store::attach(&opts).unwrap());
        write(&a, "/a", 16 * cs, 1);
        write(&b, "/b", 16 * cs, 2);
        let (ca, cb) = (chunks(&a, "/a"), chunks(&b, "/b"));
        assert!(ca.iter().all(|&c| a.seg.is_populated(c)));
        a.unlink("/a").unwrap();
        b.unlink("/b").unwrap();
        // The next checkpoints: each process gets chunks it has page tables for (its
        // own, though the other's are on top of the shared stack), not even the ones its
        // populate helper mapped ahead. Without the affinity A would pop B's 16 chunks,
        // at least 8 of which A never mapped (its helper runs at most 8 ahead).
        let mapped = |s: &Store| -> BTreeSet<u32> { (0..64).filter(|&c| s.seg.is_populated(c)).collect() };
        for (who, s, own, seed) in [("A", &a, &ca, 3), ("B", &b, &cb, 4)] {
            let before = mapped(s);
            let path = format!("/{}2", who.to_lowercase());
            write(s, &path, 16 * cs, seed);
            let got = chunks(s, &path);
            assert!(
                got.is_subset(&before),
                "{who} got chunks it had no page tables for: {got:?}, had {before:?}"
            );
            assert_eq!(&got, own, "{who} did not get its own chunks back");
        }
        // Nothing lost or doubled on the reordered stack.
        let info = creator.info();
        assert_eq!(info.mem_free_chunks, info.mem_chunks - 32);
        assert!(creator.fsck(false).is_clean());
        drop((a, b, creator));
        Store::destroy(&name).unwrap();
    }
}
