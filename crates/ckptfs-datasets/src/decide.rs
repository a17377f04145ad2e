//! The level decision at a dataset's completion (docs/policy.md's generalised
//! Algorithm 1 on this job's measured costs), with the failure probabilities from the
//! alarms; what [`crate::policy`] documents.

use crate::costs::{load_costs, save_costs, smooth, Costs};
use crate::error::{DatasetError, Result};
use crate::handle::Datasets;
use crate::measured::Measured;
use crate::record::{self, Dataset, DecisionRec, State, SYSTEM_DIR};
use crate::FailureRule;
use ckptfs_policy::{decide, DecisionInput, LevelCost, LevelCosts, Predictor, RollbackCount};
use std::collections::BTreeMap;

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
    m: &Measured,
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
