//! Issue 10, section 8, as a script test: `scripts/node-acceptance.sh` runs the exact
//! acceptance commands on a 4-node cluster on 127.0.0.1 (cluster init --local 4, one
//! daemon per node, put, ls -l showing the levels, cluster plan, node loss by SIGKILL and
//! destroy, restore --from-peers byte-identical, copies re-established, run --restore).

use std::process::Command;

/// The first of 4 consecutive ports in this test's range (17260-17299) free now.
fn four_free_ports() -> u16 {
    ckptfs_testsupport::free_ports(17260..17300, 4)
}

#[test]
fn node_acceptance_commands_of_issue_10_run_on_a_local_4_node_cluster() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/node-acceptance.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg(four_free_ports().to_string())
        .env("CKPTFS", env!("CARGO_BIN_EXE_ckptfs"))
        .env_remove("CKPTFS_CONFIG")
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("node acceptance: OK"), "{text}");
    assert!(text.contains("(partner memory)"), "{text}");
}

/// The partner-copy priority setting (`partner_priority`, `CKPTFS_PARTNER_PRIORITY`,
/// `ckptfs node --partner-priority`) reaches the daemon and `node status --json`; the
/// flag wins over the environment; a bad value is refused naming the setting.
#[test]
fn partner_priority_setting_reaches_the_daemon_and_node_status_json() {
    let ckptfs = env!("CARGO_BIN_EXE_ckptfs");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    let port = ckptfs_testsupport::free_ports(27150..27200, 2);
    let job = format!("hnd-prio-{}", std::process::id());
    let out = Command::new(ckptfs)
        .args([
            "cluster",
            "init",
            "--local",
            "2",
            "--port",
            &port.to_string(),
            "--job",
            &job,
        ])
        .arg("--out")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cmd = |args: &[&str]| {
        let mut c = Command::new(ckptfs);
        c.arg("--cluster")
            .arg(&file)
            .args(["--node-id", "node1"])
            .args(args)
            .env("CKPTFS_MEM_SIZE", "16M")
            .env_remove("CKPTFS_CONFIG")
            .env_remove("CKPTFS_STORE")
            .env_remove("CKPTFS_PARTNER_PRIORITY");
        c
    };
    let status = || -> Option<serde_json::Value> {
        let out = cmd(&["node", "status", "--json"]).output().ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (v["running"] == true).then_some(v)
    };
    // (flag, env) -> expected priority.
    for (flag, env, want) in [
        (None, Some("idle"), "idle"),
        (Some("normal"), Some("idle"), "normal"),
        (None, None, "low"),
    ] {
        let mut c = cmd(&["node"]);
        if let Some(f) = flag {
            c.args(["--partner-priority", f]);
        }
        if let Some(e) = env {
            c.env("CKPTFS_PARTNER_PRIORITY", e);
        }
        let mut d = c
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        let v = loop {
            if let Some(v) = status().filter(|v| v["pid"] == d.id()) {
                break v;
            }
            assert!(t.elapsed().as_secs() < 120, "the daemon never showed its status");
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert_eq!(v["partner_priority"], want, "flag {flag:?} env {env:?}: {v}");
        d.kill().unwrap();
        d.wait().unwrap();
    }
    let out = cmd(&["node", "--partner-priority", "bogus"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("partner_priority") && err.contains("bogus"), "{err}");
    let _ = cmd(&["destroy"]).output();
}
