//! Issue 10 section 6 on simulated nodes (crates/ckptfs-netsim): every daemon in the
//! network namespace of its node, reaching the others only over the veth links on
//! their namespace addresses (the host has no route to them). Partner copies land on
//! the planned nodes for ring and mirror with k = 1 and 2, byte-identical and
//! CRC-verified; a partner SIGKILLed in the middle of a transfer lists no half copy and
//! gets the copy later; a wrong secret, a garbage-sending peer and path escapes from
//! another node are refused and nothing is written.
//!
//! The daemons run in this process, each on threads that joined its node's network
//! namespace (their stores, `hn-<tag>-<pid>.nodeI`, on the host's /dev/shm so the test
//! can inspect them), except the partner that is SIGKILLed: that one is this test
//! binary re-run as a child process (`netns_child_daemon`) inside the node's network
//! namespace. Needs root and iproute2: SKIPPED otherwise.

mod support;

use ckptfs_cluster::{Cluster, Scheme, Secret};
use ckptfs_netsim::{available, Sim, SimOptions};
use ckptfs_node::levels::Levels;
use ckptfs_node::{partner_store, NodeConfig, NodeSummary};
use ckptfs_transport::{self as tp, ConnConfig, Identity, Msg, PutBegin};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const PORT: u16 = 47100;
const CHILD_ENV: &str = "HND_NETNS_CHILD";

fn sim(n: usize) -> Option<Sim> {
    if let Err(why) = available() {
        ckptfs_testsupport::skip_root_only(why);
        return None;
    }
    let opts = SimOptions {
        tag: "hnd".into(),
        shm_size: "16m".into(),
        ..Default::default()
    };
    Some(Sim::new(n, opts).expect("simulated nodes"))
}

/// A cluster whose nodes are the simulated ones (each daemon on port 47100 of its own
/// namespace address).
fn cluster_on(sim: &Sim, tag: &str, scheme: Scheme, k: usize) -> TestCluster {
    let addrs = sim.nodes().iter().map(|n| format!("{}:{PORT}", n.ip)).collect();
    TestCluster::with_addrs(tag, addrs, scheme, k)
}

/// Poll until `ok` (generous deadline: CI runs everything in parallel on 2 cores).
fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A daemon of this process on a thread inside node `i`'s network namespace (its
/// runtime's threads are created there, so every socket it makes lives there).
struct NsDaemon {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<ckptfs_netsim::Result<ckptfs_node::Result<NodeSummary>>>>,
}

impl NsDaemon {
    fn start(sim: &Sim, i: usize, cfg: NodeConfig) -> NsDaemon {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = sim
            .node(i)
            .spawn_in_netns(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(ckptfs_node::run(cfg, async move {
                    let _ = rx.await;
                }))
            })
            .expect("thread in the node's namespace");
        NsDaemon {
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> NodeSummary {
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap().unwrap().unwrap()
    }
}

impl Drop for NsDaemon {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Node `id`'s store files under /.ckptfs.
fn system_files(tc: &TestCluster, id: &str) -> Vec<String> {
    tc.store(id)
        .list_all_system()
        .into_iter()
        .filter(|(_, st)| st.kind == ckptfs_store::FileKind::File)
        .map(|(p, _)| p)
        .collect()
}

/// The copy of `src`'s `path` on `store`, checked against the CRC32C of every chunk.
fn verified_copy(store: &ckptfs_store::Store, src: &str, path: &str) -> Option<Vec<u8>> {
    let data = copy_on(store, src, path)?;
    let mut f = store
        .open(
            &partner_store::copy_path(src, path),
            ckptfs_store::OpenFlags::READ,
            0,
        )
        .ok()?;
    f.verify_all().expect("the partner copy's chunks verify");
    Some(data)
}

/// Ring and mirror with k copies on simulated nodes: each node's file lands on exactly
/// its planned partners, byte-identical, every chunk verifying; nobody else holds it;
/// the peers see each other up over the simulated links.
fn copies_land_on_planned_partners(tag: &str, n: usize, scheme: Scheme, k: usize) {
    let Some(sim) = sim(n) else { return };
    let tc = cluster_on(&sim, tag, scheme, k).patient();
    let ids: Vec<String> = tc.cluster.nodes.iter().map(|n| n.id.clone()).collect();
    let daemons: Vec<NsDaemon> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| NsDaemon::start(&sim, i, tc.config(id)))
        .collect();
    let mut data = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        // Several chunks, not a multiple of the chunk size.
        let d = bytes(300_000 + i * 70_001, 40 + i as u32);
        write(&tc.store(id), "/ckpt/step1/rank.bin", &d);
        data.push(d);
    }
    for (i, id) in ids.iter().enumerate() {
        let partners = tc.partners_of(id);
        assert_eq!(partners.len(), k);
        for p in &partners {
            let s = tc.store(p);
            until(&format!("{id}'s copy on {p}"), || {
                copy_on(&s, id, "/ckpt/step1/rank.bin").is_some()
            });
            assert_eq!(
                verified_copy(&s, id, "/ckpt/step1/rank.bin").unwrap(),
                data[i],
                "{id} on {p}"
            );
        }
        let src = tc.store(id);
        // Every planned partner in the record (on a loaded machine a late heartbeat can
        // add the next eligible node as well, as the plan allows).
        until(&format!("{id}'s levels record"), || {
            Levels::load(&src)
                .files
                .get("/ckpt/step1/rank.bin")
                .is_some_and(|f| partners.iter().all(|p| f.partners.contains(p)))
        });
        let rec = Levels::load(&src).files["/ckpt/step1/rank.bin"].partners.clone();
        assert!(partners.iter().all(|p| rec.contains(p)), "{id}: {rec:?}");
    }
    for id in &ids {
        let s = tc.store(id);
        for src in &ids {
            let held = copy_on(&s, src, "/ckpt/step1/rank.bin").is_some();
            assert_eq!(held, tc.partners_of(src).contains(id), "{src}'s copy on {id}");
        }
        let names: Vec<String> = s.read_dir("/").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec!["ckpt"]);
        // Heartbeats go over the simulated links too.
        let name = tc.store_opts(id).name;
        until(&format!("{id} seeing every peer up"), || {
            ckptfs_node::status(&name).is_some_and(|st| st.peers.values().all(|p| p.up))
        });
    }
    for d in daemons {
        d.stop();
    }
}

