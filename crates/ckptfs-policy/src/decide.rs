//! The generalised level decision for ckptfs's three levels.
//!
//! A checkpoint can go to node memory ([`Level::Local`]), to node memory plus a
//! copy in the partner node's memory ([`Level::Partner`], REMEM's remote
//! memory), or to the parallel file system ([`Level::Pfs`]). The next segment
//! can see three kinds of failure of the source nodes, with probabilities
//! derived from the predictor exactly as in REMEM's Algorithm 1
//! (`P_s`, `P_b` = precision with an alarm, 1 − recall without):
//!
//! | class | probability | survives on |
//! |---|---|---|
//! | soft (process dies, node memory intact) | `P_s·f` | every level |
//! | hard, partner intact | `P_s(1−f)(1−P_b)` | partner, PFS |
//! | hard, partner lost too | `P_s(1−f)·P_b` | PFS |
//!
//! (`f` is the fraction of failures that are soft.) A checkpoint that survives
//! costs `τ/2 + R_level` on failure; one that does not falls back to the newest
//! checkpoint that does, `n` checkpoints further back, and costs
//! `τ/2 + n·τ + R_fallback`. The expected overhead of a level is its checkpoint
//! cost plus these terms weighted by their probabilities; the cheapest level
//! wins and ties go to the more durable level (as Algorithm 1 prefers disk on
//! a tie). docs/policy.md writes the formulas out.

use crate::error::{non_negative, positive, probability, PolicyError};
use crate::remem::Predictor;
use serde::{Deserialize, Serialize};

/// A checkpoint level, from fastest/least durable to slowest/most durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The node's own memory (ckptfs node store): survives a process crash,
    /// not a node failure.
    Local,
    /// Node memory plus a copy in the partner (backup) node's memory: survives
    /// a node failure unless the partner fails too (REMEM's remote memory).
    Partner,
    /// The parallel file system: survives everything the model knows.
    Pfs,
}

impl Level {
    /// All levels, fastest first.
    pub const ALL: [Level; 3] = [Level::Local, Level::Partner, Level::Pfs];

    /// Lower-case name (`local`, `partner`, `pfs`).
    pub fn name(self) -> &'static str {
        match self {
            Level::Local => "local",
            Level::Partner => "partner",
            Level::Pfs => "pfs",
        }
    }

    /// Index 0, 1, 2 (fastest first).
    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checkpoint and restart cost of one level, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelCost {
    /// Time the application is stopped to write one checkpoint.
    pub checkpoint_s: f64,
    /// Time to read a checkpoint back and restart from it.
    pub restart_s: f64,
}

/// The costs of the levels in use. The PFS is always there (it holds the
/// job's input, the fallback of last resort); the memory levels are optional.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelCosts {
    /// Node memory, if used.
    pub local: Option<LevelCost>,
    /// Partner memory, if used.
    pub partner: Option<LevelCost>,
    /// Parallel file system.
    pub pfs: LevelCost,
}

impl LevelCosts {
    /// The cost of `level`, if that level is in use.
    pub fn get(&self, level: Level) -> Option<LevelCost> {
        match level {
            Level::Local => self.local,
            Level::Partner => self.partner,
            Level::Pfs => Some(self.pfs),
        }
    }

    /// The levels in use, fastest first.
    pub fn levels(&self) -> Vec<Level> {
        Level::ALL
            .into_iter()
            .filter(|l| self.get(*l).is_some())
            .collect()
    }

    /// Fails on a negative or non-finite cost, naming its flag.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if let Some(c) = self.local {
            non_negative("ckpt-local", c.checkpoint_s)?;
            non_negative("restart-local", c.restart_s)?;
        }
        if let Some(c) = self.partner {
            non_negative("ckpt-partner", c.checkpoint_s)?;
            non_negative("restart-partner", c.restart_s)?;
        }
        non_negative("ckpt-pfs", self.pfs.checkpoint_s)?;
        non_negative("restart-pfs", self.pfs.restart_s)
    }
}

