//! The daemon's settings ([`NodeConfig`]) and the state its tasks share ([`Shared`]):
//! the store, the credentials, the partner plan and who answers heartbeats, the
//! counters of the status, the copy in flight, the erasure state.

use crate::partner_store;
use ckptfs_agent::sys::Priority;
use ckptfs_agent::AgentConfig;
use ckptfs_cluster::{Cluster, NodeKeys, Plan};
use ckptfs_partner::peer::Conn;
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::{Store, StoreOptions};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Settings of one node daemon.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The cluster map.
    pub cluster: Cluster,
    /// This node's id in it.
    pub node_id: String,
    /// The node store (its name from the cluster map; sizes used if it must be created).
    pub store: StoreOptions,
    /// Drain to the PFS in this daemon (the agent engine), if configured.
    pub drain: Option<AgentConfig>,
    /// Bandwidth cap of partner copies out, bytes per second.
    pub max_bw: Option<f64>,
    /// Most bytes of other nodes' copies this node holds (ENOSPC past it); None:
    /// `partner_share` of the store's memory.
    pub partner_limit: Option<u64>,
    /// Share of the store's memory other nodes' copies may hold when `partner_limit`
    /// is not set (0.5 by default: the application keeps at least the other half).
    pub partner_share: f64,
    /// Time between scans of the store for files to copy.
    pub scan_interval: Duration,
    /// CPU and IO priority of the partner-copy threads (copies out, copies in, Gets):
    /// setting `partner_priority`, `low` (nice 10) by default like the drain.
    pub partner_priority: Priority,
    /// Copies out step back while an application writes into this node's store (its
    /// write count moves): at most this long at a stretch, then they take at least
    /// half the time (docs/cluster.md). Zero: never step back.
    pub writer_yield: Duration,
    /// With datasets: which complete files are copied to partners follows each
    /// dataset's level decision (`ckptfs_datasets::PartnerPolicy`); None: every one.
    pub datasets: Option<std::sync::Arc<ckptfs_datasets::PartnerPolicy>>,
    /// Serve Prometheus metrics (`--metrics`; docs/metrics.md); None: off.
    pub metrics: Option<crate::metrics::MetricsConfig>,
    /// This node's erasure set and the job whose complete datasets it protects (the
    /// cluster file's `[redundancy] erasure`); None: no erasure sets.
    pub erasure: Option<ckptfs_partner::set_rebuild::ErasureConfig>,
}

/// Share of the store's memory that other nodes' copies may hold by default.
pub const DEFAULT_PARTNER_SHARE: f64 = 0.5;

/// Parse a `partner_priority` value: `idle` (nice 19, idle IO class), `low` (nice 10,
/// lowest best-effort IO level) or `normal` (left alone).
pub fn parse_priority(v: &str) -> Result<Priority> {
    match v.trim().to_ascii_lowercase().as_str() {
        "idle" => Ok(Priority::Idle),
        "low" => Ok(Priority::Low),
        "normal" => Ok(Priority::Normal),
        other => Err(NodeError::Invalid(format!(
            "partner priority {other:?}: want idle, low or normal"
        ))),
    }
}

/// The name of a priority as `parse_priority` takes it.
pub fn priority_name(p: Priority) -> &'static str {
    match p {
        Priority::Idle => "idle",
        Priority::Low => "low",
        Priority::Normal => "normal",
    }
}

impl NodeConfig {
    /// Settings for `node_id` of `cluster`, its store named by the cluster map.
    pub fn new(cluster: Cluster, node_id: &str) -> Result<NodeConfig> {
        let node = cluster
            .node(node_id)
            .map_err(|e| NodeError::Cluster(e.to_string()))?;
        Ok(NodeConfig {
            store: StoreOptions::named(node.store.clone()),
            node_id: node_id.to_string(),
            cluster,
            drain: None,
            max_bw: None,
            partner_limit: None,
            partner_share: DEFAULT_PARTNER_SHARE,
            scan_interval: Duration::from_millis(200),
            partner_priority: Priority::Low,
            writer_yield: Duration::from_secs(1),
            datasets: None,
            metrics: None,
            erasure: None,
        })
    }
}

/// Counters published in the status.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub copies_sent: u64,
    pub bytes_sent: u64,
    pub copies_refused: u64,
    pub changed_during_copy: u64,
    pub chunks_resent: u64,
    pub copies_received: u64,
    /// Copies refused because this node is not the sender's partner in the plan.
    pub copies_refused_in: u64,
    /// Copies a holder no longer had when asked (struck from the record, sent again).
    pub copies_lost: u64,
    /// Files whose current version has fewer partner copies than the plan asks.
    pub unprotected_files: u64,
    /// Their bytes.
    pub unprotected_bytes: u64,
    /// Copies of deleted or superseded versions still to be dropped on their holders.
    pub pending_drops: u64,
    /// Every node is still to be asked for older copies of files that just got their
    /// first record (counted in the status's `pending_drops`).
    pub verify_owed: bool,
    /// The store's change sequence number the last finished pass of the copy loop
    /// started from.
    pub changes_seen: u64,
    pub chunks_refused: u64,
    /// Time copies out stepped back for the application's writes.
    pub yielded: Duration,
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

