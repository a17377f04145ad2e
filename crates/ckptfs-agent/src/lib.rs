//! # ckptfs-agent: background drain to the parallel file system, and restore
//!
//! A per-node agent attaches to the node store and copies complete files (closed by
//! their last writer, every chunk's CRC32C valid) to a destination directory on the
//! parallel file system, without involving the processes that wrote them: it reads the
//! chunks straight from the shared data region ([`Store::chunk_list`] and the store's
//! [`region_io`](ckptfs_store::region_io), which holds the shared-memory `unsafe`;
//! CRUISE section 4.6) and spill chunks from the spill file.
//!
//! - **Atomic publish**: a file is written under a temporary name, fsynced, renamed to
//!   its final name and the directory fsynced; then the node's manifest in that
//!   directory ([`manifest`]) is replaced atomically. A killed agent never leaves a
//!   file under a final name that is not complete, and a restarted agent skips what the
//!   manifest shows as published and unchanged.
//! - **Staged marshaling** (checkpoint orchestration, Algorithm 1): one file flushed at
//!   a time per node, pipelined with staging the next ([`engine`]).
//! - **Vertical placement**: each node's files go to one target ([`config`]).
//! - **Low impact**: the drain's bytes go through a `ckptfs_level::Mover`: several
//!   writer threads per file, large gathered writes, optional O_DIRECT from the
//!   aligned chunks, a bandwidth cap, nice and IO priority ([`sys`]).
//! - **Restore** ([`mod@restore`]): multi-level read back into the store, checked against
//!   the manifest.
//!
//! - **The mover between levels** ([`mover`]): the node store and the PFS directory are
//!   levels behind `ckptfs_level::Level` ([`ckptfs_store::level::StoreLevel`], [`PfsLevel`]);
//!   the drain is the store -> PFS path, restore the PFS -> store path, and [`fill`]
//!   moves files between any two levels under a [`MovePolicy`].
//!
//! State is published for other processes in a JSON file next to the segment
//! ([`status()`]).
//!
//! [`Store::chunk_list`]: ckptfs_store::Store::chunk_list
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod beneath;
pub mod config;
pub mod dest;
pub mod engine;
mod error;
pub mod manifest;
mod manifest_error;
pub mod mover;
pub mod pfs;
pub mod restore;
pub mod status;
pub mod sys;

pub use config::{AgentConfig, Target};
pub use engine::{Agent, DrainSummary, StopHandle};
pub use error::{AgentError, Refusal};
pub use mover::{fill, DrainPolicy, MovePolicy};
pub use pfs::{PfsFactory, PfsLevel};
pub use restore::{restore, restore_nodes, restore_path, RestoreReport, Skipped};
pub use status::{status, AgentStatus};
