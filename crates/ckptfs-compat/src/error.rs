//! The libraries' error type. Each API maps every error onto its own documented return
//! code (SCR: anything but `SCR_SUCCESS`; VeloC: `VELOC_FAILURE`); the message goes to
//! standard error, prefixed with the library and the rank, as both originals print
//! theirs.

use ckptfs_datasets::DatasetError;
use ckptfs_store::StoreError;

/// A failed call of the SCR or VeloC interface.
#[derive(Debug, thiserror::Error)]
pub enum CompatError {
    /// A call before the library's Init (or after its Finalize).
    #[error("{0} called before Init (or after Finalize)")]
    NotInitialized(&'static str),
    /// A call out of order (Complete without Start, Start inside a phase, ...).
    #[error("{0}")]
    State(String),
    /// A bad argument (NULL, a path outside the prefix, a bad name or flag).
    #[error("{0}")]
    Invalid(String),
    /// A name or path longer than the interface allows.
    #[error("{0}")]
    TooLong(String),
    /// A file that should exist does not.
    #[error("{0}")]
    NotFound(String),
    /// An MPI call failed, or MPI is not initialized.
    #[error("MPI: {0}")]
    Mpi(String),
    /// Another rank failed its part of a collective step.
    #[error("{0}")]
    Collective(String),
    /// The node store refused an operation.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The datasets refused an operation.
    #[error("datasets: {0}")]
    Datasets(#[from] DatasetError),
    /// A file system call on the staging directory or the prefix failed.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// The drain to the PFS failed.
    #[error("flush: {0}")]
    Flush(String),
    /// A panic inside the library, caught at the C boundary.
    #[error("internal error (panic): {0}")]
    Panic(String),
}

/// Shorthand.
pub type Result<T, E = CompatError> = std::result::Result<T, E>;

impl CompatError {
    /// An I/O error with what was being done.
    pub fn io(what: impl std::fmt::Display, e: std::io::Error) -> CompatError {
        CompatError::Io(what.to_string(), e)
    }
}
