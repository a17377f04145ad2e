//! `ClusterNodes` without a daemon crate: a node whose daemon does not answer is left
//! out of a question, and the restart's set step is the cluster's erasure sets ("no
//! erasure sets" when its file names none) or whatever `SetRecovery` is installed. No daemon runs here (nothing binds the peer's port).

use ckptfs_datasets::{JobNodes, Want};
use ckptfs_partner::{ClusterNodes, SetRecovery};
use ckptfs_store::{Store, StoreOptions};
use std::sync::{Arc, Mutex};
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

/// Records what it was asked.
#[derive(Default)]
struct Fake(Arc<Mutex<Vec<String>>>);

impl SetRecovery for Fake {
    fn can_rebuild(
        &self,
        _cluster: &ckptfs_cluster::Cluster,
        me: &str,
        _store: &Store,
        job: &str,
        id: u64,
        owner: &str,
        files: &[Want],
    ) -> Result<String, String> {
        self.0
            .lock()
            .unwrap()
            .push(format!("can {me} {job} {id} {owner} {}", files[0].path));
        Ok("erasure:fake".into())
    }

    fn rebuild(
        &self,
        _cluster: &ckptfs_cluster::Cluster,
        me: &str,
        store: &Store,
        job: &str,
        id: u64,
    ) -> Result<(), String> {
        self.0
            .lock()
            .unwrap()
            .push(format!("rebuild {me} {} {job} {id}", store.name()));
        Err("nothing to rebuild from".into())
    }
}

#[test]
fn a_cluster_without_erasure_sets_answers_no_erasure_sets() {
    let (c, s, _dir) = setup("nosets");
    let nodes = ClusterNodes::new(c, "node1", s.clone(), Duration::from_millis(500)).unwrap();
    assert_eq!(
        nodes.erasure_source("j", 3, "node2", &want()),
        Err("no erasure sets".into())
    );
    assert_eq!(nodes.erasure_rebuild(&s, "j", 3), Err("no erasure sets".into()));
    let _ = Store::destroy(s.name());
}

#[test]
fn an_installed_set_recovery_is_asked_with_the_dataset_and_its_answer_kept() {
    let (c, s, _dir) = setup("sets");
    let asked = Arc::new(Mutex::new(Vec::new()));
    let nodes = ClusterNodes::new(c, "node1", s.clone(), Duration::from_millis(500))
        .unwrap()
        .with_sets(Box::new(Fake(asked.clone())));
    assert_eq!(
        nodes.erasure_source("j", 3, "node2", &want()),
        Ok("erasure:fake".into())
    );
    assert_eq!(
        nodes.erasure_rebuild(&s, "j", 4),
        Err("nothing to rebuild from".into())
    );
    assert_eq!(
        *asked.lock().unwrap(),
        vec![
            "can node1 j 3 node2 /ckpt/a".to_string(),
            format!("rebuild node1 {} j 4", s.name())
        ]
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
    assert!(!nodes.holds_copy("node2", &want()[0]), "no partner copy here");
    assert!(
        nodes.fetch(&s, "node1", "/ckpt/a").is_err(),
        "no copy of its own files"
    );
    assert!(nodes.fetch(&s, "node2", "/ckpt/a").is_err(), "node2 is down");
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
