//! # ckptfs-datasets: checkpoints of a whole job, and restart from the newest usable one
//!
//! ckptfs's store knows files; a parallel job's checkpoint is the set of files of all its
//! ranks, usable only when every one of them is complete on some level (SCR's model,
//! CRUISE section 2.2). This crate keeps that set as a **dataset**: an id monotonic per
//! job, a name, per-rank parts, a state (open, complete, invalid, incomplete), the files
//! with size and CRC32C, and per file the levels holding it. docs/datasets.md has the
//! state machine, the record format and the numbered failure cases D1-D6.
//!
//! - Explicit API: [`Datasets::begin`], [`Datasets::complete`] (the C ABI's
//!   `ckptfs_ckpt_begin`/`ckptfs_ckpt_complete`, `ckptfs ckpt begin|complete`).
//! - Transparent mode: directories matching the `dataset_pattern` setting are datasets,
//!   complete per `dataset_complete` (`files:N` or `marker:NAME`).
//! - Job-wide agreement is one small step, [`Completion`]: [`SingleNode`] now, the node
//!   daemon's implementation when its peer transport is merged.
//! - Restart: [`Datasets::restart`] picks the newest wholly recoverable dataset (local
//!   store, then PFS manifests) and brings missing files back, CRC-checked.
//! - Retention (`dataset_keep_memory`, `dataset_flush_every`) and the runtime level
//!   policy ([`policy`]): REMEM's generalised Algorithm 1 on measured costs, recorded
//!   per dataset; Young/Daly advice in [`policy::need`].
//!
//! Records live in the node store under `/.ckptfs/datasets/JOB/` and are replaced
//! crash-safely (temporary name, then rename).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod completion;
mod config;
mod error;
pub mod levels_record;
mod ops;
pub mod policy;
pub mod record;
mod restart;

pub use completion::{Agreement, Completion, SingleNode};
pub use config::{check_component, glob_match, CompleteRule, Config, FailureRule};
pub use error::{DatasetError, Result};
pub use ops::{check_name, file_crc, Datasets};
pub use record::{Dataset, DecisionRec, FileRec, Part, State};
pub use restart::{Restart, Skipped, Source};
