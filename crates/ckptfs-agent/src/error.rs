//! The agent's error type and its mapping to POSIX errno values.

use ckptfs_level::LevelError;
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
    /// A destination file does not match its manifest (restore). The message names the
    /// file, the chunk and its offset, never bytes of the file or their checksum (a
    /// checksum of a few bytes gives the bytes away).
    #[error("{path}: chunk {chunk} (bytes {offset}..{end}) does not match the manifest's CRC32C")]
    Mismatch {
        /// Destination file.
        path: PathBuf,
        /// Chunk index (manifest chunk size).
        chunk: u64,
        /// Offset of the chunk in the file.
        offset: u64,
        /// End of the chunk.
        end: u64,
    },
    /// A manifest that cannot be used.
    #[error("manifest {path}: {reason}")]
    Manifest {
        /// Manifest file.
        path: PathBuf,
        /// What is wrong.
        reason: crate::manifest_error::ManifestError,
    },
    /// A manifest entry that restore refuses (its file is not restored).
    #[error("manifest {manifest}: entry {name:?}: {reason}")]
    BadEntry {
        /// Manifest file.
        manifest: PathBuf,
        /// The entry's key.
        name: String,
        /// What is wrong.
        reason: crate::manifest_error::EntryError,
    },
    /// A destination file restore will not read or use.
    #[error("refusing to restore from {path}: {reason}")]
    Refused {
        /// Destination file or directory.
        path: PathBuf,
        /// Why.
        reason: Refusal,
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
    /// A level operation failed (a level other than the PFS, or the node store seen
    /// as a level).
    #[error(transparent)]
    Level(LevelError),
    /// Asked to stop (SIGTERM) before the file was published.
    #[error("stopped before {0} was published")]
    Stopped(String),
    /// Another node drained a newer version of the same destination file (a shared
    /// PFS directory): this node's older version is not published over it.
    #[error("skipped, not drained: {dest} holds a newer version drained by node {node} (mtime {other_mtime_ns} ns, this one {mtime_ns} ns)")]
    NewerElsewhere {
        /// Store path of this node's file.
        path: String,
        /// The destination file.
        dest: PathBuf,
        /// The node whose manifest lists the newer version.
        node: String,
        /// Its mtime.
        other_mtime_ns: u64,
        /// This node's file's mtime.
        mtime_ns: u64,
    },
}

impl AgentError {
    /// The POSIX errno for this error. Unknown OS errors map to EIO.
    pub fn errno(&self) -> i32 {
        match self {
            AgentError::Store(e) => e.errno(),
            AgentError::Dest { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            AgentError::Corrupt { .. }
            | AgentError::Mismatch { .. }
            | AgentError::Manifest { .. }
            | AgentError::BadEntry { .. } => libc::EIO,
            AgentError::Refused { reason, .. } => reason.errno(),
            AgentError::Changed(_) => libc::EAGAIN,
            AgentError::Config(_) => libc::EINVAL,
            AgentError::Busy { .. } => libc::EBUSY,
            AgentError::Runtime(e) => e.errno(),
            AgentError::Level(e) => e.errno(),
            AgentError::Stopped(_) => libc::EINTR,
            AgentError::NewerElsewhere { .. } => libc::EEXIST,
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

/// Why restore refuses a destination file (docs/design.md, "Threat model: restore input").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A symbolic link where a file or directory of the drain layout must be.
    #[error("it is a symbolic link (not followed)")]
    Symlink,
    /// A FIFO, device, socket or directory where a data file must be.
    #[error("not a regular file")]
    NotRegular,
    /// Owned by someone other than the owner of the manifest that lists it (the agent
    /// creates both; another owner means the file was put there by someone else).
    #[error("owned by uid {file}, but its manifest by uid {manifest}")]
    Owner {
        /// Owner of the data file.
        file: u32,
        /// Owner of the manifest.
        manifest: u32,
    },
    /// Not the size the manifest gives.
    #[error("{found} bytes, the manifest says {expected}")]
    Size {
        /// Size on disk.
        found: u64,
        /// Size in the manifest.
        expected: u64,
    },
    /// The directory was replaced between finding the manifest and reading the file.
    #[error("the directory changed during the restore")]
    DirChanged,
}

impl Refusal {
    /// The POSIX errno.
    pub fn errno(&self) -> i32 {
        match self {
            Refusal::Symlink => libc::ELOOP,
            Refusal::NotRegular => libc::EINVAL,
            Refusal::Owner { .. } => libc::EPERM,
            Refusal::Size { .. } => libc::EIO,
            Refusal::DirChanged => libc::EAGAIN,
        }
    }
}

impl From<AgentError> for io::Error {
    fn from(e: AgentError) -> Self {
        let errno = e.errno();
        io::Error::new(io::Error::from_raw_os_error(errno).kind(), e)
    }
}

/// A level error back as the agent's: the PFS level's own errors come back whole, the
/// store's as [`AgentError::Store`], a changed source as [`AgentError::Changed`].
impl From<LevelError> for AgentError {
    fn from(e: LevelError) -> Self {
        match e {
            LevelError::Backend { errno, source } => match source.downcast::<AgentError>() {
                Ok(a) => *a,
                Err(source) => match source.downcast::<StoreError>() {
                    Ok(s) => AgentError::Store(*s),
                    Err(source) => AgentError::Level(LevelError::Backend { errno, source }),
                },
            },
            LevelError::Changed(p) => AgentError::Changed(p),
            other => AgentError::Level(other),
        }
    }
}
