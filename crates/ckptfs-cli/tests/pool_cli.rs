//! The acceptance commands of the aggregate memory pool, through the binary: a manager
//! and three benefactors as processes on 127.0.0.1, put (OAB/ASB), get byte-identical,
//! an incremental second version, ls/status JSON, the drain and reassembly.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ckptfs");

struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn run(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(BIN).current_dir(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ckptfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&run(dir, args)).unwrap()
}

#[test]
fn pool_acceptance_commands_work_end_to_end() {
    let dir = tempfile::Builder::new()
        .prefix("pl3-pool-cli")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    // Ports 26284-26287 (below the ephemeral ports, which other suites' processes take
    // meanwhile): the manager at node1's port, node2..node4 lend at theirs.
    let port = 26284u16;
    run(
        d,
        &[
            "cluster",
            "init",
            "--local",
            "4",
            "--port",
            &port.to_string(),
            "--job",
            "pool-cli",
            "--out",
            "c.toml",
        ],
    );
    let toml = std::fs::read_to_string(d.join("c.toml")).unwrap();
    assert!(toml.contains("[pool]") && toml.contains("manager = \"node1\""));
    std::fs::write(
        d.join("c.toml"),
        toml.replace("refresh_ms = 1000", "refresh_ms = 100")
            .replace(
                &format!("addr = \"127.0.0.1:{}\"", port + 100),
                &format!("addr = \"127.0.0.1:{port}\""),
            )
            .replace("benefactor_port_offset = 200", "benefactor_port_offset = 0"),
    )
    .unwrap();
    let spawn = |args: &[&str]| {
        Command::new(BIN)
            .current_dir(d)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut kids = Kids(vec![spawn(&["pool", "manager", "--cluster", "c.toml"])]);
    for n in 2..=4 {
        kids.0.push(spawn(&[
            "pool",
            "benefactor",
            "--cluster",
            "c.toml",
            "--node-id",
            &format!("node{n}"),
            "--mem",
            "64M",
        ]));
    }
    let t0 = Instant::now();
    loop {
        let out = Command::new(BIN)
            .current_dir(d)
            .args(["pool", "status", "--cluster", "c.toml", "--json"])
            .output()
            .unwrap();
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if v.as_array()
                .unwrap()
                .iter()
                .filter(|b| b["alive"] == true)
                .count()
                == 3
            {
                break;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "benefactors not up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut data: Vec<u8> = (0..5_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(d.join("big.dat"), &data).unwrap();
    let r = json(
        d,
        &[
            "pool",
            "put",
            "--cluster",
            "c.toml",
            "--json",
            "big.dat",
            "/run1/big.dat",
        ],
    );
    assert_eq!(r["version"], 1);
    assert!(r["oab"].as_f64().unwrap() > 0.0 && r["asb"].as_f64().unwrap() > 0.0);
    let text = run(
        d,
        &["pool", "put", "--cluster", "c.toml", "big.dat", "/run1/copy.dat"],
    );
    assert!(text.contains("OAB") && text.contains("ASB"), "{text}");
    run(
        d,
        &["pool", "get", "--cluster", "c.toml", "/run1/big.dat", "out.dat"],
    );
    assert_eq!(std::fs::read(d.join("out.dat")).unwrap(), data);

    data[2_500_000] ^= 1;
    std::fs::write(d.join("big.dat"), &data).unwrap();
    let r = json(
        d,
        &[
            "pool",
            "put",
            "--cluster",
            "c.toml",
            "--json",
            "big.dat",
            "/run1/big.dat",
        ],
    );
    assert_eq!(
        (r["version"].as_u64(), r["chunks_sent"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(r["bytes_sent"].as_u64(), Some(1 << 20));

    let t0 = Instant::now();
    loop {
        let ls = json(d, &["pool", "ls", "--cluster", "c.toml", "--json", "/run1"]);
        let f = ls
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == "/run1/big.dat")
            .unwrap()
            .clone();
        assert_eq!(f["version"], 2);
        if f["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["drained"] == true)
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "not drained");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(run(d, &["pool", "ls", "--cluster", "c.toml", "-l"]).contains("/run1/big.dat"));
    run(d, &["pool", "reassemble", "--cluster", "c.toml", "rebuilt"]);
    assert_eq!(std::fs::read(d.join("rebuilt/run1/big.dat")).unwrap(), data);
    run(d, &["pool", "rm", "--cluster", "c.toml", "/run1/copy.dat"]);
    assert!(!run(d, &["pool", "ls", "--cluster", "c.toml"]).contains("copy.dat"));
}
