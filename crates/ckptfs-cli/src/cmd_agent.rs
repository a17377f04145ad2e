//! `ckptfs agent`: the per-node drain daemon, `ckptfs agent status`, and `ckptfs
//! restore`.
//!
//! The agent runs in the foreground (start it in the job script with `&`, one per
//! node, and stop it with SIGTERM: the file in flight is abandoned safely and drained
//! by the next run). `--once` drains what is complete now and exits: 0 if everything
//! was published, 1 if some file failed. On a terminal the foreground agent and
//! `agent status --watch` draw a progress bar per file in flight.

use crate::config::Ctx;
use crate::text::esc;
use anyhow::{bail, Context, Result};
use ckptfs_agent::config::targets;
use ckptfs_agent::sys::Priority;
use ckptfs_agent::{Agent, AgentConfig, AgentStatus};
use ckptfs_store::Store;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// Where drained files go and how this node picks its target.
#[derive(clap::Args, Debug, Clone)]
pub struct DestArgs {
    /// Destination directories (e.g. one per I/O server), comma-separated. A store file
    /// /a/b is published as DIR/a/b. Or one `s3://BUCKET/PREFIX`: the object level
    /// (docs/object.md; endpoint and keys from the AWS_* variables or ~/.aws).
    #[arg(long, value_name = "DIR[,DIR...]", value_delimiter = ',', env = "CKPTFS_DEST")]
    pub dest: Vec<PathBuf>,
    /// Lustre: the targets are these OSTs of each destination directory; files get one
    /// stripe on the chosen OST (needs `lfs`).
    #[arg(long, value_name = "I[,I...]", value_delimiter = ',')]
    pub ost: Vec<u32>,
    /// Mapping file of `NODE TARGET` lines (TARGET: 0-based index or a --dest DIR;
    /// `*` = default); unlisted nodes get a balanced assignment by node number.
    #[arg(long, value_name = "FILE")]
    pub map: Option<PathBuf>,
}

impl DestArgs {
    /// The drain settings; `node_id` is the global `--node-id` (placement and manifest
    /// names; default: the host name).
    pub(crate) fn config(&self, node_id: Option<&str>) -> Result<AgentConfig> {
        if self.dest.is_empty() {
            bail!("--dest DIR[,DIR...] is required");
        }
        if self.dest.iter().any(|d| d.to_string_lossy().starts_with("s3://")) {
            bail!(
                "an s3:// destination works with `ckptfs agent --dest` and `ckptfs restore --dest` \
                 (one destination, without --from-peers) for now: docs/object.md"
            );
        }
        let mut c = AgentConfig::new(&self.dest);
        c.targets = targets(&self.dest, &self.ost);
        if let Some(n) = node_id {
            c.node_id = n.to_string();
        }
        c.map_file = self.map.clone();
        Ok(c)
    }
}

/// When datasets are configured (`dataset_flush_every` or `dataset_pattern` set), the
/// drain flushes only the datasets marked for flush ([`ckptfs_datasets::FlushPolicy`];
/// files outside datasets follow `every`/`evict` as before). Used by `ckptfs agent` and
/// `ckptfs node --dest` (the node daemon's drain builds its agent from this config).
/// Returns whether the dataset policy is in use.
pub(crate) fn use_dataset_policy(ctx: &Ctx, c: &mut AgentConfig) -> Result<bool> {
    let ds = ckptfs_datasets::Config::from_settings(&ctx.settings, &|k| std::env::var(k).ok())?;
    if ds.flush_every == 0 && ds.pattern.is_none() {
        return Ok(false);
    }
    let fallback = ckptfs_agent::DrainPolicy::from_config(c);
    c.policy = Some(std::sync::Arc::new(ckptfs_datasets::FlushPolicy::new(
        ctx.store.clone(),
        &ds.job,
        ds.pattern.clone(),
        fallback,
    )));
    Ok(true)
}

/// Staged marshaling switch.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// CPU and IO priority of the agent.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorityArg {
    /// nice 10, best-effort IO at level 7.
    Low,
    /// nice 19, idle IO class.
    Idle,
    /// Unchanged.
    Normal,
}

