//! `ckptfs ckpt begin|complete|list|show|delete|need`, `ckptfs alarm` and the restart
//! step of `ckptfs run --restart`: the CLI over `ckptfs-datasets`.

use crate::agent_args::human;
use crate::config::Ctx;
use crate::text::esc;
use anyhow::{Context, Result};
use ckptfs_datasets::protection::{self, PartnerCopies, Protection};
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
    // With --cluster and --node-id, completeness is job-wide: the other nodes' daemons
    // are asked (docs/datasets.md, "Across nodes").
    if let (Some(cluster), Some(node)) = (&ctx.cluster, &ctx.node_id) {
        cfg.node = node.clone();
        let timeout =
            ckptfs_settings::job::node_timeout(&|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?;
        let nodes = ckptfs_node::datasets::ClusterNodes::new(cluster.clone(), node, store.clone(), timeout)?;
        return Ok(Datasets::new(store, cfg, Box::new(nodes)));
    }
    Ok(Datasets::single_node(store, cfg))
}

fn job_json(d: &ckptfs_datasets::JobDataset, evict: &[u64], prot: Option<&Protection>) -> serde_json::Value {
    serde_json::json!({
        "id": d.id,
        "name": d.name,
        "state": d.state.name(),
        "complete": d.state == ckptfs_datasets::JobState::Complete,
        "reason": d.state.reason(),
        "size": d.size(),
        "files": d.parts.values().map(|p| p.files.len()).sum::<usize>(),
        "levels": d.levels(),
        "nodes": d.parts.keys().collect::<Vec<_>>(),
        "unreachable": d.unreachable,
        "created_ns": d.created_ns,
        "closed_ns": d.closed_ns,
        "evicted_next": evict.contains(&d.id),
        // This node's record's protection (the level policy's choice on this node).
        "protection": prot,
    })
}

/// `ckpt list` across the job's nodes.
fn list_job(ds: &Datasets, json: bool, ctx: &Ctx) -> Result<()> {
    let mut all = ds.job_list()?;
    // The levels the daemons report, with the read order's registry levels (object
    // storage, ...) that hold each node's files, by id.
    for d in all.iter_mut() {
        ds.refresh_job_levels(d);
    }
    let (local, _) = ds.list()?;
    let evict = ds.next_evictions(&local);
    let prune = ds.next_pfs_prunes(&local);
    let mode = ctx.protection_mode(PartnerCopies::of(ds.config()));
    let prot: std::collections::BTreeMap<u64, Protection> =
        local.iter().map(|d| (d.id, protection::of(d, mode))).collect();
    if json {
        let v = serde_json::json!({
            "node": ds.config().node,
            "datasets": all.iter().map(|d| job_json(d, &evict, prot.get(&d.id))).collect::<Vec<_>>(),
            "evicted_next": evict,
            "pfs_pruned_next": prune,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:>5}  {:<20} {:<10} {:>10} {:<18} {:>6}  note (job-wide)",
        "ID", "NAME", "STATE", "SIZE", "LEVELS", "AGE"
    );
    for d in &all {
        let mut note = d.state.reason().unwrap_or_default().to_string();
        if evict.contains(&d.id) {
            note = "evicted from memory when the next dataset completes".into();
        }
        if prune.contains(&d.id) {
            note = "removed from the PFS when the next dataset reaches it".into();
        }
        if !d.unreachable.is_empty() && note.is_empty() {
            note = format!("unreachable: {}", d.unreachable.join(","));
        }
        let levels = d.levels().join(",");
        println!(
            "{:>5}  {:<20} {:<10} {:>10} {:<18} {:>6}  {}",
            d.id,
            esc(&d.name),
            // A file no level holds: the dataset cannot be loaded whatever its verdict.
            shown_state(
                d.state.name(),
                false,
                d.parts
                    .values()
                    .flat_map(|p| p.files.values())
                    .any(|f| f.levels.is_empty()),
            ),
            human(d.size()),
            if levels.is_empty() { "-" } else { levels.as_str() },
            age(d.closed_ns.unwrap_or(d.created_ns)),
            esc(&note)
        );
    }
    Ok(())
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

fn list_json(d: &Dataset, mode: PartnerCopies) -> serde_json::Value {
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
        "pfs_pruned": d.pfs_pruned,
        "decision": d.decision.as_ref().map(|x| x.level.clone()),
        "protection": protection::of(d, mode),
    })
}

