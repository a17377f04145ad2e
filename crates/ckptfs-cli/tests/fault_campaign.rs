//! A seeded fault campaign (issue "Failures in sequence", Tests): 4 simulated nodes in
//! 2 racks, one `ckptfs node` daemon each, a job that writes, rewrites and removes
//! files on every node, and between its steps random faults: node loss (daemon and
//! every process SIGKILLed, the node's memory gone, a replacement started empty and
//! filled with `restore --from-peers`), partner loss followed by the node's own loss,
//! rack loss, a node lost together with its partner (an allowed loss: counted), daemon
//! restarts, a partner daemon stopped (SIGSTOP: stand-in copies) while the files change,
//! and a byte flipped in a partner copy.
//!
//! Every read is checked against a model of what the job wrote: no file the model says
//! is protected (re-protection finished, every live node's `unprotected_files` 0 and
//! every file listed with a partner) may be lost when one failure domain goes, no
//! superseded version may come back, no removed file may come back, and every file read
//! must be byte-identical to its newest version.
//!
//! Nodes are network namespaces with their own /dev/shm (crates/ckptfs-netsim) when
//! running as root; otherwise stores and daemons on 127.0.0.1 (with
//! `CKPTFS_REQUIRE_ROOT_TESTS=1` set, not being root FAILS instead). The seed is
//! printed; `CKPTFS_CAMPAIGN_SEED` and `CKPTFS_CAMPAIGN_ROUNDS` replay or lengthen a
//! campaign. The summary (faults injected by type, violations) is printed as one JSON
//! line starting with `campaign:`.

mod nodes_support;

use nodes_support::{cluster_init, named, node, on_namespaces, stdout_ok, CKPTFS};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const N: usize = 4;
/// Port of every daemon inside its namespace.
const NETNS_PORT: u16 = 41050;

/// xorshift64*: every run of a seed makes the same choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// FNV-1a: versions are remembered by hash.
fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

struct Camp {
    sim: Option<ckptfs_netsim::Sim>,
    dir: tempfile::TempDir,
    file: PathBuf,
    stores: Vec<String>,
    daemons: Vec<Option<Child>>,
    partner: Vec<usize>,
    /// Each node's last `restore --from-peers --json` report.
    last_restore: Vec<String>,
}

impl Camp {
    fn new() -> Camp {
        let sim = match ckptfs_netsim::available() {
            Ok(()) => Some(ckptfs_netsim::Sim::new(N, named("camp", N, "256m")).expect("simulated nodes")),
            Err(why) => {
                assert!(
                    std::env::var("CKPTFS_REQUIRE_ROOT_TESTS").as_deref() != Ok("1"),
                    "CKPTFS_REQUIRE_ROOT_TESTS=1 but the node simulation is unavailable: {why}"
                );
                eprintln!("network namespaces unavailable ({why}): nodes on 127.0.0.1");
                None
            }
        };
        let dir = tempfile::Builder::new().prefix("camp-").tempdir().unwrap();
        let file = dir.path().join("c.toml");
        let base = match &sim {
            Some(_) => 41000,
            None => ckptfs_testsupport::free_ports(26400..26800, 4),
        };
        let job = format!("camp{}", std::process::id());
        cluster_init(&file, N, base, &["--heartbeat-ms", "200", "--job", &job]);
        if let Some(sim) = &sim {
            // The pool manager's address (unused here) moves to node1's address too.
            let text = on_namespaces(&file, sim, base, NETNS_PORT, base + 100);
            std::fs::write(&file, text).unwrap();
        }
        let c = ckptfs_cluster::Cluster::load(&file).unwrap();
        let stores = c.nodes.iter().map(|n| n.store.clone()).collect();
        let mut camp = Camp {
            sim,
            dir,
            file,
            stores,
            daemons: (0..N).map(|_| None).collect(),
            partner: Vec::new(),
            last_restore: vec![String::new(); N],
        };
        for i in 0..N {
            camp.start(i);
        }
        let plan: serde_json::Value =
            serde_json::from_str(&camp.ok(0, &["cluster", "plan", "--json"])).unwrap();
        camp.partner = (0..N)
            .map(|i| {
                let p = plan["plan"]["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["id"] == node(i))
                    .unwrap()["partners"][0]
                    .as_str()
                    .unwrap()
                    .to_string();
                p.trim_start_matches("node").parse::<usize>().unwrap() - 1
            })
            .collect();
        // The promise needs every partner in the other rack.
        for i in 0..N {
            assert_ne!(i / 2, camp.partner[i] / 2, "partners {:?}", camp.partner);
        }
        camp
    }

    fn cmd(&self, i: usize, args: &[&str]) -> Command {
        let mut c = match &self.sim {
            Some(s) => s.node(i).command(CKPTFS),
            None => Command::new(CKPTFS),
        };
        for (k, _) in std::env::vars() {
            if k.starts_with("CKPTFS_") {
                c.env_remove(k);
            }
        }
        c.current_dir(self.dir.path())
            .env("CKPTFS_MEM_SIZE", "48M")
            .env("CKPTFS_CHUNK_SIZE", "64K")
            .arg("--cluster")
            .arg(&self.file)
            .args(["--node-id", &node(i)])
            .args(args);
        c
    }

    fn run(&self, i: usize, args: &[&str]) -> Output {
        self.cmd(i, args).stdin(Stdio::null()).output().unwrap()
    }

    fn ok(&self, i: usize, args: &[&str]) -> String {
        stdout_ok(self.run(i, args), &format!("{} ckptfs {args:?}", node(i)), "")
    }

    fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", node(i)))
    }

