//! The node daemon's state as seen from other processes (`ckptfs node status`): a JSON
//! file next to the segment, `/dev/shm/ckptfs.NAME.node.json`, replaced atomically, and
//! a lock file `/dev/shm/ckptfs.NAME.node.lock` held with `flock` for the daemon's life
//! (one daemon per store; alive = lock held).
//!
//! Minimal on purpose, the same scheme as the drain agent's status file: to be replaced
//! by the shared runtime directory (single-instance lock and status file in a
//! caller-owned 0700 directory) when that lands.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A peer as this daemon sees it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeerState {
    /// Its listen address.
    pub addr: String,
    /// Whether its heartbeats arrive.
    pub up: bool,
    /// Milliseconds since its last heartbeat answer (None: never).
    pub last_seen_ms: Option<u64>,
    /// Whether it is one of this node's partners now.
    pub partner: bool,
}

/// A partner copy in flight.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CopyInFlight {
    /// Store path.
    pub path: String,
    /// Partner node.
    pub to: String,
    /// Size in bytes.
    pub size: u64,
    /// Bytes acknowledged so far.
    pub done: u64,
}

/// Everything `ckptfs node status` shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeStatus {
    /// Node id.
    pub node: String,
    /// Store name.
    pub store: String,
    /// Pid of the daemon.
    pub pid: u32,
    /// Whether that daemon is still running (decided when reading, from the lock file).
    pub running: bool,
    /// Address it listens on.
    pub listen: String,
    /// Partners now (the plan's, with dead ones replaced).
    pub partners: Vec<String>,
    /// Peers by node id.
    pub peers: BTreeMap<String, PeerState>,
    /// Whether the drain to the PFS runs in this daemon.
    pub drain: bool,
    /// Partner copies sent and acknowledged since start.
    pub copies_sent: u64,
    /// Bytes of those.
    pub bytes_sent: u64,
    /// Partner copies refused by a partner (e.g. ENOSPC) since start.
    pub copies_refused: u64,
    /// Copies abandoned because the file changed meanwhile.
    pub changed_during_copy: u64,
    /// Chunks re-sent after a partner refused their CRC.
    pub chunks_resent: u64,
    /// Partner copies received and stored since start.
    pub copies_received: u64,
    /// Copies in flight.
    pub in_flight: Vec<CopyInFlight>,
    /// Files this node holds for other nodes, per source node.
    pub holding: BTreeMap<String, u64>,
}

/// The status file of store `name`.
pub fn status_path(name: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}.node.json",
        ckptfs_store::segment_path(name).display()
    ))
}

/// The lock file of store `name`'s daemon.
pub fn lock_path(name: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}.node.lock",
        ckptfs_store::segment_path(name).display()
    ))
}

/// The state of store `name`'s daemon, if one ever ran for it.
pub fn status(store_name: &str) -> Option<NodeStatus> {
    let text = std::fs::read(status_path(store_name)).ok()?;
    let mut s: NodeStatus = serde_json::from_slice(&text).ok()?;
    s.running = is_locked(&lock_path(store_name));
    Some(s)
}

/// Remove the status and lock files of store `name` (after destroying the store).
pub fn remove_status(store_name: &str) {
    let _ = std::fs::remove_file(status_path(store_name));
    let _ = std::fs::remove_file(lock_path(store_name));
}

pub(crate) fn write_status(s: &NodeStatus) -> std::io::Result<()> {
    let path = status_path(&s.store);
    let tmp = PathBuf::from(format!("{}.{}.tmp", path.display(), std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(s).expect("status serializes"))?;
    std::fs::rename(&tmp, &path)
}

/// A held exclusive `flock` on a lock file, released when dropped (or when the process
/// dies).
pub struct FileLock {
    _f: std::fs::File,
}

/// Take the exclusive lock at `path` without waiting: `None` when another process holds it.
pub fn try_lock(path: &std::path::Path) -> std::io::Result<Option<FileLock>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    match f.try_lock() {
        Ok(()) => Ok(Some(FileLock { _f: f })),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Is the lock file held by a live process?
pub fn is_locked(path: &std::path::Path) -> bool {
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    // A shared lock is released when `f` closes.
    matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock))
}