/// `ckptfs agent ...`: drain complete files to the parallel file system.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AgentArgs {
    /// `status`.
    #[command(subcommand)]
    pub cmd: Option<AgentCmd>,
    /// Destination.
    #[command(flatten)]
    pub dest: DestArgs,
    /// Drain what is complete now, then exit (exit 1 if a file failed).
    #[arg(long)]
    pub once: bool,
    /// IO threads writing one file's blocks in parallel (1 = one sequential stream;
    /// more for O_DIRECT or a PFS).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub io_threads: usize,
    /// Bytes per write call (K/M/G).
    #[arg(long, value_name = "SIZE", default_value = "8M", value_parser = crate::config::parse_size)]
    pub write_size: u64,
    /// Write aligned blocks with O_DIRECT straight from the store's chunks.
    #[arg(long)]
    pub direct: bool,
    /// Bandwidth cap in MB/s.
    #[arg(long, value_name = "MB/S")]
    pub max_bw: Option<f64>,
    /// CPU and IO priority.
    #[arg(long, value_enum, default_value = "low")]
    pub priority: PriorityArg,
    /// Staged marshaling: one file flushed at a time per node, pipelined with staging
    /// the next (off: every queued file is flushed at once, one thread each).
    #[arg(long, value_enum, default_value = "on")]
    pub marshal: OnOff,
    /// Drain only every Nth checkpoint directory (in creation order). With datasets
    /// configured (`dataset_flush_every` or `dataset_pattern` set), a dataset's files are
    /// drained only when the dataset is complete and marked for flush; this applies to
    /// files outside every dataset.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub every: u32,
    /// Free the memory copy after a verified drain.
    #[arg(long)]
    pub evict: bool,
    /// Seconds between scans for new complete files.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.5)]
    pub interval: f64,
    /// Print the summary (with --once) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (host:port; docs/metrics.md).
    #[arg(long, value_name = "HOST:PORT", env = "CKPTFS_AGENT_METRICS")]
    pub metrics: Option<String>,
}

/// Subcommands of `ckptfs agent`.
#[derive(clap::Subcommand, Debug)]
pub enum AgentCmd {
    /// Show queued, in-flight, drained and failed files of the store's agent.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Keep refreshing (progress bars) until the agent exits.
        #[arg(long)]
        watch: bool,
    },
}

/// `ckptfs restore [PATH]`: bring drained files back into the store.
#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// Store path (file or directory) to restore [default: everything].
    pub path: Option<String>,
    /// Destination the files were drained to.
    #[command(flatten)]
    pub dest: DestArgs,
    /// First from the partners' memory (needs --cluster and --node-id; the daemons of
    /// the partner nodes must run), then from --dest, if given, for the rest.
    #[arg(long)]
    pub from_peers: bool,
    /// From the PFS, also take the files node ID drained (repeatable; by default only
    /// this node's own, --node-id, are restored: nodes sharing a PFS directory each
    /// restore theirs).
    #[arg(long = "from-node", value_name = "ID")]
    pub from_node: Vec<String>,
    /// From the PFS, take the files every node drained there.
    #[arg(long, conflicts_with = "from_node")]
    pub all_nodes: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The agent's metrics server (docs/metrics.md): the store, its files per level, the
/// job's datasets, the drain.
fn agent_metrics(ctx: &Ctx, store: &Store, addr: &str) -> Result<ckptfs_metrics::Server> {
    let job = ckptfs_datasets::Config::from_settings(&ctx.settings, &|k| std::env::var(k).ok())
        .context("dataset settings")?
        .job;
    let store = store.clone();
    let server = ckptfs_metrics::Server::start(
        addr,
        std::sync::Arc::new(move || {
            let mut e = ckptfs_metrics::Exposition::new();
            ckptfs_metrics::collect::store(&mut e, &store)?;
            ckptfs_metrics::collect::levels(&mut e, &store, &|_, _, _| false)?;
            ckptfs_metrics::collect::datasets(&mut e, &store, &job)?;
            ckptfs_metrics::collect::drain(&mut e, store.name())?;
            Ok(e.finish())
        }),
    )
    .context("--metrics")?;
    eprintln!("ckptfs agent: metrics on http://{}/metrics", server.local_addr());
    Ok(server)
}

