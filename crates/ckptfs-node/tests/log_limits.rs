//! Log lines a peer can cause are rate-limited (issue 29, failure case 37 of
//! docs/cluster.md): an authenticated peer that connects and breaks the protocol 200
//! times gets one WARN line per 10 s, then one line counting the rest; the refusal
//! line of the accept loop (`ratelimit::refused_connection`) likewise, per source
//! address. The log is captured by a subscriber of this test binary.

mod support;

use ckptfs_cluster::Scheme;
use ckptfs_transport::{self as tp, ConnConfig, Identity, PutEnd};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use support::*;

#[derive(Clone)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log of this process so far (the subscriber installed on first call).
fn log() -> String {
    static BUF: OnceLock<Captured> = OnceLock::new();
    let buf = BUF.get_or_init(|| {
        let c = Captured(Arc::new(Mutex::new(Vec::new())));
        let w = c.clone();
        tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_writer(move || w.clone())
                .with_ansi(false)
                .with_max_level(tracing::Level::WARN)
                .finish(),
        )
        .unwrap();
        c
    });
    String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned()
}

fn count(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_breaking_the_protocol_200_times_is_logged_once_then_counted() {
    log();
    let tc = TestCluster::new("bnd-log", 2, Scheme::Ring, 1);
    let d = Daemon::start(tc.config("node2"));
    let keys = tc.cluster.node_keys("node1").unwrap();
    let id = Identity {
        node_id: "node1".into(),
        job: tc.cluster.job.clone(),
    };
    let addr = tc.cluster.node("node2").unwrap().addr.clone();
    let up = Instant::now();
    while tp::connect(&addr, &id, "node2", &keys, &ConnConfig::default())
        .await
        .is_err()
    {
        assert!(up.elapsed() < Duration::from_secs(60), "node2 never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t = Instant::now();
    for _ in 0..200 {
        let mut c = tp::connect(&addr, &id, "node2", &keys, &ConnConfig::default())
            .await
            .unwrap();
        // An end of copy outside a copy: the daemon disconnects the peer.
        c.send(&tp::Msg::PutEnd(PutEnd {
            generation: 0,
            chunks: 0,
            size: 0,
        }))
        .await
        .unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(30), c.recv()).await;
    }
    let took = t.elapsed();
    // Each handler logs when it ends: let the last ones finish.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lines = count(&log(), "peer node1: disconnected");
    let allowed = 2 + took.as_secs() as usize / 10;
    assert!(
        (1..=allowed).contains(&lines),
        "{lines} lines for 200 disconnections in {took:?}:\n{}",
        log()
    );
    // When the period ends, one line counts the rest.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let l = log();
    assert!(
        l.lines()
            .any(|x| x.contains("peer node1:") && x.contains("more disconnections in the last 10 s")),
        "{l}"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_logged_once_per_address_then_counted() {
    log();
    let a: std::net::SocketAddr = "127.0.0.9:4000".parse().unwrap();
    let b: std::net::SocketAddr = "127.0.0.10:4000".parse().unwrap();
    for i in 0..6500u32 {
        let from = std::net::SocketAddr::new(a.ip(), 4000 + (i % 1000) as u16);
        ckptfs_node::ratelimit::refused_connection("nodeX", from, &"authentication failed");
    }
    ckptfs_node::ratelimit::refused_connection("nodeX", b, &"authentication failed");
    let l = log();
    assert_eq!(count(&l, "refused connection from 127.0.0.9:"), 1, "{l}");
    assert_eq!(count(&l, "refused connection from 127.0.0.10:"), 1, "{l}");
    tokio::time::sleep(Duration::from_secs(11)).await;
    let l = log();
    assert_eq!(
        count(
            &l,
            "refused 6499 more connections from 127.0.0.9 in the last 10 s"
        ),
        1,
        "{l}"
    );
    assert_eq!(count(&l, "more connections from 127.0.0.10"), 0, "{l}");
}
