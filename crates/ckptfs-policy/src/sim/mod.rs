//! The failure simulator (`ckptfs policy simulate`).
//!
//! # Model
//!
//! * A machine of `nodes` nodes; the job runs one process on each of the first
//!   `procs` nodes (the *source* nodes). [`Matching`] gives each source its
//!   backup (partner) node.
//! * Every node fails as a Weibull renewal process (all nodes new at time 0)
//!   or as listed in a failure log. A fraction of failures is *soft* (the
//!   job's processes die, node memory survives); the rest is *hard* (the node
//!   is replaced, its memory is lost). Failures of non-source nodes do not stop
//!   the job but a hard one wipes the checkpoint copies the node held.
//! * The job computes in segments of `tau` seconds. After each segment it
//!   writes a checkpoint to a level chosen by the strategy; the application is
//!   stopped for the level's checkpoint cost. The job's input (state 0) is on
//!   the PFS. Each level keeps its newest checkpoint (a new one replaces the
//!   old one only once complete).
//! * A source failure (during compute, checkpoint or restart) rolls the job
//!   back to the newest checkpoint that is still intact: a node-memory
//!   checkpoint is lost when any source node fails hard; a partner checkpoint
//!   when, for some source, both its own node and its backup failed hard since
//!   it was written (with `remote_only`, as in REMEM, there is no local copy
//!   and a hard failure of any backup node is enough); a PFS checkpoint is
//!   never lost. Restarting costs the level's restart time; failures during
//!   the restart restart it again.
//! * The run ends when the job has spent `segments × tau` seconds computing,
//!   REMEM's fixed `length`. Useful progress is the state reached; rework is
//!   the rest of the compute time. Rework, checkpoint and restart time are
//!   each divided by `length`.
//! * The predictor sees each failure in advance with probability `recall`
//!   (the same failure is seen by every predictor with a higher recall) and
//!   raises false alarms per node as a Poisson process whose rate makes the
//!   fraction of true alarms equal `precision`. Before a checkpoint the
//!   adaptive strategy asks whether any alarm falls on a source node, and on
//!   a backup node, before the next checkpoint is complete (a window of
//!   `tau` plus twice the largest checkpoint cost).

use crate::decide::{decide, DecisionInput, Level, LevelCosts, RollbackCount};
use crate::error::{invalid, non_negative, positive, probability, PolicyError};
use crate::failure::{weibull_events, FailureEvent, FailureLog, Matching, Weibull};
use crate::remem::Predictor;
use crate::rng::Rng;
use serde::Serialize;
use walk::Walk;

mod walk;

/// Where failures come from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureSource {
    /// Independent Weibull renewal processes, one per node.
    Weibull {
        /// Mean time between failures of one node, seconds.
        mtbf_s: f64,
        /// Weibull shape.
        shape: f64,
    },
    /// A failure log (no failures after its last entry).
    Log(FailureLog),
}

/// A strategy for choosing checkpoint levels.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Strategy {
    /// Always the same level.
    Fixed(Level),
    /// The generalised Algorithm 1 over all levels in use, with this predictor.
    Adaptive(Predictor),
}

impl Strategy {
    /// Name as printed: `local-only`, `memory-only` (partner memory, REMEM's
    /// remote memory), `disk-only` (PFS), `adaptive`.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Fixed(Level::Local) => "local-only",
            Strategy::Fixed(Level::Partner) => "memory-only",
            Strategy::Fixed(Level::Pfs) => "disk-only",
            Strategy::Adaptive(_) => "adaptive",
        }
    }

    /// Name with the predictor's F-measure for adaptive strategies.
    pub fn label(&self) -> String {
        match self {
            Strategy::Adaptive(p) => format!("adaptive F={:.2}", p.f_measure()),
            s => s.name().to_string(),
        }
    }
}

