//! Simulated nodes on one machine, for ckptfs's multi-node tests and benchmarks.
//!
//! [`Sim::new`] builds `n` nodes, each a network namespace with one veth link (`eth0`,
//! address `10.X.Y.(i+1)/24`) into a bridge that lives in a namespace of its own, and a
//! persistent mount namespace in which the node has its own empty tmpfs `/dev/shm` (so
//! every node has its own ckptfs stores) and, optionally, its own `/etc/hosts`. Nothing
//! is configured in the host's network namespace: traffic only flows between the
//! simulated nodes, and addresses cannot clash with another run (each run has its own
//! bridge). Processes run on a node through `nsenter` ([`Node::command`]); in-process
//! sockets on a node come from [`Node::in_netns`].
//!
//! Names are `<tag>-<pid>-<k>-…` (`k` counts simulations in one process), so parallel
//! runs and parallel tests never collide; [`Sim::new`] first sweeps leftovers of dead
//! runs with the same tag (a process killed before its `Drop` ran). `Drop` tears
//! everything down, also while unwinding from a panic.
//!
//! Needs root and iproute2 (`ip`, `tc`), util-linux (`unshare`, `nsenter`, `mount`):
//! [`Sim::new`] answers [`NetsimError::Unavailable`] otherwise, and tests print SKIPPED.

mod cmd;
mod setns;
pub use setns::pin_current_thread;

use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum NetsimError {
    /// Not root, or a needed tool is missing.
    #[error("node simulation unavailable: {0}")]
    Unavailable(String),
    /// A system tool failed.
    #[error("{cmd}: {status}: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: String,
        /// Its stderr.
        stderr: String,
    },
    /// A system call or process start failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A node index out of range, or a bad option.
    #[error("{0}")]
    Invalid(String),
}

impl NetsimError {
    /// The POSIX errno this error maps to.
    pub fn errno(&self) -> i32 {
        match self {
            NetsimError::Unavailable(_) => libc::EPERM,
            NetsimError::Command { .. } => libc::EIO,
            NetsimError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            NetsimError::Invalid(_) => libc::EINVAL,
        }
    }
}

/// Result of the simulator.
pub type Result<T> = std::result::Result<T, NetsimError>;

/// Options of a simulation.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Name prefix of this run's namespaces and files: `<tag>-<pid>-<k>`. Also the scope
    /// of the start-up sweep (only dead runs with the same tag are removed).
    pub tag: String,
    /// Size of each node's `/dev/shm` (a tmpfs `size=` value, e.g. `512m`).
    pub shm_size: String,
    /// First three octets of the nodes' /24 (node i gets `.i+1`).
    pub subnet: [u8; 3],
    /// Host names for a per-node `/etc/hosts` listing every node (`None`: the host's
    /// `/etc/hosts` is left visible). Must have one name per node.
    pub hostnames: Option<Vec<String>>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            tag: "cksim".into(),
            shm_size: "512m".into(),
            subnet: [10, 97, 0],
            hostnames: None,
        }
    }
}

/// Where a run keeps its mount-namespace files (root-only tmpfs).
const BASE_DIR: &str = "/run/ckptfs-netsim";

/// One simulated node.
#[derive(Debug, Clone)]
pub struct Node {
    /// Index in the simulation (0-based).
    pub index: usize,
    /// Name of its network namespace (`ip netns`).
    pub netns: String,
    /// Its address on the simulated network.
    pub ip: Ipv4Addr,
    /// Its persistent mount namespace (bind mount of the nsfs file).
    pub mntns: PathBuf,
}

