//! `ckptfs destroy` of a store a FUSE mount has attached (issue "Failures in sequence",
//! item 7): refused (exit 1, EBUSY, naming the mount's daemon); `--force` removes it and
//! the mount answers errors from then on, never the deleted segment's bytes, never a
//! write accepted and lost, also once a store of the same name exists again. Needs
//! /dev/fuse and root (skipped otherwise).

use std::path::Path;
use std::process::{Command, Output};

fn run(store: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ckptfs"))
        .env_remove("CKPTFS_CONFIG")
        .env("CKPTFS_STORE", store)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Cleanup(String, std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = run(&self.0, &["umount", self.1.to_str().unwrap()]);
        let _ = Command::new("umount").arg("-l").arg(&self.1).output();
        let _ = run(&self.0, &["destroy", "--force"]);
    }
}

#[test]
fn destroy_of_a_mounted_store_is_refused_and_forced_leaves_the_mount_answering_errors() {
    if !ckptfs_testsupport::is_root() || !Path::new("/dev/fuse").exists() {
        ckptfs_testsupport::skip_root_only("needs root and /dev/fuse");
        return;
    }
    let store = format!("cli-destroy-busy-{}", std::process::id());
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let _c = Cleanup(store.clone(), mp.clone());
    let _ = run(&store, &["destroy", "--force"]);
    let o = run(&store, &["init", "--mem-size", "32M", "--chunk-size", "64K"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let log = tmp.path().join("mount.log");
    let o = run(
        &store,
        &["mount", "--log-file", log.to_str().unwrap(), mp.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let pid: u32 = out
        .split("daemon pid ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no daemon pid in {out:?}"));
    std::fs::write(mp.join("f"), b"written through the mount").unwrap();

    let o = run(&store, &["destroy"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "destroy of a mounted store: {err}");
    assert!(
        err.contains("busy") && err.contains(&format!("pid {pid} (")),
        "{err}"
    );
    assert_eq!(std::fs::read(mp.join("f")).unwrap(), b"written through the mount");

    let o = run(&store, &["destroy", "--force"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!("pid {pid}")),
        "{}",
        text(&o.stderr)
    );
    // The mount now answers errors: no bytes of the deleted segment, no write taken.
    let r = std::fs::read(mp.join("f"));
    assert!(r.is_err(), "read through the mount after destroy --force: {r:?}");
    assert!(std::fs::write(mp.join("g"), b"would be lost").is_err());
    // A new store of the same name: the old mount still never serves or takes data.
    let o = run(&store, &["init", "--mem-size", "32M", "--chunk-size", "64K"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(std::fs::write(mp.join("h"), b"would read back empty").is_err());
    for p in ["/f", "/g", "/h"] {
        let o = run(&store, &["cat", p]);
        assert!(!o.status.success(), "{p} is in the new store");
    }
    assert!(std::fs::read(mp.join("f")).is_err());
}
