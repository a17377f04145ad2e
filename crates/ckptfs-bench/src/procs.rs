//! Run a closure in N forked worker processes that start together.
//!
//! Workers wait at a spinning barrier (a flag in shared memory, polled with
//! `sched_yield`, as MPI barriers spin), run, and write their (start, end)
//! CLOCK_MONOTONIC times to a result pipe. The parent must be single-threaded when it
//! forks. A blocking barrier (a byte on a pipe) is not used: on the 2 vCPU VM of round
//! 2 a worker released that way started up to 44 ms after the first, and that skew,
//! not the system under test, decided the aggregate time of 2-process rows (baselines
//! and ckptfs alike; benchmarks.md, "Round 2 session 5").

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// A release flag in shared memory: one page of a file (for exec'd workers, named by
/// `CKPTFS_BENCH_GO`) or of an anonymous shared mapping (for forked workers).
pub struct GoFlag {
    ptr: *mut u32,
    file: Option<tempfile::NamedTempFile>,
}

impl GoFlag {
    fn map(fd: i32) -> Result<*mut u32> {
        let flags = if fd < 0 {
            libc::MAP_SHARED | libc::MAP_ANONYMOUS
        } else {
            libc::MAP_SHARED
        };
        // SAFETY: a fresh 4 KiB shared mapping; checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!("mmap of the start flag: {}", std::io::Error::last_os_error());
        }
        Ok(p as *mut u32)
    }

    /// A flag shared with processes forked after this call.
    pub fn anonymous() -> Result<GoFlag> {
        Ok(GoFlag {
            ptr: Self::map(-1)?,
            file: None,
        })
    }

    /// A flag in a temporary file, for exec'd workers (see [`GoFlag::env`]).
    pub fn file() -> Result<GoFlag> {
        use std::os::fd::AsRawFd;
        let file = tempfile::Builder::new().prefix("ckptfs-bench-go-").tempfile()?;
        file.as_file().set_len(4096)?;
        Ok(GoFlag {
            ptr: Self::map(file.as_file().as_raw_fd())?,
            file: Some(file),
        })
    }

    /// The environment variable that tells an exec'd worker where the flag is.
    pub fn env(&self) -> Option<(String, String)> {
        self.file
            .as_ref()
            .map(|f| ("CKPTFS_BENCH_GO".to_string(), f.path().display().to_string()))
    }

    fn word(&self) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: ptr is our live 4 KiB shared mapping, unmapped only when self is
        // dropped, which the returned borrow cannot outlive; used only atomically.
        unsafe { &*(self.ptr as *const std::sync::atomic::AtomicU32) }
    }

    /// Release every worker waiting on the flag.
    pub fn release(&self) {
        self.word().store(1, std::sync::atomic::Ordering::Release);
    }

    /// Set the flag to `v` (a phase number for [`GoFlag::wait_for`]).
    pub fn set(&self, v: u32) {
        self.word().store(v, std::sync::atomic::Ordering::Release);
    }

    /// Spin (yielding) until the flag is at least `v`.
    pub fn wait_for(&self, v: u32) {
        while self.word().load(std::sync::atomic::Ordering::Acquire) < v {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }

    /// In an exec'd worker: the flag named by `CKPTFS_BENCH_GO`, if set.
    pub fn from_env() -> Result<Option<GoFlag>> {
        use std::os::fd::AsRawFd;
        let Some(p) = std::env::var_os("CKPTFS_BENCH_GO").filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&p)?;
        Ok(Some(GoFlag {
            ptr: GoFlag::map(f.as_raw_fd())?,
            file: None,
        }))
    }

    /// Spin (yielding) until released.
    pub fn wait(&self) {
        while self.word().load(std::sync::atomic::Ordering::Acquire) == 0 {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

impl Drop for GoFlag {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, 4096) };
    }
}

/// In an exec'd worker that printed `ready`: wait for the start, at the flag named by
/// `CKPTFS_BENCH_GO` if set, else for a byte on stdin.
pub fn wait_for_go() -> Result<()> {
    match GoFlag::from_env()? {
        Some(flag) => flag.wait(),
        None => {
            use std::io::Read;
            let mut go = [0u8; 1];
            std::io::stdin().read_exact(&mut go)?;
        }
    }
    Ok(())
}

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
    let go = GoFlag::anonymous()?;
    let mut res = [0i32; 2];
    let mut ready = [0i32; 2];
    // SAFETY: pipe writes two fds into the arrays.
    if unsafe { libc::pipe(res.as_mut_ptr()) } != 0
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
            let b = [0u8; 1];
            // SAFETY: writing one byte and 16 bytes from local arrays to our pipes.
            unsafe {
                let prepared = prep(rank).map_err(|e| eprintln!("worker {rank}: {e:#}"));
                libc::write(ready[1], b.as_ptr() as *const libc::c_void, 1);
                go.wait();
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
    // SAFETY: closing our copies of the pipe ends we do not use; reading the ready bytes.
    unsafe {
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
    }
    go.release();
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
/// prints `ready`, waits for the start ([`wait_for_go`]: the flag named by
/// `CKPTFS_BENCH_GO`, or a byte on stdin, both given), runs, and prints `T0 T1` (CLOCK_MONOTONIC
/// seconds). Returns the aggregate seconds (last end - first start).
pub fn run_commands(n: usize, argv: &dyn Fn(usize) -> Vec<String>, env: &[(String, String)]) -> Result<f64> {
    let go = GoFlag::file()?;
    let mut kids = Vec::new();
    for rank in 0..n {
        let a = argv(rank);
        let mut c = Command::new(&a[0]);
        c.args(&a[1..]).stdin(Stdio::piped()).stdout(Stdio::piped());
        for (k, v) in env.iter().cloned().chain(go.env()) {
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
    go.release();
    // Workers that wait on stdin instead of the flag.
    for (c, _) in kids.iter_mut() {
        let _ = c.stdin.as_mut().context("worker stdin")?.write_all(b"g");
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
