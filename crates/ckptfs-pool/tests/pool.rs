//! A manager, four benefactors and two clients on 127.0.0.1 (ports the kernel chooses,
//! held from the moment they are chosen until the servers take them): the level conformance suite, byte-identical round trips, incremental
//! versions, drain and reassembly, a benefactor lost mid-write, the manager restarted, a
//! client dying before its commit, expiry, a benefactor returning wrong bytes, one full
//! mid-write; with two replicas: benefactors killed after and during a write lose
//! nothing, and their copies are made again elsewhere (in the other rack).

use ckptfs_cluster::{Cluster, PoolMap, Secret};
use ckptfs_level::conformance::{run, Harness};
use ckptfs_pool::benefactor::Benefactor;
use ckptfs_pool::manager::Manager;
use ckptfs_pool::{drain, PoolClient, PoolError, PoolLevel, PoolNet};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Pool {
    dir: tempfile::TempDir,
    cluster: Cluster,
    mgr: Option<tokio::runtime::Runtime>,
    bens: Vec<Option<(tokio::runtime::Runtime, Arc<Benefactor>)>>,
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Listeners bound ahead of the servers that will take them, by port. A test's ports are
/// chosen by the kernel (port 0) and held here, so no other socket (of this process, of
/// another test suite, or an ephemeral port of some connection) can take one meanwhile.
fn reserved() -> &'static std::sync::Mutex<std::collections::HashMap<u16, std::net::TcpListener>> {
    static R: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<u16, std::net::TcpListener>>> =
        std::sync::OnceLock::new();
    R.get_or_init(Default::default)
}

/// `n` free ports on 127.0.0.1, each held in `reserved` until `listen` takes it.
fn reserve_ports(n: usize) -> Vec<u16> {
    let mut r = reserved().lock().unwrap();
    (0..n)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1");
            let port = l.local_addr().unwrap().port();
            r.insert(port, l);
            port
        })
        .collect()
}

