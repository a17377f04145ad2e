//! Runtime files of the ckptfs daemons and tools, kept where no other user can plant them.
//!
//! /dev/shm and /tmp are shared by every user of a node: a lock, status, pid or log file
//! at a predictable name there can be created first by someone else, or be a symbolic
//! link to a file the victim (often root) may write. This crate is the one place that
//! creates such files, and it only does so inside a **runtime directory owned by the
//! caller with mode 0700**:
//!
//! - [`RuntimeDir::for_caller`] picks `$XDG_RUNTIME_DIR/ckptfs` when `$XDG_RUNTIME_DIR`
//!   is a directory owned by the caller and not writable by group or others, else
//!   `/run/user/UID/ckptfs` under the same rule, else `/dev/shm/ckptfs-UID`, else
//!   `$TMPDIR/ckptfs-UID`. The directory is created with mode 0700; an existing one must
//!   be a real directory (opened with `O_NOFOLLOW|O_DIRECTORY`, then `fstat`) owned by
//!   the caller (the effective uid) with mode 0700, else the error names the path and the
//!   owner found.
//! - Files inside are opened only with `openat(dirfd, name, O_NOFOLLOW|O_CLOEXEC[...])`
//!   relative to the directory's descriptor, then `fstat`-checked: a regular file owned
//!   by the caller.
//! - [`RuntimeDir::lock`] is the single-instance lock of a daemon (`flock` held for the
//!   daemon's life; the holder's pid is recorded in the file; a stale pid in an unlocked
//!   file is never reported as a holder).
//! - [`RuntimeDir::write_atomic`] replaces a status file atomically (temporary file and
//!   `renameat` inside the directory).
//! - [`RuntimeDir::open_log`] and [`open_log_file`] open a daemon's log for appending
//!   without following symbolic links, and check its owner.
//!
//! - [`Shutdown`] is the stop trigger a daemon's library `run` function takes as a
//!   parameter; only binaries route signals to it ([`Shutdown::on_signals`]).
//!
//! Every error is a [`RuntimeError`] naming the path, with one errno per variant
//! ([`RuntimeError::errno`]).

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod dir;
mod error;
mod lock;
mod shutdown;
mod sys;

pub use dir::{open_log_file, RuntimeDir};
pub use error::{Result, RuntimeError};
pub use lock::InstanceLock;
pub use shutdown::Shutdown;
pub use sys::raise_nofile_limit;
