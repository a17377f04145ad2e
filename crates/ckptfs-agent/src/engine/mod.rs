//! The drain engine, the store -> PFS path of the mover ([`crate::mover`]): scan the
//! store level for complete files the policy routes to the PFS (`scan.rs`), stage them
//! (check that the file is complete and stable, snapshot its chunk list: `stage.rs`),
//! move their bytes with a [`Mover`] from the store level's reader into the PFS level's
//! writer, publish atomically and record them in the manifest (`flush.rs`, through
//! [`crate::pfs`]).
//!
//! The drain's mover is configured from the agent's settings: `--io-threads` writer
//! threads per file ([`MoveOptions::writers`]), writes of up to `--write-size` bytes
//! gathered from the store's chunks ([`MoveOptions::write_size`]: each chunk's CRC32C
//! checked in place just ahead of its write, the data region's ranges handed to one
//! gathered write, O_DIRECT where aligned), `--max-bw` as a pacing limit shared by every
//! writer ([`Pace`]), `--priority` as the nice/ionice of its threads
//! ([`MoveOptions::thread_init`]), and its progress callback as the in-flight bytes of
//! `ckptfs agent status`. No resend inside the mover: a failed file is the drain's to
//! retry (with back-off, below).
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

mod flush;
mod scan;
mod stage;

use crate::config::{AgentConfig, Target};
use crate::dest::{DestIo, PosixDest};
use crate::error::AgentError;
use crate::mover::{DrainPolicy, MovePolicy};
use crate::pfs::publish::Renamed;
use crate::pfs::PfsLevel;
use crate::status::{self, AgentStatus, Drained, Failed, InFlight, LevelCost, Queued};
use crate::sys;
use ckptfs_level::{Direction, Level, LevelError, MoveOptions, Mover, Pace, Progress, RateLimit};
use ckptfs_runtime::{InstanceLock, RuntimeDir, Shutdown};
use ckptfs_settings::now_ns;
use ckptfs_store::level::StoreLevel;
use ckptfs_store::{Stat, Store};
use flush::Filled;
use stage::Plan;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex, MutexGuard};
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

/// The bytes moved so far of each file in flight, by path (the movers' progress).
type Flights = Arc<Mutex<HashMap<String, Arc<AtomicU64>>>>;

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
    /// The source level: the node store (data region, spill file).
    local: StoreLevel,
    /// The destination level: this node's PFS target, its manifests.
    pfs: PfsLevel,
    /// Which complete files go to the PFS, and whether their memory copy is freed.
    policy: Arc<dyn MovePolicy>,
    cs: u64,
    /// Moves the bytes of a marshaled flush: `--io-threads` writers per file.
    mover: Mover,
    /// Moves the bytes of an unmarshaled flush: one writer per file, many files at once
    /// (the same rate limit as `mover`).
    mover1: Mover,
    flights: Flights,
    stop: Arc<AtomicBool>,
    /// The caller's shutdown trigger of the current `run` (none between runs).
    shutdown: Mutex<Option<Shutdown>>,
    state: Mutex<State>,
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn parent_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((p, _)) => p,
    }
}

/// With marshaling off, at most this many files are flushed at once.
const UNMARSHALED_MAX_FILES: usize = 16;

/// The drain's mover (see the module documentation): `writers` per file.
fn drain_mover(
    cfg: &AgentConfig,
    writers: usize,
    limiter: Option<Arc<dyn RateLimit>>,
    flights: &Flights,
) -> Mover {
    let flights = flights.clone();
    let priority = cfg.priority;
    Mover::new(MoveOptions {
        streams: 1,
        window: 1,
        max_bw: None,
        retries: 0,
        progress: Some(Arc::new(move |p: &Progress| {
            if let Some(done) = lock(&flights).get(&p.path) {
                done.store(p.file_bytes, Ordering::Relaxed);
            }
        })),
        thread_init: Some(Arc::new(move || {
            let _ = sys::set_priority(priority);
        })),
        write_size: cfg.write_size,
        writers: writers.max(1),
        limiter,
    })
}

impl Agent {
    /// An agent draining `store` to the POSIX destination of `cfg`.
    pub fn new(store: &Store, cfg: AgentConfig) -> Result<Agent, AgentError> {
        let io = Arc::new(PosixDest::new(cfg.lfs.clone()));
        Self::with_dest(store, cfg, io)
    }

    /// An agent with its own destination I/O (fault injection in tests); its policy is
    /// `cfg.policy`, else `--every`/`--evict`'s [`DrainPolicy`].
    pub fn with_dest(store: &Store, cfg: AgentConfig, io: Arc<dyn DestIo>) -> Result<Agent, AgentError> {
        let policy = match &cfg.policy {
            Some(p) => p.clone(),
            None => Arc::new(DrainPolicy::from_config(&cfg)),
        };
        Self::with_policy(store, cfg, io, policy)
    }

