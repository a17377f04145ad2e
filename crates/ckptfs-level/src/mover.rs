//! The mover: the one pipeline that moves copies between levels.
//!
//! Every transfer between levels (the drain to the PFS or object storage, partner copies,
//! restores from peers, `run --restore`, the dataset restart) is a [`Job`] run by a
//! [`Mover`]: one reader ([`Level::get`]) into one writer ([`Level::put`]), chunk by
//! chunk, never the whole file in one buffer. What it adds over a single
//! [`transfer`](crate::transfer):
//!
//! - **streams**: several files in flight at once ([`MoveOptions::streams`] threads);
//! - **window**: with a window of more than one chunk, a reader thread reads ahead of
//!   the writer into a bounded queue of owned buffers (the read of chunk i+1 overlaps
//!   the write of chunk i); with a window of one, the reader hands each chunk straight to
//!   the writer ([`ChunkReader::read_chunk_to`]), which is where a reader/writer pair's
//!   zero-copy path (a socket landing in the store's memory, the store's shared pages
//!   handed to `pwritev`) applies;
//! - **gathered, parallel writes**: with [`MoveOptions::write_size`] larger than a chunk
//!   or [`MoveOptions::writers`] above one, a pair that offers it
//!   ([`ChunkReader::gather`], [`ChunkWriter::gather`]: the node store into the PFS
//!   level) moves each file in writes of up to `write_size` bytes by `writers` threads,
//!   chunks checked ahead of the writes ([`crate::gather`]); other pairs go chunk by
//!   chunk as below;
//! - **rate limit**: one token bucket over all streams ([`MoveOptions::max_bw`]), or a
//!   limiter shared with other movers ([`MoveOptions::limiter`], e.g. [`crate::Pace`]);
//! - **progress**: a callback after every chunk, or every write on the gathered path
//!   ([`Progress`]);
//! - **resend**: a chunk refused by its CRC is read again once where the reader can
//!   ([`ChunkReader::rereadable`]: a copy read by offset); a file whose transfer
//!   failed with a transient error (EIO, EAGAIN, a dropped connection) is sent again
//!   from its start, up to [`MoveOptions::retries`] times; the partial copy of a failed
//!   attempt is never published (its writer is dropped uncommitted);
//! - **priority**: [`MoveOptions::thread_init`] runs first on each of the mover's
//!   threads (the daemon and the agent set nice/ionice there).

use crate::gather::{gathered, Hooks, RateLimit};
use crate::{ChunkReader, ChunkWriter, Direction, IoPart, Level, LevelError, Stored, Transfer};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A callback of the mover's progress.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// How a [`Mover`] moves.
#[derive(Clone)]
pub struct MoveOptions {
    /// Files in flight at once (at least 1).
    pub streams: usize,
    /// Chunks in flight per file: 1 hands each chunk straight from reader to writer
    /// (zero-copy where the pair allows); more reads ahead into owned buffers.
    pub window: usize,
    /// Bytes per second over all streams (None: unlimited).
    pub max_bw: Option<u64>,
    /// Times a file is sent again after a transient failure.
    pub retries: u32,
    /// Called after every chunk.
    pub progress: Option<ProgressFn>,
    /// Run first on each of the mover's threads (priority).
    pub thread_init: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Bytes per write where the pair gathers ([`crate::gather`]); 0: one chunk per
    /// write.
    pub write_size: usize,
    /// Writer threads per file where the pair gathers (at least 1).
    pub writers: usize,
    /// A rate limit shared beyond this mover; used instead of `max_bw` when set.
    pub limiter: Option<Arc<dyn RateLimit>>,
}

impl Default for MoveOptions {
    fn default() -> Self {
        MoveOptions {
            streams: 1,
            window: 1,
            max_bw: None,
            retries: 2,
            progress: None,
            thread_init: None,
            write_size: 0,
            writers: 1,
            limiter: None,
        }
    }
}

impl std::fmt::Debug for MoveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MoveOptions")
            .field("streams", &self.streams)
            .field("window", &self.window)
            .field("max_bw", &self.max_bw)
            .field("retries", &self.retries)
            .field("write_size", &self.write_size)
            .field("writers", &self.writers)
            .field("limiter", &self.limiter.is_some())
            .finish()
    }
}

