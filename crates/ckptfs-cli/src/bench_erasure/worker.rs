//! The part of `ckptfs bench erasure --links` that runs on a simulated node (inside its
//! network and mount namespaces, started through `nsenter` by module `nodes`): writes
//! the node's part, gives the leader a complete dataset record and waits until the set
//! protects it, waits for a partner copy, reads the daemon's counters and the store's
//! extra memory, rebuilds or restores a lost node's part. Prints one JSON line on stdout.

use anyhow::{bail, Context, Result};
use ckptfs_datasets::record::{Dataset, FileRec, NodePart, State};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The file each node's part is written to.
pub const PART_PATH: &str = "/bench/part";

/// Arguments of `ckptfs bench erasure-worker` (internal).
#[derive(clap::Args, Debug, Clone)]
pub struct EraWorkerArgs {
    /// `write`, `open`, `protect`, `copy`, `counters`, `rebuild`, `restore-peers`, `drain`,
    /// `restore-pfs`.
    #[arg(long)]
    pub mode: String,
    /// The node's store name.
    #[arg(long)]
    pub store: String,
    /// The node store's memory (bytes).
    #[arg(long)]
    pub mem: u64,
    /// Bytes of the part (`write`).
    #[arg(long, default_value_t = 0)]
    pub size: u64,
    /// Seed of the part's bytes (`write`).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Cluster file.
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// This node's id.
    #[arg(long)]
    pub node_id: Option<String>,
    /// The job whose dataset is protected (`protect`, `counters`).
    #[arg(long, default_value = "")]
    pub job: String,
    /// Dataset id (`protect`, `rebuild`, `counters`).
    #[arg(long, default_value_t = 0)]
    pub id: u64,
    /// Every node's part as `write` printed it, JSON `{node: {...}}` (`protect`).
    #[arg(long, default_value = "{}")]
    pub parts: String,
    /// PFS directory (`drain`, `restore-pfs`).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

fn open(a: &EraWorkerArgs) -> Result<Store> {
    Store::open_or_create(&StoreOptions {
        name: a.store.clone(),
        mem_size: Some(a.mem),
        ..Default::default()
    })
    .with_context(|| format!("open store {}", a.store))
}

fn cluster(a: &EraWorkerArgs) -> Result<(ckptfs_cluster::Cluster, String)> {
    let (Some(cf), Some(id)) = (&a.cluster, &a.node_id) else {
        bail!("{} needs --cluster and --node-id", a.mode);
    };
    let c = ckptfs_cluster::Cluster::load(cf).with_context(|| cf.display().to_string())?;
    Ok((c, id.clone()))
}

/// Run the worker; prints its JSON line.
pub fn worker(a: EraWorkerArgs) -> Result<()> {
    let out = match a.mode.as_str() {
        "write" => write(&a)?,
        "open" => {
            // An open dataset (id 0) begun before the part is written: the daemons hold
            // the part (no partner copy of a file that may belong to a dataset being
            // written), as the ckptfs Writer's records would make them.
            let mut ds = record(&a.job, 0, &serde_json::json!({}))?;
            ds.state = State::Open;
            ds.closed_ns = None;
            ds.node_done = false;
            ckptfs_datasets::record::save(&open(&a)?, &ds).context("save the open record")?;
            serde_json::json!({})
        }
        "protect" => protect(&a)?,
        "copy" => copy(&a)?,
        "counters" => counters(&a)?,
        "rebuild" => rebuild(&a)?,
        "restore-peers" => restore_peers(&a)?,
        "drain" => drain(&a)?,
        "restore-pfs" => restore_pfs(&a)?,
        m => bail!("unknown worker mode {m:?}"),
    };
    println!("{out}");
    Ok(())
}

/// Write the node's part (a new version: the old one unlinked) from a xorshift stream
/// of `seed`; its record.
fn write(a: &EraWorkerArgs) -> Result<serde_json::Value> {
    let store = open(a)?;
    if store.stat("/bench").is_err() {
        store.mkdir("/bench", 0o755).context("mkdir /bench")?;
    }
    let _ = store.unlink(PART_PATH);
    let mut f = store
        .open(PART_PATH, OpenFlags::CREATE, 0o644)
        .context("create the part")?;
    let mut x = a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut crc = 0u32;
    let mut left = a.size;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        for w in buf[..n].chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x.to_le_bytes();
            w.copy_from_slice(&b[..w.len()]);
        }
        crc = ckptfs_store::checksum::crc32c_append(crc, &buf[..n]);
        f.write_all(&buf[..n]).context("write the part")?;
        left -= n as u64;
    }
    f.close().context("close the part")?;
    let st = store.stat(PART_PATH).context("stat the part")?;
    Ok(serde_json::json!({ "size": a.size, "crc32c": crc, "mtime_ns": st.mtime_ns }))
}

