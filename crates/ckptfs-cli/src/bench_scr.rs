//! `ckptfs bench scr`: the checkpoint bandwidth of an SCR-style MPI program (each rank
//! writes one file per checkpoint, fsyncs, closes, then the checkpoint is completed;
//! `tests/scr-veloc/scr_bench.c`, compiled here with `mpicc`) through ckptfs's
//! `libscr.so`, against the same program's writes into the node store through the
//! preload shim (the target), a plain tmpfs directory and a disk directory, all
//! in one run (issue 34, docs/scr-veloc.md). Each target gets a fresh store.
//!
//! Targets, in the order they run:
//!
//! | row | what |
//! |---|---|
//! | `libscr` | `mpirun prog scr`: libscr stages each routed file in tmpfs and copies it into the store at `SCR_Complete_output` |
//! | `libscr+shim` | `mpirun ckptfs run -- prog scr`: libscr finds the shim in the process and routes files straight into the store |
//! | `shim` | `mpirun ckptfs run -- prog plain /ckpt keep`: the store's own rate through the shim, no dataset; every checkpoint's files kept, as libscr keeps its datasets |
//! | `tmpfs` | `mpirun prog plain DIR` on /dev/shm |
//! | `disk` | `mpirun prog plain DIR` on `--disk-dir` |
//!
//! Not a timed test: it prints the figures and whether libscr reached the shim's rate.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The SCR-style program (`tests/scr-veloc/scr_bench.c`).
const PROGRAM: &str = include_str!("../../../tests/scr-veloc/scr_bench.c");
/// The header it is compiled against.
const SCR_H: &str = include_str!("../../../include/scr.h");

/// `bench scr` options.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// MPI ranks.
    #[arg(long, default_value_t = 4)]
    pub ranks: u32,
    /// MiB each rank writes per checkpoint.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub mib: u64,
    /// Checkpoints per target (best and median are reported).
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Directory on disk for the `disk` row.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp")]
    pub disk_dir: PathBuf,
    /// Directory holding libscr.so and libckptfs_preload.so [default: this binary's].
    #[arg(long, value_name = "DIR")]
    pub lib_dir: Option<PathBuf>,
    /// Prefix of the stores' names (one store per target: PREFIX-1, PREFIX-2, ...)
    /// [default: bench-scr-PID].
    #[arg(long, value_name = "NAME")]
    pub store: Option<String>,
    /// Targets to run (comma-separated): libscr, libscr+shim, shim, tmpfs, disk.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "libscr,libscr+shim,shim,tmpfs,disk"
    )]
    pub only: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// One target's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Target name.
    pub target: String,
    /// Best aggregate GiB/s over the checkpoints.
    pub best: f64,
    /// Median aggregate GiB/s.
    pub median: f64,
}

const TARGETS: [&str; 5] = ["libscr", "libscr+shim", "shim", "tmpfs", "disk"];

