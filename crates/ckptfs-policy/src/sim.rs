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

use crate::decide::{decide, DecisionInput, Level, LevelCosts, Predictor, RollbackCount};
use crate::error::{invalid, non_negative, positive, probability, PolicyError};
use crate::failure::{weibull_events, FailureEvent, FailureLog, Matching, Weibull};
use crate::rng::Rng;
use serde::Serialize;

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

/// A retained checkpoint.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The state it holds (segments of progress).
    k: u64,
    level: Level,
    /// When its write started.
    written: f64,
    broken: bool,
}

/// What the job does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Compute,
    Checkpoint,
    /// Just restarted from a checkpoint at this level.
    Reprotect(Level),
}

/// One strategy walking through one failure history.
struct Walk<'a> {
    cfg: &'a SimConfig,
    roles: &'a Roles,
    events: &'a [FailureEvent],
    horizon: f64,
    next: usize,
    last_hard: Vec<f64>,
    /// Newest checkpoint per level.
    entries: [Option<Entry>; 3],
    /// Time of the newest hard failure of a backup node.
    last_backup_hard: f64,
}

impl<'a> Walk<'a> {
    fn new(cfg: &'a SimConfig, roles: &'a Roles, events: &'a [FailureEvent], horizon: f64) -> Self {
        Walk {
            cfg,
            roles,
            events,
            horizon,
            next: 0,
            last_hard: vec![f64::NEG_INFINITY; cfg.nodes as usize],
            entries: [
                None,
                None,
                // The job's input: state 0 on the PFS.
                Some(Entry {
                    k: 0,
                    level: Level::Pfs,
                    written: f64::NEG_INFINITY,
                    broken: false,
                }),
            ],
            last_backup_hard: f64::NEG_INFINITY,
        }
    }

    /// Processes failures before `until`; returns the time of the first one
    /// that hits a source node (the job stops), or `None`.
    fn advance(&mut self, until: f64) -> Result<Option<f64>, HorizonExceeded> {
        if until > self.horizon {
            return Err(HorizonExceeded);
        }
        while let Some(e) = self.events.get(self.next) {
            if e.time >= until {
                break;
            }
            self.next += 1;
            if e.hard {
                self.hard_failure(e.node, e.time);
            }
            if self.roles.is_source[e.node as usize] {
                return Ok(Some(e.time));
            }
        }
        Ok(None)
    }

    fn hard_failure(&mut self, node: u32, time: f64) {
        let x = node as usize;
        self.last_hard[x] = time;
        if self.roles.is_backup[x] {
            self.last_backup_hard = time;
        }
        for i in 0..2 {
            if let Some(mut e) = self.entries[i] {
                if !e.broken && self.breaks(&e, x) {
                    e.broken = true;
                    self.entries[i] = Some(e);
                }
            }
        }
    }

    /// Does the hard failure of node `x` (already recorded) lose `e`?
    fn breaks(&self, e: &Entry, x: usize) -> bool {
        let r = self.roles;
        match e.level {
            Level::Local => r.is_source[x],
            Level::Partner => {
                let lost = |s: usize| {
                    let remote = self.last_hard[r.backup_of[s] as usize] >= e.written;
                    let local = self.cfg.remote_only || self.last_hard[s] >= e.written;
                    remote && local
                };
                (r.is_source[x] && lost(x)) || r.backed_by[x].is_some_and(|s| lost(s as usize))
            }
            Level::Pfs => false,
        }
    }

    fn cost(&self, level: Level) -> crate::decide::LevelCost {
        // Strategies only use levels whose costs exist (checked up front).
        self.cfg.costs.get(level).unwrap_or(self.cfg.costs.pfs)
    }