/// `ckptfs ckpt ...`.
pub fn main(a: CkptArgs, ctx: &Ctx) -> Result<i32> {
    let ds = match a.cmd {
        // Listings show every level of the settings' read order holding each file.
        CkptCommand::List { .. } | CkptCommand::Show { .. } => {
            open(ctx, &a.dest)?.with_levels(crate::levels::read_order(ctx)?)
        }
        _ => open(ctx, &a.dest)?,
    };
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
        CkptCommand::List { json } if ctx.cluster.is_some() && ctx.node_id.is_some() => {
            list_job(&ds, json, ctx)?
        }
        CkptCommand::List { json } => {
            let (mut all, bad) = ds.list()?;
            for d in all.iter_mut() {
                ds.refresh_levels(d);
            }
            let evict = ds.next_evictions(&all);
            let prune = ds.next_pfs_prunes(&all);
            let mode = ctx.protection_mode(PartnerCopies::of(ds.config()));
            if json {
                let v = serde_json::json!({
                    "datasets": all.iter().map(|d| list_json(d, mode)).collect::<Vec<_>>(),
                    "evicted_next": evict,
                    "pfs_pruned_next": prune,
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
                    if prune.contains(&d.id) {
                        note = "removed from the PFS when the next dataset reaches it".into();
                    }
                    if note.is_empty() && d.decision.is_some() {
                        note = policy_note(&protection::of(d, mode));
                    }
                    let levels = d.levels().join(",");
                    println!(
                        "{:>5}  {:<20} {:<10} {:>10} {:<12} {:>6}  {}",
                        d.id,
                        esc(&d.name),
                        shown_state(d.state.name(), d.evicted, levels.is_empty()),
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
    // Files lost from the store come back from the levels of the settings' read order
    // (`[levels]`: the drain destinations, object storage, ...), each CRC-checked.
    let ds = open(ctx, dest)?.with_levels(crate::levels::read_order(ctx)?);
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
            for (path, from) in &r.sources {
                if from != "local" {
                    eprintln!("ckptfs run:   {} from {}", esc(path), esc(from));
                }
            }
            if r.adopted {
                eprintln!(
                    "ckptfs run:   chosen by a faster rank in restart round {} (D9)",
                    r.round.unwrap_or(0)
                );
            }
            for path in &r.missing {
                eprintln!(
                    "ckptfs run:   {} is on no level any more (deleted after another rank resumed)",
                    esc(path)
                );
            }
            Ok(Some(d.name.clone()))
        }
        None => {
            eprintln!("ckptfs run: no recoverable dataset; starting from scratch");
            Ok(None)
        }
    }
}

/// Arguments of `ckptfs bench datasets`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Bytes of the checkpoint (this node's part).
    #[arg(long, default_value = "256M", value_parser = crate::config::parse_size)]
    pub size: u64,
    /// Files it is split into (ranks).
    #[arg(long, default_value_t = 2)]
    pub files: u32,
    /// Directory standing in for the PFS [default: a temporary directory].
    #[arg(long)]
    pub dest: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Two nodes on 127.0.0.1 (two `ckptfs node` daemons, one rank each): adds the
    /// partner level (close to "complete and copied to the partner") and restart from
    /// the partner's memory.
    #[arg(long)]
    pub partner: bool,
    /// With --partner: the first of 2 free TCP ports on 127.0.0.1 for the daemons.
    #[arg(long, default_value_t = 7490)]
    pub port: u16,
}

/// `ckptfs bench datasets`: from the last close to "dataset complete" (local) and to
/// "complete and on the PFS" (drain of its files), and restart time from each level.
pub fn bench(a: BenchArgs) -> Result<i32> {
    use std::time::Instant;
    let tmp = std::env::temp_dir().join(format!("ckptfs-bench-ds-{}", std::process::id()));
    let dest = a.dest.clone().unwrap_or_else(|| tmp.clone());
    std::fs::create_dir_all(&dest)?;
    let _tmp = TmpDir((a.dest.is_none()).then_some(tmp));
    if a.partner {
        let rows = crate::bench_datasets_partner::run(a.size, a.files, &dest, a.port)?;
        print_rows(&a, &dest, &rows)?;
        return Ok(0);
    }
    let name = format!("bench-ds-{}", std::process::id());
    let mut o = ckptfs_store::StoreOptions::named(&name);
    let chunk = 1u64 << 20;
    o.mem_size = Some((a.size + chunk * (u64::from(a.files) + 8)).next_multiple_of(chunk) + (8 << 20));
    o.chunk_size = Some(chunk);
    let store = ckptfs_store::Store::create(&o)?;
    let _cleanup = Cleanup(name.clone());
    let mut cfg = Config::for_job("bench");
    cfg.dests = vec![dest.clone()];
    let ds = Datasets::single_node(store.clone(), cfg);
    let per = a.size / u64::from(a.files.max(1));
    let buf: Vec<u8> = (0..(1u64 << 20)).map(|i| (i % 251) as u8).collect();
    ds.begin("bench", None)?;
    store.mkdir("/bench", 0o755)?;
    for r in 0..a.files.max(1) {
        let mut f = store.open(&format!("/bench/rank{r}"), ckptfs_store::OpenFlags::CREATE, 0o644)?;
        let mut left = per;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            f.write_all(&buf[..n])?;
            left -= n as u64;
        }
        f.close()?;
    }
    let t0 = Instant::now();
    let d = ds.complete(None, true)?;
    let local_s = t0.elapsed().as_secs_f64();
    let mut acfg = ckptfs_agent::AgentConfig::new(std::slice::from_ref(&dest));
    acfg.node_id = "bench".into();
    ckptfs_agent::Agent::new(&store, acfg)?.run_once()?;
    let pfs_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let r = ds.restart()?;
    let restart_local_s = t1.elapsed().as_secs_f64();
    anyhow::ensure!(
        r.chosen.is_some() && r.restored.is_empty(),
        "restart from memory failed"
    );
    for p in d.files.keys() {
        store.unlink(p)?;
    }
    let t2 = Instant::now();
    let r = ds.restart()?;
    let restart_pfs_s = t2.elapsed().as_secs_f64();
    anyhow::ensure!(
        r.restored.len() == d.files.len(),
        "restart from the PFS restored {} files",
        r.restored.len()
    );
    let rows = [
        ("complete, local", local_s),
        ("complete + on the PFS", pfs_s),
        ("restart from local", restart_local_s),
        ("restart from the PFS", restart_pfs_s),
    ];
    print_rows(&a, &dest, &rows)?;
    Ok(0)
}

fn print_rows(a: &BenchArgs, dest: &std::path::Path, rows: &[(&str, f64)]) -> Result<()> {
    let gib = a.size as f64 / f64::from(1u32 << 30);
    if a.json {
        let v: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(k, s)| (k.to_string(), serde_json::json!(s)))
            .collect();
        println!(
            "{}",
            serde_json::json!({"bytes": a.size, "files": a.files, "seconds": v})
        );
    } else {
        println!(
            "dataset of {} in {} files, PFS = {}",
            human(a.size),
            a.files,
            dest.display()
        );
        for (k, s) in rows {
            println!("  {k:<24} {s:>8.3} s   {:>8.2} GiB/s", gib / s.max(1e-9));
        }
        println!("  (complete combines the store's chunk CRC32Cs, no data read; restart verifies every CRC)");
    }
    Ok(())
}

