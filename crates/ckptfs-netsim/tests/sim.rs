//! The simulator itself: nodes up, connected, each with its own /dev/shm; loss and
//! revival; limits; nothing left behind. Needs root and iproute2: SKIPPED otherwise.

use ckptfs_netsim::{available, Sim, SimOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

const TAG: &str = "hn2";

fn opts(hosts: Option<usize>) -> SimOptions {
    SimOptions {
        tag: TAG.into(),
        shm_size: "64m".into(),
        hostnames: hosts.map(|n| (1..=n).map(|i| format!("node{i}")).collect()),
        ..Default::default()
    }
}

macro_rules! sim_or_skip {
    ($n:expr, $hosts:expr) => {
        match available() {
            Ok(()) => Sim::new($n, opts($hosts)).expect("build the simulation"),
            Err(why) => {
                ckptfs_testsupport::skip_root_only(why);
                return;
            }
        }
    };
}

fn sh(sim: &Sim, i: usize, script: &str) -> String {
    let out = sim.node(i).exec("sh", &["-c", script]).expect(script);
    String::from_utf8(out.stdout).unwrap()
}

/// A server on node `i`: answers each connection's byte `b` with `[i, b]`.
fn serve(sim: &Sim, i: usize, conns: usize) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let ip = sim.node(i).ip;
    let l = sim
        .node(i)
        .in_netns(move || TcpListener::bind((ip, 0)))
        .unwrap()
        .expect("bind on the node's address");
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        for _ in 0..conns {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            s.write_all(&[i as u8, b[0]]).unwrap();
        }
    });
    (addr, h)
}

fn ask(sim: &Sim, from: usize, to: SocketAddr) -> std::io::Result<[u8; 2]> {
    sim.node(from)
        .in_netns(move || -> std::io::Result<[u8; 2]> {
            let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(20))?;
            s.write_all(&[from as u8])?;
            let mut r = [0u8; 2];
            s.read_exact(&mut r)?;
            Ok(r)
        })
        .unwrap()
}

fn netns_names() -> String {
    String::from_utf8(
        std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
}

fn mounts() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap()
}

#[test]
fn four_nodes_reach_each_other_over_tcp_by_address_and_name() {
    let sim = sim_or_skip!(4, Some(4));
    let servers: Vec<_> = (0..4).map(|i| serve(&sim, i, 3)).collect();
    for from in 0..4 {
        for (to, (addr, _)) in servers.iter().enumerate() {
            if to != from {
                assert_eq!(ask(&sim, from, *addr).unwrap(), [to as u8, from as u8]);
            }
        }
    }
    for (_, h) in servers {
        h.join().unwrap();
    }
    // Names from the per-node /etc/hosts.
    let got = sh(&sim, 0, "getent hosts node3");
    assert!(got.starts_with(&format!("{} ", sim.node(2).ip)), "{got}");
    // The host cannot be reached from a node: no route outside the simulated /24.
    let out = sh(&sim, 1, "ip route");
    assert!(!out.contains("default"), "{out}");
}

#[test]
fn each_node_sees_its_own_empty_dev_shm() {
    let sim = sim_or_skip!(4, None);
    let marker = format!("{}-marker", sim.prefix());
    for i in 0..4 {
        assert_eq!(sh(&sim, i, "ls -A /dev/shm"), "", "node {i}");
    }
    sh(&sim, 0, &format!("echo zero > /dev/shm/{marker}"));
    sh(&sim, 2, &format!("echo two > /dev/shm/{marker}"));
    assert_eq!(sh(&sim, 0, &format!("cat /dev/shm/{marker}")), "zero\n");
    assert_eq!(sh(&sim, 2, &format!("cat /dev/shm/{marker}")), "two\n");
    assert_eq!(sh(&sim, 1, "ls -A /dev/shm"), "");
    assert_eq!(sh(&sim, 3, "ls -A /dev/shm"), "");
    assert!(!std::path::Path::new("/dev/shm").join(&marker).exists());
}