/// Everything a simulation needs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimConfig {
    /// Nodes in the machine.
    pub nodes: u32,
    /// Processes of the job, one per node, on nodes `0..procs`.
    pub procs: u32,
    /// Failure arrivals.
    pub failures: FailureSource,
    /// Fraction of failures that are soft (Weibull source only; a log says it
    /// per line).
    pub soft_fraction: f64,
    /// Source/backup pairing.
    pub matching: Matching,
    /// The partner level keeps no local copy (REMEM's remote memory).
    pub remote_only: bool,
    /// Predictor of the default adaptive strategy.
    pub predictor: Predictor,
    /// Number of segments `S`; the compute budget is `S × tau`.
    pub segments: u64,
    /// Checkpoint interval (compute time per segment), seconds.
    pub tau: f64,
    /// Costs of the levels in use.
    pub costs: LevelCosts,
    /// How the adaptive strategy counts a fallback's lost segments.
    pub rollback: RollbackCount,
    /// After a restart from a memory level, the adaptive strategy decides
    /// again (fresh alarms, a new segment starts) and copies the restored
    /// checkpoint to a more durable level if that is now cheaper. REMEM's
    /// Algorithm 1 decides only when a checkpoint is taken (`false`).
    pub reprotect: bool,
    /// Independent repetitions (each with its own failures); results are
    /// averaged.
    pub runs: u32,
    /// Seed of all random streams.
    pub seed: u64,
}

impl SimConfig {
    /// Fails on any parameter out of range, naming it.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.nodes == 0 {
            return Err(invalid("nodes", 0, "must be at least 1"));
        }
        if self.nodes < 2 {
            return Err(invalid(
                "nodes",
                self.nodes,
                "must be at least 2 (a source needs a backup node)",
            ));
        }
        if self.matching == Matching::Mirror && self.nodes % 2 == 1 {
            return Err(invalid("nodes", self.nodes, "must be even for --matching mirror"));
        }
        if self.procs == 0 || self.procs > self.nodes {
            return Err(invalid("procs", self.procs, "must be between 1 and --nodes"));
        }
        if let FailureSource::Weibull { mtbf_s, shape } = &self.failures {
            positive("mtbf", *mtbf_s)?;
            positive("shape", *shape)?;
            if *shape < 0.05 {
                return Err(invalid("shape", shape, "must be at least 0.05"));
            }
        }
        probability("soft-fraction", self.soft_fraction)?;
        self.predictor.validate()?;
        if self.predictor.precision == 0.0 && self.predictor.recall > 0.0 {
            return Err(invalid(
                "precision",
                0,
                "must be > 0 when recall > 0 (no true alarm among infinitely many)",
            ));
        }
        if self.segments == 0 {
            return Err(invalid("segments", 0, "must be at least 1"));
        }
        positive("tau", self.tau)?;
        self.costs.validate()?;
        if self.runs == 0 {
            return Err(invalid("runs", 0, "must be at least 1"));
        }
        non_negative("tau", self.tau)
    }

    /// The strategies `run` compares: one fixed strategy per level in use,
    /// fastest first, then adaptive with the configured predictor.
    pub fn default_strategies(&self) -> Vec<Strategy> {
        let mut v: Vec<Strategy> = self.costs.levels().into_iter().map(Strategy::Fixed).collect();
        v.push(Strategy::Adaptive(self.predictor));
        v
    }
}

/// Rework, checkpoint and restart time, each divided by `S × tau`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CostRatios {
    /// Compute time whose result was lost.
    pub rework: f64,
    /// Time spent writing checkpoints (including aborted writes).
    pub checkpoint: f64,
    /// Time spent restarting.
    pub restart: f64,
    /// The sum of the three.
    pub total: f64,
}

/// Mean number of checkpoints written per level in one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LevelCounts {
    /// Node memory.
    pub local: f64,
    /// Partner memory.
    pub partner: f64,
    /// PFS.
    pub pfs: f64,
}

/// The result of one strategy, averaged over the runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StrategyResult {
    /// Strategy label (`memory-only`, `disk-only`, `adaptive F=0.70`, …).
    pub strategy: String,
    /// The strategy itself.
    pub spec: Strategy,
    /// Mean cost ratios.
    pub ratios: CostRatios,
    /// Standard deviation of the total ratio across runs (0 for one run).
    pub total_stddev: f64,
    /// Mean checkpoints written per level.
    pub checkpoints: LevelCounts,
    /// Mean number of source failures that interrupted the job.
    pub failures: f64,
    /// Mean number of failures after which the newest checkpoint was gone and
    /// the job fell back to an older one.
    pub fallbacks: f64,
    /// Mean number of restored checkpoints copied to a more durable level
    /// after a restart (see [`SimConfig::reprotect`]); counted in
    /// `checkpoints` and in the checkpoint ratio too.
    pub reprotects: f64,
}