    /// An agent whose choice of files (and of freeing their memory copy) is `policy`'s
    /// rather than `--every`/`--evict`'s.
    pub fn with_policy(
        store: &Store,
        cfg: AgentConfig,
        io: Arc<dyn DestIo>,
        policy: Arc<dyn MovePolicy>,
    ) -> Result<Agent, AgentError> {
        let target = cfg.target()?.clone();
        let name = store.name().to_string();
        // The lock and status files live in the caller's runtime directory; a killed
        // predecessor's temporary status file is removed with the lock taken.
        let (rt, lock) = status::take_lock(&name)?;
        let info = store.info();
        // The source level maps the data region and holds the store's own spill file
        // descriptor (checked: O_NOFOLLOW, owner, mode, when the store was attached).
        let local = StoreLevel::new(store)?;
        let pfs = PfsLevel::new(target.clone(), io, &cfg.node_id, &name, cfg.direct);
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
        let limiter = cfg.max_bw.map(|b| Arc::new(Pace::new(b)) as Arc<dyn RateLimit>);
        let flights = Flights::default();
        Ok(Agent {
            sh: Arc::new(Shared {
                mover: drain_mover(&cfg, cfg.io_threads, limiter.clone(), &flights),
                mover1: drain_mover(&cfg, 1, limiter, &flights),
                flights,
                store: store.clone(),
                local,
                pfs,
                policy,
                cs,
                stop: Arc::new(AtomicBool::new(false)),
                shutdown: Mutex::new(None),
                state: Mutex::new(State {
                    st,
                    ..Default::default()
                }),
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
        self.sh.pfs.target()
    }

    /// The levels this agent moves files between: the node store (source) and the PFS
    /// target (destination), with their measured costs.
    pub fn levels(&self) -> (&StoreLevel, &PfsLevel) {
        (&self.sh.local, &self.sh.pfs)
    }

    /// Bytes this agent's movers have moved from the store level to the PFS level (every
    /// drained byte, and those of copies abandoned part way).
    pub fn bytes_moved(&self) -> u64 {
        self.sh.mover.bytes_moved() + self.sh.mover1.bytes_moved()
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
        out.levels = vec![LevelCost::of(&self.local), LevelCost::of(&self.pfs)];
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

    // ------------------------------------------------------------------ the queue

    fn pop(&self) -> Option<Item> {
        let mut s = lock(&self.state);
        let item = s.queue.pop_front()?;
        let done = Arc::new(AtomicU64::new(0));
        lock(&self.flights).insert(item.path.clone(), done.clone());
        s.in_flight.insert(
            item.path.clone(),
            Flight {
                size: item.fp.size,
                done: done.clone(),
            },
        );
        Some(item)
    }

    fn process(&self) {
        if self.cfg.marshal {
            std::thread::scope(|sc| {
                let (tx, rx) = sync_channel::<Plan>(0);
                sc.spawn(move || {
                    let _ = sys::set_priority(self.cfg.priority);
                    // Algorithm 1: stage under the stage mutex, hand over when the flush
                    // slot frees up (the rendezvous send), then stage the next one.
                    while !self.stopping() {
                        let Some(item) = self.pop() else { break };
                        match self.stage(item.clone()) {
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
                let (ctx, crx) = sync_channel::<(Plan, Filled<'_>)>(0);
                sc.spawn(move || {
                    // Files of one directory whose commits queue up behind each other
                    // share one manifest save.
                    let mut batch: Vec<(Item, Renamed)> = Vec::new();
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
                                if batch.first().is_some_and(|b| b.1.dir != r.1.dir) {
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
                    match self.write_phase(&plan, &self.mover) {
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
                            let Some(item) = self.pop() else { break };
                            let r = self
                                .stage(item.clone())
                                .and_then(|p| self.flush(&p, &self.mover1));
                            self.finish(&item, r);
                        }
                    });
                }
            });
        }
    }

    fn finish(&self, item: &Item, r: Result<Published, AgentError>) {
        lock(&self.flights).remove(&item.path);
        let mut s = lock(&self.state);
        s.in_flight.remove(&item.path);
        match r {
            Ok(p) => {
                tracing::info!(path = %item.path, dest = %p.dest.display(), bytes = item.fp.size, "drained");
                // The levels' costs, measured from this agent's own transfers.
                self.local.meter().record(Direction::Get, item.fp.size, p.seconds);
                self.pfs.meter().record(Direction::Put, item.fp.size, p.seconds);
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
                    AgentError::Level(LevelError::Corrupt { chunk, .. }) => u32::try_from(*chunk).ok(),
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
}
