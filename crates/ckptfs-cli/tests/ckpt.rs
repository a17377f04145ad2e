//! `ckptfs ckpt`, `ckptfs alarm` and `ckptfs run --restart` end to end, and the runtime
//! level policy against `ckptfs policy simulate` / `policy decide` on the same inputs.

use std::process::{Command, Output};

struct Store {
    name: String,
    dir: tempfile::TempDir,
}

impl Store {
    fn new(tag: &str) -> Store {
        Store {
            // CKPTFS_TEST_TAG: another prefix, for runs beside other suites.
            name: format!(
                "{}-cli-{tag}-{}",
                std::env::var("CKPTFS_TEST_TAG").unwrap_or_else(|_| "hd".into()),
                std::process::id()
            ),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ckptfs"));
        for s in ckptfs_settings_keys() {
            c.env_remove(s);
        }
        c.env_remove("CKPTFS_CONFIG")
            .env_remove("CKPTFS_RESTART")
            .env_remove("CKPTFS_DEST")
            .env_remove("CKPTFS_RANK")
            .env_remove("CKPTFS_JOB")
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path())
            .env("CKPTFS_STORE", &self.name)
            .env("CKPTFS_MEM_SIZE", "32M")
            .env("CKPTFS_CHUNK_SIZE", "64K")
            .env("CKPTFS_NODE_ID", "n0")
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "ckptfs {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    fn put(&self, path: &str, bytes: &[u8]) {
        let src = self.dir.path().join("src");
        std::fs::write(&src, bytes).unwrap();
        self.ok(&["put", "-p", src.to_str().unwrap(), path]);
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.run(&["destroy"]);
    }
}

fn ckptfs_settings_keys() -> Vec<&'static str> {
    vec![
        "CKPTFS_DATASET_PATTERN",
        "CKPTFS_DATASET_COMPLETE",
        "CKPTFS_DATASET_KEEP_MEMORY",
        "CKPTFS_DATASET_FLUSH_EVERY",
        "CKPTFS_FAILURE_RULE",
        "CKPTFS_CHECKPOINT_INTERVAL",
        "CKPTFS_PFS_BANDWIDTH",
        "CKPTFS_NODE_MTBF",
    ]
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn begin_complete_list_need_and_run_restart_sets_ckptfs_restart() {
    let st = Store::new("acc");
    // No dataset yet: CKPTFS_RESTART is unset, a checkpoint is due.
    let out = st
        .cmd(&[
            "run",
            "--restart",
            "--",
            "sh",
            "-c",
            "echo R=${CKPTFS_RESTART-unset}",
        ])
        .env("CKPTFS_RESTART", "stale")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("R=unset"),
        "{out:?}"
    );
    let need = st.run(&["ckpt", "need"]);
    assert_eq!(need.status.code(), Some(0), "{need:?}");
    assert!(String::from_utf8_lossy(&need.stdout).contains("no complete checkpoint"));
    for s in 1..=2 {
        let id = st.ok(&["ckpt", "begin", &format!("step{s}")]);
        assert_eq!(id.trim(), s.to_string());
        st.put(&format!("/ck/{s}/rank0"), format!("state {s}").as_bytes());
        st.ok(&["ckpt", "complete"]);
    }
    // Completing 2 again: EALREADY's message, exit 1.
    let o = st.run(&["ckpt", "complete", "--id", "2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already completed"),
        "{o:?}"
    );
    // Never begun.
    let o = st.run(&["ckpt", "complete", "--id", "9"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no dataset 9"),
        "{o:?}"
    );
    // step3 begun, never completed: listed open, not chosen for restart.
    st.ok(&["ckpt", "begin", "step3"]);
    st.put("/ck/3/rank0", b"partial");
    let l = json(&st.ok(&["ckpt", "list", "--json"]));
    let ds = l["datasets"].as_array().unwrap();
    assert_eq!(ds.len(), 3);
    assert_eq!(ds[1]["name"], "step2");
    assert_eq!(ds[1]["complete"], true);
    assert_eq!(ds[1]["size"], 7);
    assert_eq!(ds[1]["levels"], serde_json::json!(["local"]));
    assert_eq!(ds[2]["state"], "open");
    // A checkpoint was just completed: not due with a day's MTBF.
    let need = st.run(&["ckpt", "need"]);
    assert_eq!(need.status.code(), Some(1), "{need:?}");
    // Damage step2's file: the restart falls back to step1, saying why.
    st.put("/ck/2/rank0", b"other bytes");
    let out = st.run(&[
        "run",
        "--restart",
        "--",
        "sh",
        "-c",
        "echo R=$CKPTFS_RESTART; cat /ckpt/ck/1/rank0",
    ]);
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(so.contains("R=step1"), "{so} {se}");
    assert!(
        so.contains("state 1"),
        "the restarted program reads the restored file: {so} {se}"
    );
    assert!(
        se.contains("skipping dataset 2 (step2)") && se.contains("/ck/2/rank0"),
        "{se}"
    );
    // show --json has the decision with its inputs; delete removes the record.
    let d = json(&st.ok(&["ckpt", "show", "1", "--json"]));
    assert!(d["decision"]["input"]["tau"].as_f64().unwrap() > 0.0);
    st.ok(&["ckpt", "delete", "1"]);
    assert!(!st.run(&["ckpt", "show", "1"]).status.success());
    assert!(!st.ok(&["ls", "/ck/1"]).contains("rank0"));
}

