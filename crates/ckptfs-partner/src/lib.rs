//! # ckptfs-partner: the client side of the node daemons
//!
//! What a process needs to talk to node daemons without being one (the CLI, the C API,
//! Python, and the daemon itself when it asks its peers): this crate does not depend on
//! the daemon (`ckptfs-node`), which depends on it.
//!
//! The client is blocking: it speaks over the transport's blocking connection
//! ([`peer::blocking::Conn`], a `std::net::TcpStream` of the calling thread) and starts
//! no runtime, so what links it (the C library, Python) links no tokio. Questions to
//! several nodes at once run on scoped threads that end with the call. The daemon's
//! async connection on the transport's tokio side (`peer::Conn`, `peer::request`, and
//! the erasure helpers `set_rebuild::{send_era, recv_era, ask, connect}`) is behind the
//! cargo feature `tokio`, off by default, which only `ckptfs-node` enables; the frames
//! on the wire are the same from both (the messages are translated once, [`peer`]).
//!
//! - [`peer`]: the node protocol's messages ([`peer::Msg`]) and authenticated
//!   connections to another daemon over [`ckptfs_transport`]: [`peer::blocking::Conn`]
//!   (the client's) and, with the feature `tokio`, `peer::Conn` (the daemon's).
//! - [`partner_level`]: a partner's memory as a [`ckptfs_level::Level`]
//!   ([`PartnerLevel`]), its listings bounded by [`ListBounds`] ([`list_bounds`]).
//! - [`cluster`]: the dataset questions asked of other daemons ([`cluster::Request`],
//!   [`cluster::Reply`]) and [`ClusterNodes`], the job's other nodes as
//!   [`ckptfs_datasets::JobNodes`], whose set levels are [`set_levels()`]'s.
//! - [`mod@set_levels`]: the registry of set levels ([`ckptfs_level::SetProtection`]) a
//!   cluster file gives, in read order: [`partner_set::PartnerCopies`] (the partner
//!   copies; also the replacement's restore from peers), then each erasure set
//!   ([`erasure_set::ClusterErasureSet`], over [`set_rebuild`]).
//! - [`copies`]: where partner copies sit in a holder's store, the checks of what a peer
//!   names, the listing of complete copies.
//! - [`holds`], [`unrecorded`]: the answers a node gives about its own store (also asked
//!   of the local store by [`ClusterNodes`]).
//! - [`runtime_files`]: the daemon's files in the caller's runtime directory
//!   ([`runtime_files::remove_store_files`] after a store is destroyed).
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod ask;
pub mod cluster;
pub mod copies;
pub mod erasure_set;
mod error;
pub mod holds;
pub mod list_bounds;
pub mod partner_level;
pub mod partner_set;
mod parts_send;
pub mod peer;
pub mod runtime_files;
pub mod set_levels;
pub mod set_rebuild;
pub mod unrecorded;

pub use cluster::ClusterNodes;
pub use error::{NodeError, Result};
pub use list_bounds::ListBounds;
pub use partner_level::PartnerLevel;
pub use set_levels::{protection_mode, set_levels};
