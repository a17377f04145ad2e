//! Warming at attach: a process builds its page tables for the free chunks its first
//! checkpoint will take while it still initialises, in the background.
//!
//! A fresh process has no page tables for the store; the first write into each chunk
//! builds them (`MADV_POPULATE_READ`, 70-140 ms per GiB on the development VMs), which
//! is why a process's first checkpoint on 4 KiB pages runs at 0.4-0.9x its later ones
//! (docs/design.md, "Fresh processes"). Applications attach long before their first
//! checkpoint (MPI_Init, reading input, the first iterations), so with `warm` set
//! (`CKPTFS_WARM`, `ckptfs --warm`: a size, or `all`) an attach starts a thread that
//! populates that much of the free chunks, from the top of the free stack down (the
//! chunks the next allocations pop), at the lowest CPU priority (nice 19, not
//! SCHED_IDLE: a starved thread inside `madvise` would hold the process's mmap lock).
//!
//! Only page tables are touched, never bytes or metadata, so a chunk taken by another
//! process meanwhile, or a stale stack entry, is harmless (ids are bounds-checked).
//! Costs: CPU time in the background (the same the writer would spend), and 2 MiB of
//! page tables per GiB warmed in each process that warms. Nothing on huge pages (a chunk
//! is one or two PMD entries there, mapped by the writer in microseconds).
//!
//! Failure cases: (1) the thread cannot start: nothing is warmed, checkpoints build
//! page tables as without. (2) The process checkpoints before the warm-up ends: the
//! writer populates what is not yet (both doing one chunk is harmless). (3) The store
//! is detached meanwhile: the thread holds its own reference and ends after at most
//! `warm` bytes. (4) Several processes warm the same top of the stack: each takes
//! different chunks at allocation; set `warm` to what the node's processes write
//! together (or `all`).

use crate::store::Store;

impl Store {
    /// Build this process's page tables for up to `bytes` of free memory chunks, from
    /// the top of the free stack down (the chunks the next allocations take); returns
    /// the chunks populated by this call. Nothing on huge pages.
    pub fn warm(&self, bytes: u64) -> u32 {
        let seg = &*self.seg;
        if seg.huge {
            return 0;
        }
        let want = bytes
            .div_ceil(seg.layout.chunk_size())
            .min(seg.layout.mem_chunks as u64) as u32;
        crate::ahead::populate_free_top(seg, want)
    }

    /// [`Store::warm`] in a background thread at the lowest CPU priority (signals
    /// blocked); returns at once. Without effect if the thread cannot start.
    pub fn warm_in_background(&self, bytes: u64) {
        if bytes == 0 || self.seg.huge {
            return;
        }
        let store = self.clone();
        let _ = crate::segment::with_all_signals_blocked(|| {
            std::thread::Builder::new()
                .name("ckptfs-warm".into())
                .stack_size(64 << 10)
                .spawn(move || {
                    // SAFETY: setpriority with who = 0 changes only the calling thread's
                    // nice value (Linux: threads have their own).
                    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
                    let t0 = std::time::Instant::now();
                    let n = store.warm(bytes);
                    tracing::debug!(chunks = n, seconds = t0.elapsed().as_secs_f64(), "warmed");
                })
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::{OpenFlags, Store, StoreOptions};
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn warming_populates_the_top_of_the_free_stack_and_changes_no_byte() {
        let name = format!("hz-warm-{}", std::process::id());
        let _ = Store::destroy(&name);
        let opts = StoreOptions {
            mem_size: Some(32 << 20),
            chunk_size: Some(1 << 20),
            max_files: Some(16),
            ..StoreOptions::named(&name)
        };
        let creator = Store::create(&opts).unwrap();
        let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 + 1) as u8).collect();
        let mut f = creator.open("/kept", OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&data).unwrap();
        f.close().unwrap();
        // A second attach in this process is a fresh mapping: a fresh process's view.
        let fresh = Store::attach(&opts).unwrap();
        let seg = &fresh.seg;
        let top = seg.sb().mem_top.load(Relaxed);
        let stack: Vec<u32> = (0..top).map(|i| seg.mem_stack(i).load(Relaxed)).collect();
        assert!((0..seg.layout.mem_chunks).all(|c| !seg.is_populated(c)));
        // 5 chunks' worth (rounded up from 4 MiB + 1): the 5 on top of the stack.
        assert_eq!(fresh.warm((4 << 20) + 1), 5);
        for (i, &c) in stack.iter().enumerate().rev() {
            assert_eq!(
                seg.is_populated(c),
                i >= stack.len() - 5,
                "stack slot {i}, chunk {c}"
            );
        }
        assert_eq!(fresh.warm(5 << 20), 0, "nothing left to do for the same top");
        // In the background: everything free, then a write and a read back are intact.
        fresh.warm_in_background(u64::MAX);
        let t0 = std::time::Instant::now();
        while !stack.iter().all(|&c| seg.is_populated(c)) {
            assert!(t0.elapsed().as_secs() < 120, "the background warm-up never ended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut r = fresh.open("/kept", OpenFlags::READ, 0).unwrap();
        let mut got = vec![0u8; data.len()];
        assert_eq!(r.read_full(&mut got).unwrap(), data.len());
        assert!(got == data, "warming changed bytes");
        let mut w = fresh.open("/new", OpenFlags::CREATE, 0o644).unwrap();
        w.write_all(&data).unwrap();
        w.close().unwrap();
        let mut r = creator.open("/new", OpenFlags::READ, 0).unwrap();
        assert_eq!(r.read_full(&mut got).unwrap(), data.len());
        assert!(got == data, "a write into warmed chunks reads back differently");
        assert!(creator.fsck(false).is_clean());
        drop((creator, fresh, r));
        Store::destroy(&name).unwrap();
    }
}
