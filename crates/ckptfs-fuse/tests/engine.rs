//! The CRFS aggregation engine without FUSE: coalescing, ordering of overlapping
//! chunks, errors from the backend, and a pool smaller than the number of open files.

use ckptfs_fuse::crfs::engine::{BackendSink, Engine};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

fn open(engine: &Engine, path: &std::path::Path) -> Arc<ckptfs_fuse::crfs::engine::AggFile> {
    let f = File::create(path).unwrap();
    let m = f.metadata().unwrap();
    engine
        .attach((m.dev(), m.ino()), || {
            let w = std::fs::OpenOptions::new().write(true).open(path)?;
            Ok((w, 0))
        })
        .unwrap()
}

/// Records every chunk write (offset, length) and then writes it.
#[derive(Default)]
struct Recording(Mutex<Vec<(u64, usize)>>);
impl BackendSink for Recording {
    fn write_chunk(&self, file: &File, data: &[u8], offset: u64) -> io::Result<()> {
        self.0.lock().unwrap().push((offset, data.len()));
        file.write_all_at(data, offset)
    }
}

#[test]
fn small_writes_coalesce_into_full_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let rec = Arc::new(Recording::default());
    let engine = Engine::new(4 << 16, 1 << 16, 2, rec.clone());
    let f = open(&engine, &dir.path().join("a"));
    let mut expect = Vec::new();
    let mut off = 0u64;
    for i in 0..5000u32 {
        let piece = vec![(i % 251) as u8; (i % 97) as usize + 1];
        assert_eq!(engine.write(&f, off, &piece).unwrap(), piece.len());
        off += piece.len() as u64;
        expect.extend_from_slice(&piece);
    }
    engine.flush(&f).unwrap();
    assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), expect);
    let writes = rec.0.lock().unwrap().clone();
    // Every chunk but the last is full: 5000 writes became a handful of large ones.
    assert_eq!(writes.len(), expect.len().div_ceil(1 << 16));
    assert!(writes.iter().filter(|w| w.1 < 1 << 16).count() <= 1);
}

#[test]
fn overlapping_rewrites_land_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(8 << 12, 1 << 12, 4, Arc::new(ckptfs_fuse::FileSink));
    let f = open(&engine, &dir.path().join("b"));
    // Rewrite the same 3 KiB region many times with different bytes: the last wins.
    for round in 0..200u8 {
        engine.write(&f, 100, &vec![round; 3000]).unwrap();
        engine.write(&f, 5000, &[round; 10]).unwrap();
    }
    engine.flush(&f).unwrap();
    let data = std::fs::read(dir.path().join("b")).unwrap();
    assert!(data[100..3100].iter().all(|&b| b == 199));
    assert!(data[5000..5010].iter().all(|&b| b == 199));
}

/// Fails with `errno` once `after` chunks have been written.
struct Failing {
    after: usize,
    errno: i32,
    n: AtomicUsize,
}
impl BackendSink for Failing {
    fn write_chunk(&self, file: &File, data: &[u8], offset: u64) -> io::Result<()> {
        if self.n.fetch_add(1, Relaxed) >= self.after {
            return Err(io::Error::from_raw_os_error(self.errno));
        }
        file.write_all_at(data, offset)
    }
}

#[test]
fn backend_error_reaches_next_write_and_flush_once() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(Failing {
        after: 2,
        errno: libc::EIO,
        n: AtomicUsize::new(0),
    });
    let engine = Engine::new(4 << 12, 1 << 12, 1, sink);
    let f = open(&engine, &dir.path().join("c"));
    let block = vec![7u8; 1 << 12];
    let mut first_err = None;
    for i in 0..50u64 {
        match engine.write(&f, i << 12, &block) {
            Ok(_) => {}
            Err(e) => {
                first_err = Some((i, e));
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let (_, e) = first_err.expect("a later write must see the backend error");
    assert_eq!(e, libc::EIO);
    // flush (close) reports it too, then it is cleared.
    assert_eq!(engine.flush(&f), Err(libc::EIO));
    assert_eq!(engine.flush(&f), Ok(()));
}

#[test]
fn more_open_files_than_pool_chunks_do_not_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(2 << 12, 1 << 12, 1, Arc::new(ckptfs_fuse::FileSink));
    let files: Vec<_> = (0..6)
        .map(|i| open(&engine, &dir.path().join(format!("f{i}"))))
        .collect();
    // One thread writing six files round-robin with a two-chunk pool.
    for round in 0..100u64 {
        for (i, f) in files.iter().enumerate() {
            engine.write(f, round * 10, &[i as u8; 10]).unwrap();
        }
    }
    for (i, f) in files.iter().enumerate() {
        engine.flush(f).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(format!("f{i}"))).unwrap(),
            vec![i as u8; 1000]
        );
    }
}
