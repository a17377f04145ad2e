//! # ckptfs-node: the per-node daemon (`ckptfs node`)
//!
//! One daemon per node hosts every background level of the node: the drain to the
//! parallel file system (the [`ckptfs_agent`] engine) and, here, partner copies: every
//! file that becomes complete in the node store (closed by its last writer) is sent to
//! the node's partners (from the cluster plan: other failure domains), which keep it in
//! their own store under `/.ckptfs/partners/<node>/`, hidden from applications. After a
//! node is lost, a replacement with an empty store gets its files back from the
//! partners' memory ([`restore_from_peers`]), then from the PFS.
//!
//! - [`daemon`]: [`run`] with the shutdown trigger as a parameter; listener/handler
//!   split; heartbeats (soft state); status file.
//! - [`replicate`](crate::daemon): partner copies out, chunk by chunk with CRC32C, one
//!   file at a time (bounded memory), bandwidth cap; deletes and rewrites follow.
//! - [`datasets`]: the daemon's answers to other nodes' dataset questions and the id
//!   floor exchange (the set levels a restart recovers from are the client's:
//!   `ckptfs_partner::set_levels`).
//!
//! The client side (the peer messages and connection, a partner's memory as a
//! [`ckptfs_level::Level`] ([`PartnerLevel`]), the dataset questions and
//! [`ckptfs_partner::ClusterNodes`], the `holds` and `unrecorded` answers) is
//! [`ckptfs_partner`], which this crate depends on.
//! - [`partner_store`]: partner copies in, received under a temporary name and renamed
//!   into place only when complete and verified.
//! - [`levels`]: which levels hold each file (local, partner nodes, PFS).
//! - [`restore`]: recovery from the partners' memory (a holder's listing bounded by
//!   what the store could hold: [`ListBounds`]).
//! - [`erasure`]: erasure sets across the daemons (issue 32): the leader's encode of
//!   complete datasets, the XOR ring, the members' shares, the rebuild of a lost
//!   member's part from the survivors.
//! - [`ratelimit`]: at most one warning per source address or peer per 10 s.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod copy_send;
pub mod daemon;
pub mod datasets;
pub mod erasure;
mod erasure_state;
mod handler;
pub mod job_files;
pub mod levels;
pub mod metrics;
mod metrics_export;
pub mod node_status;
pub mod partner_store;
mod protect;
pub mod ratelimit;
mod replicate;
pub mod restore;
mod shared;
pub mod source;
mod throttle;

pub use ckptfs_agent::sys::Priority;
pub use ckptfs_partner::{protection_mode, set_levels};
pub use ckptfs_partner::{ListBounds, PartnerLevel};
pub use ckptfs_partner::{NodeError, Result};
pub use daemon::{run, run_blocking, NodeSummary};
pub use erasure::{rebuild_from_set, ErasureConfig, SetRebuildReport};
pub use levels::{LevelsView, Where};
pub use metrics::MetricsConfig;
pub use node_status::{status, NodeStatus};
pub use restore::{restore_from_peers, restore_from_peers_blocking, PeerRestoreReport};
pub use shared::{parse_priority, priority_name, NodeConfig, DEFAULT_PARTNER_SHARE};
