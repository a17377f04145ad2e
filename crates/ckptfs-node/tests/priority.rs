//! The partner-copy priority (setting `partner_priority`) reaches the daemon's copy
//! threads and its status, and only them: heartbeats and the rest keep the daemon's
//! priority. (A test binary of its own: it reads the nice value of every thread of this
//! process.)

mod support;

use ckptfs_cluster::Scheme;
use support::*;

/// (name, nice, IO priority class) of every thread of this process.
fn threads() -> Vec<(String, i32, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = e.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // Fields after the parenthesised name: state is field 3, nice is field 19.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let nice: i32 = rest.split(' ').nth(16).unwrap().parse().unwrap();
        let tid: i32 = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
        // SAFETY: plain syscall with integer arguments (IOPRIO_WHO_PROCESS = 1, a tid).
        let io = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, tid) } as i32;
        out.push((comm.trim().to_string(), nice, io >> 13));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partner_priority_reaches_the_copy_threads_and_the_status_only() {
    assert!(ckptfs_node::parse_priority("bogus").is_err());
    assert_eq!(
        ckptfs_node::parse_priority(" Idle ").unwrap(),
        ckptfs_node::Priority::Idle
    );
    let base = threads()[0].1;
    let tc = TestCluster::new("prio", 2, Scheme::Ring, 1);
    let mut c1 = tc.config("node1");
    c1.partner_priority = ckptfs_node::parse_priority("idle").unwrap();
    let d1 = Daemon::start(c1);
    let d2 = Daemon::start(tc.config("node2"));
    let data = bytes(300_000, 3);
    write(&tc.store("node1"), "/ckpt/p", &data);
    let s2 = tc.store("node2");
    wait_for("the copy", || copy_on(&s2, "node1", "/ckpt/p").is_some()).await;
    assert_eq!(copy_on(&s2, "node1", "/ckpt/p").unwrap(), data);
    let name1 = tc.store_opts("node1").name;
    let name2 = tc.store_opts("node2").name;
    wait_for("both statuses", || {
        ckptfs_node::status(&name1).is_some() && ckptfs_node::status(&name2).is_some()
    })
    .await;
    assert_eq!(ckptfs_node::status(&name1).unwrap().partner_priority, "idle");
    assert_eq!(ckptfs_node::status(&name2).unwrap().partner_priority, "low");
    let t = threads();
    let copy: Vec<_> = t.iter().filter(|x| x.0 == "partner-copy").collect();
    // node1's copy thread at nice 19 and the idle IO class, node2's at nice 10.
    assert!(copy.iter().any(|x| x.1 == 19 && x.2 == 3), "{t:?}");
    assert!(copy.iter().any(|x| x.1 == 10), "{t:?}");
    assert!(copy.iter().all(|x| x.1 == 19 || x.1 == 10), "{t:?}");
    // The runtime the daemons were started on (heartbeats, status, accepting) keeps
    // the priority the test was started with.
    let main: Vec<_> = t.iter().filter(|x| x.0 == "tokio-rt-worker").collect();
    assert!(!main.is_empty() && main.iter().all(|x| x.1 == base), "{t:?}");
    d1.stop().await;
    d2.stop().await;
}
