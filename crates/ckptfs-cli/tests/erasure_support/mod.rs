//! Simulated nodes for the erasure-set tests (`erasure_netns*.rs`): `n` `ckptfs node`
//! daemons, each in its own network namespace with its own /dev/shm
//! (crates/ckptfs-netsim), in one set (`cluster init --redundancy SCHEME --set-size n`);
//! the commands a rank runs on a node, nodes lost and replaced, bytes flipped beneath
//! their CRC32C in a node's store, datasets written one rank per node.
//!
//! Needs root and iproute2: [`Cluster::new`] answers None after
//! `ckptfs_testsupport::skip_root_only` (which fails the test under
//! `CKPTFS_REQUIRE_ROOT_TESTS=1`, as in CI).

#![allow(dead_code)]

use ckptfs_netsim::{available, Sim, SimOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

pub const CKPTFS: &str = env!("CARGO_BIN_EXE_ckptfs");

pub struct Cluster {
    pub n: usize,
    pub sim: Sim,
    pub dir: tempfile::TempDir,
    pub file: PathBuf,
    pub job: String,
    daemons: Vec<Option<Child>>,
}

pub fn node(i: usize) -> String {
    format!("node{}", i + 1)
}

/// The shim `ckptfs run` loads (next to the binary, else the release build's).
pub fn preload_lib() -> PathBuf {
    let bin = Path::new(CKPTFS);
    let here = bin.with_file_name("libckptfs_preload.so");
    if here.is_file() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/libckptfs_preload.so")
}

impl Cluster {
    /// `n` nodes in one set (two per rack: node1 and node2 in r1, node3 and node4 in
    /// r2, ...) with `redundancy` (`xor`, `rs:2`), each daemon listening on `port` in
    /// its namespace (the set's cluster port `port + 1` on node1). None (after
    /// [`ckptfs_testsupport::skip_root_only`]) when namespaces are not available.
    pub fn new(tag: &str, n: usize, redundancy: &str, port: u16) -> Option<Cluster> {
        if let Err(why) = available() {
            ckptfs_testsupport::skip_root_only(why);
            return None;
        }
        let sim = Sim::new(
            n,
            SimOptions {
                tag: tag.into(),
                shm_size: "256m".into(),
                hostnames: Some((0..n).map(node).collect()),
                ..Default::default()
            },
        )
        .expect("simulated nodes");
        let dir = tempfile::Builder::new()
            .prefix(&format!("{tag}-netns"))
            .tempdir()
            .unwrap();
        let file = dir.path().join("c.toml");
        let job = format!("j{}", std::process::id());
        let out = Command::new(CKPTFS)
            .args([
                "cluster",
                "init",
                "--local",
                &n.to_string(),
                "--redundancy",
                redundancy,
            ])
            .args(["--set-size", &n.to_string(), "--out"])
            .arg(&file)
            .args(["--port", "17340", "--job", sim.prefix(), "--heartbeat-ms", "200"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut text = std::fs::read_to_string(&file).unwrap();
        for (i, n) in sim.nodes().iter().enumerate() {
            text = text.replace(
                &format!("\"127.0.0.1:{}\"", 17340 + i),
                &format!("\"{}:{port}\"", n.ip),
            );
        }
        text = text.replace(
            "\"127.0.0.1:17440\"",
            &format!("\"{}:{}\"", sim.node(0).ip, port + 1),
        );
        assert!(!text.contains("127.0.0.1"), "{text}");
        assert!(text.contains(&format!("erasure = \"{redundancy}\"")), "{text}");
        std::fs::write(&file, text).unwrap();
        let mut c = Cluster {
            n,
            sim,
            dir,
            file,
            job,
            daemons: (0..n).map(|_| None).collect(),
        };
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
        let mut c = self.sim.node(i).command(CKPTFS);
        for (k, _) in std::env::vars() {
            if k.starts_with("CKPTFS_") && k != "CKPTFS_REQUIRE_ROOT_TESTS" {
                c.env_remove(k);
            }
        }
        c.arg("--cluster")
            .arg(&self.file)
            .args(["--node-id", &node(i)])
            .args(args)
            .env("CKPTFS_MEM_SIZE", "64M")
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
        let o = self.run(i, args);
        assert!(
            o.status.success(),
            "{} ckptfs {args:?}: {}{}\n{}",
            node(i),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            self.logs()
        );
        String::from_utf8(o.stdout).unwrap()
    }

    pub fn start(&mut self, i: usize) {
        let log = std::fs::File::create(self.log(i)).unwrap();
        let child = self
            .cmd(i, &["node"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemons[i] = Some(child);
    }

    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", node(i)))
    }

    pub fn logs(&self) -> String {
        (0..self.n)
            .map(|i| {
                format!(
                    "--- {} log\n{}",
                    node(i),
                    std::fs::read_to_string(self.log(i)).unwrap_or_default()
                )
            })
            .collect()
    }

    pub fn until(&self, what: &str, ok: impl Fn() -> bool) {
        for _ in 0..1200 {
            if ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}\n{}", self.logs());
    }

    /// Node `i` lost (every process SIGKILLed, /dev/shm gone, link down), then back
    /// empty with its daemon (a replacement).
    pub fn lose(&mut self, i: usize) {
        self.sim.kill_node(i).unwrap();
        if let Some(mut d) = self.daemons[i].take() {
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
        if let Some(mut d) = self.daemons[i].take() {
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
        self.daemons[i].as_ref().unwrap().id()
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
        let mut c = self.cmd(
            i,
            &[
                "run",
                "--restart",
                "--",
                "sh",
                "-c",
                "printf '%s' \"${CKPTFS_RESTART:-<none>}\"",
            ],
        );
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

impl Drop for Cluster {
    fn drop(&mut self) {
        for d in self.daemons.iter_mut().flatten() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
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
