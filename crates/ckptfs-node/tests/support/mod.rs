//! Simulated clusters on 127.0.0.1: N daemons in this process, each with its own store
//! (`hn-<test>-<pid>.nodeI`, small) and a port found free at start.
#![allow(dead_code)]

use ckptfs_cluster::{Cluster, Scheme, Secret};
use ckptfs_node::{NodeConfig, NodeSummary};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Ports free now (bound to port 0, then released).
pub fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// The store settings of node `id` in the tests (small stores, 64 KiB chunks).
pub fn store_opts_for(cluster: &Cluster, id: &str) -> StoreOptions {
    StoreOptions {
        name: cluster.node(id).unwrap().store.clone(),
        mem_size: Some(64 << 20),
        chunk_size: Some(64 << 10),
        max_files: Some(256),
        spill_dir: None,
        spill_size: None,
        private: false,
        ..StoreOptions::named("")
    }
}

/// A cluster map written to a file; stores destroyed on drop.
pub struct TestCluster {
    pub cluster: Cluster,
    pub dir: tempfile::TempDir,
    pub file: PathBuf,
}

impl TestCluster {
    /// `n` nodes, two per rack (node1, node2 in r1...), scheme and copies.
    pub fn new(tag: &str, n: usize, scheme: Scheme, copies: usize) -> TestCluster {
        let addrs = free_ports(n)
            .into_iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        Self::with_addrs(tag, addrs, scheme, copies)
    }

    /// As [`TestCluster::new`], the nodes at `addrs` (e.g. simulated nodes' addresses).
    pub fn with_addrs(tag: &str, addrs: Vec<String>, scheme: Scheme, copies: usize) -> TestCluster {
        let n = addrs.len();
        let job = format!("hn-{tag}-{}", std::process::id());
        let mut c = Cluster::local(n, &job, 1000).unwrap();
        for (node, addr) in c.nodes.iter_mut().zip(addrs) {
            node.addr = addr;
        }
        c.redundancy.scheme = scheme;
        c.redundancy.copies = copies;
        c.heartbeat_ms = 200;
        c.secret = Some(hex(Secret::generate().unwrap().expose()));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cluster.toml");
        std::fs::write(&file, c.to_toml()).unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let cluster = Cluster::load(&file).unwrap();
        for node in &cluster.nodes {
            let _ = Store::destroy(&node.store);
            ckptfs_node::node_status::remove_status(&node.store);
        }
        TestCluster { cluster, dir, file }
    }

    /// For tests of placement, not of liveness: a peer is declared down only after 100
    /// missed heartbeats (20 s) instead of 3. On a loaded machine (CI runs suites side
    /// by side) a heartbeat task starved for 0.6 s made a node take the next eligible
    /// partner as well, so the source recorded one partner more than planned.
    /// The cluster file is written again for daemons that load it (child processes).
    pub fn patient(mut self) -> Self {
        self.cluster.heartbeat_misses = 100;
        std::fs::write(&self.file, self.cluster.to_toml()).unwrap();
        self
    }

    pub fn store_opts(&self, id: &str) -> StoreOptions {
        store_opts_for(&self.cluster, id)
    }

    pub fn store(&self, id: &str) -> Store {
        Store::open_or_create(&self.store_opts(id)).unwrap()
    }

    pub fn config(&self, id: &str) -> NodeConfig {
        let mut cfg = NodeConfig::new(self.cluster.clone(), id).unwrap();
        cfg.store = self.store_opts(id);
        cfg.scan_interval = Duration::from_millis(50);
        cfg
    }

    pub fn partners_of(&self, id: &str) -> Vec<String> {
        self.cluster.plan().unwrap().partners_of(id).unwrap().to_vec()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for node in &self.cluster.nodes {
            let _ = Store::destroy(&node.store);
            ckptfs_node::node_status::remove_status(&node.store);
        }
    }
}

/// A daemon running in this process.
pub struct Daemon {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<ckptfs_node::Result<NodeSummary>>>,
}

