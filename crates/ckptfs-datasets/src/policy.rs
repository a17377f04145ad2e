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
//! - Every decision is recorded with its inputs and reason ([`DecisionRec`]).

use crate::error::{DatasetError, Result};
use crate::ops::Datasets;
use crate::record::{self, job_dir, Dataset, DecisionRec, State, SYSTEM_DIR};
use crate::FailureRule;
use ckptfs_policy::{decide, DecisionInput, LevelCost, LevelCosts, Predictor, RollbackCount};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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

fn save_costs(ds: &Datasets, c: &Costs) -> Result<()> {
    record::mkdir_p(&ds.store, &job_dir(&ds.cfg.job))?;
    let b = serde_json::to_vec_pretty(c).map_err(|e| DatasetError::Invalid(e.to_string()))?;
    record::write_atomic(&ds.store, &costs_path(&ds.cfg.job), &b)
}

/// Record a PFS transfer (a restore) of `bytes` in `secs`.
pub fn record_pfs_transfer(ds: &Datasets, bytes: u64, secs: f64) -> Result<()> {
    if bytes == 0 || secs <= 0.0 {
        return Ok(());
    }
    let _l = ds.lock()?;
    let mut c = load_costs(ds);
    c.pfs_bps = smooth(c.pfs_bps, bytes as f64 / secs);
    save_costs(ds, &c)
}

/// Record fetches of `bytes` from partners in `secs` (a restart).
pub fn record_partner_transfer(ds: &Datasets, bytes: u64, secs: f64) -> Result<()> {
    if bytes == 0 || secs <= 0.0 {
        return Ok(());
    }
    let _l = ds.lock()?;
    let mut c = load_costs(ds);
    c.partner_get_bps = smooth(c.partner_get_bps, bytes as f64 / secs);
    save_costs(ds, &c)
}

/// Record a rebuild from the node's erasure set of `bytes` in `secs` (a restart).
pub fn record_erasure_transfer(ds: &Datasets, bytes: u64, secs: f64) -> Result<()> {
    if bytes == 0 || secs <= 0.0 {
        return Ok(());
    }
    let _l = ds.lock()?;
    let mut c = load_costs(ds);
    c.erasure_get_bps = smooth(c.erasure_get_bps, bytes as f64 / secs);
    save_costs(ds, &c)
}

/// Is there an alarm for `node`?
pub fn alarm_set(store: &ckptfs_store::Store, node: &str) -> bool {
    store.stat(&format!("{SYSTEM_DIR}/alarms/{node}")).is_ok()
}

