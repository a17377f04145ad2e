//! # ckptfs-compat: the shared core of ckptfs's SCR and VeloC drop-in libraries
//!
//! `libscr.so` (crate `ckptfs-scr`) and `libveloc-client.so` (crate `ckptfs-veloc`)
//! give programs written for LLNL's SCR and ECP's VeloC their C (and, for SCR, Fortran)
//! interfaces over ckptfs datasets. Both need the same few things, kept here once:
//!
//! - [`mpi`]: the collective steps (barrier, agreement on a flag, broadcast of a
//!   choice) over a duplicate of the application's communicator, through a small C
//!   glue compiled against the program's `mpi.h` (build.rs);
//! - [`conf`]: the libraries' own configuration sources (SCR's `SCR_CONF_FILE` /
//!   `.scrconf` and environment, VeloC's configuration file) read into key/value pairs,
//!   mapped onto ckptfs settings, with the keys that mean nothing here reported once;
//! - [`session`]: one process's link to the node store and its datasets: a staging
//!   directory the application writes its routed files into, the copy of those files
//!   into the store at completion, the restart search (newest wholly recoverable
//!   dataset, local store then PFS) and the copy back out for reading, and the flush of
//!   a dataset to the PFS through the drain agent;
//! - [`direct`]: when the preload shim is in the process and serves the same store,
//!   routes that name the store files themselves (no staging, no copy);
//! - [`cluster`]: across nodes, the job-wide dataset calls of `libckptfs.so`, loaded
//!   at run time only when `CKPTFS_CLUSTER` is set;
//! - [`ffi`]: C strings in and out and the panic guard every exported function runs
//!   under.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod cluster;
pub mod conf;
pub mod direct;
pub mod error;
pub mod ffi;
pub mod mpi;
pub mod session;
pub mod staged;

pub use error::{CompatError, Result};
