//! Chunk allocation: popping chunks from the free stacks (memory first, then spill),
//! giving them to a file, and releasing them.

use crate::error::{Result, StoreError};
use crate::integrity::seal_data;
use crate::store::Store;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

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
        Ok(c)
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
        } else {
            seg.spill_stack(t).store(c, Relaxed);
        }
        top.store(t + 1, Release);
    }
}