    fn start(&mut self, i: usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .unwrap();
        let mut cmd = self.cmd(i, &["node"]);
        if std::env::var_os("CKPTFS_CAMPAIGN_LOGS").is_some() {
            cmd.env("RUST_LOG", "info");
        }
        let child = cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap();
        self.daemons[i] = Some(child);
        until(&format!("{}'s daemon", node(i)), || {
            self.status(i).is_some_and(|s| s["running"] == true)
        });
    }

    fn pid(&self, i: usize) -> u32 {
        self.daemons[i].as_ref().expect("daemon").id()
    }

    fn signal(&self, i: usize, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid(i).to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {}", node(i));
    }

    /// The daemon SIGKILLed, the store kept (a daemon restart).
    fn kill_daemon(&mut self, i: usize) {
        if let Some(mut c) = self.daemons[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Node loss: every process of the node SIGKILLed and its memory gone.
    fn lose(&mut self, i: usize) {
        match &self.sim {
            Some(s) => {
                s.kill_node(i).unwrap();
                self.kill_daemon(i);
            }
            None => {
                self.kill_daemon(i);
                self.ok(i, &["destroy"]);
            }
        }
    }

    /// A replacement: fresh memory, a daemon, `restore --from-peers`.
    fn replace(&mut self, i: usize) -> serde_json::Value {
        if let Some(s) = &self.sim {
            s.revive(i).unwrap();
        }
        self.start(i);
        // The other daemons notice a replacement by their heartbeat connection to it
        // breaking (200 ms heartbeats): only then can their status say its copies are
        // to be verified.
        std::thread::sleep(Duration::from_millis(600));
        let o = self.run(i, &["restore", "--from-peers", "--json"]);
        self.last_restore[i] = String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| {
            panic!(
                "restore on {}: {}{}",
                node(i),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
    }

    fn status(&self, i: usize) -> Option<serde_json::Value> {
        let o = self.run(i, &["node", "status", "--json"]);
        serde_json::from_slice(&o.stdout)
            .ok()
            .filter(|_| o.status.success())
    }

    /// `ls -l` lines of `/c` by file name.
    fn listing(&self, i: usize) -> BTreeMap<String, String> {
        let o = self.run(i, &["ls", "-l", "/c"]);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.rsplit(' ').next().map(|n| (n.to_string(), l.to_string())))
            .collect()
    }

    fn put(&self, i: usize, path: &str, bytes: &[u8]) {
        let src = self.dir.path().join("src");
        std::fs::write(&src, bytes).unwrap();
        self.ok(i, &["put", "-p", src.to_str().unwrap(), path]);
    }

    fn get(&self, i: usize, path: &str) -> Option<Vec<u8>> {
        let out = self.dir.path().join("back");
        let _ = std::fs::remove_file(&out);
        self.run(i, &["get", path, out.to_str().unwrap()])
            .status
            .success()
            .then(|| std::fs::read(&out).unwrap())
    }

    /// Flip one byte of node `owner`'s file `path` in `holder`'s partner copy. False
    /// when the copy is not there (or not in memory).
    fn flip_copy(&self, holder: usize, owner: usize, path: &str) -> bool {
        let shm_dir = self
            .sim
            .as_ref()
            .map(|_| PathBuf::from(format!("/proc/{}/root/dev/shm", self.pid(holder))));
        let opts = ckptfs_store::StoreOptions {
            name: self.stores[holder].clone(),
            shm_dir,
            ..Default::default()
        };
        let Ok(s) = ckptfs_store::Store::attach(&opts) else {
            return false;
        };
        let p = ckptfs_node::partner_store::copy_path(&node(owner), path);
        let Ok(chunks) = s.chunk_list(&p) else {
            return false;
        };
        let Some(c) = chunks.first() else { return false };
        let ckptfs_store::ChunkLocation::Memory(off) = c.location else {
            return false;
        };
        let region = s.data_region();
        // SAFETY: `off + 9` lies inside the data region of the holder's store (its chunk
        // list says so; every file here is at least 1000 bytes); the copy is complete and
        // nothing writes it now. A racing reader sees either byte, both are checked.
        unsafe { *(region.base as *mut u8).add(off as usize + 9) ^= 0x20 };
        true
    }
}

impl Drop for Camp {
    fn drop(&mut self) {
        for i in 0..N {
            if let Some(mut c) = self.daemons[i].take() {
                let _ = Command::new("kill").args(["-CONT", &c.id().to_string()]).status();
                let _ = c.kill();
                let _ = c.wait();
            }
            if self.sim.is_none() {
                let _ = self.run(i, &["destroy", "--force"]);
            }
        }
        // CKPTFS_CAMPAIGN_LOGS=DIR keeps every daemon's whole log there.
        if let Ok(d) = std::env::var("CKPTFS_CAMPAIGN_LOGS") {
            let _ = std::fs::create_dir_all(&d);
            for i in 0..N {
                let _ = std::fs::copy(self.log(i), PathBuf::from(&d).join(format!("{}.log", node(i))));
            }
        }
        if std::thread::panicking() {
            for i in 0..N {
                let log = std::fs::read_to_string(self.log(i)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!("--- {} log (last lines)", node(i));
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
}

fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the job wrote, per node: the newest version of each file, the hashes of the
/// versions it superseded, the files it removed.
#[derive(Default)]
struct Model {
    files: Vec<BTreeMap<String, Vec<u8>>>,
    old: Vec<BTreeMap<String, BTreeSet<u64>>>,
    removed: Vec<BTreeSet<String>>,
    version: u64,
    /// Each node's `ls -l /c` when protection was last found finished.
    listed: Vec<BTreeMap<String, String>>,
}

#[derive(Default, Debug, serde::Serialize)]
struct Tally {
    faults: BTreeMap<&'static str, u64>,
    writes: u64,
    rewrites: u64,
    removes: u64,
    checked_reads: u64,
    /// Files lost although the model said they were protected (violation).
    lost_protected: Vec<String>,
    /// Older versions read back as current (violation).
    superseded_restored: Vec<String>,
    /// Removed files that came back (violation).
    resurrected: Vec<String>,
    /// Bytes matching no version the job wrote (violation).
    wrong_bytes: Vec<String>,
    /// Files lost in an allowed loss (a node and its partner, or a flipped copy).
    allowed_losses: u64,
    /// Flipped copies that were refused (the file came back intact or not at all).
    flips_refused: u64,
}

impl Tally {
    fn violations(&self) -> usize {
        self.lost_protected.len()
            + self.superseded_restored.len()
            + self.resurrected.len()
            + self.wrong_bytes.len()
    }
}

impl Model {
    fn new() -> Model {
        Model {
            files: vec![BTreeMap::new(); N],
            old: vec![BTreeMap::new(); N],
            removed: vec![BTreeSet::new(); N],
            version: 0,
            listed: vec![BTreeMap::new(); N],
        }
    }

    /// Write (or rewrite) `path` on node `i`.
    fn write(&mut self, c: &Camp, t: &mut Tally, rng: &mut Rng, i: usize, path: &str) {
        self.version += 1;
        let len = 1000 + rng.below(150_000);
        let bytes = ckptfs_testsupport::seeded_bytes(self.version, len);
        c.put(i, path, &bytes);
        if let Some(prev) = self.files[i].insert(path.to_string(), bytes) {
            self.old[i]
                .entry(path.to_string())
                .or_default()
                .insert(hash(&prev));
            t.rewrites += 1;
        } else {
            t.writes += 1;
        }
        self.removed[i].remove(path);
    }

    fn remove(&mut self, c: &Camp, t: &mut Tally, i: usize, path: &str) {
        c.ok(i, &["rm", path]);
        if let Some(prev) = self.files[i].remove(path) {
            self.old[i]
                .entry(path.to_string())
                .or_default()
                .insert(hash(&prev));
        }
        self.removed[i].insert(path.to_string());
        t.removes += 1;
    }

    /// A random change on a random node of `on`.
    fn change(&mut self, c: &Camp, t: &mut Tally, rng: &mut Rng, on: &[usize]) {
        let i = on[rng.below(on.len())];
        let names: Vec<String> = self.files[i].keys().cloned().collect();
        if !names.is_empty() && rng.below(4) == 0 {
            let p = names[rng.below(names.len())].clone();
            self.remove(c, t, i, &p);
        } else {
            let p = format!("/c/f{}", rng.below(8));
            self.write(c, t, rng, i, &p);
        }
    }

    /// Check node `i` against the model. `promised`: every file must be there; else a
    /// missing file is an allowed loss (dropped from the model).
    fn check(&mut self, c: &Camp, t: &mut Tally, i: usize, promised: bool, ctx: &str) {
        let listed = c.listing(i);
        for (path, want) in self.files[i].clone() {
            let name = path.rsplit('/').next().unwrap();
            let got = if listed.contains_key(name) {
                c.get(i, &path)
            } else {
                None
            };
            let what = format!("{ctx}: {} {path}", node(i));
            match got {
                None if promised => {
                    eprintln!(
                        "VIOLATION lost {what}: listed before as {:?}; restore: {}",
                        self.listed[i].get(name),
                        c.last_restore[i]
                    );
                    t.lost_protected.push(what);
                    self.files[i].remove(&path);
                    self.old[i].entry(path.clone()).or_default().insert(hash(&want));
                }
                None => {
                    t.allowed_losses += 1;
                    self.files[i].remove(&path);
                    self.old[i].entry(path.clone()).or_default().insert(hash(&want));
                }
                Some(b) if b == want => t.checked_reads += 1,
                Some(b) => {
                    if self.old[i].get(&path).is_some_and(|o| o.contains(&hash(&b))) {
                        eprintln!(
                            "VIOLATION superseded {what}: listed before as {:?}; restore: {}",
                            self.listed[i].get(name),
                            c.last_restore[i]
                        );
                        t.superseded_restored.push(what);
                    } else {
                        eprintln!("VIOLATION wrong bytes {what}");
                        t.wrong_bytes.push(what);
                    }
                    // Put the newest version back so the campaign goes on.
                    c.put(i, &path, &want);
                }
            }
        }
        for path in self.removed[i].clone() {
            let name = path.rsplit('/').next().unwrap();
            if listed.contains_key(name) {
                eprintln!(
                    "VIOLATION resurrected {ctx}: {} {path}; restore: {}",
                    node(i),
                    c.last_restore[i]
                );
                t.resurrected.push(format!("{ctx}: {} {path}", node(i)));
                c.ok(i, &["rm", &path]);
            }
        }
    }

    /// Wait until re-protection has finished on every node of `live`: the daemon says
    /// nothing is unprotected and every file is listed with a partner copy.
    /// `drops`: also every Delete owed acknowledged (not while a holder is stopped).
    fn protected_as(&mut self, c: &Camp, live: &[usize], drops: bool) {
        // The status file is rewritten every 0.5 s: one written after the last change.
        std::thread::sleep(Duration::from_millis(600));
        for &i in live {
            let mut last = BTreeMap::new();
            until(&format!("{}'s files protected", node(i)), || {
                let st = c.status(i);
                let done = st.is_some_and(|s| {
                    s["changes_seen"] == s["changes_now"]
                        && s["unprotected_files"] == 0
                        && (!drops || s["pending_drops"] == 0)
                });
                if !done {
                    return false;
                }
                last = c.listing(i);
                self.files[i].keys().all(|p| {
                    last.get(p.rsplit('/').next().unwrap())
                        .is_some_and(|line| line.contains(", partner:node"))
                })
            });
            self.listed[i] = last;
        }
    }

    fn protected(&mut self, c: &Camp, live: &[usize]) {
        self.protected_as(c, live, true)
    }
}

#[test]
fn seeded_fault_campaign_against_a_model_of_the_job() {
    let seed = std::env::var("CKPTFS_CAMPAIGN_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0xca4a_0036);
    let rounds = std::env::var("CKPTFS_CAMPAIGN_ROUNDS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(24);
    let t0 = Instant::now();
    let mut c = Camp::new();
    eprintln!(
        "campaign seed {seed} rounds {rounds} on {} (CKPTFS_CAMPAIGN_SEED / CKPTFS_CAMPAIGN_ROUNDS replay), partners {:?}",
        if c.sim.is_some() { "network namespaces" } else { "127.0.0.1" },
        c.partner
    );
    let mut rng = Rng(seed | 1);
    let mut m = Model::new();
    let mut t = Tally::default();
    let all: Vec<usize> = (0..N).collect();
    for _ in 0..6 {
        m.change(&c, &mut t, &mut rng, &all);
    }
    const KINDS: [&str; 8] = [
        "node_loss",
        "partner_then_node_loss",
        "rack_loss",
        "node_and_partner_loss",
        "daemon_restart",
        "stopped_partner",
        "flipped_copy",
        "none",
    ];
    for round in 0..rounds {
        for _ in 0..1 + rng.below(4) {
            m.change(&c, &mut t, &mut rng, &all);
        }
        let kind = KINDS[rng.below(KINDS.len())];
        let i = rng.below(N);
        let p = c.partner[i];
        eprintln!(
            "[{:>6.1}s] round {round}: {kind} at {}",
            t0.elapsed().as_secs_f64(),
            node(i)
        );
        let ctx = format!("round {round} {kind} at {}", node(i));
        match kind {
            "node_loss" => {
                m.protected(&c, &all);
                c.lose(i);
                c.replace(i);
                m.check(&c, &mut t, i, true, &ctx);
            }
            "partner_then_node_loss" => {
                m.protected(&c, &all);
                c.lose(p);
                c.replace(p);
                m.check(&c, &mut t, p, true, &ctx);
                // More changes, then re-protection must finish before the next loss.
                m.change(&c, &mut t, &mut rng, &[i]);
                m.protected(&c, &all);
                c.lose(i);
                c.replace(i);
                m.check(&c, &mut t, i, true, &ctx);
            }
            "rack_loss" => {
                m.protected(&c, &all);
                let rack = [i / 2 * 2, i / 2 * 2 + 1];
                for &x in &rack {
                    c.lose(x);
                }
                for &x in &rack {
                    c.replace(x);
                }
                for &x in &rack {
                    m.check(&c, &mut t, x, true, &ctx);
                }
            }
            "node_and_partner_loss" => {
                m.protected(&c, &all);
                c.lose(i);
                c.lose(p);
                c.replace(i);
                c.replace(p);
                // Allowed to lose files (two domains), never to serve a wrong version.
                m.check(&c, &mut t, i, false, &ctx);
                m.check(&c, &mut t, p, false, &ctx);
            }
            "daemon_restart" => {
                c.kill_daemon(i);
                m.change(&c, &mut t, &mut rng, &[i]);
                c.start(i);
                m.check(&c, &mut t, i, true, &ctx);
            }
            "stopped_partner" => {
                // The partner stops answering; the node's changes go to a stand-in; the
                // partner comes back; the files change again (rewrites, removes); then
                // the node is lost: nothing removed or superseded may come back.
                m.protected(&c, &all);
                c.signal(p, "-STOP");
                for _ in 0..2 {
                    m.change(&c, &mut t, &mut rng, &[i]);
                }
                let others: Vec<usize> = all.iter().copied().filter(|&x| x != p).collect();
                // Copies on stand-ins; Deletes owed to the stopped partner wait.
                m.protected_as(&c, &[i], false);
                c.signal(p, "-CONT");
                for _ in 0..3 {
                    m.change(&c, &mut t, &mut rng, &[i]);
                }
                m.protected(&c, &others);
                m.protected(&c, &all);
                c.lose(i);
                c.replace(i);
                m.check(&c, &mut t, i, true, &ctx);
            }
            "flipped_copy" => {
                m.protected(&c, &all);
                let names: Vec<String> = m.files[i].keys().cloned().collect();
                if names.is_empty() {
                    *t.faults.entry("flipped_copy_not_injected").or_default() += 1;
                    continue;
                }
                let path = names[rng.below(names.len())].clone();
                let l = c.listing(i);
                let line = l
                    .get(path.rsplit('/').next().unwrap())
                    .cloned()
                    .unwrap_or_default();
                let holder = (0..N).find(|&h| {
                    h != i && line.contains(&format!("{}]", node(h)))
                        || line.contains(&format!("{},", node(h)))
                });
                let Some(h) = holder.filter(|&h| c.flip_copy(h, i, &path)) else {
                    *t.faults.entry("flipped_copy_not_injected").or_default() += 1;
                    continue;
                };
                c.lose(i);
                c.replace(i);
                let want = m.files[i][&path].clone();
                match c.get(i, &path) {
                    Some(b) if b == want => t.flips_refused += 1,
                    None => {
                        t.flips_refused += 1;
                        t.allowed_losses += 1;
                        m.files[i].remove(&path);
                        m.old[i].entry(path.clone()).or_default().insert(hash(&want));
                    }
                    Some(_) => {
                        let what = format!("{ctx}: {} {path} (flipped on {})", node(i), node(h));
                        eprintln!("VIOLATION wrong bytes {what}");
                        t.wrong_bytes.push(what);
                        c.put(i, &path, &want);
                    }
                }
                m.check(&c, &mut t, i, true, &ctx);
            }
            _ => {}
        }
        *t.faults.entry(kind).or_default() += 1;
    }
    // Finally every node, every file.
    m.protected(&c, &all);
    for i in 0..N {
        m.check(&c, &mut t, i, true, "final");
    }
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "campaign: {}",
        serde_json::json!({"seed": seed, "rounds": rounds, "seconds": secs,
            "nodes": if c.sim.is_some() { "netns" } else { "loopback" }, "tally": t})
    );
    assert_eq!(t.violations(), 0, "seed {seed}: {t:#?}");
}
