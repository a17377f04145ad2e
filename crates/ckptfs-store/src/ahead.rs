//! Populating page tables ahead of a fresh process's first checkpoint.
//!
//! A process that attached a store has no page tables for it; the first write into each
//! chunk populates the chunk's (`MADV_POPULATE_READ`, about 70 ms per GiB idle). When a
//! writer takes a chunk it has no page tables for, a helper thread of the process
//! populates the next free chunks (the top of the free memory stack, which the writer's
//! next allocations pop) while the writer copies into this one; likewise a reader (a
//! restart) that reaches a chunk without page tables has its file's next chunks
//! populated while it copies and checks this one. Only page tables are
//! touched, never bytes or metadata, so populating a chunk someone else takes meanwhile,
//! or one read from a stack being changed, is harmless (ids are bounds-checked).
//!
//! Not on huge pages: there a chunk's page tables are one or two PMD entries, mapped by
//! the writer itself in microseconds; handing that to a helper costs a wake-up of the
//! other CPU (a halted vCPU in a VM) and contention on the same PMD.

use crate::segment::Segment;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};

pub(crate) use crate::ahead_state::{Ahead, AHEAD};

impl Ahead {
    /// Ask the helper to populate `chunks` (a reader's next chunks in its file).
    pub(crate) fn request_chunks(&self, seg: &Arc<Segment>, chunks: impl Iterator<Item = u32>) {
        if seg.huge {
            return;
        }
        let mut any = false;
        for (slot, c) in self.wanted.iter().zip(chunks) {
            slot.store(c, Relaxed);
            any = true;
        }
        if any {
            self.wake(seg);
        }
    }

    /// Ask the helper to populate the next free chunks. Does nothing in a child forked
    /// after the helper started (it has no helper thread) or if no thread could start.
    pub(crate) fn request(&self, seg: &Arc<Segment>) {
        // Nothing to do when the farthest chunk it would populate already is (a process
        // writing its second checkpoint into recycled chunks).
        let top = seg.sb().mem_top.load(Relaxed).min(seg.layout.mem_chunks);
        if seg.huge || top == 0 || seg.is_populated(seg.mem_stack(top - AHEAD.min(top)).load(Relaxed)) {
            return;
        }
        self.free_stack.store(true, Relaxed);
        self.wake(seg);
    }

