//! `ckptfs bench pool`: the aggregate memory pool's evaluation (stdchk, section V) at
//! this machine's scale, each figure next to a baseline measured in the same run.
//!
//! A manager (node1) and `--benefactors` benefactors run as `ckptfs pool` processes;
//! clients are threads of this process, each on a client node of its own. On 127.0.0.1
//! by default; with `--links 1gbit,10gbit` (root) every node is a network namespace
//! (crates/ckptfs-netsim) and every node's link is limited by `tc` to each rate in turn.
//!
//! * Figures 1 and 2: one client writes a file of `--size` bytes for every stripe width
//!   and client buffer size: OAB (open to close) and ASB (open until every chunk is
//!   stored). Baseline: one TCP stream of the same size from the client's node to a
//!   benefactor's, over the same links, measured before each width's row group.
//! * Figure 3: 1, 2, ... clients, started `--stagger` seconds apart, each writing
//!   `--files` files back to back (removed after each): the aggregate throughput
//!   (bytes over the span from the first open to the last commit) and the best
//!   one-second window. Baseline: the clients' streams' rate (k x the one-stream rate).
//! * Dedup: the bytes a second version with 10 % changed chunks sends.

use anyhow::{bail, Context, Result};
use ckptfs_netsim::{Sim, SimOptions};
use ckptfs_pool::{PoolClient, PoolNet, PutReport};
use clap::Args;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn size(s: &str) -> Result<u64, String> {
    ckptfs_settings::parse::parse_size(s)
}

/// `ckptfs bench pool` options.
#[derive(Args, Debug)]
pub struct PoolBenchArgs {
    /// File size per client (bytes; K, M, G suffixes).
    #[arg(long, value_parser = size, default_value = "128M")]
    size: u64,
    /// Client write buffer sizes to try (figures 1 and 2).
    #[arg(long, value_parser = size, value_delimiter = ',', default_value = "4M,16M,64M,256M")]
    buffers: Vec<u64>,
    /// Stripe widths to try.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    widths: Vec<u32>,
    /// Concurrent clients for the aggregate-throughput figure (figure 3).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    clients: Vec<usize>,
    /// Files each client writes back to back in figure 3.
    #[arg(long, default_value_t = 3)]
    files: usize,
    /// Seconds between the starts of figure 3's clients (the paper: 10).
    #[arg(long, default_value_t = 1.0)]
    stagger: f64,
    /// Benefactors.
    #[arg(long, default_value_t = 4)]
    benefactors: usize,
    /// Memory each benefactor lends [default: 3 x --size].
    #[arg(long, value_parser = size)]
    mem: Option<u64>,
    /// Pool chunk size.
    #[arg(long, value_parser = size, default_value = "1M")]
    chunk: u64,
    /// Port of the manager; benefactors listen on the next ones (127.0.0.1), or all on
    /// this one (simulated nodes: each has its own address).
    #[arg(long, default_value_t = 46200)]
    port: u16,
    /// Simulated nodes with their links limited by `tc`, one run per rate: e.g.
    /// `1gbit,10gbit` (`none`: no limit). Needs root. Without it: 127.0.0.1.
    #[arg(long, value_name = "RATES")]
    links: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize, Clone)]
struct Fig12Row {
    width: u32,
    buffer: u64,
    oab_mb_s: f64,
    asb_mb_s: f64,
    /// The wire: one TCP stream client -> benefactor, measured for this width's rows.
    wire_mb_s: f64,
    asb_over_wire: f64,
    stripe: Vec<String>,
}

#[derive(serde::Serialize, Clone)]
struct Fig3Row {
    clients: usize,
    width: u32,
    files_each: usize,
    aggregate_mb_s: f64,
    best_second_mb_s: f64,
    /// k x the one-stream rate.
    wire_mb_s: f64,
    aggregate_over_wire: f64,
}

#[derive(serde::Serialize)]
struct Run {
    links: String,
    rate_bit_s: Option<u64>,
    fig12: Vec<Fig12Row>,
    fig3: Vec<Fig3Row>,
    dedup_v2_changed_chunks: u64,
    dedup_v2_chunks: u64,
    dedup_v2_bytes_sent: u64,
    dedup_v1_bytes_sent: u64,
}

