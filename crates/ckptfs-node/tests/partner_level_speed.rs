//! Not a timed test (ignored; prints figures): the daemon's own partner-copy pass
//! against the generic mover through the level interface, `fill(StoreLevel,
//! PartnerLevel)`, copying the same size of file to the same partner daemon over
//! loopback, in one process. Answers whether the replicator can become a `fill`
//! without losing speed (docs/design.md, "Where the next levels plug in").
//!
//! `cargo test --release -p ckptfs-node --test partner_level_speed -- --ignored --nocapture`

mod support;

use ckptfs_agent::mover::fill;
use ckptfs_cluster::Scheme;
use ckptfs_node::PartnerLevel;
use ckptfs_store::level::StoreLevel;
use ckptfs_store::{Store, StoreOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

const SIZE: usize = 256 << 20;
const REPS: usize = 3;

fn big(tc: &TestCluster, id: &str) -> StoreOptions {
    StoreOptions {
        mem_size: Some(4 * SIZE as u64 + (64 << 20)),
        chunk_size: Some(1 << 20),
        ..tc.store_opts(id)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test: run with --ignored --nocapture in release mode"]
async fn replicator_pass_against_fill_through_the_partner_level() {
    let tc = Arc::new(TestCluster::new("hpv-speed", 2, Scheme::Ring, 1));
    for id in ["node1", "node2"] {
        let _ = Store::destroy(&big(&tc, id).name);
        Store::open_or_create(&big(&tc, id)).unwrap();
    }
    let mut c2 = tc.config("node2");
    c2.store = big(&tc, "node2");
    c2.partner_priority = ckptfs_node::Priority::Normal;
    let d2 = Daemon::start(c2);
    let s1 = Store::open_or_create(&big(&tc, "node1")).unwrap();
    let s2 = Store::open_or_create(&big(&tc, "node2")).unwrap();
    let data = bytes(SIZE, 9);

    // The replicator: node1's daemon copies each new file; timed from the file's close
    // to its copy listed complete on node2.
    let mut c1 = tc.config("node1");
    c1.store = big(&tc, "node1");
    c1.scan_interval = Duration::from_millis(2);
    // The copy threads at the test thread's priority (the default, low, is nice 10).
    c1.partner_priority = ckptfs_node::Priority::Normal;
    let d1 = Daemon::start(c1);
    let mut daemon = Vec::new();
    for r in 0..REPS {
        let path = format!("/d/r{r}");
        write(&s1, &path, &data);
        let t = Instant::now();
        let held = || {
            let p = ckptfs_node::partner_store::copy_path("node1", &path);
            s2.stat(&p)
                .is_ok_and(|st| st.state == ckptfs_store::WriteState::Complete)
        };
        while !held() {
            assert!(t.elapsed() < Duration::from_secs(120), "no copy of {path}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        daemon.push(t.elapsed().as_secs_f64());
        s1.unlink(&path).unwrap();
    }
    d1.stop().await;

    // The generic mover through the levels: same sizes, same partner daemon.
    let mut level = Vec::new();
    for r in 0..REPS {
        let path = format!("/f/r{r}");
        write(&s1, &path, &data);
        let tcl = tc.clone();
        let st = s1.clone();
        let secs = tokio::task::spawn_blocking(move || {
            let local = StoreLevel::new(&st).unwrap();
            let p = PartnerLevel::new(&tcl.cluster, "node1", "node2").unwrap();
            p.connect().unwrap();
            let t = Instant::now();
            let rep = fill(&local, &p, "/f", None).unwrap();
            let secs = t.elapsed().as_secs_f64();
            assert_eq!(rep.copied, std::slice::from_ref(&path), "{rep:?}");
            st.unlink(&path).unwrap();
            secs
        })
        .await
        .unwrap();
        level.push(secs);
    }
    d2.stop().await;
    let gbs = |s: f64| SIZE as f64 / s / 1e9;
    let (a, b) = (median(daemon), median(level));
    println!(
        "partner copy of {} MiB, median of {REPS}: replicator pass {a:.4} s ({:.2} GB/s), \
         fill(StoreLevel, PartnerLevel) {b:.4} s ({:.2} GB/s), fill speed / replicator speed {:.2}",
        SIZE >> 20,
        gbs(a),
        gbs(b),
        a / b
    );
    for id in ["node1", "node2"] {
        let _ = Store::destroy(&big(&tc, id).name);
    }
}