#[test]
fn alarm_is_recorded_in_the_decision_and_makes_a_checkpoint_due() {
    let st = Store::new("alarm");
    st.ok(&["ckpt", "begin", "a"]);
    st.put("/x", b"x");
    st.ok(&["ckpt", "complete"]);
    assert_eq!(st.run(&["ckpt", "need"]).status.code(), Some(1));
    st.ok(&["alarm", "n0"]);
    let o = st.run(&["ckpt", "need"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("alarm"), "{o:?}");
    st.ok(&["ckpt", "begin", "b"]);
    st.put("/y", b"y");
    st.ok(&["ckpt", "complete"]);
    let d = json(&st.ok(&["ckpt", "show", "2", "--json"]));
    assert_eq!(d["decision"]["alarm"], true);
    assert_eq!(d["decision"]["input"]["source_alarm"], true);
    st.ok(&["alarm", "n0", "--clear"]);
    assert_eq!(st.run(&["ckpt", "need"]).status.code(), Some(1));
}

#[test]
fn transparent_marker_rule_from_settings_table() {
    let st = Store::new("tr");
    let env = [
        ("CKPTFS_DATASET_PATTERN", "/ckpt/step.*"),
        ("CKPTFS_DATASET_COMPLETE", "marker:done"),
    ];
    let run = |args: &[&str]| {
        let mut c = st.cmd(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    st.put("/step.1/a", b"aaa");
    st.put("/step.1/done", b"");
    st.put("/step.2/a", b"bbb");
    let o = run(&["ckpt", "list", "--json"]);
    let l = json(&String::from_utf8_lossy(&o.stdout));
    let ds = l["datasets"].as_array().unwrap();
    assert_eq!(ds.len(), 2, "{l}");
    assert_eq!(ds[0]["name"], "step.1");
    assert_eq!(ds[0]["complete"], true);
    assert_eq!(ds[1]["state"], "open");
    let o = run(&["run", "--restart", "--", "sh", "-c", "echo R=$CKPTFS_RESTART"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("R=step.1"), "{o:?}");
    // A bad rule is an error naming the setting.
    let o = st
        .cmd(&["ckpt", "list"])
        .env("CKPTFS_DATASET_PATTERN", "/s.*")
        .env("CKPTFS_DATASET_COMPLETE", "when:ever")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("dataset_complete"),
        "{o:?}"
    );
}

#[test]
fn runtime_policy_and_policy_simulate_choose_the_same_levels() {
    let st = Store::new("pol");
    let run = |args: &[&str]| policy_env(&st, args, &[]);
    let n = 10;
    for s in 1..=n {
        run(&["ckpt", "begin", &format!("s{s}")]);
        st.put(&format!("/p/{s}"), &vec![s as u8; 100_000]);
        run(&["ckpt", "complete"]);
    }
    let levels = same_as_decide_and_simulate(&st, &run, (1..=n).collect());
    let count = |l: &str| levels.iter().filter(|x| *x == l).count();
    assert!(
        count("local") > 0 && count("pfs") > 0,
        "both levels used: {levels:?}"
    );
}

/// The environment of the policy comparisons: REMEM's rule, a fixed interval, a slow PFS.
fn policy_env(st: &Store, args: &[&str], extra: &[(&str, &str)]) -> String {
    let mut c = st.cmd(args);
    for (k, v) in [
        ("CKPTFS_FAILURE_RULE", "remem"),
        ("CKPTFS_CHECKPOINT_INTERVAL", "100"),
        ("CKPTFS_PFS_BANDWIDTH", "10000"),
    ]
    .iter()
    .chain(extra)
    {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{args:?}: {o:?}");
    String::from_utf8(o.stdout).unwrap()
}

/// Every recorded decision of `ids` is the one `ckptfs policy decide` makes on its
/// recorded inputs, and `ckptfs policy simulate` with the same (mean) costs, tau and
/// predictor over as many failure-free segments chooses each level as often. The
/// levels chosen, in id order.
fn same_as_decide_and_simulate(st: &Store, run: &dyn Fn(&[&str]) -> String, ids: Vec<u64>) -> Vec<String> {
    let mut levels = Vec::new();
    let mut sum: std::collections::BTreeMap<&str, f64> = Default::default();
    let mut partner_offered = 0;
    for id in &ids {
        let d = json(&run(&["ckpt", "show", &id.to_string(), "--json"]));
        let dec = &d["decision"];
        let inp = &dec["input"];
        let c = &inp["costs"];
        let f = |v: &serde_json::Value| v.as_f64().unwrap();
        let mut args: Vec<String> = [
            "policy",
            "decide",
            "--json",
            "--ckpt-local",
            &f(&c["local"]["checkpoint_s"]).to_string(),
            "--restart-local",
            &f(&c["local"]["restart_s"]).to_string(),
            "--ckpt-pfs",
            &f(&c["pfs"]["checkpoint_s"]).to_string(),
            "--restart-pfs",
            &f(&c["pfs"]["restart_s"]).to_string(),
            "--tau",
            &f(&inp["tau"]).to_string(),
            "--precision",
            &f(&inp["predictor"]["precision"]).to_string(),
            "--recall",
            &f(&inp["predictor"]["recall"]).to_string(),
            "--n",
            &inp["n_pfs"].to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !c["partner"].is_null() {
            partner_offered += 1;
            for (k, v) in [
                ("--ckpt-partner", &c["partner"]["checkpoint_s"]),
                ("--restart-partner", &c["partner"]["restart_s"]),
            ] {
                args.push(k.into());
                args.push(f(v).to_string());
            }
            if !inp["n_partner"].is_null() {
                args.push("--n-partner".into());
                args.push(inp["n_partner"].to_string());
            }
            *sum.entry("ckpt-partner").or_default() += f(&c["partner"]["checkpoint_s"]);
            *sum.entry("restart-partner").or_default() += f(&c["partner"]["restart_s"]);
        }
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let o = st.ok(&args);
        assert_eq!(json(&o)["decision"]["level"], dec["level"], "dataset {id}: {dec}");
        *sum.entry("ckpt-local").or_default() += f(&c["local"]["checkpoint_s"]);
        *sum.entry("restart-local").or_default() += f(&c["local"]["restart_s"]);
        *sum.entry("ckpt-pfs").or_default() += f(&c["pfs"]["checkpoint_s"]);
        *sum.entry("restart-pfs").or_default() += f(&c["pfs"]["restart_s"]);
        levels.push(dec["level"].as_str().unwrap().to_string());
    }
    // The simulator offers a level for every segment or for none.
    assert!(
        partner_offered == 0 || partner_offered == ids.len(),
        "partner offered for {partner_offered} of {} datasets",
        ids.len()
    );
    let k = ids.len() as f64;
    let log = st.dir.path().join("no-failures.log");
    std::fs::write(&log, "").unwrap();
    let mut args: Vec<String> = [
        "policy",
        "simulate",
        "--json",
        "--no-plot",
        "--nodes",
        "2",
        "--procs",
        "1",
        "--failure-log",
        log.to_str().unwrap(),
        "--segments",
        &ids.len().to_string(),
        "--tau",
        "100",
        "--precision",
        "0.7",
        "--recall",
        "0.7",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (key, total) in &sum {
        args.push(format!("--{key}"));
        args.push((total / k).to_string());
    }
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let sim = json(&st.ok(&args));
    let adaptive = sim["report"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["strategy"].as_str().unwrap().starts_with("adaptive"))
        .unwrap()["checkpoints"]
        .clone();
    for l in ["local", "partner", "pfs"] {
        let count = levels.iter().filter(|x| *x == l).count() as f64;
        assert_eq!(
            adaptive[l].as_f64().unwrap_or(0.0),
            count,
            "{l}: {levels:?} vs {adaptive}"
        );
    }
    levels
}

/// A node daemon on 127.0.0.1 (loopback), killed on drop.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A two-node cluster file for loopback daemons in `st`'s directory, ports from
/// `ports`, stores named after `st` (the default names are shared by every local
/// cluster). The two store names.
/// Fixed test ports are below Linux's ephemeral range (32768-60999): a port another test
/// takes with `bind(0)`, or an outgoing connection's local port, never lands on them
/// between the check here and the daemon's bind.
fn loopback_cluster(st: &Store, ports: std::ops::Range<u16>) -> [String; 2] {
    let dir = st.dir.path();
    // CKPTFS_TEST_PORT: the first of 20 ports to use instead (runs beside other suites).
    let ports = match std::env::var("CKPTFS_TEST_PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
    {
        Some(p) => p..p.saturating_add(20),
        None => ports,
    };
    let port = ckptfs_testsupport::free_ports(ports, 2);
    let mut c = st.cmd(&[
        "cluster",
        "init",
        "--local",
        "2",
        "--out",
        "c.toml",
        "--heartbeat-ms",
        "200",
        "--port",
        &port.to_string(),
    ]);
    let o = c.current_dir(dir).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let stores = [format!("{}-n1", st.name), format!("{}-n2", st.name)];
    let toml = std::fs::read_to_string(dir.join("c.toml"))
        .unwrap()
        .replace("\"ckptfs.node1\"", &format!("\"{}\"", stores[0]))
        .replace("\"ckptfs.node2\"", &format!("\"{}\"", stores[1]));
    std::fs::write(dir.join("c.toml"), toml).unwrap();
    stores
}

/// Start both nodes' daemons (`ckptfs node`, logs `nodeN.log` in `st`'s directory).
fn start_daemons(st: &Store, stores: &[String; 2], args: &[&str], env: &[(&str, &str)]) -> Vec<Daemon> {
    let dir = st.dir.path();
    let mut daemons = Vec::new();
    for (i, s) in stores.iter().enumerate() {
        let node = format!("node{}", i + 1);
        let log = std::fs::File::create(dir.join(format!("{node}.log"))).unwrap();
        let mut c = st.cmd(&[
            "--cluster",
            "c.toml",
            "--node-id",
            &node,
            "node",
            "--interval",
            "0.05",
        ]);
        c.args(args).current_dir(dir).env("CKPTFS_STORE", s);
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c.stdout(std::process::Stdio::null()).stderr(log).spawn().unwrap();
        daemons.push(Daemon(child));
    }
    daemons
}

#[test]
fn node_daemon_drain_flushes_only_every_second_dataset() {
    let st = Store::new("ndrain");
    let stores = loopback_cluster(&st, 27450..27500);
    let pfs = st.dir.path().join("pfs");
    std::fs::create_dir_all(&pfs).unwrap();
    let node1 = Store {
        name: stores[0].clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let _node2 = Store {
        name: stores[1].clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let env = [("CKPTFS_DATASET_FLUSH_EVERY", "2"), ("CKPTFS_PFS_BANDWIDTH", "1")];
    // The daemons drain to the PFS; datasets configured: only those marked for flush.
    let daemons = start_daemons(&st, &stores, &["--dest", pfs.to_str().unwrap()], &env);
    let run = |args: &[&str]| policy_env(&node1, args, &env);
    for s in 1..=4 {
        run(&["ckpt", "begin", &format!("step{s}")]);
        node1.put(&format!("/ck/{s}/r0"), format!("state {s}").as_bytes());
        run(&["ckpt", "complete"]);
    }
    // Drained oldest first: once this later file outside every dataset is on the PFS,
    // every dataset file the daemon would drain is there too.
    node1.put("/other/last", b"outside every dataset");
    let t = std::time::Instant::now();
    while !pfs.join("other/last").exists() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "the node daemon drained nothing: {}",
            std::fs::read_to_string(st.dir.path().join("node1.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let t = std::time::Instant::now();
    while !(pfs.join("ck/2/r0").exists() && pfs.join("ck/4/r0").exists()) {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "2 and 4 not drained"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A few more scans: 1 and 3 stay in memory.
    std::thread::sleep(std::time::Duration::from_millis(300));
    for s in [1, 3] {
        assert!(
            !pfs.join(format!("ck/{s}/r0")).exists(),
            "dataset {s} drained by the node daemon"
        );
    }
    drop(daemons);
}

#[test]
fn runtime_policy_offers_the_partner_level_with_measured_costs_as_simulate_does() {
    // Two node daemons on loopback; the datasets are node1's (its store), its daemon
    // copies every complete file to node2. Costs: the partner copy time is measured from
    // node1's levels record, nothing is a constant but the PFS bandwidth setting.
    let st = Store::new("ppol");
    let dir = st.dir.path();
    let stores = loopback_cluster(&st, 27400..27450);
    let node1 = Store {
        name: stores[0].clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let _node2 = Store {
        name: stores[1].clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let run = |args: &[&str]| policy_env(&node1, args, &[]);
    // No daemon yet: no partner level, and the record says why.
    run(&["ckpt", "begin", "before"]);
    node1.put("/b/0", b"before the daemons");
    run(&["ckpt", "complete"]);
    let d = json(&run(&["ckpt", "show", "1", "--json"]));
    let m = &d["decision"]["measured"];
    assert_eq!(m["partner"], false, "{d}");
    assert!(
        m["partner_reason"].as_str().unwrap().contains("node daemon"),
        "{m}"
    );
    assert_eq!(m["pfs_put_source"], "setting", "{m}");
    assert!(d["decision"]["input"]["costs"]["partner"].is_null(), "{d}");
    run(&["ckpt", "delete", "1"]);
    let daemons = start_daemons(&st, &stores, &[], &[]);
    // A file is protected once node1's levels record lists a partner for it.
    let copied = |path: &str| {
        let t = std::time::Instant::now();
        loop {
            let o = node1.run(&["ls", "-l", path]);
            if String::from_utf8_lossy(&o.stdout).contains("partner:node2") {
                return;
            }
            assert!(
                t.elapsed() < std::time::Duration::from_secs(60),
                "{path} not copied to node2: {o:?}\n{}",
                std::fs::read_to_string(dir.join("node1.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    // The daemon copies a dataset's files once it is decided `partner` (or while the
    // partner level is not on offer yet: the first dataset, whose copy is timed); a
    // later completion measures that copy. Two warm-up datasets measure it (w1 copied,
    // timed at w2's completion), then go, so that the compared datasets all have the
    // partner level offered and their counters start afresh, as the simulator's do.
    run(&["ckpt", "begin", "w1"]);
    node1.put("/w/1", &vec![9u8; 100_000]);
    run(&["ckpt", "complete"]);
    let d = json(&run(&["ckpt", "show", "2", "--json"]));
    assert_eq!(
        d["decision"]["measured"]["partner"], false,
        "w1: nothing timed yet: {d}"
    );
    copied("/w/1");
    run(&["ckpt", "begin", "w2"]);
    node1.put("/w/2", &vec![8u8; 100_000]);
    run(&["ckpt", "complete"]);
    run(&["ckpt", "delete", "2"]);
    run(&["ckpt", "delete", "3"]);
    let n = 10u64;
    for s in 1..=n {
        run(&["ckpt", "begin", &format!("s{s}")]);
        node1.put(&format!("/p/{s}"), &vec![s as u8; 100_000]);
        run(&["ckpt", "complete"]);
        let d = json(&run(&["ckpt", "show", &(s + 3).to_string(), "--json"]));
        if d["decision"]["level"] == "partner" {
            copied(&format!("/p/{s}"));
        }
    }
    let d = json(&run(&["ckpt", "show", "4", "--json"]));
    let m = &d["decision"]["measured"];
    assert_eq!(m["partner"], true, "partner offered after a measured copy: {d}");
    assert!(m["partner_bps"].as_f64().unwrap() > 0.0, "{m}");
    assert!(!d["decision"]["input"]["costs"]["partner"].is_null(), "{d}");
    let levels = same_as_decide_and_simulate(&node1, &run, (4..4 + n).collect());
    eprintln!("levels chosen: {levels:?}");
    assert!(
        levels.iter().any(|l| l == "partner"),
        "partner chosen sometimes: {levels:?}"
    );
    drop(daemons);
}

#[test]
fn flush_every_second_dataset_drains_only_datasets_2_and_4() {
    let st = Store::new("flush");
    let pfs = st.dir.path().join("pfs");
    std::fs::create_dir_all(&pfs).unwrap();
    let pfs_s = pfs.to_str().unwrap();
    // Every 2nd dataset is flushed; a slow PFS (1 B/s) keeps the runtime policy on `local`.
    let with_env = |args: &[&str]| {
        let mut c = st.cmd(args);
        c.env("CKPTFS_DATASET_FLUSH_EVERY", "2")
            .env("CKPTFS_PFS_BANDWIDTH", "1");
        let o = c.output().unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    for s in 1..=4 {
        with_env(&["ckpt", "begin", &format!("step{s}")]);
        st.put(&format!("/ck/{s}/rank0"), format!("state {s}").as_bytes());
        with_env(&["ckpt", "complete"]);
        // The agent runs after each completion, as a daemon would: nothing of an
        // unflushed dataset goes, whenever it looks.
        with_env(&["agent", "--once", "--dest", pfs_s]);
    }
    // A file outside every dataset is drained as without datasets.
    st.put("/other/log", b"not a checkpoint");
    // A file of a dataset still open stays in memory.
    with_env(&["ckpt", "begin", "step5"]);
    st.put("/ck/5/rank0", b"state 5");
    with_env(&["agent", "--once", "--dest", pfs_s]);
    for s in 1..=5 {
        let there = pfs.join(format!("ck/{s}/rank0")).exists();
        assert_eq!(there, s == 2 || s == 4, "dataset {s} on the PFS: {there}");
    }
    assert_eq!(std::fs::read(pfs.join("other/log")).unwrap(), b"not a checkpoint");
    // `ckpt list` shows it: flush marked on 2 and 4, and only they are on the PFS level.
    let l = json(&with_env(&["ckpt", "list", "--json", "--dest", pfs_s]));
    let rows = l["datasets"].as_array().unwrap();
    for r in rows.iter().filter(|r| r["complete"] == true) {
        let id = r["id"].as_u64().unwrap();
        let on_pfs = r["levels"].as_array().unwrap().iter().any(|v| v == "pfs");
        assert_eq!(r["flush"] == true, id % 2 == 0, "{r}");
        assert_eq!(on_pfs, id % 2 == 0, "dataset {id}: {r}");
    }
    assert_eq!(rows.iter().filter(|r| r["complete"] == true).count(), 4, "{l}");
    let text = with_env(&["ckpt", "list", "--dest", pfs_s]);
    assert!(text.contains("pfs"), "{text}");
}

#[test]
fn partner_copies_follow_the_level_decision() {
    // Two loopback node daemons; node1's datasets. The daemon copies a dataset's files
    // only when its decision is `partner` (or the partner level was not on offer yet:
    // the first dataset, whose copy measures the copy time); `local` gets no copy.
    let st = Store::new("pdec");
    let stores = loopback_cluster(&st, 27200..27220);
    let node1 = Store {
        name: stores[0].clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let _node2 = Store {
        name: stores[1].clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    // Rare failures without an alarm (memory only is cheapest), a PFS too slow to be
    // chosen; with an alarm the predictor's precision (0.7) makes the partner level pay.
    let env = [
        ("CKPTFS_NODE_MTBF", "1000000000"),
        ("CKPTFS_CHECKPOINT_INTERVAL", "100"),
        ("CKPTFS_PFS_BANDWIDTH", "1"),
        // The adaptive choice (the default protects every complete dataset).
        ("CKPTFS_DATASET_PARTNER_COPIES", "decision"),
    ];
    let run = |args: &[&str]| {
        let mut c = node1.cmd(args);
        c.envs(env).env("CKPTFS_NODE_ID", "node1");
        let o = c.output().unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let daemons = start_daemons(&st, &stores, &[], &env);
    let on_node2 = |path: &str| {
        let o = node1.run(&["ls", "-l", path]);
        String::from_utf8_lossy(&o.stdout).contains("partner:node2")
    };
    let copied = |path: &str| {
        let t = std::time::Instant::now();
        while !on_node2(path) {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(60),
                "{path} not copied to node2:\n{}",
                std::fs::read_to_string(st.dir.path().join("node1.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    // Two files outside every dataset, each written after the previous one was copied:
    // when the second is copied, a whole scan ran after the dataset was decided (a scan
    // lists the store once, so the second file is copied by a later scan than the first).
    let scans_after = |tag: &str| {
        for k in 0..2 {
            let p = format!("/x/{tag}{k}");
            node1.put(&p, tag.as_bytes());
            copied(&p);
        }
    };
    let decision = |id: u64| {
        let d = json(&run(&["ckpt", "show", &id.to_string(), "--json"]));
        let dec = &d["decision"];
        (
            dec["level"].as_str().unwrap().to_string(),
            dec["measured"]["partner"] == true,
        )
    };
    run(&["ckpt", "begin", "s1"]);
    node1.put("/p/1", &vec![1u8; 200_000]);
    run(&["ckpt", "complete"]);
    let (l1, offered1) = decision(1);
    assert!(!offered1, "no copy time measured yet: {l1}");
    copied("/p/1");
    // s2: the partner level is on offer (s1's copy was timed); no alarm: memory only.
    run(&["ckpt", "begin", "s2"]);
    node1.put("/p/2", &vec![2u8; 200_000]);
    run(&["ckpt", "complete"]);
    let (l2, offered2) = decision(2);
    assert!(offered2, "s1's copy measured the partner level");
    assert_eq!(l2, "local", "rare failures, no alarm");
    scans_after("a");
    assert!(!on_node2("/p/2"), "a dataset decided local gets no partner copy");
    // s3 with an alarm for node1: the partner level.
    run(&["alarm", "node1"]);
    run(&["ckpt", "begin", "s3"]);
    node1.put("/p/3", &vec![3u8; 200_000]);
    run(&["ckpt", "complete"]);
    let (l3, offered3) = decision(3);
    assert!(offered3);
    assert_eq!(l3, "partner", "an alarm makes the partner copy pay");
    copied("/p/3");
    // Still none for s2 after the alarm (a later decision does not revive it).
    scans_after("b");
    assert!(!on_node2("/p/2"));
    // What `ls -l`, `ls --json`, `status --json` and `ckpt list --json` say of each
    // dataset's files: the protection the policy chose, and why (issue 37).
    let long = run(&["ls", "-l", "/p"]);
    let line = |name: &str| {
        long.lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("1").contains(" ds1:partner "), "{long}");
    assert!(line("2").contains(" ds2:local(policy) "), "{long}");
    assert!(line("3").contains(" ds3:partner "), "{long}");
    let why = |id: u64| {
        long.lines()
            .find(|l| l.starts_with(&format!("ds{id}: dataset {id} s{id} ")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(why(1).contains("not on offer"), "{long}");
    assert!(
        why(2).contains("node-local by the policy's choice (dataset_partner_copies = decision): local has the lowest expected overhead"),
        "{long}"
    );
    assert!(why(3).contains("partner copies by the policy's choice"), "{long}");
    let entries = json(&run(&["ls", "--json", "/p"]));
    let e2 = entries
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "2")
        .unwrap()
        .clone();
    assert_eq!(e2["dataset"]["node_local_by_choice"], true, "{e2}");
    assert_eq!(e2["dataset"]["policy"]["level"], "local", "{e2}");
    assert_eq!(e2["dataset"]["chosen"], serde_json::json!(["local"]), "{e2}");
    assert_eq!(e2["levels"]["levels"], serde_json::json!(["local"]), "{e2}");
    let status = json(&run(&["status", "--json"]));
    let prot = &status["protection"];
    assert_eq!(prot["/p/2"]["short"], "local", "{prot}");
    assert_eq!(prot["/p/3"]["short"], "partner", "{prot}");
    assert_eq!(prot["/p/3"]["partner_copies"], "decision", "{prot}");
    assert!(
        prot["/x/a0"].is_null(),
        "a file outside datasets has none: {prot}"
    );
    let list = json(&run(&["ckpt", "list", "--json"]));
    let rows = list["datasets"].as_array().unwrap();
    assert_eq!(rows[1]["protection"]["node_local_by_choice"], true, "{list}");
    assert_eq!(
        rows[2]["protection"]["chosen"],
        serde_json::json!(["local", "partner"]),
        "{list}"
    );
    drop(daemons);
}
