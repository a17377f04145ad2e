//! The agent's state as seen from other processes (`ckptfs agent status`, `ckptfs
//! status`): a small JSON file `NAME.agent.json` in the caller's runtime directory
//! (`ckptfs_runtime`: `$XDG_RUNTIME_DIR/ckptfs`, else `/run/user/UID/ckptfs`, else
//! `/dev/shm/ckptfs-UID`; owned by the caller, mode 0700), replaced atomically (write a
//! temporary file, rename) a few times per second while the agent works. Whether the
//! agent is alive is decided by its lock file (`NAME.agent.lock` in the same directory,
//! held with `flock` for the agent's life), not by the pid, which may be reused. No other
//! user can create, squat or redirect these files.

use crate::error::AgentError;
use ckptfs_runtime::{InstanceLock, RuntimeDir, RuntimeError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A file waiting to be drained.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Queued {
    /// Store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

/// A file being copied now.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InFlight {
    /// Store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Bytes written to the destination so far.
    pub done: u64,
}

/// A published file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Drained {
    /// Store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Destination file.
    pub dest: PathBuf,
    /// Seconds from the first write to the directory fsync after the rename.
    pub seconds: f64,
    /// Whether the store copy was freed afterwards.
    pub evicted: bool,
}

/// A file whose drain failed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Failed {
    /// Store path.
    pub path: String,
    /// What went wrong.
    pub error: String,
    /// POSIX errno of the error.
    pub errno: i32,
    /// The corrupt chunk (logical index), for checksum failures.
    pub chunk: Option<u32>,
    /// Attempts so far.
    pub attempts: u32,
    /// Whether it will be retried without a change to the file.
    pub will_retry: bool,
}

/// A level's measured cost, from this agent's own transfers (bytes per second smoothed
/// exponentially; `ckptfs_level::cost`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LevelCost {
    /// The level (`local`, `pfs`).
    pub level: String,
    /// Which one (`local:STORE`, `pfs:DIR`).
    pub name: String,
    /// Smoothed bytes per second written to it; None until measured.
    pub put_bps: Option<f64>,
    /// Smoothed bytes per second read from it; None until measured.
    pub get_bps: Option<f64>,
    /// Files written to it.
    pub puts: u64,
    /// Files read from it.
    pub gets: u64,
}

impl LevelCost {
    /// The cost of `l` as measured so far.
    pub fn of(l: &dyn ckptfs_level::Level) -> LevelCost {
        let c = l.cost();
        LevelCost {
            level: l.kind().name().to_string(),
            name: l.name(),
            put_bps: c.put_bps,
            get_bps: c.get_bps,
            puts: c.puts,
            gets: c.gets,
        }
    }
}

/// Everything `ckptfs agent status` shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentStatus {
    /// Store name.
    pub store: String,
    /// Pid of the agent.
    pub pid: u32,
    /// Whether that agent is still running (decided when reading, from the lock file).
    pub running: bool,
    /// Node id.
    pub node: String,
    /// The destination target of this node.
    pub target: String,
    /// `once` or `daemon`.
    pub mode: String,
    /// Staged marshaling on?
    pub marshal: bool,
    /// O_DIRECT requested?
    pub direct: bool,
    /// IO threads.
    pub io_threads: usize,
    /// Bandwidth cap, MB/s.
    pub max_bw_mbps: Option<f64>,
    /// When the agent started, ns since the epoch.
    pub started_ns: u64,
    /// When this status was written, ns since the epoch.
    pub updated_ns: u64,
    /// Files waiting, in drain order.
    pub queued: Vec<Queued>,
    /// Files being copied.
    pub in_flight: Vec<InFlight>,
    /// Files published since the agent started.
    pub drained_files: u64,
    /// Bytes published since the agent started.
    pub drained_bytes: u64,
    /// Files found already published (and unchanged) when the agent started.
    pub already_drained: u64,
    /// The most recently published files (newest last, at most 32).
    pub recent: Vec<Drained>,
    /// Files whose last attempt failed.
    pub failed: Vec<Failed>,
    /// Complete files left alone by `--every`.
    pub skipped_by_policy: u64,
    /// Copies abandoned because the file changed meanwhile.
    pub changed_during_copy: u64,
    /// Bytes published per second of copying.
    pub bandwidth_mbps: f64,
    /// Ordinal of every checkpoint directory seen (`--every`), kept across restarts.
    pub dirs: BTreeMap<String, u64>,
    /// The measured cost of the levels this agent moves files between (source first).
    #[serde(default)]
    pub levels: Vec<LevelCost>,
}

