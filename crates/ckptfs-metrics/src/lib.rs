//! # ckptfs-metrics: Prometheus metrics of the node daemon and the drain agent
//!
//! Three parts, no dependency on an async runtime:
//!
//! - [`text`]: the Prometheus text exposition format (version 0.0.4): metric families
//!   with `# HELP` and `# TYPE`, samples with escaped label values; names and labels are
//!   checked ([`Exposition`]).
//! - [`server`]: a minimal HTTP/1.1 responder for `GET /metrics` on std threads
//!   ([`Server`]): a bounded request head, timeouts, a bounded number of connections,
//!   `Connection: close`; a render error or a panic in the render function answers 500
//!   and never takes the daemon down.
//! - [`collect`]: the families every ckptfs process that holds a store exports: store
//!   and spill use, files and bytes per level, datasets by state, the protection of the
//!   newest complete dataset, the drain's backlog and rate (from the agent's status).
//!   The node daemon adds its own (partner copies, peers) in `ckptfs-node`.
//!
//! The metric names and their meaning are listed in docs/metrics.md.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod collect;
pub mod server;
pub mod text;

pub use server::{Render, Server};
pub use text::{Exposition, Kind};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A metric or label name that the exposition format does not allow.
    #[error("invalid metric or label name {0:?}")]
    InvalidName(String),
    /// A metric family written twice in one exposition.
    #[error("metric family {0:?} written twice")]
    Duplicate(String),
    /// A counter whose name does not end in `_total`.
    #[error("counter {0:?} does not end in _total")]
    CounterName(String),
    /// The listening address could not be parsed or bound.
    #[error("metrics address {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Another I/O failure (starting the server thread).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A collector could not read what it exports.
    #[error("{0}")]
    Collect(String),
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, MetricsError>;
