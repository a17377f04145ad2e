//! The CRFS aggregation engine: buffer pool, per-file current chunk, work queue and IO
//! thread pool (CRFS section IV-B), independent of FUSE so that it can be driven and
//! measured directly.
//!
//! Invariants:
//! 1. A file holds at most one current chunk; a write appends to it only when it starts
//!    exactly at the chunk's end, otherwise the chunk is shipped and a new one started.
//! 2. A new chunk is started only when no in-flight chunk of the same file overlaps the
//!    range it may cover, so two IO threads never write overlapping bytes out of order.
//! 3. No thread waits for a pool buffer while holding a file's lock. When every buffer
//!    is some file's current chunk (nothing queued or being written), the waiter ships
//!    one of those chunks early, so a process writing more files than the pool has
//!    chunks cannot deadlock.
//! 4. A backend error is stored in the file and returned by its next write, flush or
//!    fsync; flush and fsync clear it once returned (the kernel's errseq model).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where full chunks go. The IO threads call it with one chunk at a time.
pub trait BackendSink: Send + Sync + 'static {
    /// Write `data` at `offset` of `file` (one large write).
    fn write_chunk(&self, file: &File, data: &[u8], offset: u64) -> io::Result<()>;
}

/// Writes chunks to the backend file (the normal sink).
#[derive(Debug, Default, Clone, Copy)]
pub struct FileSink;

impl BackendSink for FileSink {
    fn write_chunk(&self, file: &File, data: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(data, offset)
    }
}

/// Discards chunks: measures the aggregation pipeline alone (CRFS figure 5).
#[derive(Debug, Default, Clone, Copy)]
pub struct DiscardSink;

impl BackendSink for DiscardSink {
    fn write_chunk(&self, _file: &File, _data: &[u8], _offset: u64) -> io::Result<()> {
        Ok(())
    }
}

struct Chunk {
    buf: Vec<u8>,
    off: u64,
    len: usize,
}

#[derive(Default)]
struct FileState {
    cur: Option<Chunk>,
    /// Chunks queued or being written ("write chunk count" - "complete chunk count").
    outstanding: usize,
    /// Byte ranges of those chunks.
    inflight: Vec<(u64, u64)>,
    /// First backend error not yet returned by flush/fsync (errno).
    error: Option<i32>,
    /// End of the data written through us (the backend size may lag behind it).
    end: u64,
}

/// A backend file being written through the engine, shared by all its open handles.
pub struct AggFile {
    fd: File,
    key: (u64, u64),
    state: Mutex<FileState>,
    cv: Condvar,
}

impl AggFile {
    /// The backend file descriptor chunks are written to.
    pub fn fd(&self) -> &File {
        &self.fd
    }

    /// Size including data still buffered or in flight.
    pub fn size_hint(&self) -> u64 {
        self.state.lock().unwrap().end
    }

    /// Set the logical end after a truncate (call [`Engine::drain`] first).
    pub fn set_end(&self, end: u64) {
        self.state.lock().unwrap().end = end;
    }

    fn lock(&self) -> MutexGuard<'_, FileState> {
        self.state.lock().unwrap()
    }
}

struct Work {
    file: Arc<AggFile>,
    chunk: Chunk,
}

struct Shared {
    chunk_size: usize,
    free: Mutex<Vec<Vec<u8>>>,
    free_cv: Condvar,
    queue: Mutex<VecDeque<Work>>,
    queue_cv: Condvar,
    /// Chunks queued or being written, all files.
    busy: AtomicUsize,
    shutdown: AtomicBool,
    files: Mutex<HashMap<(u64, u64), Weak<AggFile>>>,
    sink: Arc<dyn BackendSink>,
    stats: EngineStats,
}

/// Engine counters.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Chunks written to the backend.
    pub chunks: AtomicU64,
    /// Bytes written to the backend.
    pub bytes: AtomicU64,
    /// Chunks shipped before they were full (non-contiguous write, flush, pool pressure).
    pub partial: AtomicU64,
    /// Backend write errors.
    pub errors: AtomicU64,
}

