//! `ClusterNodes` without a daemon crate: a node whose daemon does not answer is left
//! out of a question, and the restart's set levels are the cluster file's (partner
//! copies, then its erasure sets) or whatever set levels are installed. No daemon runs
//! here (nothing binds the peer's port).

use ckptfs_datasets::{JobNodes, Want};
use ckptfs_level::{LevelId, PartFile, SetProtection};
use ckptfs_partner::ClusterNodes;
use ckptfs_store::{Store, StoreOptions};
use std::sync::Arc;
use std::time::Duration;

/// Two nodes on loopback ports nothing listens on; node1's store created.
fn setup(tag: &str) -> (ckptfs_cluster::Cluster, Store, tempfile::TempDir) {
    let base = ckptfs_testsupport::free_ports(19500..19600, 2);
    let job = format!("pm-{tag}-{}", std::process::id());
    let (c, dir) = ckptfs_testsupport::secret_cluster(ckptfs_cluster::Cluster::local(2, &job, base).unwrap());
    let name = c.nodes[0].store.clone();
    let _ = Store::destroy(&name);
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(8 << 20);
    o.chunk_size = Some(64 << 10);
    (c, Store::create(&o).unwrap(), dir)
}

fn want() -> Vec<Want> {
    vec![Want {
        path: "/ckpt/a".into(),
        size: 5,
        crc32c: 7,
    }]
}

fn parts() -> Vec<PartFile> {
    vec![PartFile {
        path: "/ckpt/a".into(),
        size: 5,
        crc32c: 7,
    }]
}

fn ids(levels: &[Arc<dyn SetProtection>]) -> Vec<String> {
    levels.iter().map(|l| l.id().to_string()).collect()
}

/// The registry of set levels is the cluster file's: partner copies alone without
/// erasure sets; with `[redundancy] erasure`, each set of the plan after them, by id.
#[test]
fn the_set_levels_are_partner_copies_then_the_cluster_files_erasure_sets() {
    let (c, s, _dir) = setup("nosets");
    let nodes = ClusterNodes::new(c.clone(), "node1", s.clone(), Duration::from_millis(500)).unwrap();
    assert_eq!(ids(&nodes.set_levels()), vec!["partner".to_string()]);
    let mut three = ckptfs_cluster::Cluster::local(3, "sl-three", 26800).unwrap();
    three.secret = c.secret.clone();
    three.redundancy.erasure = Some(ckptfs_cluster::Erasure::Xor);
    three.redundancy.set_size = 3;
    let levels = ckptfs_partner::set_levels(&three, "node1", &s, Duration::from_millis(500)).unwrap();
    assert_eq!(
        ids(&levels),
        vec!["partner".to_string(), "erasure:set0".to_string()]
    );
    assert_eq!(levels[1].members(), vec!["node1", "node2", "node3"]);
    assert_eq!(levels[1].tolerates(), 1);
    let _ = Store::destroy(s.name());
}

/// Set levels installed in place of the cluster file's are the ones a restart asks.
#[test]
fn installed_set_levels_replace_the_cluster_files() {
    let (c, s, _dir) = setup("sets");
    let nodes = ClusterNodes::new(c, "node1", s.clone(), Duration::from_millis(500)).unwrap();
    let partner = nodes.set_levels().remove(0);
    let nodes = nodes.with_set_levels(vec![partner.clone(), partner]);
    assert_eq!(
        ids(&nodes.set_levels()),
        vec!["partner".to_string(), "partner".to_string()]
    );
    let _ = Store::destroy(s.name());
}

#[test]
fn a_node_whose_daemon_does_not_answer_is_left_out_and_no_copy_comes_from_this_node() {
    let (c, s, _dir) = setup("down");
    let nodes = ClusterNodes::new(c, "node1", s.clone(), Duration::from_millis(500)).unwrap();
    assert_eq!(nodes.nodes(), vec!["node1".to_string(), "node2".to_string()]);
    // node2 has no daemon: the connection is refused, it is left out of the answer.
    assert!(nodes.holders("node1", &want(), &["node2".into()]).is_empty());
    assert!(nodes.records("j").get("node2").is_some_and(|r| r.is_err()));
    // Partner copies as a set level: node2 cannot be asked and this store holds no copy
    // of node2's file, so none is located; this node's own file comes from no copy here.
    let partner = nodes.set_levels().remove(0);
    assert_eq!(partner.locate("j.3", "node2", &parts()).unwrap(), vec![None]);
    let into = ckptfs_store::level::StoreLevel::new(&s).unwrap();
    let own = partner
        .recover_files("j.3", "node1", &parts(), &LevelId::new("partner", "node1"), &into)
        .unwrap_err();
    assert!(
        own.to_string().contains("no partner copy of its own files"),
        "{own}"
    );
    assert!(
        partner
            .recover_files("j.3", "node1", &parts(), &LevelId::new("partner", "node2"), &into)
            .is_err(),
        "node2 is down"
    );
    let theirs = partner
        .recover_files("j.3", "node2", &parts(), &LevelId::new("partner", "node1"), &into)
        .unwrap_err();
    assert_eq!(theirs.errno(), libc::EINVAL, "{theirs}");
    let _ = Store::destroy(s.name());
}

/// Four nodes; node2-node4 accept TCP connections (listeners bound on their ports) but
/// never answer the handshake: silent daemons.
#[test]
fn silent_nodes_are_asked_at_once_each_tried_twice_within_the_timeouts() {
    let base = ckptfs_testsupport::free_ports(19600..19700, 4);
    let job = format!("nt2-silent-{}", std::process::id());
    let (c, _dir) =
        ckptfs_testsupport::secret_cluster(ckptfs_cluster::Cluster::local(4, &job, base).unwrap());
    let _silent: Vec<std::net::TcpListener> = c.nodes[1..]
        .iter()
        .map(|n| std::net::TcpListener::bind(n.addr.as_str()).unwrap())
        .collect();
    let name = c.nodes[0].store.clone();
    let _ = Store::destroy(&name);
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(8 << 20);
    o.chunk_size = Some(64 << 10);
    let s = Store::create(&o).unwrap();
    let wait = Duration::from_millis(400);
    let nodes = ClusterNodes::new(c, "node1", s.clone(), wait).unwrap();
    let t0 = std::time::Instant::now();
    let got = nodes.records("j");
    let took = t0.elapsed();
    // Each node: the wait, then twice the wait (1.2 s); one after the other would be 3.6 s.
    assert!(
        took >= 3 * wait,
        "answered after {took:?}, before the two attempts ran out"
    );
    assert!(
        took < 6 * wait,
        "three silent nodes took {took:?}: not asked at once"
    );
    assert_eq!(
        got.keys().cloned().collect::<Vec<_>>(),
        ["node2", "node3", "node4"]
    );
    for (n, r) in &got {
        let e = r.as_ref().expect_err("a silent node has no records");
        assert!(e.contains("no answer in 400ms and then 800ms"), "{n}: {e}");
    }
    let _ = Store::destroy(s.name());
}
