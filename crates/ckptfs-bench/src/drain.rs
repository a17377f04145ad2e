//! `ckptfs bench drain`: what the application sees, and what the drain achieves.
//!
//! For 1..N writer processes (forked, started together), each writing one checkpoint
//! of `--size` in `--block` writes, every repetition measures:
//! - `store-write` (OAB, the application-observed bandwidth): open to close into the
//!   node store;
//! - `direct-write`: the same data written straight to the destination, open to
//!   fsync and close (what the application pays without ckptfs);
//! - `drain-marshal` / `drain-nomarshal` (ASB, the achieved storage bandwidth): the
//!   agent publishing those files (`--once`, with and without staged marshaling), from
//!   the first write to the last manifest fsync;
//! - `dest-seq`: the destination's own sequential bandwidth: one file of the same
//!   total size written with the agent's write size (O_DIRECT if the agent uses
//!   it), then fsync.
//!
//! Ratios `vs_direct` (OAB / direct) and `vs_seq` (ASB / sequential) are computed from
//! the medians. This module is a binary-support module: it uses anyhow.

use crate::procs::run_parallel;
use crate::report::{machine, median, Measurement, Report};
use anyhow::{ensure, Context, Result};
use ckptfs_agent::{Agent, AgentConfig};
use ckptfs_store::{Store, StoreOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Options of `ckptfs bench drain`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Largest number of writer processes (1..N are measured).
    #[arg(long, default_value_t = 3)]
    pub procs: usize,
    /// Checkpoint size per process (K/M/G).
    #[arg(long, default_value = "256M", value_parser = crate::store::parse_size)]
    pub size: u64,
    /// Application write() size.
    #[arg(long, default_value = "1M", value_parser = crate::store::parse_size)]
    pub block: u64,
    /// Store chunk size.
    #[arg(long = "store-chunk", default_value = "1M", value_parser = crate::store::parse_size)]
    pub chunk: u64,
    /// Agent write size, also the block size of the sequential baseline.
    #[arg(long, default_value = "8M", value_parser = crate::store::parse_size)]
    pub write_size: u64,
    /// Agent IO threads (marshaling on).
    #[arg(long, default_value_t = 1)]
    pub io_threads: usize,
    /// Agent writes with O_DIRECT.
    #[arg(long)]
    pub direct: bool,
    /// Destination directory (a temporary directory is made inside).
    #[arg(long, default_value = "/var/tmp")]
    pub dest: PathBuf,
    /// Repetitions (medians are reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Pause after `sync()` before each timed case (ms), so that block discards and
    /// writeback from the previous case do not land in the next one.
    #[arg(long, default_value_t = 1000)]
    pub settle_ms: u64,
    /// Print a JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

use crate::store::{pattern, write_file as write_store};

/// Straight to the destination, then fsync (the application without ckptfs).
fn write_direct(path: &Path, size: u64, block: &[u8]) -> Result<()> {
    crate::store::write_local_file(path, size, block, true)
}

/// Sequential O_DIRECT writes of `block` (aligned) up to `size`, then fsync.
fn write_o_direct(path: &Path, size: u64, block: &[u8]) -> Result<()> {
    ensure!(
        size.is_multiple_of(ckptfs_agent::dest::DIRECT_ALIGN as u64),
        "--size must be a multiple of 4 KiB with --direct"
    );
    crate::store::write_local_file_o_direct(path, size, block)
}

struct Cleanup {
    name: String,
    dir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
        ckptfs_agent::status::remove_status(&self.name);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run the benchmark.
pub fn run(a: BenchArgs) -> Result<Report> {
    ensure!(
        a.procs > 0 && a.size > 0 && a.block > 0 && a.reps > 0,
        "sizes, --procs and --reps must be positive"
    );
    let name = format!("benchdrain-{}", std::process::id());
    let _ = Store::destroy(&name);
    let root = a.dest.join(format!("ckptfs-bench-drain-{}", std::process::id()));
    std::fs::create_dir_all(&root).with_context(|| format!("create {}", root.display()))?;
    let _cleanup = Cleanup {
        name: name.clone(),
        dir: root.clone(),
    };
    let per = a.size.div_ceil(a.chunk) * a.chunk;
    let store = Store::create(&StoreOptions {
        name: name.clone(),
        mem_size: Some(per * a.procs as u64 + a.chunk),
        chunk_size: Some(a.chunk),
        max_files: Some(256),
        ..Default::default()
    })
    .context("create the bench store")?;
    store.mkdir("/ckpt", 0o755)?;
    let block = pattern(a.block as usize);
    let big = pattern(a.write_size as usize);
    let mut big_aligned = ckptfs_agent::sys::AlignedBuf::zeroed(a.write_size as usize);
    big_aligned[..big.len()].copy_from_slice(&big);
    // Steady state: every chunk written once before measuring.
    for r in 0..a.procs {
        write_store(&store, &format!("/ckpt/r{r}"), a.size, &block)?;
    }
    let clean_store = |n: usize| {
        for r in 0..n {
            let _ = store.unlink(&format!("/ckpt/r{r}"));
        }
    };
    clean_store(a.procs);
    // Workers attach and map the data region before the barrier: a long-running
    // application has its page tables populated after its first checkpoint.
    let attach = |_r: usize| {
        let s = Store::attach(&StoreOptions::named(&name))?;
        ckptfs_store::region_io::RegionIo::new(&s).populate_write_all();
        Ok(s)
    };
    // Each timed case starts with no dirty data or block discards of an earlier one in
    // flight (the test machine's root file system is mounted with `discard`).
    let settle = || {
        // SAFETY: sync(2) has no preconditions.
        unsafe { libc::sync() };
        std::thread::sleep(std::time::Duration::from_millis(a.settle_ms));
    };
    let drain = |n: usize, case: &str, marshal: bool| -> Result<f64> {
        let dest = root.join(case);
        std::fs::create_dir_all(&dest)?;
        let mut c = AgentConfig::new(std::slice::from_ref(&dest));
        c.node_id = "bench".into();
        c.marshal = marshal;
        c.io_threads = a.io_threads;
        c.write_size = a.write_size as usize;
        c.direct = a.direct;
        c.priority = ckptfs_agent::sys::Priority::Normal;
        let agent = Agent::new(&store, c)?;
        settle();
        let t0 = Instant::now();
        let sum = agent.run_once()?;
        let t = t0.elapsed().as_secs_f64();
        ensure!(
            sum.failed.is_empty() && sum.drained_files == n as u64,
            "drain failed: {:?}",
            sum.failed
        );
        drop(agent);
        std::fs::remove_dir_all(&dest)?;
        Ok(t)
    };
    const DISK_CASES: [&str; 4] = ["direct-write", "drain-marshal", "drain-nomarshal", "dest-seq"];
    let mut secs: BTreeMap<(&str, usize), Vec<f64>> = BTreeMap::new();
    for rep in 0..a.reps {
        for n in 1..=a.procs {
            let total = a.size * n as u64;
            settle();
            // Application: into the store, open to close.
            let t = run_parallel(n, &attach, &|r, s: Store| {
                write_store(&s, &format!("/ckpt/r{r}"), a.size, &block)
            })?;
            secs.entry(("store-write", n)).or_default().push(t);
            // The disk-bound cases in an order rotated every repetition, so that no case
            // always comes first after the application's writes.
            for k in 0..DISK_CASES.len() {
                let case = DISK_CASES[(k + rep) % DISK_CASES.len()];
                let t = match case {
                    // Application without ckptfs: straight to the destination, fsync.
                    "direct-write" => {
                        let ddir = root.join("direct");
                        std::fs::create_dir_all(&ddir)?;
                        settle();
                        let t = run_parallel(n, &|_| Ok(()), &|r, ()| {
                            write_direct(&ddir.join(format!("r{r}")), a.size, &block)
                        })?;
                        std::fs::remove_dir_all(&ddir)?;
                        t
                    }
                    "drain-marshal" => drain(n, case, true)?,
                    "drain-nomarshal" => drain(n, case, false)?,
                    // The destination's own sequential bandwidth for the same bytes
                    // (with O_DIRECT too when the agent uses it).
                    _ => {
                        let seq = root.join("seq");
                        settle();
                        let t0 = Instant::now();
                        if a.direct {
                            write_o_direct(&seq, total, &big_aligned)?;
                        } else {
                            write_direct(&seq, total, &big)?;
                        }
                        let t = t0.elapsed().as_secs_f64();
                        std::fs::remove_file(&seq)?;
                        t
                    }
                };
                secs.entry((case, n)).or_default().push(t);
            }
            clean_store(n);
        }
    }
    let gbps = |case: &str, n: usize| {
        let v = &secs[&(case, n)];
        (a.size * n as u64) as f64 / median(v) / 1e9
    };
    let mut results = Vec::new();
    let mut notes = Vec::new();
    for n in 1..=a.procs {
        let total = a.size * n as u64;
        let oab = gbps("store-write", n) / gbps("direct-write", n);
        let asb_m = gbps("drain-marshal", n) / gbps("dest-seq", n);
        let asb_n = gbps("drain-nomarshal", n) / gbps("dest-seq", n);
        for case in [
            "store-write",
            "direct-write",
            "drain-marshal",
            "drain-nomarshal",
            "dest-seq",
        ] {
            let mut m = Measurement::new(case, n, total, secs[&(case, n)].clone());
            match case {
                "store-write" => m = m.with("vs_direct", oab),
                "drain-marshal" => m = m.with("vs_seq", asb_m),
                "drain-nomarshal" => m = m.with("vs_seq", asb_n),
                _ => {}
            }
            results.push(m);
        }
        notes.push(format!(
            "{n} procs: OAB {oab:.1}x the direct write (target >= 5x: {}); drain ASB {asb_m:.2}x (marshal) / {asb_n:.2}x (no marshal) the destination's sequential bandwidth (target >= 0.9x: {})",
            if oab >= 5.0 { "met" } else { "MISSED" },
            if asb_m >= 0.9 { "met" } else { "MISSED" }
        ));
    }
    Ok(Report {
        bench: "drain".into(),
        settings: serde_json::json!({
            "size": a.size, "block": a.block, "store_chunk": a.chunk, "write_size": a.write_size,
            "io_threads": a.io_threads, "direct": a.direct, "dest": a.dest, "reps": a.reps, "settle_ms": a.settle_ms,
            "procs": a.procs, "machine": machine(),
        }),
        results,
        notes,
    })
}
