//! `ckptfs agent --dest s3://bucket/prefix` and `ckptfs restore --dest s3://...`: the
//! object level (crates/ckptfs-object, docs/object.md) as drain destination and restore
//! source. Endpoint and credentials come from the `AWS_*` variables or the AWS files;
//! the level's settings from `CKPTFS_S3_*` (docs/object.md) and the flags below.

use crate::agent_args::{human, AgentArgs, DestArgs, RestoreArgs};
use crate::config::Ctx;
use crate::text::esc;
use anyhow::{Context, Result};
use ckptfs_object::drain::{drain_once, restore, DrainOptions};
use ckptfs_object::{ObjectConfig, ObjectLevel};
use ckptfs_store::Store;
use std::time::Duration;

/// The `s3://` URL when `--dest` names the object level (one destination).
pub fn s3_dest(d: &DestArgs) -> Option<String> {
    match d.dest.as_slice() {
        [one] => one
            .to_str()
            .filter(|s| ObjectConfig::is_url(s))
            .map(str::to_string),
        _ => None,
    }
}

/// Record which versions the bucket holds, for `ckptfs ls -l` and `status --json`
/// (`ckptfs_datasets::levels_record::ObjectLevels`). A failure only warns: the data
/// moved and the manifests say so.
fn record(store: &Store, obj: &ObjectLevel) {
    use ckptfs_level::Level;
    let held = match obj.list("/") {
        Ok(v) => v,
        Err(e) => return eprintln!("ckptfs: warning: levels record not updated: {e}"),
    };
    let mut r = ckptfs_datasets::levels_record::ObjectLevels::load(store);
    r.set(
        &obj.name(),
        held.into_iter()
            .map(|s| (s.path, s.version.size, s.version.mtime_ns)),
    );
    if let Err(e) = r.save(store) {
        eprintln!("ckptfs: warning: {e}");
    }
}

/// The level at `url`; where the settings' `[levels]` order lists it (`s3:BUCKET/PREFIX`),
/// with that entry's options (endpoint, compression, ...) over the environment, as the
/// restores and the restart open it.
fn open(url: &str, ctx: &Ctx) -> Result<ObjectLevel> {
    let env = |k: &str| match (k, &ctx.node_id) {
        ("CKPTFS_NODE_ID", Some(n)) => Some(n.clone()),
        _ => std::env::var(k).ok(),
    };
    let id = format!("s3:{}", url.trim_start_matches("s3://").trim_end_matches('/'));
    let listed = ctx.settings.levels.order.iter().find(|e| e.id() == id);
    let cfg = match (listed, ckptfs_level::LevelId::parse(&id)) {
        (Some(e), Some(lid)) => ckptfs_object::factory::ObjectFactory::config(&lid, &e.options, &env)?,
        _ => ObjectConfig::from_url(url, &env)?,
    };
    Ok(ObjectLevel::new(cfg)?)
}

/// With datasets configured (`dataset_flush_every` or `dataset_pattern` set), the
/// drain to the bucket takes only the datasets marked for flush, as the drain to a
/// directory does ([`crate::agent_args::use_dataset_policy`]): the dataset flush
/// policy's target is this level. Files outside datasets are all drained (`--every`
/// does not apply to the object level).
fn flush_policy(ctx: &Ctx, args: &AgentArgs) -> Result<Option<std::sync::Arc<ckptfs_datasets::FlushPolicy>>> {
    let ds = ckptfs_datasets::Config::from_settings(&ctx.settings, &|k| std::env::var(k).ok())?;
    if ds.flush_every == 0 && ds.pattern.is_none() {
        return Ok(None);
    }
    let fallback = ckptfs_agent::DrainPolicy {
        every: 1,
        evict: args.evict,
    };
    Ok(Some(std::sync::Arc::new(ckptfs_datasets::FlushPolicy::new(
        ctx.store.clone(),
        &ds.job,
        ds.pattern.clone(),
        fallback,
    ))))
}

