//! The daemon path of `ckptfs bench erasure --daemons`: `n` node daemons in this
//! process on 127.0.0.1 (each its own store), one erasure set over them; each member's
//! part written, a complete dataset record given to the leader, and the time until the
//! set protects it (the leader's encode time: parts, plan, ring or gather, commit), the
//! bytes each daemon sent, and the time to rebuild one lost member's part from the
//! survivors; against the same daemons with partner copies instead (time until every
//! file has its copy, and a restore of one node from its partner). Figures only, never
//! asserted (docs/benchmarks.md); loopback, so the links are not limited.

use crate::erasure::{dataset_key, ErasureConfig};
use crate::NodeConfig;
use ckptfs_cluster::{Cluster, Secret};
use ckptfs_datasets::record::{Dataset, FileRec, NodePart, State};
use ckptfs_erasure::Scheme;
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What one scheme measured on the daemon path.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonFigure {
    /// `xor`, `rs:2`, or `partner` (the baseline).
    pub scheme: String,
    /// Daemons.
    pub members: usize,
    /// Bytes of each member's part.
    pub part_bytes: u64,
    /// Median seconds to protect the dataset (encode across daemons; for partner copies:
    /// from the record until every file has its copy).
    pub protect_s: f64,
    /// Every repetition's seconds.
    pub protect_all_s: Vec<f64>,
    /// Bytes sent per daemon per protection, as a share of a part.
    pub sent_per_part: f64,
    /// Extra memory per node, as a share of a part (`p/(n-p)`; 1 per partner copy).
    pub memory_per_part: f64,
    /// Seconds to bring one lost member's part back (rebuild from the set; for partner
    /// copies: restore from the partner).
    pub restore_s: f64,
}

struct Bench {
    cluster: Cluster,
    _dir: tempfile::TempDir,
    stores: Vec<StoreOptions>,
    rt: tokio::runtime::Runtime,
    stops: Vec<Option<tokio::sync::oneshot::Sender<()>>>,
    handles: Vec<Option<tokio::task::JoinHandle<Result<crate::NodeSummary>>>>,
}

fn io(what: &str, e: impl std::fmt::Display) -> NodeError {
    NodeError::Invalid(format!("bench: {what}: {e}"))
}

impl Bench {
    fn new(n: usize, scheme: Option<Scheme>, part: u64, tag: &str) -> Result<Bench> {
        let job = format!("{tag}-{}", std::process::id());
        let listeners: Vec<std::net::TcpListener> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<_>>()
            .map_err(|e| io("bind 127.0.0.1", e))?;
        let mut c = Cluster::local(n, &job, 1000).map_err(|e| io("cluster", e))?;
        for (node, l) in c.nodes.iter_mut().zip(&listeners) {
            node.addr = l.local_addr().map_err(|e| io("address", e))?.to_string();
        }
        c.redundancy.copies = 1;
        c.redundancy.erasure = scheme.map(|s| match s {
            Scheme::Xor => ckptfs_cluster::Erasure::Xor,
            Scheme::Rs(k) => ckptfs_cluster::Erasure::Rs(k),
        });
        c.redundancy.set_size = n;
        c.heartbeat_ms = 200;
        c.heartbeat_misses = 50;
        let secret = Secret::generate().map_err(|e| io("secret", e))?;
        c.secret = Some(secret.expose().iter().map(|b| format!("{b:02x}")).collect());
        let dir = tempfile::Builder::new()
            .prefix("ckptfs-bench-erasure")
            .tempdir()
            .map_err(|e| io("temporary directory", e))?;
        let file = dir.path().join("cluster.toml");
        std::fs::write(&file, c.to_toml()).map_err(|e| io("cluster file", e))?;
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(|e| io("cluster file", e))?;
        let cluster = Cluster::load(&file).map_err(|e| io("cluster file", e))?;
        let stores: Vec<StoreOptions> = cluster
            .nodes
            .iter()
            .map(|node| StoreOptions {
                name: node.store.clone(),
                mem_size: Some(part * 3 + (64 << 20)),
                chunk_size: Some(1 << 20),
                max_files: Some(1024),
                ..StoreOptions::named("")
            })
            .collect();
        for s in &stores {
            let _ = Store::destroy(&s.name);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| io("runtime", e))?;
        let mut b = Bench {
            cluster,
            _dir: dir,
            stores,
            rt,
            stops: (0..n).map(|_| None).collect(),
            handles: (0..n).map(|_| None).collect(),
        };
        for (i, l) in listeners.into_iter().enumerate() {
            b.start(i, Some(l))?;
        }
        Ok(b)
    }