    fn choose(&self, strategy: Strategy, alarms: Option<&Alarms>, t: f64, k: u64) -> Level {
        match (strategy, alarms) {
            (Strategy::Fixed(l), _) => l,
            (Strategy::Adaptive(predictor), Some(a)) => {
                let tau = self.cfg.tau;
                let k_pfs = self.entries[2].map_or(0, |e| e.k);
                let n = |since: u64| (k.saturating_sub(since + 1)).min(u64::from(u32::MAX)) as u32;
                let n_partner = self.entries[1]
                    .filter(|e| !e.broken && e.k > k_pfs)
                    .map(|e| n(e.k));
                // The checkpoint must survive its own write, the segment and
                // the write of the next checkpoint.
                let c_max = self
                    .cfg
                    .costs
                    .levels()
                    .into_iter()
                    .filter_map(|l| self.cfg.costs.get(l))
                    .map(|c| c.checkpoint_s)
                    .fold(0.0, f64::max);
                let (source_alarm, backup_alarm) =
                    a.window(self.roles, self.cfg.remote_only, t, t + tau + 2.0 * c_max);
                let input = DecisionInput {
                    costs: self.cfg.costs,
                    tau,
                    predictor,
                    source_alarm,
                    backup_alarm,
                    n_pfs: n(k_pfs),
                    n_partner,
                    soft_fraction: self.cfg.soft_fraction,
                    rollback: self.cfg.rollback,
                };
                decide(&input).level
            }
            (Strategy::Adaptive(_), None) => Level::Pfs,
        }
    }

    /// Rolls back after a source failure at `tf`; returns the time the job
    /// computes again, the state it resumes from and the level it came from.
    fn recover(&mut self, mut tf: f64, out: &mut Outcome) -> Result<(f64, u64, Level), HorizonExceeded> {
        out.failures += 1;
        let newest = self.entries.iter().flatten().map(|e| e.k).max().unwrap_or(0);
        let mut first = true;
        loop {
            let e = self
                .entries
                .iter()
                .flatten()
                .filter(|e| !e.broken)
                .max_by_key(|e| e.k)
                .copied()
                // The PFS entry is never broken.
                .unwrap_or(Entry {
                    k: 0,
                    level: Level::Pfs,
                    written: f64::NEG_INFINITY,
                    broken: false,
                });
            if first && e.k < newest {
                out.fallbacks += 1;
            }
            first = false;
            for slot in self.entries.iter_mut() {
                if slot.is_some_and(|x| x.k > e.k) {
                    *slot = None;
                }
            }
            let r = self.cost(e.level).restart_s;
            match self.advance(tf + r)? {
                None => {
                    out.restart += r;
                    return Ok((tf + r, e.k, e.level));
                }
                Some(t2) => {
                    out.restart += t2 - tf;
                    out.failures += 1;
                    tf = t2;
                }
            }
        }
    }

    /// What follows a restart: with `reprotect`, the adaptive strategy decides
    /// again for the restored checkpoint (a restart starts a new segment).
    fn after_restart(&self, strategy: Strategy, restored: Level) -> Phase {
        match strategy {
            Strategy::Adaptive(_) if self.cfg.reprotect && restored != Level::Pfs => {
                Phase::Reprotect(restored)
            }
            _ => Phase::Compute,
        }
    }

