//! The store subcommands: init, status, ls, cat, put, get, rm, mkdir, fsck, destroy, config.

use crate::config::Ctx;
use crate::text::esc;
use anyhow::{Context, Result};
use ckptfs_store::{FileKind, OpenFlags, Stat, Store, StoreError, WriteState};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Files at least this large get a progress bar on a terminal.
const PROGRESS_MIN: u64 = 64 << 20;
const COPY_BLOCK: usize = 4 << 20;

pub(crate) fn attach(ctx: &Ctx) -> Result<Store> {
    Ok(Store::attach(&ctx.store)?)
}

/// What `dirty` means in `status`: a process died holding one of the store's locks
/// (SIGKILL, a crash), and the next process to take that lock repaired what it may have
/// left half-changed; the data of complete files is untouched. `fsck --repair` checks
/// everything and marks the store clean again.
fn dirty_explained(recoveries: u64) -> String {
    format!(
        "            dirty: {recoveries} time(s) a process died holding a store lock (killed or crashed mid-\
         update); the next locker repaired what it may have left half-changed, complete files are \
         untouched. Files being written then are `incomplete`. `ckptfs fsck --repair` checks the \
         whole store and marks it clean."
    )
}

fn human(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// UTC time "YYYY-MM-DD HH:MM:SS" from ns since the epoch.
pub(crate) fn time_str(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub(crate) fn mode_str(st: &Stat) -> String {
    let mut s = String::from(match st.kind {
        FileKind::Dir => "d",
        FileKind::Symlink => "l",
        FileKind::Fifo => "p",
        FileKind::Socket => "s",
        FileKind::CharDevice => "c",
        FileKind::BlockDevice => "b",
        FileKind::File => "-",
    });
    for shift in [6, 3, 0] {
        let b = (st.mode >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

pub(crate) fn state_str(s: WriteState) -> &'static str {
    match s {
        WriteState::Complete => "complete",
        WriteState::Writing => "writing",
        WriteState::Incomplete => "INCOMPLETE",
        WriteState::Failed => "FAILED",
    }
}

fn progress(len: u64, what: &str) -> Option<ProgressBar> {
    if len < PROGRESS_MIN || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    Some(pb)
}

pub fn init(ctx: &Ctx) -> Result<i32> {
    let store = Store::create(&ctx.store).map_err(|e| match e {
        StoreError::Exists(what) => anyhow::anyhow!("{what} already exists (`ckptfs destroy` removes it)"),
        e => e.into(),
    })?;
    let i = store.info();
    println!(
        "created store {} at {}: {} memory in {} chunks of {}, {} files max{}; huge pages {}; pre-faulted in {:.2} s",
        i.name,
        i.segment.display(),
        human(i.mem_size),
        i.mem_chunks,
        human(i.chunk_size),
        i.max_files,
        match &i.spill_path {
            Some(p) => format!(", spill {} at {}", human(i.spill_size), p.display()),
            None => String::new(),
        },
        if i.huge_pages.enabled { "yes" } else { "no" },
        i.create_seconds
    );
    Ok(0)
}

pub fn status(ctx: &Ctx, json: bool) -> Result<i32> {
    let store = attach(ctx)?;
    let i = store.info();
    let agent = ckptfs_agent::status(&i.name);
    let node = ckptfs_node::status(&i.name);
    if json {
        let mut v = serde_json::to_value(&i)?;
        v["agent"] = serde_json::to_value(&agent)?;
        v["node"] = serde_json::to_value(&node)?;
        // Per file: the levels holding it (local, partner nodes, PFS).
        let levels = ckptfs_node::LevelsView::load(&store);
        let files: serde_json::Map<String, serde_json::Value> = store
            .list_all()
            .into_iter()
            .filter(|(_, st)| st.kind == FileKind::File)
            .map(|(p, st)| {
                let w = serde_json::to_value(levels.of(&p, &st)).unwrap_or_default();
                (p, w)
            })
            .collect();
        v["levels"] = serde_json::Value::Object(files);
        // Per file of a dataset: the protection the dataset gets (the level policy's
        // choice as dataset_partner_copies applies it) and why.
        let prot = ckptfs_datasets::protection::FileProtections::load(&store, ctx.partner_copies());
        let files: serde_json::Map<String, serde_json::Value> = store
            .list_all()
            .into_iter()
            .filter(|(_, st)| st.kind == FileKind::File)
            .filter_map(|(p, st)| {
                let d = serde_json::to_value(prot.of(&p, &st)?).ok()?;
                Some((p, d))
            })
            .collect();
        v["protection"] = serde_json::Value::Object(files);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let used = (i.mem_chunks.saturating_sub(i.mem_free_chunks) as u64).saturating_mul(i.chunk_size);
    println!(
        "store       {} ({}), format v{}, {}",
        i.name,
        i.segment.display(),
        i.format_version,
        i.state
    );
    if i.state == "dirty" {
        println!("{}", dirty_explained(i.recoveries));
    }
    println!(
        "memory      {} used, {} free of {} ({} chunks of {})",
        human(used),
        human(i.mem_free_chunks as u64 * i.chunk_size),
        human(i.mem_size),
        i.mem_chunks,
        human(i.chunk_size)
    );
    match &i.spill_path {
        Some(p) => println!(
            "spill       {} used, {} free of {} at {}",
            human((i.spill_chunks.saturating_sub(i.spill_free_chunks) as u64).saturating_mul(i.chunk_size)),
            human(i.spill_free_chunks as u64 * i.chunk_size),
            human(i.spill_size),
            p.display()
        ),
        None => println!("spill       none"),
    }
    println!("huge pages  {}", i.huge_pages.describe());
    println!(
        "files       {} files, {} directories (max {}); {} being written, {} incomplete, {} unlinked but open",
        i.files, i.dirs, i.max_files, i.writing, i.incomplete, i.orphans
    );
    println!(
        "created     {} UTC by uid {}, pre-faulted in {:.2} s; {} lock recoveries",
        time_str(i.created_ns),
        i.creator_uid,
        i.create_seconds,
        i.recoveries
    );
    match &agent {
        Some(a) => crate::cmd_agent::print_status(a),
        None => println!("agent       none has run on this store"),
    }
    if let Some(n) = &node {
        crate::cmd_node::print_status(n);
    }
    if i.incomplete > 0 || i.failed > 0 {
        for (p, st) in store.list_all() {
            if st.state == WriteState::Incomplete {
                println!("incomplete  {} ({} bytes readable)", esc(&p), st.size);
            } else if st.state == WriteState::Failed {
                println!(
                    "failed      {} (a write to it failed; {} bytes)",
                    esc(&p),
                    st.size
                );
            }
        }
    }
    Ok(0)
}

pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Copy a store file into a writer, verifying every chunk first.
fn copy_out(store: &Store, path: &str, out: &mut dyn Write, label: &str) -> Result<u64> {
    let mut f = store
        .open(path, OpenFlags::READ, 0)
        .with_context(|| format!("open {path}"))?;
    if f.stat().state == WriteState::Incomplete {
        eprintln!(
            "ckptfs: warning: {} is incomplete (its writer died); copying the readable part",
            esc(path)
        );
    } else if f.stat().state == WriteState::Failed {
        eprintln!(
            "ckptfs: warning: {} is failed (a write to it failed); copying what it holds",
            esc(path)
        );
    }
    f.verify_all().with_context(|| format!("verifying {path}"))?;
    let pb = progress(f.size(), label);
    let mut buf = vec![0u8; COPY_BLOCK];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).with_context(|| format!("read {path}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        total += n as u64;
        if let Some(pb) = &pb {
            pb.set_position(total);
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    f.close()?;
    Ok(total)
}

pub fn cat(ctx: &Ctx, path: &str) -> Result<i32> {
    let store = attach(ctx)?;
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    match copy_out(&store, path, &mut lock, path) {
        Ok(_) => Ok(0),
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

pub fn get(ctx: &Ctx, src: &str, dst: &Path) -> Result<i32> {
    let store = attach(ctx)?;
    if dst == Path::new("-") {
        copy_out(&store, src, &mut std::io::stdout().lock(), src)?;
        return Ok(0);
    }
    let dst = if dst.is_dir() {
        let name = src
            .rsplit('/')
            .find(|s| !s.is_empty())
            .context("source has no file name")?;
        dst.join(name)
    } else {
        dst.to_path_buf()
    };
    // Write to a temporary name and rename, so a failed copy never leaves a
    // complete-looking file behind.
    let tmp = dst.with_file_name(format!(
        ".{}.ckptfs-get.{}",
        dst.file_name().and_then(|s| s.to_str()).unwrap_or("out"),
        std::process::id()
    ));
    let result = (|| -> Result<u64> {
        // A fresh file (O_EXCL, never through a link): dst may be in a shared directory
        // where another user could plant the temporary name first.
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .with_context(|| format!("create {}", tmp.display()))?;
        let n = copy_out(&store, src, &mut out, src)?;
        out.sync_all()?;
        std::fs::rename(&tmp, &dst).with_context(|| format!("rename to {}", dst.display()))?;
        Ok(n)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    let n = result?;
    eprintln!(
        "{} -> {} ({})",
        esc(src),
        esc(&dst.display().to_string()),
        human(n)
    );
    Ok(0)
}

fn mkdir_p(store: &Store, path: &str) -> Result<()> {
    let mut cur = String::new();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        cur.push('/');
        cur.push_str(c);
        match store.mkdir(&cur, 0o755) {
            Ok(_) | Err(StoreError::Exists(_)) => {}
            Err(e) => return Err(e).with_context(|| format!("mkdir {cur}")),
        }
    }
    Ok(())
}

pub fn put(ctx: &Ctx, src: &Path, dst: &str, parents: bool) -> Result<i32> {
    let store = Store::open_or_create(&ctx.store)?;
    let mut dst = dst.to_string();
    if let Ok(st) = store.stat(&dst) {
        if st.kind == FileKind::Dir {
            let name = src
                .file_name()
                .and_then(|s| s.to_str())
                .context("source has no file name")?;
            dst = join(&dst, name);
        }
    }
    if parents {
        if let Some((dir, _)) = dst.rsplit_once('/') {
            mkdir_p(&store, dir)?;
        }
    }
    let (mut input, len): (Box<dyn Read>, u64) = if src == Path::new("-") {
        (Box::new(std::io::stdin().lock()), 0)
    } else {
        let f = std::fs::File::open(src).with_context(|| format!("open {}", src.display()))?;
        let len = f.metadata()?.len();
        (Box::new(f), len)
    };
    let mode =
        std::fs::metadata(src).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    let mut f = store
        .open(&dst, OpenFlags::CREATE, mode.unwrap_or(0o644))
        .with_context(|| format!("create {dst} in store {}", store.name()))?;
    let pb = progress(len, &dst);
    let mut buf = vec![0u8; COPY_BLOCK];
    let mut total = 0u64;
    loop {
        let n = input
            .read(&mut buf)
            .with_context(|| format!("read {}", src.display()))?;
        if n == 0 {
            break;
        }
        f.write_all(&buf[..n]).with_context(|| format!("write {dst}"))?;
        total += n as u64;
        if let Some(pb) = &pb {
            pb.set_position(total);
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    f.close().with_context(|| format!("close {dst}"))?;
    eprintln!(
        "{} -> {} ({})",
        esc(&src.display().to_string()),
        esc(&dst),
        human(total)
    );
    Ok(0)
}

fn rm_tree(store: &Store, path: &str) -> Result<()> {
    for e in store.read_dir(path)? {
        let p = join(path, &e.name);
        if e.kind == FileKind::Dir {
            rm_tree(store, &p)?;
        } else {
            store.unlink(&p).with_context(|| format!("rm {p}"))?;
        }
    }
    store.rmdir(path).with_context(|| format!("rmdir {path}"))?;
    Ok(())
}

pub fn rm(ctx: &Ctx, paths: &[String], recursive: bool) -> Result<i32> {
    let store = attach(ctx)?;
    let mut failed = false;
    for p in paths {
        let r = match store.stat(p) {
            Ok(st) if st.kind == FileKind::Dir && recursive => rm_tree(&store, p),
            Ok(st) if st.kind == FileKind::Dir => Err(anyhow::anyhow!("{p} is a directory (use -r)")),
            Ok(_) => store.unlink(p).map_err(Into::into),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = r {
            eprintln!("ckptfs: rm {}: {}", esc(p), esc(&format!("{e:#}")));
            failed = true;
        }
    }
    Ok(i32::from(failed))
}

pub fn mkdir(ctx: &Ctx, path: &str, parents: bool) -> Result<i32> {
    let store = Store::open_or_create(&ctx.store)?;
    if parents {
        mkdir_p(&store, path)?;
    } else {
        store
            .mkdir(path, 0o755)
            .with_context(|| format!("mkdir {path}"))?;
    }
    Ok(0)
}

pub fn fsck(ctx: &Ctx, repair: bool, json: bool) -> Result<i32> {
    let store = attach(ctx)?;
    let rep = store.fsck(repair);
    if json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        println!(
            "checked {} files, {} chunks, {} verified",
            rep.files,
            rep.chunks,
            human(rep.bytes_verified)
        );
        for p in &rep.incomplete {
            println!("incomplete file (writer died): {}", esc(p));
        }
        for p in &rep.problems {
            println!(
                "{}: {}{}",
                p.kind,
                esc(&p.detail),
                if p.repaired { " [repaired]" } else { "" }
            );
        }
        if rep.problems.is_empty() {
            println!("no problems found");
        } else if !rep.is_clean() {
            println!(
                "{} problem(s) remain{}",
                rep.problems.iter().filter(|p| !p.repaired).count(),
                if repair { "" } else { "; run with --repair" }
            );
        }
    }
    Ok(if rep.is_clean() { 0 } else { 1 })
}

pub fn destroy(ctx: &Ctx, force: bool) -> Result<i32> {
    let name = ctx.store.effective_name()?;
    let dir = ctx.store.shm_dir.as_deref();
    if force {
        for u in Store::destroy_forced_in(dir, &name)? {
            eprintln!("ckptfs: destroyed while in use by {u}: it now gets ESTALE");
        }
    } else {
        Store::destroy_in(dir, &name)?;
    }
    // The state and lock files of the store's agent, node daemon and datasets, in the
    // caller's runtime directory.
    ckptfs_node::node_status::remove_store_files(&name);
    println!("destroyed store {name}");
    Ok(0)
}

pub fn config(ctx: &Ctx, json: bool) -> Result<i32> {
    if json {
        let rows: Vec<_> = ctx
            .table
            .iter()
            .map(|(k, v, s)| serde_json::json!({"key": k, "value": v, "source": s.as_str()}))
            .collect();
        let resolved: serde_json::Value = serde_json::from_str(&ctx.settings.to_json())?;
        // The [levels] section in read order with each level's options (never a
        // credential: the settings refuse option keys that would hold one).
        let levels: serde_json::Value = serde_json::from_str(&ctx.settings.levels.to_json())?;
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "config_file": ctx.config_file,
                "settings": rows,
                "resolved": resolved,
                "levels": levels,
            }))?
        );
        return Ok(0);
    }
    println!(
        "settings file: {}",
        ctx.config_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "none".into())
    );
    println!(
        "{:<12} {:<24} {:<8} {:<18} {:<14} meaning",
        "setting", "value", "source", "env", "flag"
    );
    for (s, (k, v, src)) in crate::config::SETTINGS.iter().zip(&ctx.table) {
        let src = src.as_str();
        let v = if v.is_empty() { "-" } else { v };
        println!(
            "{:<12} {:<24} {:<8} {:<18} {:<14} {}",
            k, v, src, s.env, s.flag, s.help
        );
    }
    for e in ctx.settings.levels.order.iter().filter(|e| !e.options.is_empty()) {
        let opts: Vec<String> = e.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("[levels.{:?}] {}", e.id(), opts.join(" "));
    }
    if ctx
        .table
        .iter()
        .any(|r| r.0 == "mem_size" && r.2 == crate::config::Source::Default)
    {
        println!("(settings at their default are not imposed on an existing store)");
    }
    Ok(0)
}

#[cfg(test)]
mod dirty_tests {
    #[test]
    fn status_explains_dirty_and_what_to_do() {
        let t = super::dirty_explained(2);
        assert!(t.contains("2 time(s) a process died holding a store lock"), "{t}");
        assert!(
            t.contains("mid-update") && t.contains("ckptfs fsck --repair"),
            "{t}"
        );
    }
}
