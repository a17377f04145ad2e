//! A pool of processes on 127.0.0.1 for the CLI tests: `ckptfs cluster init --local 4`,
//! the manager at node1's port and node2..node4 lending memory at theirs (four ports
//! from `port`), refreshes every 100 ms.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ckptfs");

pub struct Pool {
    pub dir: tempfile::TempDir,
    pub kids: Vec<Child>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        for c in &mut self.kids {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Pool {
    pub fn start(prefix: &str, port: u16, extra: &str) -> Pool {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/tmp")
            .unwrap();
        let d = dir.path().to_path_buf();
        let mut p = Pool {
            dir,
            kids: Vec::new(),
        };
        p.run(&[
            "cluster",
            "init",
            "--local",
            "4",
            "--port",
            &port.to_string(),
            "--job",
            prefix,
            "--out",
            "c.toml",
        ]);
        let toml = std::fs::read_to_string(d.join("c.toml")).unwrap();
        let mut toml = toml
            .replace("refresh_ms = 1000", "refresh_ms = 100")
            .replace(
                &format!("addr = \"127.0.0.1:{}\"", port + 100),
                &format!("addr = \"127.0.0.1:{port}\""),
            )
            .replace("benefactor_port_offset = 200", "benefactor_port_offset = 0");
        toml.push_str(extra);
        std::fs::write(d.join("c.toml"), toml).unwrap();
        p.spawn(&["pool", "manager", "--cluster", "c.toml"]);
        for n in 2..=4 {
            p.spawn(&[
                "pool",
                "benefactor",
                "--cluster",
                "c.toml",
                "--node-id",
                &format!("node{n}"),
                "--mem",
                "64M",
            ]);
        }
        let t0 = Instant::now();
        while p.alive() != 3 {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "benefactors not up: {}",
                p.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn cluster_file(&self) -> PathBuf {
        self.dir.path().join("c.toml")
    }

    pub fn spawn(&mut self, args: &[&str]) {
        let log = std::fs::File::create(self.path().join(format!("kid{}.log", self.kids.len()))).unwrap();
        let c = Command::new(BIN)
            .current_dir(self.path())
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.kids.push(c);
    }

    /// The daemons' stderr, for a failure's message.
    pub fn logs(&self) -> String {
        (0..self.kids.len())
            .map(|i| std::fs::read_to_string(self.path().join(format!("kid{i}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn run(&self, args: &[&str]) -> String {
        let out = Command::new(BIN)
            .current_dir(self.path())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ckptfs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_str(&self.run(args)).unwrap()
    }

    fn alive(&self) -> usize {
        let out = Command::new(BIN)
            .current_dir(self.path())
            .args(["pool", "status", "--cluster", "c.toml", "--json"])
            .output()
            .unwrap();
        if !out.status.success() {
            return 0;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .filter(|b| b["alive"] == true)
            .count()
    }

    /// The pool paths `ckptfs pool ls --json` lists.
    pub fn listed(&self) -> Vec<String> {
        self.json(&["pool", "ls", "--cluster", "c.toml", "--json"])
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_string())
            .collect()
    }

    /// `ckptfs pool get PATH` into a local file; its bytes.
    pub fn get(&self, path: &str) -> Vec<u8> {
        let out = self.path().join("got.dat");
        let _ = std::fs::remove_file(&out);
        self.run(&["pool", "get", "--cluster", "c.toml", path, out.to_str().unwrap()]);
        std::fs::read(out).unwrap()
    }
}

/// The C test program's pattern (tests/c/capi_pool_test.c).
pub fn pattern(len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}
