//! Simulated nodes for the erasure-set tests (`erasure_netns*.rs`): `n` `ckptfs node`
//! daemons, each in its own network namespace with its own /dev/shm
//! (crates/ckptfs-netsim), in one set (`cluster init --redundancy SCHEME --set-size n`);
//! the commands a rank runs on a node, nodes lost and replaced, bytes flipped beneath
//! their CRC32C in a node's store, datasets written one rank per node.
//!
//! Needs root and iproute2: [`Cluster::new`] answers None after
//! `ckptfs_testsupport::skip_root_only` (which fails the test under
//! `CKPTFS_REQUIRE_ROOT_TESTS=1`, as in CI). The nodes, their cluster file and daemons
//! are `nodes_support`'s (declared by each test file beside this module).

#![allow(dead_code)]

pub use crate::nodes_support::node;
use crate::nodes_support::{
    cluster_init, named, on_namespaces, preload_lib, simulated, stdout_ok, Nodes, RESTART_PRINTS,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// `n` simulated nodes in one erasure set, their daemons running (the [`Nodes`] they
/// are: `c.sim`, `c.dir`, `c.file`).
pub struct Cluster {
    pub n: usize,
    pub nodes: Nodes,
    pub job: String,
}

impl std::ops::Deref for Cluster {
    type Target = Nodes;
    fn deref(&self) -> &Nodes {
        &self.nodes
    }
}

impl Cluster {
    /// `n` nodes in one set (two per rack: node1 and node2 in r1, node3 and node4 in
    /// r2, ...) with `redundancy` (`xor`, `rs:2`), each daemon listening on `port` in
    /// its namespace (the set's cluster port `port + 1` on node1). None (after
    /// [`ckptfs_testsupport::skip_root_only`]) when namespaces are not available.
    pub fn new(tag: &str, n: usize, redundancy: &str, port: u16) -> Option<Cluster> {
        let sim = simulated(n, named(tag, n, "256m"))?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{tag}-netns"))
            .tempdir()
            .unwrap();
        let nodes = Nodes::new(sim, dir);
        let job = format!("j{}", std::process::id());
        let n_s = n.to_string();
        let job_s = nodes.sim.prefix().to_string();
        let args = [
            "--redundancy",
            redundancy,
            "--set-size",
            &n_s,
            "--job",
            &job_s,
            "--heartbeat-ms",
            "200",
        ];
        cluster_init(&nodes.file, n, 17340, &args);
        let text = on_namespaces(&nodes.file, &nodes.sim, 17340, port, port + 1);
        assert!(text.contains(&format!("erasure = \"{redundancy}\"")), "{text}");
        std::fs::write(&nodes.file, text).unwrap();
        let mut c = Cluster { n, nodes, job };
        for i in 0..n {
            c.start(i);
        }
        for i in 0..n {
            c.until(&format!("{}'s daemon", node(i)), || {
                c.run(i, &["node", "status"]).status.success()
            });
        }
        Some(c)
    }

    pub fn cmd(&self, i: usize, args: &[&str]) -> Command {
        let mut c = self.command(i, args);
        for (k, _) in std::env::vars() {
            if k.starts_with("CKPTFS_") && k != "CKPTFS_REQUIRE_ROOT_TESTS" {
                c.env_remove(k);
            }
        }
        c.env("CKPTFS_MEM_SIZE", "64M")
            .env("CKPTFS_JOB", &self.job)
            .env("CKPTFS_RANK", i.to_string())
            .env("CKPTFS_NRANKS", self.n.to_string())
            .env("CKPTFS_LOCAL_NRANKS", "1")
            .env("CKPTFS_NODE_TIMEOUT_MS", "10000")
            .env("CKPTFS_PRELOAD_LIB", preload_lib());
        c
    }

    pub fn run(&self, i: usize, args: &[&str]) -> Output {
        self.cmd(i, args).output().unwrap()
    }

    pub fn ok(&self, i: usize, args: &[&str]) -> String {
        let what = format!("{} ckptfs {args:?}", node(i));
        stdout_ok(self.run(i, args), &what, &format!("\n{}", self.logs()))
    }

    pub fn start(&mut self, i: usize) {
        let cmd = self.cmd(i, &["node"]);
        self.nodes.daemons.start(i, cmd);
    }

    /// Node `i` lost (every process SIGKILLed, /dev/shm gone, link down), then back
    /// empty with its daemon (a replacement).
    pub fn lose(&mut self, i: usize) {
        self.sim.kill_node(i).unwrap();
        if let Some(mut d) = self.nodes.daemons.take(i) {
            d.wait().unwrap();
        }
        self.sim.revive(i).unwrap();
    }

    pub fn replace(&mut self, i: usize) {
        self.start(i);
        self.until(&format!("{}'s new daemon", node(i)), || {
            self.run(i, &["node", "status"]).status.success()
        });
    }

    pub fn put(&self, i: usize, data: &[u8], path: &str) {
        let src = self.dir.path().join(format!("src-{i}"));
        std::fs::write(&src, data).unwrap();
        self.ok(i, &["put", "-p", src.to_str().unwrap(), path]);
    }

    pub fn get(&self, i: usize, path: &str) -> Vec<u8> {
        let dst = self.dir.path().join("back");
        let _ = std::fs::remove_file(&dst);
        self.ok(i, &["get", path, dst.to_str().unwrap()]);
        std::fs::read(&dst).unwrap()
    }

    pub fn status(&self, i: usize) -> Value {
        serde_json::from_str(&self.ok(i, &["node", "status", "--json"])).unwrap()
    }

    /// The state of dataset `key` on node `i` (`protected`, ...), and its epoch.
    pub fn erasure_state(&self, i: usize, key: &str) -> Option<(String, u64)> {
        let v = self.status(i);
        let d = &v["erasure"]["datasets"][key];
        Some((d["state"].as_str()?.to_string(), d["epoch"].as_u64()?))
    }

    /// `ckptfs run --restart` on node `i` printing the dataset it chose (`<none>`).
    pub fn restart(&self, i: usize) -> Output {
        self.restart_from(i, None)
    }

    /// Only node `i`'s daemon SIGKILLed (its store, link and other processes stay).
    pub fn kill_daemon(&mut self, i: usize) {
        if let Some(mut d) = self.nodes.daemons.take(i) {
            d.kill().unwrap();
            d.wait().unwrap();
        }
    }

    /// `restore --from-peers` on node `i`, running in the background.
    pub fn spawn_restore(&self, i: usize) -> Child {
        self.cmd(i, &["restore", "--from-peers"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Whether node `i`'s store serves `path` (a `get` succeeds) or lists it.
    pub fn has(&self, i: usize, path: &str) -> bool {
        let dst = self.dir.path().join("probe");
        let got = self
            .run(i, &["get", path, dst.to_str().unwrap()])
            .status
            .success();
        let dir = Path::new(path).parent().unwrap().to_str().unwrap();
        let ls = self.run(i, &["ls", dir]);
        let name = Path::new(path).file_name().unwrap().to_str().unwrap();
        got || String::from_utf8_lossy(&ls.stdout).contains(name)
    }

    pub fn daemon_pid(&self, i: usize) -> u32 {
        self.daemons.pid(i)
    }

    /// Flip one byte of `path` in node `i`'s store, beneath its recorded CRC32C (byte 9
    /// of its first chunk).
    pub fn flip(&self, i: usize, path: &str) {
        self.flip_at(i, path, 9);
    }

    /// Flip byte `at` of `path` in node `i`'s store (in its first chunk), beneath its
    /// recorded CRC32C: the store's records still say the file is what it was.
    pub fn flip_at(&self, i: usize, path: &str, at: u64) {
        let store = format!("{}.{}", self.sim.prefix(), node(i));
        let opts = ckptfs_store::StoreOptions {
            name: store.clone(),
            shm_dir: Some(PathBuf::from(format!(
                "/proc/{}/root/dev/shm",
                self.daemon_pid(i)
            ))),
            ..Default::default()
        };
        let s = ckptfs_store::Store::attach(&opts).unwrap_or_else(|e| panic!("attach {store}: {e}"));
        let chunks = s
            .chunk_list(path)
            .unwrap_or_else(|e| panic!("{path} on {}: {e}", node(i)));
        let ckptfs_store::ChunkLocation::Memory(off) = chunks[0].location else {
            panic!("{path} is not in memory")
        };
        assert!(at < chunks[0].len, "byte {at} is past the first chunk of {path}");
        let region = s.data_region();
        // SAFETY: `off + at` lies inside the data region of the node's store (its chunk
        // list says the first chunk starts at `off` and is longer than `at`); nothing
        // writes it now.
        unsafe { *(region.base as *mut u8).add((off + at) as usize) ^= 0x20 };
    }

    /// `ckptfs run --restart` on node `i` printing the dataset it chose (`<none>`), with
    /// `CKPTFS_DEST` set to `pfs` when given.
    pub fn restart_from(&self, i: usize, pfs: Option<&str>) -> Output {
        let mut c = self.cmd(i, &RESTART_PRINTS);
        if let Some(p) = pfs {
            c.env("CKPTFS_DEST", p);
        }
        c.output().unwrap()
    }
}

/// A command's stdout and stderr, one after the other.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// One rank per node writes dataset `v1`: parts of unequal sizes, node4 with two files.
pub fn write_dataset(c: &Cluster) -> Vec<Vec<(String, Vec<u8>)>> {
    write_named(c, "v1", 1, 150_000)
}

/// One rank per node writes dataset `name` (the job's `id`-th): rank `i` a file of
/// `unit * (i + 1) + 77` bytes, node4 a second one.
pub fn write_named(c: &Cluster, name: &str, id: u64, unit: usize) -> Vec<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for i in 0..c.n {
        let out = c.ok(i, &["ckpt", "begin", name]);
        assert!(out.trim() == id.to_string(), "{out}");
    }
    for i in 0..c.n {
        let mut mine = vec![(
            format!("/ckpt/{name}/rank{i}"),
            ckptfs_testsupport::seeded_bytes((id - 1) * 10 + i as u64 + 1, unit * (i + 1) + 77),
        )];
        if i == 3 {
            mine.push((
                format!("/ckpt/{name}/meta"),
                ckptfs_testsupport::seeded_bytes(99, 1234),
            ));
        }
        for (p, b) in &mine {
            c.put(i, b, p);
        }
        c.ok(i, &["ckpt", "complete"]);
        files.push(mine);
    }
    files
}

/// One rank per node writes dataset `name` (the job's `id`-th): rank `i` the files
/// `parts[i]` (path, bytes), none when it is empty (the rank still completes the
/// dataset: its node's part is empty).
pub fn write_files(c: &Cluster, name: &str, id: u64, parts: &[Vec<(String, Vec<u8>)>]) {
    assert_eq!(parts.len(), c.n);
    for i in 0..c.n {
        let out = c.ok(i, &["ckpt", "begin", name]);
        assert!(out.trim() == id.to_string(), "{out}");
    }
    for (i, mine) in parts.iter().enumerate() {
        for (p, b) in mine {
            c.put(i, b, p);
        }
        c.ok(i, &["ckpt", "complete"]);
    }
}

/// Every member protected at one epoch, `since` or newer: that epoch.
pub fn settled(c: &Cluster, key: &str, since: u64) -> u64 {
    c.until(&format!("every member to keep one encoding of {key}"), || {
        let e: Vec<Option<(String, u64)>> = (0..c.n).map(|i| c.erasure_state(i, key)).collect();
        e.iter()
            .all(|x| matches!(x, Some((s, ep)) if s == "protected" && *ep >= since && Some(*ep) == e[0].as_ref().map(|y| y.1)))
    });
    c.erasure_state(0, key).unwrap().1
}

pub fn wait_protected(c: &Cluster, key: &str) -> u64 {
    settled(c, key, 1)
}

/// Every file of `files` on its node byte-identical (an empty file served empty).
pub fn all_back(c: &Cluster, files: &[Vec<(String, Vec<u8>)>], nodes: &[usize]) {
    for &i in nodes {
        for (p, b) in &files[i] {
            assert!(c.get(i, p) == *b, "{p} on {} differs", node(i));
        }
    }
}

/// Every rank's `run --restart` (in the order `order`) chooses `want`; node `i`'s
/// stderr for each rank in `rebuilt` says its files came from the set.
pub fn all_restart(c: &Cluster, order: &[usize], pfs: Option<&str>, want: &str, rebuilt: &[usize]) {
    for &i in order {
        let o = c.restart_from(i, pfs);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{}: {err}\n{}", node(i), c.logs());
        assert_eq!(String::from_utf8_lossy(&o.stdout), want, "{}: {err}", node(i));
        if rebuilt.contains(&i) {
            assert!(err.contains("from erasure:set0"), "{}: {err}", node(i));
        }
    }
}

/// Each node's files of a dataset: (path, bytes).
pub type Parts = Vec<Vec<(String, Vec<u8>)>>;

/// Dataset `v1` written ([`write_dataset`]) and protected by the set: its files, its
/// key and the epoch of its encoding.
pub fn protected_v1(c: &Cluster) -> (Parts, String, u64) {
    let files = write_dataset(c);
    let key = format!("{}.1", c.job);
    let epoch = wait_protected(c, &key);
    (files, key, epoch)
}

/// `restore --from-peers` on node `i`, which must fail (else the failure says `what`):
/// its stdout and stderr.
pub fn failed_restore(c: &Cluster, i: usize, what: &str) -> String {
    let o = c.run(i, &["restore", "--from-peers"]);
    let out = text(&o);
    assert!(!o.status.success(), "{what}: {out}");
    out
}

/// A PFS directory (`DIR/pfs`, its path returned) holding dataset `v0` (the job's
/// first, [`write_named`] with `unit`), drained there by every node; and `v0`'s files.
pub fn v0_on_pfs(c: &Cluster, unit: usize) -> (String, Parts) {
    let pfs = c.dir.path().join("pfs");
    std::fs::create_dir_all(&pfs).unwrap();
    let pfs_s = pfs.to_str().unwrap().to_string();
    let v0 = write_named(c, "v0", 1, unit);
    for i in 0..c.n {
        c.ok(i, &["agent", "--once", "--dest", &pfs_s]);
    }
    (pfs_s, v0)
}

/// How long a slowed encode or rebuild runs before a member is killed in its middle.
pub const MIDWAY: std::time::Duration = std::time::Duration::from_millis(1500);

/// Node `lost` lost and replaced; its `restore --from-peers` over its link slowed to
/// 24 Mbit/s, and the daemon of `survivor`, serving it, SIGKILLed in its middle: the
/// restore's output (its link left slowed).
pub fn rebuild_with_a_survivor_killed(c: &mut Cluster, lost: usize, survivor: usize) -> Output {
    c.lose(lost);
    c.replace(lost);
    c.sim.limit(lost, Some(24_000_000)).unwrap();
    let mut r = c.spawn_restore(lost);
    std::thread::sleep(MIDWAY);
    assert!(
        r.try_wait().unwrap().is_none(),
        "the rebuild ended before a member could be killed in its middle"
    );
    c.kill_daemon(survivor);
    r.wait_with_output().unwrap()
}

/// Dataset `v1` (the job's first, [`write_named`] with `unit`) written with node3's link
/// slowed to 8 Mbit/s, node3's daemon SIGKILLed once the leader encodes it: for 3 s no
/// other member may say the dataset is protected (no header was committed anywhere).
/// Then node3's link and daemon (its store kept) are back. `v1`'s files and its key.
pub fn encode_with_node3_killed(c: &mut Cluster, unit: usize) -> (Parts, String) {
    c.sim.limit(2, Some(8_000_000)).unwrap();
    let files = write_named(c, "v1", 1, unit);
    let key = format!("{}.1", c.job);
    c.until("the leader to start encoding", || {
        c.erasure_state(0, &key).is_some_and(|(s, _)| s == "encoding")
    });
    c.kill_daemon(2);
    for _ in 0..30 {
        for i in (0..c.n).filter(|&i| i != 2) {
            let st = c.erasure_state(i, &key);
            assert!(
                st.as_ref().is_none_or(|(s, _)| s != "protected"),
                "{} says {st:?} with node3 killed mid-encode\n{}",
                node(i),
                c.logs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    c.sim.limit(2, None).unwrap();
    c.replace(2);
    (files, key)
}
