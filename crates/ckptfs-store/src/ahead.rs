//! Populating page tables ahead of a fresh process's first checkpoint.
//!
//! A process that attached a store has no page tables for it; the first write into each
//! chunk populates the chunk's (`MADV_POPULATE_READ`, about 70 ms per GiB idle). When a
//! writer takes a chunk it has no page tables for, a helper thread of the process
//! populates the next free chunks (the top of the free memory stack, which the writer's
//! next allocations pop) while the writer copies into this one. Only page tables are
//! touched, never bytes or metadata, so populating a chunk someone else takes meanwhile,
//! or one read from a stack being changed, is harmless (ids are bounds-checked).

use crate::segment::Segment;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock, Weak};

/// Free chunks populated ahead per request.
const AHEAD: u32 = 8;

/// The helper thread of one attached store in this process, started on first use.
#[derive(Default)]
pub(crate) struct Ahead {
    thread: OnceLock<Option<(u32, std::thread::Thread)>>,
}

impl Ahead {
    /// Ask the helper to populate the next free chunks. Does nothing in a child forked
    /// after the helper started (it has no helper thread) or if no thread could start.
    pub(crate) fn request(&self, seg: &Arc<Segment>) {
        // Nothing to do when the farthest chunk it would populate already is (a process
        // writing its second checkpoint into recycled chunks).
        let top = seg.sb().mem_top.load(Relaxed).min(seg.layout.mem_chunks);
        if top == 0 || seg.is_populated(seg.mem_stack(top - AHEAD.min(top)).load(Relaxed)) {
            return;
        }
        let t = self.thread.get_or_init(|| {
            let weak: Weak<Segment> = Arc::downgrade(seg);
            std::thread::Builder::new()
                .name("ckptfs-populate".into())
                .stack_size(64 << 10)
                .spawn(move || run(weak))
                .ok()
                .map(|h| (std::process::id(), h.thread().clone()))
        });
        if let Some((pid, th)) = t {
            if *pid == std::process::id() {
                th.unpark();
            }
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // The segment is going away: wake the helper so that it sees that and ends.
        if let Some(Some((pid, th))) = self.thread.get() {
            if *pid == std::process::id() {
                th.unpark();
            }
        }
    }
}

fn run(weak: Weak<Segment>) {
    loop {
        std::thread::park();
        // The segment is only borrowed while working: the last Store going away unmaps
        // it and ends this thread.
        let Some(seg) = weak.upgrade() else {
            return;
        };
        let top = seg.sb().mem_top.load(Relaxed).min(seg.layout.mem_chunks);
        for i in 1..=AHEAD.min(top) {
            let c = seg.mem_stack(top - i).load(Relaxed);
            if c < seg.layout.mem_chunks && !seg.is_populated(c) {
                seg.populate(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{OpenFlags, Store, StoreOptions};

    #[test]
    fn a_fresh_writer_gets_free_chunks_populated_ahead_and_its_data_intact() {
        let name = format!("hz-ahead-{}", std::process::id());
        let _ = Store::destroy(&name);
        let opts = StoreOptions {
            mem_size: Some(64 << 20),
            chunk_size: Some(1 << 20),
            max_files: Some(16),
            ..StoreOptions::named(&name)
        };
        let creator = Store::create(&opts).unwrap();
        // A second attach in this process is a new mapping without page tables: a
        // fresh process's view.
        let fresh = Store::attach(&opts).unwrap();
        assert!(!std::sync::Arc::ptr_eq(&creator.seg, &fresh.seg));
        let data: Vec<u8> = (0..20u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut f = fresh.open("/f", OpenFlags::CREATE, 0o644).unwrap();
        for piece in data.chunks(1 << 20) {
            f.write_all(piece).unwrap();
        }
        f.close().unwrap();
        // The helper populates the chunks the next allocations will take (the top of
        // the free stack); it runs asynchronously: wait for it (generously).
        let seg = &fresh.seg;
        let next = {
            let top = seg.sb().mem_top.load(std::sync::atomic::Ordering::Relaxed);
            seg.mem_stack(top - 1).load(std::sync::atomic::Ordering::Relaxed)
        };
        let t0 = std::time::Instant::now();
        while !seg.is_populated(next) {
            assert!(t0.elapsed().as_secs() < 120, "chunk {next} never populated ahead");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Bytes written by the fresh writer read back identical from the creator's
        // mapping and from the fresh one.
        for s in [&creator, &fresh] {
            let mut r = s.open("/f", OpenFlags::READ, 0).unwrap();
            let mut got = vec![0u8; data.len()];
            assert_eq!(r.read_full(&mut got).unwrap(), data.len());
            assert!(got == data, "data differs");
        }
        assert!(creator.fsck(false).is_clean());
        drop((creator, fresh));
        Store::destroy(&name).unwrap();
    }
}
