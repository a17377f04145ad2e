//! The runtime directory and its files refuse what another user could plant: links,
//! directories and files of other owners, wrong modes; the lock names its live holder only.

use ckptfs_runtime::{open_log_file, RuntimeDir, RuntimeError};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// flock locks belong to open file descriptions, which a child process shares from its
/// fork until its exec: a test that starts programs while a lock test has a lock file
/// open makes that test see its own lock as held by another (seen in CI). Tests that
/// start programs and tests that check who holds a lock take this first.
static FORKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn no_forks() -> std::sync::MutexGuard<'static, ()> {
    FORKS.lock().unwrap_or_else(|e| e.into_inner())
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), None).unwrap();
}

#[test]
fn new_runtime_dir_is_created_0700_and_reused() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("rt");
    let d = RuntimeDir::open(&p).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o700);
    d.write_atomic("status.json", b"one").unwrap();
    drop(d);
    let d = RuntimeDir::open(&p).unwrap();
    assert_eq!(d.read("status.json").unwrap().unwrap(), b"one");
    assert_eq!(d.read("missing").unwrap(), None);
}

#[test]
fn group_readable_runtime_dir_is_refused_naming_its_mode() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("rt");
    std::fs::create_dir(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = RuntimeDir::open(&p).unwrap_err();
    assert!(matches!(e, RuntimeError::BadMode { mode: 0o755, .. }), "{e}");
    assert_eq!(e.errno(), libc::EACCES);
    assert!(e.to_string().contains(&p.display().to_string()), "{e}");
}

#[test]
fn symlink_planted_as_runtime_dir_is_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let target = t.path().join("victim");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let p = t.path().join("rt");
    std::os::unix::fs::symlink(&target, &p).unwrap();
    let e = RuntimeDir::open(&p).unwrap_err();
    assert!(matches!(e, RuntimeError::Symlink { .. }), "{e}");
    assert_eq!(e.errno(), libc::ELOOP);
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
}

#[test]
fn runtime_dir_owned_by_another_user_is_refused_naming_the_owner() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root to give a directory to another uid");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("rt");
    std::fs::create_dir(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
    chown(&p, 65534);
    let e = RuntimeDir::open(&p).unwrap_err();
    assert!(
        matches!(
            e,
            RuntimeError::WrongOwner {
                owner: 65534,
                expected: 0,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.errno(), libc::EPERM);
    assert!(e.to_string().contains("uid 65534"), "{e}");
}

#[test]
fn planted_symlink_at_a_lock_or_log_name_is_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let d = RuntimeDir::open(t.path().join("rt")).unwrap();
    let victim = t.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    for name in ["agent.lock", "mount.log", "status.json.tmp"] {
        std::os::unix::fs::symlink(&victim, d.file_path(name)).unwrap();
    }
    assert!(matches!(
        d.lock("agent.lock").unwrap_err(),
        RuntimeError::Symlink { .. }
    ));
    assert!(matches!(
        d.open_log("mount.log").unwrap_err(),
        RuntimeError::Symlink { .. }
    ));
    assert!(matches!(
        open_log_file(&d.file_path("mount.log")).unwrap_err(),
        RuntimeError::Symlink { .. }
    ));
    // The temporary name of an atomic write is a link: refused, the target untouched.
    std::os::unix::fs::symlink(
        &victim,
        d.file_path(&format!("status.json.{}.tmp", std::process::id())),
    )
    .unwrap();
    assert!(d.write_atomic("status.json", b"new").is_err());
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // remove() takes the link away, not its target.
    assert!(d.remove("agent.lock").unwrap());
    assert!(victim.exists());
}

#[test]
fn user_log_file_owned_by_another_user_is_refused() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root to give a file to another uid");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let log = t.path().join("d.log");
    std::fs::write(&log, b"theirs").unwrap();
    chown(&log, 65534);
    let e = open_log_file(&log).unwrap_err();
    assert!(matches!(e, RuntimeError::WrongOwner { owner: 65534, .. }), "{e}");
    assert_eq!(std::fs::read(&log).unwrap(), b"theirs");
}

#[test]
fn log_file_is_appended_not_truncated() {
    let t = tempfile::tempdir().unwrap();
    let log = t.path().join("d.log");
    std::fs::write(&log, b"a\n").unwrap();
    use std::io::Write;
    open_log_file(&log).unwrap().write_all(b"b\n").unwrap();
    let d = RuntimeDir::open(t.path().join("rt")).unwrap();
    d.open_log("x.log").unwrap().write_all(b"1").unwrap();
    d.open_log("x.log").unwrap().write_all(b"2").unwrap();
    assert_eq!(std::fs::read(&log).unwrap(), b"a\nb\n");
    assert_eq!(d.read("x.log").unwrap().unwrap(), b"12");
}