#[test]
fn killed_node_is_unreachable_loses_its_shm_and_comes_back_empty() {
    let sim = sim_or_skip!(3, None);
    sh(&sim, 1, "echo data > /dev/shm/ckpt");
    let mut sleeper = sim.node(1).spawn("sleep", &["600"]).unwrap();
    let (addr, _h) = serve(&sim, 1, 1);
    sim.kill_node(1).unwrap();
    let st = sleeper.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(libc::SIGKILL)
    );
    assert!(sim.node(1).pids().is_empty());
    assert!(ask(&sim, 0, addr).is_err(), "a killed node answered");
    // Nodes that were not killed still talk.
    let (a2, h2) = serve(&sim, 2, 1);
    assert_eq!(ask(&sim, 0, a2).unwrap(), [2, 0]);
    h2.join().unwrap();

    sim.revive(1).unwrap();
    assert_eq!(sh(&sim, 1, "ls -A /dev/shm"), "");
    let (a1, h1) = serve(&sim, 1, 1);
    assert_eq!(ask(&sim, 0, a1).unwrap(), [1, 0]);
    h1.join().unwrap();
}

#[test]
fn teardown_leaves_no_namespace_mount_or_file_even_after_a_panic() {
    if let Err(why) = available() {
        ckptfs_testsupport::skip_root_only(why);
        return;
    }
    let sim = Sim::new(2, opts(Some(2))).unwrap();
    let prefix = sim.prefix().to_string();
    let mut child = sim.node(0).spawn("sleep", &["600"]).unwrap();
    assert!(netns_names().contains(&prefix));
    assert!(mounts().contains(&prefix));
    drop(sim);
    // Its processes were killed.
    assert!(!child.wait().unwrap().success());
    assert!(!netns_names().contains(&prefix), "{}", netns_names());
    assert!(!mounts().contains(&prefix));
    assert!(!std::path::Path::new("/run/ckptfs-netsim").join(&prefix).exists());

    let prefix = std::panic::catch_unwind(|| {
        let sim = Sim::new(2, opts(None)).unwrap();
        std::panic::panic_any(sim.prefix().to_string());
    })
    .unwrap_err()
    .downcast::<String>()
    .unwrap();
    assert!(!netns_names().contains(prefix.as_str()));
    assert!(!mounts().contains(prefix.as_str()));
}

#[test]
fn start_sweeps_leftovers_of_a_dead_run_but_not_of_live_ones() {
    if let Err(why) = available() {
        ckptfs_testsupport::skip_root_only(why);
        return;
    }
    // A run whose process is gone (a finished child's pid), and one of a live process.
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let dead = c.id();
    c.wait().unwrap();
    let dead_ns = format!("{TAG}-{dead}-0-n0");
    let live_ns = format!("{TAG}-{}-999-n0", std::process::id());
    for ns in [&dead_ns, &live_ns] {
        let st = std::process::Command::new("ip")
            .args(["netns", "add", ns])
            .status();
        assert!(st.unwrap().success());
    }
    let sim = Sim::new(1, opts(None)).unwrap();
    let names = netns_names();
    let dead_gone = !names.contains(&dead_ns);
    let live_kept = names.contains(&live_ns);
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", &live_ns])
        .status();
    // Already swept when the test passes.
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", &dead_ns])
        .stderr(std::process::Stdio::null())
        .status();
    drop(sim);
    assert!(dead_gone, "{names}");
    assert!(live_kept, "{names}");
}

#[test]
fn limit_installs_a_token_bucket_on_both_ends_and_removes_it() {
    let sim = sim_or_skip!(2, None);
    sim.limit(0, Some(1_000_000_000)).unwrap();
    let q = sh(&sim, 0, "tc qdisc show dev eth0");
    assert!(q.contains("tbf") && q.contains("1Gbit"), "{q}");
    // Traffic still flows under the limit.
    let (a, h) = serve(&sim, 0, 1);
    assert_eq!(ask(&sim, 1, a).unwrap(), [0, 1]);
    h.join().unwrap();
    sim.limit(0, None).unwrap();
    let q = sh(&sim, 0, "tc qdisc show dev eth0");
    assert!(!q.contains("tbf"), "{q}");
}
