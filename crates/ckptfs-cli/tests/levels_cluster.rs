//! `ckptfs ckpt list --cluster` with a registry level of the settings' `[levels]` order:
//! two node daemons on 127.0.0.1 (loopback), one rank each, drain their parts of a
//! dataset to the same bucket of a real S3 server (versitygw, as in `levels.rs`); the
//! job-wide listing shows the object level (`s3:BUCKET/PREFIX`) as a level of the
//! dataset, also once both nodes' memory copies are gone. Without the server binary the
//! test prints SKIPPED, unless CKPTFS_REQUIRE_SERVICES is set (CI), where it fails.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

mod nodes_support;
mod s3_support;
use nodes_support::{node, spawn_logged, stdout_ok};
use s3_support::{data, Server};

const NODES: usize = 2;

struct Job {
    dir: tempfile::TempDir,
    daemons: Vec<Option<Child>>,
    s3: Vec<(String, String)>,
}

/// The shim `ckptfs run` loads (next to the binary, else the release build's).
fn preload_lib() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_ckptfs"));
    bin.with_file_name("libckptfs_preload.so")
}

impl Job {
    fn new(srv: &Server) -> Job {
        let port = ckptfs_testsupport::free_ports(26300..26380, NODES as u16);
        let job = Job {
            dir: tempfile::tempdir().unwrap(),
            daemons: (0..NODES).map(|_| None).collect(),
            s3: srv.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        };
        let o = Command::new(env!("CARGO_BIN_EXE_ckptfs"))
            .current_dir(job.dir.path())
            .args(["cluster", "init", "--local", "2", "--out", "c.toml"])
            .args(["--heartbeat-ms", "200", "--port", &port.to_string()])
            .args(["--job", &format!("ol-lvc{}", std::process::id())])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        job
    }

    fn cmd(&self, n: usize, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ckptfs"));
        for (k, _) in std::env::vars() {
            if k.starts_with("CKPTFS_") || k.starts_with("AWS_") {
                c.env_remove(k);
            }
        }
        c.current_dir(self.dir.path())
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path())
            .env("CKPTFS_MEM_SIZE", "32M")
            .env("CKPTFS_CHUNK_SIZE", "64K")
            .env("CKPTFS_JOB", "j")
            .env("CKPTFS_RANK", n.to_string())
            .env("CKPTFS_NRANKS", NODES.to_string())
            .env("CKPTFS_LOCAL_NRANKS", "1")
            .env("CKPTFS_NODE_TIMEOUT_MS", "10000")
            .env("CKPTFS_PRELOAD_LIB", preload_lib())
            .envs(self.s3.iter().map(|(k, v)| (k, v)))
            .args(["--cluster", "c.toml", "--node-id", &node(n)])
            .args(args);
        c
    }

    fn run(&self, n: usize, args: &[&str]) -> Output {
        self.cmd(n, args).output().unwrap()
    }

    fn ok(&self, n: usize, args: &[&str]) -> String {
        let what = format!("ckptfs {args:?} on {} failed", node(n));
        stdout_ok(self.run(n, args), &what, "")
    }

    fn start(&mut self, n: usize) {
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", node(n)))).unwrap();
        self.daemons[n] = Some(spawn_logged(self.cmd(n, &["node"]), log));
        let t = Instant::now();
        while !self.run(n, &["node", "status", "--json"]).status.success() {
            assert!(
                t.elapsed() < Duration::from_secs(90),
                "{}'s daemon did not start",
                node(n)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn put(&self, n: usize, path: &str, bytes: &[u8]) {
        let src = self.dir.path().join(format!("src.{n}"));
        std::fs::write(&src, bytes).unwrap();
        self.ok(n, &["put", "-p", src.to_str().unwrap(), path]);
    }

    /// `ckpt list --json` on node `n` (job-wide), with `CKPTFS_LEVELS` = `levels`.
    fn list(&self, n: usize, levels: &str) -> Vec<Value> {
        let o = self
            .cmd(n, &["ckpt", "list", "--json"])
            .env("CKPTFS_LEVELS", levels)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["datasets"].as_array().unwrap().clone()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for n in 0..NODES {
            if let Some(mut c) = self.daemons[n].take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            let _ = self.run(n, &["destroy", "--force"]);
        }
        if std::thread::panicking() {
            for n in 0..NODES {
                let p = self.dir.path().join(format!("{}.log", node(n)));
                eprintln!(
                    "--- {} log:\n{}",
                    node(n),
                    std::fs::read_to_string(p).unwrap_or_default()
                );
            }
        }
    }
}

/// Both nodes' parts of dataset `step1` drained to one bucket: `ckpt list --cluster`
/// lists `s3:BUCKET/run5` among the dataset's levels (with `local`), and once both nodes
/// lost their memory copies, only that level; without the level in the order the same
/// dataset is on no level.
#[test]
fn ckpt_list_across_nodes_shows_the_object_level_holding_every_part() {
    let Some(srv) = Server::start() else { return };
    let mut job = Job::new(&srv);
    for n in 0..NODES {
        job.start(n);
    }
    let files: Vec<(String, Vec<u8>)> = (0..NODES)
        .map(|n| (format!("/ck/1/rank{n}"), data(50 + n as u32, 100_000 + n * 1000)))
        .collect();
    for n in 0..NODES {
        job.ok(n, &["ckpt", "begin", "step1"]);
    }
    for (n, (p, b)) in files.iter().enumerate() {
        job.put(n, p, b);
        job.ok(n, &["ckpt", "complete"]);
    }
    let id = format!("s3:{}/run5", srv.bucket);
    let levels = format!("local,partner,{id}");
    // Only node1 drained: the dataset is not wholly in the bucket yet.
    let url = format!("s3://{}/run5", srv.bucket);
    job.ok(0, &["agent", "--once", "--dest", &url]);
    let l = job.list(1, &levels);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(l[0]["complete"], true, "{}", l[0]);
    assert!(
        !l[0]["levels"].as_array().unwrap().iter().any(|v| *v == *id),
        "{}",
        l[0]
    );
    job.ok(1, &["agent", "--once", "--dest", &url]);
    for n in 0..NODES {
        let l = job.list(n, &levels);
        let lv: Vec<&str> = l[0]["levels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            lv.contains(&"local") && lv.contains(&id.as_str()),
            "on {}: {lv:?}",
            node(n)
        );
        assert_eq!(l[0]["nodes"], serde_json::json!(["node1", "node2"]), "{}", l[0]);
    }
    // Both nodes lose their memory copies (and the partner copies go with the files).
    for (n, (p, _)) in files.iter().enumerate() {
        job.ok(n, &["rm", p]);
    }
    let t = Instant::now();
    loop {
        let l = job.list(0, &levels);
        if l[0]["levels"] == serde_json::json!([id.clone()]) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{}", l[0]);
        std::thread::sleep(Duration::from_millis(200));
    }
    // The text listing names the level too.
    let o = job
        .cmd(0, &["ckpt", "list"])
        .env("CKPTFS_LEVELS", &levels)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains(&id), "{text}");
    // Without the level in the order: on no level.
    let l = job.list(0, "local,partner,pfs");
    assert_eq!(l[0]["levels"], serde_json::json!([]), "{}", l[0]);
}
