//! The node daemon's state as seen from other processes (`ckptfs node status`): a JSON
//! file `NAME.node.json` in the caller's runtime directory ([`ckptfs_runtime`], owned by
//! the caller, mode 0700), replaced atomically, and the single-instance lock
//! `NAME.node.lock` held with `flock` for the daemon's life (alive = lock held).

use crate::partner_store;
pub use crate::shared::CopyInFlight;
use crate::shared::{priority_name, Shared};
use ckptfs_partner::runtime_files::{lock_name, status_name};
pub use ckptfs_partner::runtime_files::{remove_status, remove_store_files};
use ckptfs_partner::NodeError;
use ckptfs_runtime::{InstanceLock, RuntimeDir};
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

/// Everything `ckptfs node status` shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node's erasure set and its encodings (None: no erasure sets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erasure: Option<crate::erasure::ErasureStatus>,
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
    /// Chunks received whose CRC32C did not match (refused, asked for again).
    #[serde(default)]
    pub chunks_refused: u64,
    /// Copies a holder no longer had when asked (a replaced partner, a lost store):
    /// struck from the record and sent again.
    #[serde(default)]
    pub copies_lost: u64,
    /// The re-protection backlog: files whose current version has fewer partner copies
    /// than the plan asks (0 once every copy is made again after a failure).
    #[serde(default)]
    pub unprotected_files: u64,
    /// Their bytes.
    #[serde(default)]
    pub unprotected_bytes: u64,
    /// Copies of deleted files and of superseded versions still to be dropped on their
    /// holders, plus 1 while the nodes are still to be asked for older copies of files
    /// that just got their first record (copies an earlier incarnation of this node
    /// placed). 0 once every Delete is acknowledged: until then a restore after this
    /// node's loss may find a removed file or an older version there.
    #[serde(default)]
    pub pending_drops: u64,
    /// The store's change sequence number the copy loop's last finished pass started
    /// from, and the store's when this status was written: while they differ, changes
    /// (new files, rewrites, deletes) are not yet in `unprotected_files` and
    /// `pending_drops`.
    #[serde(default)]
    pub changes_seen: u64,
    /// See `changes_seen`.
    #[serde(default)]
    pub changes_now: u64,
    /// Seconds copies out have stepped back for the application's writes since start.
    #[serde(default)]
    pub yielded_s: f64,
    /// CPU and IO priority of the partner-copy threads (`idle`, `low`, `normal`).
    #[serde(default)]
    pub partner_priority: String,
    /// Copies in flight.
    pub in_flight: Vec<CopyInFlight>,
    /// Files this node holds for other nodes, per source node.
    pub holding: BTreeMap<String, u64>,
}

/// The status file of store `name` (in the caller's runtime directory).
pub fn status_path(name: &str) -> PathBuf {
    RuntimeDir::default_path().join(status_name(name))
}

/// The lock file of store `name`'s daemon (in the caller's runtime directory).
pub fn lock_path(name: &str) -> PathBuf {
    RuntimeDir::default_path().join(lock_name(name))
}

/// The state of store `name`'s daemon, if one of the caller ever ran for it.
pub fn status(store_name: &str) -> Option<NodeStatus> {
    let dir = RuntimeDir::for_caller().ok()?;
    let text = dir.read(&status_name(store_name)).ok()??;
    let mut s: NodeStatus = serde_json::from_slice(&text).ok()?;
    s.running = dir.is_locked(&lock_name(store_name));
    Some(s)
}

/// Take the single-instance lock of store `name`'s daemon.
pub(crate) fn lock(store_name: &str) -> Result<(RuntimeDir, InstanceLock), NodeError> {
    let dir = RuntimeDir::for_caller().map_err(|e| NodeError::Runtime(e.to_string()))?;
    match dir.lock(&lock_name(store_name)) {
        Ok(l) => Ok((dir, l)),
        Err(ckptfs_runtime::RuntimeError::Held { .. }) => {
            Err(NodeError::AlreadyRunning(store_name.to_string()))
        }
        Err(e) => Err(NodeError::Runtime(e.to_string())),
    }
}

pub(crate) fn write_status(dir: &RuntimeDir, s: &NodeStatus) -> Result<(), NodeError> {
    dir.write_atomic(
        &status_name(&s.store),
        &serde_json::to_vec_pretty(s).expect("status serializes"),
    )
    .map_err(|e| NodeError::Runtime(e.to_string()))
}

impl Shared {
    /// The status file's content now.
    pub(crate) fn status(&self) -> NodeStatus {
        let partners = self.partners();
        let seen = self.seen.lock().expect("seen").clone();
        let peers = self
            .cfg
            .cluster
            .nodes
            .iter()
            .filter(|n| n.id != self.cfg.node_id)
            .map(|n| {
                let last = seen.get(&n.id);
                (
                    n.id.clone(),
                    PeerState {
                        addr: n.addr.clone(),
                        up: last.is_some_and(|t| t.elapsed() <= self.down_after()),
                        last_seen_ms: last.map(|t| t.elapsed().as_millis() as u64),
                        partner: partners.contains(&n.id),
                    },
                )
            })
            .collect();
        let c = self.counters.lock().expect("counters");
        let holding = partner_store::sources(&self.store)
            .into_iter()
            .map(|s| {
                let n = partner_store::list(&self.store, &s).len() as u64;
                (s, n)
            })
            .collect();
        NodeStatus {
            node: self.cfg.node_id.clone(),
            store: self.store.name().to_string(),
            pid: std::process::id(),
            running: true,
            listen: self.listen.clone(),
            partners,
            peers,
            drain: self.cfg.drain.is_some(),
            copies_sent: c.copies_sent,
            bytes_sent: c.bytes_sent,
            copies_refused: c.copies_refused,
            changed_during_copy: c.changed_during_copy,
            chunks_resent: c.chunks_resent,
            copies_received: c.copies_received,
            chunks_refused: c.chunks_refused,
            copies_lost: c.copies_lost,
            unprotected_files: c.unprotected_files,
            unprotected_bytes: c.unprotected_bytes,
            pending_drops: c.pending_drops + c.verify_owed as u64,
            changes_seen: c.changes_seen,
            changes_now: self.store.change_seq(),
            yielded_s: c.yielded.as_secs_f64(),
            partner_priority: priority_name(self.cfg.partner_priority).to_string(),
            in_flight: self
                .in_flight
                .lock()
                .expect("in flight")
                .iter()
                .cloned()
                .collect(),
            holding,
            erasure: self.cfg.erasure.as_ref().map(|e| {
                let mut st = self.erasure.status();
                st.level = e.level_id();
                st.scheme = e.scheme.to_string();
                st.members = e.set.members.clone();
                // What this member keeps, as its store says (an encode led elsewhere, a
                // rebuild, an earlier daemon's).
                // The store has the last word on what this member keeps: a header
                // replaces what memory says of a protected encoding (another process, a
                // rebuild, may have written it since).
                for (key, epoch) in self.erasure.kept(&self.store, &e.set.name) {
                    let d = st.datasets.entry(key).or_default();
                    if d.state.is_empty() || d.state == "protected" {
                        if d.epoch != epoch {
                            d.seconds = None;
                        }
                        d.state = "protected".into();
                        d.epoch = epoch;
                    }
                }
                st
            }),
        }
    }
}