/// Buffer pool + work queue + IO threads.
pub struct Engine {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Engine {
    /// A pool of `pool_size / chunk_size` chunks (at least one) and `io_threads` writers.
    pub fn new(pool_size: usize, chunk_size: usize, io_threads: usize, sink: Arc<dyn BackendSink>) -> Engine {
        let n = (pool_size / chunk_size).max(1);
        let free = (0..n).map(|_| vec![0u8; chunk_size]).collect();
        let shared = Arc::new(Shared {
            chunk_size,
            free: Mutex::new(free),
            free_cv: Condvar::new(),
            queue: Mutex::new(VecDeque::new()),
            queue_cv: Condvar::new(),
            busy: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            files: Mutex::new(HashMap::new()),
            sink,
            stats: EngineStats::default(),
        });
        let threads = (0..io_threads.max(1))
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("crfs-io-{i}"))
                    .spawn(move || io_thread(&s))
                    .expect("spawn CRFS IO thread")
            })
            .collect();
        Engine {
            shared,
            threads: Mutex::new(threads),
        }
    }

    /// Chunk size.
    pub fn chunk_size(&self) -> usize {
        self.shared.chunk_size
    }

    /// Counters.
    pub fn stats(&self) -> &EngineStats {
        &self.shared.stats
    }

    /// The shared state of backend file `key` (device, inode), registering `fd` for it if
    /// it is not open yet. `size` is its current backend size.
    pub fn attach(
        &self,
        key: (u64, u64),
        open_fd: impl FnOnce() -> io::Result<(File, u64)>,
    ) -> io::Result<Arc<AggFile>> {
        let mut files = self.shared.files.lock().unwrap();
        if let Some(f) = files.get(&key).and_then(Weak::upgrade) {
            return Ok(f);
        }
        let (fd, size) = open_fd()?;
        let f = Arc::new(AggFile {
            fd,
            key,
            state: Mutex::new(FileState {
                end: size,
                ..Default::default()
            }),
            cv: Condvar::new(),
        });
        files.insert(key, Arc::downgrade(&f));
        Ok(f)
    }

    /// The open file for `key`, if any handle has it open.
    pub fn lookup(&self, key: (u64, u64)) -> Option<Arc<AggFile>> {
        self.shared
            .files
            .lock()
            .unwrap()
            .get(&key)
            .and_then(Weak::upgrade)
    }

    /// Forget `file` when its last handle goes (after [`Engine::flush`]).
    pub fn detach(&self, file: &Arc<AggFile>) {
        let mut files = self.shared.files.lock().unwrap();
        // Two refs: the caller's and ours (the map holds only a Weak).
        if Arc::strong_count(file) <= 1 {
            files.remove(&file.key);
        }
    }

    /// Copy `data` at `off` into the file's chunks. Returns the bytes taken, or the
    /// pending backend error of this file.
    pub fn write(&self, file: &Arc<AggFile>, off: u64, data: &[u8]) -> Result<usize, i32> {
        let cs = self.shared.chunk_size;
        let mut done = 0;
        while done < data.len() {
            let pos = off + done as u64;
            let mut st = file.lock();
            if let Some(e) = st.error {
                return Err(e);
            }
            if let Some(c) = st.cur.as_mut() {
                if c.off + c.len as u64 == pos && c.len < cs {
                    let k = (cs - c.len).min(data.len() - done);
                    c.buf[c.len..c.len + k].copy_from_slice(&data[done..done + k]);
                    c.len += k;
                    done += k;
                    st.end = st.end.max(pos + k as u64);
                    if st.cur.as_ref().is_some_and(|c| c.len == cs) {
                        self.ship(file, &mut st);
                    }
                    continue;
                }
                self.ship(file, &mut st);
            }
            // Invariant 2: wait until nothing in flight overlaps [pos, pos + cs).
            let end = pos + cs as u64;
            while st.inflight.iter().any(|&(a, b)| a < end && pos < b) {
                st = file.cv.wait(st).unwrap();
            }
            drop(st);
            let buf = self.take_buffer();
            let mut st = file.lock();
            if st.cur.is_none() {
                st.cur = Some(Chunk {
                    buf,
                    off: pos,
                    len: 0,
                });
            } else {
                self.give_back(buf);
            }
        }
        Ok(done)
    }

    /// Ship the file's current chunk and wait for all its chunks (CRFS close/fsync), then
    /// return and clear a pending backend error.
    pub fn flush(&self, file: &Arc<AggFile>) -> Result<(), i32> {
        let mut st = self.wait_idle(file);
        match st.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Like [`Engine::flush`] but leaves a pending error in place (before reads and
    /// truncates, so that the backend holds every byte written).
    pub fn drain(&self, file: &Arc<AggFile>) {
        drop(self.wait_idle(file));
    }

    fn wait_idle<'a>(&self, file: &'a Arc<AggFile>) -> MutexGuard<'a, FileState> {
        let mut st = file.lock();
        if st.cur.is_some() {
            self.ship(file, &mut st);
        }
        while st.outstanding > 0 {
            st = file.cv.wait(st).unwrap();
        }
        st
    }

    /// Enqueue the current chunk (caller holds the file lock).
    fn ship(&self, file: &Arc<AggFile>, st: &mut FileState) {
        let Some(chunk) = st.cur.take() else { return };
        if chunk.len == 0 {
            self.give_back(chunk.buf);
            return;
        }
        if chunk.len < self.shared.chunk_size {
            self.shared.stats.partial.fetch_add(1, Relaxed);
        }
        st.outstanding += 1;
        st.inflight.push((chunk.off, chunk.off + chunk.len as u64));
        self.shared.busy.fetch_add(1, Relaxed);
        self.shared.queue.lock().unwrap().push_back(Work {
            file: file.clone(),
            chunk,
        });
        self.shared.queue_cv.notify_one();
    }

    fn take_buffer(&self) -> Vec<u8> {
        let s = &self.shared;
        let mut free = s.free.lock().unwrap();
        loop {
            if let Some(b) = free.pop() {
                return b;
            }
            if s.busy.load(Relaxed) == 0 {
                // Invariant 3: every buffer is a current chunk; ship one to make progress.
                drop(free);
                self.evict_one();
                free = s.free.lock().unwrap();
                if free.is_empty() && s.busy.load(Relaxed) == 0 {
                    free = s.free_cv.wait_timeout(free, Duration::from_millis(5)).unwrap().0;
                }
                continue;
            }
            free = s.free_cv.wait_timeout(free, Duration::from_millis(50)).unwrap().0;
        }
    }

    fn evict_one(&self) {
        let files = self.live_files();
        for f in files {
            if let Ok(mut st) = f.state.try_lock() {
                if st.cur.is_some() {
                    self.ship(&f, &mut st);
                    return;
                }
            }
        }
    }

    /// The files still attached (or still referenced by queued chunks).
    fn live_files(&self) -> Vec<Arc<AggFile>> {
        self.shared
            .files
            .lock()
            .unwrap()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    fn give_back(&self, buf: Vec<u8>) {
        self.shared.free.lock().unwrap().push(buf);
        self.shared.free_cv.notify_one();
    }

    /// Write every file's remaining chunk and stop the IO threads.
    pub fn shutdown(&self) {
        let files = self.live_files();
        for f in &files {
            if let Err(e) = self.flush(f) {
                tracing::error!(errno = e, "backend error while flushing at unmount");
            }
        }
        self.shared.shutdown.store(true, Relaxed);
        self.shared.queue_cv.notify_all();
        for t in self.threads.lock().unwrap().drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn io_thread(s: &Shared) {
    loop {
        let work = {
            let mut q = s.queue.lock().unwrap();
            loop {
                if let Some(w) = q.pop_front() {
                    break w;
                }
                if s.shutdown.load(Relaxed) {
                    return;
                }
                q = s.queue_cv.wait(q).unwrap();
            }
        };
        let Work { file, chunk } = work;
        let r = s.sink.write_chunk(&file.fd, &chunk.buf[..chunk.len], chunk.off);
        {
            let mut st = file.lock();
            match r {
                Ok(()) => {
                    s.stats.chunks.fetch_add(1, Relaxed);
                    s.stats.bytes.fetch_add(chunk.len as u64, Relaxed);
                }
                Err(e) => {
                    s.stats.errors.fetch_add(1, Relaxed);
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
                    tracing::warn!(errno, offset = chunk.off, len = chunk.len, "backend write failed");
                    st.error.get_or_insert(errno);
                }
            }
            st.outstanding -= 1;
            let range = (chunk.off, chunk.off + chunk.len as u64);
            if let Some(i) = st.inflight.iter().position(|&r| r == range) {
                st.inflight.swap_remove(i);
            }
        }
        file.cv.notify_all();
        s.free.lock().unwrap().push(chunk.buf);
        s.busy.fetch_sub(1, Relaxed);
        s.free_cv.notify_one();
    }
}
