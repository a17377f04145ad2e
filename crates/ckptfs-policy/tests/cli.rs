//! End-to-end tests of the `ckptfs policy` subcommands through clap, as the
//! `ckptfs` binary will parse them.

use ckptfs_policy::cli::{run_to, PolicyCommand};
use clap::Parser;

#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    cmd: PolicyCommand,
}

fn parse(args: &[&str]) -> Result<PolicyCommand, String> {
    let mut v = vec!["policy"];
    v.extend_from_slice(args);
    Cli::try_parse_from(v).map(|c| c.cmd).map_err(|e| e.to_string())
}

fn run<S: AsRef<str>>(args: &[S]) -> Result<String, String> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let cmd = parse(&args)?;
    let mut out = Vec::new();
    run_to(cmd, &mut out).map_err(|e| e.to_string())?;
    Ok(String::from_utf8(out).unwrap())
}

const DECIDE: [&str; 9] = [
    "decide",
    "--ckpt-pfs",
    "130s",
    "--ckpt-partner",
    "8s",
    "--precision",
    "0.7",
    "--recall",
    "0.7",
];

#[test]
fn decide_prints_each_level_and_the_choice() {
    let out = run(&DECIDE).unwrap();
    assert!(out.contains("choice: partner"), "{out}");
    assert!(out.contains("pfs") && out.contains("<- chosen"), "{out}");
    // One memory checkpoint since the last PFS one: formula (2) now prefers disk.
    let mut args = DECIDE.to_vec();
    args.extend(["--n", "1"]);
    assert!(run(&args).unwrap().contains("choice: pfs"));
}

#[test]
fn decide_json_has_the_overheads() {
    let mut args = DECIDE.to_vec();
    args.push("--json");
    let v: serde_json::Value = serde_json::from_str(&run(&args).unwrap()).unwrap();
    assert_eq!(v["decision"]["level"], "partner");
    let est = v["decision"]["estimates"].as_array().unwrap();
    let pfs = est.iter().find(|e| e["level"] == "pfs").unwrap();
    assert!((pfs["overhead_s"].as_f64().unwrap() - 1249.0).abs() < 1e-9);
}

#[test]
fn bad_decide_input_names_the_parameter() {
    let mut args = DECIDE.to_vec();
    args[6] = "1.5";
    let e = run(&args).unwrap_err();
    assert!(e.contains("`precision`") && e.contains("between 0 and 1"), "{e}");
    let e = run(&["decide", "--ckpt-pfs=-5s"]).unwrap_err();
    assert!(e.contains("--ckpt-pfs"), "{e}");
    let e = run(&["decide", "--ckpt-partner", "8s"]).unwrap_err();
    assert!(e.contains("--ckpt-pfs"), "{e}");
}