/// How many segments are lost when a checkpoint is gone and the job falls back
/// `n` checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum RollbackCount {
    /// REMEM's formula (2) as printed: `n·τ`, with `n` = Algorithm 1's counter
    /// (checkpoints written above the fallback level since its newest
    /// checkpoint). It under-counts by one segment: the segment between the
    /// fallback checkpoint and the next one is lost too.
    Paper,
    /// The full distance: `(n + 1)·τ`.
    Distance,
}

impl RollbackCount {
    fn segments(self, n: u32) -> f64 {
        match self {
            RollbackCount::Paper => f64::from(n),
            RollbackCount::Distance => f64::from(n) + 1.0,
        }
    }
}

/// Everything the decision for one checkpoint needs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionInput {
    /// Costs of the levels in use.
    pub costs: LevelCosts,
    /// Checkpoint interval τ in seconds (compute time per segment).
    pub tau: f64,
    /// The predictor's accuracy.
    pub predictor: Predictor,
    /// Is there a failure alarm for the source nodes (the job's nodes) for the
    /// next segment?
    pub source_alarm: bool,
    /// Is there a failure alarm for their backup (partner) nodes?
    pub backup_alarm: bool,
    /// Algorithm 1's `n`: checkpoints written to the memory levels since the
    /// newest PFS checkpoint.
    pub n_pfs: u32,
    /// Checkpoints written to node memory since the newest intact partner
    /// checkpoint, when that partner checkpoint is newer than the newest PFS
    /// one; `None` when there is no such partner checkpoint (the fallback after
    /// a hard failure is then the PFS).
    pub n_partner: Option<u32>,
    /// Fraction `f` of failures that leave node memory intact (process
    /// crashes). 0 in REMEM's model.
    pub soft_fraction: f64,
    /// How a fallback's lost segments are counted.
    pub rollback: RollbackCount,
}

impl DecisionInput {
    /// Fails on any parameter out of range, naming it.
    pub fn validate(&self) -> Result<(), PolicyError> {
        self.costs.validate()?;
        positive("tau", self.tau)?;
        self.predictor.validate()?;
        probability("soft-fraction", self.soft_fraction)
    }
}

/// The expected overhead of writing the next checkpoint to one level.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LevelEstimate {
    /// The level.
    pub level: Level,
    /// Expected overhead in seconds: checkpoint cost plus expected rework and
    /// restart cost in the next segment.
    pub overhead_s: f64,
    /// The checkpoint-cost part of it.
    pub checkpoint_s: f64,
    /// The expected rework-and-restart part of it.
    pub expected_failure_s: f64,
}

/// The outcome of [`decide()`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// The chosen level.
    pub level: Level,
    /// `P_s`: probability of a failure of the source nodes in the next segment.
    pub p_source: f64,
    /// `P_b`: probability of a failure of the backup nodes in the next segment.
    pub p_backup: f64,
    /// The expected overhead of every level in use, fastest first.
    pub estimates: Vec<LevelEstimate>,
}

