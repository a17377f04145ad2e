//! # ckptfs-veloc: `libveloc-client.so`, VeloC's client API over ckptfs datasets
//!
//! A program written for ECP's VeloC (`veloc.h`) links against this library instead of
//! VeloC's client and keeps its code. Both of VeloC's modes are served:
//!
//! - **memory mode**: `VELOC_Mem_protect` registers regions; `VELOC_Checkpoint_mem`
//!   serialises them ([`regions`]) straight into the node store, `VELOC_Recover_mem`
//!   restores them into the same (registered) regions;
//! - **file mode**: `VELOC_Route_file` hands out a staged path for the rank's file of
//!   the checkpoint, copied into the store at `VELOC_Checkpoint_end` and back out at
//!   restart.
//!
//! Each checkpoint `NAME` version `V` is one ckptfs dataset named `NAME.V`, begun
//! collectively over the communicator given to `VELOC_Init` and complete only when every
//! rank's part is (VeloC itself takes the max over ranks' newest versions;
//! `VELOC_Restart_test` here answers the newest version that is wholly recoverable).
//! Return codes: `VELOC_SUCCESS` (0) and `VELOC_FAILURE` (-1) with the reason on
//! standard error; `VELOC_Restart_test` returns a version or `VELOC_FAILURE`.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod api;
pub mod config;
pub mod regions;
pub mod state;
