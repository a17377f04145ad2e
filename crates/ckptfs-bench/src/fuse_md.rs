//! `ckptfs bench fuse` part (d), metadata rates the way mdtest takes them: `P` worker
//! processes (exec'd `ckptfs bench md-worker`, as MPI ranks are separate processes),
//! each in a directory of its own (mdtest `-u`), create `--md-files` empty files
//! (open(O_CREAT|O_EXCL) + close), stat them and remove them. The phases are separated
//! by barriers; a phase's rate is `P x files / (last end - first start)` over the
//! workers, as mdtest reports it. The directories are made before the first barrier and
//! removed after the last one (untimed).
//!
//! Barrier: the parent sets a flag in shared memory ([`GoFlag`]) to the phase number;
//! workers spin (yielding) until it reaches their next phase, run it, and print
//! `T0 T1` (CLOCK_MONOTONIC seconds). The parent moves on when every worker printed.

use crate::procs::{monotonic, GoFlag};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The phases, in order.
pub(crate) const PHASES: [&str; 3] = ["md-create", "md-stat", "md-remove"];

/// Arguments of the hidden `ckptfs bench md-worker` (one mdtest-like rank).
#[derive(clap::Args, Debug)]
pub struct MdWorkerArgs {
    /// Directory of this worker's files (created, and removed at the end).
    pub dir: PathBuf,
    /// Files to create, stat and remove.
    pub files: usize,
}

/// Body of `ckptfs bench md-worker`: make the directory, print `ready`, then for each
/// phase wait at the barrier, run it and print `T0 T1`; remove the directory.
pub fn worker(a: MdWorkerArgs) -> Result<()> {
    let flag = GoFlag::from_env()?.context("CKPTFS_BENCH_GO is not set (run by `ckptfs bench fuse`)")?;
    std::fs::create_dir(&a.dir).with_context(|| format!("mkdir {}", a.dir.display()))?;
    let names: Vec<PathBuf> = (0..a.files).map(|i| a.dir.join(format!("f{i:06}"))).collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for (k, phase) in PHASES.iter().enumerate() {
        flag.wait_for(k as u32 + 1);
        let t0 = monotonic();
        for p in &names {
            match k {
                0 => drop(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(p)
                        .with_context(|| format!("{phase}: create {}", p.display()))?,
                ),
                1 => {
                    std::fs::metadata(p).with_context(|| format!("{phase}: stat {}", p.display()))?;
                }
                _ => std::fs::remove_file(p).with_context(|| format!("{phase}: remove {}", p.display()))?,
            }
        }
        let t1 = monotonic();
        writeln!(out, "{t0} {t1}")?;
        out.flush()?;
    }
    std::fs::remove_dir(&a.dir).with_context(|| format!("rmdir {}", a.dir.display()))?;
    Ok(())
}

/// One mdtest-like round in `dir` with `procs` workers of `files` files each: seconds of
/// each phase (first start to last end), in [`PHASES`] order.
pub(crate) fn round(dir: &Path, procs: usize, files: usize) -> Result<[f64; 3]> {
    let exe = std::env::current_exe()?;
    let go = GoFlag::file()?;
    let mut kids = Vec::new();
    let reap = |kids: &mut Vec<(std::process::Child, BufReader<std::process::ChildStdout>)>| {
        for (c, _) in kids.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    for rank in 0..procs {
        let mut c = Command::new(&exe);
        c.args(["bench", "md-worker"])
            .arg(dir.join(format!("rank{rank}")))
            .arg(files.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        if let Some((k, v)) = go.env() {
            c.env(k, v);
        }
        let mut child = c.spawn().with_context(|| format!("spawning {}", exe.display()))?;
        let out = BufReader::new(child.stdout.take().context("worker stdout")?);
        kids.push((child, out));
    }
    let mut secs = [0f64; 3];
    for (k, s) in secs.iter_mut().enumerate().map(|(k, s)| (k as u32, s)) {
        if k == 0 {
            for (rank, (_, out)) in kids.iter_mut().enumerate() {
                let mut line = String::new();
                out.read_line(&mut line)?;
                if line.trim() != "ready" {
                    reap(&mut kids);
                    bail!("md worker {rank} did not start: {line:?}");
                }
            }
        }
        go.set(k + 1);
        let (mut t0, mut t1) = (f64::MAX, 0f64);
        for (rank, (_, out)) in kids.iter_mut().enumerate() {
            let mut line = String::new();
            out.read_line(&mut line)?;
            let v: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            if v.len() != 2 {
                reap(&mut kids);
                bail!("md worker {rank} failed in {}: {line:?}", PHASES[k as usize]);
            }
            t0 = t0.min(v[0]);
            t1 = t1.max(v[1]);
        }
        *s = t1 - t0;
    }
    for (rank, (mut c, _)) in kids.into_iter().enumerate() {
        let st = c.wait()?;
        if !st.success() {
            bail!("md worker {rank} failed at the end ({st})");
        }
    }
    Ok(secs)
}
