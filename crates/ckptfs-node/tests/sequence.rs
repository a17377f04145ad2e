//! Failures in sequence (issue "Failures in sequence", items 1 and 2): a partner that
//! comes back without its copies is re-filled and the files survive the next failure;
//! a stand-in copy made while the partner was down is reached by the rewrite and the
//! delete that follow; a restore takes the newest version across holders and names the
//! older copies it left.

mod support;

use ckptfs_cluster::Scheme;
use ckptfs_node::levels::Levels;
use std::time::Duration;
use support::*;

/// node1's partner node3 is lost (daemon stopped, store destroyed) and replaced by an
/// empty one: node1 notices the copy is gone, sends it again, lists node3 only once it
/// holds it, and after node1 is lost too its file comes back from node3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_partner_is_refilled_and_the_file_survives_the_next_failure() {
    let tc = TestCluster::new("seq-refill", 4, Scheme::Ring, 1);
    assert_eq!(tc.partners_of("node1"), ["node3"]);
    let mut d: Vec<Option<Daemon>> = ["node1", "node2", "node3", "node4"]
        .iter()
        .map(|id| Some(Daemon::start(tc.config(id))))
        .collect();
    let data = bytes(300_000, 31);
    let s1 = tc.store("node1");
    write(&s1, "/ckpt/a.dat", &data);
    let s3 = tc.store("node3");
    wait_for("the copy on node3", || {
        copy_on(&s3, "node1", "/ckpt/a.dat") == Some(data.clone())
            && Levels::load(&s1).files["/ckpt/a.dat"]
                .partners
                .contains(&"node3".to_string())
    })
    .await;
    // node3 lost and replaced: an empty store, a new daemon.
    d[2].take().unwrap().stop().await;
    drop(s3);
    ckptfs_store::Store::destroy(&tc.store_opts("node3").name).unwrap();
    d[2] = Some(Daemon::start(tc.config("node3")));
    let s3 = tc.store("node3");
    wait_for("node3 re-filled", || {
        copy_on(&s3, "node1", "/ckpt/a.dat") == Some(data.clone())
    })
    .await;
    wait_for("node1's record and status after re-protection", || {
        Levels::load(&s1).files["/ckpt/a.dat"]
            .partners
            .contains(&"node3".to_string())
            && ckptfs_node::status(&tc.store_opts("node1").name).is_some_and(|s| s.unprotected_files == 0)
    })
    .await;
    // node1 lost next: its file comes back.
    d[0].take().unwrap().stop().await;
    drop(s1);
    ckptfs_store::Store::destroy(&tc.store_opts("node1").name).unwrap();
    let s1 = tc.store("node1");
    let rep = ckptfs_node::restore_from_peers(&tc.cluster, "node1", &s1, "/")
        .await
        .unwrap();
    assert!(rep.failed.is_empty(), "{rep:?}");
    assert_eq!(read(&s1, "/ckpt/a.dat").unwrap(), data);
    for x in d.into_iter().flatten() {
        x.stop().await;
    }
}

/// node3 (node1's partner) is down, so node1's file gets a stand-in copy on node4; node3
/// comes back and gets the file too; node1 rewrites the file, then removes it. The
/// stand-in's old version is dropped, the removed file is dropped everywhere, and a
/// restore of node1 brings back nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_and_deletes_reach_a_stand_in_and_nothing_comes_back() {
    let tc = TestCluster::new("seq-stand", 4, Scheme::Ring, 1);
    let d1 = Daemon::start(tc.config("node1"));
    let d2 = Daemon::start(tc.config("node2"));
    let d4 = Daemon::start(tc.config("node4"));
    let (s1, s3, s4) = (tc.store("node1"), tc.store("node3"), tc.store("node4"));
    // node3 never came up: after the first heartbeat period node4 stands in.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let v1 = bytes(200_000, 1);
    write(&s1, "/ckpt/f", &v1);
    wait_for("the stand-in copy on node4", || {
        copy_on(&s4, "node1", "/ckpt/f") == Some(v1.clone())
    })
    .await;
    let d3 = Daemon::start(tc.config("node3"));
    wait_for("the planned partner node3 gets it too", || {
        copy_on(&s3, "node1", "/ckpt/f") == Some(v1.clone())
    })
    .await;
    // A rewrite: the new version on node3; node4's old one dropped (or replaced).
    let v2 = bytes(150_000, 2);
    write(&s1, "/ckpt/f", &v2);
    wait_for("v2 on node3, v1 gone from node4", || {
        copy_on(&s3, "node1", "/ckpt/f") == Some(v2.clone())
            && copy_on(&s4, "node1", "/ckpt/f").is_none_or(|b| b == v2)
    })
    .await;
    // A delete: no copy anywhere.
    s1.unlink("/ckpt/f").unwrap();
    wait_for("the copies dropped everywhere", || {
        copy_on(&s3, "node1", "/ckpt/f").is_none() && copy_on(&s4, "node1", "/ckpt/f").is_none()
    })
    .await;
    d1.stop().await;
    drop(s1);
    ckptfs_store::Store::destroy(&tc.store_opts("node1").name).unwrap();
    let s1 = tc.store("node1");
    let rep = ckptfs_node::restore_from_peers(&tc.cluster, "node1", &s1, "/")
        .await
        .unwrap();
    assert!(rep.restored.is_empty(), "a removed file came back: {rep:?}");
    assert!(s1.stat("/ckpt/f").is_err());
    for x in [d2, d3, d4] {
        x.stop().await;
    }
}

/// Sends node1's copy of `path` with generation `g` to `to`.
async fn place(tc: &TestCluster, to: &str, path: &str, data: &[u8], g: u64) {
    let mut c = client(tc, "node1", to).await;
    assert!(put_copy(&mut c, "node1", path, data, g).await.unwrap());
}

/// Two holders with two versions of one file (generation 5 on node3, 9 on node4): the
/// restore takes generation 9 and names node3's older copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_takes_the_newest_version_and_names_the_older_copy() {
    let tc = TestCluster::new("seq-newest", 4, Scheme::Ring, 1).patient();
    let d3 = Daemon::start(tc.config("node3"));
    let d4 = Daemon::start(tc.config("node4"));
    let (old, new) = (bytes(100_000, 5), bytes(120_000, 9));
    place(&tc, "node3", "/ckpt/v", &old, 5).await;
    place(&tc, "node4", "/ckpt/v", &new, 9).await;
    let s1 = tc.store("node1");
    let rep = ckptfs_node::restore_from_peers(&tc.cluster, "node1", &s1, "/")
        .await
        .unwrap();
    assert_eq!(read(&s1, "/ckpt/v").unwrap(), new, "{rep:?}");
    assert_eq!(rep.restored[0].from, "node4");
    assert_eq!(rep.superseded.len(), 1, "{rep:?}");
    assert_eq!(
        (
            rep.superseded[0].holder.as_str(),
            rep.superseded[0].generation,
            rep.superseded[0].newest
        ),
        ("node3", 5, 9)
    );
    d3.stop().await;
    d4.stop().await;
}