/// `ckptfs agent --dest s3://...`: drain now (`--once`) or every `--interval` until
/// SIGTERM/SIGINT.
pub fn agent(url: &str, args: &AgentArgs, ctx: &Ctx) -> Result<i32> {
    let obj = open(url, ctx)?;
    let policy = flush_policy(ctx, args)?;
    if policy.is_some() {
        eprintln!("ckptfs agent: datasets configured: only datasets marked for flush are drained");
    }
    let select: Option<ckptfs_object::drain::Select> = policy.clone().map(|p| {
        let s: ckptfs_object::drain::Select = std::sync::Arc::new(move |f: &ckptfs_level::Stored| {
            use ckptfs_agent::mover::{Candidate, MovePolicy};
            let c = Candidate {
                path: &f.path,
                size: f.version.size,
                mtime_ns: f.version.mtime_ns,
                dir_ordinal: 0,
            };
            p.route(ckptfs_level::LevelKind::Local, &c).is_some()
        });
        s
    });
    let opt = DrainOptions {
        max_bw: args.max_bw.map(|m| m * 1e6),
        evict: args.evict,
        prefix: None,
        select,
    };
    let shutdown = ckptfs_runtime::Shutdown::on_signals(&[libc::SIGTERM, libc::SIGINT])?;
    let store = Store::attach(&ctx.store).context("attach the store")?;
    eprintln!(
        "ckptfs agent: store {} -> {} at {} (pid {})",
        store.name(),
        ckptfs_level::Level::name(&obj),
        obj.config().endpoint_display(),
        std::process::id()
    );
    loop {
        if let Some(p) = &policy {
            // The dataset records as they are now.
            ckptfs_agent::mover::MovePolicy::refresh(p.as_ref());
        }
        let rep = drain_once(&store, &obj, &opt)?;
        if rep.drained_files > 0 || rep.already_drained > 0 {
            record(&store, &obj);
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&rep)?);
        } else if rep.drained_files > 0 || !rep.failed.is_empty() || args.once {
            eprintln!(
                "ckptfs agent: drained {} files ({} -> {} in objects), {} already published, {} failed, {:.1} s{}",
                rep.drained_files,
                human(rep.drained_bytes),
                human(rep.object_bytes),
                rep.already_drained,
                rep.failed.len(),
                rep.seconds,
                if rep.aborted_uploads > 0 {
                    format!(", {} stale uploads aborted", rep.aborted_uploads)
                } else {
                    String::new()
                }
            );
            if rep.left > 0 {
                eprintln!(
                    "  {} files left in memory (datasets not marked for flush)",
                    rep.left
                );
            }
            for f in &rep.failed {
                eprintln!("  failed {}: {}", esc(&f.path), esc(&f.error));
            }
        }
        if args.once {
            return Ok(if rep.failed.is_empty() { 0 } else { 1 });
        }
        let until = std::time::Instant::now() + Duration::from_secs_f64(args.interval.max(0.01));
        while std::time::Instant::now() < until {
            if shutdown.is_triggered() {
                return Ok(0);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `ckptfs restore --dest s3://... [PATH]`.
pub fn restore_main(url: &str, args: &RestoreArgs, ctx: &Ctx) -> Result<i32> {
    let obj = open(url, ctx)?;
    let store = Store::open_or_create(&ctx.store).context("open the store")?;
    let rep = restore(&store, &obj, args.path.as_deref().unwrap_or("/"))?;
    record(&store, &obj);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        println!(
            "restored {} files ({}) from {}, {} already present, {} failed, {:.1} s",
            rep.restored_files,
            human(rep.restored_bytes),
            rep.level,
            rep.already_present,
            rep.failed.len(),
            rep.seconds
        );
        for f in &rep.failed {
            println!("  failed {}: {}", esc(&f.path), esc(&f.error));
        }
    }
    Ok(if rep.failed.is_empty() { 0 } else { 1 })
}
