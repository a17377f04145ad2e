//! The part of `ckptfs bench partner` that runs on a simulated node (inside its network
//! and mount namespaces, started through `nsenter` by the orchestrator in
//! [`super`]): writes checkpoints into the node's store and times them open to
//! close, waits for their partner copies to be verified, or restores from the partners.
//! It prints one JSON line on stdout.

use anyhow::{bail, Context, Result};
use ckptfs_store::{Store, StoreOptions};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `ckptfs bench partner-worker` (internal).
#[derive(clap::Args, Debug, Clone)]
pub struct WorkerArgs {
    /// `write`, `wait` (until `/ckpt/f0..` of `--files` have verified copies) or
    /// `restore`.
    #[arg(long)]
    pub mode: String,
    /// The node's store name.
    #[arg(long)]
    pub store: String,
    /// The node store's memory (bytes).
    #[arg(long)]
    pub mem: u64,
    /// Bytes per file.
    #[arg(long, default_value_t = 1 << 30)]
    pub size: u64,
    /// Files written one after the other (`/ckpt/f0`, `/ckpt/f1`, ...).
    #[arg(long, default_value_t = 1)]
    pub files: usize,
    /// Wait until every file has a verified partner copy (`write`).
    #[arg(long)]
    pub wait_copy: bool,
    /// Cluster file (`restore`).
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// This node's id (`restore`).
    #[arg(long)]
    pub node_id: Option<String>,
}

fn open(a: &WorkerArgs) -> Result<Store> {
    Store::open_or_create(&StoreOptions {
        name: a.store.clone(),
        mem_size: Some(a.mem),
        // The directory the bench's daemons use too (they read the same variable).
        shm_dir: std::env::var_os("CKPTFS_SHM_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        ..Default::default()
    })
    .with_context(|| format!("open store {}", a.store))
}

/// Run the worker; prints its JSON line.
pub fn worker(a: WorkerArgs) -> Result<()> {
    let out = match a.mode.as_str() {
        "write" => write(&a)?,
        "wait" => {
            let store = open(&a)?;
            let now = Instant::now();
            let files: Vec<_> = (0..a.files).map(|i| (format!("/ckpt/f{i}"), now)).collect();
            serde_json::json!({ "copy_s": wait_copies(&store, &files)? })
        }
        "restore" => restore(&a)?,
        m => bail!("unknown worker mode {m:?}"),
    };
    println!("{out}");
    Ok(())
}

fn write(a: &WorkerArgs) -> Result<serde_json::Value> {
    let store = open(a)?;
    if store.stat("/ckpt").is_err() {
        store.mkdir("/ckpt", 0o755).context("mkdir /ckpt")?;
    }
    let block = ckptfs_bench::store::pattern(16 << 20);
    let mut write_s = Vec::new();
    let mut closed = Vec::new();
    for i in 0..a.files {
        let path = format!("/ckpt/f{i}");
        // A new version each time (the partner drops or replaces its old copy).
        let _ = store.unlink(&path);
        let t = Instant::now();
        ckptfs_bench::store::write_file(&store, &path, a.size, &block)?;
        write_s.push(t.elapsed().as_secs_f64());
        closed.push((path, Instant::now()));
    }
    let copy_s = if a.wait_copy {
        wait_copies(&store, &closed)?
    } else {
        Vec::new()
    };
    Ok(serde_json::json!({ "write_s": write_s, "copy_s": copy_s }))
}

/// Wait until each file's current version has a verified partner copy; seconds from
/// each one's given instant (its close) to that.
fn wait_copies(store: &Store, closed: &[(String, Instant)]) -> Result<Vec<f64>> {
    let mut copy_s = Vec::new();
    // Poll the daemon's levels record (in this process: no command start-up in the
    // measured time) until each file's current version has a verified copy.
    let deadline = Instant::now() + Duration::from_secs(3600);
    for (path, t_close) in closed {
        loop {
            let st = store.stat(path).with_context(|| format!("stat {path}"))?;
            let levels = ckptfs_node::levels::Levels::load(store);
            if !levels.partners_of(path, &st).is_empty() {
                copy_s.push(t_close.elapsed().as_secs_f64());
                break;
            }
            // A partner that refused (ENOSPC) will not get it: say so, do not wait.
            if let Some(l) = levels.files.get(path) {
                if l.identity == ckptfs_node::levels::Identity::of(&st) && !l.refused.is_empty() {
                    bail!("no partner copy of {path}: {:?}", l.refused);
                }
            }
            if Instant::now() > deadline {
                bail!("no partner copy of {path} after an hour");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    Ok(copy_s)
}

fn restore(a: &WorkerArgs) -> Result<serde_json::Value> {
    let (Some(cf), Some(id)) = (&a.cluster, &a.node_id) else {
        bail!("restore needs --cluster and --node-id");
    };
    let cluster = ckptfs_cluster::Cluster::load(cf).with_context(|| cf.display().to_string())?;
    // The node was lost: its store is gone, the replacement starts empty.
    let _ = Store::destroy(&a.store);
    let store = open(a)?;
    let t = Instant::now();
    let rep = ckptfs_node::restore_from_peers_blocking(&cluster, id, &store, "/ckpt")
        .context("restore from peers")?;
    let s = t.elapsed().as_secs_f64();
    if !rep.failed.is_empty() || rep.restored.is_empty() {
        bail!(
            "restore: {} restored, {} failed ({:?})",
            rep.restored.len(),
            rep.failed.len(),
            rep.failed.first().map(|f| &f.error)
        );
    }
    let bytes: u64 = rep.restored.iter().map(|r| r.size).sum();
    Ok(serde_json::json!({ "restore_s": s, "bytes": bytes, "files": rep.restored.len() }))
}
