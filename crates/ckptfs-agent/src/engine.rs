//! The drain engine: scan the store for complete files, stage them (check that the
//! file is complete and stable, build the block plan), flush them to the destination
//! with an IO thread pool (each block's CRC32C verified just before it is written),
//! publish atomically and record them in the manifest.
//!
//! Staged marshaling (orchestration Algorithm 1): one stage thread and one flush
//! thread joined by a rendezvous channel. The stage thread holds the "stage mutex"
//! while it stages file k+1 and hands it over only when the flush thread has finished
//! file k and takes it (the "PFS mutex"), so at most one file is flushed at a time per
//! node and the staging of the next overlaps the flush of the current one. In ckptfs
//! the expensive half of staging, getting the data into node memory, was done by the
//! application when it wrote the checkpoint into the store; the agent's stage step
//! checks the file's state and chunk list and plans the writes. The flush of file k
//! is split in two: the writes (one file at a time) and the commit (fsync, re-check,
//! rename, manifest), which overlaps the writes of file k+1. With marshaling off,
//! every queued file (up to 16) is staged and flushed by its own thread at once, each
//! with one writer (the uncoordinated baseline: every process writes its own file).

use crate::config::{AgentConfig, Target};
use crate::dest::IoPart;
use crate::dest::{CreateOpts, DestIo, PosixDest, DIRECT_ALIGN};
use crate::error::AgentError;
use crate::manifest::{self, Entry, Manifest};
use crate::status::{self, AgentStatus, Drained, Failed, InFlight, Queued};
use crate::sys::{self, AlignedBuf};
use crate::throttle::Throttle;
use ckptfs_runtime::{InstanceLock, RuntimeDir, Shutdown};
use ckptfs_store::checksum::{crc32c, crc32c_append_zeros};
use ckptfs_store::fault::crash_point;
use ckptfs_store::region_io::{RegionIo, RegionSlice};
use ckptfs_store::{ChunkInfo, ChunkLocation, FileKind, Stat, Store, WriteState};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Identity of one version of a store file: any write, truncate or replacement changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fp {
    ino: u64,
    generation: u32,
    size: u64,
    mtime_ns: u64,
}

impl Fp {
    fn of(st: &Stat) -> Fp {
        Fp {
            ino: st.ino,
            generation: st.generation,
            size: st.size,
            mtime_ns: st.mtime_ns,
        }
    }
}

#[derive(Debug, Clone)]
struct Item {
    path: String,
    fp: Fp,
}

struct Failure {
    fp: Fp,
    report: Failed,
    retry_at: Option<Instant>,
}

struct Flight {
    size: u64,
    done: Arc<AtomicU64>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Item>,
    in_flight: BTreeMap<String, Flight>,
    drained: HashMap<String, Fp>,
    failed: HashMap<String, Failure>,
    skipped: HashSet<String>,
    changed: u64,
    busy: f64,
    st: AgentStatus,
}

/// Where a block's bytes come from.
#[derive(Debug, Clone, Copy)]
enum Src {
    Mem { off: u64, written: usize, crc: u32 },
    Spill { off: u64, written: usize, crc: u32 },
    Hole,
}

#[derive(Debug, Clone, Copy)]
struct Block {
    logical: u32,
    len: usize,
    src: Src,
}

/// Progress of one file's write phase: units `[0, ready)` are verified, `[0, taken)`
/// handed to IO threads.
#[derive(Default)]
struct Pipe {
    ready: usize,
    taken: usize,
    failed: bool,
}

/// A staged file: its identity, chunk list snapshot and block plan.
struct Plan {
    item: Item,
    mode: u32,
    chunks: Vec<ChunkInfo>,
    blocks: Vec<Block>,
    /// CRC32C of each block's file content (spill blocks are filled in at flush time).
    content: Mutex<Vec<u32>>,
    done: Arc<AtomicU64>,
}

struct Published {
    dest: PathBuf,
    seconds: f64,
    evicted: bool,
}

/// What one drain pass did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DrainSummary {
    /// Files published.
    pub drained_files: u64,
    /// Bytes published.
    pub drained_bytes: u64,
    /// Files found already published and unchanged.
    pub already_drained: u64,
    /// Files that failed (with the reason).
    pub failed: Vec<Failed>,
    /// Wall time in seconds.
    pub seconds: f64,
}

struct Shared {
    cfg: AgentConfig,
    store: Store,
    name: String,
    region: RegionIo,
    spill: Option<File>,
    cs: u64,
    io: Arc<dyn DestIo>,
    target: Target,
    throttle: Option<Throttle>,
    stop: Arc<AtomicBool>,
    /// The caller's shutdown trigger of the current `run` (none between runs).
    shutdown: Mutex<Option<Shutdown>>,
    zeros: AlignedBuf,
    state: Mutex<State>,
    manifests: Mutex<HashMap<PathBuf, Manifest>>,
    dirs_ready: Mutex<HashSet<PathBuf>>,
    _lock: InstanceLock,
    /// The caller's runtime directory (status file).
    rt: RuntimeDir,
}

/// A drain agent attached to one store. At most one per store (a lock file enforces it).
pub struct Agent {
    sh: Arc<Shared>,
}

/// Asks a running agent to stop; the file in flight is abandoned safely.
#[derive(Clone)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    /// Request the stop.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

use ckptfs_settings::now_ns;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn parent_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((p, _)) => p,
    }
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// CRC32C of `b` followed by `a`'s `len_b` bytes.
pub(crate) fn crc_combine(a: u32, b: u32, len_b: u64) -> u32 {
    // Appending n zero bytes to a CRC register is linear over GF(2): apply the
    // precomputed operator of every power of two in n (one 32-step product per set bit;
    // a generic combine rebuilds the operator on every call, ~20 us each, which cost
    // ~25 ms per GiB of 1 MiB chunks at publish time).
    let ops = zero_ops();
    let (mut crc, mut n, mut k) = (a, len_b, 0);
    while n != 0 {
        if n & 1 == 1 {
            crc = gf2_times(&ops[k], crc);
        }
        n >>= 1;
        k += 1;
    }
    crc ^ b
}

