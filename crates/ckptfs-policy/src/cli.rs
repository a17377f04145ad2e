//! The `ckptfs policy` subcommands: `decide`, `interval`, `simulate`.
//!
//! The `ckptfs` binary embeds [`PolicyCommand`] as
//! `Policy { #[command(subcommand)] cmd: PolicyCommand }` and calls [`run`].
//! Every subcommand prints a table, or JSON with `--json`.

use crate::costs_file;
use crate::decide::{try_decide, DecisionInput, LevelCost, LevelCosts, RollbackCount};
use crate::error::PolicyError;
use crate::failure::{FailureLog, Matching};
use crate::fig5;
use crate::interval;
use crate::plot;
use crate::remem::Predictor;
use crate::sim::{FailureSource, SimConfig, SimReport, Simulator, StrategyResult};
use crate::units::{fmt_duration, parse_duration};
use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `ckptfs policy ...`
#[derive(Debug, Clone, Subcommand)]
pub enum PolicyCommand {
    /// Choose the level (node memory, partner memory, PFS) for the next
    /// checkpoint and show each level's expected overhead.
    #[command(long_about = DECIDE_ABOUT)]
    Decide(DecideArgs),
    /// Optimum checkpoint interval from MTBF and checkpoint cost (Young, Daly).
    #[command(long_about = INTERVAL_ABOUT)]
    Interval(IntervalArgs),
    /// Simulate failures and compare fixed levels with the adaptive policy.
    #[command(long_about = SIMULATE_ABOUT)]
    Simulate(SimulateArgs),
}

const DECIDE_ABOUT: &str = "\
Choose the level for the next checkpoint (REMEM's adaptive selection, generalised).

