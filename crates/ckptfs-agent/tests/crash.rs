//! The agent SIGKILLed at every step of the publish protocol, and at random times: no
//! file under a final name is ever partial or mixed, every manifest entry matches its
//! file, and the restarted agent finishes the job and removes the leftovers.

mod common;
use ckptfs_agent::Agent;
use ckptfs_store::{Store, StoreOptions};
use common::*;
use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

const CS: usize = 64 << 10;

/// Child: run the agent once on the store and destination given in the environment.
#[test]
fn agent_child() {
    let Ok(name) = std::env::var("CKPTFS_AGENT_TEST_STORE") else {
        return;
    };
    let dest = std::env::var("CKPTFS_AGENT_TEST_DEST").unwrap();
    let s = Store::attach(&StoreOptions::named(name)).unwrap();
    let mut c = cfg(Path::new(&dest));
    c.write_size = CS;
    c.io_threads = 2;
    if let Ok(bw) = std::env::var("CKPTFS_AGENT_TEST_BW") {
        c.max_bw = Some(bw.parse().unwrap());
    }
    Agent::new(&s, c).unwrap().run_once().unwrap();
}

fn spawn_agent(name: &str, dest: &Path, extra: &[(&str, String)]) -> std::process::Child {
    let mut env = vec![
        ("CKPTFS_AGENT_TEST_STORE", name.to_string()),
        ("CKPTFS_AGENT_TEST_DEST", dest.display().to_string()),
    ];
    env.extend(extra.iter().cloned());
    child("agent_child", &env)
}

fn no_temporaries(dest: &Path) -> bool {
    walk(dest)
        .iter()
        .all(|p| !p.to_string_lossy().contains(".tmp") && !p.to_string_lossy().contains("ckptfs-tmp"))
}

#[test]
fn sigkill_at_each_step_of_the_publish_protocol() {
    let points = [
        "agent-after-create",
        "agent-mid-write",
        "agent-after-fsync",
        "agent-before-rename",
        "agent-after-rename",
        "agent-manifest-before-rename",
        "agent-after-manifest",
    ];
    for point in points {
        let ts = store("crashpt", |_| {});
        let s = &ts.store;
        let mut versions: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
        let mut write = |p: &str, d: Vec<u8>| {
            put(s, p, &d);
            versions.entry(p.to_string()).or_default().push(d);
        };
        write("/k/a", data(1, 4 * CS + 3));
        write("/k/b", data(2, 2 * CS));
        let dest = tempfile::tempdir().unwrap();
        // A first clean drain, then a rewrite: the crash run replaces a published file.
        Agent::new(s, cfg(dest.path())).unwrap().run_once().unwrap();
        write("/k/a", data(11, 3 * CS + 9));
        write("/k/c", data(3, 5 * CS));
        write("/j/d", data(4, CS + 1));

        let st = spawn_agent(&ts.name, dest.path(), &[("CKPTFS_CRASH_AT", point.to_string())])
            .wait()
            .unwrap();
        assert_eq!(
            st.signal(),
            Some(libc::SIGKILL),
            "{point}: crash point not reached ({st:?})"
        );
        let expected = |p: &str| versions.get(p).cloned().unwrap_or_default();
        check_dest_invariants(dest.path(), &expected);

        // Restart: everything ends up published, current, and clean.
        let agent = Agent::new(s, cfg(dest.path())).unwrap();
        let sum = agent.run_once().unwrap();
        assert!(sum.failed.is_empty(), "{point}: {:?}", sum.failed);
        for (p, v) in &versions {
            let got = std::fs::read(dest.path().join(&p[1..])).unwrap();
            assert_eq!(&got, v.last().unwrap(), "{point}: {p}");
        }
        check_dest_invariants(dest.path(), &|p| {
            versions
                .get(p)
                .map(|v| vec![v.last().unwrap().clone()])
                .unwrap_or_default()
        });
        assert!(no_temporaries(dest.path()), "{point}: {:?}", walk(dest.path()));
        let sum = agent.run_once().unwrap();
        assert_eq!(sum.drained_files, 0, "{point}: nothing left to do");
    }
}

