//! The `--reproduce remem-fig5` preset: REMEM's Figure 5 (cost ratios of
//! memory-only, disk-only and adaptive checkpointing under three predictor
//! accuracies) on the paper's simulated machine.
//!
//! Setup from the paper: 2048 nodes, node MTBF 7668 h, Weibull shape 0.7,
//! 10 000 segments; defaults 512 processes, 64 I/O nodes, τ = 2 h; panel (a)
//! varies the processes (256, 512, 1024), (b) the I/O nodes (32, 64, 128), (c)
//! the interval (0.5, 1, 2, 4 h). Mirror matching (the paper pairs two rack
//! groups), remote memory without a local copy, hard failures only.
//!
//! What the paper does not give, and this preset assumes (docs/policy.md):
//!
//! * costs: REMEM measured 8 s (REMEM) and 130 s (PVFS2 with 4 I/O servers)
//!   for one checkpoint of cg.D with 32 processes. The preset keeps the
//!   per-process image of that run: a REMEM checkpoint costs 8 s whatever the
//!   job size (each node sends its image to its own backup), a PFS checkpoint
//!   `procs / io_nodes × 16.25 s` (the servers' bandwidth is shared; 130 s ·
//!   4 / 32 = 16.25 s per process per server). Restart costs equal checkpoint
//!   costs.
//! * the three predictor accuracies: precision = recall = 0.5, 0.7 and 0.9
//!   (F-measure 0.5, 0.7, 0.9).

use crate::decide::{Level, LevelCost, LevelCosts, RollbackCount};
use crate::error::PolicyError;
use crate::failure::Matching;
use crate::remem::Predictor;
use crate::sim::{FailureSource, SimConfig, Simulator, Strategy, StrategyResult};
use serde::Serialize;

/// Nodes of the simulated machine.
pub const NODES: u32 = 2048;
/// Node MTBF in hours.
pub const MTBF_H: f64 = 7668.0;
/// Weibull shape.
pub const SHAPE: f64 = 0.7;
/// Segments per run.
pub const SEGMENTS: u64 = 10_000;
/// REMEM checkpoint (and restart) cost, seconds.
pub const REMEM_COST_S: f64 = 8.0;
/// PFS cost per process per I/O server, seconds (130 s · 4 servers / 32 processes).
pub const PFS_COST_PER_PROC_PER_SERVER_S: f64 = 130.0 * 4.0 / 32.0;
/// The three predictor accuracies.
pub const PREDICTORS: [Predictor; 3] = [
    Predictor {
        precision: 0.5,
        recall: 0.5,
    },
    Predictor {
        precision: 0.7,
        recall: 0.7,
    },
    Predictor {
        precision: 0.9,
        recall: 0.9,
    },
];
/// Runs averaged per bar unless `--runs` says otherwise.
pub const DEFAULT_RUNS: u32 = 10;

/// Level costs of the preset for a job of `procs` processes and a PFS with
/// `io_nodes` I/O servers.
pub fn costs(procs: u32, io_nodes: u32) -> LevelCosts {
    let pfs = f64::from(procs) / f64::from(io_nodes) * PFS_COST_PER_PROC_PER_SERVER_S;
    LevelCosts {
        local: None,
        partner: Some(LevelCost {
            checkpoint_s: REMEM_COST_S,
            restart_s: REMEM_COST_S,
        }),
        pfs: LevelCost {
            checkpoint_s: pfs,
            restart_s: pfs,
        },
    }
}

/// The strategies of every group: the five bars of the paper.
pub fn strategies() -> Vec<Strategy> {
    let mut v = vec![Strategy::Fixed(Level::Partner), Strategy::Fixed(Level::Pfs)];
    v.extend(PREDICTORS.iter().map(|p| Strategy::Adaptive(*p)));
    v
}

/// One group of bars (one configuration).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fig5Group {
    /// Label on the x axis (`512 procs`, `64 I/O`, `2 h`).
    pub label: String,
    /// Processes (source nodes).
    pub procs: u32,
    /// PFS I/O servers.
    pub io_nodes: u32,
    /// Interval, seconds.
    pub tau_s: f64,
    /// The level costs derived from `procs` and `io_nodes`.
    pub costs: LevelCosts,
    /// One result per strategy, in [`strategies`] order.
    pub results: Vec<StrategyResult>,
}

/// One panel of the figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fig5Panel {
    /// `a`, `b` or `c`.
    pub id: String,
    /// Title.
    pub title: String,
    /// What varies along the x axis.
    pub x_axis: String,
    /// The groups.
    pub groups: Vec<Fig5Group>,
}

/// The whole reproduction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fig5Report {
    /// Seed used.
    pub seed: u64,
    /// Runs averaged per bar.
    pub runs: u32,
    /// How the adaptive policy counted fallbacks.
    pub rollback: RollbackCount,
    /// Panels a, b, c.
    pub panels: Vec<Fig5Panel>,
}

/// Runs the preset.
pub fn run(seed: u64, runs: u32, rollback: RollbackCount) -> Result<Fig5Report, PolicyError> {
    let group = |label: String, procs: u32, io: u32, tau_h: f64| -> Result<Fig5Group, PolicyError> {
        let config = SimConfig {
            nodes: NODES,
            procs,
            failures: FailureSource::Weibull {
                mtbf_s: MTBF_H * 3600.0,
                shape: SHAPE,
            },
            soft_fraction: 0.0,
            matching: Matching::Mirror,
            remote_only: true,
            predictor: PREDICTORS[1],
            segments: SEGMENTS,
            tau: tau_h * 3600.0,
            costs: costs(procs, io),
            rollback,
            reprotect: false,
            runs,
            seed,
        };
        let report = Simulator::new(config.clone())?.run_strategies(&strategies())?;
        Ok(Fig5Group {
            label,
            procs,
            io_nodes: io,
            tau_s: config.tau,
            costs: config.costs,
            results: report.results,
        })
    };
    let a = [256, 512, 1024]
        .into_iter()
        .map(|p| group(format!("{p} procs"), p, 64, 2.0))
        .collect::<Result<Vec<_>, _>>()?;
    let b = [32, 64, 128]
        .into_iter()
        .map(|io| group(format!("{io} I/O nodes"), 512, io, 2.0))
        .collect::<Result<Vec<_>, _>>()?;
    let c = [0.5, 1.0, 2.0, 4.0]
        .into_iter()
        .map(|h| group(format!("tau {h} h"), 512, 64, h))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Fig5Report {
        seed,
        runs,
        rollback,
        panels: vec![
            Fig5Panel {
                id: "a".into(),
                title: "REMEM Fig. 5a: number of processes (64 I/O nodes, tau = 2 h)".into(),
                x_axis: "processes".into(),
                groups: a,
            },
            Fig5Panel {
                id: "b".into(),
                title: "REMEM Fig. 5b: number of I/O nodes (512 processes, tau = 2 h)".into(),
                x_axis: "PFS I/O nodes".into(),
                groups: b,
            },
            Fig5Panel {
                id: "c".into(),
                title: "REMEM Fig. 5c: checkpoint interval (512 processes, 64 I/O nodes)".into(),
                x_axis: "checkpoint interval".into(),
                groups: c,
            },
        ],
    })
}
