//! Gathered, parallel writes of one file: an optional capability of a reader/writer
//! pair, used by the [`Mover`](crate::Mover) when its options ask for writes larger
//! than a chunk ([`MoveOptions::write_size`](crate::MoveOptions::write_size)) or for
//! several writers per file ([`MoveOptions::writers`](crate::MoveOptions::writers)).
//!
//! A reader that can check and hand out its chunks from several threads at once, several
//! chunks in one piece list, offers [`GatherRead`] ([`ChunkReader::gather`]); a writer
//! that takes writes from several threads at once offers [`GatherWrite`]
//! ([`ChunkWriter::gather`]). The node store's reader hands its data region's ranges
//! ([`IoPart::Shared`]) and the PFS level's writer passes them to one `pwritev` per
//! write: the drain's zero-copy path, usable by any pair that offers both.
//!
//! The pipeline: the calling thread checks chunks ahead of `writers` threads (at most
//! `writers` writes ahead of them, so the window between a check and its write stays
//! short); a write is handed out only once every chunk in it passed. The writes ramp up
//! from one chunk (the first writer starts once one chunk is checked) and down at the
//! end (each takes at most 1/`writers` of what is left, so the writers end together).
//!
//! [`ChunkReader::gather`]: crate::ChunkReader::gather
//! [`ChunkWriter::gather`]: crate::ChunkWriter::gather