/// A 32x32 GF(2) matrix, one column per bit.
type Gf2Matrix = [u32; 32];

fn gf2_times(m: &Gf2Matrix, mut v: u32) -> u32 {
    let mut out = 0;
    let mut i = 0;
    while v != 0 {
        if v & 1 == 1 {
            out ^= m[i];
        }
        v >>= 1;
        i += 1;
    }
    out
}

/// `ops[k]` appends 2^k zero bytes to a (reflected) CRC32C register.
fn zero_ops() -> &'static [Gf2Matrix; 64] {
    static OPS: std::sync::OnceLock<[Gf2Matrix; 64]> = std::sync::OnceLock::new();
    OPS.get_or_init(|| {
        // One zero bit: shift right, xor the reflected polynomial if the low bit was set.
        let mut bit = [0u32; 32];
        bit[0] = 0x82f6_3b78;
        for (i, c) in bit.iter_mut().enumerate().skip(1) {
            *c = 1 << (i - 1);
        }
        let square = |m: &Gf2Matrix| -> Gf2Matrix { std::array::from_fn(|i| gf2_times(m, m[i])) };
        let mut op = square(&square(&square(&bit))); // 8 bits = 1 byte
        let mut ops = [[0u32; 32]; 64];
        for o in ops.iter_mut() {
            *o = op;
            op = square(&op);
        }
        ops
    })
}

/// With marshaling off, at most this many files are flushed at once.
const UNMARSHALED_MAX_FILES: usize = 16;

/// Temporary names are `.ckptfs-tmp.NODE.PID.HASH` (fixed length, so long names fit).
fn tmp_prefix(node: &str) -> String {
    format!(".ckptfs-tmp.{node}.")
}

/// Per-chunk content CRCs and the whole-file CRC of a store file, derived from its
/// chunk list without reading data; None if a checksum is stale.
pub(crate) fn crcs_from_chunks(size: u64, cs: u64, chunks: &[ChunkInfo]) -> Option<(u32, Vec<u32>)> {
    let n = size.div_ceil(cs);
    let by: HashMap<u32, &ChunkInfo> = chunks.iter().map(|c| (c.logical, c)).collect();
    let mut file = 0u32;
    let mut out = Vec::with_capacity(n as usize);
    for l in 0..n {
        let len = (size - l * cs).min(cs);
        let c = match by.get(&(l as u32)) {
            None => crc32c_append_zeros(0, len as usize),
            Some(c) if c.written <= len => crc32c_append_zeros(c.crc?, (len - c.written) as usize),
            Some(_) => return None,
        };
        file = crc_combine(file, c, len);
        out.push(c);
    }
    Some((file, out))
}

/// A file renamed into place but not yet in the manifest.
struct Renamed {
    item: Item,
    dest: PathBuf,
    dir: PathBuf,
    name: String,
    entry: Entry,
    t0: Instant,
}

/// A file written but not yet committed.
struct Written<'a> {
    f: Box<dyn crate::dest::DestFile>,
    guard: TmpGuard<'a>,
    dest: PathBuf,
    dir: PathBuf,
    name: String,
    t0: Instant,
}

struct TmpGuard<'a> {
    io: &'a dyn DestIo,
    path: PathBuf,
    armed: bool,
}

impl Drop for TmpGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.io.remove(&self.path);
        }
    }
}

impl Agent {
    /// An agent draining `store` to the POSIX destination of `cfg`.
    pub fn new(store: &Store, cfg: AgentConfig) -> Result<Agent, AgentError> {
        let io = Arc::new(PosixDest::new(cfg.lfs.clone()));
        Self::with_dest(store, cfg, io)
    }

    /// An agent with its own destination I/O (fault injection in tests).
    pub fn with_dest(store: &Store, cfg: AgentConfig, io: Arc<dyn DestIo>) -> Result<Agent, AgentError> {
        let target = cfg.target()?.clone();
        let name = store.name().to_string();
        // The lock and status files live in the caller's runtime directory; a killed
        // predecessor's temporary status file is removed with the lock taken.
        let (rt, lock) = status::take_lock(&name)?;
        let info = store.info();
        // The store's own descriptor, checked (O_NOFOLLOW, owner, mode) when attached.
        let spill = store.spill_file()?;
        let cs = info.chunk_size;
        let mut st = AgentStatus {
            store: name.clone(),
            pid: std::process::id(),
            running: true,
            node: cfg.node_id.clone(),
            target: target.to_string(),
            marshal: cfg.marshal,
            direct: cfg.direct,
            io_threads: cfg.io_threads,
            max_bw_mbps: cfg.max_bw.map(|b| b / 1e6),
            started_ns: now_ns(),
            ..Default::default()
        };
        // Checkpoint directory ordinals survive restarts (--every).
        if let Some(old) = status::previous(&rt, &name) {
            st.dirs = old.dirs;
        }
        Ok(Agent {
            sh: Arc::new(Shared {
                throttle: cfg.max_bw.map(Throttle::new),
                region: RegionIo::new(store),
                store: store.clone(),
                name,
                spill,
                cs,
                io,
                target,
                stop: Arc::new(AtomicBool::new(false)),
                shutdown: Mutex::new(None),
                zeros: AlignedBuf::zeroed(cs as usize),
                state: Mutex::new(State {
                    st,
                    ..Default::default()
                }),
                manifests: Mutex::new(HashMap::new()),
                dirs_ready: Mutex::new(HashSet::new()),
                _lock: lock,
                rt,
                cfg,
            }),
        })
    }

