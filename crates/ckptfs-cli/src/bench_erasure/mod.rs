//! `ckptfs bench erasure`: encode and decode throughput per core against memcpy, and one
//! in-process set (directory levels on tmpfs) protected and rebuilt against partner
//! copies; with `--links`, node daemons on simulated nodes whose links `tc` limits
//! (modules `links`, `nodes`, `worker`; docs/erasure.md). Not a timed test; figures go to
//! docs/benchmarks.md when taken on an idle machine.

mod links;
mod nodes;
mod worker;

pub use worker::{worker, EraWorkerArgs};

use anyhow::{Context, Result};
use ckptfs_erasure::bench::{measure, run_set, EncodeFigure, SetFigure};
use ckptfs_erasure::Scheme;
use clap::Args;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

/// `bench erasure` options.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Bytes of each member's part (MiB).
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub part_mib: usize,
    /// Repetitions: of the arithmetic (the best is kept) and of every measurement on
    /// the simulated nodes (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Directory for the in-process set's levels [default: a new directory in /dev/shm].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Node daemons on simulated nodes (root; network namespaces, each node's own
    /// /dev/shm), their links limited by `tc` to each rate in turn, comma-separated:
    /// `none` (no limit) or e.g. `10gbit`, `1gbit`: an erasure set of `--nodes` (xor,
    /// rs:2) against partner copies on the same links. Without it: the codec and the
    /// in-process set only.
    #[arg(long, value_name = "RATES")]
    pub links: Option<String>,
    /// Simulated nodes (one set).
    #[arg(long, default_value_t = 6)]
    pub nodes: usize,
    /// Bytes of each simulated node's part (MiB).
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub node_part_mib: u64,
    /// Skip the codec and the in-process set (only the simulated nodes of `--links`).
    #[arg(long)]
    pub no_codec: bool,
    /// What `--links` measures, comma-separated, in order: erasure schemes (`xor`,
    /// `rs:K`) and `partner` (the partner copies every ratio is taken against, and the
    /// PFS restore); without `partner` the ratio columns show 0.
    #[arg(long, value_name = "LIST", default_value = "xor,rs:2,partner")]
    pub schemes: String,
}

/// Runs the benchmark.
pub fn run(a: BenchArgs) -> Result<i32> {
    let part = a.part_mib << 20;
    let cases = [
        (Scheme::Xor, 6),
        (Scheme::Rs(2), 6),
        (Scheme::Xor, 8),
        (Scheme::Rs(2), 8),
        (Scheme::Rs(3), 8),
    ];
    let mut enc: Vec<EncodeFigure> = Vec::new();
    let mut sets = Vec::new();
    if !a.no_codec {
        for (s, n) in cases {
            eprintln!("bench erasure: encode {s} N={n}");
            enc.push(measure(s, n, part, a.reps.max(1))?);
        }
        eprintln!("bench erasure: in-process sets");
        sets = in_process(&a, part)?;
    }
    let mut runs = Vec::new();
    if let Some(l) = &a.links {
        let links: Vec<(String, Option<u64>)> = l
            .split(',')
            .map(|s| Ok((s.trim().to_string(), crate::bench_partner::parse_rate(s)?)))
            .collect::<Result<_>>()?;
        if a.nodes < 3 || a.node_part_mib == 0 {
            anyhow::bail!("--nodes must be at least 3 (rs:2) and --node-part-mib positive");
        }
        let node_part = a.node_part_mib << 20;
        let schemes: Vec<String> = a.schemes.split(',').map(|s| s.trim().to_string()).collect();
        for s in &schemes {
            if s != "partner" && Scheme::parse(s).is_none() {
                anyhow::bail!("--schemes: {s:?} is not xor, rs:K or partner");
            }
        }
        // The part, parity or a partner copy of it, and a new version during a rebuild
        // or a partner copy's replacement.
        let mem = 3 * node_part + (64 << 20);
        let mut bed = nodes::Bed::new(a.nodes, mem)?;
        for (label, rate) in &links {
            runs.push(links::one_link(
                &mut bed,
                label,
                *rate,
                node_part,
                a.reps.max(1),
                &schemes,
            )?);
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "part_bytes": part,
                "encode": enc,
                "sets": sets,
                "links": runs,
                "notes": NOTES,
                "machine": ckptfs_bench::report::machine(),
            }))?
        );
        return Ok(0);
    }
    if !a.no_codec {
        print_codec(&a, &enc, &sets);
    }
    for r in &runs {
        links::print(r, a.nodes);
    }
    if !runs.is_empty() {
        println!("\n{NOTES}");
    }
    Ok(0)
}