/// The output of [`Simulator::run`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    /// The configuration simulated.
    pub config: SimConfig,
    /// One entry per strategy, in the order asked.
    pub results: Vec<StrategyResult>,
    /// Anything the reader must know (e.g. the job outlived a failure log).
    pub notes: Vec<String>,
}

/// Runs the simulation described in the module docs.
#[derive(Clone, Debug)]
pub struct Simulator {
    config: SimConfig,
}

/// Per-run outcome of one strategy (seconds and counts).
#[derive(Clone, Copy, Debug, Default)]
struct Outcome {
    rework: f64,
    checkpoint: f64,
    restart: f64,
    counts: [u64; 3],
    failures: u64,
    fallbacks: u64,
    reprotects: u64,
    end_time: f64,
}

/// The wall clock passed the end of the generated failures.
struct HorizonExceeded;

impl Simulator {
    /// A simulator for a validated configuration.
    pub fn new(config: SimConfig) -> Result<Self, PolicyError> {
        config.validate()?;
        Ok(Simulator { config })
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Runs [`SimConfig::default_strategies`].
    pub fn run(&self) -> Result<SimReport, PolicyError> {
        self.run_strategies(&self.config.default_strategies())
    }

    /// Runs the given strategies on the same failures (common random numbers:
    /// every strategy sees the same failure history in a run).
    pub fn run_strategies(&self, strategies: &[Strategy]) -> Result<SimReport, PolicyError> {
        let cfg = &self.config;
        for s in strategies {
            match s {
                Strategy::Fixed(l) if cfg.costs.get(*l).is_none() => {
                    return Err(PolicyError::InvalidSetup(format!(
                        "strategy {} needs the costs of level {l}",
                        s.name()
                    )))
                }
                Strategy::Adaptive(p) => {
                    p.validate()?;
                    if p.precision == 0.0 && p.recall > 0.0 {
                        return Err(invalid("precision", 0, "must be > 0 when recall > 0"));
                    }
                }
                _ => {}
            }
        }
        let roles = Roles::new(cfg);
        let budget = cfg.segments as f64 * cfg.tau;
        let mut per_run: Vec<Vec<Outcome>> = vec![Vec::new(); strategies.len()];
        let mut notes = Vec::new();
        let mut max_end: f64 = 0.0;
        for run in 0..u64::from(cfg.runs) {
            let first = 1.5 * budget + 7.0 * 86_400.0;
            let mut horizon = first;
            let outcomes = loop {
                match self.one_run(&roles, strategies, run, horizon) {
                    Ok(o) => break o,
                    Err(HorizonExceeded) => {
                        horizon *= 2.0;
                        if horizon > 16.0 * first {
                            return Err(PolicyError::Diverged(format!(
                                "after {} of wall time the job has not spent its {} of \
                                 compute (overhead above 2000%): failures come faster than \
                                 checkpoints and restarts complete (check --mtbf, --procs and \
                                 the level costs)",
                                crate::units::fmt_duration(horizon / 2.0),
                                crate::units::fmt_duration(budget)
                            )));
                        }
                    }
                }
            };
            for (i, o) in outcomes.into_iter().enumerate() {
                max_end = max_end.max(o.end_time);
                per_run[i].push(o);
            }
        }
        if let FailureSource::Log(log) = &cfg.failures {
            if max_end > log.span() {
                notes.push(format!(
                    "the failure log ends at {}, the simulated job ran until {}: no failures \
                     after the log's end",
                    crate::units::fmt_duration(log.span()),
                    crate::units::fmt_duration(max_end)
                ));
            }
        }
        let results = strategies
            .iter()
            .zip(per_run)
            .map(|(s, outs)| summarise(*s, &outs, budget))
            .collect();
        Ok(SimReport {
            config: cfg.clone(),
            results,
            notes,
        })
    }

    fn one_run(
        &self,
        roles: &Roles,
        strategies: &[Strategy],
        run: u64,
        horizon: f64,
    ) -> Result<Vec<Outcome>, HorizonExceeded> {
        let cfg = &self.config;
        let (events, horizon, node_rate) = match &cfg.failures {
            FailureSource::Weibull { mtbf_s, shape } => {
                // Validated in `SimConfig::validate`.
                let dist = Weibull::from_mean(*mtbf_s, *shape).map_err(|_| HorizonExceeded)?;
                let ev = weibull_events(&dist, cfg.soft_fraction, &roles.relevant, cfg.seed, run, horizon);
                (ev, horizon, 1.0 / mtbf_s)
            }
            FailureSource::Log(log) => {
                let ev: Vec<FailureEvent> = log
                    .events
                    .iter()
                    .filter(|e| roles.is_relevant[e.node as usize])
                    .copied()
                    .collect();
                let span = log.span();
                let rate = if span > 0.0 {
                    log.events.len() as f64 / (f64::from(cfg.nodes) * span)
                } else {
                    0.0
                };
                (ev, f64::INFINITY, rate)
            }
        };
        let mut out = Vec::with_capacity(strategies.len());
        for s in strategies {
            let alarms = match s {
                Strategy::Adaptive(p) => {
                    Some(Alarms::new(&events, roles, p, node_rate, cfg.seed, run, horizon))
                }
                Strategy::Fixed(_) => None,
            };
            let mut walk = Walk::new(cfg, roles, &events, horizon);
            out.push(walk.run(*s, alarms.as_ref())?);
        }
        Ok(out)
    }
}

fn summarise(strategy: Strategy, outs: &[Outcome], budget: f64) -> StrategyResult {
    let n = outs.len().max(1) as f64;
    let mean = |f: &dyn Fn(&Outcome) -> f64| outs.iter().map(f).sum::<f64>() / n;
    let total = |o: &Outcome| (o.rework + o.checkpoint + o.restart) / budget;
    let rework = mean(&|o| o.rework / budget);
    let checkpoint = mean(&|o| o.checkpoint / budget);
    let restart = mean(&|o| o.restart / budget);
    let mean_total = mean(&total);
    let var = if outs.len() > 1 {
        outs.iter().map(|o| (total(o) - mean_total).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    StrategyResult {
        strategy: strategy.label(),
        spec: strategy,
        ratios: CostRatios {
            rework,
            checkpoint,
            restart,
            total: rework + checkpoint + restart,
        },
        total_stddev: var.sqrt(),
        checkpoints: LevelCounts {
            local: mean(&|o| o.counts[0] as f64),
            partner: mean(&|o| o.counts[1] as f64),
            pfs: mean(&|o| o.counts[2] as f64),
        },
        failures: mean(&|o| o.failures as f64),
        fallbacks: mean(&|o| o.fallbacks as f64),
        reprotects: mean(&|o| o.reprotects as f64),
    }
}

/// Which node plays which role.
struct Roles {
    is_source: Vec<bool>,
    is_backup: Vec<bool>,
    is_relevant: Vec<bool>,
    /// Backup of each node (meaningful for sources).
    backup_of: Vec<u32>,
    /// The source whose backup a node is, if any.
    backed_by: Vec<Option<u32>>,
    /// Sources and backups, sorted.
    relevant: Vec<u32>,
}

impl Roles {
    fn new(cfg: &SimConfig) -> Self {
        let n = cfg.nodes as usize;
        let mut is_source = vec![false; n];
        let mut is_backup = vec![false; n];
        let mut backup_of = vec![0u32; n];
        let mut backed_by = vec![None; n];
        for s in 0..cfg.procs {
            let b = cfg.matching.backup(s, cfg.nodes);
            is_source[s as usize] = true;
            is_backup[b as usize] = true;
            backup_of[s as usize] = b;
            backed_by[b as usize] = Some(s);
        }
        let is_relevant: Vec<bool> = (0..n).map(|i| is_source[i] || is_backup[i]).collect();
        let relevant = (0..cfg.nodes).filter(|&i| is_relevant[i as usize]).collect();
        Roles {
            is_source,
            is_backup,
            is_relevant,
            backup_of,
            backed_by,
            relevant,
        }
    }
}

/// Alarm times: per node, and merged for the source group and the backup
/// group.
struct Alarms {
    /// Alarms on source nodes, sorted by time, with the node.
    source: Vec<(f64, u32)>,
    /// Alarms on backup nodes, sorted.
    backup: Vec<f64>,
    /// Alarm times of each node, sorted (empty for nodes outside the job).
    per_node: Vec<Vec<f64>>,
}

impl Alarms {
    fn new(
        events: &[FailureEvent],
        roles: &Roles,
        p: &Predictor,
        node_rate: f64,
        seed: u64,
        run: u64,
        horizon: f64,
    ) -> Self {
        let mut per_node: Vec<Vec<f64>> = vec![Vec::new(); roles.is_source.len()];
        for e in events {
            if e.mark < p.recall {
                per_node[e.node as usize].push(e.time);
            }
        }
        // False alarms: rate r(1-p)/p per failure rate, so that true alarms are
        // a fraction p of all alarms.
        if p.recall > 0.0 && p.precision < 1.0 && node_rate > 0.0 {
            let fa_mean = 1.0 / (node_rate * p.recall * (1.0 - p.precision) / p.precision);
            // A finite horizon for logs: the last event plus a margin.
            let end = if horizon.is_finite() {
                horizon
            } else {
                events.last().map_or(0.0, |e| e.time) * 2.0 + 86_400.0
            };
            for &node in &roles.relevant {
                let mut rng = Rng::stream(
                    seed,
                    &[run, u64::from(node), 3, p.precision.to_bits(), p.recall.to_bits()],
                );
                let mut t = rng.exponential(fa_mean);
                while t <= end {
                    per_node[node as usize].push(t);
                    t += rng.exponential(fa_mean);
                }
            }
        }
        let mut source = Vec::new();
        let mut backup = Vec::new();
        for (node, times) in per_node.iter_mut().enumerate() {
            times.sort_by(f64::total_cmp);
            if roles.is_source[node] {
                source.extend(times.iter().map(|&t| (t, node as u32)));
            }
            if roles.is_backup[node] {
                backup.extend(times.iter().copied());
            }
        }
        source.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        backup.sort_by(f64::total_cmp);
        Alarms {
            source,
            backup,
            per_node,
        }
    }

    fn any(v: &[f64], from: f64, to: f64) -> bool {
        let i = v.partition_point(|&x| x < from);
        i < v.len() && v[i] <= to
    }

    /// Source nodes with an alarm in `[from, to]`.
    fn sources_in(&self, from: f64, to: f64) -> impl Iterator<Item = u32> + '_ {
        let i = self.source.partition_point(|&(x, _)| x < from);
        self.source[i..]
            .iter()
            .take_while(move |&&(x, _)| x <= to)
            .map(|&(_, n)| n)
    }

    /// `(source alarm, backup alarm)` for the window `[from, to]`. With
    /// remote-only partner copies any backup failure loses the checkpoint, so
    /// the backup alarm is any alarm on a backup node (REMEM). With local
    /// copies only a source together with its own backup loses it: when some
    /// sources have alarms, the backup alarm is an alarm on one of *their*
    /// backups; without a source alarm the failing source is unknown and any
    /// backup alarm counts.
    fn window(&self, roles: &Roles, remote_only: bool, from: f64, to: f64) -> (bool, bool) {
        let mut sources = self.sources_in(from, to).peekable();
        let source_alarm = sources.peek().is_some();
        let backup_alarm = if remote_only || !source_alarm {
            Self::any(&self.backup, from, to)
        } else {
            sources.any(|s| Self::any(&self.per_node[roles.backup_of[s as usize] as usize], from, to))
        };
        (source_alarm, backup_alarm)
    }
}

#[cfg(test)]
mod tests;