/// Runs the benchmark.
pub fn run(a: BenchArgs) -> Result<i32> {
    for t in &a.only {
        if !TARGETS.contains(&t.as_str()) {
            bail!("--only {t}: one of {}", TARGETS.join(", "));
        }
    }
    if a.ranks == 0 || a.mib == 0 || a.reps == 0 {
        bail!("--ranks, --mib and --reps must be at least 1");
    }
    let me = std::env::current_exe().context("this binary's path")?;
    let lib_dir = match &a.lib_dir {
        Some(d) => d.clone(),
        None => me.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    for lib in ["libscr.so", "libckptfs_preload.so"] {
        if !lib_dir.join(lib).exists() {
            bail!(
                "{} missing: cargo build --release -p ckptfs-scr -p ckptfs-preload (or --lib-dir)",
                lib_dir.join(lib).display()
            );
        }
    }
    let work = tempfile::Builder::new()
        .prefix("ckptfs-bench-scr.")
        .tempdir()
        .context("temporary directory")?;
    let prog = build(work.path(), &lib_dir)?;
    // libscr's staging directory on tmpfs, as by default (/dev/shm), but our own.
    let stage = tempfile::Builder::new()
        .prefix("ckptfs-bench-scr-stage.")
        .tempdir_in("/dev/shm")
        .context("a staging directory in /dev/shm")?;
    let base = a
        .store
        .clone()
        .unwrap_or_else(|| format!("bench-scr-{}", std::process::id()));
    let bytes_per_ckpt = a.ranks as u64 * (a.mib << 20);
    // Every checkpoint stays in the store (SCR_FLUSH=0: none is protected on the PFS, so
    // none is evicted): the store holds all of them.
    let mem = bytes_per_ckpt * (a.reps as u64 + 1) + (256 << 20);
    let load = |when: &str| {
        let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        format!(
            "{when}: load {}",
            l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        )
    };
    let mut notes = vec![format!(
        "{} ranks x {} MiB per checkpoint, {} checkpoints per target; {} CPUs",
        a.ranks,
        a.mib,
        a.reps,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    )];
    notes.push(load("start"));
    let mut rows = Vec::new();
    for (i, target) in TARGETS.iter().enumerate() {
        if !a.only.iter().any(|t| t == target) {
            continue;
        }
        let store = format!("{base}-{}", i + 1);
        let run = Target {
            me: &me,
            prog: &prog,
            lib_dir: &lib_dir,
            work: work.path(),
            stage: stage.path(),
            store: &store,
            mem,
            a: &a,
        };
        let r = run.run(target);
        run.destroy();
        let (best, median) = r.with_context(|| format!("target {target}"))?;
        if !a.json {
            eprintln!("bench scr: {target:<12} best {best:.2} GiB/s, median {median:.2} GiB/s");
        }
        rows.push(Row {
            target: target.to_string(),
            best,
            median,
        });
    }
    notes.push(load("end"));
    let verdict = verdict(&rows);
    if a.json {
        let v = serde_json::json!({ "rows": rows, "notes": notes, "verdict": verdict });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print(&rows, &notes, verdict.as_deref());
    }
    Ok(0)
}

/// Whether libscr reached the store's rate through the shim (medians), as text.
fn verdict(rows: &[Row]) -> Option<String> {
    let get = |t: &str| rows.iter().find(|r| r.target == t).map(|r| r.median);
    let shim = get("shim")?;
    let mut out = Vec::new();
    for t in ["libscr", "libscr+shim"] {
        if let Some(v) = get(t) {
            let ratio = v / shim;
            out.push(format!(
                "{t} / shim = {ratio:.2} (target >= 1.0: {})",
                if ratio >= 1.0 { "met" } else { "missed" }
            ));
        }
    }
    (!out.is_empty()).then(|| out.join("; "))
}

fn print(rows: &[Row], notes: &[String], verdict: Option<&str>) {
    let shim = rows.iter().find(|r| r.target == "shim").map(|r| r.median);
    println!(
        "{:<14} {:>12} {:>14} {:>10}",
        "target", "best GiB/s", "median GiB/s", "x shim"
    );
    for r in rows {
        let x = shim.map_or("-".to_string(), |s| format!("{:.2}", r.median / s));
        println!("{:<14} {:>12.2} {:>14.2} {:>10}", r.target, r.best, r.median, x);
    }
    for n in notes {
        println!("note: {n}");
    }
    if let Some(v) = verdict {
        println!("note: {v}");
    }
}

/// Compile the program against libscr with `mpicc` (`$MPICC` overrides it).
fn build(work: &Path, lib_dir: &Path) -> Result<PathBuf> {
    let inc = work.join("include");
    std::fs::create_dir_all(&inc)?;
    std::fs::write(inc.join("scr.h"), SCR_H)?;
    let src = work.join("scr_bench.c");
    std::fs::write(&src, PROGRAM)?;
    let out = work.join("scr_bench");
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    let st = Command::new(&mpicc)
        .arg("-O2")
        .arg("-I")
        .arg(&inc)
        .arg(&src)
        .arg("-L")
        .arg(lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-lscr", "-o"])
        .arg(&out)
        .status()
        .with_context(|| format!("{mpicc} (Open MPI: scripts/setup-scr.sh)"))?;
    if !st.success() {
        bail!("{mpicc} failed to build the SCR-style program");
    }
    Ok(out)
}

/// One target's run.
struct Target<'a> {
    me: &'a Path,
    prog: &'a Path,
    lib_dir: &'a Path,
    work: &'a Path,
    stage: &'a Path,
    store: &'a str,
    mem: u64,
    a: &'a BenchArgs,
}

impl Target<'_> {
    fn mpirun(&self) -> Command {
        let mut c = Command::new(std::env::var("MPIRUN").unwrap_or_else(|_| "mpirun".into()));
        c.args(["--oversubscribe", "-np"]).arg(self.a.ranks.to_string());
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid == 0 {
            c.arg("--allow-run-as-root");
        }
        c.env("CKPTFS_STORE", self.store)
            .env("CKPTFS_MEM_SIZE", format!("{}M", self.mem >> 20))
            .env("CKPTFS_JOB", self.store)
            .env("CKPTFS_STAGE_DIR", self.stage)
            .env("SCR_FLUSH", "0")
            .env("CKPTFS_PRELOAD_LIB", self.lib_dir.join("libckptfs_preload.so"))
            .env_remove("CKPTFS_CLUSTER")
            .env_remove("CKPTFS_NODE_ID")
            .env_remove("CKPTFS_MOUNT");
        c
    }

    /// `(best, median)` GiB/s of the target.
    fn run(&self, target: &str) -> Result<(f64, f64)> {
        let mib = self.a.mib.to_string();
        let reps = self.a.reps.to_string();
        let prefix = self.work.join(format!("prefix-{}", self.store));
        std::fs::create_dir_all(&prefix)?;
        let mut c = self.mpirun();
        c.current_dir(&prefix);
        let shim = |c: &mut Command| {
            c.arg(self.me).args(["run", "--"]);
        };
        let mut dirs = Vec::new();
        match target {
            "libscr" => {
                c.arg(self.prog).args(["scr", &mib, &reps]);
            }
            "libscr+shim" => {
                shim(&mut c);
                c.arg(self.prog).args(["scr", &mib, &reps]);
            }
            "shim" => {
                shim(&mut c);
                // Every checkpoint kept, as libscr's datasets are (SCR_FLUSH=0): each
                // one lands in store memory not written before, as libscr's do.
                c.arg(self.prog).args(["plain", &mib, &reps, "/ckpt", "keep"]);
            }
            "tmpfs" | "disk" => {
                let base = if target == "tmpfs" {
                    PathBuf::from("/dev/shm")
                } else {
                    self.a.disk_dir.clone()
                };
                let d = tempfile::Builder::new()
                    .prefix("ckptfs-bench-scr.")
                    .tempdir_in(&base)
                    .with_context(|| format!("a directory in {}", base.display()))?;
                c.arg(self.prog).args(["plain", &mib, &reps]).arg(d.path());
                dirs.push(d);
            }
            _ => bail!("unknown target {target}"),
        }
        let out = c.output().context("mpirun (Open MPI: scripts/setup-scr.sh)")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "the program failed ({}): {}{}",
                out.status,
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        parse(&text).with_context(|| format!("no figures in the program's output: {}", text.trim()))
    }

    fn destroy(&self) {
        let _ = Command::new(self.me)
            .args(["--store", self.store, "destroy"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// `best=X GiB/s median=Y GiB/s` from the program's line (an `ERRORS` mark fails).
fn parse(text: &str) -> Result<(f64, f64)> {
    let line = text
        .lines()
        .find(|l| l.contains("best="))
        .context("no result line")?;
    if line.contains("ERRORS") {
        bail!("the program reported errors: {line}");
    }
    let field = |k: &str| -> Result<f64> {
        let rest = line.split(k).nth(1).with_context(|| format!("no {k}"))?;
        let v = rest.split_whitespace().next().unwrap_or_default();
        v.parse::<f64>().with_context(|| format!("{k}{v}"))
    };
    Ok((field("best=")?, field("median=")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_programs_line() {
        let l = "scr      libscr ranks=4 MiB/rank=64 best=1.03 GiB/s median=0.98 GiB/s\n";
        assert_eq!(parse(l).unwrap(), (1.03, 0.98));
        assert!(parse("plain /x ranks=4 MiB/rank=64 best=1.0 GiB/s median=0.9 GiB/s ERRORS").is_err());
        assert!(parse("nothing").is_err());
    }

    #[test]
    fn verdict_compares_medians_with_the_shim() {
        let r = |t: &str, m: f64| Row {
            target: t.into(),
            best: m,
            median: m,
        };
        let v = verdict(&[r("libscr", 1.0), r("libscr+shim", 2.2), r("shim", 2.0)]).unwrap();
        assert!(v.contains("libscr / shim = 0.50 (target >= 1.0: missed)"), "{v}");
        assert!(
            v.contains("libscr+shim / shim = 1.10 (target >= 1.0: met)"),
            "{v}"
        );
        assert!(verdict(&[r("libscr", 1.0)]).is_none());
    }
}
