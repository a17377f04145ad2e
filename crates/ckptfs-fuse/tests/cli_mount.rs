//! `ckptfs mount` / `ckptfs umount` as users run them: daemon mode with a log and pid
//! file, umount waiting for the daemon, SIGKILL and remount over the stale mount, CRFS
//! mode. Uses the `ckptfs` binary from `$CKPTFS_BIN_DIR` (default target/release).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn ckptfs() -> Option<PathBuf> {
    let dir = std::env::var_os("CKPTFS_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release"));
    let bin = dir.join("ckptfs");
    let has_mount = Command::new(&bin)
        .args(["mount", "--help"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_mount {
        eprintln!(
            "SKIPPED: {} is missing or has no `mount` subcommand yet (build it: cargo build --release -p ckptfs-cli)",
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

fn pid_of(stdout: &str) -> i32 {
    let i = stdout.find("daemon pid ").expect("pid in output") + "daemon pid ".len();
    stdout[i..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn wait_dead(pid: i32) {
    let t0 = Instant::now();
    while alive(pid) {
        assert!(t0.elapsed() < Duration::from_secs(10), "daemon {pid} still alive");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn cli_mount_umount_sigkill_remount() {
    let Some(bin) = ckptfs() else { return };
    require_fuse();
    let name = store_name("cli");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mps = mp.to_str().unwrap();
    let _guard = UnmountGuard(mp.clone());
    let log = tmp.path().join("daemon.log");
    let store = ["--store", name.as_str(), "--mem-size", "64M"];
    let mount_args: Vec<&str> = store
        .iter()
        .copied()
        .chain(["mount", "--log-file", log.to_str().unwrap(), mps])
        .collect();

    let (rc, out, err) = run(&bin, &mount_args);
    assert_eq!(rc, 0, "{err}");
    let pid = pid_of(&out);
    std::fs::write(mp.join("a"), b"through the daemon").unwrap();
    let (rc, _, err) = run(&bin, &["umount", mps]);
    assert_eq!(rc, 0, "{err}");
    assert!(!alive(pid), "umount returns after the daemon exited");
    assert!(
        std::fs::metadata(&log).unwrap().len() > 0,
        "the daemon logs to its log file"
    );

    // Remount: the file is there. SIGKILL the daemon: the next mount cleans the stale one.
    let (rc, out, err) = run(&bin, &mount_args);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(std::fs::read(mp.join("a")).unwrap(), b"through the daemon");
    let pid = pid_of(&out);
    // SAFETY: killing the daemon we started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_dead(pid);
    assert!(ckptfs_fuse::mount::is_stale(&mp));
    let (rc, out, err) = run(&bin, &mount_args);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(std::fs::read(mp.join("a")).unwrap(), b"through the daemon");
    let pid = pid_of(&out);
    // SIGTERM ends it cleanly too.
    // SAFETY: signalling the daemon we started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_dead(pid);
    assert!(ckptfs_fuse::mount::mount_entry(&mp).is_none_or(|m| !m.is_ckptfs()));
    let (rc, _, _) = run(&bin, &["umount", mps]);
    assert_ne!(rc, 0, "umount of a mount point that is not mounted fails");
    let _ = ckptfs_store::Store::destroy(&name);
}

#[test]
fn cli_crfs_mount_writes_backend_by_close() {
    let Some(bin) = ckptfs() else { return };
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let (mp, be) = (tmp.path().join("mnt"), tmp.path().join("backend"));
    std::fs::create_dir(&mp).unwrap();
    std::fs::create_dir(&be).unwrap();
    let log = tmp.path().join("crfs.log");
    let (rc, _, err) = run(
        &bin,
        &[
            "--chunk-size",
            "1M",
            "mount",
            "--backend",
            be.to_str().unwrap(),
            "--pool-size",
            "4M",
            "--io-threads",
            "2",
            "--log-file",
            log.to_str().unwrap(),
            mp.to_str().unwrap(),
        ],
    );
    assert_eq!(rc, 0, "{err}");
    let data = pattern(77, (5 << 20) + 3);
    std::fs::write(mp.join("ckpt"), &data).unwrap();
    assert_eq!(std::fs::read(be.join("ckpt")).unwrap(), data);
    let (rc, _, err) = run(&bin, &["umount", mp.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
}

/// `ckptfs umount` while a process that unshared its mount namespace holds a copy of
/// the mount: the unmount here leaves the connection alive, so the daemon used to keep
/// running and umount failed after --wait. umount now sends SIGTERM after 3 s, the
/// daemon aborts the connection and exits, and umount succeeds (docs/fuse.md, case 5a).
#[test]
fn cli_umount_ends_a_daemon_whose_mount_another_namespace_holds() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root (unshare of the mount namespace)");
        return;
    }
    let Some(bin) = ckptfs() else { return };
    let name = store_name("clins");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mps = mp.to_str().unwrap();
    let log = tmp.path().join("mount.log");
    let (rc, out, err) = run(
        &bin,
        &[
            "--store",
            &name,
            "--mem-size",
            "64M",
            "mount",
            "--log-file",
            log.to_str().unwrap(),
            mps,
        ],
    );
    assert_eq!(rc, 0, "{err}");
    let pid = pid_of(&out);
    let ready = tmp.path().join("ready");
    let mut holder = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("touch {} && exec sleep 60", ready.display()))
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "unshare did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = Instant::now();
    let (rc, _, err) = run(&bin, &["umount", "--wait", "15", mps]);
    let took = t0.elapsed();
    let _ = holder.kill();
    let _ = holder.wait();
    if alive(pid) {
        // SAFETY: our own daemon, left over by a failed run.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let _ = ckptfs_store::Store::destroy(&name);
    assert_eq!(rc, 0, "umount failed after {took:?}: {err}");
    assert!(err.contains("sending SIGTERM"), "{err}");
    assert!(took < Duration::from_secs(10), "umount took {took:?}");
    assert!(!alive(pid));
}