/// Expected overhead of each level in use and the choice (see the module
/// docs). Never panics; on input that fails [`DecisionInput::validate`] the
/// numbers are meaningless, so callers with untrusted input use
/// [`try_decide`].
pub fn decide(input: &DecisionInput) -> Decision {
    let pr = &input.predictor;
    let p_s = crate::remem::failure_probability(input.source_alarm, pr);
    let p_b = crate::remem::failure_probability(input.backup_alarm, pr);
    let f = input.soft_fraction;
    let tau = input.tau;
    let half = tau / 2.0;
    let costs = &input.costs;
    let rb = input.rollback;

    // Fallback after a hard failure with the partner intact: the newest
    // partner-or-better checkpoint.
    let fallback_pfs = half + rb.segments(input.n_pfs) * tau + costs.pfs.restart_s;
    let fallback_hard_intact = match (input.n_partner, costs.partner) {
        (Some(n), Some(pc)) => half + rb.segments(n) * tau + pc.restart_s,
        _ => fallback_pfs,
    };

    let p_soft = p_s * f;
    let p_hard_intact = p_s * (1.0 - f) * (1.0 - p_b);
    let p_hard_both = p_s * (1.0 - f) * p_b;

    let mut estimates = Vec::with_capacity(3);
    for level in costs.levels() {
        let Some(c) = costs.get(level) else { continue };
        let survive = half + c.restart_s;
        let expected = match level {
            Level::Pfs => p_s * survive,
            Level::Partner => (p_soft + p_hard_intact) * survive + p_hard_both * fallback_pfs,
            Level::Local => {
                p_soft * survive + p_hard_intact * fallback_hard_intact + p_hard_both * fallback_pfs
            }
        };
        estimates.push(LevelEstimate {
            level,
            overhead_s: c.checkpoint_s + expected,
            checkpoint_s: c.checkpoint_s,
            expected_failure_s: expected,
        });
    }

    // Cheapest wins; on a tie the more durable level (later in the list).
    let mut best = estimates.last().map(|e| e.level).unwrap_or(Level::Pfs);
    let mut best_cost = estimates.last().map(|e| e.overhead_s).unwrap_or(0.0);
    for e in estimates.iter().rev().skip(1) {
        if e.overhead_s < best_cost {
            best = e.level;
            best_cost = e.overhead_s;
        }
    }
    Decision {
        level: best,
        p_source: p_s,
        p_backup: p_b,
        estimates,
    }
}