    fn run(&mut self, strategy: Strategy, alarms: Option<&Alarms>) -> Result<Outcome, HorizonExceeded> {
        let tau = self.cfg.tau;
        let budget = self.cfg.segments as f64 * tau;
        let mut out = Outcome::default();
        let mut t = 0.0;
        let mut k: u64 = 0;
        let mut used = 0.0;
        let mut tail = 0.0;
        let mut phase = Phase::Compute;
        loop {
            match phase {
                Phase::Compute => {
                    let left = budget - used;
                    if left <= 1e-9 * budget {
                        break;
                    }
                    let dur = left.min(tau);
                    match self.advance(t + dur)? {
                        None => {
                            used += dur;
                            t += dur;
                            if dur < tau {
                                tail = dur;
                                break;
                            }
                            k += 1;
                            phase = Phase::Checkpoint;
                        }
                        Some(tf) => {
                            used += tf - t;
                            let (t2, k2, restored) = self.recover(tf, &mut out)?;
                            (t, k) = (t2, k2);
                            phase = self.after_restart(strategy, restored);
                        }
                    }
                }
                Phase::Checkpoint | Phase::Reprotect(_) => {
                    let level = self.choose(strategy, alarms, t, k);
                    if let Phase::Reprotect(restored) = phase {
                        // Only move the restored checkpoint up, never down.
                        if level <= restored {
                            phase = Phase::Compute;
                            continue;
                        }
                        out.reprotects += 1;
                    }
                    let c = self.cost(level).checkpoint_s;
                    let start = t;
                    let backup_hard_before = self.last_backup_hard;
                    match self.advance(t + c)? {
                        None => {
                            out.checkpoint += c;
                            t += c;
                            out.counts[level.index()] += 1;
                            // A backup that failed hard during the write took
                            // its partial copies along (only matters without a
                            // local copy: sources did not fail, or we would not
                            // be here).
                            let broken = level == Level::Partner
                                && self.cfg.remote_only
                                && self.last_backup_hard > backup_hard_before;
                            self.entries[level.index()] = Some(Entry {
                                k,
                                level,
                                written: start,
                                broken,
                            });
                            phase = Phase::Compute;
                        }
                        Some(tf) => {
                            out.checkpoint += tf - t;
                            let (t2, k2, restored) = self.recover(tf, &mut out)?;
                            (t, k) = (t2, k2);
                            phase = self.after_restart(strategy, restored);
                        }
                    }
                }
            }
        }
        out.rework = (used - (k as f64 * tau + tail)).max(0.0);
        out.end_time = t;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::LevelCost;

    pub(crate) fn base() -> SimConfig {
        SimConfig {
            nodes: 256,
            procs: 64,
            failures: FailureSource::Weibull {
                mtbf_s: 2000.0 * 3600.0,
                shape: 0.7,
            },
            soft_fraction: 0.0,
            matching: Matching::Mirror,
            remote_only: true,
            predictor: Predictor {
                precision: 0.7,
                recall: 0.7,
            },
            segments: 2000,
            tau: 3600.0,
            costs: LevelCosts {
                local: None,
                partner: Some(LevelCost {
                    checkpoint_s: 8.0,
                    restart_s: 8.0,
                }),
                pfs: LevelCost {
                    checkpoint_s: 120.0,
                    restart_s: 120.0,
                },
            },
            rollback: RollbackCount::Paper,
            reprotect: false,
            runs: 2,
            seed: 1,
        }
    }

    #[test]
    fn no_failures_gives_checkpoint_cost_only() {
        let mut c = base();
        c.failures = FailureSource::Log(FailureLog {
            path: "empty".into(),
            events: vec![],
        });
        let r = Simulator::new(c).unwrap().run().unwrap();
        let disk = &r.results[1];
        assert_eq!(disk.strategy, "disk-only");
        assert_eq!(disk.ratios.rework, 0.0);
        assert_eq!(disk.ratios.restart, 0.0);
        // One checkpoint after each of the S segments: the ratio is C / τ.
        assert!((disk.ratios.checkpoint - 120.0 / 3600.0).abs() < 1e-12);
        assert_eq!(disk.checkpoints.pfs, 2000.0);
    }

    #[test]
    fn one_logged_failure_by_hand() {
        // Disk-only: segment 3 (from state 2) starts at 2τ + 2·120 s; a hard
        // failure of source 3 half-way through it loses τ/2 of compute.
        let mut c = base();
        c.segments = 10;
        c.runs = 1;
        let t_fail = 2.0 * 3600.0 + 2.0 * 120.0 + 1800.0; // mid segment 3
        c.failures = FailureSource::Log(FailureLog {
            path: "one".into(),
            events: vec![FailureEvent {
                time: t_fail,
                node: 3,
                hard: true,
                mark: 0.9,
            }],
        });
        let sim = Simulator::new(c).unwrap();
        let r = sim
            .run_strategies(&[Strategy::Fixed(Level::Pfs), Strategy::Fixed(Level::Partner)])
            .unwrap();
        let budget = 10.0 * 3600.0;
        let d = &r.results[0];
        assert!((d.ratios.rework - 1800.0 / budget).abs() < 1e-12, "{d:?}");
        assert!((d.ratios.restart - 120.0 / budget).abs() < 1e-12);
        assert_eq!(d.failures, 1.0);
        assert_eq!(d.fallbacks, 0.0);
        // Memory-only: cheaper checkpoints, so segment 3 started at
        // 2τ + 2·8 s; the failure is still inside it.
        let m = &r.results[1];
        let rework = t_fail - (2.0 * 3600.0 + 2.0 * 8.0);
        assert!((m.ratios.rework - rework / budget).abs() < 1e-12, "{m:?}");
        assert!((m.ratios.restart - 8.0 / budget).abs() < 1e-12);
    }

    #[test]
    fn lost_partner_copy_falls_back_to_pfs() {
        // Backup of source 0 is node 128 (mirror, 256 nodes). It fails hard,
        // then source 0 fails: REMEM's remote-only copy is gone, so the job
        // falls back to the input (state 0).
        let mut c = base();
        c.segments = 10;
        c.runs = 1;
        let t1 = 3.0 * (3600.0 + 8.0) + 100.0;
        c.failures = FailureSource::Log(FailureLog {
            path: "two".into(),
            events: vec![
                FailureEvent {
                    time: t1,
                    node: 128,
                    hard: true,
                    mark: 0.9,
                },
                FailureEvent {
                    time: t1 + 200.0,
                    node: 0,
                    hard: true,
                    mark: 0.9,
                },
            ],
        });
        let r = Simulator::new(c.clone())
            .unwrap()
            .run_strategies(&[Strategy::Fixed(Level::Partner)])
            .unwrap();
        let m = &r.results[0];
        assert_eq!(m.fallbacks, 1.0);
        // Lost: 3 segments of progress + 300 s of segment 4; restart from PFS.
        let budget = 10.0 * 3600.0;
        assert!((m.ratios.rework - (3.0 * 3600.0 + 300.0) / budget).abs() < 1e-12);
        assert!((m.ratios.restart - 120.0 / budget).abs() < 1e-12);
        // With a local copy the partner checkpoint survives (only node 0's
        // own copy and its backup's differ: node 0 lost its local copy, the
        // backup lost the remote one — both copies of image 0 are gone).
        c.remote_only = false;
        let r = Simulator::new(c.clone())
            .unwrap()
            .run_strategies(&[Strategy::Fixed(Level::Partner)])
            .unwrap();
        assert_eq!(r.results[0].fallbacks, 1.0);
        // A failure of an unrelated backup (node 129, backup of source 1)
        // does not lose image 0 when local copies exist.
        if let FailureSource::Log(l) = &mut c.failures {
            l.events[0].node = 129;
        }
        let r = Simulator::new(c)
            .unwrap()
            .run_strategies(&[Strategy::Fixed(Level::Partner)])
            .unwrap();
        assert_eq!(r.results[0].fallbacks, 0.0);
    }
}

#[cfg(test)]
mod property_tests {
    use super::tests::base;
    use super::*;
    use crate::decide::LevelCost;
    use proptest::prelude::*;