#[test]
fn netns_ring_k1_copies_land_on_planned_partners() {
    copies_land_on_planned_partners("nsr1", 4, Scheme::Ring, 1);
}

#[test]
fn netns_ring_k2_copies_land_on_planned_partners() {
    copies_land_on_planned_partners("nsr2", 4, Scheme::Ring, 2);
}

#[test]
fn netns_mirror_k1_copies_land_on_planned_partners() {
    copies_land_on_planned_partners("nsm1", 4, Scheme::Mirror, 1);
}

#[test]
fn netns_mirror_k2_copies_land_on_planned_partners() {
    // Mirror groups of k + 1 = 3 nodes.
    copies_land_on_planned_partners("nsm2", 3, Scheme::Mirror, 2);
}

/// Not a test on its own: the partner daemon that `netns_partner_sigkilled_...` runs
/// as a child process (this binary re-run) so it can be SIGKILLed. Without its
/// environment variable it does nothing.
#[test]
#[ignore]
fn netns_child_daemon() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (file, id) = spec.split_once('|').expect("FILE|ID");
    let cluster = Cluster::load(std::path::Path::new(file)).expect("cluster file");
    let mut cfg = NodeConfig::new(cluster.clone(), id).unwrap();
    cfg.store = store_opts_for(&cluster, id);
    cfg.scan_interval = Duration::from_millis(50);
    ckptfs_node::run_blocking(cfg, std::future::pending::<()>()).unwrap();
}

