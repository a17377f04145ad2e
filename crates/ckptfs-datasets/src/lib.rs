//! # ckptfs-datasets: checkpoints of a whole job, and restart from the newest usable one
//!
//! ckptfs's store knows files; a parallel job's checkpoint is the set of files of all its
//! ranks, usable only when every one of them is complete on some level (SCR's model,
//! CRUISE section 2.2). This crate keeps that set as a **dataset**: an id monotonic per
//! job, a name, per-rank parts, a state (open, complete, invalid, incomplete), the files
//! with size and CRC32C, and per file the levels holding it. docs/datasets.md has the
//! state machine, the record format and the numbered failure cases D1-D10b.
//!
//! - Explicit API: [`Datasets::begin`], [`Datasets::complete`] (the C ABI's
//!   `ckptfs_ckpt_begin`/`ckptfs_ckpt_complete`, `ckptfs ckpt begin|complete`).
//! - Transparent mode: directories matching the `dataset_pattern` setting are datasets,
//!   complete per `dataset_complete` (`files:N` or `marker:NAME`).
//! - Job-wide agreement is one small step, [`Completion`]: [`SingleNode`] when every rank
//!   writes to this node; across nodes its [`JobNodes`] (the node daemons, in
//!   `ckptfs-node`) answer, and [`jobwide::judge`] gives the verdict (failure case D7).
//! - Restart: [`Datasets::restart`] picks the newest wholly recoverable dataset (local
//!   store, then partner memory across nodes, then PFS manifests) and brings missing files
//!   back, CRC-checked; across nodes every rank chooses the same one.
//! - Retention (`dataset_keep_memory`, `dataset_keep_pfs`, `dataset_flush_every`) and the runtime level
//!   policy ([`policy`]): REMEM's generalised Algorithm 1 on measured costs, recorded
//!   per dataset; Young/Daly advice in [`policy::need`].
//!
//! Records live in the node store under `/.ckptfs/datasets/JOB/` and are replaced
//! crash-safely (temporary name, then rename).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod completion;
mod config;
mod costs;
mod decide;
mod error;
mod filecrc;
mod flush_policy;
mod handle;
pub mod id_floor;
pub mod jobwide;
pub mod level_policy;
pub mod levels_record;
pub mod measured;
mod ops;
pub mod partner_policy;
mod pfs_copies;
mod pfs_retention;
pub mod policy;
pub mod protection;
pub mod record;
mod restart;
mod restart_cluster;
pub mod restart_round;
mod retention;
mod rounds;
#[cfg(test)]
mod set_levels_tests;
#[cfg(test)]
mod two_nodes_tests;

pub use completion::{Agreement, Completion, JobNodes, NodeRecords, SingleNode, Want};
pub use config::{check_component, glob_match, CompleteRule, Config, FailureRule};
pub use error::{DatasetError, Result};
pub use filecrc::{file_crc, file_crc_from_chunks, ChunkCrc};
pub use flush_policy::FlushPolicy;
pub use handle::{remove_lock, Datasets};
pub use jobwide::{judge, JobDataset, JobState, Views};
pub use ops::check_name;
pub use partner_policy::{CopyVerdict, PartnerPolicy};
pub use pfs_copies::pfs_has as pfs_holds;
pub use record::{Dataset, DecisionRec, FileRec, NodePart, Part, State};
pub use restart::{Restart, Skipped, Source};
