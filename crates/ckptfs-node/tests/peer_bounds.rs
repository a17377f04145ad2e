//! What a node accepts from an authenticated peer is bounded (issue 29): a Get naming a
//! directory of the partner namespace is EISDIR, not an empty file; a holder whose
//! listing never ends ("more follow" forever) is dropped by the restore at a bound, the
//! holder and the bound named, and the files come from an honest holder.

mod support;

use ckptfs_cluster::Scheme;
use ckptfs_node::partner_store::{copy_path, HeldFile};
use ckptfs_partner::peer::{Conn, Msg};
use ckptfs_transport as tp;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

fn get(path: &str) -> tp::Msg {
    tp::Msg::Get {
        src_node: "node1".into(),
        path: path.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_naming_a_directory_of_the_partner_namespace_is_eisdir_not_an_empty_file() {
    let tc = TestCluster::new("bnd-dir", 2, Scheme::Ring, 1);
    let s2 = tc.store("node2");
    let data = bytes(100_000, 3);
    write(&s2, &copy_path("node1", "/ckpt/sub/x"), &data);
    let d = Daemon::start(tc.config("node2"));
    let mut c = client(&tc, "node1", "node2").await;
    for dir in ["ckpt", "ckpt/sub"] {
        c.send(&get(dir)).await.unwrap();
        match c.recv().await.unwrap() {
            tp::Msg::Nack(n) => assert_eq!(n.errno, libc::EISDIR, "Get {dir}: {n:?}"),
            m => panic!("Get {dir} answered {m:?}"),
        }
    }
    // The connection is still in step: the file itself is served whole.
    c.send(&get("ckpt/sub/x")).await.unwrap();
    match c.recv().await.unwrap() {
        tp::Msg::PutBegin(b) => assert_eq!(b.size, data.len() as u64),
        m => panic!("Get of the copy answered {m:?}"),
    }
    let mut got = Vec::new();
    loop {
        match c.recv().await.unwrap() {
            tp::Msg::Chunk(h) => {
                let mut buf = vec![0u8; h.len as usize];
                c.recv_chunk_data(&mut buf).await.unwrap();
                got.extend_from_slice(&buf);
            }
            tp::Msg::PutEnd(_) => break,
            m => panic!("in the copy: {m:?}"),
        }
    }
    assert_eq!(got, data);
    d.stop().await;
}

/// Anonymous resident memory of this process (RssAnon: the store mappings, shared
/// memory the daemons populate, left out), bytes.
fn rss_anon() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Samples [`rss_anon`] every 10 ms until stopped; the largest seen.
struct RssPeak {
    stop: Arc<std::sync::atomic::AtomicBool>,
    t: std::thread::JoinHandle<u64>,
}

impl RssPeak {
    fn start() -> RssPeak {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            let mut peak = rss_anon();
            while !s.load(Ordering::SeqCst) {
                peak = peak.max(rss_anon());
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        });
        RssPeak { stop, t }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.t.join().unwrap()
    }
}

/// A hostile node3: authenticates properly, answers heartbeats, and answers every List
/// with a page of new entries and "more follow", forever (it stops after 300 pages so
/// that the code before the fix, which kept asking, could not take the machine's
/// memory: the test then fails on the page count). Returns the pages it sent.
async fn hostile_holder(tc: &TestCluster) -> Arc<AtomicU64> {
    let listener = listen(&tc.cluster.node("node3").unwrap().addr).await;
    let (cluster, keys) = (tc.cluster.clone(), tc.cluster.node_keys("node3").unwrap());
    let pages = Arc::new(AtomicU64::new(0));
    let served = pages.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let (cluster, keys, served) = (cluster.clone(), keys.clone(), served.clone());
            tokio::spawn(async move {
                let Ok(mut c) = Conn::accept(sock, "node3", &keys, &cluster).await else {
                    return;
                };
                while let Ok(Some(m)) = c.recv().await {
                    let reply = match m {
                        Msg::Heartbeat => Msg::Heartbeat,
                        Msg::List { .. } => {
                            let p = served.fetch_add(1, Ordering::SeqCst);
                            if p >= 300 {
                                return;
                            }
                            let files = (0..100)
                                .map(|i| HeldFile {
                                    path: format!("/ckpt/h{p:06}-{i:03}"),
                                    size: 1000,
                                    mtime_ns: 1,
                                    crc32c: Some(0),
                                    generation: 0,
                                })
                                .collect();
                            Msg::Listing { files, more: true }
                        }
                        _ => return,
                    };
                    if c.send(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    pages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_always_says_more_is_dropped_at_a_bound_and_an_honest_one_restores() {
    let tc = TestCluster::new("bnd-list", 3, Scheme::Ring, 1);
    let pages = hostile_holder(&tc).await;
    // node2 honestly holds node1's two files.
    let s2 = tc.store("node2");
    let (a, b) = (bytes(200_000, 1), bytes(70_000, 2));
    write(&s2, &copy_path("node1", "/ckpt/a"), &a);
    write(&s2, &copy_path("node1", "/ckpt/b"), &b);
    let d2 = Daemon::start(tc.config("node2"));
    drop(client(&tc, "node1", "node2").await);
    // node1 lost its store: restore from the peers.
    let s1 = tc.store("node1");
    let before = rss_anon();
    let peak = RssPeak::start();
    let t = Instant::now();
    let (cluster, s1b) = (tc.cluster.clone(), s1.clone());
    let rep = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || {
            ckptfs_node::restore_from_peers_blocking(&cluster, "node1", &s1b, "/")
        }),
    )
    .await
    .expect("the restore never ended")
    .unwrap()
    .unwrap();
    let grew = peak.stop().saturating_sub(before);
    // The hostile listing ended at its first bound: this store holds 256 files (the test
    // stores' max_files), so one page (256 / 4096 + 1) of at most 256 entries. Twice:
    // the restore's listing, and node2's daemon, which asks every node that answers
    // heartbeats for copies of its files at start (the same bound), each asking for
    // at most 2 pages and a page in flight.
    let served = pages.load(Ordering::SeqCst);
    assert!(served <= 6, "the hostile holder was asked for {served} pages");
    assert!(grew < 256 << 20, "anonymous RSS grew by {grew} bytes");
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    let why = rep.unreachable.get("node3").expect("node3's listing used");
    assert!(
        why.contains("node3") && why.contains("more than 1 pages") && why.contains("not used"),
        "{why}"
    );
    // Everything came from the honest holder, byte-identical.
    let mut from: Vec<(String, String)> = rep
        .restored
        .iter()
        .map(|r| (r.path.clone(), r.from.clone()))
        .collect();
    from.sort();
    assert_eq!(
        from,
        [
            ("/ckpt/a".to_string(), "node2".to_string()),
            ("/ckpt/b".to_string(), "node2".to_string())
        ]
    );
    assert!(rep.failed.is_empty(), "{:?}", rep.failed);
    assert_eq!(read(&s1, "/ckpt/a").unwrap(), a);
    assert_eq!(read(&s1, "/ckpt/b").unwrap(), b);
    d2.stop().await;
}