#[test]
fn interval_gives_young_and_daly() {
    let out = run(&["interval", "--mtbf", "24h", "--cost", "5m", "--json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!((v["young_s"].as_f64().unwrap() - 7200.0).abs() < 1e-9);
    let daly = v["daly_s"].as_f64().unwrap();
    assert!((daly - (7200.0 + 100.0 + 7200.0 / 5184.0 - 300.0)).abs() < 1e-9);
    let table = run(&["interval", "--mtbf", "7668h", "--nodes", "512", "--cost", "130s"]).unwrap();
    assert!(table.contains("Young") && table.contains("Daly"), "{table}");
    let e = run(&["interval", "--mtbf", "10h", "--cost", "1m", "--nodes", "0"]).unwrap_err();
    assert!(e.contains("`nodes`"), "{e}");
}

const SIM: [&str; 13] = [
    "simulate",
    "--nodes",
    "128",
    "--procs",
    "32",
    "--mtbf",
    "500h",
    "--segments",
    "500",
    "--ckpt-pfs",
    "60s",
    "--ckpt-partner",
    "5s",
];

#[test]
fn simulate_is_deterministic_with_seed() {
    let with_seed = |seed: &str| {
        let mut a = SIM.to_vec();
        a.extend(["--json", "--seed", seed, "--runs", "2"]);
        run(&a).unwrap()
    };
    assert_eq!(with_seed("5"), with_seed("5"));
    assert_ne!(with_seed("5"), with_seed("6"));
}

/// SIM with `flag` set to `value` (replaced if SIM has it, else appended).
fn sim_with<'a>(flag: &'a str, value: &'a str) -> Vec<String> {
    let mut a: Vec<String> = SIM.iter().map(|s| s.to_string()).collect();
    match a.iter().position(|x| x == flag) {
        Some(i) => a[i + 1] = value.to_string(),
        None => a.push(format!("{flag}={value}")),
    }
    // Values starting with '-' must be attached with '='.
    let mut out = Vec::new();
    let mut i = 0;
    while i < a.len() {
        if a[i].starts_with("--")
            && i + 1 < a.len()
            && a[i + 1].starts_with('-')
            && !a[i + 1].starts_with("--")
        {
            out.push(format!("{}={}", a[i], a[i + 1]));
            i += 2;
        } else {
            out.push(a[i].clone());
            i += 1;
        }
    }
    out
}

#[test]
fn simulate_bad_input_names_the_parameter() {
    for (flag, value, name) in [
        ("--nodes", "0", "`nodes`"),
        ("--precision", "2", "`precision`"),
        ("--recall", "-0.5", "`recall`"),
        ("--shape", "0", "`shape`"),
        ("--procs", "1000", "`procs`"),
    ] {
        let e = run(&sim_with(flag, value)).unwrap_err();
        assert!(e.contains(name), "{flag}: {e}");
    }
    assert!(run(&sim_with("--mtbf", "-3h")).unwrap_err().contains("--mtbf"));
    let e = run(&["simulate", "--nodes", "16"]).unwrap_err();
    assert!(e.contains("--ckpt-pfs"), "{e}");
    let e = run(&["simulate", "--reproduce", "remem-fig5", "--nodes", "16"]).unwrap_err();
    assert!(e.contains("cannot be used with"), "{e}");
}

#[test]
fn simulate_reads_costs_from_a_bench_document_and_a_failure_log() {
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("bench.json");
    std::fs::write(
        &bench,
        r#"{"bench": "store", "results": [
            {"case": "store write", "bandwidth_gbps": 8.0},
            {"case": "pfs write", "bandwidth_gbps": 0.5}]}"#,
    )
    .unwrap();
    let log = dir.path().join("failures.txt");
    std::fs::write(&log, "# node time kind\n3 1h soft\n5 30h\n").unwrap();
    let out = run(&[
        "simulate",
        "--nodes",
        "16",
        "--procs",
        "8",
        "--segments",
        "100",
        "--failure-log",
        log.to_str().unwrap(),
        "--soft-fraction",
        "0.5",
        "--costs-from",
        bench.to_str().unwrap(),
        "--ckpt-size",
        "4GB",
    ])
    .unwrap();
    assert!(out.contains("local-only") && out.contains("disk-only"), "{out}");
    assert!(out.contains("checkpoint      0.5 s"), "{out}");
    assert!(out.contains("note: the failure log ends"), "{out}");
    // Missing size for a bench document.
    let e = run(&[
        "simulate",
        "--costs-from",
        bench.to_str().unwrap(),
        "--nodes",
        "16",
    ])
    .unwrap_err();
    assert!(e.contains("--ckpt-size"), "{e}");
    // A file without the PFS level, completed by a flag; a flag overrides a level.
    let store = dir.path().join("store.json");
    std::fs::write(
        &store,
        r#"{"bench": "store", "results": [
            {"case": "ckptfs-write", "gbps": 4.0}, {"case": "ckptfs-read", "gbps": 8.0}]}"#,
    )
    .unwrap();
    let base = [
        "simulate",
        "--nodes",
        "16",
        "--procs",
        "8",
        "--segments",
        "50",
        "--costs-from",
        store.to_str().unwrap(),
        "--ckpt-size",
        "4GB",
    ];
    let e = run(&base).unwrap_err();
    assert!(e.contains("no PFS cost") && e.contains("--ckpt-pfs"), "{e}");
    let mut args = base.to_vec();
    args.extend(["--ckpt-pfs", "60s", "--ckpt-local", "2s"]);
    let out = run(&args).unwrap();
    assert!(out.contains("checkpoint      2.0 s"), "{out}");
    assert!(out.contains("restart      2.0 s"), "{out}");
}

#[test]
fn fig5_preset_prints_three_panels_and_writes_pngs() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "simulate",
        "--reproduce",
        "remem-fig5",
        "--runs",
        "1",
        "--plot-dir",
        dir.path().to_str().unwrap(),
    ])
    .unwrap();
    for panel in ["5a", "5b", "5c"] {
        assert!(out.contains(&format!("Fig. {panel}")), "{out}");
        let png = std::fs::read(dir.path().join(format!("remem-fig{panel}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
    assert!(out.contains("1024 procs") && out.contains("tau 0.5 h"), "{out}");
}
