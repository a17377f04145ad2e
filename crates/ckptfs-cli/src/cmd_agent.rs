//! `ckptfs agent`: the per-node drain daemon, `ckptfs agent status`, and `ckptfs
//! restore`.
//!
//! The agent runs in the foreground (start it in the job script with `&`, one per
//! node, and stop it with SIGTERM: the file in flight is abandoned safely and drained
//! by the next run). `--once` drains what is complete now and exits: 0 if everything
//! was published, 1 if some file failed. On a terminal the foreground agent and
//! `agent status --watch` draw a progress bar per file in flight.

use crate::agent_args::{human, use_dataset_policy, OnOff, PriorityArg};
pub use crate::agent_args::{AgentArgs, AgentCmd, DestArgs, RestoreArgs};
use crate::config::Ctx;
use crate::text::esc;
use anyhow::{Context, Result};
use ckptfs_agent::sys::Priority;
use ckptfs_agent::{Agent, AgentStatus};
use ckptfs_store::Store;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

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
    // `--dest`/`CKPTFS_DEST`, else the first persistent level of `[levels]`.
    let (dest, from_levels) = args.dest.or_levels(ctx)?;
    if let Some(id) = &from_levels {
        eprintln!("ckptfs agent: destination {id} from the settings' [levels] section");
    }
    if let Some(url) = crate::cmd_object::s3_dest(&dest) {
        return crate::cmd_object::agent(&url, &args, ctx);
    }
    let mut c = dest.config(ctx.node_id.as_deref())?;
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
