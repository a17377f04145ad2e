//! # ckptfs-cluster: who the nodes are, where they fail together, who backs up whom
//!
//! A pure library (no sockets) that every node daemon (`ckptfs node`) and the
//! `ckptfs cluster` commands share:
//!
//! * [`Cluster`]: the cluster map, read from a TOML cluster file
//!   ([`Cluster::load`]), from Slurm's environment ([`Cluster::from_slurm`]), from a
//!   plain host list ([`Cluster::from_hosts`]) or made for one machine
//!   ([`Cluster::local`]). Validation errors name the node and the field.
//! * [`Secret`]: the per-job secret peers authenticate with; read from a file that
//!   must be the caller's own, a regular file and mode 0600 ([`Secret::load`]), created
//!   with `O_EXCL|O_NOFOLLOW` ([`Secret::create`]).
//! * [`NodeKeys`]: one node's credentials, a key per pair of nodes derived from the
//!   master secret, so a node holds only what authenticates itself
//!   ([`Cluster::node_keys`], written per node by [`Cluster::write_node_keys`]).
//! * [`Plan`]: node matching (REMEM section III-C): mirror (mutual groups) or ring with
//!   `copies = k`, partners outside the node's failure domain at the most important
//!   level the map allows, the replacement order when a partner is down, and for each
//!   failure domain which nodes' checkpoints its loss would destroy.
//! * [`hostlist`]: Slurm's compressed host lists (`n[1-3,7],m01`).
//!
//! The plan is a pure function of the map: every node computes the same plan from the
//! same file. docs/cluster.md describes the file format and the matching rules.
//!
//! ```
//! let c = ckptfs_cluster::Cluster::local(4, "demo", 17170).unwrap();
//! let plan = c.plan().unwrap();
//! // node1 and node2 share rack r1: node1's partner is in rack r2.
//! assert_eq!(plan.partners_of("node1").unwrap(), ["node3"]);
//! assert!(plan.domain_loss.iter().all(|d| d.destroyed.is_empty()));
//! ```
#![deny(missing_docs)]

mod env;
mod file;
pub mod hostlist;
mod keys;
mod plan;
mod secret;

pub use env::{EnvSource, HostListOptions, ProcessEnv, Topology};
pub use file::{
    Cluster, Erasure, Node, PoolMap, Redundancy, Scheme, DEFAULT_HEARTBEAT_MISSES, DEFAULT_HEARTBEAT_MS,
    DEFAULT_PORT,
};
pub use keys::{pair_key, NodeKeys, PairKey, PAIR_KEY_LEN};
pub use plan::{DomainLoss, NodePlan, Plan};
pub use secret::{Secret, MAX_SECRET_LEN, MIN_SECRET_LEN, SECRET_LEN};

/// Everything that can go wrong reading a cluster map or planning it.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML for a cluster map.
    #[error("{path}: {msg}")]
    Parse {
        /// The file (or the origin name given for a string).
        path: String,
        /// What the parser said.
        msg: String,
    },
    /// A field of the map is invalid; `what` names the node and field.
    #[error("invalid cluster map: {what}")]
    Invalid {
        /// For example `node "node3": addr "x" is not host:port`.
        what: String,
    },
    /// The secret file or inline secret is refused (owner, mode, type, length).
    #[error("secret {path}: {why}")]
    Secret {
        /// The secret file (or the cluster file for an inline secret).
        path: std::path::PathBuf,
        /// Why it was refused.
        why: String,
    },
    /// The launcher environment does not describe the nodes.
    #[error("environment: {0}")]
    Env(String),
    /// A Slurm host list could not be parsed.
    #[error("host list {list:?}: {why}")]
    HostList {
        /// The list as given.
        list: String,
        /// What is wrong with it.
        why: String,
    },
    /// No plan gives every node its partners (for example `copies >= nodes`).
    #[error("cannot plan partners: {0}")]
    Plan(String),
    /// A node id that is not in the map.
    #[error("no node {0:?} in the cluster map")]
    UnknownNode(String),
}

impl ClusterError {
    /// The POSIX errno this error maps to.
    pub fn errno(&self) -> i32 {
        match self {
            ClusterError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            ClusterError::Secret { .. } => libc::EACCES,
            ClusterError::UnknownNode(_) => libc::ENOENT,
            _ => libc::EINVAL,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = ClusterError> = std::result::Result<T, E>;

/// Longest node id, job name, store name or domain name accepted.
pub const MAX_NAME: usize = 64;

/// Checks a name used as node id, job, store or domain: non-empty, at most
/// [`MAX_NAME`] bytes, letters, digits, `.`, `_`, `-`, not starting with `.` or `-`.
pub(crate) fn check_name(what: &str, s: &str) -> Result<()> {
    let ok = !s.is_empty()
        && s.len() <= MAX_NAME
        && !s.starts_with(['.', '-'])
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "{what} {s:?}: expected 1-{MAX_NAME} letters, digits, '.', '_', '-' (not starting with '.' or '-')"
        )))
    }
}

pub(crate) fn invalid(what: impl Into<String>) -> ClusterError {
    ClusterError::Invalid { what: what.into() }
}
