//! What a mount must not hand to other users (issue 9, "Root trusts files other users
//! can plant"): the mount is `nosuid,nodev`, and `ckptfs mount`'s log and pid files are
//! never opened through a link another user planted.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn zz_daemon_entry() {
    daemon_entry();
}

const USER: &str = "ckptfs-test1";

fn ckptfs() -> Option<PathBuf> {
    let dir = std::env::var_os("CKPTFS_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release"));
    let bin = dir.join("ckptfs");
    if !bin.exists() {
        eprintln!(
            "SKIPPED: {} is missing (build it: cargo build --release -p ckptfs-cli)",
            bin.display()
        );
        return None;
    }
    Some(bin)
}

fn run(bin: &Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(bin).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn store_mount_is_nosuid_and_nodev_by_default() {
    let name = store_name("nosuid");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let _g = UnmountGuard(mp.clone());
    let d = Daemon::store(&name, &mp);
    let m = ckptfs_fuse::mount::mount_entry(&mp).expect("mounted");
    assert!(m.options.iter().any(|o| o == "nosuid"), "{:?}", m.options);
    assert!(m.options.iter().any(|o| o == "nodev"), "{:?}", m.options);
    // A setuid file through the mount stays a file whose bit the kernel ignores.
    let f = mp.join("suid");
    std::fs::write(&f, b"#!/bin/sh\nid -u\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4755)).unwrap();
    assert_eq!(d.stop(), 0);
    let _ = ckptfs_store::Store::destroy(&name);
}

/// Name of the daemon's default log in the caller's runtime directory.
fn default_log(mp: &Path) -> PathBuf {
    let key = mp
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches('/')
        .replace('/', "_");
    ckptfs_runtime::RuntimeDir::for_caller()
        .unwrap()
        .file_path(&format!("mount-{key}.log"))
}

#[test]
fn cli_mount_log_is_in_the_runtime_dir_and_never_follows_a_planted_symlink() {
    let Some(bin) = ckptfs() else { return };
    require_fuse();
    let name = store_name("log");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let _g = UnmountGuard(mp.clone());
    let mps = mp.to_str().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let log = default_log(&mp);
    let _ = std::fs::remove_file(&log);
    std::os::unix::fs::symlink(&victim, &log).unwrap();
    let store = ["--store", name.as_str(), "--mem-size", "64M"];
    let args: Vec<&str> = store.iter().copied().chain(["mount", mps]).collect();
    let (rc, _, err) = run(&bin, &args);
    assert_ne!(rc, 0, "mount logged through a symbolic link");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // The same for a log file the user names.
    let named = tmp.path().join("named.log");
    std::os::unix::fs::symlink(&victim, &named).unwrap();
    let with_log: Vec<&str> = store
        .iter()
        .copied()
        .chain(["mount", "--log-file", named.to_str().unwrap(), mps])
        .collect();
    let (rc, _, err) = run(&bin, &with_log);
    assert_ne!(rc, 0);
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // Without the link: the default log is a regular file in the runtime directory.
    std::fs::remove_file(&log).unwrap();
    let (rc, out, err) = run(&bin, &args);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains(&log.display().to_string()), "{out}");
    let (rc, _, err) = run(&bin, &["umount", mps]);
    assert_eq!(rc, 0, "{err}");
    assert!(std::fs::symlink_metadata(&log).unwrap().is_file());
    let _ = std::fs::remove_file(&log);
    let _ = ckptfs_store::Store::destroy(&name);
}

#[test]
fn log_file_symlink_planted_by_another_user_in_a_shared_dir_is_not_followed() {
    let Some(bin) = ckptfs() else { return };
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only(format_args!("needs root (to run as the user {USER})"));
        return;
    }
    if Command::new("id")
        .args(["-u", USER])
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        let _ = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/bin/sh", USER])
            .status();
    }
    require_fuse();
    // A sticky world-writable directory, like /tmp.
    let tmp = tempfile::tempdir().unwrap();
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = tmp.path().join("root-only");
    std::fs::write(&victim, b"root data").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let log = shared.join("mount.log");
    let st = Command::new("runuser")
        .args(["-u", USER, "--", "ln", "-s"])
        .arg(&victim)
        .arg(&log)
        .status()
        .unwrap();
    if !st.success() {
        ckptfs_testsupport::skip_root_only(format_args!("cannot run commands as {USER}"));
        return;
    }
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let _g = UnmountGuard(mp.clone());
    let name = store_name("userlog");
    let (rc, _, err) = run(
        &bin,
        &[
            "--store",
            &name,
            "--mem-size",
            "64M",
            "mount",
            "--log-file",
            log.to_str().unwrap(),
            mp.to_str().unwrap(),
        ],
    );
    // Refused: by O_NOFOLLOW (ELOOP), or by the kernel's protected_symlinks (EACCES).
    assert_ne!(rc, 0, "root's mount logged through the user's link");
    assert!(err.contains(log.to_str().unwrap()), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"root data");
    let _ = ckptfs_store::Store::destroy(&name);
}