/// This test binary as a child daemon for node `i` (network namespace only: its store
/// stays on the host's /dev/shm, where the test inspects it).
fn child_daemon(sim: &Sim, tc: &TestCluster, i: usize) -> Child {
    let id = format!("node{}", i + 1);
    Command::new("nsenter")
        .arg(format!("--net={}", sim.node(i).netns_path().display()))
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["netns_child_daemon", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_ENV, format!("{}|{id}", tc.file.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("child daemon")
}

struct Reap(Option<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The partner's daemon is SIGKILLed while a copy streams to it (the source throttled
/// to make the copy long): its half copy is never listed and the source records no
/// copy; when a daemon is back on that node, the half copy is removed and the copy is
/// completed, byte-identical.
#[test]
fn netns_partner_sigkilled_mid_transfer_lists_no_half_copy_and_gets_it_later() {
    let Some(sim) = sim(2) else { return };
    let tc = cluster_on(&sim, "nskill", Scheme::Ring, 1);
    let mut partner = Reap(Some(child_daemon(&sim, &tc, 1)));
    let s2 = tc.store("node2");
    let name2 = tc.store_opts("node2").name;
    until("node2's daemon", || {
        ckptfs_node::status(&name2).is_some_and(|s| s.running)
    });
    let mut c1 = tc.config("node1");
    c1.max_bw = Some(3e6);
    let d1 = NsDaemon::start(&sim, 0, c1);
    let s1 = tc.store("node1");
    let data = bytes(8 << 20, 77);
    write(&s1, "/ckpt/long", &data);
    // Some of the copy has arrived on node2 (published in its incoming file).
    until("part of the copy on node2", || {
        s2.list_all_system().iter().any(|(p, st)| {
            p.starts_with(partner_store::INCOMING_DIR) && st.size > 0 && st.size < data.len() as u64
        })
    });
    let mut c = partner.0.take().unwrap();
    c.kill().unwrap(); // SIGKILL
    c.wait().unwrap();
    // Never listed as a copy, never acknowledged to the source.
    assert!(partner_store::list(&s2, "node1").is_empty());
    assert!(copy_on(&s2, "node1", "/ckpt/long").is_none());
    let half: Vec<String> = system_files(&tc, "node2")
        .into_iter()
        .filter(|p| p.starts_with(partner_store::INCOMING_DIR))
        .collect();
    assert_eq!(half.len(), 1, "{half:?}");
    let acked = Levels::load(&s1)
        .files
        .get("/ckpt/long")
        .map(|f| f.partners.clone())
        .unwrap_or_default();
    assert!(acked.is_empty(), "a half copy acknowledged: {acked:?}");
    // A daemon again on node2: the half copy goes, the whole copy comes.
    partner.0 = Some(child_daemon(&sim, &tc, 1));
    until("the copy completed", || {
        copy_on(&s2, "node1", "/ckpt/long").is_some()
    });
    assert_eq!(verified_copy(&s2, "node1", "/ckpt/long").unwrap(), data);
    assert!(
        !system_files(&tc, "node2").contains(&half[0]),
        "half copy left behind"
    );
    until("node1's record of the copy", || {
        Levels::load(&s1)
            .files
            .get("/ckpt/long")
            .is_some_and(|f| f.partners == ["node2"])
    });
    d1.stop();
}

fn identity(tc: &TestCluster, id: &str) -> Identity {
    Identity {
        node_id: id.to_string(),
        job: tc.cluster.job.clone(),
    }
}

fn put_begin(src: &str, path: &str, size: u64) -> Msg {
    Msg::PutBegin(PutBegin {
        src_node: src.to_string(),
        path: path.to_string(),
        size,
        chunk_size: 1 << 20,
        mtime_ns: 0,
        generation: 0,
    })
}

/// Whether the daemon ends the connection (its handler gave up on the peer).
async fn closed(conn: &mut tp::Conn) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(60), conn.recv()).await,
        Ok(Err(_))
    )
}

