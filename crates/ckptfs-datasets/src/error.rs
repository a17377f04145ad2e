//! The crate's error type; every variant maps to one POSIX errno.

/// Everything a dataset operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The node store failed.
    #[error(transparent)]
    Store(#[from] ckptfs_store::StoreError),
    /// The drain destination or a restore failed.
    #[error(transparent)]
    Agent(#[from] ckptfs_agent::AgentError),
    /// The runtime directory (lock file) failed.
    #[error(transparent)]
    Runtime(#[from] ckptfs_runtime::RuntimeError),
    /// Taking the per-store dataset lock failed.
    #[error("lock {path}: {source}")]
    Lock {
        /// The lock file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// No dataset with this id (failure case D2: completing one never begun).
    #[error("no dataset {0} (never begun, or deleted)")]
    NotFound(u64),
    /// This rank has no open part in the dataset (failure case D2).
    #[error("dataset {id} ({name}): rank {rank} did not begin it")]
    NotBegun {
        /// Dataset id.
        id: u64,
        /// Its name.
        name: String,
        /// The rank that tried to complete it.
        rank: String,
    },
    /// No open dataset to complete.
    #[error("no open dataset for rank {0} (ckpt begin first)")]
    NoneOpen(String),
    /// Completing a part twice (failure case D1).
    #[error("dataset {id} ({name}): rank {rank} already completed it ({state})")]
    AlreadyCompleted {
        /// Dataset id.
        id: u64,
        /// Its name.
        name: String,
        /// The rank.
        rank: String,
        /// The dataset's state now.
        state: String,
    },
    /// A bad name, pattern or setting.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A dataset record that does not parse (it is skipped by listings; this names it).
    #[error("dataset record {path}: {msg}")]
    BadRecord {
        /// Store path of the record.
        path: String,
        /// What is wrong.
        msg: String,
    },
    /// A restart across nodes could not ask every node, and what it could see does not
    /// decide the dataset (failure case D10b): nothing is chosen rather than "none".
    #[error("restart: nodes {nodes} could not be asked ({why}); not choosing a dataset without them")]
    Unreachable {
        /// The nodes that could not be asked.
        nodes: String,
        /// What their absence left undecided.
        why: String,
    },
    /// The policy crate refused its input.
    #[error("policy: {0}")]
    Policy(String),
}

impl DatasetError {
    /// The POSIX errno of this error.
    pub fn errno(&self) -> i32 {
        match self {
            DatasetError::Store(e) => e.errno(),
            DatasetError::Agent(e) => e.errno(),
            DatasetError::Runtime(e) => e.errno(),
            DatasetError::Lock { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            DatasetError::NotFound(_) | DatasetError::NoneOpen(_) => libc::ENOENT,
            DatasetError::NotBegun { .. } => libc::ENOENT,
            DatasetError::AlreadyCompleted { .. } => libc::EALREADY,
            DatasetError::Invalid(_) | DatasetError::Policy(_) => libc::EINVAL,
            DatasetError::BadRecord { .. } => libc::EIO,
            DatasetError::Unreachable { .. } => libc::EHOSTUNREACH,
        }
    }
}

/// Result with [`DatasetError`].
pub type Result<T> = std::result::Result<T, DatasetError>;
