//! The daemon's Prometheus metrics (`ckptfs node --metrics ADDR`; docs/metrics.md).
//!
//! Off unless [`NodeConfig::metrics`](crate::NodeConfig::metrics) names an address. A
//! scrape renders, at that moment: the families every store holder exports
//! ([`ckptfs_metrics::collect`]: store and spill use, files and bytes per level,
//! datasets by state, the newest complete dataset's protection, the drain), then the
//! daemon's own: peers up and their heartbeats missed, partner copies sent, received,
//! refused, pending (and the oldest one's age), in flight, transfer errors by peer and
//! kind, the copies held for other nodes. The per-peer counters are bumped where the
//! events happen (the heartbeat task, the copy loop); everything else is read from the
//! daemon's state and the store.
//!
//! This module has the settings and the per-peer counters; the server and the rendering
//! from the daemon's state are `metrics_export.rs`.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Where and what the daemon exports.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// `host:port` to serve `GET /metrics` on.
    pub addr: String,
    /// The job whose dataset records are exported (None: no dataset families).
    pub job: Option<String>,
}

/// Kinds of transfer errors counted per peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ErrorKind {
    /// No authenticated connection to the peer.
    Connect,
    /// A copy failed on the way (connection lost, protocol error).
    Transfer,
    /// The partner refused the copy (e.g. ENOSPC).
    Refused,
    /// A chunk arrived with a bad CRC32C and was sent again.
    Crc,
}

impl ErrorKind {
    /// The `kind` label.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Transfer => "transfer",
            ErrorKind::Refused => "refused",
            ErrorKind::Crc => "crc",
        }
    }
}

/// One peer's counters.
#[derive(Debug, Default, Clone)]
pub(crate) struct PeerCounts {
    /// Transfer errors by kind.
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Heartbeats not answered in time.
    pub heartbeats_missed: u64,
}

/// Counters per peer, bumped by the heartbeat and copy tasks.
#[derive(Debug, Default)]
pub(crate) struct PeerCounters(Mutex<BTreeMap<String, PeerCounts>>);

impl PeerCounters {
    fn with(&self, peer: &str, f: impl FnOnce(&mut PeerCounts)) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(m.entry(peer.to_string()).or_default());
    }

    /// A transfer error with `peer`.
    pub(crate) fn error(&self, peer: &str, kind: ErrorKind) {
        self.with(peer, |c| *c.errors.entry(kind).or_default() += 1);
    }

    /// A heartbeat to `peer` not answered in time (or no connection to send it on).
    pub(crate) fn missed(&self, peer: &str) {
        self.with(peer, |c| c.heartbeats_missed += 1);
    }

    /// Every peer's counters now.
    pub(crate) fn snapshot(&self) -> BTreeMap<String, PeerCounts> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
