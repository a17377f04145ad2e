//! The dataset calls across nodes: two node daemons on 127.0.0.1 (in this process), one
//! rank per node; the calls judge completeness job-wide through the daemons, and ranks
//! agree on the restart dataset (failure case D9).

use crate::datasets::tests::LOCK;
use crate::datasets::*;
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::ffi::CString;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

struct Cluster2 {
    dir: tempfile::TempDir,
    file: std::path::PathBuf,
    job: String,
    stores: Vec<String>,
    stop: Arc<AtomicBool>,
    daemons: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Cluster2 {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for d in self.daemons.drain(..) {
            let _ = d.join();
        }
        for s in &self.stores {
            let _ = Store::destroy(s);
            ckptfs_partner::runtime_files::remove_store_files(s);
        }
        let _ = &self.dir;
    }
}

fn opts(name: &str) -> StoreOptions {
    let mut o = StoreOptions::named(name);
    o.mem_size = Some(32 << 20);
    o.chunk_size = Some(64 << 10);
    o
}

/// Two nodes in two racks (each the other's partner), daemons started.
fn cluster2() -> Cluster2 {
    let base = (47240..47298)
        .step_by(2)
        .find(|&p| (p..p + 2).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()))
        .expect("two free ports in 47240-47299");
    let job = format!("hd-capi{}", std::process::id());
    let mut c = ckptfs_cluster::Cluster::local(2, &job, base).unwrap();
    c.nodes[1].domains.insert("rack".into(), "r2".into());
    c.heartbeat_ms = 200;
    let (c, dir) = ckptfs_testsupport::secret_cluster(c);
    let file = dir.path().join("cluster.toml");
    let stores: Vec<String> = c.nodes.iter().map(|n| n.store.clone()).collect();
    for s in &stores {
        let _ = Store::destroy(s);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut daemons = Vec::new();
    for n in &c.nodes {
        let mut cfg = ckptfs_node::NodeConfig::new(c.clone(), &n.id).unwrap();
        cfg.store = opts(&n.store);
        cfg.scan_interval = std::time::Duration::from_millis(50);
        let stop = stop.clone();
        daemons.push(std::thread::spawn(move || {
            let r = ckptfs_node::run_blocking(
                cfg,
                ckptfs_node::daemon::when(move || stop.load(Ordering::SeqCst)),
            );
            if let Err(e) = r {
                eprintln!("daemon: {e}");
            }
        }));
    }
    for n in &c.nodes {
        wait(&format!("{}'s daemon", n.id), || {
            std::net::TcpStream::connect(&n.addr).is_ok()
        });
    }
    Cluster2 {
        dir,
        file,
        job,
        stores,
        stop,
        daemons,
    }
}

fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(90),
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Act as rank `rank` on node `node` (index): the environment the C calls read.
fn as_rank(c: &Cluster2, node: usize, rank: u32) {
    let vars = [
        ("CKPTFS_CLUSTER", c.file.to_str().unwrap().to_string()),
        ("CKPTFS_NODE_ID", format!("node{}", node + 1)),
        ("CKPTFS_RANK", rank.to_string()),
        ("CKPTFS_NRANKS", "2".into()),
        ("CKPTFS_LOCAL_NRANKS", "1".into()),
        ("CKPTFS_JOB", c.job.clone()),
        ("CKPTFS_MEM_SIZE", "32M".into()),
        ("CKPTFS_CHUNK_SIZE", "64K".into()),
        ("CKPTFS_NODE_TIMEOUT_MS", "10000".into()),
    ];
    for (k, v) in vars {
        // SAFETY: the tests of this module hold LOCK; nothing else reads these variables.
        unsafe { std::env::set_var(k, v) };
    }
}

fn clear_env() {
    for k in [
        "CKPTFS_CLUSTER",
        "CKPTFS_NODE_ID",
        "CKPTFS_RANK",
        "CKPTFS_NRANKS",
        "CKPTFS_LOCAL_NRANKS",
        "CKPTFS_JOB",
        "CKPTFS_MEM_SIZE",
        "CKPTFS_CHUNK_SIZE",
        "CKPTFS_NODE_TIMEOUT_MS",
        "CKPTFS_DATASET_PATTERN",
        "CKPTFS_DATASET_COMPLETE",
    ] {
        // SAFETY: as in as_rank.
        unsafe { std::env::remove_var(k) };
    }
}

fn store(c: &Cluster2, node: usize) -> Store {
    Store::open_or_create(&opts(&c.stores[node])).unwrap()
}

