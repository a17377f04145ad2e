//! A daemon's log written to a file carries no ANSI colour codes (issue 29): colour only
//! when stderr is a terminal.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_node_daemon_logging_to_a_file_writes_no_escape_codes() {
    let ckptfs = env!("CARGO_BIN_EXE_ckptfs");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    let port = ckptfs_testsupport::free_ports(27200..27250, 2);
    let job = format!("hnd-colour-{}", std::process::id());
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
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .env_remove("CKPTFS_CONFIG")
            .env_remove("CKPTFS_STORE");
        c
    };
    let log = dir.path().join("node.log");
    let mut d = cmd(&["node"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let text = loop {
        let text = std::fs::read(&log).unwrap();
        if String::from_utf8_lossy(&text).contains("listening on") {
            break text;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the daemon never logged its start"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    d.kill().unwrap();
    d.wait().unwrap();
    let _ = cmd(&["destroy"]).output();
    assert!(
        !text.contains(&0x1b),
        "escape codes in the log file: {:?}",
        String::from_utf8_lossy(&text)
    );
}
