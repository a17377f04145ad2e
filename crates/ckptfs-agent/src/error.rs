//! The agent's error type and its mapping to POSIX errno values.

use ckptfs_store::StoreError;
use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while draining or restoring. Each variant maps to one
/// errno ([`AgentError::errno`]), reported in the status file and the exit code.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The node store refused an operation.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An operation on the destination failed (ENOSPC, EIO, EACCES, ...).
    #[error("{op} {path}: {source}")]
    Dest {
        /// What was being done (`write`, `fsync`, `rename`, ...).
        op: &'static str,
        /// The destination path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A chunk in the store does not match its CRC32C: the file is not published.
    #[error("refusing to publish {path}: chunk {logical} is corrupt in the store (crc32c stored {stored:#010x}, computed {computed:#010x})")]
    Corrupt {
        /// Store path of the file.
        path: String,
        /// Logical chunk index.
        logical: u32,
        /// CRC32C recorded by the writer.
        stored: u32,
        /// CRC32C of the bytes now in the chunk.
        computed: u32,
    },
    /// The file was modified, truncated, unlinked or reopened for writing during the copy.
    #[error("{0} changed during the copy; it will be drained again")]
    Changed(String),
    /// A destination file does not match its manifest (restore).
    #[error("{path}: chunk {chunk} does not match the manifest (crc32c expected {expected:#010x}, found {found:#010x})")]
    Mismatch {
        /// Destination file.
        path: PathBuf,
        /// Chunk index (manifest chunk size).
        chunk: u64,
        /// CRC32C in the manifest.
        expected: u32,
        /// CRC32C of the bytes read.
        found: u32,
    },
    /// A manifest that cannot be parsed.
    #[error("manifest {path}: {reason}")]
    Manifest {
        /// Manifest file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Invalid settings (mapping file, node id, targets).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Another agent is attached to this store.
    #[error("another agent ({}) is already draining store {store} (lock {})", match pid {
        Some(p) => format!("pid {p}"),
        None => "pid not recorded yet".to_string(),
    }, lock.display())]
    Busy {
        /// Store name.
        store: String,
        /// Pid of the running agent, recorded in its lock file.
        pid: Option<u32>,
        /// The lock file.
        lock: PathBuf,
    },
    /// The runtime directory or a file in it (lock, status) is unusable or unsafe.
    #[error(transparent)]
    Runtime(#[from] ckptfs_runtime::RuntimeError),
    /// Asked to stop (SIGTERM) before the file was published.
    #[error("stopped before {0} was published")]
    Stopped(String),
}

impl AgentError {
    /// The POSIX errno for this error. Unknown OS errors map to EIO.
    pub fn errno(&self) -> i32 {
        match self {
            AgentError::Store(e) => e.errno(),
            AgentError::Dest { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            AgentError::Corrupt { .. } | AgentError::Mismatch { .. } | AgentError::Manifest { .. } => {
                libc::EIO
            }
            AgentError::Changed(_) => libc::EAGAIN,
            AgentError::Config(_) => libc::EINVAL,
            AgentError::Busy { .. } => libc::EBUSY,
            AgentError::Runtime(e) => e.errno(),
            AgentError::Stopped(_) => libc::EINTR,
        }
    }

    /// Worth retrying later without any change to the file (destination trouble)?
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            AgentError::Dest { .. } | AgentError::Changed(_) | AgentError::Stopped(_)
        )
    }

    pub(crate) fn dest(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        AgentError::Dest {
            op,
            path: path.into(),
            source,
        }
    }
}

impl From<AgentError> for io::Error {
    fn from(e: AgentError) -> Self {
        let errno = e.errno();
        io::Error::new(io::Error::from_raw_os_error(errno).kind(), e)
    }
}