    fn perfect_setup(seed: u64, remote_only: bool) -> SimConfig {
        let mut c = base();
        c.nodes = 512;
        c.procs = 256;
        c.segments = 4000;
        c.runs = 3;
        c.seed = seed;
        c.remote_only = remote_only;
        c.failures = FailureSource::Weibull {
            mtbf_s: 3000.0 * 3600.0,
            shape: 0.7,
        };
        c.predictor = Predictor::PERFECT;
        c.rollback = RollbackCount::Distance;
        c.reprotect = true;
        c
    }

    /// A perfect predictor lets the adaptive policy do at least as well as
    /// both fixed strategies (with the distance count and re-protection after
    /// restarts; docs/policy.md explains why REMEM's own count and its
    /// decide-only-at-checkpoints rule can lose to disk-only).
    #[test]
    fn perfect_predictor_adaptive_is_no_worse_than_fixed() {
        for seed in 1..=3 {
            for remote_only in [true, false] {
                let r = Simulator::new(perfect_setup(seed, remote_only))
                    .unwrap()
                    .run()
                    .unwrap();
                let total = |name: &str| {
                    r.results
                        .iter()
                        .find(|x| x.strategy.starts_with(name))
                        .unwrap()
                        .ratios
                        .total
                };
                let (mem, disk, adaptive) = (total("memory-only"), total("disk-only"), total("adaptive"));
                assert!(
                    adaptive <= disk && adaptive <= mem,
                    "seed {seed} remote_only {remote_only}: adaptive {adaptive} disk {disk} mem {mem}"
                );
            }
        }
    }

    #[test]
    fn same_seed_same_report_other_seed_differs() {
        let c = perfect_setup(7, true);
        let a = Simulator::new(c.clone()).unwrap().run().unwrap();
        let b = Simulator::new(c.clone()).unwrap().run().unwrap();
        assert_eq!(a, b);
        let mut c2 = c;
        c2.seed = 8;
        let d = Simulator::new(c2).unwrap().run().unwrap();
        assert_ne!(a.results, d.results);
    }

