//! Checkpoint interval advice: Young's first-order and Daly's higher-order
//! optimum, and Daly's expected run time to compare intervals.
//!
//! Notation: `M` = mean time between failures of the whole job, `δ` =
//! checkpoint cost, `R` = restart cost, `τ` = compute time between
//! checkpoints. All in seconds.
//!
//! * Young (1974): `τ = √(2δM)`.
//! * Daly (2006), higher order: `τ = √(2δM)·[1 + ⅓·√(δ/2M) + ⅑·(δ/2M)] − δ`
//!   for `δ < 2M`, else `τ = M`.
//! * Daly's exponential model of the wall time of a job with solve time `T_s`:
//!   `T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T_s/τ`. Its exact minimiser does not
//!   depend on `R`: `τ* = M·(1 + W₀(−e^{−1−δ/M}))`. Daly's formula is the
//!   series expansion of it; `R` only scales the wall time.

use crate::error::{non_negative, positive, PolicyError};
use crate::math::lambert_w0;
use serde::Serialize;

fn check(mtbf: f64, cost: f64) -> Result<(), PolicyError> {
    positive("mtbf", mtbf)?;
    non_negative("cost", cost)
}

/// Young's first-order optimum `√(2·cost·mtbf)`.
pub fn young_interval(mtbf: f64, cost: f64) -> Result<f64, PolicyError> {
    check(mtbf, cost)?;
    Ok((2.0 * cost * mtbf).sqrt())
}

/// Daly's higher-order optimum (see the module docs); `mtbf` when
/// `cost >= 2·mtbf`.
pub fn daly_interval(mtbf: f64, cost: f64) -> Result<f64, PolicyError> {
    check(mtbf, cost)?;
    if cost >= 2.0 * mtbf {
        return Ok(mtbf);
    }
    let x = cost / (2.0 * mtbf);
    Ok((2.0 * cost * mtbf).sqrt() * (1.0 + x.sqrt() / 3.0 + x / 9.0) - cost)
}

/// The exact minimiser of Daly's exponential wall-time model,
/// `M·(1 + W₀(−e^{−1−δ/M}))`.
pub fn daly_exact_interval(mtbf: f64, cost: f64) -> Result<f64, PolicyError> {
    check(mtbf, cost)?;
    let w = lambert_w0(-(-1.0 - cost / mtbf).exp());
    Ok(mtbf * (1.0 + w))
}

/// Expected fraction of time lost under Daly's model, `T_w/T_s − 1`, when
/// checkpointing every `tau` seconds of compute.
pub fn expected_waste(tau: f64, cost: f64, restart: f64, mtbf: f64) -> Result<f64, PolicyError> {
    check(mtbf, cost)?;
    positive("tau", tau)?;
    non_negative("restart", restart)?;
    let m = mtbf;
    Ok(m / tau * (restart / m).exp() * ((tau + cost) / m).exp_m1() - 1.0)
}

/// Interval advice for one setting, as printed by `ckptfs policy interval`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IntervalAdvice {
    /// MTBF of the job used for the formulas (node MTBF / nodes), seconds.
    pub mtbf_s: f64,
    /// Checkpoint cost, seconds.
    pub cost_s: f64,
    /// Restart cost, seconds.
    pub restart_s: f64,
    /// Young's interval, seconds.
    pub young_s: f64,
    /// Daly's higher-order interval, seconds.
    pub daly_s: f64,
    /// Exact optimum of Daly's model, seconds.
    pub exact_s: f64,
    /// Expected waste fraction (Daly's model) at Young's interval.
    pub young_waste: f64,
    /// Expected waste fraction at Daly's interval.
    pub daly_waste: f64,
    /// Expected waste fraction at the exact optimum.
    pub exact_waste: f64,
}

/// Computes [`IntervalAdvice`] for a job of `nodes` nodes, each with
/// `node_mtbf` seconds MTBF (failures independent, so the job's MTBF is
/// `node_mtbf / nodes`).
pub fn advise(node_mtbf: f64, nodes: u32, cost: f64, restart: f64) -> Result<IntervalAdvice, PolicyError> {
    positive("mtbf", node_mtbf)?;
    if nodes == 0 {
        return Err(crate::error::invalid("nodes", 0, "must be at least 1"));
    }
    non_negative("restart", restart)?;
    let m = node_mtbf / f64::from(nodes);
    let young = young_interval(m, cost)?;
    let daly = daly_interval(m, cost)?;
    let exact = daly_exact_interval(m, cost)?;
    // A zero cost makes the optimum zero; report waste only for positive τ.
    let waste = |t: f64| {
        if t > 0.0 {
            expected_waste(t, cost, restart, m).unwrap_or(f64::NAN)
        } else {
            f64::NAN
        }
    };
    Ok(IntervalAdvice {
        mtbf_s: m,
        cost_s: cost,
        restart_s: restart,
        young_s: young,
        daly_s: daly,
        exact_s: exact,
        young_waste: waste(young),
        daly_waste: waste(daly),
        exact_waste: waste(exact),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn young_by_hand() {
        // δ = 5 min, M = 24 h: √(2·300·86400) = 7200 s
        assert!((young_interval(86_400.0, 300.0).unwrap() - 7200.0).abs() < 1e-9);
    }

    #[test]
    fn daly_by_hand() {
        // δ = 300, M = 86400: x = 300/172800 = 1/576, √x = 1/24
        // τ = 7200·(1 + 1/72 + 1/5184) − 300 = 7200 + 100 + 1.388… − 300
        let t = daly_interval(86_400.0, 300.0).unwrap();
        assert!(
            (t - (7200.0 + 100.0 + 7200.0 / 5184.0 - 300.0)).abs() < 1e-9,
            "{t}"
        );
        // Large cost: τ = M
        assert_eq!(daly_interval(100.0, 250.0).unwrap(), 100.0);
    }

    #[test]
    fn daly_is_close_to_the_exact_optimum_and_beats_young() {
        let (m, d, r) = (86_400.0, 300.0, 600.0);
        let exact = daly_exact_interval(m, d).unwrap();
        let daly = daly_interval(m, d).unwrap();
        assert!((exact - daly).abs() / exact < 1e-3, "{exact} vs {daly}");
        let w = |t| expected_waste(t, d, r, m).unwrap();
        assert!(w(exact) <= w(daly) + 1e-12);
        assert!(w(daly) <= w(young_interval(m, d).unwrap()) + 1e-12);
        // The exact optimum is a minimum.
        assert!(w(exact) < w(exact * 1.05) && w(exact) < w(exact * 0.95));
    }

    #[test]
    fn bad_input_is_named() {
        assert!(young_interval(-1.0, 1.0)
            .unwrap_err()
            .to_string()
            .contains("`mtbf`"));
        assert!(daly_interval(1.0, -1.0)
            .unwrap_err()
            .to_string()
            .contains("`cost`"));
        assert!(advise(1.0, 0, 1.0, 1.0)
            .unwrap_err()
            .to_string()
            .contains("`nodes`"));
        assert!(young_interval(f64::NAN, 1.0).is_err());
    }
}