/// A listener at `addr`: the reserved one, else bound now.
fn listen(r: &tokio::runtime::Runtime, addr: &str) -> Option<tokio::net::TcpListener> {
    let port: u16 = addr.rsplit(':').next()?.parse().ok()?;
    let _g = r.enter();
    let l = reserved().lock().unwrap().remove(&port);
    let got = match l {
        Some(l) => {
            l.set_nonblocking(true).ok()?;
            tokio::net::TcpListener::from_std(l)
        }
        None => r.block_on(tokio::net::TcpListener::bind(addr)),
    };
    got.ok()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// How a test pool is laid out.
#[derive(Clone, Copy)]
struct Opts {
    mem: u64,
    width: u32,
    drain: bool,
    replicas: u32,
    /// node2, node3 in rack r1; node4, node5 in rack r2.
    racks: bool,
}

impl Opts {
    fn new(mem: u64, width: u32, drain: bool) -> Opts {
        Opts {
            mem,
            width,
            drain,
            replicas: 1,
            racks: false,
        }
    }
}

impl Pool {
    /// node1 manager, node2..node5 benefactors lending `mem` each, node6/node7 clients.
    fn start(slot: u16, mem: u64, width: u32, drain: bool) -> Pool {
        Self::start_with(slot, Opts::new(mem, width, drain))
    }

    fn start_with(slot: u16, o: Opts) -> Pool {
        // The ports are held from the start (see `reserved`); a port a restarted server
        // binds again may be held for a moment by a closing socket: `try_start` is only
        // retried for that.
        for _ in 0..10 {
            if let Some(p) = Self::try_start(slot, o) {
                return p;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("pool test {slot}: its manager or a benefactor could not listen");
    }

    fn try_start(slot: u16, o: Opts) -> Option<Pool> {
        let dir = tempfile::Builder::new()
            .prefix("pl3-pool-test")
            .tempdir_in("/tmp")
            .unwrap();
        // node1 (the manager) and node2..node5 (benefactors) listen at their node's
        // port; node6 and node7 are clients, their ports only names.
        let ports = reserve_ports(7);
        let mut c = Cluster::local(7, &format!("pl3-pool-t{slot}"), 1).unwrap();
        for (n, port) in c.nodes.iter_mut().zip(&ports) {
            n.addr = format!("127.0.0.1:{port}");
        }
        let base = ports[0];
        c.secret = Some(hex(Secret::generate().unwrap().expose()));
        if o.racks {
            c.domains = vec!["rack".into()];
            for n in c.nodes.iter_mut() {
                let rack = match n.id.as_str() {
                    "node2" | "node3" => "r1",
                    "node4" | "node5" => "r2",
                    _ => "r0",
                };
                n.domains.insert("rack".into(), rack.into());
            }
        }
        let mut p = PoolMap::new("node1", &format!("127.0.0.1:{base}"));
        // node2..node5 lend at their node's port.
        p.benefactor_port_offset = 0;
        p.chunk_size = 64 << 10;
        p.stripe_width = o.width;
        p.replicas = o.replicas;
        p.refresh_ms = 100;
        p.death_ms = 2000;
        p.meta_dir = Some(dir.path().join("meta"));
        if o.drain {
            p.drain_dir = Some(dir.path().join("pfs"));
        }
        c.pool = Some(p);
        let file = dir.path().join("cluster.toml");
        std::fs::write(&file, c.to_toml()).unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let cluster = Cluster::load(&file).unwrap();
        let mut pool = Pool {
            dir,
            cluster,
            mgr: None,
            bens: Vec::new(),
        };
        pool.try_manager()?;
        for i in 2..=5 {
            let b = pool.try_benefactor(i, o.mem)?;
            pool.bens.push(Some(b));
        }
        pool.wait_alive(4);
        Some(pool)
    }

    fn try_manager(&mut self) -> Option<()> {
        let net = PoolNet::server(&self.cluster, "node1").unwrap();
        let m = Manager::open(net.clone(), &self.dir.path().join("meta")).unwrap();
        let r = rt();
        let l = listen(&r, &net.pool.addr)?;
        r.spawn(m.serve(l));
        self.mgr = Some(r);
        Some(())
    }

    fn start_manager(&mut self) {
        self.try_manager().expect("manager's port");
    }

    fn kill_manager(&mut self) {
        if let Some(r) = self.mgr.take() {
            r.shutdown_timeout(Duration::from_secs(2));
        }
    }

    fn try_benefactor(&self, i: usize, mem: u64) -> Option<(tokio::runtime::Runtime, Arc<Benefactor>)> {
        let id = format!("node{i}");
        let net = PoolNet::server(&self.cluster, &id).unwrap();
        let addr = net.benefactor_addr(&id).unwrap();
        let b = Benefactor::new(net, mem);
        let r = rt();
        let l = listen(&r, &addr)?;
        r.block_on(b.start_on(l, &addr)).ok()?;
        Some((r, b))
    }

    fn kill_benefactor(&mut self, i: usize) {
        if let Some((r, b)) = self.bens.get_mut(i - 2).and_then(Option::take) {
            b.pause_drain(true);
            r.shutdown_timeout(Duration::from_secs(2));
        }
    }

    fn ben(&self, i: usize) -> &Arc<Benefactor> {
        &self.bens[i - 2].as_ref().unwrap().1
    }

    fn client(&self, node: &str, buffer: u64) -> PoolClient {
        PoolClient::new(PoolNet::client(&self.cluster, node).unwrap(), buffer).unwrap()
    }

    fn wait_alive(&self, n: usize) {
        let c = self.client("node6", 1 << 20);
        let t0 = Instant::now();
        loop {
            let st = c.status();
            if let Ok(s) = st {
                if s.iter().filter(|b| b.alive).count() == n {
                    return;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{n} benefactors not alive"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for i in 2..=5 {
            self.kill_benefactor(i);
        }
        self.kill_manager();
    }
}

fn data(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn wait(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_pool_level_passes_the_conformance_suite() {
    let pool = Pool::start(0, 64 << 20, 2, false);
    let level = PoolLevel::new(pool.client("node6", 1 << 20));
    let lie = |_: &str| -> std::io::Result<()> {
        for i in 2..=5 {
            pool.ben(i).set_lie(true);
        }
        Ok(())
    };
    let mut h = Harness::new(&level, 4096, "/conf");
    h.damage = Some(&lie);
    run(&h).unwrap();
}

#[test]
fn two_clients_write_and_read_back_byte_identical_and_versions_send_only_changed_chunks() {
    let pool = Pool::start(1, 64 << 20, 2, false);
    // Clients on the manager's node and on a benefactor's node.
    let a = pool.client("node1", 1 << 20);
    let b = pool.client("node2", 256 << 10);
    let da = data(3 << 20, 1);
    let db = data((2 << 20) + 12345, 2);
    std::thread::scope(|s| {
        s.spawn(|| a.put_bytes("/run1/a.dat", &da, 1).unwrap());
        s.spawn(|| b.put_bytes("/run1/b.dat", &db, 1).unwrap());
    });
    assert_eq!(a.get_bytes("/run1/b.dat").unwrap().1, db);
    assert_eq!(b.get_bytes("/run1/a.dat").unwrap().1, da);
    let f = a.stat("/run1/a.dat").unwrap().unwrap();
    let nodes: std::collections::BTreeSet<&str> = f.chunks.iter().map(|c| c.node.as_str()).collect();
    assert_eq!(nodes.len(), 2, "striped over the width");

    // Version 2 with 10 % of its chunks changed: only those cross the wire.
    let mut v2 = da.clone();
    let cs = 64 << 10;
    let n = da.len() / cs;
    let changed: Vec<usize> = (0..n).step_by(10).collect();
    for &i in &changed {
        v2[i * cs + 7] ^= 0xff;
    }
    let r = a.put_bytes("/run1/a.dat", &v2, 2).unwrap();
    assert_eq!(r.version, 2);
    assert_eq!(r.chunks_sent, changed.len() as u64);
    assert_eq!(r.bytes_sent, (changed.len() * cs) as u64);
    assert_eq!(b.get_bytes("/run1/a.dat").unwrap().1, v2);
    let f = a.stat("/run1/a.dat").unwrap().unwrap();
    assert_eq!(f.older, vec![1]);
    assert!(r.oab > 0.0 && r.asb > 0.0 && r.oab >= r.asb * 0.99);
}

#[test]
fn drained_chunks_reassemble_and_evicted_chunks_are_read_from_the_pfs() {
    // 4 x 1 MiB lent; 6 MiB written in three files: the first ones are evicted.
    let pool = Pool::start(2, 1 << 20, 4, true);
    let c = pool.client("node6", 1 << 20);
    let files: Vec<(String, Vec<u8>)> = (0..3).map(|i| (format!("/d/f{i}"), data(2 << 20, i))).collect();
    for (p, d) in &files {
        c.put_bytes(p, d, 1).unwrap();
        wait("drain", 20, || {
            c.stat(p).unwrap().unwrap().chunks.iter().all(|x| x.drained)
        });
    }
    // Incremental version: shared chunks are hard links.
    let mut v2 = files[2].1.clone();
    v2[5] ^= 1;
    c.put_bytes("/d/f2", &v2, 2).unwrap();
    wait("drain v2", 20, || {
        c.stat("/d/f2").unwrap().unwrap().chunks.iter().all(|x| x.drained)
    });
    for (p, d) in &files[..2] {
        assert_eq!(&c.get_bytes(p).unwrap().1, d, "{p} read back after eviction");
    }
    let dest = pool.dir.path().join("rebuilt");
    let (done, bad) = drain::reassemble(&pool.dir.path().join("pfs"), &dest).unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(done.len(), 3);
    for (p, d) in &files[..2] {
        assert_eq!(&std::fs::read(dest.join(&p[1..])).unwrap(), d);
    }
    assert_eq!(std::fs::read(dest.join("d/f2")).unwrap(), v2);
    let f = c.stat("/d/f2").unwrap().unwrap();
    let n = drain::chunk_file(
        &pool.dir.path().join("pfs"),
        &ckptfs_pool::msg::ChunkName {
            path: "/d/f2".into(),
            version: 2,
            index: 31,
            count: 32,
            hash: f.chunks[31].hash.clone(),
            drain: true,
        },
    );
    let nlink = std::os::unix::fs::MetadataExt::nlink(&std::fs::metadata(n).unwrap());
    assert_eq!(
        nlink, 2,
        "a chunk shared by two versions is one file, hard-linked"
    );
}

#[test]
fn a_benefactor_lost_mid_write_is_replaced_and_its_files_are_reported_lost_by_name() {
    // Width 4: every benefactor holds chunks of /l/before and is a member of the write
    // of /l/during (the victim must be both).
    let mut pool = Pool::start(3, 64 << 20, 4, false);
    let c = pool.client("node6", 128 << 10);
    let before = data(1 << 20, 9);
    c.put_bytes("/l/before", &before, 1).unwrap();
    let holders: Vec<String> = c
        .stat("/l/before")
        .unwrap()
        .unwrap()
        .chunks
        .iter()
        .map(|x| x.node.clone())
        .collect();
    let victim: usize = holders[0].trim_start_matches("node").parse().unwrap();
    let big = data(8 << 20, 3);
    let mut w = c.create("/l/during", None).unwrap();
    w.write(&big[..2 << 20]).unwrap();
    pool.kill_benefactor(victim);
    // The victim held acknowledged chunks of this write: the commit fails by name,
    // and nothing is published.
    let r = w.write(&big[2 << 20..]).and_then(|_| w.commit(1, 0o644, None));
    match r {
        Err(PoolError::Lost { path, node, .. }) => {
            assert_eq!(path, "/l/during");
            assert_eq!(node, format!("node{victim}"));
        }
        other => panic!("{:?}", other.map(|r| r.stripe)),
    }
    assert!(c.stat("/l/during").unwrap().is_none());
    // Written again, it lands on the benefactors left.
    let r = c.put_bytes("/l/during", &big, 2).unwrap();
    assert!(!r.stripe.contains(&format!("node{victim}")));

    assert_eq!(c.get_bytes("/l/during").unwrap().1, big);
    wait("death", 10, || {
        c.stat("/l/before").unwrap().unwrap().state == "lost"
    });
    match c.get_bytes("/l/before") {
        Err(PoolError::Lost { path, node, .. }) => {
            assert_eq!(path, "/l/before");
            assert_eq!(node, format!("node{victim}"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_restarted_manager_keeps_committed_files_and_clients_get_a_clear_error_meanwhile() {
    let mut pool = Pool::start(4, 64 << 20, 2, false);
    let c = pool.client("node6", 1 << 20);
    let d = data(700_000, 4);
    c.put_bytes("/m/a", &d, 1).unwrap();
    pool.kill_manager();
    match c.stat("/m/a") {
        Err(e @ PoolError::ManagerDown { .. }) => assert!(e.to_string().contains("unreachable")),
        other => panic!("{other:?}"),
    }
    pool.start_manager();
    pool.wait_alive(4);
    assert_eq!(c.get_bytes("/m/a").unwrap().1, d);
}

#[test]
fn a_client_dead_before_its_commit_leaves_nothing_visible_and_its_chunks_are_reclaimed() {
    let pool = Pool::start(5, 64 << 20, 4, false);
    {
        let dead = pool.client("node7", 1 << 20);
        let mut w = dead.create("/k/never", None).unwrap();
        w.write(&data(1 << 20, 5)).unwrap();
        // Let the chunks land, then die without commit or abort (the client's
        // connections close with it).
        std::thread::sleep(Duration::from_millis(300));
        w.abandon();
    }
    let c = pool.client("node6", 1 << 20);
    assert!(c.stat("/k/never").unwrap().is_none());
    wait("reclaim", 10, || (2..=5).all(|i| pool.ben(i).used() == 0));
}

#[test]
fn expired_versions_are_removed() {
    let pool = Pool::start(6, 64 << 20, 2, false);
    let c = pool.client("node6", 1 << 20);
    c.keep("/e", Some(2), None).unwrap();
    for v in 1..=3u32 {
        c.put_bytes("/e/x", &data(200_000, v), v as u64).unwrap();
    }
    let f = c.stat("/e/x").unwrap().unwrap();
    assert_eq!((f.version, f.older.clone()), (3, vec![2]));
    c.keep("/e", None, Some(1)).unwrap();
    wait("expiry", 10, || c.stat("/e/x").unwrap().is_none());
    wait("chunks dropped", 10, || (2..=5).all(|i| pool.ben(i).used() == 0));
}

#[test]
fn a_benefactor_returning_wrong_bytes_is_detected() {
    let pool = Pool::start(7, 64 << 20, 1, false);
    let c = pool.client("node6", 1 << 20);
    c.put_bytes("/w/x", &data(300_000, 8), 1).unwrap();
    for i in 2..=5 {
        pool.ben(i).set_lie(true);
    }
    match c.get_bytes("/w/x") {
        Err(PoolError::Corrupt { .. }) => {}
        other => panic!("{:?}", other.map(|(f, _)| f.path)),
    }
}

#[test]
fn the_mover_moves_files_between_a_directory_level_and_the_pool() {
    use ckptfs_level::conformance::{get_bytes, put_bytes};
    use ckptfs_level::{Job, Level, MoveOptions, Mover};
    let pool = Pool::start(8, 64 << 20, 2, false);
    let level = PoolLevel::new(pool.client("node6", 1 << 20));
    let dir = ckptfs_dirlevel::DirLevel::new(pool.dir.path().join("dirlevel")).unwrap();
    let back = ckptfs_dirlevel::DirLevel::new(pool.dir.path().join("back")).unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("/mv/f{i}"), data(300_000 * i + 5, i as u32)))
        .collect();
    for (p, d) in &files {
        put_bytes(&dir, p, d, 64 << 10, 1).unwrap();
    }
    let mover = Mover::new(MoveOptions {
        streams: 2,
        window: 3,
        ..Default::default()
    });
    let jobs: Vec<Job<'_>> = files
        .iter()
        .map(|(p, _)| Job {
            from: &dir,
            to: &level,
            path: p,
        })
        .collect();
    assert!(mover.run(&jobs).iter().all(|m| m.result.is_ok()));
    let jobs: Vec<Job<'_>> = files
        .iter()
        .map(|(p, _)| Job {
            from: &level,
            to: &back,
            path: p,
        })
        .collect();
    assert!(mover.run(&jobs).iter().all(|m| m.result.is_ok()));
    for (p, d) in &files {
        assert_eq!(&get_bytes(&back, p).unwrap(), d);
        assert_eq!(
            level.stat(p).unwrap().unwrap().version.crc32c,
            Some(ckptfs_crc::crc32c(d))
        );
    }
}

#[test]
fn a_benefactor_lost_mid_drain_leaves_drained_files_degraded_and_readable_and_the_rest_lost() {
    let mut pool = Pool::start(9, 64 << 20, 4, true);
    let c = pool.client("node6", 1 << 20);
    let drained = data(1 << 20, 11);
    c.put_bytes("/g/drained", &drained, 1).unwrap();
    wait("drain", 20, || {
        c.stat("/g/drained")
            .unwrap()
            .unwrap()
            .chunks
            .iter()
            .all(|x| x.drained)
    });
    // Hold every drain, then write a file whose chunks stay in memory only.
    for i in 2..=5 {
        pool.ben(i).pause_drain(true);
    }
    let undrained = data(1 << 20, 12);
    c.put_bytes("/g/undrained", &undrained, 1).unwrap();
    let f = c.stat("/g/undrained").unwrap().unwrap();
    let victim: usize = f.chunks[0].node.trim_start_matches("node").parse().unwrap();
    pool.kill_benefactor(victim);
    wait("death", 10, || {
        c.stat("/g/drained").unwrap().unwrap().state == "degraded"
    });
    assert_eq!(c.stat("/g/undrained").unwrap().unwrap().state, "lost");
    assert_eq!(
        c.get_bytes("/g/drained").unwrap().1,
        drained,
        "served from the drained chunks"
    );
    assert!(matches!(c.get_bytes("/g/undrained"), Err(PoolError::Lost { .. })));
}

#[test]
fn a_benefactor_lying_about_its_free_memory_is_left_out_of_plans() {
    let pool = Pool::start(10, 64 << 20, 4, false);
    let c = pool.client("node6", 1 << 20);
    c.put_bytes("/f/x", &data(2 << 20, 13), 1).unwrap();
    pool.ben(3).set_lie_about_memory(true);
    wait("suspect", 10, || {
        c.status()
            .unwrap()
            .iter()
            .any(|b| b.node == "node3" && b.suspect.is_some())
    });
    let r = c.put_bytes("/f/y", &data(2 << 20, 14), 1).unwrap();
    assert!(!r.stripe.contains(&"node3".to_string()), "{:?}", r.stripe);
}

fn racks_of(f: &ckptfs_pool::msg::FileInfo) -> Vec<Vec<String>> {
    f.chunks
        .iter()
        .map(|c| c.holders().iter().map(|(n, _)| n.to_string()).collect())
        .collect()
}

fn rack(node: &str) -> &'static str {
    match node {
        "node2" | "node3" => "r1",
        _ => "r2",
    }
}

/// Every chunk of `path` has two live copies, in distinct racks, none on `gone`.
fn fully_replicated(c: &PoolClient, path: &str, gone: &[String]) -> bool {
    let f = c.stat(path).unwrap().unwrap();
    f.state == "ok"
        && racks_of(&f)
            .iter()
            .all(|h| h.len() == 2 && rack(&h[0]) != rack(&h[1]) && !h.iter().any(|n| gone.contains(n)))
}

#[test]
fn with_two_replicas_killed_benefactors_lose_nothing_and_their_copies_are_made_again() {
    let mut pool = Pool::start_with(
        11,
        Opts {
            replicas: 2,
            racks: true,
            ..Opts::new(64 << 20, 2, false)
        },
    );
    let c = pool.client("node6", 256 << 10);
    let files: Vec<(String, Vec<u8>)> = [(1 << 20, 1), ((2 << 20) + 4321, 2), (700_000, 3)]
        .iter()
        .map(|(len, seed)| (format!("/r/f{seed}"), data(*len, *seed)))
        .collect();
    for (p, d) in &files {
        let r = c.put_bytes(p, d, 1).unwrap();
        assert_eq!(r.bytes_sent, 2 * d.len() as u64, "two copies of every chunk sent");
        assert!(
            fully_replicated(&c, p, &[]),
            "{:?}",
            racks_of(&c.stat(p).unwrap().unwrap())
        );
    }
    // The first benefactor holding a chunk of f1 dies: everything reads back at once
    // (from the other copies), and its copies are made again.
    let f = c.stat("/r/f1").unwrap().unwrap();
    let x = f.chunks[0].node.clone();
    pool.kill_benefactor(x.trim_start_matches("node").parse().unwrap());
    for (p, d) in &files {
        assert_eq!(&c.get_bytes(p).unwrap().1, d, "{p} after {x} was killed");
    }
    let gone = vec![x.clone()];
    wait("re-replication", 30, || {
        files.iter().all(|(p, _)| fully_replicated(&c, p, &gone))
    });
    // A second benefactor dies, in the other rack: still nothing is lost, which only
    // the copies made after the first death allow.
    let f = c.stat("/r/f2").unwrap().unwrap();
    let y = f.chunks[0]
        .holders()
        .iter()
        .map(|(n, _)| n.to_string())
        .find(|n| rack(n) != rack(&x))
        .unwrap();
    pool.kill_benefactor(y.trim_start_matches("node").parse().unwrap());
    for (p, d) in &files {
        assert_eq!(&c.get_bytes(p).unwrap().1, d, "{p} after {x} and {y} were killed");
    }
    wait("death", 10, || {
        c.status().unwrap().iter().filter(|b| b.alive).count() == 2
    });
    // Two benefactors left, one per rack: the copies are made again on them.
    let gone = vec![x, y];
    wait("re-replication on the two left", 30, || {
        files.iter().all(|(p, _)| fully_replicated(&c, p, &gone))
    });
    for (p, d) in &files {
        assert_eq!(&c.get_bytes(p).unwrap().1, d);
    }
}

#[test]
fn with_two_replicas_a_benefactor_killed_mid_write_still_commits_a_whole_file() {
    let mut pool = Pool::start_with(
        12,
        Opts {
            replicas: 2,
            ..Opts::new(64 << 20, 2, false)
        },
    );
    let c = pool.client("node6", 128 << 10);
    let big = data(8 << 20, 21);
    let mut w = c.create("/mw/big", None).unwrap();
    w.write(&big[..2 << 20]).unwrap();
    pool.kill_benefactor(3);
    w.write(&big[2 << 20..]).unwrap();
    let r = w.commit(1, 0o644, None).unwrap();
    assert!(!r.stripe.contains(&"node3".to_string()), "{:?}", r.stripe);
    assert_eq!(c.get_bytes("/mw/big").unwrap().1, big);
    wait("re-replication", 30, || {
        let f = c.stat("/mw/big").unwrap().unwrap();
        f.state == "ok"
            && f.chunks.iter().all(|x| {
                let h = x.holders();
                h.len() == 2 && h.iter().all(|(n, a)| *a && *n != "node3")
            })
    });
    assert_eq!(c.get_bytes("/mw/big").unwrap().1, big);
}

#[test]
fn with_two_replicas_a_copy_with_wrong_bytes_is_passed_over() {
    let pool = Pool::start_with(
        13,
        Opts {
            replicas: 2,
            ..Opts::new(64 << 20, 1, false)
        },
    );
    let c = pool.client("node6", 1 << 20);
    let d = data(500_000, 31);
    c.put_bytes("/wb/x", &d, 1).unwrap();
    let f = c.stat("/wb/x").unwrap().unwrap();
    let liar: usize = f.chunks[0].node.trim_start_matches("node").parse().unwrap();
    pool.ben(liar).set_lie(true);
    assert_eq!(c.get_bytes("/wb/x").unwrap().1, d, "read from the other copy");
    // Both copies wrong: detected, not returned.
    for (n, _) in f.chunks[0].holders() {
        pool.ben(n.trim_start_matches("node").parse().unwrap())
            .set_lie(true);
    }
    assert!(matches!(c.get_bytes("/wb/x"), Err(PoolError::Corrupt { .. })));
}

/// A member that runs out of memory mid-write (ENOSPC) takes no more chunks, the plan is
/// extended to another benefactor, and the copies the full one acknowledged stay in the
/// chunk map: the file commits whole and reads back byte-identical.
#[test]
fn a_benefactor_full_mid_write_keeps_the_copies_it_acknowledged() {
    // Four 64 KiB chunks fit in each benefactor; the file has ten, the stripe one member.
    let pool = Pool::start(14, 256 << 10, 1, false);
    let c = pool.client("node6", 1 << 20);
    let d = data(600_000, 14);
    let r = c.put_bytes("/full/x", &d, 1).unwrap();
    assert!(
        r.stripe.len() >= 3,
        "extended past the full members: {:?}",
        r.stripe
    );
    assert_eq!(c.get_bytes("/full/x").unwrap().1, d);
    let f = c.stat("/full/x").unwrap().unwrap();
    let nodes: std::collections::BTreeSet<&str> = f.chunks.iter().map(|c| c.node.as_str()).collect();
    assert!(nodes.len() >= 3, "chunks on {nodes:?}");
    assert!(
        nodes.contains(r.stripe[0].as_str()),
        "the first (full) member's copies kept"
    );
}