struct Cleanup(String);

struct TmpDir(Option<PathBuf>);

impl Drop for TmpDir {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = ckptfs_store::Store::destroy(&self.0);
    }
}

/// The STATE column: a complete dataset whose files no level holds any more (evicted
/// from memory and never protected or flushed) is not shown as `complete`.
fn shown_state(state: &'static str, evicted: bool, no_level: bool) -> &'static str {
    match (state, evicted, no_level) {
        ("complete", true, true) => "evicted",
        ("complete", false, true) => "lost",
        _ => state,
    }
}

/// The note for a complete dataset's protection: node-local by the policy's choice
/// (`dataset_partner_copies = decision`, decided `local`) says so with the policy's
/// reason; otherwise the protection applied and the level the policy chose.
fn policy_note(p: &Protection) -> String {
    if p.node_local_by_choice {
        p.note.clone()
    } else {
        let level = p.policy.as_ref().map_or("-", |c| c.level.as_str());
        format!("protection: {} (policy: {level})", p.short)
    }
}

#[cfg(test)]
mod list_tests {
    use super::*;

    #[test]
    fn evicted_or_lost_datasets_are_not_shown_complete_and_local_choices_say_why() {
        assert_eq!(shown_state("complete", true, true), "evicted");
        assert_eq!(shown_state("complete", false, true), "lost");
        assert_eq!(shown_state("complete", true, false), "complete");
        assert_eq!(shown_state("open", false, true), "open");
        let p = |local: bool, mode| Protection {
            id: 1,
            name: "s".into(),
            job: "j".into(),
            state: "complete",
            chosen: vec!["local".into()],
            short: if local { "local" } else { "partner" }.into(),
            policy: Some(protection::PolicyChoice {
                level: "local".into(),
                reason: "local has the lowest expected overhead".into(),
            }),
            node_local_by_choice: local,
            partner_copies: mode,
            note: if local {
                "node-local by the policy's choice (dataset_partner_copies = decision): local has the lowest expected overhead".into()
            } else {
                String::new()
            },
        };
        let n = policy_note(&p(true, PartnerCopies::Decision));
        assert!(
            n.starts_with("node-local by the policy's choice") && n.contains("lowest expected"),
            "{n}"
        );
        assert_eq!(
            policy_note(&p(false, PartnerCopies::Complete)),
            "protection: partner (policy: local)"
        );
    }
}