/// Entry point of `ckptfs agent`.
pub fn main(args: AgentArgs, ctx: &Ctx) -> Result<i32> {
    let name = ctx.store.effective_name()?;
    if let Some(AgentCmd::Status { json, watch }) = args.cmd {
        return show_status(&name, json, watch);
    }
    if let Some(url) = crate::cmd_object::s3_dest(&args.dest) {
        return crate::cmd_object::agent(&url, &args, ctx);
    }
    let mut c = args.dest.config(ctx.node_id.as_deref())?;
    c.io_threads = args.io_threads;
    c.write_size = args.write_size as usize;
    c.direct = args.direct;
    c.max_bw = args.max_bw.map(|m| m * 1e6);
    c.priority = match args.priority {
        PriorityArg::Low => Priority::Low,
        PriorityArg::Idle => Priority::Idle,
        PriorityArg::Normal => Priority::Normal,
    };
    c.marshal = args.marshal == OnOff::On;
    c.every = args.every;
    c.evict = args.evict;
    c.interval = Duration::from_secs_f64(args.interval.max(0.01));
    if use_dataset_policy(ctx, &mut c)? {
        eprintln!("ckptfs agent: datasets configured: only datasets marked for flush are drained");
    }
    // Only the binary installs signal handlers; the agent gets the trigger.
    let shutdown = ckptfs_runtime::Shutdown::on_signals(&[libc::SIGTERM, libc::SIGINT])?;
    let store = loop {
        match Store::attach(&ctx.store) {
            Ok(s) => break s,
            Err(e) if args.once => return Err(e).context("attach the store"),
            Err(_) if shutdown.is_triggered() => return Ok(0),
            // A daemon may start before the application creates the store.
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let agent = Agent::new(&store, c)?;
    let _metrics = match &args.metrics {
        Some(addr) => Some(agent_metrics(ctx, &store, addr)?),
        None => None,
    };
    eprintln!(
        "ckptfs agent: store {name} -> {} (pid {})",
        agent.target(),
        std::process::id()
    );
    let sum = if std::io::stderr().is_terminal() && !args.json {
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                progress(&|| Some(agent.status()), &|| {
                    done.load(std::sync::atomic::Ordering::SeqCst)
                })
            });
            let r = if args.once {
                agent.run_once_until(&shutdown)
            } else {
                agent.run(&shutdown)
            };
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        })?
    } else if args.once {
        agent.run_once_until(&shutdown)?
    } else {
        agent.run(&shutdown)?
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&sum)?);
    } else {
        eprintln!(
            "ckptfs agent: drained {} files ({}), {} already published, {} failed, {:.1} s",
            sum.drained_files,
            human(sum.drained_bytes),
            sum.already_drained,
            sum.failed.len(),
            sum.seconds
        );
        for f in &sum.failed {
            eprintln!("  failed {}: {}", esc(&f.path), esc(&f.error));
        }
    }
    Ok(if sum.failed.is_empty() { 0 } else { 1 })
}

/// Entry point of `ckptfs restore`: with `--from-peers`, the partners' memory first,
/// then the PFS (`--dest`) for what no partner holds.
pub fn restore_main(args: RestoreArgs, ctx: &Ctx) -> Result<i32> {
    if let Some(url) = crate::cmd_object::s3_dest(&args.dest).filter(|_| !args.from_peers) {
        return crate::cmd_object::restore_main(&url, &args, ctx);
    }
    // The settings' read order (`[levels]`); `--from-peers` and `--dest` are asked for
    // explicitly: read even where the order does not list them (partners second, the
    // drain destinations after the listed levels). Without `--dest`, the registry's
    // levels may be all there is to read.
    let mut order = crate::levels::read_order(ctx)?;
    let pfs = if args.dest.dest.is_empty() && (args.from_peers || !order.registry.levels().is_empty()) {
        None
    } else {
        Some(args.dest.config(ctx.node_id.as_deref())?)
    };
    let store = Store::open_or_create(&ctx.store).context("open the store")?;
    let prefix = args.path.as_deref().unwrap_or("/");
    let nodes = pfs.as_ref().filter(|_| !args.all_nodes).map(|c| {
        let mut n = vec![c.node_id.clone()];
        n.extend(args.from_node.iter().filter(|x| **x != c.node_id).cloned());
        n
    });
    use ckptfs_level::Step;
    if args.from_peers && !order.reads(&Step::Partner) {
        order.steps.insert(1.min(order.steps.len()), Step::Partner);
    }
    if pfs.is_some() && !order.reads(&Step::Pfs) {
        order.steps.push(Step::Pfs);
    }
    let rep = crate::cmd_node::multi_level_restore(
        &store,
        ctx,
        prefix,
        args.from_peers,
        pfs.as_ref(),
        nodes.as_deref(),
        &order,
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        rep.print("");
    }
    Ok(if rep.failed.is_empty() { 0 } else { 1 })
}