fn status_name(store: &str) -> String {
    format!("{store}.agent.json")
}

fn lock_name(store: &str) -> String {
    format!("{store}.agent.lock")
}

/// The status file of store `name` (in the caller's runtime directory).
pub fn status_path(name: &str) -> PathBuf {
    RuntimeDir::default_path().join(status_name(name))
}

/// The lock file of store `name`'s agent (in the caller's runtime directory).
pub fn lock_path(name: &str) -> PathBuf {
    RuntimeDir::default_path().join(lock_name(name))
}

/// The state of store `name`'s agent, if an agent of the caller ever ran for it.
pub fn status(store_name: &str) -> Option<AgentStatus> {
    let dir = RuntimeDir::for_caller().ok()?;
    status_in(&dir, store_name)
}

fn status_in(dir: &RuntimeDir, store_name: &str) -> Option<AgentStatus> {
    let text = dir.read(&status_name(store_name)).ok()??;
    let mut s: AgentStatus = serde_json::from_slice(&text).ok()?;
    s.running = dir.is_locked(&lock_name(store_name));
    Some(s)
}

/// Remove the status and lock files of store `name` (after destroying the store).
pub fn remove_status(store_name: &str) {
    let Ok(dir) = RuntimeDir::for_caller() else {
        return;
    };
    let _ = dir.remove(&status_name(store_name));
    let _ = dir.remove(&lock_name(store_name));
    remove_stale_tmp_in(&dir, store_name);
}

fn stale_tmp_names(dir: &RuntimeDir, store_name: &str) -> Vec<String> {
    let base = status_name(store_name);
    let mut v: Vec<String> = dir
        .names()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| {
            n.strip_prefix(&base)
                .and_then(|r| r.strip_prefix('.'))
                .and_then(|r| r.strip_suffix(".tmp"))
                .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    v.sort();
    v
}

/// Temporary status files (`NAME.agent.json.PID.tmp`) of store `name` whose writer was
/// killed between the write and the rename. Only the agent holding the lock writes
/// status files, so whoever holds it (or destroys the store) may remove them all.
pub fn stale_tmp_files(store_name: &str) -> Vec<PathBuf> {
    let Ok(dir) = RuntimeDir::for_caller() else {
        return Vec::new();
    };
    stale_tmp_names(&dir, store_name)
        .into_iter()
        .map(|n| dir.file_path(&n))
        .collect()
}

fn remove_stale_tmp_in(dir: &RuntimeDir, store_name: &str) {
    for n in stale_tmp_names(dir, store_name) {
        let _ = dir.remove(&n);
    }
}

/// The runtime directory and single-instance lock of store `name`'s agent, with the
/// temporary status files of a killed predecessor removed. A lock held by another agent
/// is [`AgentError::Busy`] naming that agent's pid.
pub(crate) fn take_lock(store_name: &str) -> Result<(RuntimeDir, InstanceLock), AgentError> {
    let dir = RuntimeDir::for_caller()?;
    let lock = dir.lock(&lock_name(store_name)).map_err(|e| match e {
        RuntimeError::Held { path, pid } => AgentError::Busy {
            store: store_name.to_string(),
            pid,
            lock: path,
        },
        e => e.into(),
    })?;
    remove_stale_tmp_in(&dir, store_name);
    Ok((dir, lock))
}

/// The last status written in `dir` for store `name` (ordinals survive restarts).
pub(crate) fn previous(dir: &RuntimeDir, store_name: &str) -> Option<AgentStatus> {
    status_in(dir, store_name)
}

pub(crate) fn write_status(dir: &RuntimeDir, s: &AgentStatus) -> Result<(), RuntimeError> {
    dir.write_atomic(
        &status_name(&s.store),
        &serde_json::to_vec_pretty(s).expect("status serializes"),
    )
}
