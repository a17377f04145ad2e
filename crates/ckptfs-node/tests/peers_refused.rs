//! What a daemon refuses from the network, and what it never stores: a wrong secret, a
//! peer sending garbage, paths that leave the partner namespace, a copy naming another
//! source node, a chunk with a wrong CRC (refused, then accepted when sent again), and a
//! copy cut off in the middle (never listed).

mod support;

use ckptfs_cluster::{Scheme, Secret};
use ckptfs_node::levels::Levels;
use ckptfs_node::partner_store;
use ckptfs_transport::{self as tp, ChunkHeader, ConnConfig, Msg, PutBegin, PutEnd};
use std::time::Duration;
use support::*;
use tokio::io::AsyncWriteExt;

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

/// Everything node `id` holds in its system namespace besides empty directories.
fn system_files(tc: &TestCluster, id: &str) -> Vec<String> {
    tc.store(id)
        .list_all_system()
        .into_iter()
        .filter(|(_, st)| st.kind == ckptfs_store::FileKind::File)
        .map(|(p, _)| p)
        .collect()
}

/// Wait until the daemon has dropped the connection (its handler ended).
async fn closed(conn: &mut tp::Conn) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(30), conn.recv()).await,
        Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secret_and_garbage_are_refused_and_nothing_is_written() {
    let tc = TestCluster::new("sec", 2, Scheme::Ring, 1);
    let d = Daemon::start(tc.config("node2"));
    let addr = tc.cluster.node("node2").unwrap().addr.clone();
    // The daemon is up once a proper client gets in.
    let t = std::time::Instant::now();
    while tp::connect(
        &addr,
        &identity(&tc, "node1"),
        "node2",
        &tc.cluster.node_keys("node1").unwrap(),
        &ConnConfig::default(),
    )
    .await
    .is_err()
    {
        assert!(t.elapsed() < Duration::from_secs(60), "daemon never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Keys from a wrong secret: refused during the handshake.
    let wrong = Secret::generate().unwrap();
    let ids = ["node1", "node2"];
    let wrong_keys = ckptfs_cluster::NodeKeys::derive(&wrong, &tc.cluster.job, "node1", ids);
    let e = tp::connect(
        &addr,
        &identity(&tc, "node1"),
        "node2",
        &wrong_keys,
        &ConnConfig::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.errno(), libc::EACCES, "{e}");
    // A node id not in the cluster, with a key derived from the right secret: refused too.
    let intruder = ckptfs_cluster::NodeKeys::derive(
        &tc.cluster.secret().unwrap(),
        &tc.cluster.job,
        "intruder",
        ["intruder", "node2"],
    );
    let e = tp::connect(
        &addr,
        &identity(&tc, "intruder"),
        "node2",
        &intruder,
        &ConnConfig::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.errno(), libc::EACCES, "{e}");
    // Garbage bytes: the connection is closed, nothing stored.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let _ = s.write_all(&[0xAB; 4096]).await;
    // (It may first be told why in an Error frame.)
    let mut rest = Vec::new();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncReadExt::read_to_end(&mut s, &mut rest),
    )
    .await;
    assert!(r.is_ok(), "garbage peer not disconnected");
    assert!(rest.len() < 2048, "answered garbage with {} bytes", rest.len());
    assert!(
        system_files(&tc, "node2").is_empty(),
        "{:?}",
        system_files(&tc, "node2")
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_escapes_and_foreign_source_are_refused_and_nothing_is_written() {
    let tc = TestCluster::new("esc", 2, Scheme::Ring, 1);
    let d = Daemon::start(tc.config("node2"));
    wait_for("node2's status", || {
        ckptfs_node::status(&tc.store_opts("node2").name).is_some()
    })
    .await;
    // Into ckptfs's own files (the levels record): disconnected.
    let mut c = client(&tc, "node1", "node2").await;
    c.send(&put_begin("node1", ".ckptfs/levels.json", 10))
        .await
        .unwrap();
    assert!(closed(&mut c).await, "a copy into /.ckptfs was not refused");
    // Into another node's partner namespace: disconnected.
    let mut c = client(&tc, "node1", "node2").await;
    c.send(&put_begin("node2", "ckpt/a", 10)).await.unwrap();
    assert!(
        closed(&mut c).await,
        "a copy naming another source node was not refused"
    );
    // Listing or fetching another node's copies: disconnected.
    let mut c = client(&tc, "node1", "node2").await;
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
    // `..` never reaches the daemon: the transport refuses to encode or decode it.
    let mut c = client(&tc, "node1", "node2").await;
    assert!(c.send(&put_begin("node1", "../../x", 10)).await.is_err());
    assert!(
        system_files(&tc, "node2").is_empty(),
        "{:?}",
        system_files(&tc, "node2")
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_chunk_is_refused_then_resent_and_a_cut_copy_is_never_listed() {
    let tc = TestCluster::new("crc", 2, Scheme::Ring, 1);
    let d = Daemon::start(tc.config("node2"));
    wait_for("node2's status", || {
        ckptfs_node::status(&tc.store_opts("node2").name).is_some()
    })
    .await;
    let data = bytes(300_000, 7);
    let (a, b) = data.split_at(200_000);
    let mut c = client(&tc, "node1", "node2").await;
    c.send(&put_begin("node1", "ckpt/x", data.len() as u64))
        .await
        .unwrap();
    assert!(matches!(c.recv().await.unwrap(), Msg::Ack { .. }));
    // First piece with a wrong CRC: refused at once (Nack EIO whose tag asks for the
    // chunk at offset 0 again), nothing stored; the chunk after it is dropped unread, and
    // so is an end of copy sent before the sender heard of the refusal.
    let mut h = ChunkHeader::for_data(0, 0, a);
    h.crc32c ^= 1;
    c.send_chunk(&h, a).await.unwrap();
    c.send_chunk(&ChunkHeader::for_data(1, a.len() as u64, b), b)
        .await
        .unwrap();
    c.send(&Msg::PutEnd(PutEnd {
        generation: 0,
        chunks: 2,
        size: data.len() as u64,
    }))
    .await
    .unwrap();
    match c.recv().await.unwrap() {
        Msg::Nack(n) => assert_eq!((n.errno, n.tag), (libc::EIO, 1), "{n:?}"),
        m => panic!("bad chunk acknowledged: {m:?}"),
    }
    // Sent again from there, right: no answer per chunk, the end is acknowledged.
    c.send_chunk(&ChunkHeader::for_data(2, 0, a), a).await.unwrap();
    assert!(
        partner_store::list(&tc.store("node2"), "node1").is_empty(),
        "listed before the end"
    );
    c.send_chunk(&ChunkHeader::for_data(3, a.len() as u64, b), b)
        .await
        .unwrap();
    c.send(&Msg::PutEnd(PutEnd {
        generation: 0,
        chunks: 4,
        size: data.len() as u64,
    }))
    .await
    .unwrap();
    assert!(matches!(c.recv().await.unwrap(), Msg::Ack { .. }));
    assert_eq!(copy_on(&tc.store("node2"), "node1", "/ckpt/x").unwrap(), data);
    wait_for("node2's status to count the refused chunk", || {
        ckptfs_node::status(&tc.store_opts("node2").name).is_some_and(|s| s.chunks_refused == 1)
    })
    .await;

    // A copy cut off in the middle (the sender dies): never listed, the half copy removed.
    let mut c = client(&tc, "node1", "node2").await;
    c.send(&put_begin("node1", "ckpt/y", data.len() as u64))
        .await
        .unwrap();
    assert!(matches!(c.recv().await.unwrap(), Msg::Ack { .. }));
    c.send_chunk(&ChunkHeader::for_data(0, 0, a), a).await.unwrap();
    wait_for("the half copy to arrive", || {
        system_files(&tc, "node2")
            .iter()
            .any(|p| p.starts_with(partner_store::INCOMING_DIR))
    })
    .await;
    assert!(partner_store::list(&tc.store("node2"), "node1").len() == 1);
    drop(c);
    let s = tc.store("node2");
    wait_for("the half copy to go", || {
        system_files(&tc, "node2")
            .iter()
            .all(|p| !p.starts_with(partner_store::INCOMING_DIR))
    })
    .await;
    let held: Vec<String> = partner_store::list(&s, "node1")
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(held, vec!["/ckpt/x"]);
    assert!(s.stat("/.ckptfs/partners/node1/ckpt/y").is_err());
    d.stop().await;
}

/// A fake partner (node2) that refuses the first chunk of a copy as damaged on the wire
/// (a Resend), once: the real sender (node1's daemon, whose copies go through the mover)
/// sends the copy again whole on a new connection (the refused attempt's writer dropped
/// unpublished), and records the copy only when the end is acknowledged.
/// The bytes the partner accepted are the file's, every chunk with the store's CRC32C.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_refused_on_arrival_is_sent_again_and_the_copy_completes() {
    let tc = TestCluster::new("resend", 2, Scheme::Ring, 1);
    let listener = listen(&tc.cluster.node("node2").unwrap().addr).await;
    let d1 = Daemon::start(tc.config("node1"));
    let data = bytes(200_000, 21);
    write(&tc.store("node1"), "/ckpt/r", &data);
    let keys = tc.cluster.node_keys("node2").unwrap();
    let cfg = ckptfs_partner::peer::conn_config(&tc.cluster);
    let me = identity(&tc, "node2");
    // Every connection served on its own task (heartbeats come on their own one).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Vec<u8>, Vec<u64>)>(1);
    let want = data.len();
    // Refused once over all connections; every chunk's offset, in the order sent.
    let refused_once = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let all_offsets = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = tokio::spawn(async move {
        loop {
            let (sock, _) = listener.accept().await.unwrap();
            let (keys, cfg, me, tx) = (keys.clone(), cfg.clone(), me.clone(), tx.clone());
            let (refused_once, all_offsets) = (refused_once.clone(), all_offsets.clone());
            tokio::spawn(async move {
                let Ok(mut c) = tp::accept(sock, &me, &keys, &cfg).await else {
                    return;
                };
                let mut file: Vec<u8> = Vec::new();
                loop {
                    match c.recv().await {
                        Ok(Msg::Heartbeat { seq, unix_ms }) => {
                            let _ = c.send(&Msg::Heartbeat { seq, unix_ms }).await;
                        }
                        Ok(Msg::PutBegin(b)) => {
                            assert_eq!((b.src_node.as_str(), b.path.as_str()), ("node1", "ckpt/r"));
                            c.send(&Msg::Ack { tag: 0 }).await.unwrap();
                        }
                        Ok(Msg::Chunk(h)) => {
                            let mut buf = vec![0u8; h.len as usize];
                            c.recv_chunk_data(&mut buf).await.unwrap();
                            all_offsets.lock().unwrap().push(h.offset);
                            if !refused_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                                // "Damaged on the wire": ask again from here.
                                c.send(&Msg::Nack(tp::Nack {
                                    tag: h.offset + 1,
                                    errno: libc::EIO,
                                    reason: "test: bad crc".into(),
                                }))
                                .await
                                .unwrap();
                                continue;
                            }
                            if h.offset as usize == file.len() {
                                file.extend_from_slice(&buf);
                            }
                        }
                        Ok(Msg::PutEnd(_)) => {
                            if file.len() == want {
                                c.send(&Msg::Ack { tag: 0 }).await.unwrap();
                                let offsets = all_offsets.lock().unwrap().clone();
                                let _ = tx.send((file, offsets)).await;
                                return;
                            }
                            // The end sent before the sender saw the Resend: no answer.
                        }
                        _ => return,
                    }
                }
            });
        }
    });
    let got = tokio::time::timeout(Duration::from_secs(120), rx.recv())
        .await
        .expect("the copy never completed")
        .unwrap();
    server.abort();
    let (file, offsets) = got;
    assert_eq!(file, data);
    // The first chunk went twice: refused, then again with the rest (the copy again).
    assert_eq!(offsets[0], 0);
    assert_eq!(offsets.iter().filter(|&&o| o == 0).count(), 2, "{offsets:?}");
    let s1 = tc.store("node1");
    let name1 = tc.store_opts("node1").name;
    wait_for("node1 to record the copy and the re-send", || {
        Levels::load(&s1)
            .files
            .get("/ckpt/r")
            .is_some_and(|f| f.partners == ["node2"])
            && ckptfs_node::status(&name1).is_some_and(|s| s.chunks_resent == 1)
    })
    .await;
    d1.stop().await;
}

/// A chunk damaged in the source's own memory (a flipped byte after it was written):
/// the store reader checks it in place against the CRC32C the store recorded before it
/// is sent, and the sender gives the copy up with EIO; the bad chunk never leaves the
/// source (the partner counts no refused chunk). No copy is ever stored or listed on the
/// partner; the source records "no copy" for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_damaged_at_the_source_is_never_stored_as_a_valid_copy() {
    let tc = TestCluster::new("dmg", 2, Scheme::Ring, 1);
    let s1 = tc.store("node1");
    let data = bytes(150_000, 5);
    write(&s1, "/ckpt/d", &data);
    let chunk = s1.chunk_list("/ckpt/d").unwrap()[1].clone();
    let ckptfs_store::ChunkLocation::Memory(off) = chunk.location else {
        panic!("a memory chunk expected: {chunk:?}");
    };
    let region = s1.data_region();
    assert!(off + 100 < region.len);
    // SAFETY: a byte inside the store's data region (bounds checked above), mapped
    // shared and writable by this process, which keeps `s1` (and so the mapping) alive;
    // nothing else writes this file now. This is the damage under test.
    unsafe { *(region.base as *mut u8).add(off as usize + 100) ^= 0x40 };
    let d1 = Daemon::start(tc.config("node1"));
    let d2 = Daemon::start(tc.config("node2"));
    wait_for("node1 to give the copy up", || {
        Levels::load(&s1)
            .files
            .get("/ckpt/d")
            .is_some_and(|f| f.refused.get("node2").is_some_and(|m| m.contains("corrupt here")))
    })
    .await;
    let s2 = tc.store("node2");
    assert!(copy_on(&s2, "node1", "/ckpt/d").is_none());
    assert!(partner_store::list(&s2, "node1").is_empty());
    assert!(Levels::load(&s1).files["/ckpt/d"].partners.is_empty());
    let (name1, name2) = (tc.store_opts("node1").name, tc.store_opts("node2").name);
    wait_for("node1 to count the refused copy", || {
        ckptfs_node::status(&name1).is_some_and(|s| s.copies_refused >= 1)
    })
    .await;
    assert!(ckptfs_node::status(&name2).is_some_and(|s| s.chunks_refused == 0));
    d1.stop().await;
    d2.stop().await;
}