#[test]
fn sigkill_at_random_times_during_a_throttled_drain() {
    let ts = store("crashrnd", |_| {});
    let s = &ts.store;
    let mut versions: HashMap<String, Vec<u8>> = HashMap::new();
    for i in 0..6 {
        let p = format!("/r/step{}/rank{}", i / 3, i % 3);
        let d = data(i, 8 * CS + i as usize * 1001);
        put(s, &p, &d);
        versions.insert(p, d);
    }
    let dest = tempfile::tempdir().unwrap();
    let mut seed = std::process::id() as u64;
    for round in 0..6 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = 20 + (seed >> 33) % 250;
        let mut ch = spawn_agent(&ts.name, dest.path(), &[("CKPTFS_AGENT_TEST_BW", "2e6".into())]);
        std::thread::sleep(Duration::from_millis(delay));
        let _ = ch.kill();
        let _ = ch.wait();
        check_dest_invariants(dest.path(), &|p| versions.get(p).cloned().into_iter().collect());
        eprintln!(
            "round {round}: killed after {delay} ms, {} files visible",
            walk(dest.path()).len()
        );
    }
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    // The new agent removed any status file a killed one left half-written.
    assert_eq!(
        ckptfs_agent::status::stale_tmp_files(&ts.name),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(agent.run_once().unwrap().failed.is_empty());
    for (p, d) in &versions {
        assert_eq!(&std::fs::read(dest.path().join(&p[1..])).unwrap(), d, "{p}");
    }
    assert!(no_temporaries(dest.path()));
}

/// A temporary status file left by an agent killed mid-update goes away when the next
/// agent starts, and when the store's agent files are removed.
#[test]
fn stale_temporary_status_files_are_removed() {
    let ts = store("stalestatus", |_| {});
    let stale = std::path::PathBuf::from(format!(
        "{}.999999.tmp",
        ckptfs_agent::status::status_path(&ts.name).display()
    ));
    let other = std::path::PathBuf::from(format!(
        "{}.notapid.tmp",
        ckptfs_agent::status::status_path(&ts.name).display()
    ));
    std::fs::write(&stale, b"{").unwrap();
    std::fs::write(&other, b"x").unwrap();
    assert_eq!(
        ckptfs_agent::status::stale_tmp_files(&ts.name),
        std::slice::from_ref(&stale)
    );
    let dest = tempfile::tempdir().unwrap();
    drop(Agent::new(&ts.store, cfg(dest.path())).unwrap());
    assert!(!stale.exists());
    assert!(other.exists(), "only NAME.agent.json.PID.tmp files are ours");
    std::fs::remove_file(&other).unwrap();
    std::fs::write(&stale, b"{").unwrap();
    ckptfs_agent::status::remove_status(&ts.name);
    assert!(!stale.exists());
}

/// Child: the daemon, stopped by SIGTERM.
#[test]
fn daemon_child() {
    let Ok(name) = std::env::var("CKPTFS_AGENT_TEST_DAEMON") else {
        return;
    };
    let dest = std::env::var("CKPTFS_AGENT_TEST_DEST").unwrap();
    let s = Store::attach(&StoreOptions::named(name)).unwrap();
    let mut c = cfg(Path::new(&dest));
    c.write_size = CS;
    c.max_bw = Some(2e6);
    let shutdown = ckptfs_runtime::Shutdown::on_signals(&[libc::SIGTERM, libc::SIGINT]).unwrap();
    let agent = Agent::new(&s, c).unwrap();
    agent.run(&shutdown).unwrap();
}

#[test]
fn sigterm_stops_the_daemon_cleanly_mid_file() {
    let ts = store("sigterm", |_| {});
    let s = &ts.store;
    put(s, "/t/a", &data(1, 64 * CS)); // 4 MiB at 2 MB/s: ~2 s
    let dest = tempfile::tempdir().unwrap();
    let mut ch = child(
        "daemon_child",
        &[
            ("CKPTFS_AGENT_TEST_DAEMON", ts.name.clone()),
            ("CKPTFS_AGENT_TEST_DEST", dest.path().display().to_string()),
        ],
    );
    let t0 = std::time::Instant::now();
    loop {
        let st = ckptfs_agent::status(&ts.name).unwrap_or_default();
        if st.in_flight.iter().any(|f| f.done > 0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the daemon never started copying"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(ch.id() as i32, libc::SIGTERM) };
    let st = ch.wait().unwrap();
    assert!(st.success(), "clean exit on SIGTERM: {st:?}");
    let status = ckptfs_agent::status(&ts.name).unwrap();
    assert!(!status.running && status.in_flight.is_empty());
    assert!(
        !dest.path().join("t/a").exists(),
        "the abandoned file is not published"
    );
    assert!(no_temporaries(dest.path()), "{:?}", walk(dest.path()));
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 1);
    assert_eq!(std::fs::read(dest.path().join("t/a")).unwrap(), data(1, 64 * CS));
}
