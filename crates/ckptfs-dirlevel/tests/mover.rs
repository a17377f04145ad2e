//! The mover over real levels (two directories): streams, read-ahead window, rate limit,
//! progress, resend after a refused chunk or a failed attempt, nothing published by a
//! failed one.

use ckptfs_dirlevel::DirLevel;
use ckptfs_level::conformance::{get_bytes, put_bytes};
use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, IoPart, Job, Level, LevelError, LevelKind, MoveOptions, Mover,
    Stored, Version,
};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn data(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn two() -> (tempfile::TempDir, DirLevel, DirLevel) {
    let d = tempfile::tempdir().unwrap();
    let a = DirLevel::new(d.path().join("a")).unwrap();
    let b = DirLevel::new(d.path().join("b")).unwrap();
    (d, a, b)
}

#[test]
fn several_streams_and_a_window_move_every_file_byte_identical() {
    let (_d, a, b) = two();
    let files: Vec<(String, Vec<u8>)> = (0..9)
        .map(|i| (format!("/run/f{i}"), data(i * 70_001 + 3, i as u32)))
        .collect();
    for (p, bytes) in &files {
        put_bytes(&a, p, bytes, 16 << 10, 1).unwrap();
    }
    for (streams, window) in [(1, 1), (3, 1), (1, 4), (4, 3)] {
        let mover = Mover::new(MoveOptions {
            streams,
            window,
            ..Default::default()
        });
        let jobs: Vec<Job<'_>> = files
            .iter()
            .map(|(p, _)| Job {
                from: &a,
                to: &b,
                path: p,
            })
            .collect();
        let moved = mover.run(&jobs);
        assert_eq!(moved.len(), files.len());
        for (m, (p, bytes)) in moved.iter().zip(&files) {
            assert_eq!(&m.path, p);
            let t = m.result.as_ref().unwrap();
            assert_eq!(t.bytes, bytes.len() as u64);
            assert_eq!(
                &get_bytes(&b, p).unwrap(),
                bytes,
                "{p} streams {streams} window {window}"
            );
        }
        for (p, _) in &files {
            let s = b.stat(p).unwrap().unwrap();
            b.delete(p, &s.version).unwrap();
        }
    }
}

#[test]
fn progress_counts_every_byte_once_and_files_as_they_finish() {
    let (_d, a, b) = two();
    let sizes = [0usize, 1, 100_000, 250_000];
    for (i, n) in sizes.iter().enumerate() {
        put_bytes(&a, &format!("/p/{i}"), &data(*n, 7), 32 << 10, 1).unwrap();
    }
    let seen: Arc<Mutex<Vec<ckptfs_level::Progress>>> = Arc::default();
    let s2 = seen.clone();
    let mover = Mover::new(MoveOptions {
        streams: 2,
        progress: Some(Arc::new(move |p| s2.lock().unwrap().push(p.clone()))),
        ..Default::default()
    });
    let paths: Vec<String> = (0..sizes.len()).map(|i| format!("/p/{i}")).collect();
    let jobs: Vec<Job<'_>> = paths
        .iter()
        .map(|p| Job {
            from: &a,
            to: &b,
            path: p,
        })
        .collect();
    assert!(mover.run(&jobs).iter().all(|m| m.result.is_ok()));
    let seen = seen.lock().unwrap();
    let total: u64 = sizes.iter().map(|n| *n as u64).sum();
    assert_eq!(seen.iter().map(|p| p.bytes).max().unwrap(), total);
    assert_eq!(mover.bytes_moved(), total);
    assert!(seen
        .iter()
        .all(|p| p.files == sizes.len() && p.file_bytes <= p.file_size));
    for (i, n) in sizes.iter().enumerate().filter(|(_, n)| **n > 0) {
        let last = seen
            .iter()
            .filter(|p| p.path == format!("/p/{i}"))
            .map(|p| p.file_bytes)
            .max()
            .unwrap();
        assert_eq!(last, *n as u64);
    }
}

#[test]
fn the_rate_limit_holds_over_all_streams() {
    let (_d, a, b) = two();
    let paths: Vec<String> = (0..4).map(|i| format!("/t/{i}")).collect();
    for p in &paths {
        put_bytes(&a, p, &data(512 << 10, 3), 64 << 10, 1).unwrap();
    }
    // 2 MiB at 1 MiB/s, with a burst of at most one second's worth: at least ~1 s.
    let mover = Mover::new(MoveOptions {
        streams: 4,
        max_bw: Some(1 << 20),
        ..Default::default()
    });
    let jobs: Vec<Job<'_>> = paths
        .iter()
        .map(|p| Job {
            from: &a,
            to: &b,
            path: p,
        })
        .collect();
    let t0 = Instant::now();
    assert!(mover.run(&jobs).iter().all(|m| m.result.is_ok()));
    let s = t0.elapsed().as_secs_f64();
    assert!(s >= 0.9, "2 MiB moved in {s:.2} s under a 1 MiB/s limit");
}

/// A level whose reads fail the first `fail` times (EIO from `get`'s reader at chunk 1),
/// or whose chunk 1 is refused by its CRC once per reader (`corrupt_once`).
struct Flaky<'a> {
    inner: &'a DirLevel,
    fail: AtomicU32,
    corrupt_once: bool,
    gets: AtomicU64,
}