impl Daemon {
    pub fn start(cfg: NodeConfig) -> Daemon {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(ckptfs_node::run(cfg, async move {
            let _ = rx.await;
        }));
        Daemon {
            stop: Some(tx),
            handle: Some(handle),
        }
    }

    pub async fn stop(mut self) -> NodeSummary {
        let _ = self.stop.take().unwrap().send(());
        self.handle.take().unwrap().await.unwrap().unwrap()
    }
}

/// Deterministic test bytes.
pub fn bytes(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

pub fn write(store: &Store, path: &str, data: &[u8]) {
    let mut cur = String::new();
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    for c in &parts[..parts.len() - 1] {
        cur.push('/');
        cur.push_str(c);
        let _ = store.mkdir(&cur, 0o755);
    }
    let mut f = store.open(path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(data).unwrap();
    f.close().unwrap();
}

pub fn read(store: &Store, path: &str) -> Option<Vec<u8>> {
    let mut f = store.open(path, OpenFlags::READ, 0).ok()?;
    let mut buf = vec![0u8; f.size() as usize];
    f.read_full(&mut buf).ok()?;
    Some(buf)
}

/// Poll until `f` is true (generous: the machine is loaded); panics with `what` after.
pub async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        if t.elapsed() > Duration::from_secs(90) {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The partner copy of `path` from `src` held in `store`, if complete.
pub fn copy_on(store: &Store, src: &str, path: &str) -> Option<Vec<u8>> {
    let p = ckptfs_node::partner_store::copy_path(src, path);
    let st = store.stat(&p).ok()?;
    if st.state != ckptfs_store::WriteState::Complete {
        return None;
    }
    read(store, &p)
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Who node `id` of the test cluster is on the wire.
pub fn identity(tc: &TestCluster, id: &str) -> ckptfs_transport::Identity {
    ckptfs_transport::Identity {
        node_id: id.to_string(),
        job: tc.cluster.job.clone(),
    }
}

/// An authenticated connection from node `me` to node `to` with `me`'s own keys,
/// tried again until `to`'s daemon answers (60 s at most).
pub async fn client(tc: &TestCluster, me: &str, to: &str) -> ckptfs_transport::Conn {
    let keys = tc.cluster.node_keys(me).unwrap();
    let addr = tc.cluster.node(to).unwrap().addr.clone();
    let cfg = ckptfs_node::peer::conn_config(&tc.cluster);
    let t = Instant::now();
    loop {
        match ckptfs_transport::connect(&addr, &identity(tc, me), to, &keys, &cfg).await {
            Ok(c) => return c,
            Err(e) if t.elapsed() > Duration::from_secs(60) => panic!("{to} never came up: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Sends a whole copy of `data` as `src`'s file `path` (relative on the wire) with copy
/// generation `generation`, in 64 KiB chunks; the receiver's Nack if it refused the
/// copy when it began, else whether the end was acknowledged.
pub async fn put_copy(
    c: &mut ckptfs_transport::Conn,
    src: &str,
    path: &str,
    data: &[u8],
    generation: u64,
) -> Result<bool, ckptfs_transport::Nack> {
    use ckptfs_transport::{ChunkHeader, Msg, PutBegin, PutEnd};
    c.send(&Msg::PutBegin(PutBegin {
        src_node: src.into(),
        path: path.trim_start_matches('/').into(),
        size: data.len() as u64,
        chunk_size: 64 << 10,
        mtime_ns: 0,
        generation,
    }))
    .await
    .unwrap();
    match c.recv().await.unwrap() {
        Msg::Ack { .. } => {}
        Msg::Nack(n) => return Err(n),
        m => panic!("{m:?}"),
    }
    let mut n = 0;
    for (i, ch) in data.chunks(64 << 10).enumerate() {
        c.send_chunk(&ChunkHeader::for_data(i as u64, (i << 16) as u64, ch), ch)
            .await
            .unwrap();
        n += 1;
    }
    c.send(&Msg::PutEnd(PutEnd {
        generation,
        chunks: n,
        size: data.len() as u64,
    }))
    .await
    .unwrap();
    Ok(matches!(c.recv().await.unwrap(), Msg::Ack { .. }))
}
