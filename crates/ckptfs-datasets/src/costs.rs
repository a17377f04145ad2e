//! This job's measured costs, smoothed (`/.ckptfs/datasets/JOB/costs.json`): the local
//! checkpoint time, the PFS's, partners' and the erasure set's bandwidths, each sample
//! weighted [`SMOOTH`] (docs/policy.md; [`crate::policy`] says where each comes from).

use crate::error::{DatasetError, Result};
use crate::handle::Datasets;
use crate::record::{self, job_dir};
use serde::{Deserialize, Serialize};

/// Weight of a new sample in the smoothed costs.
pub const SMOOTH: f64 = 0.5;

/// Measured transfer rates of this job (smoothed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Costs {
    /// Local level: bytes per second written (begin to complete).
    pub local_bps: Option<f64>,
    /// Local level: seconds of the last checkpoints (smoothed).
    pub local_ckpt_s: Option<f64>,
    /// PFS: bytes per second measured by restores.
    pub pfs_bps: Option<f64>,
    /// Seconds between completions (smoothed).
    pub interval_s: Option<f64>,
    /// Partner level: bytes per second from a dataset's last close to its last partner
    /// acknowledgement (the node daemon's levels record).
    pub partner_bps: Option<f64>,
    /// Partner level: bytes per second of this job's fetches from partners (restart).
    pub partner_get_bps: Option<f64>,
    /// The newest dataset a partner copy time was sampled from (each is sampled once).
    pub partner_sampled_id: Option<u64>,
    /// Erasure level: bytes of this node's part per second from a dataset's last close
    /// to its encoding's header in this store (the set's encode, [`crate::measured`]).
    pub erasure_bps: Option<f64>,
    /// Erasure level: bytes per second of this job's rebuilds from the set (restart).
    pub erasure_get_bps: Option<f64>,
    /// The newest dataset an encode time was sampled from (each is sampled once).
    pub erasure_sampled_id: Option<u64>,
}

pub(crate) fn smooth(old: Option<f64>, new: f64) -> Option<f64> {
    Some(match old {
        Some(o) => o * (1.0 - SMOOTH) + new * SMOOTH,
        None => new,
    })
}

fn costs_path(job: &str) -> String {
    format!("{}/costs.json", job_dir(job))
}

/// The job's measured costs.
pub fn load_costs(ds: &Datasets) -> Costs {
    record::read_file(&ds.store, &costs_path(&ds.cfg.job))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

pub(crate) fn save_costs(ds: &Datasets, c: &Costs) -> Result<()> {
    record::mkdir_p(&ds.store, &job_dir(&ds.cfg.job))?;
    let b = serde_json::to_vec_pretty(c).map_err(|e| DatasetError::Invalid(e.to_string()))?;
    record::write_atomic(&ds.store, &costs_path(&ds.cfg.job), &b)
}

/// Fold a transfer of `bytes` in `secs` into the measured rate `rate` picks out.
fn record_transfer(
    ds: &Datasets,
    bytes: u64,
    secs: f64,
    rate: fn(&mut Costs) -> &mut Option<f64>,
) -> Result<()> {
    if bytes == 0 || secs <= 0.0 {
        return Ok(());
    }
    let _l = ds.lock()?;
    let mut c = load_costs(ds);
    let r = rate(&mut c);
    *r = smooth(*r, bytes as f64 / secs);
    save_costs(ds, &c)
}

/// Record a transfer of `bytes` in `secs` that brought files back from the level of
/// kind `kind` (a [`ckptfs_level::LevelId`]'s kind: `pfs`, a restore; `partner`, fetches
/// from partners; `erasure`, a rebuild from the node's set) into the measured rate the
/// costs file keeps for it. A kind it keeps none for is not recorded (Ok).
pub fn record_level_transfer(ds: &Datasets, kind: &str, bytes: u64, secs: f64) -> Result<()> {
    let rate: fn(&mut Costs) -> &mut Option<f64> = match kind {
        "pfs" => |c| &mut c.pfs_bps,
        "partner" => |c| &mut c.partner_get_bps,
        "erasure" => |c| &mut c.erasure_get_bps,
        _ => return Ok(()),
    };
    record_transfer(ds, bytes, secs, rate)
}

/// Record a PFS transfer (a restore) of `bytes` in `secs`.
pub fn record_pfs_transfer(ds: &Datasets, bytes: u64, secs: f64) -> Result<()> {
    record_level_transfer(ds, "pfs", bytes, secs)
}