impl Node {
    /// The network namespace file.
    pub fn netns_path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.netns)
    }

    /// A command that runs `prog` on this node (its network and mount namespaces, the
    /// caller's working directory). Add arguments, environment and stdio as usual.
    pub fn command(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        self.command_on(prog, None)
    }

    /// [`Node::command`] restricted to the CPUs `cpus` (a `taskset` list such as `0` or
    /// `0-2`), when given: two simulated nodes on one machine otherwise share its CPUs,
    /// which a benchmark may want to keep apart as separate machines would be.
    pub fn command_on(&self, prog: impl AsRef<std::ffi::OsStr>, cpus: Option<&str>) -> Command {
        let mut c = match cpus {
            Some(list) => {
                let mut t = Command::new("taskset");
                t.args(["-c", list, "nsenter"]);
                t
            }
            None => Command::new("nsenter"),
        };
        c.arg(format!("--net={}", self.netns_path().display()))
            .arg(format!("--mount={}", self.mntns.display()));
        if let Ok(d) = std::env::current_dir() {
            c.arg(format!("--wd={}", d.display()));
        }
        c.arg("--").arg(prog);
        c
    }

    /// Run `prog args` on this node to completion; a non-zero exit is an error.
    pub fn exec(&self, prog: &str, args: &[&str]) -> Result<Output> {
        cmd::run(self.command(prog).args(args))
    }

    /// Start `prog args` on this node (stdio inherited unless set on [`Node::command`]).
    ///
    /// Returns once the child is inside the node's network namespace (nsenter has
    /// entered it and exec'd `prog`), so that a `kill_node` right after it finds the
    /// process: otherwise, on a loaded machine, the kill could run before the child
    /// joined the namespace and miss it.
    pub fn spawn(&self, prog: &str, args: &[&str]) -> Result<Child> {
        let mut c = self.command(prog);
        c.args(args);
        let mut child = c.spawn().map_err(|e| NetsimError::Io {
            what: format!("start {}", cmd::describe(&c)),
            source: e,
        })?;
        let want = std::fs::metadata(self.netns_path()).map(|m| m.ino()).ok();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while let Some(want) = want {
            let ns = std::fs::metadata(format!("/proc/{}/ns/net", child.id())).map(|m| m.ino());
            if ns.ok() == Some(want)
                || matches!(child.try_wait(), Ok(Some(_)))
                || std::time::Instant::now() > deadline
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        Ok(child)
    }

    /// Run `f` on a thread inside this node's network namespace (sockets it makes stay
    /// there).
    pub fn in_netns<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        setns::in_netns(&self.netns_path(), f)
    }

    /// Start `f` on a thread inside this node's network namespace.
    pub fn spawn_in_netns<T, F>(&self, f: F) -> Result<std::thread::JoinHandle<Result<T>>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        setns::spawn_in_netns(&self.netns_path(), f)
    }

    /// The pids of processes in this node's network namespace.
    pub fn pids(&self) -> Vec<u32> {
        ns_pids(&self.netns)
    }
}

/// A running simulation; dropped, it removes every namespace, mount and file it made.
#[derive(Debug)]
pub struct Sim {
    prefix: String,
    dir: PathBuf,
    dir_mounted: bool,
    bridge: String,
    nodes: Vec<Node>,
    shm_size: String,
    /// Namespaces created so far (for teardown of a half-built simulation).
    made: Vec<String>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Can simulations run here? `Err` says why not.
pub fn available() -> std::result::Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (network and mount namespaces need root)".into());
    }
    for t in ["ip", "tc", "unshare", "nsenter", "mount", "umount", "taskset"] {
        if !cmd::have(t) {
            return Err(format!(
                "`{t}` not found (run scripts/setup-netsim.sh: iproute2, util-linux)"
            ));
        }
    }
    if !Path::new("/proc/self/ns/net").exists() {
        return Err("the kernel has no network namespaces".into());
    }
    Ok(())
}