/// Where a run of the mover stands (passed to [`MoveOptions::progress`]).
#[derive(Debug, Clone)]
pub struct Progress {
    /// The file whose chunk just moved.
    pub path: String,
    /// Its bytes moved so far (this attempt).
    pub file_bytes: u64,
    /// Its size.
    pub file_size: u64,
    /// Bytes moved by the whole run so far (every stream, every attempt).
    pub bytes: u64,
    /// Files finished (moved or failed) in the run.
    pub files_done: usize,
    /// Files in the run.
    pub files: usize,
}

/// One file to move.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    /// Source level.
    pub from: &'a dyn Level,
    /// Destination level.
    pub to: &'a dyn Level,
    /// Store path (the same on both levels).
    pub path: &'a str,
}

/// What became of one [`Job`].
#[derive(Debug)]
pub struct Moved {
    /// The file.
    pub path: String,
    /// The new copy, or why there is none.
    pub result: Result<Transfer, LevelError>,
    /// Attempts made (1 when the first one succeeded).
    pub attempts: u32,
}

/// A token bucket: `rate` bytes per second, bursts of up to one second's worth.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self, n: u64) -> Duration {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(self.rate);
        self.at = now;
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

/// Errors worth sending a file again for.
fn transient(e: &LevelError) -> bool {
    matches!(e, LevelError::Corrupt { .. } | LevelError::Changed(_))
        || [
            libc::EIO,
            libc::EAGAIN,
            libc::ECONNRESET,
            libc::ECONNREFUSED,
            libc::ETIMEDOUT,
            libc::EPIPE,
            libc::ECONNABORTED,
            libc::EHOSTUNREACH,
        ]
        .contains(&e.errno())
}

/// The mover (see the module documentation). Cheap to share between threads.
pub struct Mover {
    opts: MoveOptions,
    bucket: Option<Mutex<Bucket>>,
    bytes: AtomicU64,
    files_done: AtomicUsize,
    files: AtomicUsize,
}

impl std::fmt::Debug for Mover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mover").field("opts", &self.opts).finish()
    }
}

impl Default for Mover {
    fn default() -> Self {
        Mover::new(MoveOptions::default())
    }
}

impl Mover {
    /// A mover with these options.
    pub fn new(opts: MoveOptions) -> Mover {
        let bucket = opts.max_bw.filter(|r| *r > 0).map(|r| {
            Mutex::new(Bucket {
                rate: r as f64,
                tokens: r as f64,
                at: Instant::now(),
            })
        });
        Mover {
            opts,
            bucket,
            bytes: AtomicU64::new(0),
            files_done: AtomicUsize::new(0),
            files: AtomicUsize::new(0),
        }
    }

    /// Its options.
    pub fn options(&self) -> &MoveOptions {
        &self.opts
    }