#[test]
fn held_lock_error_names_the_holder_pid() {
    let _serial = no_forks();
    let t = tempfile::tempdir().unwrap();
    let d = RuntimeDir::open(t.path().join("rt")).unwrap();
    let held = d.lock("agent.lock").unwrap();
    assert_eq!(held.path(), d.file_path("agent.lock"));
    let me = std::process::id();
    match d.lock("agent.lock") {
        Err(e @ RuntimeError::Held { pid: Some(p), .. }) if p == me => {
            assert_eq!(e.errno(), libc::EBUSY);
            assert!(e.to_string().contains(&format!("pid {me}")), "{e}");
        }
        other => panic!("expected Held by {me}, got {other:?}"),
    }
    assert_eq!(d.lock_holder("agent.lock").unwrap(), Some(me));
    drop(held);
    assert_eq!(d.lock_holder("agent.lock").unwrap(), None);
    assert!(d.lock("agent.lock").is_ok());
}

#[test]
fn stale_pid_in_an_unlocked_lock_file_is_not_named_as_holder() {
    let _serial = no_forks();
    let t = tempfile::tempdir().unwrap();
    let d = RuntimeDir::open(t.path().join("rt")).unwrap();
    // pid 1 is alive, but it does not hold the lock.
    std::fs::write(d.file_path("agent.lock"), b"1\n").unwrap();
    assert_eq!(d.lock_holder("agent.lock").unwrap(), None);
    assert!(!d.is_locked("agent.lock"));
    let l = d.lock("agent.lock").unwrap();
    assert_eq!(
        d.read("agent.lock").unwrap().unwrap(),
        format!("{}\n", std::process::id()).as_bytes()
    );
    drop(l);
    assert_eq!(d.read("agent.lock").unwrap().unwrap(), b"");
}

#[test]
fn atomic_write_replaces_and_leaves_no_temporary() {
    let t = tempfile::tempdir().unwrap();
    let d = RuntimeDir::open(t.path().join("rt")).unwrap();
    d.write_atomic("s.json", b"first").unwrap();
    d.write_atomic("s.json", b"second").unwrap();
    assert_eq!(d.read("s.json").unwrap().unwrap(), b"second");
    assert_eq!(d.names().unwrap(), vec!["s.json".to_string()]);
    assert!(matches!(
        d.write_atomic("../x", b"").unwrap_err(),
        RuntimeError::InvalidName(_)
    ));
}

#[test]
fn default_runtime_dir_is_owned_by_the_caller() {
    let p = RuntimeDir::default_path();
    let d = RuntimeDir::for_caller().unwrap();
    assert_eq!(d.path(), p);
    let m = std::fs::symlink_metadata(&p).unwrap();
    // SAFETY: geteuid has no preconditions.
    assert_eq!(m.uid(), unsafe { libc::geteuid() });
    assert_eq!(m.mode() & 0o777, 0o700);
}

#[test]
fn runtime_dir_squatted_by_a_real_user_in_a_sticky_dir_is_refused_naming_them() {
    let _serial = no_forks();
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root (to run as the user ckptfs-test1)");
        return;
    }
    let user = "ckptfs-test1";
    let id = || {
        std::process::Command::new("id")
            .args(["-u", user])
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<u32>().ok())
    };
    if id().is_none() {
        let _ = std::process::Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/bin/sh", user])
            .status();
    }
    let Some(uid) = id() else {
        ckptfs_testsupport::skip_root_only(format_args!("cannot create the user {user} with useradd"));
        return;
    };
    // Like /dev/shm: world-writable and sticky.
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let p = t.path().join("ckptfs-0");
    let st = std::process::Command::new("runuser")
        .args(["-u", user, "--", "mkdir", "-m", "0700"])
        .arg(&p)
        .status()
        .unwrap();
    assert!(st.success());
    let e = RuntimeDir::open(&p).unwrap_err();
    assert!(
        matches!(e, RuntimeError::WrongOwner { owner, .. } if owner == uid),
        "{e}"
    );
    assert!(e.to_string().contains(&p.display().to_string()), "{e}");
    assert!(e.to_string().contains(&format!("uid {uid}")), "{e}");
}