    fn id(&self, i: usize) -> String {
        self.cluster.nodes[i].id.clone()
    }

    fn start(&mut self, i: usize, l: Option<std::net::TcpListener>) -> Result<()> {
        let id = self.id(i);
        let mut cfg = NodeConfig::new(self.cluster.clone(), &id)?;
        cfg.store = self.stores[i].clone();
        cfg.scan_interval = Duration::from_millis(20);
        cfg.writer_yield = Duration::ZERO;
        cfg.erasure = ErasureConfig::of(&self.cluster, &id, "bench")?.map(|mut e| {
            e.every = Duration::from_millis(20);
            e
        });
        let l = match l {
            Some(l) => l,
            None => std::net::TcpListener::bind(&self.cluster.nodes[i].addr).map_err(|e| io("bind", e))?,
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let stop = async move {
            let _ = rx.await;
        };
        let _g = self.rt.enter();
        self.handles[i] = Some(self.rt.spawn(crate::daemon::serve(cfg, l, stop)));
        self.stops[i] = Some(tx);
        Ok(())
    }

    fn stop(&mut self, i: usize) {
        if let Some(tx) = self.stops[i].take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handles[i].take() {
            let _ = self.rt.block_on(h);
        }
    }

    fn store(&self, i: usize) -> Result<Store> {
        Store::open_or_create(&self.stores[i]).map_err(|e| NodeError::store("bench store", e))
    }

    /// Write node `i`'s part (`part` bytes, one file) and return its record.
    fn write_part(&self, i: usize, part: u64, seed: u64) -> Result<(String, FileRec)> {
        let s = self.store(i)?;
        let path = format!("/bench/rank{i}");
        let _ = s.mkdir("/bench", 0o755);
        let mut f = s
            .open(&path, OpenFlags::CREATE, 0o644)
            .map_err(|e| NodeError::store("bench file", e))?;
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut crc = 0u32;
        let mut left = part;
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
            f.write_all(&buf[..n])
                .map_err(|e| NodeError::store("bench file", e))?;
            left -= n as u64;
        }
        f.close().map_err(|e| NodeError::store("bench file", e))?;
        let st = s.stat(&path).map_err(|e| NodeError::store("bench file", e))?;
        Ok((
            path,
            FileRec {
                size: part,
                crc32c: crc,
                mtime_ns: st.mtime_ns,
                levels: vec!["local".into()],
            },
        ))
    }