/// [`DecisionInput::validate`] then [`decide()`].
pub fn try_decide(input: &DecisionInput) -> Result<Decision, PolicyError> {
    input.validate()?;
    Ok(decide(input))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remem;
    use proptest::prelude::*;

    fn input(local: Option<LevelCost>) -> DecisionInput {
        DecisionInput {
            costs: LevelCosts {
                local,
                partner: Some(LevelCost {
                    checkpoint_s: 8.0,
                    restart_s: 8.0,
                }),
                pfs: LevelCost {
                    checkpoint_s: 130.0,
                    restart_s: 130.0,
                },
            },
            tau: 7200.0,
            predictor: Predictor {
                precision: 0.7,
                recall: 0.7,
            },
            source_alarm: false,
            backup_alarm: false,
            n_pfs: 0,
            n_partner: None,
            soft_fraction: 0.0,
            rollback: RollbackCount::Paper,
        }
    }

    fn estimate(d: &Decision, l: Level) -> f64 {
        d.estimates.iter().find(|e| e.level == l).unwrap().overhead_s
    }

    #[test]
    fn two_levels_match_remem_by_hand() {
        let d = decide(&input(None));
        assert!((estimate(&d, Level::Pfs) - 1249.0).abs() < 1e-9);
        assert!((estimate(&d, Level::Partner) - 1101.38).abs() < 1e-9);
        assert_eq!(d.level, Level::Partner);
        let mut i = input(None);
        i.n_pfs = 1;
        assert_eq!(decide(&i).level, Level::Pfs);
    }

    #[test]
    fn distance_count_adds_one_segment() {
        let mut i = input(None);
        i.rollback = RollbackCount::Distance;
        // n = 0 counted as one segment: same as the paper's n = 1.
        let d = decide(&i);
        assert!((estimate(&d, Level::Partner) - 1749.38).abs() < 1e-9);
        assert_eq!(d.level, Level::Pfs);
    }

    #[test]
    fn three_levels_by_hand() {
        // Local: C=1, R=1; soft fraction 0.5; no alarms, P_s = P_b = 0.3.
        // p_soft = 0.15, p_hard_intact = 0.3·0.5·0.7 = 0.105, p_hard_both = 0.045
        // fallback after hard/intact: newest partner checkpoint 0 back (paper):
        //   3600 + 0 + 8 = 3608; fallback to PFS (n_pfs = 1): 3600 + 7200 + 130 = 10930
        // O_local = 1 + 0.15·3601 + 0.105·3608 + 0.045·10930
        //         = 1 + 540.15 + 378.84 + 491.85 = 1411.84
        let mut i = input(Some(LevelCost {
            checkpoint_s: 1.0,
            restart_s: 1.0,
        }));
        i.soft_fraction = 0.5;
        i.n_pfs = 1;
        i.n_partner = Some(0);
        let d = decide(&i);
        assert!((estimate(&d, Level::Local) - 1411.84).abs() < 1e-9, "{d:?}");
        // Partner: 8 + (0.15 + 0.105)·3608 + 0.045·10930 = 8 + 920.04 + 491.85
        assert!((estimate(&d, Level::Partner) - 1419.89).abs() < 1e-9);
        // PFS: 130 + 0.3·3730 = 1249
        assert_eq!(d.level, Level::Pfs);
    }

    #[test]
    fn invalid_input_names_the_parameter() {
        let mut i = input(None);
        i.predictor.precision = 1.5;
        let e = try_decide(&i).unwrap_err().to_string();
        assert!(e.contains("`precision`"), "{e}");
        let mut i = input(None);
        i.costs.pfs.restart_s = -1.0;
        let e = try_decide(&i).unwrap_err().to_string();
        assert!(e.contains("`restart-pfs`"), "{e}");
        let mut i = input(None);
        i.tau = 0.0;
        assert!(try_decide(&i).unwrap_err().to_string().contains("`tau`"));
    }

    proptest! {
        /// With node memory disabled, no soft failures and the paper's count,
        /// the generalised decision is REMEM's formulas (1) and (2).
        #[test]
        fn reduces_to_remem(
            c_d in 0.0..1e4f64, r_d in 0.0..1e4f64, c_m in 0.0..1e4f64, r_m in 0.0..1e4f64,
            tau in 1.0..1e5f64, precision in 0.0..=1.0f64, recall in 0.0..=1.0f64,
            sa: bool, ba: bool, n in 0u32..50,
        ) {
            let i = DecisionInput {
                costs: LevelCosts {
                    local: None,
                    partner: Some(LevelCost { checkpoint_s: c_m, restart_s: r_m }),
                    pfs: LevelCost { checkpoint_s: c_d, restart_s: r_d },
                },
                tau,
                predictor: Predictor { precision, recall },
                source_alarm: sa,
                backup_alarm: ba,
                n_pfs: n,
                n_partner: None,
                soft_fraction: 0.0,
                rollback: RollbackCount::Paper,
            };
            let d = try_decide(&i).unwrap();
            let (o_disk, o_remem) = {
                let p_s = remem::failure_probability(sa, &i.predictor);
                let p_b = remem::failure_probability(ba, &i.predictor);
                (remem::overhead_disk(c_d, r_d, p_s, tau),
                 remem::overhead_remem(c_m, r_m, r_d, p_s, p_b, tau, n))
            };
            let scale = 1.0 + o_disk.abs() + o_remem.abs();
            prop_assert!((estimate(&d, Level::Pfs) - o_disk).abs() <= 1e-12 * scale);
            prop_assert!((estimate(&d, Level::Partner) - o_remem).abs() <= 1e-12 * scale);
            let want = if o_remem < o_disk { Level::Partner } else { Level::Pfs };
            prop_assert_eq!(d.level, want);
        }

        /// Adding a level can only lower the chosen expected overhead.
        #[test]
        fn more_levels_never_raise_the_minimum(
            c_l in 0.0..100f64, r_l in 0.0..100f64, f in 0.0..=1.0f64,
            sa: bool, ba: bool, n in 0u32..5,
        ) {
            let mut i = input(None);
            i.source_alarm = sa;
            i.backup_alarm = ba;
            i.n_pfs = n;
            i.soft_fraction = f;
            let two = decide(&i);
            i.costs.local = Some(LevelCost { checkpoint_s: c_l, restart_s: r_l });
            let three = decide(&i);
            let min = |d: &Decision| estimate(d, d.level);
            prop_assert!(min(&three) <= min(&two) + 1e-9);
        }
    }
}
