//! `ckptfs node`: the per-node daemon (partner copies out and in, heartbeats, the drain
//! to the PFS), `ckptfs node status`, and the multi-level restore used by `ckptfs
//! restore --from-peers` and `ckptfs run --restore`.

use crate::agent_args::{human, DestArgs};
use crate::config::Ctx;
use anyhow::{bail, Context, Result};
use ckptfs_node::{NodeConfig, NodeStatus};
use ckptfs_store::Store;
use serde::Serialize;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// `ckptfs node ...`: run this node's daemon.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct NodeArgs {
    /// `status`.
    #[command(subcommand)]
    pub cmd: Option<NodeCmd>,
    /// Also drain complete files to these PFS directories (the `ckptfs agent` engine
    /// with its defaults).
    #[command(flatten)]
    pub dest: DestArgs,
    /// Bandwidth cap of partner copies out, MB/s [setting daemon.max_bw, env
    /// CKPTFS_NODE_MAX_BW; default: none].
    #[arg(long, value_name = "MB/S")]
    pub max_bw: Option<f64>,
    /// Most memory this node gives to other nodes' copies: a size (K/M/G) or a share of
    /// the store's memory (`50%`, the default). Counted from the moment a copy begins;
    /// past it a partner answers ENOSPC and the source records "no partner copy"
    /// [setting daemon.partner_max, env CKPTFS_NODE_PARTNER_MAX].
    #[arg(long, value_name = "SIZE|N%")]
    pub partner_max: Option<String>,
    /// Seconds between scans of the store for files to copy [setting
    /// daemon.scan_interval, env CKPTFS_NODE_SCAN_INTERVAL; default 0.2]. Given here,
    /// also how often an erasure set's leader looks for complete datasets when that is
    /// shorter than its 0.5 s.
    #[arg(long, value_name = "SECONDS")]
    pub interval: Option<f64>,
    /// CPU and IO priority of partner copies (their own threads; heartbeats keep the
    /// daemon's): idle (nice 19, idle IO class), low (nice 10, the default, like the
    /// drain) or normal. Also setting `partner_priority` / CKPTFS_PARTNER_PRIORITY.
    #[arg(long, value_name = "idle|low|normal")]
    pub partner_priority: Option<String>,
    /// Copies out step back while an application writes into this node's store (a
    /// checkpoint being written goes at full speed; the copy of the previous one waits
    /// until the writes stop): the longest pause at a stretch, seconds. After it, copies
    /// take at least half the time even if the writes never stop. 0: never step back
    /// [setting daemon.writer_yield, env CKPTFS_NODE_WRITER_YIELD; default 1].
    #[arg(long, value_name = "SECONDS")]
    pub writer_yield: Option<f64>,
    /// Serve Prometheus metrics at http://ADDR/metrics (host:port; docs/metrics.md)
    /// [setting daemon.metrics, env CKPTFS_METRICS].
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics: Option<String>,
}

impl NodeArgs {
    /// The flags of the `[daemon]` settings (and `partner_priority`), by setting key.
    pub fn flag(&self, key: &str) -> Option<String> {
        match key {
            "daemon.max_bw" => self.max_bw.map(|v| v.to_string()),
            "daemon.partner_max" => self.partner_max.clone(),
            "daemon.scan_interval" => self.interval.map(|v| v.to_string()),
            "daemon.writer_yield" => self.writer_yield.map(|v| v.to_string()),
            "daemon.metrics" => self.metrics.clone(),
            "partner_priority" => self.partner_priority.clone(),
            _ => None,
        }
    }
}

/// Subcommands of `ckptfs node`.
#[derive(clap::Subcommand, Debug)]
pub enum NodeCmd {
    /// Show the daemon's peers (up/down), partners, copies sent/received, copy in flight.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Keep refreshing until the daemon exits.
        #[arg(long)]
        watch: bool,
    },
}

