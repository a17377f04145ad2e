//! Issue 10 section 6 on simulated nodes: four `ckptfs node` daemons, each in its own
//! network namespace with its own /dev/shm (crates/ckptfs-netsim), talking over veth
//! links on their namespace addresses; partner copies land on the planned node; a node
//! lost (daemon SIGKILLed, /dev/shm unmounted, link down) gets its files back from its
//! partner byte for byte; a whole rack lost likewise. Needs root and iproute2: SKIPPED
//! otherwise.

mod nodes_support;

use nodes_support::{cluster_init, named, node, on_namespaces, simulated, Nodes, CKPTFS};
use std::path::Path;
use std::process::Stdio;

const PORT: u16 = 7460;

/// The four nodes.
type Cluster = Nodes;

impl Cluster {
    /// Four nodes, node1/node2 in rack r1, node3/node4 in rack r2, ring, k = 1.
    fn four() -> Option<Cluster> {
        let sim = simulated(4, named("hn2", 4, "256m"))?;
        let mut c = Nodes::new(sim, tempfile::tempdir().unwrap());
        let job = c.sim.prefix().to_string();
        // The cluster file `cluster init` writes (and its secret), with the nodes'
        // namespace addresses: every daemon listens on the same port of its own address;
        // the pool manager's address `cluster init` names (port + 100) is node1's too.
        cluster_init(&c.file, 4, 17340, &["--job", &job]);
        let text = on_namespaces(&c.file, &c.sim, 17340, PORT, PORT + 100);
        std::fs::write(&c.file, text).unwrap();
        for i in 0..4 {
            c.start(i);
        }
        for i in 0..4 {
            c.until(&format!("node{}'s daemon", i + 1), || {
                c.ckptfs_ok(i, &["node", "status"])
            });
        }
        Some(c)
    }

    fn cmd(&self, i: usize, args: &[&str]) -> std::process::Command {
        let mut c = self.command(i, args);
        c.env("CKPTFS_MEM_SIZE", "64M");
        c
    }

    fn ckptfs(&self, i: usize, args: &[&str]) -> String {
        self.stdout_of(i, args, self.cmd(i, args))
    }