    /// A handle to stop the agent from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.sh.stop.clone())
    }

    /// The chosen destination target.
    pub fn target(&self) -> &Target {
        &self.sh.target
    }

    /// The current state (what `ckptfs agent status` shows).
    pub fn status(&self) -> AgentStatus {
        self.sh.snapshot()
    }

    /// Drain every complete file there is now, then return. Files that change during
    /// their copy are tried again (up to 3 passes).
    pub fn run_once(&self) -> Result<DrainSummary, AgentError> {
        self.sh.run(true)
    }

    /// [`Agent::run_once`], abandoning the file in flight safely when `shutdown` fires.
    pub fn run_once_until(&self, shutdown: &Shutdown) -> Result<DrainSummary, AgentError> {
        self.with_shutdown(shutdown, || self.sh.run(true))
    }

    /// Drain continuously until `shutdown` fires (the binary routes SIGTERM/SIGINT to it
    /// with [`Shutdown::on_signals`]) or a [`StopHandle`] is used.
    pub fn run(&self, shutdown: &Shutdown) -> Result<DrainSummary, AgentError> {
        self.with_shutdown(shutdown, || self.sh.run(false))
    }

    fn with_shutdown<T>(&self, shutdown: &Shutdown, f: impl FnOnce() -> T) -> T {
        *lock(&self.sh.shutdown) = Some(shutdown.clone());
        let r = f();
        *lock(&self.sh.shutdown) = None;
        r
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let mut s = self.sh.snapshot();
        s.running = false;
        s.in_flight.clear();
        let _ = status::write_status(&self.sh.rt, &s);
    }
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || lock(&self.shutdown).as_ref().is_some_and(Shutdown::is_triggered)
    }

    fn snapshot(&self) -> AgentStatus {
        let s = lock(&self.state);
        let mut out = s.st.clone();
        out.updated_ns = now_ns();
        out.queued = s
            .queue
            .iter()
            .map(|i| Queued {
                path: i.path.clone(),
                size: i.fp.size,
            })
            .collect();
        out.in_flight = s
            .in_flight
            .iter()
            .map(|(p, f)| InFlight {
                path: p.clone(),
                size: f.size,
                done: f.done.load(Ordering::Relaxed),
            })
            .collect();
        let mut failed: Vec<Failed> = s.failed.values().map(|f| f.report.clone()).collect();
        failed.sort_by(|a, b| a.path.cmp(&b.path));
        out.failed = failed;
        out.skipped_by_policy = s.skipped.len() as u64;
        out.changed_during_copy = s.changed;
        out.bandwidth_mbps = if s.busy > 0.0 {
            s.st.drained_bytes as f64 / s.busy / 1e6
        } else {
            0.0
        };
        out
    }

    fn publish_status(&self) {
        if let Err(e) = status::write_status(&self.rt, &self.snapshot()) {
            tracing::warn!(error = %e, "cannot write the agent status file");
        }
    }

    fn run(&self, once: bool) -> Result<DrainSummary, AgentError> {
        if let Err(e) = sys::set_priority(self.cfg.priority) {
            tracing::warn!(error = %e, "cannot lower the agent's priority");
        }
        lock(&self.state).st.mode = if once { "once" } else { "daemon" }.into();
        let t0 = Instant::now();
        let before = {
            let s = lock(&self.state);
            (s.st.drained_files, s.st.drained_bytes, s.st.already_drained)
        };
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|sc| {
            sc.spawn(move || loop {
                self.publish_status();
                // Wakes at once when the pass ends (the sender is dropped).
                if !matches!(
                    done_rx.recv_timeout(Duration::from_millis(200)),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                ) {
                    break;
                }
            });
            let mut pass = 0;
            loop {
                if self.stopping() {
                    break;
                }
                self.scan();
                let changed_before = lock(&self.state).changed;
                let t = Instant::now();
                if !lock(&self.state).queue.is_empty() {
                    self.process();
                    lock(&self.state).busy += t.elapsed().as_secs_f64();
                }
                pass += 1;
                if once {
                    let again = lock(&self.state).changed > changed_before;
                    if !again || pass >= 3 {
                        break;
                    }
                    continue;
                }
                let wake = Instant::now() + self.cfg.interval;
                while Instant::now() < wake && !self.stopping() {
                    std::thread::sleep(Duration::from_millis(20).min(self.cfg.interval));
                }
            }
            drop(done_tx);
        });
        // Anything still queued was not started (stop requested).
        lock(&self.state).queue.clear();
        self.publish_status();
        let s = self.snapshot();
        Ok(DrainSummary {
            drained_files: s.drained_files - before.0,
            drained_bytes: s.drained_bytes - before.1,
            already_drained: s.already_drained - before.2,
            failed: s.failed,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    // ------------------------------------------------------------------ scanning

    fn scan(&self) {
        let all = self.store.list_all();
        let now = Instant::now();
        // Checkpoint directories (parents of files) get ordinals in creation order.
        let dir_ctime: HashMap<&str, u64> = all
            .iter()
            .filter(|(_, st)| st.kind == FileKind::Dir)
            .map(|(p, st)| (p.as_str(), st.ctime_ns))
            .collect();
        {
            let mut s = lock(&self.state);
            let mut new_dirs: Vec<(u64, String)> = all
                .iter()
                .filter(|(_, st)| st.kind == FileKind::File)
                .map(|(p, _)| parent_of(p))
                .filter(|d| !s.st.dirs.contains_key(*d))
                .collect::<HashSet<_>>()
                .into_iter()
                .map(|d| (dir_ctime.get(d).copied().unwrap_or(0), d.to_string()))
                .collect();
            new_dirs.sort();
            let mut next = s.st.dirs.values().max().copied().unwrap_or(0);
            for (_, d) in new_dirs {
                next += 1;
                s.st.dirs.insert(d, next);
            }
        }
        let mut cands: Vec<(u64, Item)> = Vec::new();
        for (path, st) in &all {
            if st.kind != FileKind::File || st.state != WriteState::Complete {
                continue;
            }
            let fp = Fp::of(st);
            {
                let mut s = lock(&self.state);
                if s.in_flight.contains_key(path)
                    || s.queue.iter().any(|i| &i.path == path)
                    || s.drained.get(path) == Some(&fp)
                {
                    continue;
                }
                if let Some(f) = s.failed.get(path) {
                    if f.fp == fp && f.retry_at.is_none_or(|t| now < t) {
                        continue;
                    }
                }
                let ord = s.st.dirs.get(parent_of(path)).copied().unwrap_or(1);
                if ord % self.cfg.every as u64 != 0 {
                    s.skipped.insert(path.clone());
                    continue;
                }
                s.skipped.remove(path);
            }
            match self.already_published(path, st) {
                Ok(true) => {
                    let mut s = lock(&self.state);
                    s.drained.insert(path.clone(), fp);
                    s.failed.remove(path);
                    s.st.already_drained += 1;
                    continue;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(%path, error = %e, "cannot read the destination manifest"),
            }
            cands.push((
                st.mtime_ns,
                Item {
                    path: path.clone(),
                    fp,
                },
            ));
        }
        // FIFO: oldest completed checkpoint first.
        cands.sort_by(|a, b| (a.0, &a.1.path).cmp(&(b.0, &b.1.path)));
        lock(&self.state).queue.extend(cands.into_iter().map(|(_, i)| i));
    }

    fn dest_of(&self, path: &str) -> PathBuf {
        self.target.dir.join(path.trim_start_matches('/'))
    }

    fn with_manifest<R>(&self, dir: &Path, f: impl FnOnce(&mut Manifest) -> R) -> Result<R, AgentError> {
        let mut ms = lock(&self.manifests);
        if !ms.contains_key(dir) {
            let m = Manifest::load(&*self.io, &dir.join(manifest::file_name(&self.cfg.node_id)))?
                .unwrap_or_else(|| Manifest::new(&self.cfg.node_id, &self.name));
            ms.insert(dir.to_path_buf(), m);
        }
        Ok(f(ms.get_mut(dir).expect("just inserted")))
    }

    /// Is this version of the file already published (in our manifest, same size and
    /// checksum, destination file present with that size)? Reads no data.
    fn already_published(&self, path: &str, st: &Stat) -> Result<bool, AgentError> {
        let dest = self.dest_of(path);
        let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
            return Ok(false);
        };
        let name = name.to_string_lossy().into_owned();
        let entry = self.with_manifest(dir, |m| m.files.get(&name).cloned())?;
        let Some(e) = entry else {
            return Ok(false);
        };
        if e.size != st.size || e.store_path != path {
            return Ok(false);
        }
        let chunks = self.store.chunk_list(path)?;
        let Some((crc, _)) = crcs_from_chunks(st.size, self.cs, &chunks) else {
            return Ok(false);
        };
        Ok(crc == e.crc32c && self.io.len(&dest).ok() == Some(st.size))
    }

    // ------------------------------------------------------------------ the queue

    fn pop(&self) -> Option<(Item, Arc<AtomicU64>)> {
        let mut s = lock(&self.state);
        let item = s.queue.pop_front()?;
        let done = Arc::new(AtomicU64::new(0));
        s.in_flight.insert(
            item.path.clone(),
            Flight {
                size: item.fp.size,
                done: done.clone(),
            },
        );
        Some((item, done))
    }

    fn process(&self) {
        let threads = self.cfg.io_threads;
        if self.cfg.marshal {
            std::thread::scope(|sc| {
                let (tx, rx) = sync_channel::<Plan>(0);
                sc.spawn(move || {
                    let _ = sys::set_priority(self.cfg.priority);
                    // Algorithm 1: stage under the stage mutex, hand over when the flush
                    // slot frees up (the rendezvous send), then stage the next one.
                    while !self.stopping() {
                        let Some((item, done)) = self.pop() else { break };
                        match self.stage(item.clone(), done) {
                            Ok(plan) => {
                                if tx.send(plan).is_err() {
                                    break;
                                }
                            }
                            Err(e) => self.finish(&item, Err(e)),
                        }
                    }
                });
                // The fsync and publication of file k overlap the writes of file k+1
                // (one commit thread, so files are still published in FIFO order).
                let (ctx, crx) = sync_channel::<(Plan, Written<'_>)>(0);
                sc.spawn(move || {
                    // Files of one directory whose commits queue up behind each other
                    // share one manifest save.
                    let mut batch: Vec<Renamed> = Vec::new();
                    loop {
                        let msg = if batch.is_empty() {
                            crx.recv().ok()
                        } else {
                            match crx.try_recv() {
                                Ok(m) => Some(m),
                                Err(std::sync::mpsc::TryRecvError::Empty) => {
                                    self.finish_batch(std::mem::take(&mut batch));
                                    continue;
                                }
                                Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
                            }
                        };
                        let Some((plan, w)) = msg else { break };
                        match self.publish_phase(&plan, w) {
                            Ok(r) => {
                                if batch.first().is_some_and(|b| b.dir != r.dir) {
                                    self.finish_batch(std::mem::take(&mut batch));
                                }
                                batch.push(r);
                            }
                            Err(e) => self.finish(&plan.item, Err(e)),
                        }
                    }
                    self.finish_batch(batch);
                });
                for plan in rx {
                    match self.write_phase(&plan, threads) {
                        Ok(w) => {
                            if let Err(e) = ctx.send((plan, w)) {
                                let (plan, _) = e.0;
                                self.finish(&plan.item, Err(AgentError::Stopped(plan.item.path.clone())));
                            }
                        }
                        Err(e) => self.finish(&plan.item, Err(e)),
                    }
                }
                drop(ctx);
            });
        } else {
            // Uncoordinated: every queued file is flushed at once by its own thread, as
            // when each process writes its own checkpoint to the PFS.
            let files = lock(&self.state).queue.len().clamp(1, UNMARSHALED_MAX_FILES);
            std::thread::scope(|sc| {
                for _ in 0..files {
                    sc.spawn(|| {
                        let _ = sys::set_priority(self.cfg.priority);
                        while !self.stopping() {
                            let Some((item, done)) = self.pop() else { break };
                            let r = self.stage(item.clone(), done).and_then(|p| self.flush(&p, 1));
                            self.finish(&item, r);
                        }
                    });
                }
            });
        }
    }

    fn finish(&self, item: &Item, r: Result<Published, AgentError>) {
        let mut s = lock(&self.state);
        s.in_flight.remove(&item.path);
        match r {
            Ok(p) => {
                tracing::info!(path = %item.path, dest = %p.dest.display(), bytes = item.fp.size, "drained");
                s.drained.insert(item.path.clone(), item.fp);
                s.failed.remove(&item.path);
                s.st.drained_files += 1;
                s.st.drained_bytes += item.fp.size;
                s.st.recent.push(Drained {
                    path: item.path.clone(),
                    size: item.fp.size,
                    dest: p.dest,
                    seconds: p.seconds,
                    evicted: p.evicted,
                });
                let n = s.st.recent.len();
                if n > 32 {
                    s.st.recent.drain(..n - 32);
                }
            }
            Err(AgentError::Stopped(_)) => {}
            Err(AgentError::Changed(p)) => {
                tracing::info!(path = %p, "changed during the copy; will try again");
                s.changed += 1;
            }
            Err(e) => {
                let attempts = s
                    .failed
                    .get(&item.path)
                    .filter(|f| f.fp == item.fp)
                    .map_or(0, |f| f.report.attempts)
                    + 1;
                let transient = e.is_transient();
                let retry_at = transient.then(|| {
                    let back = self.cfg.interval.as_secs_f64() * 2f64.powi(attempts.min(16) as i32 - 1);
                    Instant::now() + Duration::from_secs_f64(back.min(self.cfg.retry_max.as_secs_f64()))
                });
                tracing::error!(path = %item.path, error = %e, attempts, "drain failed");
                let chunk = match &e {
                    AgentError::Corrupt { logical, .. } => Some(*logical),
                    _ => None,
                };
                s.failed.insert(
                    item.path.clone(),
                    Failure {
                        fp: item.fp,
                        report: Failed {
                            path: item.path.clone(),
                            error: e.to_string(),
                            errno: e.errno(),
                            chunk,
                            attempts,
                            will_retry: transient,
                        },
                        retry_at,
                    },
                );
            }
        }
    }

    // ------------------------------------------------------------------ staging

    fn unchanged(&self, plan: &Plan) -> bool {
        let Ok(st) = self.store.stat(&plan.item.path) else {
            return false;
        };
        if Fp::of(&st) != plan.item.fp || st.state != WriteState::Complete {
            return false;
        }
        let Ok(now) = self.store.chunk_list(&plan.item.path) else {
            return false;
        };
        now.len() == plan.chunks.len()
            && now.iter().zip(&plan.chunks).all(|(a, b)| {
                a.logical == b.logical && a.chunk_id == b.chunk_id && a.written == b.written && a.crc == b.crc
            })
    }

    /// A CRC mismatch is corruption only if the file did not change meanwhile.
    fn mismatch(&self, plan: &Plan, logical: u32, stored: u32, computed: u32) -> AgentError {
        if self.unchanged(plan) {
            tracing::error!(path = %plan.item.path, logical, stored, computed, "corrupt chunk in the store");
            AgentError::Corrupt {
                path: plan.item.path.clone(),
                logical,
                stored,
                computed,
            }
        } else {
            AgentError::Changed(plan.item.path.clone())
        }
    }

    fn stage(&self, item: Item, done: Arc<AtomicU64>) -> Result<Plan, AgentError> {
        let path = item.path.clone();
        let changed = || AgentError::Changed(path.clone());
        let st = self.store.stat(&item.path)?;
        if Fp::of(&st) != item.fp || st.state != WriteState::Complete {
            return Err(changed());
        }
        let chunks = self.store.chunk_list(&item.path)?;
        let cs = self.cs;
        let size = item.fp.size;
        let by: HashMap<u32, &ChunkInfo> = chunks.iter().map(|c| (c.logical, c)).collect();
        let mut blocks = Vec::new();
        for l in 0..size.div_ceil(cs) {
            let len = (size - l * cs).min(cs) as usize;
            let src = match by.get(&(l as u32)) {
                None => Src::Hole,
                Some(c) => {
                    let Some(crc) = c.crc else { return Err(changed()) };
                    if c.written > cs {
                        return Err(changed());
                    }
                    let written = c.written as usize;
                    match c.location {
                        ChunkLocation::Memory(off) => Src::Mem { off, written, crc },
                        ChunkLocation::Spill(off) => Src::Spill { off, written, crc },
                    }
                }
            };
            blocks.push(Block {
                logical: l as u32,
                len,
                src,
            });
        }
        let plan = Plan {
            mode: st.mode & 0o777,
            content: Mutex::new(vec![0; blocks.len()]),
            item,
            chunks,
            blocks,
            done,
        };
        if !self.unchanged(&plan) {
            return Err(changed());
        }
        // Holes are known now; data chunks get their CRC when verified in write_unit.
        let content: Vec<u32> = plan
            .blocks
            .iter()
            .map(|b| match b.src {
                Src::Hole => crc32c_append_zeros(0, b.len),
                _ => 0,
            })
            .collect();
        *lock(&plan.content) = content;
        Ok(plan)
    }

    // ------------------------------------------------------------------ flushing

    /// Create `dir` and its missing parents durably; remove our node's temporary files
    /// left there by a killed agent (once per directory per run).
    fn prepare_dir(&self, dir: &Path) -> Result<(), AgentError> {
        if lock(&self.dirs_ready).contains(dir) {
            return Ok(());
        }
        let mut missing = Vec::new();
        let mut cur = dir;
        loop {
            match self.io.len(cur) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    missing.push(cur.to_path_buf());
                    match cur.parent() {
                        Some(p) if !p.as_os_str().is_empty() => cur = p,
                        _ => break,
                    }
                }
                Err(e) => return Err(AgentError::dest("stat", cur, e)),
            }
        }
        for d in missing.iter().rev() {
            match self.io.mkdir(d) {
                Ok(()) => {
                    if let Some(p) = d.parent() {
                        self.io.sync_dir(p).map_err(|e| AgentError::dest("fsync", p, e))?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(AgentError::dest("mkdir", d, e)),
            }
        }
        let prefix = tmp_prefix(&self.cfg.node_id);
        for e in self.io.list(dir).map_err(|e| AgentError::dest("list", dir, e))? {
            let Some(rest) = e.name.strip_prefix(&prefix) else {
                continue;
            };
            let pid = rest.split('.').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !sys::pid_alive(p)) {
                tracing::info!(file = %e.name, "removing a temporary file left by a killed agent");
                let _ = self.io.remove(&dir.join(&e.name));
            }
        }
        lock(&self.dirs_ready).insert(dir.to_path_buf());
        Ok(())
    }

    /// The gathered writes of `plan` (see [`split_units`]).
    fn units(&self, plan: &Plan) -> Vec<(usize, usize)> {
        let lens: Vec<usize> = plan.blocks.iter().map(|b| b.len).collect();
        split_units(
            &lens,
            self.cs as usize,
            self.cfg.write_size,
            self.cfg.io_threads,
            self.cfg.direct,
        )
    }

    /// `len` bytes at offset `off` of the data region (a chunk list entry that points
    /// outside it is refused as a store error, never read).
    fn region_slice(&self, off: u64, len: usize) -> Result<RegionSlice<'_>, AgentError> {
        self.region.slice(off, len).ok_or_else(|| {
            AgentError::Store(ckptfs_store::StoreError::Invalid(format!(
                "chunk bytes {off}+{len} lie outside the {}-byte data region",
                self.region.len()
            )))
        })
    }

    /// Verify a unit's memory chunks in place (the verifier thread, ahead of the writers).
    fn verify_mem(&self, plan: &Plan, range: (usize, usize)) -> Result<(), AgentError> {
        if self.stopping() {
            return Err(AgentError::Stopped(plan.item.path.clone()));
        }
        for b in &plan.blocks[range.0..range.1] {
            if let Src::Mem { off, written, crc } = b.src {
                let data = self.region_slice(off, written)?;
                data.populate();
                let got = data.crc32c();
                if got != crc {
                    return Err(self.mismatch(plan, b.logical, crc, got));
                }
                let content = if written <= b.len {
                    crc32c_append_zeros(got, b.len - written)
                } else {
                    data.prefix(b.len).crc32c()
                };
                lock(&plan.content)[b.logical as usize] = content;
            }
        }
        Ok(())
    }

    /// Write one unit whose memory chunks `verify_mem` has checked; its spill chunks are
    /// read and checked here.
    fn write_unit(
        &self,
        plan: &Plan,
        f: &dyn crate::dest::DestFile,
        tmp: &Path,
        range: (usize, usize),
    ) -> Result<(), AgentError> {
        if self.stopping() {
            return Err(AgentError::Stopped(plan.item.path.clone()));
        }
        let blocks = &plan.blocks[range.0..range.1];
        let mut bufs: Vec<AlignedBuf> = Vec::new();
        // Read (and verify) spill chunks first: the slices below borrow the buffers.
        for b in blocks {
            if let Src::Spill { off, written, crc } = b.src {
                let mut buf = AlignedBuf::zeroed(self.cs as usize);
                let spill = self.spill.as_ref().expect("spill chunk without a spill file");
                crate::dest::pread_exact(spill, &mut buf[..written], off)
                    .map_err(|e| AgentError::dest("read spill file", "spill", e))?;
                let got = crc32c(&buf[..written]);
                if got != crc {
                    return Err(self.mismatch(plan, b.logical, crc, got));
                }
                lock(&plan.content)[b.logical as usize] = content_crc(got, &buf[..written], b.len);
                bufs.push(buf);
            }
        }
        let mut iov: Vec<IoPart<'_>> = Vec::with_capacity(blocks.len() * 2);
        let mut spill_bufs = bufs.iter();
        let mut total = 0;
        for b in blocks {
            let data: IoPart<'_> = match b.src {
                Src::Mem { off, written, .. } => IoPart::Region(self.region_slice(off, written.min(b.len))?),
                Src::Spill { written, .. } => {
                    IoPart::Buf(&spill_bufs.next().expect("one buffer per spill block")[..written.min(b.len)])
                }
                Src::Hole => IoPart::Buf(&[]),
            };
            let n = data.len();
            if n > 0 {
                iov.push(data);
            }
            if n < b.len {
                iov.push(IoPart::Buf(&self.zeros[..b.len - n]));
            }
            total += b.len;
        }
        if let Some(t) = &self.throttle {
            t.acquire(total);
        }
        let off = blocks[0].logical as u64 * self.cs;
        f.write_at(&iov, off)
            .map_err(|e| AgentError::dest("write", tmp, e))?;
        crash_point("agent-mid-write");
        // No second CRC pass over memory chunks here: a legitimate writer cannot
        // change a file without changing what `unchanged` checks after the fsync, and
        // a stray corruption inside this window is caught at restore, where every
        // chunk is checked against the manifest (docs/agent.md, failure case 9).
        plan.done.fetch_add(total as u64, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&self, plan: &Plan, threads: usize) -> Result<Published, AgentError> {
        let w = self.write_phase(plan, threads)?;
        self.commit_phase(plan, w)
    }

    /// Create the temporary file and write every block into it (not yet durable).
    fn write_phase(&self, plan: &Plan, threads: usize) -> Result<Written<'_>, AgentError> {
        if self.stopping() {
            return Err(AgentError::Stopped(plan.item.path.clone()));
        }
        let t0 = Instant::now();
        let path = &plan.item.path;
        let dest = self.dest_of(path);
        let dir = dest.parent().expect("store paths have a parent").to_path_buf();
        let name = dest
            .file_name()
            .expect("store files have a name")
            .to_string_lossy()
            .into_owned();
        self.prepare_dir(&dir)?;
        let tmp = dir.join(format!(
            "{}{}.{:016x}",
            tmp_prefix(&self.cfg.node_id),
            std::process::id(),
            fnv(&name)
        ));
        let io = &*self.io;
        let opts = CreateOpts {
            direct: self.cfg.direct,
            ost: self.target.ost,
            mode: plan.mode | 0o200,
        };
        let f = match io.create(&tmp, &opts) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = io.remove(&tmp);
                io.create(&tmp, &opts)
            }
            r => r,
        }
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                // The directory was removed behind our back: create it again next time.
                lock(&self.dirs_ready).remove(&dir);
            }
            AgentError::dest("create", &tmp, e)
        })?;
        // Removes the temporary file if writing fails; handed on to the commit.
        let early = TmpGuard {
            io,
            path: tmp.clone(),
            armed: true,
        };
        f.preallocate(plan.item.fp.size)
            .map_err(|e| AgentError::dest("allocate space for", &tmp, e))?;
        crash_point("agent-after-create");
        let units = self.units(plan);
        // One verifier thread checks the memory chunks of unit i+1.. while the IO
        // threads write units ..i, so that every IO thread goes from one write straight
        // to the next (the check inside the IO thread left the disk with one write
        // in flight instead of `threads` for ~3 ms of every ~16 ms). A unit is written only
        // after it passed; the verifier runs at most `n` units ahead of the writers,
        // which keeps the window between a check and its write short.
        let n = threads.min(units.len()).max(1);
        let pipe = Mutex::new(Pipe::default());
        let moved = Condvar::new();
        let first_err: Mutex<Option<AgentError>> = Mutex::new(None);
        let fail = |e: AgentError| {
            lock(&first_err).get_or_insert(e);
            lock(&pipe).failed = true;
            moved.notify_all();
        };
        let verify = || {
            for (i, &u) in units.iter().enumerate() {
                let mut g = lock(&pipe);
                while !g.failed && i >= g.taken + n {
                    g = moved.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                if g.failed {
                    return;
                }
                drop(g);
                if let Err(e) = self.verify_mem(plan, u) {
                    return fail(e);
                }
                lock(&pipe).ready = i + 1;
                moved.notify_all();
            }
        };
        let write = || loop {
            let mut g = lock(&pipe);
            while !g.failed && g.taken < units.len() && g.taken >= g.ready {
                g = moved.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            if g.failed || g.taken >= units.len() {
                return;
            }
            let u = units[g.taken];
            g.taken += 1;
            drop(g);
            moved.notify_all();
            if let Err(e) = self.write_unit(plan, &*f, &tmp, u) {
                return fail(e);
            }
        };
        std::thread::scope(|sc| {
            for _ in 0..n {
                sc.spawn(|| {
                    let _ = sys::set_priority(self.cfg.priority);
                    write()
                });
            }
            verify();
        });
        if let Some(e) = lock(&first_err).take() {
            return Err(e);
        }
        Ok(Written {
            f,
            guard: early,
            dest,
            dir,
            name,
            t0,
        })
    }

    /// Make the temporary file durable, re-check, publish it and record it.
    fn commit_phase(&self, plan: &Plan, w: Written<'_>) -> Result<Published, AgentError> {
        let r = self.publish_phase(plan, w)?;
        let (_, res) = self.record(vec![r]).pop().expect("one file recorded");
        res
    }

    /// Make the temporary file durable, re-check the store file, rename it into place.
    fn publish_phase(&self, plan: &Plan, w: Written<'_>) -> Result<Renamed, AgentError> {
        let Written {
            f,
            mut guard,
            dest,
            dir,
            name,
            t0,
        } = w;
        let io = &*self.io;
        let tmp = guard.path.clone();
        let path = &plan.item.path;
        f.sync().map_err(|e| AgentError::dest("fsync", &tmp, e))?;
        drop(f);
        crash_point("agent-after-fsync");
        if !self.unchanged(plan) {
            return Err(AgentError::Changed(path.clone()));
        }
        let content = lock(&plan.content).clone();
        let size = plan.item.fp.size;
        let mut crc = 0;
        for (b, c) in plan.blocks.iter().zip(&content) {
            crc = crc_combine(crc, *c, b.len as u64);
        }
        let entry = Entry {
            store_path: path.clone(),
            size,
            crc32c: crc,
            chunk_size: self.cs,
            chunk_crc32c: content,
            mode: plan.mode,
            mtime_ns: plan.item.fp.mtime_ns,
            drained_ns: 0,
        };
        // Replacing a published file: drop its entry first, so the manifest never
        // describes content the file does not have.
        let stale = self.with_manifest(&dir, |m| {
            m.files
                .get(&name)
                .is_some_and(|e| e.crc32c != crc || e.size != size)
        })?;
        if stale {
            self.with_manifest(&dir, |m| {
                m.files.remove(&name);
                m.save(io, &dir)
            })??;
        }
        crash_point("agent-before-rename");
        io.rename(&tmp, &dest)
            .map_err(|e| AgentError::dest("rename", &dest, e))?;
        guard.armed = false;
        crash_point("agent-after-rename");
        io.sync_dir(&dir)
            .map_err(|e| AgentError::dest("fsync", &dir, e))?;
        Ok(Renamed {
            item: plan.item.clone(),
            dest,
            dir,
            name,
            entry,
            t0,
        })
    }

    /// Add renamed files of one directory to its manifest with one atomic save, then
    /// evict them if asked. Returns each file's outcome.
    fn record(&self, batch: Vec<Renamed>) -> Vec<(Item, Result<Published, AgentError>)> {
        let Some(dir) = batch.first().map(|b| b.dir.clone()) else {
            return Vec::new();
        };
        let io = &*self.io;
        let saved = self
            .with_manifest(&dir, |m| {
                let now = now_ns();
                for b in &batch {
                    m.files.insert(
                        b.name.clone(),
                        Entry {
                            drained_ns: now,
                            ..b.entry.clone()
                        },
                    );
                }
                let r = m.save(io, &dir);
                if r.is_err() {
                    for b in &batch {
                        m.files.remove(&b.name);
                    }
                }
                r
            })
            .and_then(|r| r);
        crash_point("agent-after-manifest");
        let mut first_err = saved.err();
        let errno = first_err.as_ref().map(|e| e.errno());
        batch
            .into_iter()
            .map(|b| {
                if let Some(errno) = errno {
                    let e = first_err.take().unwrap_or_else(|| {
                        AgentError::dest("save manifest in", &dir, io::Error::from_raw_os_error(errno))
                    });
                    return (b.item, Err(e));
                }
                let mut evicted = false;
                if self.cfg.evict {
                    match self.store.stat(&b.item.path) {
                        Ok(st) if Fp::of(&st) == b.item.fp && st.state == WriteState::Complete => {
                            match self.store.unlink(&b.item.path) {
                                Ok(()) => evicted = true,
                                Err(e) => return (b.item, Err(e.into())),
                            }
                        }
                        _ => {}
                    }
                }
                let p = Published {
                    dest: b.dest,
                    seconds: b.t0.elapsed().as_secs_f64(),
                    evicted,
                };
                (b.item, Ok(p))
            })
            .collect()
    }

    fn finish_batch(&self, batch: Vec<Renamed>) {
        for (item, r) in self.record(batch) {
            self.finish(&item, r);
        }
    }
}