/// State shared by the daemon's tasks.
pub(crate) struct Shared {
    pub cfg: NodeConfig,
    pub store: Store,
    /// This node's credentials (its key with each other node).
    pub keys: NodeKeys,
    /// The partner quota (copies held and being received for other nodes).
    pub quota: partner_store::Quota,
    pub plan: Plan,
    pub listen: String,
    /// Last heartbeat answer per peer.
    pub seen: Mutex<BTreeMap<String, Instant>>,
    /// Heartbeat connections made per peer. A new one (the old connection broke) may be
    /// a new incarnation of the peer, a replacement that lost the copies it held, even
    /// when it came back before it was noticed down: the copies it holds are verified
    /// again before they count (protect.rs).
    pub connects: Mutex<BTreeMap<String, u64>>,
    /// Per peer, the `connects` count its copies were last verified at.
    pub verified: Mutex<BTreeMap<String, u64>>,
    pub counters: Mutex<Counters>,
    pub in_flight: Mutex<Option<CopyInFlight>>,
    /// When the daemon started.
    pub started: Instant,
    /// The caller's runtime directory (status file).
    pub rundir: ckptfs_runtime::RuntimeDir,
    /// The runtime of the partner-copy threads (at `partner_priority`): copies out, and
    /// every connection that is not a heartbeat connection.
    pub copies: tokio::runtime::Handle,
    /// Per-peer counters of the metrics (heartbeats missed, transfer errors).
    pub peer_metrics: crate::metrics::PeerCounters,
    /// Erasure encodings running here and their states (erasure_state.rs; the tasks that
    /// use them are in erasure/).
    pub erasure: crate::erasure_state::EraState,
}

impl Shared {
    pub(crate) fn down_after(&self) -> Duration {
        let c = &self.cfg.cluster;
        Duration::from_millis(c.heartbeat_ms.max(1) * c.heartbeat_misses.max(1) as u64)
    }

    /// This node's partners now: the plan's, a dead one replaced by the next eligible
    /// node. A peer counts as up while its heartbeats are answered; one never heard from
    /// counts as up only during the first heartbeat period after start (so files do not
    /// wait for the first heartbeat, and a node that never came up is replaced).
    pub fn partners(&self) -> Vec<String> {
        let seen = self.seen.lock().expect("seen");
        let down_after = self.down_after();
        self.plan
            .effective_partners(&self.cfg.node_id, |n| match seen.get(n) {
                Some(t) => t.elapsed() <= down_after,
                None => self.started.elapsed() <= down_after,
            })
    }

    /// Whether `peer` answers heartbeats now (one never heard from counts as up during
    /// the first heartbeat period after start, as in [`Shared::partners`]).
    pub fn is_up(&self, peer: &str) -> bool {
        let seen = self.seen.lock().expect("seen");
        match seen.get(peer) {
            Some(t) => t.elapsed() <= self.down_after(),
            None => self.started.elapsed() <= self.down_after(),
        }
    }

    /// Whether this node may hold copies of `peer`'s files: it is one of `peer`'s
    /// partners in the plan, or one of the replacements that stand in for them.
    pub fn may_hold_for(&self, peer: &str) -> bool {
        self.plan.node(peer).is_some_and(|n| {
            n.partners
                .iter()
                .chain(n.replacements.iter())
                .any(|p| *p == self.cfg.node_id)
        })
    }

    /// An authenticated connection to `peer`.
    pub async fn connect(&self, peer: &str) -> Result<Conn> {
        let node = self
            .cfg
            .cluster
            .node(peer)
            .map_err(|e| NodeError::Cluster(e.to_string()))?;
        let c = tokio::time::timeout(
            Duration::from_secs(5),
            Conn::connect(&node.addr, &self.cfg.node_id, peer, &self.keys, &self.cfg.cluster),
        )
        .await
        .map_err(|_| NodeError::Transport(format!("connect to {peer} ({}): timed out", node.addr)))??;
        Ok(c)
    }

    /// Whether `peer` answered a heartbeat within the heartbeat period times the misses
    /// allowed (unlike [`Shared::is_up`], a peer never heard from is not).
    pub fn heard(&self, peer: &str) -> bool {
        let seen = self.seen.lock().expect("seen");
        seen.get(peer).is_some_and(|t| t.elapsed() <= self.down_after())
    }

    /// Peers connected again since their copies were last verified (their copies do not
    /// count until they are).
    pub fn unverified(&self) -> Vec<String> {
        let c = self.connects.lock().expect("connects").clone();
        let v = self.verified.lock().expect("verified");
        c.into_iter()
            .filter(|(n, k)| v.get(n).copied().unwrap_or(0) != *k)
            .map(|(n, _)| n)
            .collect()
    }

    pub fn set_in_flight(&self, f: Option<CopyInFlight>) {
        *self.in_flight.lock().expect("in flight") = f;
    }
}
