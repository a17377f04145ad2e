//! The error type of the node protocol (the daemon and its clients) and its mapping to POSIX errno values.

use ckptfs_store::StoreError;

/// Everything that can go wrong in the node daemon, a partner copy or a restore.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A store operation failed.
    #[error("{context}: {source}")]
    Store {
        /// What was being done.
        context: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// A socket or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A peer sent something that breaks the protocol (bad path, bad CRC, bad order).
    #[error("protocol error from {peer}: {what}")]
    Protocol {
        /// Peer node id or address.
        peer: String,
        /// What was wrong.
        what: String,
    },
    /// A peer refused a request with this errno.
    #[error("{peer} refused: {what} (errno {errno})")]
    Refused {
        /// Peer node id.
        peer: String,
        /// Its message.
        what: String,
        /// POSIX errno it gave.
        errno: i32,
    },
    /// The cluster file or the node's place in it is wrong.
    #[error("cluster: {0}")]
    Cluster(String),
    /// The peer transport failed.
    #[error("transport: {0}")]
    Transport(String),
    /// The runtime directory (status and lock files) is unusable.
    #[error("runtime directory: {0}")]
    Runtime(String),
    /// Another daemon already runs for this store.
    #[error("a node daemon already runs for store {0}")]
    AlreadyRunning(String),
    /// The drain agent failed.
    #[error("drain agent: {0}")]
    Agent(#[from] ckptfs_agent::AgentError),
    /// A bad setting of the daemon.
    #[error("{0}")]
    Invalid(String),
    /// A peer's answer passed a bound (a listing with more entries, bytes or pages than
    /// this node's store could hold, or out of order): not used.
    #[error("{peer}: {what}; its answer is not used")]
    Bound {
        /// Peer node id.
        peer: String,
        /// Which bound, and by how much.
        what: String,
    },
    /// A received chunk failed its CRC32C check.
    #[error("checksum mismatch in {path} at offset {offset} from {peer}")]
    BadChunk {
        /// Peer node id.
        peer: String,
        /// File path.
        path: String,
        /// Byte offset of the chunk.
        offset: u64,
    },
}

impl NodeError {
    /// The POSIX errno for this error. Unknown OS errors map to EIO.
    pub fn errno(&self) -> i32 {
        match self {
            NodeError::Store { source, .. } => source.errno(),
            NodeError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            NodeError::Protocol { .. } => libc::EPROTO,
            NodeError::Refused { errno, .. } => *errno,
            NodeError::Cluster(_) => libc::EINVAL,
            NodeError::Transport(_) => libc::ECONNABORTED,
            NodeError::AlreadyRunning(_) => libc::EBUSY,
            NodeError::Runtime(_) => libc::EACCES,
            NodeError::Agent(e) => e.errno(),
            NodeError::BadChunk { .. } => libc::EIO,
            NodeError::Bound { .. } => libc::EOVERFLOW,
            NodeError::Invalid(_) => libc::EINVAL,
        }
    }

    /// A store operation's error, with what was being done.
    pub fn store(context: impl Into<String>, source: StoreError) -> Self {
        NodeError::Store {
            context: context.into(),
            source,
        }
    }

    /// An OS error, with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        NodeError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Shorthand for results of the node daemon.
pub type Result<T, E = NodeError> = std::result::Result<T, E>;