fn record(job: &str, id: u64, parts: &serde_json::Value) -> Result<Dataset> {
    let mut nodes = BTreeMap::new();
    let map = parts.as_object().context("--parts: a JSON object")?;
    for (rank, (node, p)) in map.iter().enumerate() {
        let rec = FileRec {
            size: p["size"].as_u64().context("part size")?,
            crc32c: p["crc32c"].as_u64().context("part crc32c")? as u32,
            mtime_ns: p["mtime_ns"].as_u64().context("part mtime_ns")?,
            levels: vec!["local".into()],
        };
        nodes.insert(
            node.clone(),
            NodePart {
                ranks: vec![rank.to_string()],
                files: [(PART_PATH.to_string(), rec)].into(),
            },
        );
    }
    let now = ckptfs_settings::now_ns();
    Ok(Dataset {
        format: ckptfs_datasets::record::FORMAT.into(),
        id,
        name: format!("b{id}"),
        job: job.into(),
        state: State::Complete,
        reason: None,
        created_ns: now,
        closed_ns: Some(now),
        parts_expected: nodes.len() as u32,
        parts: BTreeMap::new(),
        dir: None,
        files: BTreeMap::new(),
        decision: None,
        flush: false,
        evicted: false,
        node: None,
        local_expected: None,
        node_done: true,
        nodes,
        pfs_pruned: false,
    })
}

/// The header of dataset `key` of set0 on this member: written on every member at the
/// commit, the leader's last (docs/erasure.md, "Encoding").
fn header_path(key: &str) -> String {
    format!("{}/header", ckptfs_erasure::dataset_dir(key, "set0"))
}

