//! `ckptfs bench erasure`: encode and decode throughput per core against memcpy, and one
//! in-process set (directory levels on tmpfs) protected and rebuilt against partner
//! copies. Not a timed test; figures go to docs/benchmarks.md when taken on an idle
//! machine.

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
    /// Repetitions of the arithmetic (best is kept).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Directory for the in-process set's levels [default: a new directory in /dev/shm].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Also the daemon path: node daemons in this process on 127.0.0.1, one set of
    /// `--members` (xor, rs:2) against partner copies; parts of `--daemon-part-mib`.
    #[arg(long)]
    pub daemons: bool,
    /// Daemons of the daemon path.
    #[arg(long, default_value_t = 6)]
    pub members: usize,
    /// Bytes of each daemon's part on the daemon path (MiB).
    #[arg(long, value_name = "MIB", default_value_t = 32)]
    pub daemon_part_mib: u64,
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
    for (s, n) in cases {
        enc.push(measure(s, n, part, a.reps.max(1))?);
    }
    let base = a.dir.clone().unwrap_or_else(|| PathBuf::from("/dev/shm"));
    // A new 0700 directory of our own (create_dir fails on anything planted there).
    let tmp = base.join(format!("ckptfs-bench-erasure-{}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let result = sets_in(&tmp, part);
    let _ = std::fs::remove_dir_all(&tmp);
    let sets = result?;
    let mut daemons = Vec::new();
    if a.daemons {
        let (n, dp, reps) = (a.members, a.daemon_part_mib << 20, a.reps.clamp(1, 5));
        daemons.push(ckptfs_node::erasure_bench::bench_set(n, Scheme::Xor, dp, reps)?);
        daemons.push(ckptfs_node::erasure_bench::bench_set(n, Scheme::Rs(2), dp, reps)?);
        daemons.push(ckptfs_node::erasure_bench::bench_partner(n, dp, reps)?);
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "part_bytes": part, "encode": enc, "sets": sets, "daemons": daemons })
            )?
        );
        return Ok(0);
    }
    let gb = |b: f64| b / 1e9;
    println!("encode on one core, parts of {} MiB:", a.part_mib);
    println!("scheme  N  encode GB/s  memcpy GB/s  ratio  decode GB/s  sent/part  stored/part  (partner: 1.0 sent, 1.0 stored)");
    for e in &enc {
        println!(
            "{:<6} {:>2}  {:>11.2}  {:>11.2}  {:>5.2}  {:>11.2}  {:>9.2}  {:>11.2}",
            e.scheme,
            e.members,
            gb(e.encode_bytes_per_s),
            gb(e.memcpy_bytes_per_s),
            e.ratio_to_memcpy,
            gb(e.decode_bytes_per_s),
            e.sent_per_part,
            e.stored_per_part
        );
    }
    println!("\none in-process set (directory levels on tmpfs), one member lost:");
    println!("scheme  N  protect s  partner copies s  rebuild s  partner restore s  rebuild+re-encode s  stored/part");
    for s in &sets {
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
    if !daemons.is_empty() {
        println!(
            "\nnode daemons in this process on 127.0.0.1 (loopback, links not limited), parts of {} MiB:",
            a.daemon_part_mib
        );
        println!("scheme    N  protect s (median)  sent/part  memory/part  restore s (one lost)");
        for d in &daemons {
            println!(
                "{:<8} {:>2}  {:>18.3}  {:>9.2}  {:>11.2}  {:>20.3}",
                d.scheme, d.members, d.protect_s, d.sent_per_part, d.memory_per_part, d.restore_s
            );
        }
    }
    Ok(0)
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
