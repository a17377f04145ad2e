//! Who a side of a connection is and the connection's settings (timeouts, limits,
//! allowed peers, frame protection), shared by the tokio connection and the blocking
//! one.

use crate::frame;
use crate::seal::Protection;
use std::collections::BTreeSet;
use std::time::Duration;

/// Largest payload accepted before authentication is complete (an Error may carry its
/// full reason, 1030 bytes).
pub const HANDSHAKE_MAX: u32 = 512;

/// Who this side is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// This node's id (as in the cluster map).
    pub node_id: String,
    /// The job name (both sides must agree).
    pub job: String,
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ConnConfig {
    /// Longest wait for the next frame (and for each part of it); None: wait forever.
    /// Peers heartbeat more often than this.
    pub read_timeout: Option<Duration>,
    /// Longest wait for a frame to be written.
    pub write_timeout: Duration,
    /// Longest time for connect plus the whole handshake.
    pub handshake_timeout: Duration,
    /// Largest chunk data accepted (frames announcing more are refused unread).
    pub max_chunk: u32,
    /// When set, the accepting side refuses client ids not in it.
    pub allowed_peers: Option<BTreeSet<String>>,
    /// How frames are protected after the handshake (both sides must agree).
    pub protection: Protection,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            read_timeout: Some(Duration::from_secs(30)),
            write_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            max_chunk: frame::DEFAULT_MAX_CHUNK,
            allowed_peers: None,
            protection: Protection::Integrity,
        }
    }
}