    fn wake(&self, seg: &Arc<Segment>) {
        let t = self.thread.get_or_init(|| {
            let weak: Weak<Segment> = Arc::downgrade(seg);
            // Started with every signal blocked (the program's signals are for its own
            // threads), inherited from birth: no window in which one could land on it.
            crate::segment::with_all_signals_blocked(|| {
                std::thread::Builder::new()
                    .name("ckptfs-populate".into())
                    .stack_size(64 << 10)
                    .spawn(move || run(weak))
                    .ok()
                    .map(|h| (std::process::id(), h.thread().clone()))
            })
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
        for slot in &seg.ahead.wanted {
            let c = slot.swap(u32::MAX, Relaxed);
            if c < seg.layout.mem_chunks && !seg.is_populated(c) {
                seg.populate(c);
            }
        }
        if seg.ahead.free_stack.swap(false, Relaxed) {
            populate_free_top(&seg, AHEAD);
        }
    }
}

/// Populate this process's page tables for the top `n` entries of the free memory stack
/// (the chunks the next allocations pop), from the top down; returns how many it
/// populated. Reads the stack without the allocation lock: ids are bounds-checked, and
/// populating a chunk someone takes meanwhile is harmless (page tables only).
pub(crate) fn populate_free_top(seg: &Segment, n: u32) -> u32 {
    let top = seg.sb().mem_top.load(Relaxed).min(seg.layout.mem_chunks);
    let mut done = 0;
    for i in 1..=n.min(top) {
        let c = seg.mem_stack(top - i).load(Relaxed);
        if c < seg.layout.mem_chunks && !seg.is_populated(c) {
            seg.populate(c);
            done += 1;
        }
    }
    done
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
        // A restart: a fresh reader of the first chunk gets the file's next chunks
        // populated ahead, and reads the bytes back identical.
        let restart = Store::attach(&opts).unwrap();
        let mut r = restart.open("/f", OpenFlags::READ, 0).unwrap();
        let mut got = vec![0u8; 1 << 20];
        assert_eq!(r.read_full(&mut got).unwrap(), 1 << 20);
        assert!(got[..] == data[..1 << 20], "first chunk differs");
        let list = restart.chunk_list("/f").unwrap();
        let ids: Vec<u32> = list.iter().map(|c| c.chunk_id).collect();
        for &c in &ids[1..=super::AHEAD as usize] {
            let t0 = std::time::Instant::now();
            while !restart.seg.is_populated(c) {
                assert!(
                    t0.elapsed().as_secs() < 120,
                    "chunk {c} never populated ahead of the reader"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        let mut rest = vec![0u8; data.len() - (1 << 20)];
        assert_eq!(r.read_full(&mut rest).unwrap(), rest.len());
        assert!(rest[..] == data[1 << 20..], "rest differs");
        assert!(creator.fsck(false).is_clean());
        drop((creator, fresh, restart, r));
        Store::destroy(&name).unwrap();
    }

    #[test]
    fn populate_all_maps_every_chunk_once_and_changes_no_byte() {
        let name = format!("hz-popall-{}", std::process::id());
        let _ = Store::destroy(&name);
        let opts = StoreOptions {
            mem_size: Some(16 << 20),
            chunk_size: Some(1 << 20),
            max_files: Some(16),
            ..StoreOptions::named(&name)
        };
        let creator = Store::create(&opts).unwrap();
        let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 + 1) as u8).collect();
        let mut f = creator.open("/f", OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&data).unwrap();
        f.close().unwrap();
        // A fresh mapping (a daemon starting): nothing populated yet.
        let fresh = Store::attach(&opts).unwrap();
        let chunks = fresh.seg.layout.mem_chunks;
        assert!((0..chunks).all(|c| !fresh.seg.is_populated(c)));
        assert_eq!(fresh.populate_all(), chunks);
        assert!((0..chunks).all(|c| fresh.seg.is_populated(c)));
        assert_eq!(fresh.populate_all(), 0, "a second call has nothing left to do");
        let mut r = fresh.open("/f", OpenFlags::READ, 0).unwrap();
        let mut got = vec![0u8; data.len()];
        assert_eq!(r.read_full(&mut got).unwrap(), data.len());
        assert!(got == data, "populating changed the data");
        assert!(fresh.fsck(false).is_clean());
        drop((creator, fresh, r));
        Store::destroy(&name).unwrap();
    }

    #[test]
    fn a_huge_page_store_is_recognised_and_its_writer_needs_no_helper() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounting a huge-page tmpfs needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let st = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                "huge=within_size,size=128M,mode=1777",
                "ckptfs-test-huge",
            ])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success(), "mount a huge-page tmpfs");
        let name = format!("hz-hugeahead-{}", std::process::id());
        let opts = StoreOptions {
            mem_size: Some(32 << 20),
            chunk_size: Some(1 << 20),
            max_files: Some(16),
            shm_dir: Some(dir.path().to_path_buf()),
            ..StoreOptions::named(&name)
        };
        let creator = Store::create(&opts).unwrap();
        let fresh = Store::attach(&opts).unwrap();
        assert!(creator.seg.huge && fresh.seg.huge, "2 MiB st_blksize not seen");
        let data: Vec<u8> = (0..6u32 << 20).map(|i| (i * 13 + 5) as u8).collect();
        let mut f = fresh.open("/f", OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&data).unwrap();
        f.close().unwrap();
        // The writer mapped its chunks itself: no helper thread was started.
        assert!(
            fresh.seg.ahead.thread.get().is_none(),
            "a populate helper started"
        );
        let mut r = creator.open("/f", OpenFlags::READ, 0).unwrap();
        let mut got = vec![0u8; data.len()];
        assert_eq!(r.read_full(&mut got).unwrap(), data.len());
        assert!(got == data, "data differs");
        drop((creator, fresh, r));
        Store::destroy_in(Some(dir.path()), &name).unwrap();
        let _ = std::process::Command::new("umount").arg(dir.path()).status();
    }
}
