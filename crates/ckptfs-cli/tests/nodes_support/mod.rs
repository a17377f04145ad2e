//! Nodes for the CLI's cluster tests (`partner_netns.rs`, `pool_netns.rs`,
//! `fault_campaign.rs`, the erasure tests through `erasure_support`, and the loopback
//! clusters of `datasets_cluster.rs` and `levels_cluster.rs`): simulated nodes, each in
//! its own network namespace with its own /dev/shm (crates/ckptfs-netsim); the cluster
//! file `cluster init --local` writes, moved onto the namespaces' addresses; node
//! daemons started with their stderr in a log each, killed when dropped, their logs
//! printed when a wait times out; the `run --restart` that prints the dataset chosen.
//!
//! Simulated nodes need root and iproute2: [`simulated`] answers None after
//! `ckptfs_testsupport::skip_root_only` (which fails the test under
//! `CKPTFS_REQUIRE_ROOT_TESTS=1`, as in CI).

#![allow(dead_code)]

use ckptfs_netsim::{available, Sim, SimOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

pub const CKPTFS: &str = env!("CARGO_BIN_EXE_ckptfs");

/// The id of node `i` (from 0): `node1`, `node2`, ...
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

/// `ckptfs run --restart` running a command that prints the dataset the restart chose
/// (`<none>` without one).
pub const RESTART_PRINTS: [&str; 6] = [
    "run",
    "--restart",
    "--",
    "sh",
    "-c",
    "printf '%s' \"${CKPTFS_RESTART:-<none>}\"",
];

/// Options of `n` simulated nodes named `node1`... (a hosts file each), tagged `tag`,
/// each /dev/shm of `shm_size`.
pub fn named(tag: &str, n: usize, shm_size: &str) -> SimOptions {
    SimOptions {
        tag: tag.into(),
        shm_size: shm_size.into(),
        hostnames: Some((0..n).map(node).collect()),
        ..Default::default()
    }
}

/// The stdout of `o`, a command that must have succeeded: else the failure shows
/// `what`, the command's stdout and stderr, then `more`.
pub fn stdout_ok(o: Output, what: &str, more: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}{}{more}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// `n` simulated nodes; None (after [`ckptfs_testsupport::skip_root_only`]) when
/// network namespaces are not available.
pub fn simulated(n: usize, opts: SimOptions) -> Option<Sim> {
    if let Err(why) = available() {
        ckptfs_testsupport::skip_root_only(why);
        return None;
    }
    Some(Sim::new(n, opts).expect("simulated nodes"))
}

/// `ckptfs cluster init --local N --port BASE --out FILE` and `args` (checked): `n` nodes
/// at 127.0.0.1:BASE+i, the pool manager at 127.0.0.1:BASE+100.
pub fn cluster_init(file: &Path, n: usize, base: u16, args: &[&str]) {
    let out = Command::new(CKPTFS)
        .args(["cluster", "init", "--local", &n.to_string(), "--out"])
        .arg(file)
        .args(["--port", &base.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The cluster file `file` of [`cluster_init`] (ports from `base`) moved onto the nodes
/// of `sim`: node `i`'s address becomes its namespace address at `port` (every daemon
/// on the same port of its own address), the pool manager's node1's at `manager`; no
/// loopback address is left (checked). The text, for the caller to edit further and
/// write.
pub fn on_namespaces(file: &Path, sim: &Sim, base: u16, port: u16, manager: u16) -> String {
    let mut text = std::fs::read_to_string(file).unwrap();
    for (i, n) in sim.nodes().iter().enumerate() {
        text = text.replace(
            &format!("\"127.0.0.1:{}\"", base as usize + i),
            &format!("\"{}:{port}\"", n.ip),
        );
    }
    text = text.replace(
        &format!("\"127.0.0.1:{}\"", base as usize + 100),
        &format!("\"{}:{manager}\"", sim.node(0).ip),
    );
    assert!(!text.contains("127.0.0.1"), "{text}");
    text
}

/// `cmd` (a daemon) started with its stdout dropped and its stderr in `log` (opened
/// already: new, or appended to).
pub fn spawn_logged(mut cmd: Command, log: std::fs::File) -> Child {
    cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap()
}

/// The daemons of a test's nodes, one per node, each with its log `DIR/nodeI.log`
/// (written anew by each start); every one still running is SIGKILLed when this is
/// dropped.
pub struct Daemons {
    dir: PathBuf,
    kids: Vec<Option<Child>>,
}

impl Daemons {
    /// Room for `n` nodes' daemons, their logs in `dir`.
    pub fn new(dir: &Path, n: usize) -> Daemons {
        Daemons {
            dir: dir.to_path_buf(),
            kids: (0..n).map(|_| None).collect(),
        }
    }

    /// Start node `i`'s daemon: `cmd`, its stderr in a new log.
    pub fn start(&mut self, i: usize, cmd: Command) {
        let log = std::fs::File::create(self.log(i)).unwrap();
        self.kids[i] = Some(spawn_logged(cmd, log));
    }

    /// Node `i`'s daemon log.
    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("{}.log", node(i)))
    }

    /// Every daemon's log, each after a `--- nodeI log` line.
    pub fn logs(&self) -> String {
        (0..self.kids.len())
            .map(|i| {
                format!(
                    "--- {} log\n{}",
                    node(i),
                    std::fs::read_to_string(self.log(i)).unwrap_or_default()
                )
            })
            .collect()
    }

    /// Poll (generously: the machine may be loaded; 2 minutes) until `ok`; a timeout
    /// fails with every daemon's log.
    pub fn until(&self, what: &str, ok: impl Fn() -> bool) {
        for _ in 0..1200 {
            if ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}\n{}", self.logs());
    }

    /// Node `i`'s daemon, no longer killed on drop (None when not running).
    pub fn take(&mut self, i: usize) -> Option<Child> {
        self.kids[i].take()
    }

    /// Node `i`'s daemon SIGKILLed (if running) and reaped.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut d) = self.kids[i].take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }

    /// The process id of node `i`'s daemon.
    pub fn pid(&self, i: usize) -> u32 {
        self.kids[i].as_ref().expect("a running daemon").id()
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for d in self.kids.iter_mut().flatten() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// Simulated nodes with a cluster file and their daemons: what the netns tests share.
/// The daemons are dropped (killed) before the nodes.
pub struct Nodes {
    pub daemons: Daemons,
    pub sim: Sim,
    pub dir: tempfile::TempDir,
    pub file: PathBuf,
}

impl Nodes {
    /// `sim`'s nodes with the cluster file `c.toml` of `dir` (written by the caller), no
    /// daemon started yet.
    pub fn new(sim: Sim, dir: tempfile::TempDir) -> Nodes {
        let file = dir.path().join("c.toml");
        Nodes {
            daemons: Daemons::new(dir.path(), sim.nodes().len()),
            sim,
            dir,
            file,
        }
    }

    /// Node `i`'s daemon log.
    pub fn log(&self, i: usize) -> PathBuf {
        self.daemons.log(i)
    }

    /// Every daemon's log ([`Daemons::logs`]).
    pub fn logs(&self) -> String {
        self.daemons.logs()
    }

    /// Poll until `ok`, a timeout failing with every daemon's log ([`Daemons::until`]).
    pub fn until(&self, what: &str, ok: impl Fn() -> bool) {
        self.daemons.until(what, ok)
    }

    /// `ckptfs --cluster FILE --node-id nodeI ARGS` in node `i`'s namespaces (without
    /// the caller's `CKPTFS_CLUSTER`, `CKPTFS_NODE_ID` and `CKPTFS_STORE`).
    pub fn command(&self, i: usize, args: &[&str]) -> Command {
        let mut c = self.sim.node(i).command(CKPTFS);
        c.arg("--cluster")
            .arg(&self.file)
            .args(["--node-id", &node(i)])
            .args(args)
            .env_remove("CKPTFS_CLUSTER")
            .env_remove("CKPTFS_NODE_ID")
            .env_remove("CKPTFS_STORE");
        c
    }

    /// The stdout of `cmd`, node `i`'s `ckptfs ARGS`, which must succeed (else the
    /// failure names the node and the command, with its stderr and every daemon's log).
    pub fn stdout_of(&self, i: usize, args: &[&str], mut cmd: Command) -> String {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{} ckptfs {args:?}: {}\n{}",
            node(i),
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8(out.stdout).unwrap()
    }
}