/// Group blocks of lengths `lens` into gathered writes (ranges of block indices) of at
/// most `write_size` bytes; with O_DIRECT a block of unaligned length goes alone (it is
/// written through the page cache).
///
/// The writes ramp up and down: the first ones double from one chunk, so the first IO
/// thread starts once one chunk is verified (not a whole `write_size`), and near the end
/// each takes at most 1/`threads` of what is left, so the IO threads finish together
/// instead of leaving the last write alone on the device.
fn split_units(
    lens: &[usize],
    cs: usize,
    write_size: usize,
    threads: usize,
    direct: bool,
) -> Vec<(usize, usize)> {
    let threads = threads.max(1);
    let total: usize = lens.iter().sum();
    let limit = |done: usize| {
        write_size
            .min(done.max(cs))
            .min(((total - done) / threads).max(cs))
    };
    let mut out = Vec::new();
    let (mut start, mut bytes, mut done) = (0, 0, 0);
    let mut lim = limit(0);
    for (i, &len) in lens.iter().enumerate() {
        let odd = direct && !len.is_multiple_of(DIRECT_ALIGN);
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

/// CRC32C of a block's file content: the checked bytes (`crc` covers `data`) followed
/// by zeros up to `len`, or only the first `len` bytes if more were written.
fn content_crc(crc: u32, data: &[u8], len: usize) -> u32 {
    if data.len() <= len {
        crc32c_append_zeros(crc, len - data.len())
    } else {
        crc32c(&data[..len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_combine_matches_the_crc_of_the_concatenation() {
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for split in [0, 1, 7, 4096, 65_536, 69_999, 70_000] {
            let (a, b) = data.split_at(split);
            assert_eq!(
                crc_combine(crc32c(a), crc32c(b), b.len() as u64),
                crc32c(&data),
                "split {split}"
            );
        }
        let big = 3 << 30;
        assert_eq!(
            crc_combine(0x1234_5678, 0x9abc_def0, big),
            crc_fast::checksum_combine(crc_fast::CrcAlgorithm::Crc32Iscsi, 0x1234_5678, 0x9abc_def0, big)
                as u32
        );
    }

    /// Sizes in chunks of each unit.
    fn sizes(lens: &[usize], cs: usize, ws: usize, threads: usize, direct: bool) -> Vec<usize> {
        let units = split_units(lens, cs, ws, threads, direct);
        // The units cover every block once, in order.
        assert_eq!(units.first().map(|u| u.0), Some(0));
        assert!(units.windows(2).all(|w| w[0].1 == w[1].0));
        assert_eq!(units.last().map(|u| u.1), Some(lens.len()));
        units
            .iter()
            .map(|u| lens[u.0..u.1].iter().sum::<usize>() / cs)
            .collect()
    }

    #[test]
    fn writes_ramp_up_from_one_chunk_and_down_so_the_io_threads_end_together() {
        let mb = 1 << 20;
        let lens = vec![mb; 64];
        assert_eq!(
            sizes(&lens, mb, 16 * mb, 2, true),
            [1, 1, 2, 4, 8, 16, 16, 8, 4, 2, 1, 1]
        );
        // One IO thread: nothing to balance at the end.
        assert_eq!(sizes(&lens, mb, 16 * mb, 1, true), [1, 1, 2, 4, 8, 16, 16, 16]);
        // Chunks as large as a write: one chunk per write.
        assert_eq!(sizes(&lens[..4], mb, mb, 2, false), [1, 1, 1, 1]);
        // O_DIRECT: the unaligned last block goes alone.
        let mut odd = vec![mb; 40];
        odd.push(100);
        let u = split_units(&odd, mb, 8 * mb, 2, true);
        assert_eq!(u.last(), Some(&(40, 41)));
        assert!(u.iter().all(|r| odd[r.0..r.1].iter().sum::<usize>() <= 8 * mb));
    }
}
