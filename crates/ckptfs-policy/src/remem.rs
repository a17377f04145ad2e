//! REMEM's adaptive storage selection exactly as published (Jin et al.,
//! "REMEM: REmote MEMory as Checkpointing Storage", section V).
//!
//! Two storages: remote memory on a backup node ("REMEM") and disk (the
//! parallel file system). Before each checkpoint the failure predictor gives an
//! alarm (or not) for the source nodes and for the backup nodes; the alarms
//! become failure probabilities for the next segment of length τ, and the
//! storage with the lower expected overhead wins:
//!
//! * formula (1), disk: `O_disk = C_disk + P_s · (τ/2 + R_disk)`
//! * formula (2), REMEM: `O_remem = C_remem + P_s(1 − P_b) · (τ/2 + R_remem)
//!   + P_s · P_b · (τ/2 + n·τ + R_disk)`
//!
//! where `n` is Algorithm 1's counter of REMEM checkpoints since the last disk
//! one. [`Algorithm1`] keeps that counter. The generalisation to ckptfs's three
//! levels is [`crate::decide()`]; with the node-memory level disabled, no soft
//! failures and [`crate::RollbackCount::Paper`] it gives exactly these numbers.

use crate::error::{probability, PolicyError};
use serde::{Deserialize, Serialize};

/// A failure predictor's accuracy.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Predictor {
    /// Fraction of alarms that are followed by a failure.
    pub precision: f64,
    /// Fraction of failures that were preceded by an alarm.
    pub recall: f64,
}

impl Predictor {
    /// A perfect predictor (precision = recall = 1).
    pub const PERFECT: Predictor = Predictor {
        precision: 1.0,
        recall: 1.0,
    };

    /// Fails when precision or recall is outside `[0, 1]`.
    pub fn validate(&self) -> Result<(), PolicyError> {
        probability("precision", self.precision)?;
        probability("recall", self.recall)
    }

    /// The F-measure `2·precision·recall / (precision + recall)` REMEM uses to
    /// summarise accuracy (0 when both are 0).
    pub fn f_measure(&self) -> f64 {
        let s = self.precision + self.recall;
        if s > 0.0 {
            2.0 * self.precision * self.recall / s
        } else {
            0.0
        }
    }
}

/// Failure probability for the next segment from the predictor, as in
/// Algorithm 1: `precision` when there is an alarm, `1 − recall` when there is
/// none.
pub fn failure_probability(alarm: bool, predictor: &Predictor) -> f64 {
    if alarm {
        predictor.precision
    } else {
        1.0 - predictor.recall
    }
}

/// Formula (1): expected overhead of a disk checkpoint.
pub fn overhead_disk(c_disk: f64, r_disk: f64, p_source: f64, tau: f64) -> f64 {
    c_disk + p_source * (tau / 2.0 + r_disk)
}

/// Formula (2): expected overhead of a REMEM checkpoint, `n` segments after the
/// last disk checkpoint (Algorithm 1's counter).
pub fn overhead_remem(
    c_remem: f64,
    r_remem: f64,
    r_disk: f64,
    p_source: f64,
    p_backup: f64,
    tau: f64,
    n: u32,
) -> f64 {
    c_remem
        + p_source * (1.0 - p_backup) * (tau / 2.0 + r_remem)
        + p_source * p_backup * (tau / 2.0 + f64::from(n) * tau + r_disk)
}

/// The two storages of REMEM's Algorithm 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// Remote memory on the backup node.
    Remem,
    /// Disk (parallel file system).
    Disk,
}

/// Checkpoint and restart costs (seconds) of REMEM and disk.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RememCosts {
    /// `C_disk`.
    pub c_disk: f64,
    /// `R_disk`.
    pub r_disk: f64,
    /// `C_remem`.
    pub c_remem: f64,
    /// `R_remem`.
    pub r_remem: f64,
}

/// REMEM's Algorithm 1: a stateful selector, one call per checkpoint.
#[derive(Clone, Debug)]
pub struct Algorithm1 {
    costs: RememCosts,
    tau: f64,
    predictor: Predictor,
    n: u32,
}

impl Algorithm1 {
    /// A selector with `n = 0`. Fails on negative or non-finite costs, a
    /// non-positive interval, or precision/recall outside `[0, 1]`.
    pub fn new(costs: RememCosts, tau: f64, predictor: Predictor) -> Result<Self, PolicyError> {
        use crate::error::{non_negative, positive};
        non_negative("ckpt-pfs", costs.c_disk)?;
        non_negative("restart-pfs", costs.r_disk)?;
        non_negative("ckpt-partner", costs.c_remem)?;
        non_negative("restart-partner", costs.r_remem)?;
        positive("tau", tau)?;
        predictor.validate()?;
        Ok(Algorithm1 {
            costs,
            tau,
            predictor,
            n: 0,
        })
    }

