//! The agent's state as seen from other processes (`ckptfs agent status`, `ckptfs
//! status`): a small JSON file next to the segment, `/dev/shm/ckptfs.NAME.agent.json`,
//! replaced atomically (write a temporary file, rename) a few times per second while
//! the agent works. Whether the agent is alive is decided by its lock file
//! (`/dev/shm/ckptfs.NAME.agent.lock`, held with `flock` for the agent's life), not by
//! the pid, which may be reused.

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
}

/// The status file of store `name`.
pub fn status_path(name: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}.agent.json",
        ckptfs_store::segment_path(name).display()
    ))
}

/// The lock file of store `name`'s agent.
pub fn lock_path(name: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}.agent.lock",
        ckptfs_store::segment_path(name).display()
    ))
}

/// The state of store `name`'s agent, if an agent ever ran for it.
pub fn status(store_name: &str) -> Option<AgentStatus> {
    let text = std::fs::read(status_path(store_name)).ok()?;
    let mut s: AgentStatus = serde_json::from_slice(&text).ok()?;
    s.running = crate::sys::is_locked(&lock_path(store_name));
    Some(s)
}

/// Remove the status and lock files of store `name` (after destroying the store).
pub fn remove_status(store_name: &str) {
    let _ = std::fs::remove_file(status_path(store_name));
    let _ = std::fs::remove_file(lock_path(store_name));
    remove_stale_tmp(store_name);
}

/// Temporary status files (`NAME.agent.json.PID.tmp`) of store `name` whose writer was
/// killed between the write and the rename. Only the agent holding the lock writes
/// status files, so whoever holds it (or destroys the store) may remove them all.
pub fn stale_tmp_files(store_name: &str) -> Vec<PathBuf> {
    let path = status_path(store_name);
    let (Some(dir), Some(base)) = (path.parent(), path.file_name().and_then(|b| b.to_str())) else {
        return Vec::new();
    };
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let Some(n) = n.to_str() else { return false };
            n.strip_prefix(base)
                .and_then(|r| r.strip_prefix('.'))
                .and_then(|r| r.strip_suffix(".tmp"))
                .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect()
}

/// Remove [`stale_tmp_files`].
pub(crate) fn remove_stale_tmp(store_name: &str) {
    for p in stale_tmp_files(store_name) {
        let _ = std::fs::remove_file(p);
    }
}

pub(crate) fn write_status(s: &AgentStatus) -> std::io::Result<()> {
    let path = status_path(&s.store);
    let tmp = PathBuf::from(format!("{}.{}.tmp", path.display(), std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(s).expect("status serializes"))?;
    std::fs::rename(&tmp, &path)
}
