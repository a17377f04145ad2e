//! # ckptfs-bench: benchmarks that print measured figures next to their baselines
//!
//! Every benchmark measures the system under test and its baseline in the same run
//! (memcpy into pre-faulted shared memory, `write()` on /dev/shm, direct writes to the
//! destination), repeats each case and reports medians, and prints a table or a JSON
//! document (`--json`). They are programs, not timed tests: nothing here asserts a time.
//! Multi-process cases fork worker processes that start together at a barrier and report
//! their own start and end times on a monotonic clock; the aggregate bandwidth is total
//! bytes over (last end - first start).
//!
//! This crate is a binary-support library: it uses `anyhow` for errors like a binary.
#![deny(missing_docs)]

pub mod drain;
pub mod fuse;
mod fuse_args;
pub mod fuse_md;
mod fuse_store;
pub mod huge;
pub mod preload;
pub mod procs;
pub mod report;
pub mod store;
pub mod torch;
