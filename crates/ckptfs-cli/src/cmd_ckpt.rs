//! `ckptfs ckpt begin|complete|list|show|delete|need`, `ckptfs alarm` and the restart
//! step of `ckptfs run --restart`: the CLI over `ckptfs-datasets`.

use crate::cmd_agent::human;
use crate::config::Ctx;
use crate::text::esc;
use anyhow::{Context, Result};
use ckptfs_datasets::{Config, Dataset, Datasets, State};
use std::path::PathBuf;

/// Arguments of `ckptfs ckpt`.
#[derive(clap::Args, Debug)]
pub struct CkptArgs {
    /// Drain destinations to look for PFS copies in [env CKPTFS_DEST].
    #[arg(long, value_name = "DIR[,DIR...]", value_delimiter = ',', global = true)]
    pub dest: Vec<PathBuf>,
    #[command(subcommand)]
    pub cmd: CkptCommand,
}

/// `ckptfs ckpt` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum CkptCommand {
    /// Begin a dataset (this rank's part); prints its id. Files written until
    /// `ckpt complete` belong to it.
    Begin {
        /// Dataset name.
        name: String,
    },
    /// Complete this rank's part of its open dataset (or of ID).
    Complete {
        /// The checkpoint is not usable (the application says so).
        #[arg(long)]
        invalid: bool,
        /// Dataset id [default: this rank's newest open dataset].
        #[arg(long)]
        id: Option<u64>,
    },
    /// List datasets: id, name, state, size, levels, age, and what will be evicted next.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One dataset with its files, parts and level decision.
    Show {
        /// Dataset id.
        id: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a dataset: its record and the local files still holding its content.
    Delete {
        /// Dataset id.
        id: u64,
    },
    /// Exit 0 when a checkpoint is due now (Young/Daly on the measured cost), 1 when not.
    Need {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Arguments of `ckptfs alarm`.
#[derive(clap::Args, Debug)]
pub struct AlarmArgs {
    /// Node the failure predictor warns about.
    pub node: String,
    /// Withdraw the alarm.
    #[arg(long)]
    pub clear: bool,
}

/// The datasets of this job in the resolved store.
pub fn open(ctx: &Ctx, dest: &[PathBuf]) -> Result<Datasets> {
    if ctx.store.private {
        anyhow::bail!("datasets need a shared node store (not --private)");
    }
    let mut cfg = Config::from_settings(&ctx.settings, &|k| std::env::var(k).ok())?;
    if !dest.is_empty() {
        cfg.dests = dest.to_vec();
    }
    let store = ckptfs_store::Store::open_or_create(&ctx.store)
        .with_context(|| format!("creating or attaching store {}", ctx.store.name))?;
    Ok(Datasets::single_node(store, cfg))
}

fn age(ns: u64) -> String {
    let now = ckptfs_settings::now_ns();
    let s = now.saturating_sub(ns) / 1_000_000_000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

fn list_json(d: &Dataset) -> serde_json::Value {
    serde_json::json!({
        "id": d.id,
        "name": d.name,
        "state": d.state.name(),
        "complete": d.state == State::Complete,
        "size": d.size(),
        "files": d.files.len(),
        "levels": d.levels(),
        "created_ns": d.created_ns,
        "closed_ns": d.closed_ns,
        "reason": d.reason,
        "evicted": d.evicted,
        "flush": d.flush,
        "decision": d.decision.as_ref().map(|x| x.level.clone()),
    })
}

/// `ckptfs ckpt ...`.
pub fn main(a: CkptArgs, ctx: &Ctx) -> Result<i32> {
    let ds = open(ctx, &a.dest)?;
    match a.cmd {
        CkptCommand::Begin { name } => {
            let id = ds.begin(&name, None)?;
            println!("{id}");
        }
        CkptCommand::Complete { invalid, id } => {
            let d = ds.complete(id, !invalid)?;
            eprintln!(
                "ckptfs ckpt: dataset {} ({}) {}{}",
                d.id,
                esc(&d.name),
                d.state.name(),
                d.reason
                    .as_ref()
                    .map(|r| format!(": {}", esc(r)))
                    .unwrap_or_default()
            );
        }
        CkptCommand::List { json } => {
            let (mut all, bad) = ds.list()?;
            for d in all.iter_mut() {
                ds.refresh_levels(d);
            }
            let evict = ds.next_evictions(&all);
            if json {
                let v = serde_json::json!({
                    "datasets": all.iter().map(list_json).collect::<Vec<_>>(),
                    "evicted_next": evict,
                    "bad_records": bad.iter().map(|(p, m)| serde_json::json!({"path": p, "error": m})).collect::<Vec<_>>(),
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!(
                    "{:>5}  {:<20} {:<10} {:>10} {:<12} {:>6}  note",
                    "ID", "NAME", "STATE", "SIZE", "LEVELS", "AGE"
                );
                for d in &all {
                    let mut note = d.reason.clone().unwrap_or_default();
                    if evict.contains(&d.id) {
                        note = "evicted from memory when the next dataset completes".into();
                    }
                    if let Some(dec) = &d.decision {
                        if note.is_empty() {
                            note = format!("policy: {}", dec.level);
                        }
                    }
                    let levels = d.levels().join(",");
                    println!(
                        "{:>5}  {:<20} {:<10} {:>10} {:<12} {:>6}  {}",
                        d.id,
                        esc(&d.name),
                        d.state.name(),
                        human(d.size()),
                        if levels.is_empty() { "-" } else { levels.as_str() },
                        age(d.closed_ns.unwrap_or(d.created_ns)),
                        esc(&note)
                    );
                }
                for (p, m) in &bad {
                    eprintln!("ckptfs ckpt: unreadable record {}: {}", esc(p), esc(m));
                }
            }
        }
        CkptCommand::Show { id, json } => {
            let mut d = ds.show(id)?;
            ds.refresh_levels(&mut d);
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                println!(
                    "dataset {} {} ({}), {} in {} files, levels {}",
                    d.id,
                    esc(&d.name),
                    d.state.name(),
                    human(d.size()),
                    d.files.len(),
                    d.levels().join(",")
                );
                if let Some(r) = &d.reason {
                    println!("reason: {}", esc(r));
                }
                for (rank, p) in &d.parts {
                    println!("part {}: {}", esc(rank), p.state.name());
                }
                for (path, f) in &d.files {
                    println!(
                        "  {} {} crc32c {:08x} [{}]",
                        esc(path),
                        f.size,
                        f.crc32c,
                        f.levels.join(",")
                    );
                }
                if let Some(dec) = &d.decision {
                    println!("decision: {} ({})", dec.level, esc(&dec.reason));
                    println!("inputs: {}", dec.input);
                }
            }
        }
        CkptCommand::Delete { id } => ds.delete(id)?,
        CkptCommand::Need { json } => {
            let n = ckptfs_datasets::policy::need(&ds)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&n)?);
            } else {
                println!("{}: {}", if n.due { "due" } else { "not due" }, n.reason);
            }
            return Ok(if n.due { 0 } else { 1 });
        }
    }
    Ok(0)
}

/// `ckptfs alarm NODE [--clear]`.
pub fn alarm(a: AlarmArgs, ctx: &Ctx) -> Result<i32> {
    let store = ckptfs_store::Store::open_or_create(&ctx.store)
        .with_context(|| format!("creating or attaching store {}", ctx.store.name))?;
    ckptfs_datasets::policy::set_alarm(&store, &a.node, !a.clear)?;
    Ok(0)
}

/// `ckptfs run --restart`: the name of the dataset restored, if any (reasons for the
/// ones skipped printed on stderr).
pub fn restart_before_run(ctx: &Ctx, dest: &[PathBuf]) -> Result<Option<String>> {
    let ds = open(ctx, dest)?;
    let r = ds.restart()?;
    for s in &r.skipped {
        eprintln!(
            "ckptfs run: skipping dataset {} ({}): {}",
            s.id,
            esc(&s.name),
            esc(&s.reason)
        );
    }
    match &r.chosen {
        Some(d) => {
            let bytes: u64 = r.restored.iter().map(|x| x.1).sum();
            eprintln!(
                "ckptfs run: restarting from dataset {} ({}), {} files brought back ({})",
                d.id,
                esc(&d.name),
                r.restored.len(),
                human(bytes)
            );
            Ok(Some(d.name.clone()))
        }
        None => {
            eprintln!("ckptfs run: no recoverable dataset; starting from scratch");
            Ok(None)
        }
    }
}
