//! Run a closure in N forked worker processes that start together.
//!
//! Workers wait on a pipe barrier, run, and write their (start, end) CLOCK_MONOTONIC
//! times to a result pipe. The parent must be single-threaded when it forks.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

fn mono() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Run `prep(rank)` (untimed) and then, after a common barrier, `work(rank, prepared)` in
/// `n` processes at once; returns the aggregate wall time from the first start to the
/// last end. Either returning Err makes the run fail.
pub fn run_parallel<T>(
    n: usize,
    prep: &dyn Fn(usize) -> Result<T>,
    work: &dyn Fn(usize, T) -> Result<()>,
) -> Result<f64> {
    let mut go = [0i32; 2];
    let mut res = [0i32; 2];
    let mut ready = [0i32; 2];
    // SAFETY: pipe writes two fds into the arrays.
    if unsafe { libc::pipe(go.as_mut_ptr()) } != 0
        // SAFETY: as above.
        || unsafe { libc::pipe(res.as_mut_ptr()) } != 0
        // SAFETY: as above.
        || unsafe { libc::pipe(ready.as_mut_ptr()) } != 0
    {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    let mut pids = Vec::new();
    for rank in 0..n {
        // SAFETY: the benchmark process is single-threaded at this point; the child only
        // runs `work` and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            let mut b = [0u8; 1];
            // SAFETY: reading one byte from our pipe; writing 16 bytes from a local array.
            unsafe {
                libc::close(go[1]);
                let prepared = prep(rank).map_err(|e| eprintln!("worker {rank}: {e:#}"));
                libc::write(ready[1], b.as_ptr() as *const libc::c_void, 1);
                libc::read(go[0], b.as_mut_ptr() as *mut libc::c_void, 1);
                let t0 = mono();
                let ok = match prepared {
                    Ok(p) => work(rank, p)
                        .map_err(|e| eprintln!("worker {rank}: {e:#}"))
                        .is_ok(),
                    Err(()) => false,
                };
                let t1 = mono();
                let rec: [f64; 2] = [t0, if ok { t1 } else { -1.0 }];
                libc::write(res[1], rec.as_ptr() as *const libc::c_void, 16);
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        pids.push(pid);
    }
    // SAFETY: closing our copies of the pipe ends we do not use; writing the go bytes.
    unsafe {
        libc::close(go[0]);
        libc::close(res[1]);
        libc::close(ready[1]);
        // Release the workers only when all have finished their untimed preparation.
        let mut got = 0;
        let mut buf = vec![0u8; n];
        while got < n {
            let r = libc::read(ready[0], buf.as_mut_ptr() as *mut libc::c_void, n - got);
            if r <= 0 {
                break;
            }
            got += r as usize;
        }
        libc::close(ready[0]);
        std::thread::sleep(Duration::from_millis(5));
        let bytes = vec![1u8; n];
        libc::write(go[1], bytes.as_ptr() as *const libc::c_void, n);
        libc::close(go[1]);
    }
    let (mut first, mut last, mut failed) = (f64::MAX, 0f64, false);
    for _ in 0..n {
        let mut rec = [0f64; 2];
        // SAFETY: reading 16 bytes into a local array.
        let r = unsafe { libc::read(res[0], rec.as_mut_ptr() as *mut libc::c_void, 16) };
        if r != 16 {
            failed = true;
            break;
        }
        first = first.min(rec[0]);
        if rec[1] < 0.0 {
            failed = true;
        }
        last = last.max(rec[1]);
    }
    // SAFETY: closing our fd; reaping our children.
    unsafe { libc::close(res[0]) };
    for pid in pids {
        let mut st = 0;
        // SAFETY: waiting for a child we forked.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        if !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0) {
            failed = true;
        }
    }
    if failed {
        bail!("a worker process failed");
    }
    Ok(last - first)
}

/// Run the same worker command in `n` exec'd processes released together. Each worker
/// prints `ready`, waits for a byte on stdin, runs, and prints `T0 T1` (CLOCK_MONOTONIC
/// seconds). Returns the aggregate seconds (last end - first start).
pub fn run_commands(n: usize, argv: &dyn Fn(usize) -> Vec<String>, env: &[(String, String)]) -> Result<f64> {
    let mut kids = Vec::new();
    for rank in 0..n {
        let a = argv(rank);
        let mut c = Command::new(&a[0]);
        c.args(&a[1..]).stdin(Stdio::piped()).stdout(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().with_context(|| format!("spawning {}", a[0]))?;
        let mut out = BufReader::new(child.stdout.take().context("worker stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("worker {rank} did not start: {line:?}");
        }
        kids.push((child, out));
    }
    for (c, _) in kids.iter_mut() {
        c.stdin.as_mut().context("worker stdin")?.write_all(b"g")?;
    }
    let (mut t0, mut t1) = (f64::MAX, 0f64);
    for (mut c, mut out) in kids {
        let mut line = String::new();
        out.read_line(&mut line)?;
        let st = c.wait()?;
        let v: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if !st.success() || v.len() != 2 {
            bail!("worker failed ({st}): {line:?}");
        }
        t0 = t0.min(v[0]);
        t1 = t1.max(v[1]);
    }
    Ok(t1 - t0)
}

/// Monotonic clock in seconds (the same clock in every process).
pub fn monotonic() -> f64 {
    mono()
}
