//! The simulated nodes of `ckptfs bench erasure --links`: `n` network namespaces
//! (crates/ckptfs-netsim: veth links into a bridge, each node's own /dev/shm through a
//! mount namespace), each node's daemon a `ckptfs node` process in its namespaces, and
//! the bench's work on a node done by `ckptfs bench erasure-worker` processes there
//! (module `worker`). One cluster file per scheme (`xor`, `rs:2`, `partner:1`), the
//! same job and store names; switching scheme kills every daemon and gives every node a
//! fresh /dev/shm.

use super::worker::unix_s;
use anyhow::{bail, Context, Result};
use ckptfs_netsim::{Sim, SimOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Port of the daemons inside the namespaces.
const PORT: u16 = 46170;

/// The simulated nodes and their daemons.
pub struct Bed {
    pub sim: Sim,
    exe: PathBuf,
    pub dir: tempfile::TempDir,
    pub job: String,
    pub mem: u64,
    pub n: usize,
    /// The cluster file of the scheme running now.
    pub cluster: PathBuf,
    pub stores: Vec<String>,
    daemons: Vec<Option<Child>>,
    /// The link limit applied now.
    rate: Option<u64>,
}

/// Node `i`'s id.
pub fn id(i: usize) -> String {
    format!("node{}", i + 1)
}

impl Bed {
    /// `n` simulated nodes whose stores hold `mem` bytes.
    pub fn new(n: usize, mem: u64) -> Result<Bed> {
        ckptfs_netsim::available()
            .map_err(|why| anyhow::anyhow!("bench erasure --links needs simulated nodes: {why}"))?;
        let exe = std::env::current_exe().context("locate the ckptfs binary")?;
        let sim = Sim::new(
            n,
            SimOptions {
                tag: "ebbench".into(),
                // Store format 4 keeps its tables next to the data region (about 6.5 %).
                shm_size: (mem + mem / 8 + (128 << 20)).to_string(),
                subnet: [10, 147, 5],
                hostnames: Some((0..n).map(id).collect()),
            },
        )?;
        let dir = tempfile::Builder::new()
            .prefix("eb-bench-erasure")
            .tempdir_in("/tmp")?;
        let job = format!("eb{}", std::process::id());
        let bed = Bed {
            sim,
            exe,
            dir,
            job,
            mem,
            n,
            cluster: PathBuf::new(),
            stores: Vec::new(),
            daemons: (0..n).map(|_| None).collect(),
            rate: None,
        };
        for scheme in ["xor", "rs:2", "partner:1"] {
            bed.cluster_file(scheme)?;
        }
        Ok(bed)
    }

    fn cluster_path(&self, scheme: &str) -> PathBuf {
        self.dir.path().join(format!("{}.toml", scheme.replace(':', "")))
    }

    /// `cluster init --local n --redundancy SCHEME`, moved onto the nodes' addresses,
    /// with heartbeats that tolerate the daemons being stopped for a few seconds.
    fn cluster_file(&self, scheme: &str) -> Result<()> {
        let file = self.cluster_path(scheme);
        let mut c = Command::new(&self.exe);
        c.args(["cluster", "init", "--local", &self.n.to_string()])
            .args(["--redundancy", scheme]);
        if !scheme.starts_with("partner") {
            c.args(["--set-size", &self.n.to_string()]);
        }
        let out = c
            .args([
                "--port",
                "17340",
                "--job",
                &self.job,
                "--heartbeat-ms",
                "200",
                "--out",
            ])
            .arg(&file)
            .output()?;
        if !out.status.success() {
            bail!("cluster init: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mut text = std::fs::read_to_string(&file)?;
        for (i, node) in self.sim.nodes().iter().enumerate() {
            text = text.replace(
                &format!("\"127.0.0.1:{}\"", 17340 + i),
                &format!("\"{}:{PORT}\"", node.ip),
            );
        }
        // Anything else on 127.0.0.1 (the pool manager) goes to node1's address.
        text = text.replace(
            "\"127.0.0.1:17440\"",
            &format!("\"{}:{}\"", self.sim.node(0).ip, PORT + 1),
        );
        // A node lost stays "up" for its set's leader for 10 s (50 missed heartbeats of
        // 0.2 s), so the leader does not start encoding the set again during rebuilds.
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with("heartbeat_misses") {
                    "heartbeat_misses = 50".to_string()
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&file, lines.join("\n") + "\n")?;
        ckptfs_cluster::Cluster::load(&file).with_context(|| format!("cluster file for {scheme}"))?;
        Ok(())
    }

    /// Every node fresh (daemons killed, /dev/shm emptied), then the daemons of
    /// `scheme`'s cluster started.
    pub fn configure(&mut self, scheme: &str) -> Result<()> {
        for i in 0..self.n {
            self.lose(i)?;
        }
        self.cluster = self.cluster_path(scheme);
        let c = ckptfs_cluster::Cluster::load(&self.cluster)?;
        self.stores = (0..self.n)
            .map(|i| Ok(c.node(&id(i))?.store.clone()))
            .collect::<Result<_>>()?;
        for i in 0..self.n {
            self.start(i)?;
        }
        for i in 0..self.n {
            self.wait_started(i)?;
        }
        Ok(())
    }

    /// Node `i` lost: its daemon killed, its /dev/shm gone; then back empty (a
    /// replacement) with the link limit of the run.
    pub fn lose(&mut self, i: usize) -> Result<()> {
        if let Some(mut c) = self.daemons[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.sim.kill_node(i)?;
        self.sim.revive(i)?;
        self.sim.limit(i, self.rate)?;
        Ok(())
    }

    /// Limit every node's link to `rate` (both directions; None: no limit).
    pub fn limit(&mut self, rate: Option<u64>) -> Result<()> {
        self.rate = rate;
        for i in 0..self.n {
            self.sim.limit(i, rate)?;
        }
        Ok(())
    }

    /// `ckptfs` on node `i`, none of the caller's `CKPTFS_` variables, the job's.
    fn base(&self, i: usize) -> Command {
        let mut c = self.sim.node(i).command(&self.exe);
        for (k, _) in std::env::vars() {
            if k.starts_with("CKPTFS_") {
                c.env_remove(k);
            }
        }
        c.env("CKPTFS_MEM_SIZE", self.mem.to_string())
            .env("CKPTFS_JOB", &self.job);
        c
    }

    fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", id(i)))
    }

    fn log_text(&self, i: usize) -> String {
        std::fs::read_to_string(self.log(i)).unwrap_or_default()
    }

    fn start(&mut self, i: usize) -> Result<()> {
        let log = std::fs::File::create(self.log(i))?;
        let child = self
            .base(i)
            .arg("--cluster")
            .arg(&self.cluster)
            .args(["--node-id", &id(i)])
            .args(["node", "--interval", "0.01", "--partner-priority", "normal"])
            .args(["--partner-max", "100%", "--writer-yield", "0"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.daemons[i] = Some(child);
        Ok(())
    }

    /// Until node `i`'s daemon answers and has populated its store's page tables (work
    /// that would otherwise be charged to what runs meanwhile).
    fn wait_started(&self, i: usize) -> Result<()> {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(120) {
            if self.log_text(i).contains("populated page tables") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("{}'s daemon did not start: {}", id(i), self.log_text(i))
    }

    /// A worker on node `i` in `mode`, with extra arguments.
    pub fn worker_cmd(&self, i: usize, mode: &str, extra: &[String]) -> Command {
        let mut c = self.base(i);
        c.args([
            "bench",
            "erasure-worker",
            "--mode",
            mode,
            "--store",
            &self.stores[i],
        ])
        .args(["--mem", &self.mem.to_string(), "--job", &self.job])
        .arg("--cluster")
        .arg(&self.cluster)
        .args(["--node-id", &id(i)])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c
    }

    /// Run a worker to its end; its JSON line.
    pub fn worker(&self, i: usize, mode: &str, extra: &[String]) -> Result<serde_json::Value> {
        let child = self.worker_cmd(i, mode, extra).spawn()?;
        self.finish(i, mode, child)
    }

    /// Wait for a worker started with [`Bed::worker_cmd`]; its last JSON line.
    pub fn finish(&self, i: usize, mode: &str, child: Child) -> Result<serde_json::Value> {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "worker {mode} on {}: {}\n--- its daemon's log (tail)\n{}",
                id(i),
                String::from_utf8_lossy(&out.stderr),
                tail(&self.log_text(i), 30)
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().unwrap_or_default();
        serde_json::from_str(line).with_context(|| format!("worker output {line:?}"))
    }

    /// The same worker on every node at once; their JSON lines.
    pub fn on_all(&self, mode: &str, extra: &dyn Fn(usize) -> Vec<String>) -> Result<Vec<serde_json::Value>> {
        let kids: Vec<Child> = (0..self.n)
            .map(|i| Ok(self.worker_cmd(i, mode, &extra(i)).spawn()?))
            .collect::<Result<_>>()?;
        kids.into_iter()
            .enumerate()
            .map(|(i, k)| self.finish(i, mode, k))
            .collect()
    }

    /// Partner copies of every node's new part (held by the open dataset while it is
    /// written), dataset `dataset`: a waiter on every node; at one instant each saves the
    /// complete record of its part: seconds from then until the last node's copy is
    /// verified.
    pub fn partner_round(&self, part: u64, seed: u64, dataset: u64) -> Result<f64> {
        let recs = self.on_all("write", &|i| {
            args(&[("--size", part), ("--seed", seed + i as u64)])
        })?;
        let mut kids = Vec::new();
        for (i, rec) in recs.iter().enumerate() {
            let mut extra = args(&[("--id", dataset)]);
            extra.extend(["--parts".to_string(), rec.to_string()]);
            let mut c = self.worker_cmd(i, "copy", &extra);
            let mut k = c.stdin(Stdio::piped()).spawn()?;
            let mut line = String::new();
            let out = k.stdout.take().context("worker stdout")?;
            let mut out = BufReader::new(out);
            out.read_line(&mut line)?;
            if line.trim() != "ready" {
                let _ = k.kill();
                let _ = k.wait();
                bail!("copy waiter on {}: {line:?}", id(i));
            }
            kids.push((k, out));
        }
        let t0 = unix_s();
        for (k, _) in kids.iter_mut() {
            k.stdin.as_mut().context("worker stdin")?.write_all(b"go\n")?;
        }
        let mut last = t0;
        for (i, (mut k, mut out)) in kids.into_iter().enumerate() {
            drop(k.stdin.take());
            let mut rest = String::new();
            out.read_to_string(&mut rest)?;
            let st = k.wait()?;
            if !st.success() {
                let mut err = String::new();
                if let Some(mut e) = k.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                bail!("copy waiter on {}: {err}\n{}", id(i), tail(&self.log_text(i), 30));
            }
            let v: serde_json::Value = serde_json::from_str(rest.trim()).context("copy waiter output")?;
            last = last.max(v["copied_unix_s"].as_f64().context("copied_unix_s")?);
        }
        Ok(last - t0)
    }

    /// One plain TCP stream of `bytes` from node `from` to node `to`; seconds from
    /// connect to the receiver's acknowledgement of the last byte.
    pub fn tcp_stream(&self, from: usize, to: usize, bytes: u64) -> Result<f64> {
        crate::bench_partner::tcp_stream_between(&self.sim, from, to, bytes, None, None)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for d in self.daemons.iter_mut().flatten() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// `--flag value` pairs as arguments.
pub fn args(pairs: &[(&str, u64)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(k, v)| [k.to_string(), v.to_string()])
        .collect()
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
