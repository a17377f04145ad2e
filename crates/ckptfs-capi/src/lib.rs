//! # ckptfs-capi: the C ABI of the ckptfs node store
//!
//! Builds `libckptfs.so` and `libckptfs.a`; the interface is declared in
//! `include/ckptfs.h` and described in `docs/capi.md`. Every function returns `0` (or a
//! byte count, a position, a descriptor) on success and `-errno` on failure, with the
//! errno taken from [`ckptfs_store::StoreError::errno`]; `ckptfs_last_error()` gives the
//! message. No panic crosses the boundary: each body runs under `catch_unwind` and a
//! panic becomes `-EIO`.
//!
//! A program mounts a store under a path prefix (`ckptfs_mount("/ckpt", NULL)` takes the
//! settings from the `CKPTFS_*` environment) and then uses full paths under it
//! (`/ckpt/rank0.dat` is store path `/rank0.dat`). Descriptors are small non-negative
//! integers in a table of this library, independent of kernel file descriptors.
//!
//! The data-region calls (CRUISE section 4.6) let another process (a drain agent) copy a
//! file out without the writer: `ckptfs_get_data_region` gives the base and size of the
//! memory chunks as mapped in the caller, `ckptfs_get_chunk_list` the chunks of a file
//! with their offsets, lengths and CRC32C.
//!
//! `ckptfs_pool_*` ([`pool`]) write and read files of the aggregate memory pool (a
//! manager and benefactor nodes lending memory): a file written there is committed to
//! the pool by `ckptfs_pool_close`.
//!
//! `ckptfs_file_levels` and `ckptfs_file_partners` ([`levels`]) tell which levels hold
//! the current version of a file: this node's store, partner nodes, the PFS.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(test)]
mod cluster_tests;
pub mod datasets;
pub mod env;
pub mod error;
pub mod ffi;
pub mod levels;
pub mod pool;
pub mod state;
pub mod types;