fn write(s: &Store, path: &str, bytes: &[u8]) {
    let mut cur = String::new();
    let parts: Vec<&str> = path.split('/').filter(|x| !x.is_empty()).collect();
    for p in &parts[..parts.len() - 1] {
        cur.push('/');
        cur.push_str(p);
        let _ = s.mkdir(&cur, 0o755);
    }
    let mut f = s.open(path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(bytes).unwrap();
    f.close().unwrap();
}

fn begin(name: &str) -> u64 {
    let n = CString::new(name).unwrap();
    let mut id = 0u64;
    // SAFETY: a valid C string and out pointer.
    let r = unsafe { ckptfs_ckpt_begin(n.as_ptr(), &mut id) };
    assert_eq!(r, 0, "begin {name}");
    id
}

/// (return value, name) of ckptfs_have_restart or ckptfs_start_restart.
fn restart_call(start: bool) -> (c_int, String) {
    let mut buf = [0 as c_char; 128];
    // SAFETY: buf is valid for 128 bytes.
    let r = unsafe {
        if start {
            ckptfs_start_restart(buf.as_mut_ptr(), buf.len())
        } else {
            ckptfs_have_restart(buf.as_mut_ptr(), buf.len())
        }
    };
    // SAFETY: the call wrote a NUL-terminated string (or left the zeroed buffer).
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    (r, s.to_string_lossy().into_owned())
}

#[test]
fn c_calls_judge_job_wide_through_the_daemons_and_ranks_agree_on_the_restart() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let c = cluster2();
    let (s1, s2) = (store(&c, 0), store(&c, 1));
    // s1: both nodes' parts complete. Ids agree between the nodes (node2 joins).
    as_rank(&c, 0, 0);
    assert_eq!(begin("s1"), 1);
    as_rank(&c, 1, 1);
    assert_eq!(begin("s1"), 1, "node2's rank joins the dataset node1 began");
    write(&s1, "/n1/s1", b"node1 state 1");
    write(&s2, "/n2/s1", b"node2 state 1");
    as_rank(&c, 0, 0);
    assert_eq!(ckptfs_ckpt_complete(1, 1), 0);
    // Only node1's part is in: not complete job-wide, though node1's part is.
    assert_eq!(restart_call(false), (0, String::new()), "waiting for node2");
    as_rank(&c, 1, 1);
    assert_eq!(ckptfs_ckpt_complete(1, 1), 0);
    assert_eq!(ckptfs_ckpt_complete(1, 1), -libc::EALREADY);
    assert_eq!(restart_call(false), (1, "s1".into()));
    as_rank(&c, 0, 0);
    assert_eq!(restart_call(false), (1, "s1".into()));
    // s2: node1's part complete; node2's file is still open for writing when its rank
    // completes: node2's part is incomplete, so is the dataset, on every node.
    assert_eq!(begin("s2"), 2);
    as_rank(&c, 1, 1);
    assert_eq!(begin("s2"), 2);
    write(&s1, "/n1/s2", b"node1 state 2");
    let mut open = s2.open("/n2/s2", OpenFlags::CREATE, 0o644).unwrap();
    open.write_all(b"node2 state 2, not closed").unwrap();
    as_rank(&c, 0, 0);
    assert_eq!(ckptfs_ckpt_complete(2, 1), 0);
    as_rank(&c, 1, 1);
    assert_eq!(ckptfs_ckpt_complete(2, 1), 0);
    open.close().unwrap();
    as_rank(&c, 0, 0);
    assert_eq!(restart_call(false), (1, "s1".into()), "s2 is incomplete on node2");
    let d2 = datasets().unwrap().show(2).unwrap();
    assert_eq!(
        d2.state,
        ckptfs_datasets::State::Incomplete,
        "node1's record: {d2:?}"
    );
    assert!(
        d2.reason.as_deref().unwrap_or("").contains("node node2"),
        "{d2:?}"
    );
    // s3 complete on both; node1's rank restarts first, resumes, deletes its file of s3.
    assert_eq!(begin("s3"), 3);
    as_rank(&c, 1, 1);
    assert_eq!(begin("s3"), 3);
    write(&s1, "/n1/s3", b"node1 state 3");
    write(&s2, "/n2/s3", b"node2 state 3");
    assert_eq!(ckptfs_ckpt_complete(3, 1), 0);
    as_rank(&c, 0, 0);
    assert_eq!(ckptfs_ckpt_complete(3, 1), 0);
    assert_eq!(restart_call(true), (1, "s3".into()));
    s1.unlink("/n1/s3").unwrap();
    // Node1's daemon drops node2's copy of the deleted file: s3 is then held nowhere
    // whole, and a search of its own would take s1 (the race of failure case D9).
    let copy = ckptfs_node::partner_store::copy_path("node1", "/n1/s3");
    wait("node2's copy of /n1/s3 to go", || s2.stat(&copy).is_err());
    as_rank(&c, 1, 1);
    let (nodes, part) = {
        let ds = datasets().unwrap();
        let v = ds.job_views().unwrap().unwrap();
        let j = ckptfs_datasets::judge(&v, 3, 2);
        (ds, j.parts["node1"].clone())
    };
    let f = &part.files["/n1/s3"];
    let w = ckptfs_datasets::Want {
        path: "/n1/s3".into(),
        size: f.size,
        crc32c: f.crc32c,
    };
    let _ = nodes;
    let node2 = ckptfs_partner::ClusterNodes::new(
        ckptfs_cluster::Cluster::load(&c.file).unwrap(),
        "node2",
        s2.clone(),
        std::time::Duration::from_secs(10),
    )
    .unwrap();
    use ckptfs_datasets::JobNodes;
    // Node2's partner copies (its first set level; the cluster has two nodes, so only
    // node2's own store is looked at) hold no copy of it.
    let partner = node2.set_levels().remove(0);
    let pf = ckptfs_level::PartFile {
        path: w.path.clone(),
        size: w.size,
        crc32c: w.crc32c,
    };
    assert_eq!(
        partner.locate("j.3", "node1", std::slice::from_ref(&pf)),
        Ok(vec![None]),
        "no copy on node2"
    );
    assert_eq!(
        node2
            .holders("node1", std::slice::from_ref(&w), &["node1".into()])
            .get("node1"),
        Some(&vec![false]),
        "node1 no longer holds it"
    );
    // The slower rank adopts node1's rank's choice, asked through node1's daemon.
    assert_eq!(restart_call(false), (1, "s3".into()));
    assert_eq!(restart_call(true), (1, "s3".into()));
    let mut f = s2.open("/n2/s3", OpenFlags::READ, 0).unwrap();
    let mut b = vec![0; f.size() as usize];
    f.read_full(&mut b).unwrap();
    assert_eq!(b, b"node2 state 3");
    // Transparent mode across nodes: each node's directory is its part; the dataset is
    // complete once every node's directory is, asked through the daemons.
    for k in ["CKPTFS_DATASET_PATTERN", "CKPTFS_DATASET_COMPLETE"] {
        let v = if k.ends_with("PATTERN") {
            "/t/step.*"
        } else {
            "files:1"
        };
        // SAFETY: as in as_rank.
        unsafe { std::env::set_var(k, v) };
    }
    write(&s1, "/t/step.1/a", b"node1 transparent");
    let mut open = s2.open("/t/step.1/b", OpenFlags::CREATE, 0o644).ok();
    if open.is_none() {
        s2.mkdir("/t", 0o755).unwrap();
        s2.mkdir("/t/step.1", 0o755).unwrap();
        open = Some(s2.open("/t/step.1/b", OpenFlags::CREATE, 0o644).unwrap());
    }
    let mut open = open.unwrap();
    open.write_all(b"node2 transparent").unwrap();
    // (Both ranks took part in the restart round of s3, which lost node1's file for
    // good: a search now gives s1.)
    as_rank(&c, 1, 1);
    let have = restart_call(false);
    assert_eq!(have.1, "s1", "node2's directory is still being written: {have:?}");
    as_rank(&c, 0, 0);
    let have = restart_call(false);
    assert_eq!(have.1, "s1", "node1's part alone is not the dataset: {have:?}");
    open.close().unwrap();
    as_rank(&c, 1, 1);
    let _ = restart_call(false);
    as_rank(&c, 0, 0);
    assert_eq!(restart_call(false), (1, "t/step.1".into()));
    let all1 = datasets().unwrap().list().unwrap().0;
    as_rank(&c, 1, 1);
    let all2 = datasets().unwrap().list().unwrap().0;
    let t = |all: &[ckptfs_datasets::Dataset]| {
        let d = all
            .iter()
            .find(|d| d.name == "t/step.1")
            .expect("a record of t/step.1")
            .clone();
        (d.id, d.state, d.parts.keys().cloned().collect::<Vec<_>>())
    };
    let (t1, t2) = (t(&all1), t(&all2));
    assert_eq!(t1.0, t2.0, "the same id on both nodes");
    assert!(t1.0 > 3, "after the explicit datasets: {t1:?}");
    assert_eq!(t1.1, ckptfs_datasets::State::Complete);
    assert_eq!(t2.1, ckptfs_datasets::State::Complete);
    assert_eq!(
        (t1.2, t2.2),
        (vec!["node:node1".to_string()], vec!["node:node2".to_string()])
    );
    clear_env();
}