use crate::{IoPart, LevelError, Stored};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A reader's chunks, checked and handed out from several threads at once.
pub trait GatherRead: Sync {
    /// Check chunk `i` against its CRC32C where it can be checked in place, ahead of its
    /// write. A chunk that can only be checked as it is read (bytes read into a buffer)
    /// answers `Ok` here and is checked by [`read_chunks`](GatherRead::read_chunks).
    fn check(&self, i: u64) -> Result<(), LevelError>;
    /// Hand chunks `first..end` to `sink` in one piece list, in order. Chunks passed by
    /// [`check`](GatherRead::check) are not checked again; the others are checked here.
    fn read_chunks(
        &self,
        first: u64,
        end: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError>;
}

/// A writer that takes writes of one copy from several threads at once.
pub trait GatherWrite: Sync {
    /// Write the pieces at byte offset `off`.
    fn write_at(&self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError>;
    /// The alignment of the writer's fast path (O_DIRECT: 4096; 1 for none): a chunk of
    /// a length that is not a multiple of it goes in a write of its own.
    fn align(&self) -> usize {
        1
    }
}

/// A rate limit shared by every thread of a mover (and by several movers).
pub trait RateLimit: Send + Sync {
    /// Wait until `n` more bytes fit under the limit.
    fn acquire(&self, n: u64);
}

/// A pacing limit: each write reserves its bytes on a timeline that advances at `rate`
/// bytes per second and waits for its slot; an idle period banks no credit beyond one
/// write (so a short transfer is paced from its first byte, unlike a token bucket).
#[derive(Debug)]
pub struct Pace {
    rate: f64,
    next: Mutex<Option<Instant>>,
}

impl Pace {
    /// A limit of `bytes_per_s`.
    pub fn new(bytes_per_s: f64) -> Pace {
        Pace {
            rate: bytes_per_s.max(1.0),
            next: Mutex::new(None),
        }
    }
}

impl RateLimit for Pace {
    fn acquire(&self, n: u64) {
        let start = {
            let mut next = lock(&self.next);
            let now = Instant::now();
            let start = next.filter(|t| *t > now).unwrap_or(now);
            *next = Some(start + Duration::from_secs_f64(n as f64 / self.rate));
            start
        };
        let now = Instant::now();
        if start > now {
            std::thread::sleep(start - now);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Group chunks of lengths `lens` into writes (ranges of chunk indices) of at most
/// `write_size` bytes, ramping up from one chunk and down at the end for `writers`
/// threads; a chunk whose length is not a multiple of `align` goes alone.
pub(crate) fn split_units(
    lens: &[usize],
    cs: usize,
    write_size: usize,
    writers: usize,
    align: usize,
) -> Vec<(usize, usize)> {
    let writers = writers.max(1);
    let total: usize = lens.iter().sum();
    let limit = |done: usize| {
        write_size
            .min(done.max(cs))
            .min(((total - done) / writers).max(cs))
    };
    let mut out = Vec::new();
    let (mut start, mut bytes, mut done) = (0, 0, 0);
    let mut lim = limit(0);
    for (i, &len) in lens.iter().enumerate() {
        let odd = align > 1 && !len.is_multiple_of(align);
        if i > start && (bytes + len > lim || odd) {
            out.push((start, i));
            start = i;
            done += bytes;
            bytes = 0;
            lim = limit(done);
        }
        bytes += len;
    }
    if start < lens.len() {
        out.push((start, lens.len()));
    }
    out
}

/// Where one file's pipeline stands: units `[0, ready)` checked, `[0, taken)` handed to
/// writers.
#[derive(Default)]
struct Pipe {
    ready: usize,
    taken: usize,
    failed: bool,
}

/// What the pipeline needs of its mover.
pub(crate) struct Hooks<'h> {
    /// Wait for `n` bytes under the rate limit.
    pub(crate) throttle: &'h (dyn Fn(u64) + Sync),
    /// `n` more bytes written; the file's bytes so far.
    pub(crate) report: &'h (dyn Fn(u64, u64) + Sync),
    /// First thing on each writer thread.
    pub(crate) thread_init: Option<&'h (dyn Fn() + Send + Sync)>,
    /// Read a refused chunk once more.
    pub(crate) reread: bool,
}

/// Move every chunk of `src` from `r` to `w` in writes of up to `write_size` bytes by
/// `writers` threads (see the module documentation). Does not commit.
pub(crate) fn gathered(
    src: &Stored,
    r: &dyn GatherRead,
    w: &dyn GatherWrite,
    write_size: usize,
    writers: usize,
    hooks: &Hooks<'_>,
) -> Result<(), LevelError> {
    let cs = src.chunk_size.max(1);
    let lens: Vec<usize> = (0..src.chunks())
        .map(|i| (src.version.size - i * cs).min(cs) as usize)
        .collect();
    let units = split_units(
        &lens,
        cs as usize,
        write_size.max(cs as usize),
        writers,
        w.align(),
    );
    let n = writers.min(units.len()).max(1);
    let pipe = Mutex::new(Pipe::default());
    let moved = Condvar::new();
    let first_err: Mutex<Option<LevelError>> = Mutex::new(None);
    let file_bytes = AtomicU64::new(0);
    let fail = |e: LevelError| {
        lock(&first_err).get_or_insert(e);
        lock(&pipe).failed = true;
        moved.notify_all();
    };
    let check = |i: u64| match r.check(i) {
        Err(e @ LevelError::Corrupt { .. }) if hooks.reread => r.check(i).map_err(|_| e),
        other => other,
    };
    let verify = || {
        for (k, &(a, b)) in units.iter().enumerate() {
            let mut g = lock(&pipe);
            while !g.failed && k >= g.taken + n {
                g = moved.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            if g.failed {
                return;
            }
            drop(g);
            for i in a..b {
                if let Err(e) = check(i as u64) {
                    return fail(e);
                }
            }
            lock(&pipe).ready = k + 1;
            moved.notify_all();
        }
    };
    let write = || {
        if let Some(init) = hooks.thread_init {
            init();
        }
        loop {
            let mut g = lock(&pipe);
            while !g.failed && g.taken < units.len() && g.taken >= g.ready {
                g = moved.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            if g.failed || g.taken >= units.len() {
                return;
            }
            let (a, b) = units[g.taken];
            g.taken += 1;
            drop(g);
            moved.notify_all();
            let bytes: u64 = lens[a..b].iter().map(|l| *l as u64).sum();
            (hooks.throttle)(bytes);
            let off = a as u64 * cs;
            let r = r.read_chunks(a as u64, b as u64, &mut |parts| w.write_at(parts, off));
            if let Err(e) = r {
                return fail(e);
            }
            let done = file_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
            (hooks.report)(bytes, done);
        }
    };
    std::thread::scope(|sc| {
        for _ in 0..n {
            sc.spawn(write);
        }
        verify();
    });
    let first = lock(&first_err).take();
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes in chunks of each unit.
    fn sizes(lens: &[usize], cs: usize, ws: usize, writers: usize, align: usize) -> Vec<usize> {
        let units = split_units(lens, cs, ws, writers, align);
        // The units cover every chunk once, in order.
        assert_eq!(units.first().map(|u| u.0), Some(0));
        assert!(units.windows(2).all(|w| w[0].1 == w[1].0));
        assert_eq!(units.last().map(|u| u.1), Some(lens.len()));
        units
            .iter()
            .map(|u| lens[u.0..u.1].iter().sum::<usize>() / cs)
            .collect()
    }

    #[test]
    fn writes_ramp_up_from_one_chunk_and_down_so_the_writers_end_together() {
        let mb = 1 << 20;
        let lens = vec![mb; 64];
        assert_eq!(
            sizes(&lens, mb, 16 * mb, 2, 4096),
            [1, 1, 2, 4, 8, 16, 16, 8, 4, 2, 1, 1]
        );
        // One writer: nothing to balance at the end.
        assert_eq!(sizes(&lens, mb, 16 * mb, 1, 4096), [1, 1, 2, 4, 8, 16, 16, 16]);
        // Chunks as large as a write: one chunk per write.
        assert_eq!(sizes(&lens[..4], mb, mb, 2, 1), [1, 1, 1, 1]);
        // An aligned writer: the unaligned last chunk goes alone.
        let mut odd = vec![mb; 40];
        odd.push(100);
        let u = split_units(&odd, mb, 8 * mb, 2, 4096);
        assert_eq!(u.last(), Some(&(40, 41)));
        assert!(u.iter().all(|r| odd[r.0..r.1].iter().sum::<usize>() <= 8 * mb));
    }

    #[test]
    fn pace_spaces_acquisitions_from_the_first() {
        let p = Pace::new(10e6);
        let t0 = Instant::now();
        for _ in 0..4 {
            p.acquire(1_000_000);
        }
        // The 4th may start only after 3 MB at 10 MB/s.
        assert!(t0.elapsed() >= Duration::from_millis(290));
    }
}