    #[test]
    fn bad_configurations_name_the_parameter() {
        type Mutate = Box<dyn Fn(&mut SimConfig)>;
        let cases: Vec<(&str, Mutate)> = vec![
            ("nodes", Box::new(|c| c.nodes = 0)),
            ("nodes", Box::new(|c| c.nodes = 255)),
            ("procs", Box::new(|c| c.procs = 0)),
            ("procs", Box::new(|c| c.procs = 1000)),
            ("precision", Box::new(|c| c.predictor.precision = 1.1)),
            ("recall", Box::new(|c| c.predictor.recall = -0.1)),
            (
                "mtbf",
                Box::new(|c| {
                    c.failures = FailureSource::Weibull {
                        mtbf_s: -1.0,
                        shape: 0.7,
                    }
                }),
            ),
            (
                "shape",
                Box::new(|c| {
                    c.failures = FailureSource::Weibull {
                        mtbf_s: 1.0,
                        shape: 0.0,
                    }
                }),
            ),
            ("ckpt-pfs", Box::new(|c| c.costs.pfs.checkpoint_s = -5.0)),
            (
                "restart-partner",
                Box::new(|c| {
                    c.costs.partner = Some(LevelCost {
                        checkpoint_s: 1.0,
                        restart_s: f64::NAN,
                    })
                }),
            ),
            ("tau", Box::new(|c| c.tau = 0.0)),
            ("segments", Box::new(|c| c.segments = 0)),
            ("soft-fraction", Box::new(|c| c.soft_fraction = 2.0)),
            ("runs", Box::new(|c| c.runs = 0)),
        ];
        for (name, f) in cases {
            let mut c = base();
            f(&mut c);
            let e = Simulator::new(c).unwrap_err().to_string();
            assert!(e.contains(&format!("`{name}`")), "{name}: {e}");
        }
    }

    #[test]
    fn restarts_slower_than_failures_are_reported_not_hung() {
        let mut c = base();
        c.procs = 128;
        c.segments = 50;
        c.runs = 1;
        c.nodes = 64;
        c.procs = 16;
        c.failures = FailureSource::Weibull {
            mtbf_s: 3600.0,
            shape: 1.0,
        };
        c.costs.pfs = LevelCost {
            checkpoint_s: 1e5,
            restart_s: 1e5,
        };
        let e = Simulator::new(c).unwrap().run().unwrap_err();
        assert!(matches!(e, PolicyError::Diverged(_)), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Any valid small setup runs, and the ratios add up and are sane.
        #[test]
        fn ratios_are_consistent(
            procs in 1u32..32, mtbf_h in 50.0..5000.0f64, shape in 0.5..2.0f64,
            soft in 0.0..=1.0f64, ring: bool, remote_only: bool, reprotect: bool,
            precision in 0.05..=1.0f64, recall in 0.0..=1.0f64, local: bool,
            seed in 0u64..1000,
        ) {
            let mut c = base();
            c.nodes = 64;
            c.procs = procs;
            c.segments = 300;
            c.runs = 1;
            c.seed = seed;
            c.soft_fraction = soft;
            c.matching = if ring { Matching::Ring } else { Matching::Mirror };
            c.remote_only = remote_only;
            c.reprotect = reprotect;
            c.predictor = Predictor { precision, recall };
            c.failures = FailureSource::Weibull { mtbf_s: mtbf_h * 3600.0, shape };
            if local {
                c.costs.local = Some(LevelCost { checkpoint_s: 1.0, restart_s: 1.0 });
            }
            let r = Simulator::new(c).unwrap().run().unwrap();
            for x in &r.results {
                let q = &x.ratios;
                prop_assert!(q.rework >= 0.0 && q.rework <= 1.0 + 1e-9, "{x:?}");
                prop_assert!(q.checkpoint >= 0.0 && q.restart >= 0.0);
                prop_assert!((q.total - (q.rework + q.checkpoint + q.restart)).abs() < 1e-12);
            }
            // Disk-only never falls back: the PFS keeps everything.
            let disk = r.results.iter().find(|x| x.strategy == "disk-only").unwrap();
            prop_assert_eq!(disk.fallbacks, 0.0);
        }
    }
}