/// On the leader: save the complete dataset record, then wait until the leader holds
/// the dataset's header (the commit reached every member). Seconds from the save; and
/// the leader's own encode time from its status (it publishes every 0.5 s).
fn protect(a: &EraWorkerArgs) -> Result<serde_json::Value> {
    let store = open(a)?;
    let parts: serde_json::Value = serde_json::from_str(&a.parts).context("--parts")?;
    let ds = record(&a.job, a.id, &parts)?;
    let key = ckptfs_node::erasure::dataset_key(&a.job, a.id);
    let header = header_path(&key);
    let t = Instant::now();
    ckptfs_datasets::record::save(&store, &ds).context("save the dataset record")?;
    let deadline = t + Duration::from_secs(600);
    while store.stat(&header).is_err() {
        if Instant::now() > deadline {
            bail!("dataset {key} not protected after 600 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let wall = t.elapsed().as_secs_f64();
    let mut encode = None;
    for _ in 0..40 {
        let st = ckptfs_node::status(&a.store).and_then(|s| s.erasure);
        if let Some(d) = st.and_then(|e| e.datasets.get(&key).cloned()) {
            if d.state == "protected" {
                encode = d.seconds;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(serde_json::json!({ "protect_s": wall, "encode_s": encode }))
}

/// The partner-copy baseline on one node: prints `ready`, waits for a line on stdin,
/// then saves a complete dataset `id` listing this node's part (`--parts`: its record as
/// `write` printed it) and waits until the part's current version has a verified
/// partner copy. Prints the Unix time in seconds at which the copy was seen.
fn copy(a: &EraWorkerArgs) -> Result<serde_json::Value> {
    let store = open(a)?;
    let me: serde_json::Value = serde_json::from_str(&a.parts).context("--parts")?;
    let mut ds = record(&a.job, a.id, &serde_json::json!({}))?;
    ds.files = [(
        PART_PATH.to_string(),
        FileRec {
            size: me["size"].as_u64().context("part size")?,
            crc32c: me["crc32c"].as_u64().context("part crc32c")? as u32,
            mtime_ns: me["mtime_ns"].as_u64().context("part mtime_ns")?,
            levels: vec!["local".into()],
        },
    )]
    .into();
    ds.parts_expected = 1;
    println!("ready");
    std::io::stdout().flush()?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    ckptfs_datasets::record::save(&store, &ds).context("save the dataset record")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let st = store.stat(PART_PATH).context("stat the part")?;
        let levels = ckptfs_node::levels::Levels::load(&store);
        if !levels.partners_of(PART_PATH, &st).is_empty() {
            break;
        }
        if let Some(l) = levels.files.get(PART_PATH) {
            if l.identity == ckptfs_node::levels::Identity::of(&st) && !l.refused.is_empty() {
                bail!("no partner copy of the part: {:?}", l.refused);
            }
        }
        if Instant::now() > deadline {
            bail!("no partner copy of the part after 600 s");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(serde_json::json!({ "copied_unix_s": unix_s() }))
}

/// Seconds since the Unix epoch (one clock for every simulated node: one machine).
pub fn unix_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The daemon's bytes sent (erasure pieces, partner copies) and the bytes this node
/// keeps for the set or its partners: parity shards and header of dataset `id`, and
/// partner copies.
fn counters(a: &EraWorkerArgs) -> Result<serde_json::Value> {
    let store = open(a)?;
    let st = ckptfs_node::status(&a.store);
    let erasure_sent = st
        .as_ref()
        .and_then(|s| s.erasure.as_ref())
        .map(|e| e.bytes_sent)
        .unwrap_or(0);
    let copy_sent = st.as_ref().map(|s| s.bytes_sent).unwrap_or(0);
    let key = ckptfs_node::erasure::dataset_key(&a.job, a.id);
    let parity_dir = format!("{}/", ckptfs_erasure::dataset_dir(&key, "set0"));
    let (mut parity, mut partner) = (0u64, 0u64);
    for (p, s) in store.list_all_system() {
        if s.kind != ckptfs_store::FileKind::File {
            continue;
        }
        if p.starts_with(&parity_dir) {
            parity += s.size;
        } else if p.starts_with("/.ckptfs/partners/") {
            partner += s.size;
        }
    }
    Ok(serde_json::json!({
        "erasure_sent": erasure_sent,
        "copy_sent": copy_sent,
        "parity_bytes": parity,
        "partner_bytes": partner,
    }))
}

/// The node was lost: its store is gone; rebuild its part of dataset `id` from the set.
fn rebuild(a: &EraWorkerArgs) -> Result<serde_json::Value> {
    let (c, id) = cluster(a)?;
    let _ = Store::destroy(&a.store);
    let store = open(a)?;
    let key = ckptfs_node::erasure::dataset_key(&a.job, a.id);
    let t = Instant::now();
    let rep = ckptfs_node::rebuild_from_set(&c, &id, &store, Some(&key)).context("rebuild")?;
    let s = t.elapsed().as_secs_f64();
    if let Some((_, why)) = rep.failed.first() {
        bail!("rebuild of {key}: {why}");
    }
    let bytes = store.stat(PART_PATH).map(|st| st.size).unwrap_or(0);
    if bytes == 0 {
        bail!("rebuild of {key}: no part rebuilt ({:?})", rep.unreachable);
    }
    Ok(serde_json::json!({ "seconds": s, "bytes": bytes }))
}

/// The node was lost: its store is gone; restore its part from its partner's copy.
fn restore_peers(a: &EraWorkerArgs) -> Result<serde_json::Value> {
    let (c, id) = cluster(a)?;
    let _ = Store::destroy(&a.store);
    let store = open(a)?;
    let t = Instant::now();
    let rep =
        ckptfs_node::restore_from_peers_blocking(&c, &id, &store, "/bench").context("restore from peers")?;
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
    Ok(serde_json::json!({ "seconds": s, "bytes": bytes }))
}

fn pfs_dir(a: &EraWorkerArgs) -> Result<PathBuf> {
    a.dir.clone().context("--dir needed")
}

/// Drain the part to the PFS directory (`ckptfs agent --once`'s engine).
fn drain(a: &EraWorkerArgs) -> Result<serde_json::Value> {
    let store = open(a)?;
    let (_, id) = cluster(a)?;
    let mut cfg = ckptfs_agent::AgentConfig::new(&[pfs_dir(a)?]);
    cfg.node_id = id;
    cfg.priority = ckptfs_agent::sys::Priority::Normal;
    let t = Instant::now();
    let sum = ckptfs_agent::Agent::new(&store, cfg)?.run_once()?;
    if !sum.failed.is_empty() {
        bail!("drain: {:?}", sum.failed.first().map(|f| &f.error));
    }
    Ok(serde_json::json!({ "seconds": t.elapsed().as_secs_f64(), "bytes": sum.drained_bytes }))
}

/// The node was lost: its store is gone; restore its part from the drained copy.
fn restore_pfs(a: &EraWorkerArgs) -> Result<serde_json::Value> {
    let (_, id) = cluster(a)?;
    let _ = Store::destroy(&a.store);
    let store = open(a)?;
    let targets = ckptfs_agent::config::targets(&[pfs_dir(a)?], &[]);
    let t = Instant::now();
    let rep = ckptfs_agent::restore_nodes(&store, &targets, "/bench", &[id]).context("restore")?;
    let s = t.elapsed().as_secs_f64();
    if !rep.failed.is_empty() || rep.restored.is_empty() {
        bail!(
            "restore from the PFS: {} restored, {} failed ({:?})",
            rep.restored.len(),
            rep.failed.len(),
            rep.failed.first().map(|f| &f.error)
        );
    }
    let bytes: u64 = rep.restored.iter().map(|r| r.size).sum();
    Ok(serde_json::json!({ "seconds": s, "bytes": bytes }))
}