#[derive(serde::Serialize)]
struct Out {
    size: u64,
    chunk: u64,
    benefactors: usize,
    mode: &'static str,
    note: &'static str,
    runs: Vec<Run>,
}

/// Where the nodes are.
struct Bed {
    _dir: tempfile::TempDir,
    cluster: ckptfs_cluster::Cluster,
    sim: Option<Sim>,
    kids: Vec<Child>,
    /// Node indexes of the clients.
    client_nodes: Vec<usize>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        for k in &mut self.kids {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

impl Bed {
    fn new(a: &PoolBenchArgs, netns: bool) -> Result<Bed> {
        let nclients = a.clients.iter().copied().max().unwrap_or(1).max(1);
        let n = 1 + a.benefactors + nclients;
        let sim = if netns {
            ckptfs_netsim::available()
                .map_err(|why| anyhow::anyhow!("bench pool --links needs simulated nodes: {why}"))?;
            Some(Sim::new(
                n,
                SimOptions {
                    tag: "pl3bench".into(),
                    shm_size: "16m".into(),
                    subnet: [10, 146, 3],
                    hostnames: None,
                },
            )?)
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("pl3-pool-bench")
            .tempdir_in("/tmp")?;
        let job = match &sim {
            Some(s) => s.prefix().to_string(),
            None => format!("pl3-pool-bench-{}", std::process::id()),
        };
        let mut c = ckptfs_cluster::Cluster::local(n, &job, a.port)?;
        if let Some(s) = &sim {
            for (node, sn) in c.nodes.iter_mut().zip(s.nodes()) {
                node.addr = format!("{}:{}", sn.ip, a.port);
            }
        }
        let secret = ckptfs_cluster::Secret::generate()?;
        c.secret = Some(secret.expose().iter().map(|b| format!("{b:02x}")).collect());
        let mut p = ckptfs_cluster::PoolMap::new("node1", &c.nodes[0].addr);
        // Benefactors listen at their node's address (node1, the manager's node, lends
        // nothing).
        p.benefactor_port_offset = 0;
        p.chunk_size = a.chunk as u32;
        p.refresh_ms = 200;
        p.death_ms = 3000;
        // The manager plans over the widest stripe asked; each client takes its own.
        p.stripe_width = a.widths.iter().copied().max().unwrap_or(2).max(1);
        p.meta_dir = Some(dir.path().join("meta"));
        c.pool = Some(p);
        let file = dir.path().join("c.toml");
        std::fs::write(&file, c.to_toml())?;
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let cluster = ckptfs_cluster::Cluster::load(&file)?;
        let mut bed = Bed {
            _dir: dir,
            cluster,
            sim,
            kids: Vec::new(),
            client_nodes: (1 + a.benefactors..n).collect(),
        };
        let mem = a.mem.unwrap_or(3 * a.size).to_string();
        bed.start(0, &["pool", "manager"], &file)?;
        for i in 1..=a.benefactors {
            bed.start(i, &["pool", "benefactor", "--mem", &mem], &file)?;
        }
        let t0 = Instant::now();
        loop {
            let c = bed.client(bed.client_nodes[0], 1, 1 << 20)?;
            let alive = bed
                .on(bed.client_nodes[0], move || {
                    c.status()
                        .map(|s| s.iter().filter(|b| b.alive).count())
                        .unwrap_or(0)
                })?
                .join()
                .map_err(|_| anyhow::anyhow!("status thread panicked"))??;
            if alive == a.benefactors {
                break;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                bail!("{alive} of {} benefactors alive after 20 s", a.benefactors);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(bed)
    }

    fn start(&mut self, i: usize, args: &[&str], file: &std::path::Path) -> Result<()> {
        let exe = std::env::current_exe().context("locate the ckptfs binary")?;
        let mut cmd = match &self.sim {
            Some(s) => s.node(i).command(&exe),
            None => Command::new(&exe),
        };
        cmd.arg("--cluster")
            .arg(file)
            .args(["--node-id", &format!("node{}", i + 1)])
            .args(args)
            .env_remove("CKPTFS_CLUSTER")
            .env_remove("CKPTFS_NODE_ID")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.kids.push(cmd.spawn().context("start a pool process")?);
        Ok(())
    }

    /// A client's settings (its runtime is made where it runs, see [`Bed::on`]).
    fn client(&self, node: usize, width: u32, buffer: u64) -> Result<ClientSpec> {
        Ok(ClientSpec {
            cluster: self.cluster.clone(),
            node: format!("node{}", node + 1),
            width,
            buffer,
        })
    }

    /// Run `f` on a thread of node `node` (its network namespace when simulated).
    fn on<T: Send + 'static>(
        &self,
        node: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<std::thread::JoinHandle<ckptfs_netsim::Result<T>>> {
        Ok(match &self.sim {
            Some(s) => s.node(node).spawn_in_netns(f)?,
            None => std::thread::spawn(move || Ok(f())),
        })
    }

    fn limit(&self, rate: Option<u64>) -> Result<()> {
        if let Some(s) = &self.sim {
            for i in 0..s.nodes().len() {
                s.limit(i, rate)?;
            }
        }
        Ok(())
    }

    fn ip(&self, node: usize) -> std::net::IpAddr {
        match &self.sim {
            Some(s) => s.node(node).ip.into(),
            None => [127, 0, 0, 1].into(),
        }
    }

    /// Seconds for one TCP stream of `bytes` from node `from` to node `to`.
    fn stream(&self, from: usize, to: usize, bytes: u64) -> Result<f64> {
        let ip = self.ip(to);
        let l = self
            .on(to, move || TcpListener::bind((ip, 0)))?
            .join()
            .map_err(|_| anyhow::anyhow!("bind thread panicked"))???;
        let addr = l.local_addr()?;
        let rx = std::thread::spawn(move || -> std::io::Result<u64> {
            let (mut s, _) = l.accept()?;
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                let k = s.read(&mut buf)?;
                if k == 0 {
                    break;
                }
                n += k as u64;
            }
            s.write_all(&[1])?;
            Ok(n)
        });
        let secs = self
            .on(from, move || -> std::io::Result<f64> {
                let buf = vec![0x5au8; 1 << 20];
                let t = Instant::now();
                let mut s = TcpStream::connect(addr)?;
                let mut left = bytes;
                while left > 0 {
                    let k = left.min(buf.len() as u64) as usize;
                    s.write_all(&buf[..k])?;
                    left -= k as u64;
                }
                s.shutdown(Shutdown::Write)?;
                let mut ack = [0u8; 1];
                s.read_exact(&mut ack)?;
                Ok(t.elapsed().as_secs_f64())
            })?
            .join()
            .map_err(|_| anyhow::anyhow!("stream thread panicked"))???;
        let got = rx.join().map_err(|_| anyhow::anyhow!("receiver panicked"))??;
        if got != bytes {
            bail!("TCP stream: {got} of {bytes} bytes arrived");
        }
        Ok(secs)
    }

    /// The one-stream rate from the first client's node to a benefactor's (bytes/s,
    /// median of 3).
    fn wire(&self, bytes: u64) -> Result<f64> {
        let mut v = (0..3)
            .map(|_| {
                self.stream(self.client_nodes[0], 1, bytes)
                    .map(|s| bytes as f64 / s)
            })
            .collect::<Result<Vec<f64>>>()?;
        v.sort_by(f64::total_cmp);
        Ok(v[1])
    }
}

#[derive(Clone)]
struct ClientSpec {
    cluster: ckptfs_cluster::Cluster,
    node: String,
    width: u32,
    buffer: u64,
}

impl ClientSpec {
    fn open(&self) -> Result<PoolClient, String> {
        let mut net = PoolNet::client(&self.cluster, &self.node).map_err(|e| e.to_string())?;
        net.pool.stripe_width = self.width;
        PoolClient::new(net, self.buffer).map_err(|e| e.to_string())
    }

    fn status(&self) -> Result<Vec<ckptfs_pool::msg::BenefactorInfo>, String> {
        self.open()?.status().map_err(|e| e.to_string())
    }
}

fn join<T>(h: std::thread::JoinHandle<ckptfs_netsim::Result<Result<T, String>>>) -> Result<T> {
    h.join()
        .map_err(|_| anyhow::anyhow!("client thread panicked"))??
        .map_err(|e| anyhow::anyhow!(e))
}

/// Write `data` as `path` from node `node` and remove it: the put's report.
fn put_once(bed: &Bed, spec: ClientSpec, node: usize, path: String, data: Arc<Vec<u8>>) -> Result<PutReport> {
    join(bed.on(node, move || -> Result<PutReport, String> {
        let c = spec.open()?;
        let r = c.put_bytes(&path, &data, 1).map_err(|e| e.to_string())?;
        c.remove(&path, None, None).map_err(|e| e.to_string())?;
        Ok(r)
    })?)
}

fn one_run(bed: &Bed, a: &PoolBenchArgs, label: &str, rate: Option<u64>, data: &Arc<Vec<u8>>) -> Result<Run> {
    bed.limit(rate)?;
    let mut fig12 = Vec::new();
    let c0 = bed.client_nodes[0];
    for &w in &a.widths {
        let wire = bed.wire(a.size.min(256 << 20))?;
        for &buf in &a.buffers {
            let spec = bed.client(c0, w, buf)?;
            let r = put_once(bed, spec, c0, format!("/bench/w{w}-b{buf}"), data.clone())?;
            fig12.push(Fig12Row {
                width: w,
                buffer: buf,
                oab_mb_s: r.oab / 1e6,
                asb_mb_s: r.asb / 1e6,
                wire_mb_s: wire / 1e6,
                asb_over_wire: r.asb / wire,
                stripe: r.stripe.clone(),
            });
            // Let the benefactors drop the removed chunks (next refresh).
            std::thread::sleep(Duration::from_millis(450));
        }
    }
    let width = a.widths.iter().copied().max().unwrap_or(2);
    let wire = bed.wire(a.size.min(256 << 20))?;
    let mut fig3 = Vec::new();
    for &k in &a.clients {
        let t0 = Instant::now();
        let mut hs = Vec::new();
        for (j, &node) in bed.client_nodes.iter().take(k).enumerate() {
            if j > 0 {
                std::thread::sleep(Duration::from_secs_f64(a.stagger));
            }
            let spec = bed.client(node, width, 64 << 20)?;
            let data = data.clone();
            let files = a.files;
            hs.push(bed.on(node, move || -> Result<Vec<(f64, f64, u64)>, String> {
                let c = spec.open()?;
                let mut spans = Vec::new();
                for f in 0..files {
                    let path = format!("/bench/c{k}-{j}-{f}");
                    let s = t0.elapsed().as_secs_f64();
                    c.put_bytes(&path, &data, 1).map_err(|e| e.to_string())?;
                    spans.push((s, t0.elapsed().as_secs_f64(), data.len() as u64));
                    c.remove(&path, None, None).map_err(|e| e.to_string())?;
                }
                Ok(spans)
            })?);
        }
        let mut spans = Vec::new();
        for h in hs {
            spans.extend(join(h)?);
        }
        let first = spans.iter().map(|s| s.0).fold(f64::MAX, f64::min);
        let last = spans.iter().map(|s| s.1).fold(0.0, f64::max);
        let total: u64 = spans.iter().map(|s| s.2).sum();
        // Each file's bytes spread evenly over its interval, in one-second windows.
        let secs = (last - first).ceil().max(1.0) as usize;
        let mut bins = vec![0f64; secs + 1];
        for (s, e, b) in &spans {
            let rate = *b as f64 / (e - s).max(1e-9);
            for (i, bin) in bins.iter_mut().enumerate() {
                let (lo, hi) = (first + i as f64, first + i as f64 + 1.0);
                let overlap = (e.min(hi) - s.max(lo)).max(0.0);
                *bin += rate * overlap;
            }
        }
        let best = bins.iter().copied().fold(0.0, f64::max);
        let agg = total as f64 / (last - first).max(1e-9);
        fig3.push(Fig3Row {
            clients: k,
            width,
            files_each: a.files,
            aggregate_mb_s: agg / 1e6,
            best_second_mb_s: best / 1e6,
            wire_mb_s: k as f64 * wire / 1e6,
            aggregate_over_wire: agg / (k as f64 * wire),
        });
        std::thread::sleep(Duration::from_millis(450));
    }
    // Dedup: a second version with 10 % of its chunks changed.
    let spec = bed.client(c0, width, 64 << 20)?;
    let cs = a.chunk as usize;
    let d1 = data.clone();
    let (v1, v2, changed, chunks) = join(bed.on(c0, move || -> Result<(u64, u64, u64, u64), String> {
        let c = spec.open()?;
        let r1 = c.put_bytes("/bench/dedup", &d1, 1).map_err(|e| e.to_string())?;
        let mut v2 = d1.as_ref().clone();
        let chunks = v2.len().div_ceil(cs);
        let mut changed = 0u64;
        for i in (0..chunks).step_by(10) {
            v2[i * cs] ^= 0xff;
            changed += 1;
        }
        let r2 = c.put_bytes("/bench/dedup", &v2, 2).map_err(|e| e.to_string())?;
        c.remove("/bench/dedup", None, None).map_err(|e| e.to_string())?;
        Ok((r1.bytes_sent, r2.bytes_sent, changed, r2.chunks))
    })?)?;
    bed.limit(None)?;
    Ok(Run {
        links: label.to_string(),
        rate_bit_s: rate,
        fig12,
        fig3,
        dedup_v2_changed_chunks: changed,
        dedup_v2_chunks: chunks,
        dedup_v2_bytes_sent: v2,
        dedup_v1_bytes_sent: v1,
    })
}

/// Run the benchmark.
pub fn run(a: PoolBenchArgs) -> Result<i32> {
    if a.size == 0 || a.benefactors == 0 || a.widths.is_empty() || a.buffers.is_empty() {
        bail!("--size, --benefactors, --widths and --buffers must be positive");
    }
    let links: Vec<(String, Option<u64>)> = match &a.links {
        Some(l) => l
            .split(',')
            .map(|s| Ok((s.trim().to_string(), crate::bench_partner::parse_rate(s)?)))
            .collect::<Result<_>>()?,
        None => vec![("loopback".into(), None)],
    };
    let bed = Bed::new(&a, a.links.is_some())?;
    let data: Arc<Vec<u8>> = Arc::new(
        (0..a.size as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect(),
    );
    let mut runs = Vec::new();
    for (label, rate) in &links {
        runs.push(one_run(&bed, &a, label, *rate, &data)?);
    }
    let out = Out {
        size: a.size,
        chunk: a.chunk,
        benefactors: a.benefactors,
        mode: if a.links.is_some() {
            "simulated nodes (network namespaces, veth links into a bridge, tc tbf per link)"
        } else {
            "127.0.0.1 (no link limit)"
        },
        note: "clients are threads of the bench process, the manager and benefactors processes; all share this machine's CPUs",
        runs,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(0);
    }
    println!(
        "pool bench: {} MiB per file, chunk {} KiB, {} benefactors; {}",
        a.size >> 20,
        a.chunk >> 10,
        a.benefactors,
        out.mode
    );
    for r in &out.runs {
        println!("\n== links: {}", r.links);
        println!("figures 1-2 (one client):");
        println!(
            "{:>6} {:>8} {:>10} {:>10} {:>10} {:>9}  stripe",
            "width", "buffer", "OAB MB/s", "ASB MB/s", "wire MB/s", "ASB/wire"
        );
        for x in &r.fig12 {
            println!(
                "{:>6} {:>7}M {:>10.0} {:>10.0} {:>10.0} {:>9.2}  {}",
                x.width,
                x.buffer >> 20,
                x.oab_mb_s,
                x.asb_mb_s,
                x.wire_mb_s,
                x.asb_over_wire,
                x.stripe.join(",")
            );
        }
        println!("figure 3 (clients writing back to back):");
        println!(
            "{:>8} {:>6} {:>6} {:>14} {:>14} {:>12} {:>10}",
            "clients", "width", "files", "aggregate MB/s", "best 1 s MB/s", "k*wire MB/s", "agg/wire"
        );
        for x in &r.fig3 {
            println!(
                "{:>8} {:>6} {:>6} {:>14.0} {:>14.0} {:>12.0} {:>10.2}",
                x.clients,
                x.width,
                x.files_each,
                x.aggregate_mb_s,
                x.best_second_mb_s,
                x.wire_mb_s,
                x.aggregate_over_wire
            );
        }
        println!(
            "dedup: v2 with {} of {} chunks changed sent {} bytes (v1: {})",
            r.dedup_v2_changed_chunks, r.dedup_v2_chunks, r.dedup_v2_bytes_sent, r.dedup_v1_bytes_sent
        );
    }
    Ok(0)
}