fn ns_pids(ns: &str) -> Vec<u32> {
    cmd::sh("ip", &["netns", "pids", ns])
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// SIGKILL every process in network namespace `ns` and wait (bounded) until none is left.
fn kill_ns_processes(ns: &str) {
    for _ in 0..200 {
        let pids = ns_pids(ns);
        if pids.is_empty() {
            return;
        }
        for p in pids {
            // SAFETY: kill(2) with a pid read from `ip netns pids`; at worst ESRCH.
            unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid in a name `<tag>-<pid>-…`, if it has this tag.
fn owner_pid(name: &str, tag: &str) -> Option<u32> {
    let rest = name.strip_prefix(tag)?.strip_prefix('-')?;
    rest.split('-').next()?.parse().ok()
}

/// Remove what runs with `tag` whose process is gone left behind.
pub fn sweep(tag: &str) {
    if let Ok(o) = cmd::sh("ip", &["netns", "list"]) {
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let Some(name) = line.split_whitespace().next() else {
                continue;
            };
            if owner_pid(name, tag).is_some_and(|p| !pid_alive(p)) {
                kill_ns_processes(name);
                cmd::quiet("ip", &["netns", "del", name]);
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(BASE_DIR) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if owner_pid(&name, tag).is_some_and(|p| !pid_alive(p)) {
                remove_run_dir(&e.path());
            }
        }
    }
}

/// Unmount the mount-namespace files in `dir`, then `dir` itself, and remove it.
fn remove_run_dir(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "mnt") {
                cmd::quiet("umount", &["-l", &p.to_string_lossy()]);
            }
        }
    }
    cmd::quiet("umount", &["-l", &dir.to_string_lossy()]);
    let _ = std::fs::remove_dir_all(dir);
}

impl Sim {
    /// Build `n` nodes (see the crate documentation).
    pub fn new(n: usize, opts: SimOptions) -> Result<Sim> {
        available().map_err(NetsimError::Unavailable)?;
        if n == 0 || n > 250 {
            return Err(NetsimError::Invalid(format!("{n} nodes: 1 to 250")));
        }
        if let Some(h) = &opts.hostnames {
            if h.len() != n {
                return Err(NetsimError::Invalid(format!(
                    "{} host names for {n} nodes",
                    h.len()
                )));
            }
        }
        if opts.tag.is_empty() || opts.tag.contains(['/', ' ']) {
            return Err(NetsimError::Invalid(format!("bad tag {:?}", opts.tag)));
        }
        sweep(&opts.tag);
        let prefix = format!(
            "{}-{}-{}",
            opts.tag,
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut sim = Sim {
            dir: Path::new(BASE_DIR).join(&prefix),
            dir_mounted: false,
            bridge: format!("{prefix}-br"),
            prefix,
            nodes: Vec::new(),
            shm_size: opts.shm_size.clone(),
            made: Vec::new(),
        };
        // On any error below, dropping `sim` removes what was made.
        sim.build(n, &opts)?;
        Ok(sim)
    }

    fn build(&mut self, n: usize, opts: &SimOptions) -> Result<()> {
        let io = |what: String| move |e| NetsimError::Io { what, source: e };
        std::fs::create_dir_all(&self.dir).map_err(io(format!("mkdir {}", self.dir.display())))?;
        let d = self.dir.to_string_lossy().into_owned();
        // The directory holding the nsfs files must be a private mount of its own.
        cmd::sh("mount", &["--bind", &d, &d])?;
        self.dir_mounted = true;
        cmd::sh("mount", &["--make-private", &d])?;

        let br = self.bridge.clone();
        cmd::sh("ip", &["netns", "add", &br])?;
        self.made.push(br.clone());
        cmd::sh("ip", &["-n", &br, "link", "set", "lo", "up"])?;
        cmd::sh("ip", &["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        cmd::sh("ip", &["-n", &br, "link", "set", "br0", "up"])?;

        let hosts = opts.hostnames.as_ref().map(|names| {
            let mut s = String::from("127.0.0.1 localhost\n");
            for (i, h) in names.iter().enumerate() {
                let [a, b, c] = opts.subnet;
                s.push_str(&format!("{a}.{b}.{c}.{} {h}\n", i + 1));
            }
            s
        });
        for i in 0..n {
            let ns = format!("{}-n{i}", self.prefix);
            let [a, b, c] = opts.subnet;
            let ip = Ipv4Addr::new(a, b, c, (i + 1) as u8);
            cmd::sh("ip", &["netns", "add", &ns])?;
            self.made.push(ns.clone());
            let peer = format!("v{i}");
            cmd::sh("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            cmd::sh(
                "ip",
                &[
                    "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &peer, "netns", &br,
                ],
            )?;
            cmd::sh(
                "ip",
                &["-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"],
            )?;
            cmd::sh("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
            cmd::sh("ip", &["-n", &br, "link", "set", &peer, "master", "br0"])?;
            cmd::sh("ip", &["-n", &br, "link", "set", &peer, "up"])?;

            let mnt = self.dir.join(format!("n{i}.mnt"));
            std::fs::File::create(&mnt).map_err(io(format!("create {}", mnt.display())))?;
            let mut script = format!(
                "mount -t tmpfs -o size={},mode=1777 ckptfs-sim-shm /dev/shm",
                shell_word(&self.shm_size)
            );
            if let Some(h) = &hosts {
                let hp = self.dir.join(format!("n{i}.hosts"));
                std::fs::write(&hp, h).map_err(io(format!("write {}", hp.display())))?;
                script.push_str(&format!(
                    " && mount --bind {} /etc/hosts",
                    shell_word(&hp.to_string_lossy())
                ));
            }
            cmd::sh(
                "unshare",
                &[
                    &format!("--mount={}", mnt.display()),
                    "--propagation",
                    "slave",
                    "sh",
                    "-c",
                    &script,
                ],
            )?;
            self.nodes.push(Node {
                index: i,
                netns: ns,
                ip,
                mntns: mnt,
            });
        }
        Ok(())
    }

    /// This run's name prefix (`<tag>-<pid>-<k>`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    fn get(&self, i: usize) -> Result<&Node> {
        self.nodes
            .get(i)
            .ok_or_else(|| NetsimError::Invalid(format!("no node {i} (of {})", self.nodes.len())))
    }

    fn set_link(&self, i: usize, state: &str) -> Result<()> {
        let node = self.get(i)?;
        cmd::sh("ip", &["-n", &node.netns, "link", "set", "eth0", state])?;
        cmd::sh(
            "ip",
            &["-n", &self.bridge, "link", "set", &format!("v{i}"), state],
        )?;
        Ok(())
    }

    /// Node `i` is lost: its processes are killed (SIGKILL), its link goes down and its
    /// `/dev/shm` is unmounted (every store on it is gone).
    pub fn kill_node(&self, i: usize) -> Result<()> {
        let node = self.get(i)?;
        kill_ns_processes(&node.netns);
        self.set_link(i, "down")?;
        // A killed process leaves `ip netns pids` when its leader exits, but its memory
        // (the mapped segment) goes only with its last thread: a thread still leaving a
        // long system call keeps /dev/shm busy for a moment. Retry for up to 10 s.
        let mut tries = 0;
        loop {
            let r = cmd::run(
                Command::new("nsenter")
                    .arg(format!("--mount={}", node.mntns.display()))
                    .args(["--", "umount", "/dev/shm"]),
            );
            match r {
                Ok(_) => return Ok(()),
                Err(e) if tries < 100 && e.to_string().contains("busy") => {
                    tries += 1;
                    kill_ns_processes(&node.netns);
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Node `i` comes back (a replacement or a reboot): a fresh empty `/dev/shm`, link up.
    pub fn revive(&self, i: usize) -> Result<()> {
        let node = self.get(i)?;
        cmd::run(
            Command::new("nsenter")
                .arg(format!("--mount={}", node.mntns.display()))
                .args(["--", "mount", "-t", "tmpfs", "-o"])
                .arg(format!("size={},mode=1777", self.shm_size))
                .args(["ckptfs-sim-shm", "/dev/shm"]),
        )?;
        self.set_link(i, "up")
    }

    /// Take node `i`'s link down or up without touching its processes or memory (a
    /// partition).
    pub fn link(&self, i: usize, up: bool) -> Result<()> {
        self.set_link(i, if up { "up" } else { "down" })
    }

    /// Limit node `i`'s link to `bits_per_sec` in both directions (`tc tbf` on both
    /// ends of its veth); `None` removes the limit.
    pub fn limit(&self, i: usize, bits_per_sec: Option<u64>) -> Result<()> {
        let node = self.get(i)?;
        let peer = format!("v{i}");
        let ends = [
            (node.netns.as_str(), "eth0"),
            (self.bridge.as_str(), peer.as_str()),
        ];
        for (ns, dev) in ends {
            match bits_per_sec {
                Some(rate) => {
                    if rate < 8_000 {
                        return Err(NetsimError::Invalid(format!("rate {rate} bit/s: at least 8000")));
                    }
                    // The bucket holds ~10 ms at the rate (at least 64 KiB) so the
                    // kernel timer granularity does not cap the rate.
                    let burst = (rate / 8 / 100).max(64 << 10);
                    cmd::sh(
                        "tc",
                        &[
                            "-n",
                            ns,
                            "qdisc",
                            "replace",
                            "dev",
                            dev,
                            "root",
                            "tbf",
                            "rate",
                            &format!("{rate}bit"),
                            "burst",
                            &burst.to_string(),
                            "latency",
                            "100ms",
                        ],
                    )?;
                }
                None => {
                    // Absent already is fine.
                    cmd::quiet("tc", &["-n", ns, "qdisc", "del", "dev", dev, "root"]);
                }
            }
        }
        Ok(())
    }

    fn teardown(&mut self) {
        for ns in self.made.iter().rev() {
            kill_ns_processes(ns);
        }
        for n in &self.nodes {
            cmd::quiet("umount", &["-l", &n.mntns.to_string_lossy()]);
        }
        for ns in self.made.drain(..).rev() {
            cmd::quiet("ip", &["netns", "del", &ns]);
        }
        if self.dir_mounted {
            remove_run_dir(&self.dir);
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        self.nodes.clear();
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// `s` quoted for `sh -c`.
fn shell_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_reads_only_names_of_the_tag() {
        assert_eq!(owner_pid("hn2-123-0-n1", "hn2"), Some(123));
        assert_eq!(owner_pid("hn2-123-0-br", "hn2"), Some(123));
        assert_eq!(owner_pid("hn20-123-0-br", "hn2"), None);
        assert_eq!(owner_pid("other-123-0", "hn2"), None);
        assert_eq!(owner_pid("hn2-x-0", "hn2"), None);
    }

    #[test]
    fn shell_word_quotes_single_quotes() {
        assert_eq!(shell_word("a'b"), "'a'\\''b'");
    }
}