/// What the columns of the simulated nodes' table mean (also in the JSON).
const NOTES: &str = "protect s: dataset complete (every part written) -> every member's parity \
stored and verified (the leader holds the committed header); partner: the parts held by an \
open dataset while written, then from their complete dataset's record until every copy is \
verified. /wire: over \
one TCP stream of a part. leader s: the leader's own encode time. sent/part: bytes each \
daemon sent per protection (erasure pieces; partner-copy bytes) over the part. memory/part: \
bytes each node keeps for the others (parity and header of one dataset; partner copies) over \
the part. restore s: node2 lost (daemon killed, /dev/shm emptied), its part rebuilt from the \
set (rebuild_from_set, as restore --from-peers; no daemon on the replacement meanwhile) or \
restored from its partner copy. pfs: from a drained copy on this machine's local disk (the \
page cache most likely holds it; no link crossed). Medians of --reps.";

fn in_process(a: &BenchArgs, part: usize) -> Result<Vec<SetFigure>> {
    let base = a.dir.clone().unwrap_or_else(|| PathBuf::from("/dev/shm"));
    // A new 0700 directory of our own (create_dir fails on anything planted there).
    let tmp = base.join(format!("ckptfs-bench-erasure-{}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let result = sets_in(&tmp, part);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn print_codec(a: &BenchArgs, enc: &[EncodeFigure], sets: &[SetFigure]) {
    let gb = |b: f64| b / 1e9;
    println!(
        "encode on one core, parts of {} MiB, best of {} (wall time; cpu: this thread's CPU time, \
         which other processes' turns on a shared core do not count):",
        a.part_mib,
        a.reps.max(1)
    );
    println!("scheme  N  encode GB/s  memcpy GB/s  ratio  cpu: encode  memcpy  ratio  decode GB/s  sent/part  stored/part  (partner: 1.0 sent, 1.0 stored)");
    for e in enc {
        println!(
            "{:<6} {:>2}  {:>11.2}  {:>11.2}  {:>5.2}  {:>11.2}  {:>6.2}  {:>5.2}  {:>11.2}  {:>9.2}  {:>11.2}",
            e.scheme,
            e.members,
            gb(e.encode_bytes_per_s),
            gb(e.memcpy_bytes_per_s),
            e.ratio_to_memcpy,
            gb(e.encode_cpu_bytes_per_s),
            gb(e.memcpy_cpu_bytes_per_s),
            e.ratio_to_memcpy_cpu,
            gb(e.decode_bytes_per_s),
            e.sent_per_part,
            e.stored_per_part
        );
    }
    println!("\none in-process set (directory levels on tmpfs), one member lost:");
    println!("scheme  N  protect s  partner copies s  rebuild s  partner restore s  rebuild+re-encode s  stored/part");
    for s in sets {
        println!(
            "{:<6} {:>2}  {:>9.3}  {:>16.3}  {:>9.3}  {:>17.3}  {:>19.3}  {:>11.2}",
            s.scheme,
            s.members,
            s.protect_s,
            s.partner_copy_s,
            s.rebuild_s,
            s.partner_restore_s,
            s.rebuild_reencode_s,
            s.stored_per_part
        );
    }
}

fn sets_in(dir: &std::path::Path, part: usize) -> Result<Vec<SetFigure>> {
    let mut sets = Vec::new();
    for (i, (s, n)) in [(Scheme::Xor, 6), (Scheme::Rs(2), 6)].into_iter().enumerate() {
        let d = dir.join(format!("run{i}"));
        sets.push(run_set(s, n, part, &d)?);
        let _ = std::fs::remove_dir_all(&d);
    }
    Ok(sets)
}
