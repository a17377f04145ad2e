//! The agent's lock and status files live in the caller's runtime directory (owned by
//! the caller, mode 0700), so another user can neither squat the lock nor redirect the
//! files through a symbolic link (issue 9, "Root trusts files other users can plant").

mod common;

use ckptfs_agent::{status, Agent, AgentError};
use ckptfs_testsupport::{test_user, TEST_USER as USER};
use common::*;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn second_agent_is_refused_naming_the_first_agents_pid() {
    let ts = store("busy", |_| {});
    let dest = tempfile::tempdir().unwrap();
    let first = Agent::new(&ts.store, cfg(dest.path())).unwrap();
    match Agent::new(&ts.store, cfg(dest.path())) {
        Err(e @ AgentError::Busy { pid: Some(p), .. }) if p == std::process::id() => {
            assert_eq!(e.errno(), libc::EBUSY);
            assert!(e.to_string().contains(&format!("pid {p}")), "{e}");
        }
        Err(e) => panic!("expected Busy naming pid {}, got {e}", std::process::id()),
        Ok(_) => panic!("a second agent started"),
    }
    drop(first);
    Agent::new(&ts.store, cfg(dest.path())).unwrap();
}

#[test]
fn stale_pid_in_the_agent_lock_file_is_not_named_as_holder() {
    let ts = store("stalepid", |_| {});
    let lock = status::lock_path(&ts.name);
    // A crashed agent's pid (1 is alive, and holds no lock).
    std::fs::write(&lock, b"1\n").unwrap();
    let dest = tempfile::tempdir().unwrap();
    let a = Agent::new(&ts.store, cfg(dest.path())).unwrap();
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap().trim(),
        std::process::id().to_string()
    );
    drop(a);
    assert!(!status::status(&ts.name).unwrap().running);
    // The lock file is cleared on release: no pid is left for the next reader.
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), "");
}

#[test]
fn planted_symlink_at_the_agent_lock_and_status_paths_is_not_followed() {
    let ts = store("locklink", |_| {});
    let t = tempfile::tempdir().unwrap();
    let victim = t.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let lock = status::lock_path(&ts.name);
    std::os::unix::fs::symlink(&victim, &lock).unwrap();
    let dest = tempfile::tempdir().unwrap();
    let e = match Agent::new(&ts.store, cfg(dest.path())) {
        Err(e) => e,
        Ok(_) => panic!("the agent took a lock through a symbolic link"),
    };
    assert_eq!(e.errno(), libc::ELOOP, "{e}");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    std::fs::remove_file(&lock).unwrap();
    // The status file: a link there is replaced by rename, never written through.
    let st = status::status_path(&ts.name);
    std::os::unix::fs::symlink(&victim, &st).unwrap();
    drop(Agent::new(&ts.store, cfg(dest.path())).unwrap());
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(std::fs::symlink_metadata(&st).unwrap().is_file());
}

#[test]
fn user_squatting_the_shared_lock_path_cannot_make_roots_agent_refuse() {
    let Some(_uid) = test_user() else { return };
    let ts = store("squat", |_| {});
    // The user creates and holds the lock where round 1 kept it, in /dev/shm, and plants
    // a link at the old status path; and tries to plant one in root's runtime directory.
    let old_lock = format!("/dev/shm/ckptfs.{}.agent.lock", ts.name);
    let old_status = format!("/dev/shm/ckptfs.{}.agent.json", ts.name);
    let rt = status::lock_path(&ts.name).parent().unwrap().to_path_buf();
    assert_eq!(std::fs::metadata(&rt).unwrap().mode() & 0o777, 0o700);
    let mut holder = Command::new("runuser")
        .args(["-u", USER, "--", "sh", "-c"])
        .arg(format!(
            "ln -s /etc/passwd {old_status}; \
             touch {rt}/{n}.agent.lock 2>/dev/null && echo PLANTED; \
             exec flock {old_lock} sh -c 'echo HELD; exec sleep 60'",
            rt = rt.display(),
            n = ts.name
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = holder.stdout.take().unwrap();
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while !String::from_utf8_lossy(&seen).contains("HELD") {
        use std::io::Read;
        let mut b = [0u8; 64];
        let n = out.read(&mut b).unwrap();
        assert!(n > 0, "the squatter exited: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&b[..n]);
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
    assert!(
        !String::from_utf8_lossy(&seen).contains("PLANTED"),
        "the user could create a file in root's runtime directory"
    );
    let dest = tempfile::tempdir().unwrap();
    let agent = Agent::new(&ts.store, cfg(dest.path()));
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = std::fs::remove_file(&old_lock);
    let _ = std::fs::remove_file(&old_status);
    let agent = agent.expect("root's agent must not be refused by a user's lock");
    put(&ts.store, "/c/r0", &data(7, 4096));
    assert!(agent.run_once().unwrap().failed.is_empty());
    assert_eq!(std::fs::read(dest.path().join("c/r0")).unwrap(), data(7, 4096));
    drop(agent);
    assert!(std::fs::read_to_string("/etc/passwd").unwrap().contains("root"));
}
