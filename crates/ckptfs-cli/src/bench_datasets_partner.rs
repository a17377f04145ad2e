//! `ckptfs bench datasets --partner`: the dataset levels across two nodes on 127.0.0.1
//! (two `ckptfs node` daemons, one rank per node): from the ranks' last close to
//! "complete" (job-wide agreement), to "complete and on the partner level" (every file's
//! copy acknowledged by the partner), to "complete and on the PFS" (drained); then
//! restart time of node1's part from each level: its own store, the PFS (partner node
//! stopped, local files gone), the partner's memory (local files gone).

use crate::agent_args::human;
use anyhow::{bail, Context, Result};
use ckptfs_datasets::{Config, Datasets};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Daemon(Option<Child>);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

struct Bed {
    dir: PathBuf,
    exe: PathBuf,
    cluster: ckptfs_cluster::Cluster,
    stores: Vec<String>,
    daemons: Vec<Daemon>,
    mem: u64,
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.daemons.clear();
        for s in &self.stores {
            let _ = Store::destroy(s);
            // The daemons' and datasets' files in the runtime directory, as `destroy`.
            ckptfs_node::node_status::remove_store_files(s);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Bed {
    fn start(&mut self, i: usize) -> Result<()> {
        let node = format!("node{}", i + 1);
        let log = std::fs::File::create(self.dir.join(format!("{node}.log")))?;
        let c = Command::new(&self.exe)
            .args(["--cluster"])
            .arg(self.dir.join("c.toml"))
            .args(["--node-id", &node, "node"])
            .env("CKPTFS_MEM_SIZE", self.mem.to_string())
            .env("CKPTFS_CHUNK_SIZE", "1M")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start a node daemon")?;
        self.daemons[i] = Daemon(Some(c));
        let addr = self.cluster.nodes[i].addr.clone();
        let t = Instant::now();
        while std::net::TcpStream::connect(&addr).is_err() {
            if t.elapsed() > Duration::from_secs(60) {
                bail!("{node}'s daemon did not come up (see {})", self.dir.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The store exists once the daemon listens.
        Ok(())
    }

    fn stop(&mut self, i: usize) {
        self.daemons[i] = Daemon(None);
    }

    fn datasets(&self, i: usize, dest: &Path) -> Result<Datasets> {
        let node = format!("node{}", i + 1);
        let store = Store::attach(&StoreOptions::named(&self.stores[i]))?;
        let mut cfg = Config::for_job("bench");
        cfg.rank = i.to_string();
        cfg.world = 2;
        cfg.local_nranks = Some(1);
        cfg.node = node.clone();
        cfg.dests = vec![dest.to_path_buf()];
        let nodes = ckptfs_node::datasets::ClusterNodes::new(
            self.cluster.clone(),
            &node,
            store.clone(),
            Duration::from_secs(3),
        )?;
        Ok(Datasets::new(store, cfg, Box::new(nodes)))
    }
}

fn write_part(store: &Store, dir: &str, bytes: u64, files: u32) -> Result<()> {
    let buf: Vec<u8> = (0..(1u64 << 20)).map(|i| (i % 251) as u8).collect();
    let _ = store.mkdir(dir, 0o755);
    let per = bytes / u64::from(files.max(1));
    for r in 0..files.max(1) {
        let mut f = store.open(&format!("{dir}/f{r}"), OpenFlags::CREATE, 0o644)?;
        let mut left = per;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            f.write_all(&buf[..n])?;
            left -= n as u64;
        }
        f.close()?;
    }
    Ok(())
}

/// Run the two-node benchmark; rows of (what, seconds).
pub fn run(size: u64, files: u32, dest: &Path, port: u16) -> Result<Vec<(&'static str, f64)>> {
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("ckptfs-bench-dsp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let job = format!("bench-dsp-{}", std::process::id());
    let o = Command::new(&exe)
        .current_dir(&dir)
        .args([
            "cluster",
            "init",
            "--local",
            "2",
            "--out",
            "c.toml",
            "--heartbeat-ms",
            "200",
        ])
        .args(["--port", &port.to_string(), "--job", &job])
        .output()?;
    if !o.status.success() {
        bail!("cluster init: {}", String::from_utf8_lossy(&o.stderr));
    }
    let cluster = ckptfs_cluster::Cluster::load(&dir.join("c.toml"))?;
    let stores = cluster.nodes.iter().map(|n| n.store.clone()).collect();
    let mut bed = Bed {
        dir,
        exe,
        cluster,
        stores,
        daemons: vec![Daemon(None), Daemon(None)],
        mem: (2 * size + (64 << 20)).next_multiple_of(1 << 20),
    };
    bed.start(0)?;
    bed.start(1)?;
    let d1 = bed.datasets(0, dest)?;
    let d2 = bed.datasets(1, dest)?;
    d1.begin("bench", None)?;
    d2.begin("bench", None)?;
    write_part(d1.store(), "/n1", size, files)?;
    write_part(d2.store(), "/n2", size, files)?;
    let t0 = Instant::now();
    d2.complete(None, true)?;
    let d = d1.complete(None, true)?;
    if d.state != ckptfs_datasets::State::Complete {
        bail!("the dataset is {} ({:?})", d.state.name(), d.reason);
    }
    let complete_s = t0.elapsed().as_secs_f64();
    // Partner level: every file of both nodes acknowledged by its partner.
    loop {
        let all = d1.job_list()?;
        if all.iter().any(|j| j.levels().iter().any(|l| l == "partner")) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!("the partner copies did not complete in 600 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let partner_s = t0.elapsed().as_secs_f64();
    // The PFS level: node1's part drained (timed on its own, added to the completion).
    let mut acfg = ckptfs_agent::AgentConfig::new(&[dest.to_path_buf()]);
    acfg.node_id = "node1".into();
    let td = Instant::now();
    ckptfs_agent::Agent::new(d1.store(), acfg)?.run_once()?;
    let pfs_s = complete_s + td.elapsed().as_secs_f64();
    let paths: Vec<String> = d.files.keys().cloned().collect();
    let t = Instant::now();
    let r = d1.restart()?;
    let local_s = t.elapsed().as_secs_f64();
    if r.chosen.is_none() || !r.restored.is_empty() {
        bail!("restart from memory: {:?}", r.skipped);
    }
    // node1 is lost from here on: its daemon stopped (it would pass the removals below
    // on to its partner as deletes), its files removed (its records kept).
    bed.stop(0);
    // The PFS: node1's files gone, its partner stopped.
    bed.stop(1);
    for p in &paths {
        d1.store().unlink(p)?;
    }
    let t = Instant::now();
    let r = d1.restart()?;
    let restart_pfs_s = t.elapsed().as_secs_f64();
    if r.sources.values().any(|s| s != "pfs") || r.restored.len() != paths.len() {
        bail!("restart from the PFS: {:?} {:?}", r.sources, r.skipped);
    }
    // The partner's memory: node1's files gone again, the partner back.
    bed.start(1)?;
    for p in &paths {
        d1.store().unlink(p)?;
    }
    let t = Instant::now();
    let r = d1.restart()?;
    let restart_partner_s = t.elapsed().as_secs_f64();
    if r.sources.values().any(|s| !s.starts_with("partner:")) || r.restored.len() != paths.len() {
        bail!("restart from the partner: {:?} {:?}", r.sources, r.skipped);
    }
    eprintln!(
        "bench datasets --partner: 2 nodes on 127.0.0.1, {} per node in {files} files",
        human(size)
    );
    Ok(vec![
        ("complete (job-wide)", complete_s),
        ("complete + partner copy", partner_s),
        ("complete + on the PFS", pfs_s),
        ("restart from local", local_s),
        ("restart from partner", restart_partner_s),
        ("restart from the PFS", restart_pfs_s),
    ])
}