/// From another simulated node: a wrong secret and a node id not in the map are refused
/// during the handshake; a peer sending garbage is disconnected with at most one short
/// refusal; an authenticated peer trying to write into /.ckptfs, into another node's
/// partner namespace or to list another node's copies is disconnected, and `..` never
/// leaves the sender. Nothing is written on the target.
#[test]
fn netns_wrong_secret_garbage_and_path_escapes_are_refused_and_nothing_is_written() {
    let Some(sim) = sim(2) else { return };
    let tc = cluster_on(&sim, "nsbad", Scheme::Ring, 1);
    let d2 = NsDaemon::start(&sim, 1, tc.config("node2"));
    let addr = tc.cluster.node("node2").unwrap().addr.clone();
    let master = tc.cluster.secret().unwrap();
    let keys = tc.cluster.node_keys("node1").unwrap();
    let job = tc.cluster.job.clone();
    let (me, stranger) = (identity(&tc, "node1"), identity(&tc, "intruder"));
    sim.node(0)
        .in_netns(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let cfg = ConnConfig::default();
                // Up once a proper client gets in.
                let t = Instant::now();
                while tp::connect(&addr, &me, "node2", &keys, &cfg).await.is_err() {
                    assert!(t.elapsed() < Duration::from_secs(120), "node2 never came up");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let wrong = Secret::generate().unwrap();
                let wrong = ckptfs_cluster::NodeKeys::derive(&wrong, &job, "node1", ["node1", "node2"]);
                let e = tp::connect(&addr, &me, "node2", &wrong, &cfg).await.unwrap_err();
                assert_eq!(e.errno(), libc::EACCES, "wrong secret: {e}");
                let intruder =
                    ckptfs_cluster::NodeKeys::derive(&master, &job, "intruder", ["intruder", "node2"]);
                let e = tp::connect(&addr, &stranger, "node2", &intruder, &cfg)
                    .await
                    .unwrap_err();
                assert_eq!(e.errno(), libc::EACCES, "unknown node: {e}");
                // Garbage: disconnected, told why in at most one short frame.
                let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
                let _ = tokio::io::AsyncWriteExt::write_all(&mut s, &[0xAB; 4096]).await;
                let mut rest = Vec::new();
                let r = tokio::time::timeout(
                    Duration::from_secs(60),
                    tokio::io::AsyncReadExt::read_to_end(&mut s, &mut rest),
                )
                .await;
                assert!(r.is_ok(), "garbage peer not disconnected");
                assert!(rest.len() < 2048, "answered garbage with {} bytes", rest.len());
                // Authenticated, then out of its own namespace.
                let mut c = tp::connect(&addr, &me, "node2", &keys, &cfg).await.unwrap();
                c.send(&put_begin("node1", ".ckptfs/levels.json", 10))
                    .await
                    .unwrap();
                assert!(closed(&mut c).await, "a copy into /.ckptfs was not refused");
                let mut c = tp::connect(&addr, &me, "node2", &keys, &cfg).await.unwrap();
                c.send(&put_begin("node2", "ckpt/a", 10)).await.unwrap();
                assert!(closed(&mut c).await, "a copy as another node was not refused");
                let mut c = tp::connect(&addr, &me, "node2", &keys, &cfg).await.unwrap();
                c.send(&Msg::List {
                    src_node: "node2".into(),
                    after: String::new(),
                })
                .await
                .unwrap();
                assert!(
                    closed(&mut c).await,
                    "listing another node's copies was not refused"
                );
                let mut c = tp::connect(&addr, &me, "node2", &keys, &cfg).await.unwrap();
                assert!(c.send(&put_begin("node1", "../../x", 10)).await.is_err());
            })
        })
        .expect("client in node1's namespace");
    assert!(
        system_files(&tc, "node2").is_empty(),
        "{:?}",
        system_files(&tc, "node2")
    );
    d2.stop();
}

/// Issue "Peer security" item 1 between simulated nodes: a local user of node3, whose
/// daemon is down, listens on node3's address and relays every connection to node1's
/// own daemon. node1 must not take its own daemon for node3: no copy of its own files
/// in its store, node3 never listed as holding one.
#[test]
fn netns_a_relay_on_a_down_partners_address_to_the_nodes_own_daemon_gets_nothing_listed() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let Some(sim) = sim(4) else { return };
    let tc = cluster_on(&sim, "nsrelay", Scheme::Ring, 1).patient();
    assert_eq!(tc.partners_of("node1"), ["node3"]);
    let n1 = tc.cluster.node("node1").unwrap().addr.clone();
    let n3 = tc.cluster.node("node3").unwrap().addr.clone();
    let conns = Arc::new(AtomicUsize::new(0));
    let seen = conns.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let relay = sim
        .node(2)
        .spawn_in_netns(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let l = tokio::net::TcpListener::bind(&n3)
                    .await
                    .expect("bind node3's address");
                let accept = async {
                    loop {
                        let Ok((mut a, _)) = l.accept().await else {
                            return;
                        };
                        seen.fetch_add(1, Ordering::Relaxed);
                        let to = n1.clone();
                        tokio::spawn(async move {
                            if let Ok(mut b) = tokio::net::TcpStream::connect(&to).await {
                                let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                            }
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stop_rx => {}
                }
            })
        })
        .expect("relay in node3's namespace");
    let d1 = NsDaemon::start(&sim, 0, tc.config("node1"));
    let s1 = tc.store("node1");
    write(&s1, "/ckpt/a.dat", &bytes(300_000, 1));
    until("node1 to reach node3's address (the relay)", || {
        conns.load(Ordering::Relaxed) >= 3
    });
    std::thread::sleep(Duration::from_secs(2));
    let rec = Levels::load(&s1);
    let f = rec.files.get("/ckpt/a.dat");
    assert!(
        f.is_none_or(|f| !f.partners.iter().any(|p| p == "node3")),
        "node3 listed as holding a copy: {f:?}"
    );
    assert!(
        s1.stat("/.ckptfs/partners/node1").is_err(),
        "node1 holds a 'partner copy' of its own files"
    );
    d1.stop();
    let _ = stop_tx.send(());
    let _ = relay.join();
}
