//! Peer security, as an attacker and a fault injector tried it (issue "Peer security"):
//! a relay on a partner's port, a relay that changes chunk bytes, a node acting as
//! another with its own credentials, copies from a node that is not a partner, the
//! partner quota under concurrent copies and by default, memory taken only as bytes
//! arrive, and idle unauthenticated connections against the descriptor limit. Each is
//! what the attack did on the code before this change (its one shared secret, a default
//! connection config with no expected peer, a limit counted only on stored bytes, chunks
//! taken as headers announced them, the 1,024-descriptor soft limit).

mod support;

use ckptfs_cluster::Scheme;
use ckptfs_node::levels::Levels;
use ckptfs_transport::frame::{encode_header, MsgType, CHUNK_FIXED, HEADER_LEN};
use ckptfs_transport::{self as tp, Msg, PutBegin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn put_begin(src: &str, path: &str, size: u64, chunk: u32) -> Msg {
    Msg::PutBegin(PutBegin {
        src_node: src.into(),
        path: path.into(),
        size,
        chunk_size: chunk,
        mtime_ns: 0,
        generation: 0,
    })
}

/// A byte relay from `listen` to `to`; `tamper` may change each client-to-server frame
/// (handshake frames untagged, later ones with their 16-byte tag). Counts connections.
async fn relay(
    listen: TcpListener,
    to: String,
    tamper: Option<fn(&mut [u8])>,
    conns: Arc<AtomicUsize>,
    changed: Arc<AtomicUsize>,
) {
    loop {
        let Ok((mut a, _)) = listen.accept().await else {
            return;
        };
        conns.fetch_add(1, Ordering::Relaxed);
        let to = to.clone();
        let changed = changed.clone();
        tokio::spawn(async move {
            let Ok(mut b) = TcpStream::connect(&to).await else {
                return;
            };
            let (mut ar, mut aw) = a.split();
            let (mut br, mut bw) = b.split();
            let up = async {
                // Frame by frame: Hello and Response carry no tag, every frame after
                // them one of 16 bytes.
                let mut n = 0usize;
                loop {
                    let mut h = [0u8; HEADER_LEN];
                    if ar.read_exact(&mut h).await.is_err() {
                        break;
                    }
                    let len = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
                    let tag = if n >= 2 { 16 } else { 0 };
                    let mut f = h.to_vec();
                    f.resize(HEADER_LEN + len + tag, 0);
                    if ar.read_exact(&mut f[HEADER_LEN..]).await.is_err() {
                        break;
                    }
                    if let (Some(t), true) = (tamper, h[5] == MsgType::Chunk as u8) {
                        t(&mut f);
                        changed.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                    if bw.write_all(&f).await.is_err() {
                        break;
                    }
                }
                let _ = bw.shutdown().await;
            };
            let down = tokio::io::copy(&mut br, &mut aw);
            let _ = tokio::join!(up, down);
        });
    }
}

/// Flips the first data byte of a chunk frame and recomputes its CRC32C (what a relay
/// without the key can do: the CRC is not a MAC).
fn flip_and_recrc(f: &mut [u8]) {
    let data = HEADER_LEN + CHUNK_FIXED;
    let len = u32::from_le_bytes(f[HEADER_LEN + 16..HEADER_LEN + 20].try_into().unwrap()) as usize;
    if len == 0 {
        return;
    }
    f[data] ^= 0x01;
    let crc = tp::crc32c(&f[data..data + len]);
    f[HEADER_LEN + 20..HEADER_LEN + 24].copy_from_slice(&crc.to_le_bytes());
}

/// A local user without the keys listens on the port of node1's partner (node3, whose
/// daemon is down) and relays every connection to node1's own daemon. node1 must not
/// take its own daemon for node3: no copy in its own store, node3 never listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_on_a_down_partners_port_to_the_nodes_own_daemon_gets_nothing_listed() {
    let tc = TestCluster::new("sec-relay", 4, Scheme::Ring, 1).patient();
    assert_eq!(tc.partners_of("node1"), ["node3"]);
    let n1 = tc.cluster.node("node1").unwrap().addr.clone();
    let n3 = tc.cluster.node("node3").unwrap().addr.clone();
    let (conns, changed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let l = listen(&n3).await;
    let r = tokio::spawn(relay(l, n1, None, conns.clone(), changed));
    let s1 = tc.store("node1");
    let d1 = Daemon::start(tc.config("node1"));
    write(&s1, "/ckpt/a.dat", &bytes(300_000, 1));
    wait_for("node1 to try node3 through the relay", || {
        conns.load(Ordering::Relaxed) >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
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
    d1.stop().await;
    r.abort();
}

/// A relay between node1 and the real node3 changes a byte of every chunk and makes
/// the CRC32C match. node3 must never store the altered bytes, and node1 must not
/// list the copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_changes_chunk_bytes_and_their_crc_never_gets_them_stored() {
    let tc = TestCluster::new("sec-tamper", 4, Scheme::Ring, 1).patient();
    let real3 = tc.cluster.node("node3").unwrap().addr.clone();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = l.local_addr().unwrap().to_string();
    let (conns, changed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let r = tokio::spawn(relay(l, real3, Some(flip_and_recrc), conns, changed.clone()));
    // node1 reaches node3 through the relay; node3 listens on its own address.
    let mut c1 = tc.config("node1");
    for n in c1.cluster.nodes.iter_mut().filter(|n| n.id == "node3") {
        n.addr = relay_addr.clone();
    }
    let d3 = Daemon::start(tc.config("node3"));
    let d1 = Daemon::start(c1);
    let data = bytes(300_000, 2);
    let s1 = tc.store("node1");
    write(&s1, "/ckpt/b.dat", &data);
    wait_for("the relay to change chunks", || {
        changed.load(Ordering::Relaxed) >= 5
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s3 = tc.store("node3");
    if let Some(held) = copy_on(&s3, "node1", "/ckpt/b.dat") {
        assert!(held == data, "node3 stored bytes the relay changed");
    }
    let rec = Levels::load(&s1);
    assert!(
        rec.files
            .get("/ckpt/b.dat")
            .is_none_or(|f| !f.partners.iter().any(|p| p == "node3")),
        "a copy through the tampering relay was listed"
    );
    wait_for("node3 to count the refused chunks", || {
        ckptfs_node::status(&tc.store_opts("node3").name).is_some_and(|s| s.chunks_refused >= 1)
    })
    .await;
    d1.stop().await;
    d3.stop().await;
    r.abort();
}

/// With node2's credentials one can act as node2 only: claiming to be node1 toward
/// node3 fails, so node1's copies on node3 can be neither read, listed, overwritten,
/// deleted nor added to; as itself node2 reaches only its own namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_credentials_act_only_as_that_node() {
    let tc = TestCluster::new("sec-ident", 4, Scheme::Ring, 1).patient();
    let d1 = Daemon::start(tc.config("node1"));
    let d3 = Daemon::start(tc.config("node3"));
    drop(client(&tc, "node2", "node3").await);
    drop(client(&tc, "node2", "node1").await);
    let k2 = tc.cluster.node_keys("node2").unwrap();
    assert!(k2.pair("node1").is_some() && k2.pair("node3").is_some());
    // node2's keys, node1's name: refused.
    let e = tp::connect(
        &tc.cluster.node("node3").unwrap().addr,
        &identity(&tc, "node1"),
        "node3",
        &k2,
        &ckptfs_partner::peer::conn_config(&tc.cluster),
    )
    .await
    .unwrap_err();
    assert_eq!(e.errno(), libc::EACCES, "{e}");
    // As itself, node2 writes only under its own name: its copy lands in node2's
    // partner namespace on node3 (node3 is one of its replacements), never node1's.
    let mut c = client(&tc, "node2", "node3").await;
    assert!(send_copy(&mut c, "node2", "ckpt/x", 1000).await);
    let s3 = tc.store("node3");
    assert!(copy_on(&s3, "node2", "/ckpt/x").is_some());
    assert!(s3.stat("/.ckptfs/partners/node1").is_err());
    d1.stop().await;
    d3.stop().await;
}

/// Sends a whole copy of `len` bytes of `path` on `c`; true when it was acknowledged.
async fn send_copy(c: &mut tp::Conn, src: &str, path: &str, len: usize) -> bool {
    match put_copy(c, src, path, &bytes(len, len as u32), 0).await {
        Ok(acked) => acked,
        Err(n) => {
            assert_eq!(n.errno, libc::ENOSPC, "{n:?}");
            false
        }
    }
}

/// `--partner-max 8M` and four 8 MiB copies offered at once: one is taken, three are
/// refused with ENOSPC (the limit is reserved when a copy begins, atomically).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_copies_cannot_pass_the_partner_limit_together() {
    let tc = TestCluster::new("sec-quota", 4, Scheme::Ring, 1).patient();
    let mut cfg = tc.config("node3");
    cfg.partner_limit = Some(8 << 20);
    let d3 = Daemon::start(cfg);
    drop(client(&tc, "node1", "node3").await);
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(client(&tc, "node1", "node3").await);
    }
    for (i, c) in conns.iter_mut().enumerate() {
        c.send(&put_begin("node1", &format!("ckpt/q{i}"), 8 << 20, 64 << 10))
            .await
            .unwrap();
    }
    let mut acks = 0;
    for c in conns.iter_mut() {
        match c.recv().await.unwrap() {
            Msg::Ack { .. } => acks += 1,
            Msg::Nack(n) => assert_eq!(n.errno, libc::ENOSPC, "{n:?}"),
            m => panic!("{m:?}"),
        }
    }
    assert_eq!(acks, 1, "copies accepted together past the limit");
    d3.stop().await;
}

/// With no limit set, other nodes' copies hold at most half of a 64 MiB store, and the
/// node's own application can still write what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_peers_cannot_take_the_store_from_the_application() {
    let tc = TestCluster::new("sec-share", 4, Scheme::Ring, 1).patient();
    let d3 = Daemon::start(tc.config("node3"));
    drop(client(&tc, "node1", "node3").await);
    let mut c = client(&tc, "node1", "node3").await;
    let mut taken = 0;
    for i in 0..47 {
        if send_copy(&mut c, "node1", &format!("ckpt/f{i}"), 1 << 20).await {
            taken += 1;
        }
    }
    assert!((16..=32).contains(&taken), "{taken} one-MiB copies taken");
    // The application writes 28 MiB into its own store.
    let s3 = tc.store("node3");
    let mut f = s3
        .open("/app.dat", ckptfs_store::OpenFlags::CREATE, 0o644)
        .unwrap();
    f.write_all(&bytes(28 << 20, 9)).unwrap();
    f.close().unwrap();
    d3.stop().await;
}

/// A chunk header that announces 20 MiB followed by 120 bytes takes one chunk of the
/// store, not 20 MiB of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_announced_but_not_sent_takes_no_memory() {
    let tc = TestCluster::new("sec-lazy", 4, Scheme::Ring, 1).patient();
    let d3 = Daemon::start(tc.config("node3"));
    drop(client(&tc, "node1", "node3").await);
    let s3 = tc.store("node3");
    let mut c = client(&tc, "node1", "node3").await;
    let size: u32 = 20 << 20;
    c.send(&put_begin("node1", "ckpt/big", size as u64, 32 << 20))
        .await
        .unwrap();
    assert!(matches!(c.recv().await.unwrap(), Msg::Ack { .. }));
    let free = s3.info().mem_free_chunks;
    let mut raw = c.into_raw().unwrap();
    let mut f = encode_header(MsgType::Chunk, CHUNK_FIXED as u32 + size).to_vec();
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&size.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&[7u8; 120]);
    raw.stream().write_all(&f).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let taken = free - s3.info().mem_free_chunks;
    assert!(taken <= 2, "{taken} chunks of 64 KiB taken for 120 bytes");
    drop(raw);
    d3.stop().await;
}

/// 1,100 idle connections that never authenticate, against a process that started
/// with the usual soft limit of 1,024 descriptors: an honest peer still gets in at once
/// and its copy is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_unauthenticated_connections_do_not_keep_honest_peers_out() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid, writable rlimit for the calls.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max.min(1024);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let tc = TestCluster::new("sec-fds", 4, Scheme::Ring, 1).patient();
    let d3 = Daemon::start(tc.config("node3"));
    drop(client(&tc, "node1", "node3").await);
    let addr = tc.cluster.node("node3").unwrap().addr.clone();
    let mut idle = Vec::new();
    for _ in 0..1100 {
        match TcpStream::connect(&addr).await {
            Ok(s) => idle.push(s),
            Err(e) => panic!("opening idle connection {}: {e}", idle.len()),
        }
    }
    let t = Instant::now();
    let mut c = tokio::time::timeout(Duration::from_secs(10), client(&tc, "node1", "node3"))
        .await
        .expect("an honest peer was kept out");
    assert!(send_copy(&mut c, "node1", "ckpt/honest", 200_000).await);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    drop(idle);
    d3.stop().await;
}