struct FlakyReader<'a> {
    inner: Box<dyn ChunkReader + 'a>,
    fail: bool,
    corrupt: bool,
}

impl ChunkReader for FlakyReader<'_> {
    fn rereadable(&self) -> bool {
        true
    }

    fn stored(&self) -> &Stored {
        self.inner.stored()
    }
    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        if i == 1 && self.fail {
            return Err(LevelError::io(
                "read",
                "flaky",
                std::io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        if i == 1 && self.corrupt {
            self.corrupt = false;
            return Err(LevelError::Corrupt {
                level: "flaky".into(),
                path: self.stored().path.clone(),
                chunk: 1,
            });
        }
        self.inner.read_chunk(i, sink)
    }
    fn finish(self: Box<Self>) -> Result<(), LevelError> {
        self.inner.finish()
    }
}

impl Level for Flaky<'_> {
    fn kind(&self) -> LevelKind {
        LevelKind::Partner
    }
    fn name(&self) -> String {
        "flaky:test".into()
    }
    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError> {
        self.inner.list(prefix)
    }
    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError> {
        self.inner.stat(path)
    }
    fn get<'b>(&'b self, path: &str) -> Result<Box<dyn ChunkReader + 'b>, LevelError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        let fail = self.fail.load(Ordering::SeqCst) > 0;
        if fail {
            self.fail.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(Box::new(FlakyReader {
            inner: self.inner.get(path)?,
            fail,
            corrupt: self.corrupt_once,
        }))
    }
    fn put<'b>(&'b self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'b>, LevelError> {
        self.inner.put(src)
    }
    fn delete(&self, path: &str, want: &Version) -> Result<bool, LevelError> {
        self.inner.delete(path, want)
    }
    fn meter(&self) -> &CostMeter {
        self.inner.meter()
    }
}

#[test]
fn a_failed_attempt_is_sent_again_and_publishes_nothing_when_it_gives_up() {
    let (_d, a, b) = two();
    let bytes = data(200_000, 5);
    put_bytes(&a, "/r/f", &bytes, 64 << 10, 1).unwrap();
    for window in [1, 3] {
        let flaky = Flaky {
            inner: &a,
            fail: AtomicU32::new(2),
            corrupt_once: false,
            gets: AtomicU64::new(0),
        };
        let m = Mover::new(MoveOptions {
            retries: 2,
            window,
            ..Default::default()
        });
        let moved = m
            .run(&[Job {
                from: &flaky,
                to: &b,
                path: "/r/f",
            }])
            .pop()
            .unwrap();
        assert_eq!(moved.attempts, 3, "window {window}");
        assert_eq!(get_bytes(&b, "/r/f").unwrap(), bytes);
        let s = b.stat("/r/f").unwrap().unwrap();
        b.delete("/r/f", &s.version).unwrap();

        // Out of resends: an error, and nothing published, no temporary left behind.
        let flaky = Flaky {
            inner: &a,
            fail: AtomicU32::new(5),
            corrupt_once: false,
            gets: AtomicU64::new(0),
        };
        let m = Mover::new(MoveOptions {
            retries: 1,
            window,
            ..Default::default()
        });
        let moved = m
            .run(&[Job {
                from: &flaky,
                to: &b,
                path: "/r/f",
            }])
            .pop()
            .unwrap();
        assert_eq!(moved.result.unwrap_err().errno(), libc::EIO);
        assert_eq!(moved.attempts, 2);
        assert!(b.stat("/r/f").unwrap().is_none());
        assert!(b.list("/").unwrap().is_empty());
    }
}

#[test]
fn a_chunk_refused_by_its_crc_is_read_again_on_the_same_reader() {
    let (_d, a, b) = two();
    let bytes = data(200_000, 6);
    put_bytes(&a, "/c/f", &bytes, 64 << 10, 1).unwrap();
    let flaky = Flaky {
        inner: &a,
        fail: AtomicU32::new(0),
        corrupt_once: true,
        gets: AtomicU64::new(0),
    };
    let moved = Mover::default()
        .run(&[Job {
            from: &flaky,
            to: &b,
            path: "/c/f",
        }])
        .pop()
        .unwrap();
    assert!(moved.result.is_ok());
    assert_eq!(moved.attempts, 1);
    assert_eq!(
        flaky.gets.load(Ordering::SeqCst),
        1,
        "one reader: the chunk was read again, not the file"
    );
    assert_eq!(get_bytes(&b, "/c/f").unwrap(), bytes);
}

#[test]
fn a_missing_source_fails_at_once_without_resends() {
    let (_d, a, b) = two();
    let moved = Mover::new(MoveOptions {
        retries: 5,
        ..Default::default()
    })
    .run(&[Job {
        from: &a,
        to: &b,
        path: "/none",
    }])
    .pop()
    .unwrap();
    assert_eq!(moved.result.unwrap_err().errno(), libc::ENOENT);
    assert_eq!(moved.attempts, 1);
}
