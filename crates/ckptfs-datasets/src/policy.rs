//! The level policy at run time (docs/policy.md's generalised Algorithm 1) and the
//! checkpoint-interval advice (Young/Daly), fed by this job's own measurements.
//!
//! - Costs: the local checkpoint time is measured at every completion (first begin to
//!   completion: the time the application is stopped) and the PFS's bandwidth at every
//!   restore from it; a PFS checkpoint costs the local write plus the flush. Smoothed (exponential, weight [`SMOOTH`] on the new
//!   sample) in `/.ckptfs/datasets/JOB/costs.json`. Until the PFS has been measured, the
//!   `pfs_bandwidth` setting stands in; the drain agent's published PFS bandwidths
//!   (its status file's `levels[]`) come first when it has measured them. The partner
//!   level is offered when a node daemon runs on this store with a partner and a
//!   partner copy time has been measured from its levels record ([`crate::measured`]):
//!   partner checkpoint = local time + bytes / partner copy bandwidth, restart = bytes /
//!   the bandwidth of this job's fetches from partners (else the copy bandwidth).
//! - Failure probabilities: an alarm for this node is a file `/.ckptfs/alarms/NODE`
//!   (`ckptfs alarm NODE [--clear]`, or an external predictor writing it). `remem`:
//!   precision with an alarm, 1 - recall without. `posterior` (default): with base
//!   rate `pi = 1 - exp(-tau * nodes / MTBF)`, P(fail | alarm) = precision and
//!   P(fail | no alarm) = (1 - recall) * pi / (1 - recall * pi / precision).
//! - Every decision is recorded with its inputs and reason ([`crate::DecisionRec`]).

pub use crate::costs::{load_costs, record_level_transfer, record_pfs_transfer, Costs, SMOOTH};
pub use crate::decide::{alarm_set, counters, decision_input, effective_predictor, set_alarm};
use crate::error::{DatasetError, Result};
use crate::handle::Datasets;
use crate::record::State;
use serde::Serialize;

/// The answer of `ckpt need`.
#[derive(Debug, Clone, Serialize)]
pub struct Need {
    /// A checkpoint is due now.
    pub due: bool,
    /// Why, in one sentence.
    pub reason: String,
    /// Daly's interval from the measured cost and the job MTBF, seconds.
    pub interval_s: Option<f64>,
    /// Seconds since the newest complete dataset completed.
    pub since_s: Option<f64>,
}

/// Is a checkpoint due now (Young/Daly with the measured checkpoint cost)?
pub fn need(ds: &Datasets) -> Result<Need> {
    let (all, _) = ds.list()?;
    let Some(last) = all
        .iter()
        .filter(|d| d.state == State::Complete)
        .filter_map(|d| d.closed_ns)
        .max()
    else {
        return Ok(Need {
            due: true,
            reason: "no complete checkpoint yet".into(),
            interval_s: None,
            since_s: None,
        });
    };
    let costs = load_costs(ds);
    let mtbf_job = ds.cfg.node_mtbf / f64::from(ds.cfg.job_nodes.max(1));
    let cost = costs.local_ckpt_s.unwrap_or(0.0);
    let interval = ckptfs_policy::interval::daly_interval(mtbf_job, cost)
        .map_err(|e| DatasetError::Policy(e.to_string()))?;
    let now = ckptfs_settings::now_ns();
    // Failure case D6: a completion stamped in the future (clock stepped back) counts as just now.
    let since = now.saturating_sub(last) as f64 / 1e9;
    let alarm = alarm_set(&ds.store, &ds.cfg.node);
    let due = since >= interval || alarm;
    let reason = if alarm {
        format!("alarm raised for node {}: checkpoint now", ds.cfg.node)
    } else {
        format!(
            "{:.0} s since the last checkpoint, Daly interval {:.0} s (checkpoint cost {:.3} s measured, job MTBF {:.0} s)",
            since, interval, cost, mtbf_job
        )
    };
    Ok(Need {
        due,
        reason,
        interval_s: Some(interval),
        since_s: Some(since),
    })
}
