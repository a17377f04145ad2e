//! Simulated clusters on 127.0.0.1: N daemons in this process, each with its own store
//! (`hn-<test>-<pid>.nodeI`, small) and a port bound at start and kept: the daemon
//! gets it as its listener (`ckptfs_node::daemon::serve`), so no port is found free,
//! released and bound again by whoever comes first.
#![allow(dead_code)]

use ckptfs_cluster::{Cluster, Scheme, Secret};
use ckptfs_node::{NodeConfig, NodeSummary};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sockets bound to 127.0.0.1 by [`TestCluster::new`], by address: bound but not yet
/// listening, so a peer's connection to a node whose daemon has not started is refused,
/// as it would be without the reservation. [`take_listener`] hands one over.
static RESERVED: Mutex<Vec<(String, OwnedFd)>> = Mutex::new(Vec::new());

/// A TCP socket bound to 127.0.0.1 on a port the kernel picks (port 0), not listening;
/// its address is recorded in [`RESERVED`].
pub fn reserve_port() -> String {
    bind_reserved(0).expect("a port of the kernel's choice")
}

/// A socket bound to 127.0.0.1 on the first port of `range` that can be bound (a port
/// of the range may be taken, e.g. as another connection's ephemeral source port),
/// recorded in [`RESERVED`] like [`reserve_port`]'s: suites that must keep to a range
/// of ports.
pub fn reserve_in(range: std::ops::Range<u16>) -> String {
    let taken: Vec<String> = RESERVED.lock().unwrap().iter().map(|(a, _)| a.clone()).collect();
    range
        .clone()
        .filter(|p| !taken.contains(&format!("127.0.0.1:{p}")))
        .find_map(bind_reserved)
        .unwrap_or_else(|| panic!("no port of {range:?} can be bound"))
}

/// Bind 127.0.0.1:`port` (0: the kernel's choice) with SO_REUSEADDR, not listening, and
/// record it; None when the port cannot be bound.
fn bind_reserved(port: u16) -> Option<String> {
    // SAFETY: socket(2) with constant arguments; the descriptor is owned just below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // A port asked for is bound without SO_REUSEADDR: the bind then fails (and the next
    // port is tried) while any other socket, a TIME_WAIT one included, holds it, so the
    // daemon's listen(2) on it later cannot.
    let one: libc::c_int = (port == 0) as libc::c_int;
    // SAFETY: the option value is a c_int that lives across the call, with its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_REUSEADDR: {}", std::io::Error::last_os_error());
    // SAFETY: sockaddr_in is plain data; all zeroes is a valid value.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
    sa.sin_port = port.to_be();
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `sa` is a sockaddr_in of `len` bytes, living across the call.
    let rc = unsafe { libc::bind(fd.as_raw_fd(), (&sa as *const libc::sockaddr_in).cast(), len) };
    if rc != 0 && port != 0 {
        return None;
    }
    assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
    // SAFETY: as above; getsockname writes at most `len` bytes into `sa`.
    let rc = unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut sa as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "getsockname: {}", std::io::Error::last_os_error());
    let addr = format!("127.0.0.1:{}", u16::from_be(sa.sin_port));
    RESERVED.lock().unwrap().push((addr.clone(), fd));
    Some(addr)
}

/// The socket reserved for `addr`, now listening, for a daemon or a fake peer; `None`
/// when none is (left): the caller binds the address itself (a daemon restarted on the
/// same node, simulated nodes' addresses).
pub fn take_listener(addr: &str) -> Option<std::net::TcpListener> {
    let mut r = RESERVED.lock().unwrap();
    let i = r.iter().position(|(a, _)| a == addr)?;
    let (_, fd) = r.swap_remove(i);
    // SAFETY: listen(2) on a bound socket this process owns.
    let rc = unsafe { libc::listen(fd.as_raw_fd(), 1024) };
    assert_eq!(rc, 0, "listen: {}", std::io::Error::last_os_error());
    Some(std::net::TcpListener::from(fd))
}

/// A listener on `addr` for a fake peer: the reserved socket, or a fresh bind.
pub async fn listen(addr: &str) -> tokio::net::TcpListener {
    match take_listener(addr) {
        Some(l) => {
            l.set_nonblocking(true).unwrap();
            tokio::net::TcpListener::from_std(l).unwrap()
        }
        None => tokio::net::TcpListener::bind(addr).await.unwrap(),
    }
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
        let addrs = (0..n).map(|_| reserve_port()).collect();
        Self::with_addrs(tag, addrs, scheme, copies)
    }

    /// As [`TestCluster::new`], the nodes at `addrs` (e.g. simulated nodes' addresses).
    pub fn with_addrs(tag: &str, addrs: Vec<String>, scheme: Scheme, copies: usize) -> TestCluster {
        Self::with_job(&format!("hn-{tag}-{}", std::process::id()), addrs, scheme, copies)
    }

    /// As [`TestCluster::with_addrs`], the job (and so the stores' names) given.
    pub fn with_job(job: &str, addrs: Vec<String>, scheme: Scheme, copies: usize) -> TestCluster {
        let n = addrs.len();
        let mut c = Cluster::local(n, job, 1000).unwrap();
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
        RESERVED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(a, _)| !self.cluster.nodes.iter().any(|n| &n.addr == a));
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
    /// The daemon of `cfg`, on the socket reserved for its address (else it binds it).
    pub fn start(cfg: NodeConfig) -> Daemon {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let stop = async move {
            let _ = rx.await;
        };
        let addr = cfg.cluster.node(&cfg.node_id).unwrap().addr.clone();
        let handle = match take_listener(&addr) {
            Some(l) => tokio::spawn(ckptfs_node::daemon::serve(cfg, l, stop)),
            None => tokio::spawn(ckptfs_node::run(cfg, stop)),
        };
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
    let cfg = ckptfs_partner::peer::conn_config(&tc.cluster);
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
