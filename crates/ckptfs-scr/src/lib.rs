//! # ckptfs-scr: `libscr.so`, SCR's interface over ckptfs datasets
//!
//! A program written for LLNL's SCR (`scr.h`: `SCR_Init`, `SCR_Start_output`,
//! `SCR_Route_file`, `SCR_Complete_output`, `SCR_Have_restart`, `SCR_Start_restart`,
//! `SCR_Complete_restart`, `SCR_Need_checkpoint`, `SCR_Should_exit`, `SCR_Current`,
//! `SCR_Drop`, `SCR_Delete`, `SCR_Config`, `SCR_Finalize`, and the Fortran `scrf`
//! subroutines) links against this library instead of SCR's and keeps its code.
//!
//! Mapping (docs/scr-veloc.md): one ckptfs dataset per checkpoint (SCR_FLAG_CHECKPOINT),
//! begun collectively by `SCR_Start_output`; the files routed by `SCR_Route_file` are
//! written by the application into a staging directory and copied into the node store
//! under the dataset's directory by `SCR_Complete_output`, which completes the rank's
//! part (valid only if every rank says valid). Output datasets (SCR_FLAG_OUTPUT) are
//! copied to their path under the prefix. `SCR_Have_restart` answers the newest
//! dataset that is wholly recoverable (store, or the PFS manifests in the flush
//! destination), `SCR_Start_restart` brings this rank's files back, and
//! `SCR_Route_file` hands them out for reading. Return codes: `SCR_SUCCESS` (0), and
//! `SCR_FAILURE` (1, SCR's internal failure code) for every error, with the reason on
//! standard error.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod api;
pub mod config;
pub mod fortran;
pub mod state;