/// Entry point of `ckptfs node`.
pub fn main(args: NodeArgs, ctx: &Ctx) -> Result<i32> {
    if let Some(NodeCmd::Status { json, watch }) = args.cmd {
        return show_status(&ctx.store.effective_name()?, json, watch);
    }
    // The [daemon] settings: flags > env > settings file > defaults, as every setting.
    let settings = ctx.resolve_with_flags(&|k| args.flag(k))?;
    let d = &settings.daemon;
    let (cluster, node) = ctx.cluster_node().context("ckptfs node")?;
    let mut cfg = NodeConfig::new(cluster.clone(), node)?;
    cfg.store = ctx.store.clone();
    cfg.max_bw = d.max_bw;
    match d.partner_max {
        ckptfs_settings::PartnerMax::Bytes(b) => cfg.partner_limit = Some(b),
        ckptfs_settings::PartnerMax::Share(f) => cfg.partner_share = f,
    }
    cfg.scan_interval = Duration::from_secs_f64(d.scan_interval);
    cfg.writer_yield = Duration::from_secs_f64(d.writer_yield);
    let prio = settings
        .row("partner_priority")
        .map(|r| r.value.clone())
        .unwrap_or_default();
    cfg.partner_priority =
        ckptfs_node::parse_priority(&prio).context("setting partner_priority (--partner-priority)")?;
    // Partner copies follow the datasets (docs/datasets.md): every complete dataset is
    // copied (`complete`, the default), or only those the adaptive level policy decided
    // `partner` (`decision`); with no dataset record of the job every complete file is
    // copied, as without datasets. `all` copies every complete file at once.
    let dcfg = ckptfs_datasets::Config::from_settings(&ctx.settings, &|k| std::env::var(k).ok())
        .context("dataset settings")?;
    cfg.metrics = d.metrics.clone().map(|addr| ckptfs_node::MetricsConfig {
        addr,
        job: Some(dcfg.job.clone()),
    });
    // Erasure sets (issue 32, `--redundancy xor|rs:K`): the set's leader encodes every
    // complete dataset of the job, and complete datasets get no partner copies.
    cfg.erasure = ckptfs_node::ErasureConfig::of(cluster, node, &dcfg.job)?;
    if let (Some(e), Some(v)) = (cfg.erasure.as_mut(), args.interval) {
        e.every = e.every.min(Duration::from_secs_f64(v.max(0.01)));
    }
    if dcfg.partner_copies_follow_decision || cfg.erasure.is_some() {
        cfg.datasets = Some(std::sync::Arc::new(
            ckptfs_datasets::PartnerPolicy::new(ctx.store.clone(), &dcfg.job)
                .adaptive(dcfg.partner_copies_adaptive)
                .erasure(cfg.erasure.is_some()),
        ));
    }
    if !args.dest.dest.is_empty() {
        let mut d = args.dest.config(Some(node))?;
        crate::agent_args::use_dataset_policy(ctx, &mut d)?;
        cfg.drain = Some(d);
    }
    let shutdown = ckptfs_runtime::Shutdown::on_signals(&[libc::SIGTERM, libc::SIGINT])?;
    eprintln!(
        "ckptfs node: {node} store {} on {} (pid {})",
        ctx.store.name,
        cluster.node(node)?.addr,
        std::process::id()
    );
    // Only the binary knows about signals: the daemon stops when this future ends.
    let sum = ckptfs_node::run_blocking(cfg, ckptfs_node::daemon::when(move || shutdown.is_triggered()))?;
    eprintln!(
        "ckptfs node: stopped; {} copies sent, {} received, {} refused",
        sum.copies_sent, sum.copies_received, sum.copies_refused
    );
    Ok(0)
}

