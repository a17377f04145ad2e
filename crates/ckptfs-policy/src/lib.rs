//! # ckptfs-policy: which level should this checkpoint go to?
//!
//! ckptfs can keep a checkpoint in node memory, copy it to a partner node's
//! memory, or write it to the parallel file system (PFS). Faster levels are
//! cheaper to write and to restart from but lose the checkpoint on more kinds
//! of failure. This crate decides per checkpoint, following REMEM's adaptive
//! storage selection (Jin et al.; seed 003 of the project):
//!
//! * [`remem`]: REMEM's formulas (1) and (2) and Algorithm 1, exactly as
//!   published (remote memory vs disk);
//! * [`decide()`]: the generalisation to ckptfs's three levels, with soft
//!   (process) and hard (node) failures;
//! * [`young_interval`], [`daly_interval`]: the checkpoint interval;
//! * [`Simulator`]: a Weibull (or failure-log) driven simulation that compares
//!   fixed levels with the adaptive policy, and the [`fig5`] preset that
//!   reproduces REMEM's Figure 5;
//! * `cli` (cargo feature `cli`, which the ckptfs CLI enables, with `clap` for
//!   `ValueEnum` on the enums and `plot` for PNG charts): the `ckptfs policy` subcommands.
//!
//! docs/policy.md describes the model, the formulas and the results.
//!
//! ```
//! use ckptfs_policy::{decide, DecisionInput, Level, LevelCost, LevelCosts, Predictor, RollbackCount};
//! let input = DecisionInput {
//!     costs: LevelCosts {
//!         local: None,
//!         partner: Some(LevelCost { checkpoint_s: 8.0, restart_s: 8.0 }),
//!         pfs: LevelCost { checkpoint_s: 130.0, restart_s: 130.0 },
//!     },
//!     tau: 7200.0,
//!     predictor: Predictor { precision: 0.7, recall: 0.7 },
//!     source_alarm: false,
//!     backup_alarm: false,
//!     n_pfs: 0,
//!     n_partner: None,
//!     soft_fraction: 0.0,
//!     rollback: RollbackCount::Paper,
//! };
//! assert_eq!(decide(&input).level, Level::Partner);
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

#[cfg(feature = "cli")]
pub mod cli;
pub mod costs_file;
mod decide;
mod error;
pub mod failure;
pub mod fig5;
pub mod interval;
pub mod math;
#[cfg(feature = "plot")]
mod plot;
pub mod remem;
pub mod rng;
mod sim;
pub mod units;

pub use decide::{
    decide, try_decide, Decision, DecisionInput, Level, LevelCost, LevelCosts, LevelEstimate, RollbackCount,
};
pub use error::PolicyError;
pub use failure::{FailureEvent, FailureLog, Matching, Weibull};
pub use interval::{daly_exact_interval, daly_interval, young_interval, IntervalAdvice};
pub use remem::Predictor;
pub use sim::{
    CostRatios, FailureSource, LevelCounts, SimConfig, SimReport, Simulator, Strategy, StrategyResult,
};
