//! The level error type and its errno mapping.

use std::io;

/// What a level operation can fail with. Each variant maps to one errno
/// ([`LevelError::errno`]); a level with richer errors of its own (the PFS level's
/// `AgentError`, the store's `StoreError`) carries them in [`LevelError::Backend`] with their errno, so a caller
/// that knows the level can recover the original error by downcasting.
#[derive(Debug, thiserror::Error)]
pub enum LevelError {
    /// No copy of this file on this level.
    #[error("{level}: no copy of {path}")]
    NotFound {
        /// The level's name.
        level: String,
        /// The file.
        path: String,
    },
    /// The copy on this level is not the version asked for, or it changed while it was
    /// being read (written, truncated, replaced, reopened for writing).
    #[error("{0} changed during the transfer")]
    Changed(String),
    /// A chunk does not match its recorded CRC32C.
    #[error("{path}: chunk {chunk} does not match its CRC32C on level {level}")]
    Corrupt {
        /// The level's name.
        level: String,
        /// The file.
        path: String,
        /// Chunk index (the level's chunk size).
        chunk: u64,
    },
    /// An operating-system call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A level's own error, with its errno.
    #[error("{source}")]
    Backend {
        /// The POSIX errno.
        errno: i32,
        /// The level's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl LevelError {
    /// The POSIX errno of this error. Unknown OS errors map to EIO.
    pub fn errno(&self) -> i32 {
        match self {
            LevelError::NotFound { .. } => libc::ENOENT,
            LevelError::Changed(_) => libc::EAGAIN,
            LevelError::Corrupt { .. } => libc::EIO,
            LevelError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            LevelError::Backend { errno, .. } => *errno,
        }
    }

    /// An OS error during `op` on `path`.
    pub fn io(op: &'static str, path: impl Into<String>, source: io::Error) -> Self {
        LevelError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The level's own error of type `E`, if this is one (see [`LevelError::Backend`]).
    pub fn backend_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            LevelError::Backend { source, .. } => source.downcast_ref::<E>(),
            _ => None,
        }
    }

    /// Wrap a level's own error (kept whole: see [`LevelError::Backend`]).
    pub fn backend(errno: i32, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        LevelError::Backend {
            errno,
            source: Box::new(e),
        }
    }
}

impl From<LevelError> for io::Error {
    fn from(e: LevelError) -> Self {
        let errno = e.errno();
        io::Error::new(io::Error::from_raw_os_error(errno).kind(), e)
    }
}