    fn wait(&self, what: &str, limit: Duration, ok: impl Fn() -> bool) -> Result<()> {
        let t = Instant::now();
        while !ok() {
            if t.elapsed() > limit {
                return Err(io("timed out waiting for", what));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        for i in 0..self.stops.len() {
            self.stop(i);
        }
        for s in &self.stores {
            let _ = Store::destroy(&s.name);
            crate::node_status::remove_status(&s.name);
        }
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn record(id: u64, nodes: &BTreeMap<String, NodePart>) -> Dataset {
    let now = ckptfs_settings::now_ns();
    Dataset {
        format: ckptfs_datasets::record::FORMAT.into(),
        id,
        name: format!("b{id}"),
        job: "bench".into(),
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
        nodes: nodes.clone(),
        pfs_pruned: false,
    }
}

/// Protect and rebuild with an erasure set of `n` daemons.
pub fn bench_set(n: usize, scheme: Scheme, part: u64, reps: usize) -> Result<DaemonFigure> {
    let b = Bench::new(n, Some(scheme), part, "ckbench-er")?;
    let mut nodes = BTreeMap::new();
    for i in 0..n {
        let (path, rec) = b.write_part(i, part, i as u64 + 1)?;
        nodes.insert(
            b.id(i),
            NodePart {
                ranks: vec![i.to_string()],
                files: [(path, rec)].into(),
            },
        );
    }
    let leader = b.store(0)?;
    // Heartbeats first: the leader encodes only when every member answers.
    std::thread::sleep(Duration::from_millis(600));
    let status = |i: usize| crate::node_status::status(&b.stores[i].name);
    let sent = |b: &Bench| -> u64 {
        (0..n)
            .filter_map(|i| crate::node_status::status(&b.stores[i].name))
            .filter_map(|s| s.erasure.map(|e| e.bytes_sent))
            .sum()
    };
    let mut times = Vec::new();
    let mut bytes = 0u64;
    for r in 0..reps.max(1) {
        let id = r as u64 + 1;
        let key = dataset_key("bench", id);
        let before = sent(&b);
        ckptfs_datasets::record::save(&leader, &record(id, &nodes)).map_err(|e| io("record", e))?;
        let limit = Duration::from_secs(120 + part / (8 << 20));
        b.wait(&format!("{key} protected"), limit, || {
            status(0)
                .and_then(|s| s.erasure)
                .is_some_and(|e| e.datasets.get(&key).is_some_and(|d| d.state == "protected"))
        })?;
        let d = status(0)
            .and_then(|s| s.erasure)
            .and_then(|e| e.datasets.get(&key).cloned());
        times.push(d.and_then(|d| d.seconds).unwrap_or(0.0));
        // The members' counters reach the status files within half a second.
        std::thread::sleep(Duration::from_millis(700));
        bytes += sent(&b).saturating_sub(before);
    }
    // One member lost (its store emptied): its part rebuilt from the survivors.
    let mut b = b;
    let lost = 1.min(n - 1);
    b.stop(lost);
    let _ = Store::destroy(&b.stores[lost].name);
    let store = b.store(lost)?;
    let t = Instant::now();
    let key = dataset_key("bench", reps.max(1) as u64);
    let rep = crate::erasure::rebuild_from_set(&b.cluster, &b.id(lost), &store, Some(&key))?;
    let restore_s = t.elapsed().as_secs_f64();
    if let Some((_, why)) = rep.failed.first() {
        return Err(io("rebuild", why));
    }
    let p = scheme.parity() as f64;
    Ok(DaemonFigure {
        scheme: scheme.to_string(),
        members: n,
        part_bytes: part,
        protect_s: median(&times),
        protect_all_s: times,
        sent_per_part: bytes as f64 / (reps.max(1) * n) as f64 / part as f64,
        memory_per_part: p / (n as f64 - p),
        restore_s,
    })
}

/// The same daemons with one partner copy per file instead: time from the files being
/// complete until each has its copy, and a restore of one node from its partner.
pub fn bench_partner(n: usize, part: u64, reps: usize) -> Result<DaemonFigure> {
    let mut b = Bench::new(n, None, part, "ckbench-pa")?;
    std::thread::sleep(Duration::from_millis(600));
    let mut times = Vec::new();
    for r in 0..reps.max(1) {
        let mut paths = Vec::new();
        for i in 0..n {
            paths.push(b.write_part(i, part, (r * n + i) as u64 + 7)?.0);
        }
        // From the last close (copies of the first files may have begun during the
        // writes: an advantage to this baseline).
        let t = Instant::now();
        let stores: Vec<Store> = (0..n).map(|i| b.store(i)).collect::<Result<_>>()?;
        b.wait(
            "every partner copy",
            Duration::from_secs(120 + part / (8 << 20)),
            || {
                stores.iter().zip(&paths).all(|(s, p)| {
                    let l = crate::levels::Levels::load(s);
                    let st = s.stat(p).ok();
                    st.is_some_and(|st| !l.partners_of(p, &st).is_empty())
                })
            },
        )?;
        times.push(t.elapsed().as_secs_f64());
    }
    let lost = 1.min(n - 1);
    b.stop(lost);
    let _ = Store::destroy(&b.stores[lost].name);
    let store = b.store(lost)?;
    let t = Instant::now();
    let rep = crate::restore::restore_from_peers_blocking(&b.cluster, &b.id(lost), &store, "/bench")?;
    let restore_s = t.elapsed().as_secs_f64();
    if let Some(f) = rep.failed.first() {
        return Err(io("restore", &f.error));
    }
    Ok(DaemonFigure {
        scheme: "partner".into(),
        members: n,
        part_bytes: part,
        protect_s: median(&times),
        protect_all_s: times,
        sent_per_part: 1.0,
        memory_per_part: 1.0,
        restore_s,
    })
}