    fn ckptfs_ok(&self, i: usize, args: &[&str]) -> bool {
        self.cmd(i, args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn start(&mut self, i: usize) {
        let cmd = self.cmd(i, &["node"]);
        self.daemons.start(i, cmd);
    }

    /// Node `i` is lost: daemon and every process SIGKILLed, /dev/shm gone, link down;
    /// then it comes back empty (a replacement).
    fn lose_and_replace(&mut self, i: usize) {
        self.sim.kill_node(i).unwrap();
        if let Some(mut d) = self.daemons.take(i) {
            d.wait().unwrap();
        }
        self.sim.revive(i).unwrap();
    }

    fn partner_of(&self, i: usize) -> String {
        let out = self.ckptfs(i, &["cluster", "plan", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let nodes = v["plan"]["nodes"].as_array().unwrap();
        let me = nodes.iter().find(|n| n["id"] == node(i).as_str()).unwrap();
        me["partners"][0].as_str().unwrap().to_string()
    }

    fn put(&self, i: usize, data: &[u8], path: &str) {
        let src = self.dir.path().join(format!("src-{}", data.len()));
        std::fs::write(&src, data).unwrap();
        self.ckptfs(i, &["put", "-p", src.to_str().unwrap(), path]);
    }

    fn get(&self, i: usize, path: &str) -> Vec<u8> {
        let dst = self.dir.path().join("back");
        let _ = std::fs::remove_file(&dst);
        self.ckptfs(i, &["get", path, dst.to_str().unwrap()]);
        std::fs::read(&dst).unwrap()
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    ckptfs_testsupport::seeded_bytes(seed, len)
}

fn shm_listing(c: &Cluster, i: usize) -> String {
    let out = c.sim.node(i).exec("ls", &["-A", "/dev/shm"]).unwrap();
    String::from_utf8(out.stdout).unwrap()
}

fn wait_levels(c: &Cluster, i: usize, path: &str, partner: &str) {
    let dir = Path::new(path).parent().unwrap().to_str().unwrap().to_string();
    let want = format!("[local, partner:{partner}]");
    c.until(&format!("{path} on node{} to show {want}", i + 1), || {
        let out = c.cmd(i, &["ls", "-l", &dir]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.contains(&want) && l.ends_with(&format!(" {}", file_name(path))))
    });
}

fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap()
}

#[test]
fn node_lost_in_its_namespace_restores_every_file_from_its_partner_byte_identical() {
    let Some(mut c) = Cluster::four() else { return };
    // Each node has its own /dev/shm: the node stores are on their own nodes only.
    for i in 0..4 {
        let l = shm_listing(&c, i);
        let store = |j: usize| format!("ckptfs.{}.node{}", c.sim.prefix(), j + 1);
        assert!(l.lines().any(|n| n == store(i)), "node{}: {l}", i + 1);
        for j in (0..4).filter(|&j| j != i) {
            assert!(!l.contains(&store(j)), "node{}: {l}", i + 1);
        }
    }
    let partner = c.partner_of(2);
    let p = partner[4..].parse::<usize>().unwrap() - 1;
    assert!(p < 2, "node3 (rack r2) has its partner {partner} in rack r1");
    let big = pattern(5_000_000, 3);
    let small = pattern(77_777, 4);
    c.put(2, &big, "/ckpt/big.dat");
    c.put(2, &small, "/ckpt/step/small.dat");
    wait_levels(&c, 2, "/ckpt/big.dat", &partner);
    wait_levels(&c, 2, "/ckpt/step/small.dat", &partner);

    c.lose_and_replace(2);
    assert!(shm_listing(&c, 2).is_empty(), "replacement not empty");
    let out = c.ckptfs(2, &["restore", "--from-peers"]);
    assert!(
        out.contains("restored /ckpt/big.dat") && out.contains(&format!("from {partner} (partner memory)")),
        "{out}"
    );
    assert!(c.get(2, "/ckpt/big.dat") == big, "big.dat differs after restore");
    assert!(
        c.get(2, "/ckpt/step/small.dat") == small,
        "small.dat differs after restore"
    );

    // The replacement's daemon re-establishes its partner copies.
    c.start(2);
    wait_levels(&c, 2, "/ckpt/big.dat", &partner);
}

#[test]
fn whole_rack_lost_in_namespaces_every_checkpoint_comes_back_from_the_other_rack() {
    let Some(mut c) = Cluster::four() else { return };
    let files: Vec<(usize, String, Vec<u8>)> = (0..2)
        .map(|i| {
            (
                i,
                format!("/ckpt/rank{i}.dat"),
                pattern(2_000_000 + i * 1000, 10 + i as u64),
            )
        })
        .collect();
    for (i, path, data) in &files {
        let partner = c.partner_of(*i);
        assert!(
            partner == "node3" || partner == "node4",
            "node{} -> {partner}",
            i + 1
        );
        c.put(*i, data, path);
        wait_levels(&c, *i, path, &partner);
    }
    // Rack r1 (node1, node2) is lost at once, then both come back empty.
    c.sim.kill_node(0).unwrap();
    c.sim.kill_node(1).unwrap();
    for i in 0..2 {
        if let Some(mut d) = c.daemons.take(i) {
            d.wait().unwrap();
        }
        c.sim.revive(i).unwrap();
    }
    for (i, path, data) in &files {
        let out = c.ckptfs(*i, &["restore", "--from-peers"]);
        assert!(out.contains("(partner memory)"), "{out}");
        assert!(c.get(*i, path) == *data, "{path} differs after restore");
    }
}

#[test]
fn bench_partner_runs_between_two_simulated_nodes_and_reports_every_case() {
    if let Err(why) = ckptfs_netsim::available() {
        ckptfs_testsupport::skip_root_only(why);
        return;
    }
    // Correctness only (the figures are not asserted): small checkpoints, one rep, one
    // unlimited and one limited link.
    let child = std::process::Command::new(CKPTFS)
        .args(["bench", "partner", "--size", "8M", "--reps", "1"])
        .args(["--links", "none,2gbit", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bench_pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    let cases = [
        "tcp-stream",
        "tcp-stream-back",
        "partner-copy",
        "restore-from-partner",
        "app-write copying-off",
        "app-write copying-on",
    ];
    for link in ["none", "2gbit"] {
        for case in cases {
            let r = rows
                .iter()
                .find(|r| r["case"] == case && r["link"] == link)
                .unwrap_or_else(|| panic!("no {case} on link {link}: {v}"));
            assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    // Two checkpoints came back from the partner in each restore.
    let rest = rows.iter().find(|r| r["case"] == "restore-from-partner").unwrap();
    assert_eq!(rest["bytes"].as_u64(), Some(16 << 20));
    // Nothing left behind.
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let pid_tag = format!("ckbench-{bench_pid}-");
    assert!(!String::from_utf8_lossy(&ns.stdout).contains(&pid_tag));
    // --cases: only the measurements named (a restore alone writes its two checkpoints
    // itself, as the application rounds are not run).
    let out = std::process::Command::new(CKPTFS)
        .args([
            "bench", "partner", "--size", "8M", "--reps", "1", "--links", "none",
        ])
        .args(["--cases", "restore", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut got: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["case"].as_str().unwrap())
        .collect();
    got.sort();
    // A restore is compared with the stream in its direction (partner to node), and
    // the stream in the copy's direction is taken beside it.
    assert_eq!(
        got,
        ["restore-from-partner", "tcp-stream", "tcp-stream-back"],
        "{v}"
    );
    let rest = &v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["case"] == "restore-from-partner")
        .unwrap();
    assert_eq!(rest["bytes"].as_u64(), Some(16 << 20));
    assert_eq!(v["settings"]["cases"], "restore");
    let bad = std::process::Command::new(CKPTFS)
        .args(["bench", "partner", "--cases", "copy,drain"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown case \"drain\""));
}