fn show_status(name: &str, json: bool, watch: bool) -> Result<i32> {
    loop {
        let Some(s) = ckptfs_node::status(name) else {
            bail!("no node daemon has run on store {name}");
        };
        if json {
            println!("{}", serde_json::to_string_pretty(&s)?);
        } else {
            if watch && std::io::stdout().is_terminal() {
                print!("\x1b[2J\x1b[H");
            }
            print_status(&s);
        }
        if !watch || !s.running {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The text form of a node daemon's status (also used by `ckptfs status`).
pub fn print_status(s: &NodeStatus) {
    let state = if s.running { "running" } else { "not running" };
    println!(
        "node: {} {state} (pid {}), listening on {}, partners {}{}",
        s.node,
        s.pid,
        s.listen,
        if s.partners.is_empty() {
            "none".to_string()
        } else {
            s.partners.join(", ")
        },
        if s.drain { ", drain to the PFS on" } else { "" }
    );
    for (id, p) in &s.peers {
        println!(
            "  peer {id:<12} {:<22} {:<4}{}",
            p.addr,
            if p.up { "up" } else { "down" },
            if p.partner { "  partner" } else { "" }
        );
    }
    println!(
        "  copies sent {} ({}), refused {}, changed during copy {}, chunks re-sent {}; received {} (chunks refused {}); priority {}; stepped back for writes {:.1} s",
        s.copies_sent,
        human(s.bytes_sent),
        s.copies_refused,
        s.changed_during_copy,
        s.chunks_resent,
        s.copies_received,
        s.chunks_refused,
        s.partner_priority,
        s.yielded_s
    );
    if s.pending_drops > 0 {
        println!(
            "  pending drops: {} copies of deleted or superseded versions still to be dropped on their holders",
            s.pending_drops
        );
    }
    if s.unprotected_files > 0 {
        println!(
            "  re-protection backlog: {} files ({}) with fewer partner copies than the plan asks{}",
            s.unprotected_files,
            human(s.unprotected_bytes),
            if s.copies_lost > 0 {
                format!(
                    "; {} copies found missing on their holders and being sent again",
                    s.copies_lost
                )
            } else {
                String::new()
            }
        );
    } else {
        println!("  every complete file has its partner copies (re-protection backlog 0)");
    }
    for f in &s.in_flight {
        println!(
            "  copying {} to {}: {} of {}",
            f.path,
            f.to,
            human(f.done),
            human(f.size)
        );
    }
    for (src, n) in &s.holding {
        println!("  holding {n} files of {src}");
    }
    if let Some(e) = &s.erasure {
        println!(
            "  {} ({}, members {}): {} sent, {} pieces refused",
            e.level,
            e.scheme,
            e.members.join(","),
            human(e.bytes_sent),
            e.pieces_refused
        );
        for (k, d) in &e.datasets {
            println!(
                "    dataset {k}: {} (epoch {:016x}){}{}",
                d.state,
                d.epoch,
                d.seconds
                    .map(|t| format!(", encoded in {t:.3} s"))
                    .unwrap_or_default(),
                d.detail.as_ref().map(|x| format!(": {x}")).unwrap_or_default()
            );
        }
    }
}

/// One file restored, and the level it came from.
#[derive(Debug, Clone, Serialize)]
pub struct RestoredFile {
    /// Store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// `partner`, `pfs`, or the id of a `[levels]` registry level (`s3:bucket/prefix`).
    pub level: String,
    /// Node id (partner), file (PFS) or level id it came from.
    pub from: String,
}

/// A file not restored.
#[derive(Debug, Clone, Serialize)]
pub struct NotRestored {
    /// Store path.
    pub path: String,
    /// Why.
    pub error: String,
}

/// What `ckptfs restore` / `ckptfs run --restore` did, over every level.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MultiLevelReport {
    /// Brought back, with the level each came from.
    pub restored: Vec<RestoredFile>,
    /// Already complete in the node store (the fastest level): kept.
    pub present: Vec<String>,
    /// Not restored from any level.
    pub failed: Vec<NotRestored>,
    /// Peers and levels that could not be asked.
    pub unreachable: Vec<String>,
    /// Drained files on the PFS that only other nodes' manifests list: left there
    /// (`--from-node ID` or `--all-nodes` takes them).
    pub skipped: Vec<ckptfs_agent::Skipped>,
    /// Seconds taken.
    pub seconds: f64,
}

impl MultiLevelReport {
    /// Print it (stdout for `ckptfs restore`; stderr with a prefix for `ckptfs run`).
    pub fn print(&self, prefix: &str) {
        use crate::text::esc;
        let out = |s: String| {
            if prefix.is_empty() {
                println!("{s}");
            } else {
                eprintln!("{prefix}{s}");
            }
        };
        for r in &self.restored {
            out(format!(
                "restored {} ({}) from {} ({})",
                esc(&r.path),
                human(r.size),
                esc(&r.from),
                match r.level.as_str() {
                    "partner" => "partner memory",
                    "erasure" => "rebuilt by its erasure set",
                    other => other,
                }
            ));
        }
        for p in &self.unreachable {
            out(format!("{} unreachable", esc(p)));
        }
        for s in &self.skipped {
            out(format!(
                "skipped {} (drained by node {}; --from-node {} restores it)",
                esc(&s.path),
                esc(&s.node),
                esc(&s.node)
            ));
        }
        let bytes: u64 = self.restored.iter().map(|r| r.size).sum();
        if prefix.is_empty() {
            // `ckptfs restore`
            for f in &self.failed {
                eprintln!("FAILED {}: {}", esc(&f.path), esc(&f.error));
            }
            println!(
                "{} restored, {} already in the store, {} other nodes' skipped, {} failed",
                self.restored.len(),
                self.present.len(),
                self.skipped.len(),
                self.failed.len()
            );
        } else {
            for f in &self.failed {
                eprintln!("{prefix}NOT restored {}: {}", esc(&f.path), esc(&f.error));
            }
            out(format!(
                "restored {} files ({}) in {:.1} s, {} already in the store, {} other nodes' skipped, {} failed",
                self.restored.len(),
                human(bytes),
                self.seconds,
                self.present.len(),
                self.skipped.len(),
                self.failed.len()
            ));
        }
    }
}

/// Restore `prefix` into `store`, walking `steps` (the settings' `[levels]` read order):
/// files the store holds are kept; at `Partner` (with `peers`), what is missing comes
/// from the partners' memory; at `Pfs` (with `pfs` given), from the drain destinations:
/// the files the manifests of `nodes` list (every node's with `None`), never another
/// node's files unless asked (a PFS directory shared by several nodes); at each registry
/// level of `order`, what it lists, through the mover (every chunk checked). A file one
/// step could not deliver counts as failed only if no later step brought it back.
pub fn multi_level_restore(
    store: &Store,
    ctx: &Ctx,
    prefix: &str,
    peers: bool,
    pfs: Option<&ckptfs_agent::AgentConfig>,
    nodes: Option<&[String]>,
    order: &ckptfs_level::ReadOrder,
) -> Result<MultiLevelReport> {
    use ckptfs_level::Step;
    let t0 = Instant::now();
    let mut rep = MultiLevelReport::default();
    // Files a step could not deliver, with why (failed unless a later step delivers).
    let mut pending: Vec<NotRestored> = Vec::new();
    for step in &order.steps {
        match step {
            Step::Local => {}
            // The set levels (partner copies, erasure sets, ...), in their order, each
            // asked for everything of this node's it protects; no kind named here.
            Step::Partner if peers => {
                let (cluster, node) = ctx.cluster_node().context("restore from peers")?;
                let timeout = ckptfs_settings::job::node_timeout(&|k| std::env::var(k).ok())
                    .map_err(anyhow::Error::msg)?;
                let into = ckptfs_store::level::StoreLevel::new(store).context("the store as a level")?;
                for level in ckptfs_node::set_levels(cluster, node, store, timeout)? {
                    if !order.reads_set_kind(&level.id().kind) {
                        continue;
                    }
                    let r = match level.recover_member(node, prefix, &into) {
                        Ok(r) => r,
                        // A scheme that recovers by dataset only has no step here.
                        Err(e) if e.errno() == libc::ENOTSUP => continue,
                        Err(e) => return Err(e).with_context(|| format!("restore from {}", level.id())),
                    };
                    for f in r.restored {
                        if !rep.restored.iter().any(|x| x.path == f.path) {
                            rep.restored.push(RestoredFile {
                                path: f.path,
                                size: f.size,
                                level: f.level.kind.clone(),
                                from: f.from,
                            });
                        }
                    }
                    for p in r.present {
                        if !rep.present.contains(&p) {
                            rep.present.push(p);
                        }
                    }
                    for n in &r.notes {
                        eprintln!("ckptfs: {}", crate::text::esc(n));
                    }
                    for (n, why) in r.unreachable {
                        let s = format!("peer {n} ({why})");
                        if !rep.unreachable.contains(&s) {
                            rep.unreachable.push(s);
                        }
                    }
                    pending.extend(
                        r.failed
                            .into_iter()
                            .map(|(path, error)| NotRestored { path, error }),
                    );
                }
            }
            Step::Pfs => {
                let Some(c) = pfs else { continue };
                let r = crate::agent_args::restore_into(store, c, prefix, nodes)?;
                let skipped: Vec<_> = r
                    .skipped
                    .into_iter()
                    .filter(|s| {
                        !rep.present.contains(&s.path) && !rep.restored.iter().any(|x| x.path == s.path)
                    })
                    .collect();
                rep.skipped.extend(skipped);
                rep.restored.extend(r.restored.into_iter().map(|f| RestoredFile {
                    path: f.path,
                    size: f.size,
                    level: "pfs".into(),
                    from: f.from.display().to_string(),
                }));
                for p in r.present {
                    if !rep.present.contains(&p) && !rep.restored.iter().any(|x| x.path == p) {
                        rep.present.push(p);
                    }
                }
                pending.extend(r.failed.into_iter().map(|f| NotRestored {
                    path: f.path,
                    error: f.error,
                }));
            }
            Step::Level(id) => {
                if let Some(level) = order.level(id) {
                    restore_from_level(store, level.as_ref(), prefix, &mut rep, &mut pending)?;
                }
            }
            Step::Partner => {}
        }
    }
    for f in pending {
        let got = rep.restored.iter().any(|r| r.path == f.path) || rep.present.contains(&f.path);
        if !got && !rep.failed.iter().any(|x| x.path == f.path) {
            rep.failed.push(f);
        }
    }
    // A file skipped on the PFS (another node's) that a later level brought back.
    let restored: Vec<String> = rep.restored.iter().map(|r| r.path.clone()).collect();
    rep.skipped.retain(|s| !restored.contains(&s.path));
    rep.seconds = t0.elapsed().as_secs_f64();
    Ok(rep)
}

/// One registry level's step of [`multi_level_restore`]: every file it lists under
/// `prefix` that no earlier step delivered and the store does not hold, copied into the
/// store by the mover (each chunk checked against the level's CRC32Cs; a damaged copy
/// publishes nothing and is left to the later steps, else reported failed).
fn restore_from_level(
    store: &Store,
    level: &dyn ckptfs_level::Level,
    prefix: &str,
    rep: &mut MultiLevelReport,
    pending: &mut Vec<NotRestored>,
) -> Result<()> {
    use ckptfs_level::Level;
    let id = level.id().to_string();
    let listed = match level.list(prefix) {
        Ok(v) => v,
        Err(e) => {
            rep.unreachable.push(format!("level {id} ({e})"));
            return Ok(());
        }
    };
    let local = ckptfs_store::level::StoreLevel::new(store).context("the store as a level")?;
    for f in listed {
        if rep.restored.iter().any(|r| r.path == f.path) || rep.present.contains(&f.path) {
            continue;
        }
        if matches!(local.stat(&f.path), Ok(Some(_))) {
            // A complete copy in the node store (the fastest level) is kept.
            rep.present.push(f.path);
            continue;
        }
        match ckptfs_level::copy(level, &local, &f.path) {
            Ok(t) => rep.restored.push(RestoredFile {
                path: f.path,
                size: t.bytes,
                level: id.clone(),
                from: id.clone(),
            }),
            Err(e) => pending.push(NotRestored {
                error: format!("from {id}: {e}"),
                path: f.path,
            }),
        }
    }
    Ok(())
}
