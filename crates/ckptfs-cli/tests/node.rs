//! Issue 10, section 8, as a script test: `scripts/node-acceptance.sh` runs the exact
//! acceptance commands on a 4-node cluster on 127.0.0.1 (cluster init --local 4, one
//! daemon per node, put, ls -l showing the levels, cluster plan, node loss by SIGKILL and
//! destroy, restore --from-peers byte-identical, copies re-established, run --restore).

use std::process::Command;

/// The first of 4 consecutive ports in this test's range (17260-17299) free now.
fn four_free_ports() -> u16 {
    (17260..17296)
        .step_by(4)
        .find(|&b| (b..b + 4).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()))
        .expect("no 4 consecutive free ports in 17260-17299")
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
