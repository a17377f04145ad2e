//! Issue 32 on simulated nodes: four `ckptfs node` daemons, each in its own network
//! namespace with its own /dev/shm (crates/ckptfs-netsim), in one XOR set of four
//! (`cluster init --redundancy xor --set-size 4`). A dataset is written by one rank per
//! node (parts of unequal sizes, one node with two files); the set's daemons encode it
//! when it completes (no partner copies: the set's parity protects it). Then:
//!
//! - a node lost (daemon SIGKILLed, /dev/shm unmounted, link down) and replaced: every
//!   rank's `ckptfs run --restart` chooses the dataset, the replacement's files come back
//!   from the rebuild (`erasure:set0`), byte-identical, and the set is whole again;
//! - a flipped byte in a survivor's parity shard (beneath its recorded CRC32C): the
//!   shard is refused when a rebuild needs it, and the error names it;
//! - two nodes lost at once: `restore --from-peers` fails naming both, and the restart
//!   falls back (no dataset).
//!
//! Needs root and iproute2: SKIPPED otherwise. Ports 46150-46151 inside the namespaces.

use ckptfs_netsim::{available, Sim, SimOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const CKPTFS: &str = env!("CARGO_BIN_EXE_ckptfs");
const PORT: u16 = 46150;

struct Cluster {
    n: usize,
    sim: Sim,
    dir: tempfile::TempDir,
    file: PathBuf,
    job: String,
    daemons: Vec<Option<Child>>,
}

fn node(i: usize) -> String {
    format!("node{}", i + 1)
}

/// The shim `ckptfs run` loads (next to the binary, else the release build's).
fn preload_lib() -> PathBuf {
    let bin = Path::new(CKPTFS);
    let here = bin.with_file_name("libckptfs_preload.so");
    if here.is_file() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/libckptfs_preload.so")
}

impl Cluster {
    /// `n` nodes in one set (two per rack) with `redundancy` (`xor`, `rs:2`).
    fn new(tag: &str, n: usize, redundancy: &str) -> Option<Cluster> {
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
        let dir = tempfile::Builder::new().prefix("er3-netns").tempdir().unwrap();
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
                &format!("\"{}:{PORT}\"", n.ip),
            );
        }
        text = text.replace(
            "\"127.0.0.1:17440\"",
            &format!("\"{}:{}\"", sim.node(0).ip, PORT + 1),
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

    fn cmd(&self, i: usize, args: &[&str]) -> Command {
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

    fn run(&self, i: usize, args: &[&str]) -> Output {
        self.cmd(i, args).output().unwrap()
    }

    fn ok(&self, i: usize, args: &[&str]) -> String {
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

    fn start(&mut self, i: usize) {
        let log = std::fs::File::create(self.log(i)).unwrap();
        let child = self
            .cmd(i, &["node"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemons[i] = Some(child);
    }

    fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", node(i)))
    }

    fn logs(&self) -> String {
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

    fn until(&self, what: &str, ok: impl Fn() -> bool) {
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
    fn lose(&mut self, i: usize) {
        self.sim.kill_node(i).unwrap();
        if let Some(mut d) = self.daemons[i].take() {
            d.wait().unwrap();
        }
        self.sim.revive(i).unwrap();
    }

    fn replace(&mut self, i: usize) {
        self.start(i);
        self.until(&format!("{}'s new daemon", node(i)), || {
            self.run(i, &["node", "status"]).status.success()
        });
    }

    fn put(&self, i: usize, data: &[u8], path: &str) {
        let src = self.dir.path().join(format!("src-{i}"));
        std::fs::write(&src, data).unwrap();
        self.ok(i, &["put", "-p", src.to_str().unwrap(), path]);
    }

    fn get(&self, i: usize, path: &str) -> Vec<u8> {
        let dst = self.dir.path().join("back");
        let _ = std::fs::remove_file(&dst);
        self.ok(i, &["get", path, dst.to_str().unwrap()]);
        std::fs::read(&dst).unwrap()
    }

    fn status(&self, i: usize) -> Value {
        serde_json::from_str(&self.ok(i, &["node", "status", "--json"])).unwrap()
    }

    /// The state of dataset `key` on node `i` (`protected`, ...), and its epoch.
    fn erasure_state(&self, i: usize, key: &str) -> Option<(String, u64)> {
        let v = self.status(i);
        let d = &v["erasure"]["datasets"][key];
        Some((d["state"].as_str()?.to_string(), d["epoch"].as_u64()?))
    }

    fn restart(&self, i: usize) -> Output {
        self.run(
            i,
            &[
                "run",
                "--restart",
                "--",
                "sh",
                "-c",
                "printf '%s' \"${CKPTFS_RESTART:-<none>}\"",
            ],
        )
    }

    fn daemon_pid(&self, i: usize) -> u32 {
        self.daemons[i].as_ref().unwrap().id()
    }

    /// Flip one byte of `path` in node `i`'s store, beneath its recorded CRC32C.
    fn flip(&self, i: usize, path: &str) {
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
        let region = s.data_region();
        // SAFETY: `off + 9` lies inside the data region of the node's store (its chunk
        // list says so; the shard is at least 64 bytes); nothing writes it now.
        unsafe { *(region.base as *mut u8).add(off as usize + 9) ^= 0x20 };
    }
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
fn write_dataset(c: &Cluster) -> Vec<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for i in 0..c.n {
        let out = c.ok(i, &["ckpt", "begin", "v1"]);
        assert!(out.trim() == "1", "{out}");
    }
    for i in 0..c.n {
        let mut mine = vec![(
            format!("/ckpt/v1/rank{i}"),
            ckptfs_testsupport::seeded_bytes(i as u64 + 1, 150_000 * (i + 1) + 77),
        )];
        if i == 3 {
            mine.push(("/ckpt/v1/meta".into(), ckptfs_testsupport::seeded_bytes(99, 1234)));
        }
        for (p, b) in &mine {
            c.put(i, b, p);
        }
        c.ok(i, &["ckpt", "complete"]);
        files.push(mine);
    }
    files
}

/// Every member protected at one epoch, `since` or newer: that epoch.
fn settled(c: &Cluster, key: &str, since: u64) -> u64 {
    c.until(&format!("every member to keep one encoding of {key}"), || {
        let e: Vec<Option<(String, u64)>> = (0..c.n).map(|i| c.erasure_state(i, key)).collect();
        e.iter()
            .all(|x| matches!(x, Some((s, ep)) if s == "protected" && *ep >= since && Some(*ep) == e[0].as_ref().map(|y| y.1)))
    });
    c.erasure_state(0, key).unwrap().1
}

fn wait_protected(c: &Cluster, key: &str) -> u64 {
    settled(c, key, 1)
}

#[test]
fn xor_set_of_four_rebuilds_a_lost_node_refuses_a_flipped_parity_byte_and_names_two_lost() {
    let Some(mut c) = Cluster::new("er3x", 4, "xor") else {
        return;
    };
    let files = write_dataset(&c);
    let key = format!("{}.1", c.job);
    let epoch = wait_protected(&c, &key);
    // The files' levels: the set, no partner copy (the set's parity replaces it).
    let list = c.ok(2, &["ckpt", "list"]);
    assert!(list.contains("local,erasure"), "{list}");
    let ls = c.ok(2, &["ls", "-l", "/ckpt/v1"]);
    assert!(ls.contains("[local, erasure:set0]"), "{ls}");
    // The dataset's protection (its record settled by the list): the set, not partner
    // copies.
    assert!(ls.contains("ds1:erasure"), "{ls}");
    for i in 0..c.n {
        assert_eq!(c.status(i)["copies_sent"], 0, "{} made partner copies", node(i));
    }

    // 1. node3 lost and replaced: every rank restarts from v1; node3's file comes back
    // from the set, byte-identical.
    c.lose(2);
    c.replace(2);
    let mut chosen = std::collections::BTreeSet::new();
    for i in [2, 0, 1, 3] {
        let o = c.restart(i);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{}: {err}\n{}", node(i), c.logs());
        if i == 2 {
            assert!(err.contains("from erasure:set0"), "{err}");
        }
        chosen.insert(String::from_utf8_lossy(&o.stdout).to_string());
    }
    assert_eq!(chosen, ["v1".to_string()].into());
    for (i, mine) in files.iter().enumerate() {
        for (p, b) in mine {
            assert!(c.get(i, p) == *b, "{p} on {} differs", node(i));
        }
    }
    // The set is whole again: node3's parity shard computed again at the same epoch (or,
    // had the leader found node3 without its share first, a newer encoding of the set).
    let epoch = settled(&c, &key, epoch);

    // 2. A flipped byte in node2's parity shard (stripe 1: node2 is member 1), then
    // node4 lost: the shard fails its CRC32C when the rebuild reads it, is never used,
    // and the error names it.
    let shard = format!("/.ckptfs/erasure/{key}/set0/{epoch:016x}/p.1.0");
    c.flip(1, &shard);
    c.lose(3);
    c.replace(3);
    let o = c.run(3, &["restore", "--from-peers"]);
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !o.status.success(),
        "a rebuild used a damaged parity shard: {out}"
    );
    assert!(out.contains("unreadable: node2"), "{out}");
    assert!(out.contains("node4"), "{out}");

    // 3. Two nodes lost at once (node1 and node4): more than XOR tolerates, named.
    c.lose(0);
    c.replace(0);
    let o = c.run(0, &["restore", "--from-peers"]);
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("2 member(s) lost (node1, node4), the scheme tolerates 1"),
        "{out}"
    );
    let o = c.restart(0);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "<none>", "{err}");
    assert!(err.contains("the scheme tolerates 1"), "{err}");
}

/// Reed-Solomon k = 2 over six nodes: two nodes of different racks (node2 in r1, node5
/// in r3) lost at once; every rank restarts from the dataset, both replacements get
/// their files back from the set byte-identical, and the leader encodes the set again
/// (both rebuilt members lacked their parity shards: each was rebuilt while the other
/// was lost), so every member holds its share of a new encoding.
#[test]
fn rs2_set_of_six_rebuilds_two_nodes_of_different_racks_lost_at_once() {
    let Some(mut c) = Cluster::new("er3r", 6, "rs:2") else {
        return;
    };
    let files = write_dataset(&c);
    let key = format!("{}.1", c.job);
    let epoch = wait_protected(&c, &key);
    c.lose(1);
    c.lose(4);
    c.replace(1);
    c.replace(4);
    let mut chosen = std::collections::BTreeSet::new();
    for i in [1, 4, 0, 2, 3, 5] {
        let o = c.restart(i);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{}: {err}\n{}", node(i), c.logs());
        if i == 1 || i == 4 {
            assert!(err.contains("from erasure:set0"), "{}: {err}", node(i));
        }
        chosen.insert(String::from_utf8_lossy(&o.stdout).to_string());
    }
    assert_eq!(chosen, ["v1".to_string()].into());
    for (i, mine) in files.iter().enumerate() {
        for (p, b) in mine {
            assert!(c.get(i, p) == *b, "{p} on {} differs", node(i));
        }
    }
    // Encoded again: every member protected at one newer epoch.
    let e = settled(&c, &key, epoch + 1);
    assert!(e > epoch);
}
