//! The runtime-file error type and its errno mapping.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong with a runtime directory or a file in it. Each variant
/// maps to exactly one errno ([`RuntimeError::errno`]).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The file or directory belongs to another user (EPERM).
    #[error(
        "{} is owned by uid {owner}, not by uid {expected} (the caller): refusing to use a file another user may control",
        path.display()
    )]
    WrongOwner {
        /// The path.
        path: PathBuf,
        /// Owner found.
        owner: u32,
        /// The caller's effective uid.
        expected: u32,
    },
    /// The runtime directory has another mode than 0700 (EACCES).
    #[error("{} has mode {mode:04o}, but a runtime directory must have mode {expected:04o}", path.display())]
    BadMode {
        /// The path.
        path: PathBuf,
        /// Permission bits found.
        mode: u32,
        /// Permission bits required.
        expected: u32,
    },
    /// A directory was expected (ENOTDIR).
    #[error("{} is a {found}, not a directory", path.display())]
    NotDirectory {
        /// The path.
        path: PathBuf,
        /// What was found.
        found: &'static str,
    },
    /// A regular file was expected (EINVAL).
    #[error("{} is a {found}, not a regular file", path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What was found.
        found: &'static str,
    },
    /// The path is a symbolic link, which ckptfs never follows for these files (ELOOP).
    #[error("{} is a symbolic link: ckptfs does not follow links for its runtime files", path.display())]
    Symlink {
        /// The path.
        path: PathBuf,
    },
    /// A single-instance lock is held by another process (EBUSY).
    #[error("{} is held by {}", path.display(), match pid {
        Some(p) => format!("pid {p}"),
        None => "another process (pid not recorded yet)".to_string(),
    })]
    Held {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, when it is recorded and alive.
        pid: Option<u32>,
    },
    /// A file name with a `/`, empty, `.` or `..` (EINVAL).
    #[error("invalid runtime file name {0:?}")]
    InvalidName(String),
    /// An error from the operating system.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

impl RuntimeError {
    /// The POSIX errno of this error; unknown OS errors map to EIO.
    pub fn errno(&self) -> i32 {
        match self {
            RuntimeError::WrongOwner { .. } => libc::EPERM,
            RuntimeError::BadMode { .. } => libc::EACCES,
            RuntimeError::NotDirectory { .. } => libc::ENOTDIR,
            RuntimeError::NotRegular { .. } => libc::EINVAL,
            RuntimeError::Symlink { .. } => libc::ELOOP,
            RuntimeError::Held { .. } => libc::EBUSY,
            RuntimeError::InvalidName(_) => libc::EINVAL,
            RuntimeError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        RuntimeError::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<RuntimeError> for io::Error {
    fn from(e: RuntimeError) -> Self {
        io::Error::new(io::Error::from_raw_os_error(e.errno()).kind(), e)
    }
}