The predictor turns alarms into failure probabilities for the next segment of length \
tau: P = precision if there is an alarm, 1 - recall if not (REMEM's Algorithm 1), \
separately for the source nodes (P_s) and their backup nodes (P_b). Expected overhead:
  PFS:     C_pfs + P_s (tau/2 + R_pfs)                                   (REMEM (1))
  partner: C_p + P_s(1-P_b)(tau/2 + R_p) + P_s P_b (tau/2 + n tau + R_pfs)  (REMEM (2))
  local:   C_l + P_s [ f (tau/2 + R_l) + (1-f)(1-P_b)(fallback to partner) + (1-f) P_b (fallback to PFS) ]
where n is the number of memory checkpoints since the newest PFS one and f the fraction \
of failures that leave node memory intact (soft). The cheapest level wins; ties go to \
the more durable one. Without --ckpt-partner/--ckpt-local those levels are not considered. \
Durations take units: 90, 90s, 30m, 2h, 1.5d (bare numbers are seconds).";

const INTERVAL_ABOUT: &str = "\
Optimum checkpoint interval (compute time between checkpoints).

Young: tau = sqrt(2 C M). Daly (higher order): tau = sqrt(2 C M)[1 + sqrt(C/2M)/3 + (C/2M)/9] - C \
for C < 2M, else M. Also the exact optimum of Daly's exponential model \
M(1 + W0(-exp(-1 - C/M))) and, for each interval, the expected fraction of time lost under \
that model, which uses the restart cost R. M is the MTBF of the job: the node MTBF divided \
by --nodes.";

const SIMULATE_ABOUT: &str = "\
Simulate a job on a machine whose nodes fail, and compare checkpoint strategies.

Nodes fail as Weibull renewal processes (--mtbf, --shape) or as listed in --failure-log. \
The job runs on nodes 0..procs; --matching pairs each with a backup node. A job failure \
rolls back to the newest checkpoint that survived: node memory is lost with any hard \
node failure, a partner checkpoint when a source and its backup both failed (with \
--remote-only: when any backup failed), the PFS never. The predictor foresees each \
failure with probability recall and raises false alarms so that a fraction precision of \
alarms is true. The job computes S x tau seconds in all; rework (lost compute), \
checkpoint and restart time are reported divided by S x tau, as in REMEM's Figure 5, \
for each fixed level and for the adaptive policy. --reproduce remem-fig5 runs the \
paper's setup and writes remem-fig5{a,b,c}.png.";

fn duration(s: &str) -> Result<f64, String> {
    parse_duration(s)
}

/// A size in bytes: the settings' one size parser (`4GB` = `4GiB` = 4 * 2^30).
fn size(s: &str) -> Result<f64, String> {
    ckptfs_settings::parse_size(s).map(|b| b as f64)
}

/// Level costs given as flags.
#[derive(Debug, Clone, Args)]
pub struct CostArgs {
    /// Checkpoint cost of the parallel file system (e.g. 130s, 2.5m).
    #[arg(long, value_parser = duration)]
    pub ckpt_pfs: Option<f64>,
    /// Restart cost from the PFS [default: --ckpt-pfs].
    #[arg(long, value_parser = duration, requires = "ckpt_pfs")]
    pub restart_pfs: Option<f64>,
    /// Checkpoint cost of partner (remote) memory; enables the partner level.
    #[arg(long, value_parser = duration)]
    pub ckpt_partner: Option<f64>,
    /// Restart cost from partner memory [default: --ckpt-partner].
    #[arg(long, value_parser = duration, requires = "ckpt_partner")]
    pub restart_partner: Option<f64>,
    /// Checkpoint cost of node memory; enables the local level.
    #[arg(long, value_parser = duration)]
    pub ckpt_local: Option<f64>,
    /// Restart cost from node memory [default: --ckpt-local].
    #[arg(long, value_parser = duration, requires = "ckpt_local")]
    pub restart_local: Option<f64>,
}

impl CostArgs {
    fn any(&self) -> bool {
        self.ckpt_pfs.is_some() || self.ckpt_partner.is_some() || self.ckpt_local.is_some()
    }

    fn costs(&self) -> Result<LevelCosts, PolicyError> {
        self.merged(None)
    }

    /// The flags' costs on top of costs read from a file (flags win, level by
    /// level).
    fn merged(&self, file: Option<&costs_file::LoadedCosts>) -> Result<LevelCosts, PolicyError> {
        let lc = |c: Option<f64>, r: Option<f64>| {
            c.map(|c| LevelCost {
                checkpoint_s: c,
                restart_s: r.unwrap_or(c),
            })
        };
        let local = lc(self.ckpt_local, self.restart_local).or(file.and_then(|f| f.local));
        let partner = lc(self.ckpt_partner, self.restart_partner).or(file.and_then(|f| f.partner));
        let pfs = lc(self.ckpt_pfs, self.restart_pfs)
            .or(file.and_then(|f| f.pfs))
            .ok_or_else(|| {
                PolicyError::InvalidSetup(
                    "the PFS checkpoint cost is needed: pass --ckpt-pfs (or --costs-from FILE \
                     with a PFS level)"
                        .into(),
                )
            })?;
        let costs = LevelCosts { local, partner, pfs };
        costs.validate()?;
        Ok(costs)
    }
}

/// Arguments of `ckptfs policy decide`.
#[derive(Debug, Clone, Args)]
pub struct DecideArgs {
    #[command(flatten)]
    /// Level costs.
    pub costs: CostArgs,
    /// Checkpoint interval tau (compute time per segment).
    #[arg(long, value_parser = duration, default_value = "2h")]
    pub tau: f64,
    /// Predictor precision: fraction of alarms followed by a failure (0..1).
    #[arg(long, default_value_t = 0.7)]
    pub precision: f64,
    /// Predictor recall: fraction of failures preceded by an alarm (0..1).
    #[arg(long, default_value_t = 0.7)]
    pub recall: f64,
    /// The predictor has an alarm for the source (job) nodes in the next segment.
    #[arg(long)]
    pub source_alarm: bool,
    /// The predictor has an alarm for the backup (partner) nodes in the next segment.
    #[arg(long)]
    pub backup_alarm: bool,
    /// n: memory checkpoints written since the newest PFS checkpoint (Algorithm 1's counter).
    #[arg(long, default_value_t = 0)]
    pub n: u32,
    /// Node-memory checkpoints since the newest intact partner checkpoint, if that one is
    /// newer than the newest PFS checkpoint (only matters with --ckpt-local).
    #[arg(long)]
    pub n_partner: Option<u32>,
    /// Fraction of failures that leave node memory intact (process crashes), 0..1.
    #[arg(long, default_value_t = 0.0)]
    pub soft_fraction: f64,
    /// How many segments a fallback loses: `paper` = n (formula (2) as printed),
    /// `distance` = n + 1 (the true distance).
    #[arg(long, value_enum, default_value_t = RollbackCount::Paper)]
    pub rollback: RollbackCount,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ckptfs policy interval`.
#[derive(Debug, Clone, Args)]
pub struct IntervalArgs {
    /// Mean time between failures of one node (e.g. 7668h, or of the whole job with --nodes 1).
    #[arg(long, value_parser = duration)]
    pub mtbf: f64,
    /// Checkpoint cost (time the application is stopped per checkpoint).
    #[arg(long, value_parser = duration)]
    pub cost: f64,
    /// Restart cost (used for the expected waste under Daly's model).
    #[arg(long, value_parser = duration, default_value = "0")]
    pub restart: f64,
    /// Nodes of the job; the job's MTBF is --mtbf / --nodes.
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Presets of `simulate --reproduce`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// REMEM Figure 5: 2048 nodes, MTBF 7668 h, shape 0.7, 10000 segments, three panels.
    RememFig5,
}

/// Arguments of `ckptfs policy simulate`.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// Run a preset instead of a single setup (only --seed, --runs, --rollback,
    /// --plot-dir, --no-plot and --json apply).
    #[arg(long, value_enum, conflicts_with_all = [
        "nodes", "procs", "mtbf", "shape", "failure_log", "soft_fraction", "matching",
        "remote_only", "precision", "recall", "segments", "tau", "costs_from", "ckpt_size",
        "ckpt_pfs", "restart_pfs", "ckpt_partner", "restart_partner", "ckpt_local", "restart_local",
        "no_reprotect",
    ])]
    pub reproduce: Option<Preset>,
    /// Nodes in the machine.
    #[arg(long, default_value_t = 2048)]
    pub nodes: u32,
    /// Processes of the job, one per node, on nodes 0..procs (the source nodes).
    #[arg(long, default_value_t = 512)]
    pub procs: u32,
    /// Mean time between failures of one node (Weibull).
    #[arg(long, value_parser = duration, default_value = "7668h")]
    pub mtbf: f64,
    /// Weibull shape (< 1: failure rate decreasing with age, as on HPC systems).
    #[arg(long, default_value_t = 0.7)]
    pub shape: f64,
    /// Read failures from FILE instead of drawing them: lines `node time [hard|soft]`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["mtbf", "shape"])]
    pub failure_log: Option<PathBuf>,
    /// Fraction of failures that are soft (process dies, node memory survives): applied to
    /// drawn failures, and assumed by the adaptive policy (a log marks each failure itself).
    #[arg(long, default_value_t = 0.0)]
    pub soft_fraction: f64,
    /// Source/backup pairing: mirror (i <-> i+N/2) or ring (i -> i+1).
    #[arg(long, value_enum, default_value_t = Matching::Mirror)]
    pub matching: Matching,
    /// The partner level keeps no copy in the source's own memory (REMEM).
    #[arg(long)]
    pub remote_only: bool,
    /// Predictor precision (0..1).
    #[arg(long, default_value_t = 0.7)]
    pub precision: f64,
    /// Predictor recall (0..1).
    #[arg(long, default_value_t = 0.7)]
    pub recall: f64,
    /// Segments S: the job computes S x tau in all.
    #[arg(long, default_value_t = 10_000)]
    pub segments: u64,
    /// Checkpoint interval tau.
    #[arg(long, value_parser = duration, default_value = "2h")]
    pub tau: f64,
    #[command(flatten)]
    /// Level costs.
    pub costs: CostArgs,
    /// Read level costs from FILE: {"levels": {...}} or `ckptfs bench --json` output
    /// (see docs/policy.md); --ckpt-* flags add or override levels.
    #[arg(long, value_name = "FILE")]
    pub costs_from: Option<PathBuf>,
    /// Bytes per node per checkpoint, to turn a bench document's bandwidths into costs
    /// (e.g. 4GiB, 800MB).
    #[arg(long, value_parser = size, requires = "costs_from")]
    pub ckpt_size: Option<f64>,
    /// How the adaptive policy counts a fallback's lost segments.
    #[arg(long, value_enum, default_value_t = RollbackCount::Paper)]
    pub rollback: RollbackCount,
    /// Adaptive only: do not decide again after a restart. By default a restart from
    /// memory starts a new segment and the restored checkpoint is copied to the PFS if the
    /// policy now prefers it; REMEM's Algorithm 1 (and --reproduce) does not.
    #[arg(long)]
    pub no_reprotect: bool,
    /// Independent runs averaged [default: 1, or 10 with --reproduce].
    #[arg(long)]
    pub runs: Option<u32>,
    /// Seed for all random draws (same seed, same output).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write PNG plots to DIR [default with --reproduce: current directory].
    #[arg(long, value_name = "DIR")]
    pub plot_dir: Option<PathBuf>,
    /// Do not write PNG plots.
    #[arg(long, conflicts_with = "plot_dir")]
    pub no_plot: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `ckptfs policy` subcommand, printing to stdout.
pub fn run(cmd: PolicyCommand) -> Result<(), PolicyError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run_to(cmd, &mut out)
}

/// Runs a `ckptfs policy` subcommand, printing to `out`.
pub fn run_to(cmd: PolicyCommand, out: &mut dyn Write) -> Result<(), PolicyError> {
    let text = match cmd {
        PolicyCommand::Decide(a) => decide_cmd(&a)?,
        PolicyCommand::Interval(a) => interval_cmd(&a)?,
        PolicyCommand::Simulate(a) => simulate_cmd(&a)?,
    };
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|source| PolicyError::Io {
            path: PathBuf::from("<stdout>"),
            source,
        })
}

fn json(v: &impl serde::Serialize) -> Result<String, PolicyError> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}

fn decide_cmd(a: &DecideArgs) -> Result<String, PolicyError> {
    let input = DecisionInput {
        costs: a.costs.costs()?,
        tau: a.tau,
        predictor: Predictor {
            precision: a.precision,
            recall: a.recall,
        },
        source_alarm: a.source_alarm,
        backup_alarm: a.backup_alarm,
        n_pfs: a.n,
        n_partner: a.n_partner,
        soft_fraction: a.soft_fraction,
        rollback: a.rollback,
    };
    let d = try_decide(&input)?;
    if a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            input: &'a DecisionInput,
            decision: &'a crate::Decision,
        }
        return json(&Out {
            input: &input,
            decision: &d,
        });
    }
    let mut s = String::new();
    s += &format!(
        "P_source = {:.3} ({}), P_backup = {:.3} ({}), tau = {}, n = {}\n\n",
        d.p_source,
        if a.source_alarm { "alarm" } else { "no alarm" },
        d.p_backup,
        if a.backup_alarm { "alarm" } else { "no alarm" },
        fmt_duration(a.tau),
        a.n
    );
    s += &format!(
        "{:<9} {:>14} {:>14} {:>18}\n",
        "level", "checkpoint", "E[failure]", "expected overhead"
    );
    for e in &d.estimates {
        s += &format!(
            "{:<9} {:>14} {:>14} {:>18}{}\n",
            e.level.name(),
            fmt_duration(e.checkpoint_s),
            fmt_duration(e.expected_failure_s),
            fmt_duration(e.overhead_s),
            if e.level == d.level { "  <- chosen" } else { "" }
        );
    }
    s += &format!("\nchoice: {}\n", d.level);
    Ok(s)
}

fn interval_cmd(a: &IntervalArgs) -> Result<String, PolicyError> {
    let adv = interval::advise(a.mtbf, a.nodes, a.cost, a.restart)?;
    if a.json {
        return json(&adv);
    }
    let pct = |w: f64| {
        if w.is_finite() {
            format!("{:.3}%", w * 100.0)
        } else {
            "-".into()
        }
    };
    let mut s = format!(
        "job MTBF M = {} ({} node(s)), checkpoint C = {}, restart R = {}\n\n",
        fmt_duration(adv.mtbf_s),
        a.nodes,
        fmt_duration(adv.cost_s),
        fmt_duration(adv.restart_s)
    );
    s += &format!(
        "{:<28} {:>12} {:>22}\n",
        "formula", "interval", "expected time lost"
    );
    for (name, t, w) in [
        ("Young sqrt(2CM)", adv.young_s, adv.young_waste),
        ("Daly higher-order", adv.daly_s, adv.daly_waste),
        ("exact optimum (Daly model)", adv.exact_s, adv.exact_waste),
    ] {
        s += &format!("{name:<28} {:>12} {:>22}\n", fmt_duration(t), pct(w));
    }
    s += "\n(time lost = wall time / compute time - 1 under Daly's exponential model)\n";
    Ok(s)
}

fn simulate_cmd(a: &SimulateArgs) -> Result<String, PolicyError> {
    if let Some(runs) = a.runs {
        if runs == 0 {
            return Err(crate::error::invalid("runs", 0, "must be at least 1"));
        }
    }
    match a.reproduce {
        Some(Preset::RememFig5) => fig5_cmd(a),
        None => single_cmd(a),
    }
}

fn single_cmd(a: &SimulateArgs) -> Result<String, PolicyError> {
    let (costs, provenance) = match &a.costs_from {
        Some(path) => {
            let l = costs_file::load(path, a.ckpt_size)?;
            let costs = if a.costs.any() {
                a.costs.merged(Some(&l))?
            } else {
                l.complete(path)?
            };
            let mut prov = l.provenance;
            if a.costs.any() {
                prov.push("command-line --ckpt-* flags override the file".into());
            }
            (costs, prov)
        }
        None if a.costs.any() => (a.costs.costs()?, vec!["from the command line".to_string()]),
        None => {
            return Err(PolicyError::InvalidSetup(
                "no level costs: pass --ckpt-pfs (and --ckpt-partner / --ckpt-local for the \
                 memory levels), or --costs-from FILE, or --reproduce remem-fig5"
                    .into(),
            ))
        }
    };
    if a.nodes == 0 {
        return Err(crate::error::invalid("nodes", 0, "must be at least 1"));
    }
    let failures = match &a.failure_log {
        Some(p) => FailureSource::Log(FailureLog::read(p, a.nodes, a.seed)?),
        None => FailureSource::Weibull {
            mtbf_s: a.mtbf,
            shape: a.shape,
        },
    };
    let config = SimConfig {
        nodes: a.nodes,
        procs: a.procs,
        failures,
        soft_fraction: a.soft_fraction,
        matching: a.matching,
        remote_only: a.remote_only,
        predictor: Predictor {
            precision: a.precision,
            recall: a.recall,
        },
        segments: a.segments,
        tau: a.tau,
        costs,
        rollback: a.rollback,
        reprotect: !a.no_reprotect,
        runs: a.runs.unwrap_or(1),
        seed: a.seed,
    };
    let report = Simulator::new(config)?.run()?;
    let mut plots = Vec::new();
    if let (Some(dir), false) = (&a.plot_dir, a.no_plot) {
        let path = plot_path(dir, "simulate.png")?;
        plot::bar_chart(
            &path,
            "ckptfs policy simulate: cost ratios",
            &format!(
                "{} procs on {} nodes, tau = {}, {} segments",
                a.procs,
                a.nodes,
                fmt_duration(a.tau),
                a.segments
            ),
            &[plot::Group {
                label: "",
                results: &report.results,
            }],
        )?;
        plots.push(path);
    }
    if a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            report: &'a SimReport,
            costs_provenance: &'a [String],
            plots: &'a [PathBuf],
        }
        return json(&Out {
            report: &report,
            costs_provenance: &provenance,
            plots: &plots,
        });
    }
    let c = &report.config;
    let mut s = String::new();
    let fail = match &c.failures {
        FailureSource::Weibull { mtbf_s, shape } => {
            format!("Weibull, node MTBF {}, shape {shape}", fmt_duration(*mtbf_s))
        }
        FailureSource::Log(l) => format!("log {} ({} failures)", l.path.display(), l.events.len()),
    };
    s += &format!(
        "{} procs on {} nodes, {:?} matching{}; failures: {fail}, soft fraction {}\n",
        c.procs,
        c.nodes,
        c.matching,
        if c.remote_only {
            ", remote-only partner copies"
        } else {
            ""
        },
        c.soft_fraction
    );
    s += &format!(
        "S = {} segments of tau = {}; predictor precision {} recall {}; {} run(s), seed {}\n",
        c.segments,
        fmt_duration(c.tau),
        c.predictor.precision,
        c.predictor.recall,
        c.runs,
        c.seed
    );
    for l in c.costs.levels() {
        if let Some(lc) = c.costs.get(l) {
            s += &format!(
                "  {:<8} checkpoint {:>10}  restart {:>10}\n",
                l.name(),
                fmt_duration(lc.checkpoint_s),
                fmt_duration(lc.restart_s)
            );
        }
    }
    for p in &provenance {
        s += &format!("  costs {p}\n");
    }
    s += "\n";
    s += &results_table(&[("", &report.results)]);
    for n in &report.notes {
        s += &format!("note: {n}\n");
    }
    for p in &plots {
        s += &format!("plot: {}\n", p.display());
    }
    Ok(s)
}

fn plot_path(dir: &Path, name: &str) -> Result<PathBuf, PolicyError> {
    std::fs::create_dir_all(dir).map_err(|source| PolicyError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    Ok(dir.join(name))
}

fn pct(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

/// A table of results; each group's label is printed on its first row.
fn results_table(groups: &[(&str, &[StrategyResult])]) -> String {
    let gw = groups.iter().map(|g| g.0.len()).max().unwrap_or(0);
    let mut s = String::new();
    let head = format!(
        "{:<gw$}{}{:<17} {:>8} {:>9} {:>8} {:>8} {:>7}  {:>18} {:>8} {:>9}\n",
        "",
        if gw > 0 { "  " } else { "" },
        "strategy",
        "rework",
        "ckpt",
        "restart",
        "total",
        "sd",
        "ckpts loc/par/pfs",
        "failures",
        "fallbacks",
    );
    s += &head;
    for (label, results) in groups {
        for (i, r) in results.iter().enumerate() {
            let ck = &r.checkpoints;
            s += &format!(
                "{:<gw$}{}{:<17} {:>8} {:>9} {:>8} {:>8} {:>7}  {:>18} {:>8.1} {:>9.1}\n",
                if i == 0 { label } else { "" },
                if gw > 0 { "  " } else { "" },
                r.strategy,
                pct(r.ratios.rework),
                pct(r.ratios.checkpoint),
                pct(r.ratios.restart),
                pct(r.ratios.total),
                pct(r.total_stddev),
                format!("{:.0}/{:.0}/{:.0}", ck.local, ck.partner, ck.pfs),
                r.failures,
                r.fallbacks,
            );
        }
    }
    s
}

fn fig5_cmd(a: &SimulateArgs) -> Result<String, PolicyError> {
    let runs = a.runs.unwrap_or(fig5::DEFAULT_RUNS);
    let started = std::time::Instant::now();
    let report = fig5::run(a.seed, runs, a.rollback)?;
    let sim_time = started.elapsed().as_secs_f64();
    let mut plots = Vec::new();
    if !a.no_plot {
        let dir = a.plot_dir.clone().unwrap_or_else(|| PathBuf::from("."));
        for p in &report.panels {
            let path = plot_path(&dir, &format!("remem-fig5{}.png", p.id))?;
            let groups: Vec<plot::Group<'_>> = p
                .groups
                .iter()
                .map(|g| plot::Group {
                    label: &g.label,
                    results: &g.results,
                })
                .collect();
            plot::bar_chart(&path, &p.title, &p.x_axis, &groups)?;
            plots.push(path);
        }
    }
    if a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            report: &'a fig5::Fig5Report,
            plots: &'a [PathBuf],
        }
        return json(&Out {
            report: &report,
            plots: &plots,
        });
    }
    let mut s = format!(
        "REMEM Figure 5 reproduction: {} nodes, node MTBF {} h, Weibull shape {}, {} segments, \
         mirror matching, remote-only memory; {} run(s) per bar, seed {}, rollback count {:?}\n\
         costs: memory {} s; PFS = procs / I/O nodes x {} s (restart = checkpoint)\n\
         ratios are divided by S x tau; sd = standard deviation of the total across runs\n",
        fig5::NODES,
        fig5::MTBF_H,
        fig5::SHAPE,
        fig5::SEGMENTS,
        runs,
        a.seed,
        a.rollback,
        fig5::REMEM_COST_S,
        fig5::PFS_COST_PER_PROC_PER_SERVER_S
    );
    for p in &report.panels {
        s += &format!("\n{}\n", p.title);
        let rows: Vec<(String, &[StrategyResult])> = p
            .groups
            .iter()
            .map(|g| {
                (
                    format!("{} (PFS {:.0} s)", g.label, g.costs.pfs.checkpoint_s),
                    g.results.as_slice(),
                )
            })
            .collect();
        let rows: Vec<(&str, &[StrategyResult])> = rows.iter().map(|(l, r)| (l.as_str(), *r)).collect();
        s += &results_table(&rows);
    }
    s += &format!("\nsimulated in {sim_time:.1} s\n");
    for p in &plots {
        s += &format!("plot: {}\n", p.display());
    }
    Ok(s)
}