    /// Bytes moved so far by this mover.
    pub fn bytes_moved(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn throttle(&self, n: u64) {
        if let Some(l) = &self.opts.limiter {
            l.acquire(n);
        } else if let Some(b) = &self.bucket {
            let wait = b.lock().unwrap_or_else(|p| p.into_inner()).take(n);
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
    }

    fn report(&self, path: &str, file_bytes: u64, file_size: u64, n: u64) {
        let bytes = self.bytes.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(p) = &self.opts.progress {
            p(&Progress {
                path: path.to_string(),
                file_bytes,
                file_size,
                bytes,
                files_done: self.files_done.load(Ordering::Relaxed),
                files: self.files.load(Ordering::Relaxed),
            });
        }
    }

    /// Move one file, with resends; the copy on `to` as stored.
    pub fn copy(&self, from: &dyn Level, to: &dyn Level, path: &str) -> Result<Transfer, LevelError> {
        self.files.fetch_add(1, Ordering::Relaxed);
        let m = self.one(&Job { from, to, path });
        m.result
    }

    /// Move a reader's copy into a writer (both already open; no resend: there is
    /// nothing to open again). Throttled, counted and reported like any job.
    pub fn copy_open(
        &self,
        reader: Box<dyn ChunkReader + '_>,
        writer: Box<dyn ChunkWriter + '_>,
        meters: (&crate::CostMeter, &crate::CostMeter),
    ) -> Result<Transfer, LevelError> {
        let t0 = Instant::now();
        let stored = self.direct(reader, writer)?;
        let seconds = t0.elapsed().as_secs_f64();
        meters.0.record(Direction::Get, stored.version.size, seconds);
        meters.1.record(Direction::Put, stored.version.size, seconds);
        Ok(Transfer {
            bytes: stored.version.size,
            stored,
            seconds,
        })
    }

    /// Move every job, `streams` at a time; one [`Moved`] per job, in job order.
    pub fn run(&self, jobs: &[Job<'_>]) -> Vec<Moved> {
        self.files.fetch_add(jobs.len(), Ordering::Relaxed);
        let streams = self.opts.streams.clamp(1, jobs.len().max(1));
        if streams == 1 {
            if let Some(init) = &self.opts.thread_init {
                init();
            }
            return jobs.iter().map(|j| self.one(j)).collect();
        }
        let next = AtomicUsize::new(0);
        let out: Vec<Mutex<Option<Moved>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..streams {
                s.spawn(|| {
                    if let Some(init) = &self.opts.thread_init {
                        init();
                    }
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(j) = jobs.get(i) else { break };
                        let m = self.one(j);
                        *out[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(m);
                    }
                });
            }
        });
        out.into_iter()
            .map(|m| {
                m.into_inner()
                    .unwrap_or_else(|p| p.into_inner())
                    .expect("every job ran")
            })
            .collect()
    }

    fn one(&self, j: &Job<'_>) -> Moved {
        let mut attempts = 0;
        let result = loop {
            attempts += 1;
            let t0 = Instant::now();
            let r = if self.opts.window > 1 {
                self.pipelined(j)
            } else {
                j.from.get(j.path).and_then(|r| {
                    let w = j.to.put(r.stored())?;
                    self.direct(r, w)
                })
            };
            match r {
                Ok(stored) => {
                    let seconds = t0.elapsed().as_secs_f64();
                    j.from
                        .meter()
                        .record(Direction::Get, stored.version.size, seconds);
                    j.to.meter().record(Direction::Put, stored.version.size, seconds);
                    break Ok(Transfer {
                        bytes: stored.version.size,
                        stored,
                        seconds,
                    });
                }
                Err(e) if attempts <= self.opts.retries && transient(&e) => {
                    tracing::debug!(path = j.path, attempt = attempts, error = %e, "sending the file again");
                    continue;
                }
                Err(e) => break Err(e),
            }
        };
        self.files_done.fetch_add(1, Ordering::Relaxed);
        Moved {
            path: j.path.to_string(),
            result,
            attempts,
        }
    }

    /// Reader straight into writer, then commit.
    fn direct(
        &self,
        reader: Box<dyn ChunkReader + '_>,
        mut writer: Box<dyn ChunkWriter + '_>,
    ) -> Result<Stored, LevelError> {
        self.fill(reader, &mut *writer)?;
        writer.commit()
    }

    /// Move every chunk of an open reader into an open writer and confirm the source is
    /// unchanged ([`ChunkReader::finish`]), without committing: the caller commits (the
    /// drain publishes on a thread of its own, so that the commit of one file overlaps
    /// the writes of the next). Throttled, counted and reported like any job; no resend.
    /// Gathered and parallel where the options ask for it and the pair offers it
    /// ([`crate::gather`]); otherwise chunk by chunk, a chunk refused by its CRC read
    /// once more before the move fails. Returns the source's copy as read.
    pub fn fill(
        &self,
        reader: Box<dyn ChunkReader + '_>,
        writer: &mut dyn ChunkWriter,
    ) -> Result<Stored, LevelError> {
        let src = reader.stored().clone();
        let cs = src.chunk_size.max(1);
        let wants = self.opts.writers > 1 || self.opts.write_size as u64 > cs;
        if wants {
            if let (Some(r), Some(w)) = (reader.gather(), writer.gather()) {
                let throttle = |n: u64| self.throttle(n);
                let report = |n: u64, done: u64| self.report(&src.path, done, src.version.size, n);
                let hooks = Hooks {
                    throttle: &throttle,
                    report: &report,
                    thread_init: self.opts.thread_init.as_deref(),
                    reread: reader.rereadable(),
                };
                gathered(&src, r, w, self.opts.write_size, self.opts.writers.max(1), &hooks)?;
                reader.finish()?;
                return Ok(src);
            }
        }
        self.chunkwise(reader, writer)?;
        Ok(src)
    }

    /// Reader straight into writer, chunk by chunk (a chunk refused by its CRC is read
    /// once more before the attempt fails); then the reader's `finish`.
    fn chunkwise(
        &self,
        mut reader: Box<dyn ChunkReader + '_>,
        writer: &mut dyn ChunkWriter,
    ) -> Result<(), LevelError> {
        let src = reader.stored().clone();
        let cs = src.chunk_size.max(1);
        let mut done = 0u64;
        for i in 0..src.chunks() {
            let len = (src.version.size - i * cs).min(cs);
            self.throttle(len);
            match reader.read_chunk_to(i, i * cs, &mut *writer) {
                Ok(()) => {}
                // Read once more where the reader can; if that fails too, the first
                // error stands.
                Err(e @ LevelError::Corrupt { .. }) if reader.rereadable() => {
                    reader.read_chunk_to(i, i * cs, &mut *writer).map_err(|_| e)?
                }
                Err(e) => return Err(e),
            }
            done += len;
            self.report(&src.path, done, src.version.size, len);
        }
        reader.finish()
    }

    /// A reader thread fills a queue of `window` owned chunks; this thread writes them.
    fn pipelined(&self, j: &Job<'_>) -> Result<Stored, LevelError> {
        enum Msg {
            Start(Stored),
            Chunk(u64, Vec<u8>),
            End(Result<(), LevelError>),
        }
        let (tx, rx) = std::sync::mpsc::sync_channel::<Msg>(self.opts.window.max(1));
        let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::scope(|s| {
            let from = j.from;
            let path = j.path;
            let init = self.opts.thread_init.clone();
            s.spawn(move || {
                if let Some(init) = init {
                    init();
                }
                let r = (|| -> Result<(), LevelError> {
                    let mut r = from.get(path)?;
                    let src = r.stored().clone();
                    if tx.send(Msg::Start(src.clone())).is_err() {
                        return Ok(());
                    }
                    for i in 0..src.chunks() {
                        let mut buf = back_rx.try_recv().unwrap_or_default();
                        buf.clear();
                        let mut fill = |parts: &[IoPart<'_>]| {
                            for p in parts {
                                p.extend_vec(&mut buf);
                            }
                            Ok(())
                        };
                        let first = r.read_chunk(i, &mut fill);
                        if matches!(first, Err(LevelError::Corrupt { .. })) && r.rereadable() {
                            buf.clear();
                            let mut fill = |parts: &[IoPart<'_>]| {
                                for p in parts {
                                    p.extend_vec(&mut buf);
                                }
                                Ok(())
                            };
                            r.read_chunk(i, &mut fill)
                                .map_err(|_| first.expect_err("a refused chunk"))?;
                        } else {
                            first?;
                        }
                        if tx.send(Msg::Chunk(i, buf)).is_err() {
                            return Ok(());
                        }
                    }
                    r.finish()
                })();
                let _ = tx.send(Msg::End(r));
            });
            // The writer's side owns the queue's receiver, so that when it stops early the
            // reader's next send fails and the reader ends (the scope joins it).
            let write = move || -> Result<Stored, LevelError> {
                let Ok(Msg::Start(src)) = rx.recv() else {
                    return match rx.recv() {
                        Ok(Msg::End(Err(e))) => Err(e),
                        _ => Err(LevelError::Changed(j.path.to_string())),
                    };
                };
                let mut w = j.to.put(&src)?;
                let cs = src.chunk_size.max(1);
                let mut done = 0u64;
                loop {
                    match rx.recv() {
                        Ok(Msg::Chunk(i, buf)) => {
                            self.throttle(buf.len() as u64);
                            w.write_at(&[IoPart::Buf(&buf)], i * cs)?;
                            done += buf.len() as u64;
                            self.report(&src.path, done, src.version.size, buf.len() as u64);
                            let _ = back_tx.send(buf);
                        }
                        Ok(Msg::End(r)) => {
                            r?;
                            break;
                        }
                        Ok(Msg::Start(_)) | Err(_) => return Err(LevelError::Changed(j.path.to_string())),
                    }
                }
                w.commit()
            };
            write()
        })
    }
}