/// Restore the drained files under `prefix` into `store`, searching this node's target
/// first, then the others (`ckptfs restore`, `ckptfs run --restore`): the files the
/// manifests of `nodes` list (every node's with `None`).
pub(crate) fn restore_into(
    store: &Store,
    c: &AgentConfig,
    prefix: &str,
    nodes: Option<&[String]>,
) -> Result<ckptfs_agent::RestoreReport> {
    let mine = c.target()?.clone();
    let mut order = vec![mine.clone()];
    order.extend(c.targets.iter().filter(|t| **t != mine).cloned());
    Ok(match nodes {
        Some(n) => ckptfs_agent::restore_nodes(store, &order, prefix, n)?,
        None => ckptfs_agent::restore(store, &order, prefix)?,
    })
}

pub(crate) fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// The text form of an agent's status (also used by `ckptfs status`).
pub fn print_status(s: &AgentStatus) {
    let state = if s.running { "running" } else { "not running" };
    println!(
        "agent: {state} (pid {}, {}), node {} -> {}",
        s.pid, s.mode, s.node, s.target
    );
    println!(
        "  marshal {}, {} IO threads{}{}",
        if s.marshal { "on" } else { "off" },
        s.io_threads,
        if s.direct { ", O_DIRECT" } else { "" },
        s.max_bw_mbps
            .map(|m| format!(", cap {m} MB/s"))
            .unwrap_or_default()
    );
    println!(
        "  drained: {} files, {} ({:.0} MB/s); already published at start: {}",
        s.drained_files,
        human(s.drained_bytes),
        s.bandwidth_mbps,
        s.already_drained
    );
    // The levels' costs as measured from this agent's transfers (ckptfs-level).
    let costs: Vec<String> = s
        .levels
        .iter()
        .flat_map(|l| {
            let get = l
                .get_bps
                .map(|b| format!("{} get {:.0} MB/s ({} files)", l.level, b / 1e6, l.gets));
            let put = l
                .put_bps
                .map(|b| format!("{} put {:.0} MB/s ({} files)", l.level, b / 1e6, l.puts));
            get.into_iter().chain(put)
        })
        .collect();
    if !costs.is_empty() {
        println!("  measured: {}", costs.join(", "));
    }
    println!(
        "  queued: {}   in flight: {}   failed: {}   skipped by --every: {}",
        s.queued.len(),
        s.in_flight.len(),
        s.failed.len(),
        s.skipped_by_policy
    );
    for q in &s.queued {
        println!("    queued     {} ({})", esc(&q.path), human(q.size));
    }
    for f in &s.in_flight {
        let pct = (f.done * 100).checked_div(f.size).unwrap_or(100);
        println!("    in flight  {} ({}, {pct}%)", esc(&f.path), human(f.size));
    }
    for f in &s.failed {
        let retry = if f.will_retry { ", will retry" } else { "" };
        println!(
            "    FAILED     {} (attempts {}{retry}): {}",
            esc(&f.path),
            f.attempts,
            esc(&f.error)
        );
    }
}

fn show_status(name: &str, json: bool, watch: bool) -> Result<i32> {
    let Some(s) = ckptfs_agent::status(name) else {
        if json {
            println!("null");
        } else {
            println!("no agent has run for store {name}");
        }
        return Ok(1);
    };
    if watch && std::io::stdout().is_terminal() && !json {
        progress(&|| ckptfs_agent::status(name), &|| {
            !ckptfs_agent::status(name).is_some_and(|s| s.running)
        });
    }
    let s = ckptfs_agent::status(name).unwrap_or(s);
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print_status(&s);
    }
    Ok(0)
}

/// Progress bars per in-flight file, refreshed until `stop()`.
fn progress(get: &dyn Fn() -> Option<AgentStatus>, stop: &dyn Fn() -> bool) {
    use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
    let mp = MultiProgress::new();
    let style = ProgressStyle::with_template("{msg:40!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let total = mp.add(ProgressBar::new_spinner());
    let mut bars: HashMap<String, ProgressBar> = HashMap::new();
    while !stop() {
        if let Some(s) = get() {
            total.set_message(format!(
                "drained {} ({}), queued {}, failed {}",
                s.drained_files,
                human(s.drained_bytes),
                s.queued.len(),
                s.failed.len()
            ));
            total.tick();
            for f in &s.in_flight {
                let b = bars.entry(f.path.clone()).or_insert_with(|| {
                    let b = mp.add(ProgressBar::new(f.size));
                    b.set_style(style.clone());
                    b.set_message(esc(&f.path).into_owned());
                    b
                });
                b.set_position(f.done);
            }
            bars.retain(|p, b| {
                let keep = s.in_flight.iter().any(|f| &f.path == p);
                if !keep {
                    b.finish_and_clear();
                }
                keep
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for b in bars.values() {
        b.finish_and_clear();
    }
    total.finish_and_clear();
}
