//! Copies out step back while an application writes into the node's store
//! (`NodeConfig::writer_yield`, `ckptfs node --writer-yield`): they wait while the
//! store's write count moves, go on when it stops, and never wait forever. The waits'
//! lengths are tested exactly in `replicate.rs` (tokio's paused clock); these run the
//! daemons.

mod support;

use ckptfs_cluster::Scheme;
use ckptfs_store::{OpenFlags, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

/// An application writing into `store` without a pause until `stop` is set: 4 KiB
/// `pwrite`s over the first MiB of `/app/w` (each one a counted write).
fn app_writing(store: Store, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let _ = store.mkdir("/app", 0o755);
        let mut f = store.open("/app/w", OpenFlags::CREATE, 0o644).unwrap();
        let block = vec![7u8; 4096];
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            f.pwrite(&block, (n % 256) * 4096).unwrap();
            n += 1;
        }
        f.close().unwrap();
        n
    })
}

/// Both nodes' daemons (node1's copies out with `writer_yield`), their stores, and an
/// application writing into node1's store until the flag is set: (d1, d2, s1, s2, stop,
/// app).
struct Bed(
    Daemon,
    Daemon,
    Store,
    Store,
    Arc<AtomicBool>,
    std::thread::JoinHandle<u64>,
);

impl Bed {
    fn start(tc: &TestCluster, writer_yield: Duration) -> Bed {
        let mut c1 = tc.config("node1");
        c1.writer_yield = writer_yield;
        let d1 = Daemon::start(c1);
        // node2 keeps a 40 MiB copy in its 64 MiB store: past the default partner share.
        let mut c2 = tc.config("node2");
        c2.partner_share = 1.0;
        let d2 = Daemon::start(c2);
        let (s1, s2) = (tc.store("node1"), tc.store("node2"));
        let stop = Arc::new(AtomicBool::new(false));
        let app = app_writing(s1.clone(), stop.clone());
        Bed(d1, d2, s1, s2, stop, app)
    }
}

fn yielded(tc: &TestCluster, id: &str) -> f64 {
    ckptfs_node::status(&tc.store_opts(id).name).map_or(0.0, |s| s.yielded_s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_waits_while_the_application_writes_and_goes_on_when_it_stops() {
    let tc = TestCluster::new("yield-wait", 2, Scheme::Ring, 1);
    let Bed(d1, d2, s1, s2, stop, app) = Bed::start(&tc, Duration::from_secs(60));
    // A checkpoint of 640 chunks closed while the application goes on writing: each
    // chunk waits for a 2 ms pause of the writes. (On a loaded machine the writer is
    // itself off the CPU now and then, and the copy may go on meanwhile: the waits'
    // exact lengths are tested on tokio's paused clock, replicate.rs. Here: the daemon
    // does step back, and the copy is whole afterwards.)
    let data = bytes(40 << 20, 9);
    write(&s1, "/ckpt/a", &data);
    wait_for("the copy to step back", || yielded(&tc, "node1") > 0.0).await;
    stop.store(true, Ordering::Relaxed);
    assert!(app.join().unwrap() > 0);
    wait_for("the copy after the writes", || {
        copy_on(&s2, "node1", "/ckpt/a").is_some()
    })
    .await;
    assert_eq!(copy_on(&s2, "node1", "/ckpt/a").unwrap(), data);
    d1.stop().await;
    d2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_never_stops_delays_a_copy_only_boundedly() {
    let tc = TestCluster::new("yield-bound", 2, Scheme::Ring, 1);
    let writer_yield = Duration::from_millis(200);
    let Bed(d1, d2, s1, s2, stop, app) = Bed::start(&tc, writer_yield);
    let data = bytes(4 << 20, 10);
    let t0 = Instant::now();
    write(&s1, "/ckpt/b", &data);
    // The application never stops, the copy still completes.
    wait_for("the copy while the application writes", || {
        copy_on(&s2, "node1", "/ckpt/b").is_some()
    })
    .await;
    let took = t0.elapsed().as_secs_f64();
    assert!(!app.is_finished(), "the application stopped writing first");
    assert_eq!(copy_on(&s2, "node1", "/ckpt/b").unwrap(), data);
    // The bound, observed: a copy's waits stay below its sending time plus
    // `writer_yield` (replicate.rs, Throttle), and waits plus sending fit in the time
    // from the write to the copy, so the copy waited at most half that time plus half of
    // `writer_yield` (plus one 2 ms check overshooting, with slack for a loaded machine).
    wait_for("the status counting the copy", || {
        ckptfs_node::status(&tc.store_opts("node1").name).is_some_and(|s| s.copies_sent >= 1)
    })
    .await;
    let waited = yielded(&tc, "node1");
    let bound = (took + writer_yield.as_secs_f64()) / 2.0 + 0.1;
    assert!(
        waited <= bound,
        "the copy waited {waited:.3} s of the {took:.3} s it took (bound {bound:.3} s)"
    );
    stop.store(true, Ordering::Relaxed);
    app.join().unwrap();
    d1.stop().await;
    d2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_writer_yield_zero_a_copy_never_waits() {
    let tc = TestCluster::new("yield-off", 2, Scheme::Ring, 1);
    let Bed(d1, d2, s1, s2, stop, app) = Bed::start(&tc, Duration::ZERO);
    let data = bytes(4 << 20, 11);
    write(&s1, "/ckpt/c", &data);
    wait_for("the copy", || copy_on(&s2, "node1", "/ckpt/c").is_some()).await;
    assert_eq!(copy_on(&s2, "node1", "/ckpt/c").unwrap(), data);
    stop.store(true, Ordering::Relaxed);
    app.join().unwrap();
    wait_for("the status", || {
        ckptfs_node::status(&tc.store_opts("node1").name).is_some()
    })
    .await;
    assert_eq!(yielded(&tc, "node1"), 0.0);
    d1.stop().await;
    d2.stop().await;
}
