//! # ckptfs-pool: the aggregate memory pool (stdchk)
//!
//! Nodes with memory to spare (*benefactors*) lend a bounded amount of it to
//! checkpointing clients; a *manager* keeps the benefactors' soft state, the namespace of
//! pool files with their chunk maps and versions, and hands out striping plans. A client
//! cuts a file into equal chunks, sends them straight to the benefactors of its plan from
//! a write buffer that decouples the application from the transfers, and commits the
//! chunk map to the manager on close; only committed files are visible. With a
//! replication factor r > 1 (`pool.replicas`) each chunk is written to r distinct
//! benefactors (in distinct failure domains where possible), reads fall back from one
//! copy to the next, and the manager re-replicates the copies of a lost benefactor.
//!
//! * `manager` (feature `server`): `Manager` and its server (metadata in redb);
//! * `benefactor` (feature `server`): `Benefactor`: chunks in its own bounded memory,
//!   served and drained FIFO to the PFS;
//! * [`client`]: [`client::PoolClient`] (put, get, list, remove, status) and
//!   [`client::PoolWrite`], a file being written: blocking, on the transport's blocking
//!   connection and std threads, so the client, the level and the C library's
//!   `ckptfs_pool_*` build without tokio (`--no-default-features`);
//! * [`level`]: [`level::PoolLevel`], the pool as a [`ckptfs_level::Level`], and
//!   [`level::PoolFactory`], its registry entry (`pool:<manager>`);
//! * [`drain`]: chunk file names on the PFS and [`drain::reassemble`];
//! * [`msg`]: the control messages (strictly parsed, bounded).
//!
//! All traffic uses the authenticated peer transport (`ckptfs-transport`) with the
//! per-pair keys of the cluster map: the client its blocking connection, the servers
//! (tokio, redb: feature `server`, on by default; the CLI enables it) its tokio one. docs/pool.md describes the protocol, the metadata
//! and its crash safety, and the failure cases.
#![deny(missing_docs)]

#[cfg(feature = "server")]
pub mod benefactor;
pub mod client;
pub mod drain;
pub mod level;
#[cfg(feature = "server")]
pub mod manager;
pub mod msg;
mod net;
#[cfg(feature = "server")]
mod net_server;

pub use client::{PoolClient, PoolWrite, PutReport};
pub use level::{PoolFactory, PoolLevel};
pub use net::{client_id, PoolNet};

/// What can go wrong in the pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The cluster map has no `[pool]` section, or it is invalid.
    #[error("pool configuration: {0}")]
    Config(String),
    /// The manager could not be reached (down, restarting).
    #[error("pool manager {addr} unreachable: {why}")]
    ManagerDown {
        /// Its address.
        addr: String,
        /// The transport's error.
        why: String,
    },
    /// A peer (manager or benefactor) failed or broke the protocol.
    #[error("{peer}: {why}")]
    Peer {
        /// Who.
        peer: String,
        /// What.
        why: String,
        /// errno.
        errno: i32,
    },
    /// The manager refused a request.
    #[error("pool manager: {reason}")]
    Refused {
        /// errno.
        errno: i32,
        /// Why.
        reason: String,
    },
    /// A file's chunks are gone (their benefactor is dead and they were not drained).
    #[error("{path}: lost (chunk {chunk} was on {node}, which is dead, and not drained)")]
    Lost {
        /// The file.
        path: String,
        /// A lost chunk.
        chunk: u64,
        /// Its holder.
        node: String,
    },
    /// Bytes that do not match their hash or CRC.
    #[error("{what}: bytes do not match their hash (chunk {chunk})")]
    Corrupt {
        /// Where they came from.
        what: String,
        /// Chunk index.
        chunk: u64,
    },
    /// A local I/O error.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The metadata store failed.
    #[error("pool metadata: {0}")]
    Meta(String),
}

impl PoolError {
    /// The POSIX errno of this error.
    pub fn errno(&self) -> i32 {
        match self {
            PoolError::Config(_) => libc::EINVAL,
            PoolError::ManagerDown { .. } => libc::EHOSTDOWN,
            PoolError::Peer { errno, .. } | PoolError::Refused { errno, .. } => *errno,
            PoolError::Lost { .. } => libc::EIO,
            PoolError::Corrupt { .. } => libc::EIO,
            PoolError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            PoolError::Meta(_) => libc::EIO,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> PoolError {
        PoolError::Io {
            what: what.into(),
            source,
        }
    }
}

impl From<PoolError> for ckptfs_level::LevelError {
    fn from(e: PoolError) -> Self {
        let errno = e.errno();
        ckptfs_level::LevelError::backend(errno, e)
    }
}

/// Result alias of this crate.
pub type Result<T, E = PoolError> = std::result::Result<T, E>;

/// Milliseconds since the epoch.
#[cfg(feature = "server")]
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