/// Raise or clear the alarm for `node`.
pub fn set_alarm(store: &ckptfs_store::Store, node: &str, on: bool) -> Result<()> {
    crate::config::check_component("node", node)?;
    let path = format!("{SYSTEM_DIR}/alarms/{node}");
    if on {
        record::mkdir_p(store, &format!("{SYSTEM_DIR}/alarms"))?;
        record::write_atomic(
            store,
            &path,
            format!("{}\n", ckptfs_settings::now_ns()).as_bytes(),
        )
    } else {
        match store.unlink(&path) {
            Ok(()) | Err(ckptfs_store::StoreError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Failure probability of the next interval with and without an alarm under `rule`,
/// returned as the [`Predictor`] that makes `ckptfs_policy::decide` use them
/// (`decide` takes precision with an alarm and 1 - recall without).
pub fn effective_predictor(
    rule: FailureRule,
    precision: f64,
    recall: f64,
    tau: f64,
    mtbf_job: f64,
) -> Predictor {
    match rule {
        FailureRule::Remem => Predictor { precision, recall },
        FailureRule::Posterior => {
            let pi = 1.0 - (-tau / mtbf_job).exp();
            let p_alarm = if precision > 0.0 {
                (recall * pi / precision).min(1.0)
            } else {
                0.0
            };
            let p_no = if p_alarm < 1.0 {
                ((1.0 - recall) * pi / (1.0 - p_alarm)).clamp(0.0, 1.0)
            } else {
                1.0
            };
            Predictor {
                precision,
                recall: 1.0 - p_no,
            }
        }
    }
}

/// The memory-level counters of Algorithm 1 for a dataset completing after `older`:
/// `n_pfs`, complete datasets since the newest one flushed, and `n_partner`, complete
/// datasets since the newest one whose decision was `partner`, when that one is newer
/// than the newest flushed one (as `ckptfs policy simulate` counts them).
pub fn counters(older: &[Dataset]) -> (u32, Option<u32>) {
    let complete: Vec<&Dataset> = older.iter().filter(|o| o.state == State::Complete).collect();
    let n_pfs = complete.iter().rev().take_while(|o| !o.flush).count() as u32;
    let n_partner = complete
        .iter()
        .rev()
        .take(n_pfs as usize)
        .position(|o| {
            o.decision
                .as_ref()
                .is_some_and(|d| d.level == "partner" || d.level == "erasure")
        })
        .map(|i| i as u32);
    (n_pfs, n_partner)
}

/// Build the decision input for a dataset of `bytes` from the measured costs `m`.
pub fn decision_input(
    ds: &Datasets,
    costs: &Costs,
    m: &crate::measured::Measured,
    bytes: u64,
    (n_pfs, n_partner): (u32, Option<u32>),
    alarm: bool,
) -> DecisionInput {
    let cfg = &ds.cfg;
    let b = bytes.max(1) as f64;
    let mtbf_job = cfg.node_mtbf / f64::from(cfg.job_nodes.max(1));
    // The application is stopped for the local write (measured begin to complete); a PFS
    // checkpoint is that write plus the flush at the PFS's bandwidth.
    let local_c = costs
        .local_ckpt_s
        .unwrap_or_else(|| b / costs.local_bps.unwrap_or(4.0 * 1024.0 * 1024.0 * 1024.0));
    let pfs_c = local_c + b / m.pfs_put_bps;
    // The memory level that survives a node's loss: the node's erasure set when it is
    // offered (its complete datasets get no partner copies then), else partner copies.
    let partner = match (m.erasure, m.erasure_bps, m.partner, m.partner_bps) {
        (true, Some(bps), _, _) => Some(LevelCost {
            checkpoint_s: local_c + b / bps,
            restart_s: b / m.erasure_get_bps.unwrap_or(bps),
        }),
        (_, _, true, Some(bps)) => Some(LevelCost {
            checkpoint_s: local_c + b / bps,
            restart_s: b / m.partner_get_bps.unwrap_or(bps),
        }),
        _ => None,
    };
    let tau = cfg
        .interval
        .or(costs.interval_s)
        .filter(|t| *t > 0.0)
        .unwrap_or_else(|| ckptfs_policy::interval::daly_interval(mtbf_job, local_c).unwrap_or(3600.0))
        .max(1.0);
    DecisionInput {
        costs: LevelCosts {
            local: Some(LevelCost {
                checkpoint_s: local_c,
                restart_s: local_c,
            }),
            partner,
            pfs: LevelCost {
                checkpoint_s: pfs_c,
                restart_s: b / m.pfs_get_bps,
            },
        },
        tau,
        predictor: effective_predictor(cfg.rule, cfg.precision, cfg.recall, tau, mtbf_job),
        source_alarm: alarm,
        backup_alarm: false,
        n_pfs,
        n_partner: partner.and(n_partner),
        soft_fraction: 0.0,
        rollback: RollbackCount::Paper,
    }
}

/// Choose the level of `d` at its completion and update the measured costs.
pub(crate) fn decide_at_completion(
    ds: &Datasets,
    d: &Dataset,
    older: &[Dataset],
    begun_ns: u64,
) -> Result<DecisionRec> {
    let now = ckptfs_settings::now_ns();
    let bytes = d.size();
    let mut costs = load_costs(ds);
    let secs = (now.saturating_sub(begun_ns) as f64 / 1e9).max(1e-6);
    if bytes > 0 {
        costs.local_bps = smooth(costs.local_bps, bytes as f64 / secs);
    }
    costs.local_ckpt_s = smooth(costs.local_ckpt_s, secs);
    if let Some(last) = older
        .iter()
        .filter(|o| o.state == State::Complete)
        .filter_map(|o| o.closed_ns)
        .max()
    {
        // Failure case D6 (clock skew): a completion time before the last one is not a sample.
        if now > last {
            costs.interval_s = smooth(costs.interval_s, (now - last) as f64 / 1e9);
        }
    }
    let mut seen: Vec<&Dataset> = older.iter().filter(|o| o.state == State::Complete).collect();
    seen.push(d);
    crate::measured::sample_partner(ds, &seen, &mut costs);
    crate::measured::sample_erasure(ds, &seen, &mut costs);
    save_costs(ds, &costs)?;
    let (n_pfs, n_partner) = counters(older);
    let alarm = alarm_set(&ds.store, &ds.cfg.node);
    let measured = crate::measured::measure(ds, &costs);
    let input = decision_input(ds, &costs, &measured, bytes, (n_pfs, n_partner), alarm);
    input
        .validate()
        .map_err(|e| DatasetError::Policy(e.to_string()))?;
    let dec = decide(&input);
    // The decision model's remote-memory level is the erasure set when it is offered.
    let erasure = measured.erasure && measured.erasure_bps.is_some();
    let name = |l: ckptfs_policy::Level| match l {
        ckptfs_policy::Level::Partner if erasure => "erasure",
        l => l.name(),
    };
    let estimates: BTreeMap<String, f64> = dec
        .estimates
        .iter()
        .map(|e| (name(e.level).to_string(), e.overhead_s))
        .collect();
    let reason = format!(
        "{} has the lowest expected overhead ({}), failure probability {:.3e} in the next {:.0} s ({} rule{}), {} checkpoints since the last PFS one; PFS bandwidth from {}, partner level: {}, erasure level: {}",
        name(dec.level),
        dec.estimates
            .iter()
            .map(|e| format!("{} {:.3} s", name(e.level), e.overhead_s))
            .collect::<Vec<_>>()
            .join(", "),
        dec.p_source,
        input.tau,
        ds.cfg.rule.name(),
        if alarm { ", alarm raised" } else { "" },
        n_pfs,
        measured.pfs_put_source,
        measured.partner_reason,
        measured.erasure_reason
    );
    Ok(DecisionRec {
        level: name(dec.level).to_string(),
        reason,
        input: serde_json::to_value(input).map_err(|e| DatasetError::Invalid(e.to_string()))?,
        estimates,
        rule: ds.cfg.rule.name().to_string(),
        p_source: dec.p_source,
        alarm,
        measured: Some(measured),
    })
}

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