    /// The current counter `n` (REMEM checkpoints since the last disk one).
    pub fn n(&self) -> u32 {
        self.n
    }

    /// Expected overheads `(O_disk, O_remem)` for the next checkpoint, without
    /// changing state.
    pub fn overheads(&self, source_alarm: bool, backup_alarm: bool) -> (f64, f64) {
        let p_s = failure_probability(source_alarm, &self.predictor);
        let p_b = failure_probability(backup_alarm, &self.predictor);
        let c = &self.costs;
        (
            overhead_disk(c.c_disk, c.r_disk, p_s, self.tau),
            overhead_remem(c.c_remem, c.r_remem, c.r_disk, p_s, p_b, self.tau, self.n),
        )
    }

    /// Chooses the storage of the next checkpoint and updates `n`: REMEM only
    /// when strictly cheaper (`O_remem < O_disk`), then `n += 1`; otherwise
    /// disk and `n = 0`.
    pub fn select(&mut self, source_alarm: bool, backup_alarm: bool) -> Storage {
        let (o_disk, o_remem) = self.overheads(source_alarm, backup_alarm);
        if o_remem < o_disk {
            self.n += 1;
            Storage::Remem
        } else {
            self.n = 0;
            Storage::Disk
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(precision: f64, recall: f64) -> Predictor {
        Predictor { precision, recall }
    }

    #[test]
    fn formula_1_by_hand() {
        // C=130, R=130, P_s=0.3, τ=7200: 130 + 0.3·(3600+130) = 1249
        assert!((overhead_disk(130.0, 130.0, 0.3, 7200.0) - 1249.0).abs() < 1e-9);
    }

    #[test]
    fn formula_2_by_hand() {
        // 8 + 0.3·0.7·(3600+8) + 0.3·0.3·(3600 + 1·7200 + 130)
        // = 8 + 757.68 + 983.7 = 1749.38
        let o = overhead_remem(8.0, 8.0, 130.0, 0.3, 0.3, 7200.0, 1);
        assert!((o - 1749.38).abs() < 1e-9, "{o}");
        let o0 = overhead_remem(8.0, 8.0, 130.0, 0.3, 0.3, 7200.0, 0);
        assert!((o0 - 1101.38).abs() < 1e-9, "{o0}");
    }

    #[test]
    fn algorithm_1_alternates_without_alarms() {
        // With precision = recall = 0.7 and no alarms, n = 0 favours REMEM
        // (1101.38 < 1249) and n = 1 favours disk (1749.38 > 1249).
        let costs = RememCosts {
            c_disk: 130.0,
            r_disk: 130.0,
            c_remem: 8.0,
            r_remem: 8.0,
        };
        let mut a = Algorithm1::new(costs, 7200.0, p(0.7, 0.7)).unwrap();
        let picks: Vec<Storage> = (0..4).map(|_| a.select(false, false)).collect();
        assert_eq!(
            picks,
            [Storage::Remem, Storage::Disk, Storage::Remem, Storage::Disk]
        );
    }

    #[test]
    fn algorithm_1_ties_go_to_disk() {
        // Equal costs, perfect predictor, no alarms: both overheads equal C.
        let costs = RememCosts {
            c_disk: 10.0,
            r_disk: 10.0,
            c_remem: 10.0,
            r_remem: 10.0,
        };
        let mut a = Algorithm1::new(costs, 100.0, p(1.0, 1.0)).unwrap();
        assert_eq!(a.select(false, false), Storage::Disk);
        assert_eq!(a.n(), 0);
    }

    #[test]
    fn failure_probability_follows_alarm() {
        let pr = p(0.8, 0.6);
        assert_eq!(failure_probability(true, &pr), 0.8);
        assert!((failure_probability(false, &pr) - 0.4).abs() < 1e-15);
    }

    #[test]
    fn bad_parameters_are_named() {
        let costs = RememCosts {
            c_disk: -1.0,
            r_disk: 1.0,
            c_remem: 1.0,
            r_remem: 1.0,
        };
        let e = Algorithm1::new(costs, 1.0, p(0.5, 0.5)).unwrap_err();
        assert!(e.to_string().contains("ckpt-pfs"), "{e}");
    }
}
