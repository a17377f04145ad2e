//! The `[daemon]` section of the settings (`ckptfs node`, crate ckptfs-node,
//! docs/cluster.md): its resolved values ([`DaemonSettings`]) and the value kind only it
//! uses (a size or a share of memory, [`PartnerMax`]).

use crate::parse::parse_size;

/// How much memory a node daemon gives to other nodes' copies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PartnerMax {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this share (0 to 1) of the store's memory.
    Share(f64),
}

/// `SIZE` or `N%` (0 to 100).
pub fn parse_size_or_share(v: &str) -> Result<PartnerMax, String> {
    match v.trim().strip_suffix('%') {
        Some(p) => match p.trim().parse::<f64>() {
            Ok(x) if (0.0..=100.0).contains(&x) => Ok(PartnerMax::Share(x / 100.0)),
            _ => Err(format!("{v:?}: want a share from 0% to 100%")),
        },
        None => parse_size(v).map(PartnerMax::Bytes),
    }
}

/// The resolved `[daemon]` settings (`ckptfs node`).
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSettings {
    /// Seconds between scans of the store (at least 0.01).
    pub scan_interval: f64,
    /// Longest pause of partner copies for the application's writes, seconds (0: none).
    pub writer_yield: f64,
    /// Bandwidth cap of partner copies out, bytes per second (None: none).
    pub max_bw: Option<f64>,
    /// Memory given to other nodes' copies.
    pub partner_max: PartnerMax,
    /// Prometheus metrics address (None: off).
    pub metrics: Option<String>,
}

impl Default for DaemonSettings {
    fn default() -> Self {
        DaemonSettings {
            scan_interval: 0.2,
            writer_yield: 1.0,
            max_bw: None,
            partner_max: PartnerMax::Share(0.5),
            metrics: None,
        }
    }
}
