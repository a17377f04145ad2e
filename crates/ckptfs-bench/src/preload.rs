//! `ckptfs bench preload`: the LD_PRELOAD shim against its baselines, in one run.
//!
//! 1..N worker processes (a small C program compiled at run time, so this crate never
//! links the shim) each: (a) write() a new file through the shim into the store (its
//! second checkpoint: a first one is written and deleted before the timed one);
//! (b) memcpy into pre-faulted shared memory; (c) write() a new file on /dev/shm;
//! (d) read the store file back through the shim (a fresh process: a restart); (g) a
//! fresh process's first checkpoint through the shim; (h) a fresh process's read() of
//! the /dev/shm file of (c) (the restart baseline). Then (e) one process loops
//! open/fstat/close of a non-store file with and without the shim loaded, and (f) one
//! process loops a locked write (fcntl F_SETLKW, pwrite of one block, F_UNLCK) on a
//! store file and on /dev/shm. Then small files (`preload_small.rs`): one process
//! creates, stats, reads back and removes `--small-files` files through the shim and on
//! /dev/shm.
//! Workers start together (each reports its CLOCK_MONOTONIC start and end; the aggregate
//! time is last end - first start); every case is repeated and the median reported.

use crate::report::{machine, median, Measurement, Report};
use crate::store::parse_size;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "preload_small.rs"]
mod small;

/// Arguments of `ckptfs bench preload`.
#[derive(clap::Args, Debug)]
pub struct PreloadBenchArgs {
    /// Largest number of processes (1..N are measured); default: number of CPUs.
    #[arg(long)]
    pub procs: Option<usize>,
    /// Bytes each process writes (K/M/G suffixes).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub file_size: u64,
    /// Size of each write() and memcpy.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub block: u64,
    /// Repetitions of each case (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// open/fstat/close iterations of the pass-through case.
    #[arg(long, default_value_t = 1_000_000)]
    pub passthrough_ops: u64,
    /// Files of the small-file rows (0 skips them): created, written (one write),
    /// closed, stat-ed, read back and removed by one process, through the shim and on
    /// /dev/shm.
    #[arg(long, default_value_t = 20_000)]
    pub small_files: usize,
    /// Size of each file of the small-file rows.
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    pub small_size: u64,
    /// The shim library [default: libckptfs_preload.so next to this binary, then
    /// $CKPTFS_BIN_DIR, $CKPTFS_PRELOAD_LIB].
    #[arg(long, value_name = "FILE")]
    pub preload_lib: Option<PathBuf>,
    /// Skip the huge-page rows (a fresh process's first checkpoint and restart read on a
    /// store whose segment is on a tmpfs mounted with huge=within_size, which the bench
    /// mounts for the run: root only, else the rows are skipped with a note).
    #[arg(long)]
    pub no_huge: bool,
    /// Print a JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The worker: `w PATH SIZE BLOCK` (write a new file, the process's second), `W PATH SIZE
/// BLOCK` (the same as the process's first), `r PATH BLOCK` (read it),
/// `m SIZE BLOCK` (memcpy into pre-faulted shared memory), `p N PATH` (open/fstat/close),
/// `l N PATH BLOCK` (N x: fcntl write lock, pwrite BLOCK at 0, unlock).
/// Prints "ready", waits for the start (see `ready()`), runs, prints "T0 T1".
const WORKER_C: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
/* Print "ready", then wait for the start: spin (yielding) on the shared flag the bench
   names in CKPTFS_BENCH_GO, so that all workers start together; else a byte on stdin. */
static void ready(void) {
    char c;
    printf("ready\n");
    fflush(stdout);
    const char *go = getenv("CKPTFS_BENCH_GO");
    if (go && *go) {
        int fd = open(go, O_RDONLY);
        volatile unsigned *flag = fd < 0 ? MAP_FAILED : mmap(0, 4096, PROT_READ, MAP_SHARED, fd, 0);
        if (flag == MAP_FAILED) exit(3);
        close(fd);
        while (!*flag) sched_yield();
        munmap((void *)flag, 4096);
    } else if (read(0, &c, 1) != 1) {
        exit(3);
    }
}
int main(int argc, char **argv) {
    char m = argv[1][0];
    double t0, t1;
    if (m == 'p') {
        long n = atol(argv[2]);
        struct stat st;
        ready();
        t0 = now();
        for (long i = 0; i < n; i++) {
            int fd = open(argv[3], O_RDONLY);
            if (fd < 0 || fstat(fd, &st) != 0) return 1;
            close(fd);
        }
        t1 = now();
    } else if (m == 'm') {
        size_t size = atoll(argv[2]), block = atoll(argv[3]);
        char *src = malloc(block), *dst = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        memset(src, 7, block);
        memset(dst, 0, size);
        ready();
        t0 = now();
        for (size_t o = 0; o < size; o += block) memcpy(dst + o, src, size - o < block ? size - o : block);
        t1 = now();
    } else if (m == 'w' || m == 'W') {
        size_t size = atoll(argv[3]), block = atoll(argv[4]);
        char *src = malloc(block);
        memset(src, 7, block);
        if (m == 'w') {
        /* Warm-up checkpoint, written and deleted before the barrier: the timed write is
           this process's second checkpoint, the steady state of an application that
           checkpoints repeatedly (same treatment for the store and for /dev/shm). */
        int wfd = open(argv[2], O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (wfd < 0) { perror(argv[2]); return 1; }
        for (size_t o = 0; o < size; o += block) {
            size_t k = size - o < block ? size - o : block;
            if (write(wfd, src, k) != (ssize_t)k) { perror("write"); return 1; }
        }
        if (close(wfd)) return 1;
        unlink(argv[2]);
        } /* 'W': the timed write is this process's first checkpoint. */
        /* CKPTFS_BENCH_INIT_MS: an application's initialisation before its first
           checkpoint (with CKPTFS_WARM the shim warms the store meanwhile). */
        const char *init = getenv("CKPTFS_BENCH_INIT_MS");
        if (m == 'W' && init && *init) usleep(atol(init) * 1000);
        ready();
        t0 = now();
        int fd = open(argv[2], O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (fd < 0) { perror(argv[2]); return 1; }
        for (size_t o = 0; o < size; o += block) {
            size_t k = size - o < block ? size - o : block;
            if (write(fd, src, k) != (ssize_t)k) { perror("write"); return 1; }
        }
        if (close(fd)) return 1;
        t1 = now();
    } else if (m == 'l') {
        long n = atol(argv[2]);
        size_t block = atoll(argv[4]);
        char *src = malloc(block);
        memset(src, 7, block);
        int fd = open(argv[3], O_CREAT | O_RDWR, 0644);
        if (fd < 0) { perror(argv[3]); return 1; }
        struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        struct flock un = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
        if (pwrite(fd, src, block, 0) != (ssize_t)block) { perror("pwrite"); return 1; }
        ready();
        t0 = now();
        for (long i = 0; i < n; i++) {
            if (fcntl(fd, F_SETLKW, &lk) || pwrite(fd, src, block, 0) != (ssize_t)block || fcntl(fd, F_SETLK, &un)) {
                perror("locked write");
                return 1;
            }
        }
        t1 = now();
        if (close(fd)) return 1;
    } else {
        size_t block = atoll(argv[3]);
        char *dst = malloc(block);
        memset(dst, 0, block);
        ready();
        t0 = now();
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0) { perror(argv[2]); return 1; }
        ssize_t k;
        while ((k = read(fd, dst, block)) > 0) {}
        if (k < 0 || close(fd)) return 1;
        t1 = now();
    }
    printf("%.9f %.9f\n", t0, t1);
    return 0;
}
"#;

/// Compile C source `src` into `dir/name`.
fn compile(dir: &Path, name: &str, src: &str) -> Result<PathBuf> {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src)?;
    let out = dir.join(name);
    let st = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&c)
        .status()
        .context("running cc")?;
    if !st.success() {
        bail!("compiling the benchmark worker {name} failed");
    }
    Ok(out)
}

fn find_lib(explicit: Option<&Path>) -> Result<PathBuf> {
    let name = "libckptfs_preload.so";
    let mut c: Vec<PathBuf> = explicit.map(Path::to_path_buf).into_iter().collect();
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        c.push(d.join(name));
    }
    for v in ["CKPTFS_BIN_DIR", "CKPTFS_PRELOAD_LIB"] {
        if let Some(p) = std::env::var_os(v).filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            c.push(if v == "CKPTFS_BIN_DIR" { p.join(name) } else { p });
        }
    }
    c.into_iter()
        .find(|p| p.is_file())
        .with_context(|| format!("{name} not found; build it with `cargo build --release -p ckptfs-preload`"))
}

/// Run the benchmark.
pub fn run(a: PreloadBenchArgs) -> Result<Report> {
    let lib = find_lib(a.preload_lib.as_deref())?;
    let nmax = a
        .procs
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let tmp = tempfile::tempdir()?;
    let worker = compile(tmp.path(), "worker", WORKER_C)?;
    let small_worker = compile(tmp.path(), "small", small::SMALL_C)?;
    let w = worker.display().to_string();
    let store = format!("bench-preload-{}", std::process::id());
    let chunk = 1u64 << 20;
    let mem = (a.file_size.div_ceil(chunk) * chunk) * 2 * nmax as u64
        + (64 << 20)
        + small::store_room(a.small_files, a.small_size).next_multiple_of(chunk);
    let opts = ckptfs_store::StoreOptions {
        mem_size: Some(mem),
        ..ckptfs_store::StoreOptions::named(&store)
    };
    let _ = ckptfs_store::Store::destroy(&store);
    ckptfs_store::Store::create(&opts).context("creating the benchmark store")?;
    struct Destroy(String);
    impl Drop for Destroy {
        fn drop(&mut self) {
            let _ = ckptfs_store::Store::destroy(&self.0);
        }
    }
    let _guard = Destroy(store.clone());
    let shim_env = vec![
        ("LD_PRELOAD".to_string(), lib.display().to_string()),
        ("CKPTFS_STORE".to_string(), store.clone()),
        ("CKPTFS_MOUNT".to_string(), "/ckpt".to_string()),
    ];
    // The huge-page rows: the same store size on a huge-page tmpfs (`shm_dir`).
    let mut notes = Vec::new();
    let huge = if a.no_huge {
        None
    } else {
        // Room for the segment: the data region plus its metadata (inodes: one per 8 KiB).
        match crate::huge::HugeTmpfs::mount(mem + mem / 4 + (256 << 20)) {
            Ok(h) => Some(h),
            Err(why) => {
                notes.push(format!("huge-page rows skipped: {why}"));
                None
            }
        }
    };
    let huge_store = format!("bench-preload-huge-{}", std::process::id());
    let huge_opts = huge.as_ref().map(|h| ckptfs_store::StoreOptions {
        mem_size: Some(mem),
        shm_dir: Some(h.path().to_path_buf()),
        ..ckptfs_store::StoreOptions::named(&huge_store)
    });
    if let Some(o) = &huge_opts {
        let st = ckptfs_store::Store::create(o).context("creating the huge-page benchmark store")?;
        if !st.info().huge_pages.enabled {
            notes.push(format!("huge-page store: {}", st.info().huge_pages.describe()));
        }
    }
    // Its segment goes with its tmpfs (unmounted when `huge` drops).
    let huge_env = huge.as_ref().map(|h| {
        vec![
            ("LD_PRELOAD".to_string(), lib.display().to_string()),
            ("CKPTFS_STORE".to_string(), huge_store.clone()),
            ("CKPTFS_SHM_DIR".to_string(), h.path().display().to_string()),
            ("CKPTFS_MOUNT".to_string(), "/ckpt".to_string()),
        ]
    });
    // A fresh 0700 directory with a random name (mkdtemp): /dev/shm is shared with
    // every user, so a predictable name could be planted first.
    let shm_dir = tempfile::Builder::new()
        .prefix("ckptfs-bench-preload-")
        .tempdir_in("/dev/shm")?;
    let shm = shm_dir.path().to_path_buf();
    let (size, block) = (a.file_size.to_string(), a.block.to_string());
    let mut results = Vec::new();
    for n in 1..=nmax {
        let bytes = a.file_size * n as u64;
        let mut cases: Vec<(&str, Vec<f64>)> = vec![
            ("a shim write", vec![]),
            ("b memcpy shm", vec![]),
            ("c write /dev/shm", vec![]),
            ("d shim read", vec![]),
            ("g shim write, fresh process", vec![]),
            ("h read /dev/shm", vec![]),
            ("i shim write, fresh process, huge pages", vec![]),
            ("j shim read, fresh process, huge pages", vec![]),
            ("k shim write, fresh process, warmed", vec![]),
        ];
        // (k): CKPTFS_WARM=all, and the first checkpoint WARM_INIT_MS after the start.
        let warm_env: Vec<(String, String)> = shim_env
            .iter()
            .cloned()
            .chain([
                ("CKPTFS_WARM".to_string(), "all".to_string()),
                (
                    "CKPTFS_BENCH_INIT_MS".to_string(),
                    crate::store::WARM_INIT_MS.to_string(),
                ),
            ])
            .collect();
        // A fresh process's first checkpoint of /ckpt/gR through the shim, in `env`.
        let first_ckpt = |env: &[(String, String)]| {
            crate::procs::run_commands(
                n,
                &|r| {
                    vec![
                        w.clone(),
                        "W".into(),
                        format!("/ckpt/g{r}"),
                        size.clone(),
                        block.clone(),
                    ]
                },
                env,
            )
        };
        // Interleave the cases so that machine noise hits all of them alike.
        for _ in 0..a.reps {
            let s = crate::procs::run_commands(
                n,
                &|r| {
                    vec![
                        w.clone(),
                        "w".into(),
                        format!("/ckpt/f{r}"),
                        size.clone(),
                        block.clone(),
                    ]
                },
                &shim_env,
            )?;
            cases[0].1.push(s);
            let s = crate::procs::run_commands(
                n,
                &|_| vec![w.clone(), "m".into(), size.clone(), block.clone()],
                &[],
            )?;
            cases[1].1.push(s);
            let s = crate::procs::run_commands(
                n,
                &|r| {
                    vec![
                        w.clone(),
                        "w".into(),
                        shm.join(format!("f{r}")).display().to_string(),
                        size.clone(),
                        block.clone(),
                    ]
                },
                &[],
            )?;
            cases[2].1.push(s);
            // (h) a fresh process read()s the /dev/shm file: the restart baseline.
            let s = crate::procs::run_commands(
                n,
                &|r| {
                    vec![
                        w.clone(),
                        "r".into(),
                        shm.join(format!("f{r}")).display().to_string(),
                        block.clone(),
                    ]
                },
                &[],
            )?;
            cases[5].1.push(s);
            for r in 0..n {
                let _ = std::fs::remove_file(shm.join(format!("f{r}")));
            }
            let s = crate::procs::run_commands(
                n,
                &|r| vec![w.clone(), "r".into(), format!("/ckpt/f{r}"), block.clone()],
                &shim_env,
            )?;
            cases[3].1.push(s);
            // (g) a fresh process's first checkpoint through the shim.
            let s = first_ckpt(&shim_env)?;
            cases[4].1.push(s);
            let sname = store.clone();
            let st = ckptfs_store::Store::attach(&ckptfs_store::StoreOptions::named(&sname))?;
            for r in 0..n {
                let _ = st.unlink(&format!("/g{r}"));
            }
            // (k) the same first checkpoint, warmed while the process initialised.
            let s = first_ckpt(&warm_env)?;
            cases[8].1.push(s);
            for r in 0..n {
                let _ = st.unlink(&format!("/g{r}"));
            }
            // (i), (j) the same first checkpoint, then a fresh process's restart read of
            // it, on the huge-page store.
            if let (Some(env), Some(o)) = (&huge_env, &huge_opts) {
                let s = first_ckpt(env)?;
                cases[6].1.push(s);
                let s = crate::procs::run_commands(
                    n,
                    &|r| vec![w.clone(), "r".into(), format!("/ckpt/g{r}"), block.clone()],
                    env,
                )?;
                cases[7].1.push(s);
                let st = ckptfs_store::Store::attach(o)?;
                for r in 0..n {
                    let _ = st.unlink(&format!("/g{r}"));
                }
            }
        }
        let gbps = |v: &[f64]| bytes as f64 / median(v) / 1e9;
        let (sa, sb, sc) = (gbps(&cases[0].1), gbps(&cases[1].1), gbps(&cases[2].1));
        let (sd, sg, sh) = (gbps(&cases[3].1), gbps(&cases[4].1), gbps(&cases[5].1));
        let sk = gbps(&cases[8].1);
        let huge_rows = !cases[6].1.is_empty();
        let (si, sj) = if huge_rows {
            (gbps(&cases[6].1), gbps(&cases[7].1))
        } else {
            (0.0, 0.0)
        };
        for (i, (name, secs)) in cases.into_iter().enumerate() {
            if secs.is_empty() {
                continue;
            }
            let mut m = Measurement::new(name, n, bytes, secs);
            if i == 0 {
                m = m.with("vs memcpy", sa / sb).with("vs /dev/shm", sa / sc);
            } else if i == 3 {
                m = m.with("vs /dev/shm read", sd / sh);
            } else if i == 4 {
                m = m.with("vs memcpy", sg / sb);
            } else if i == 6 {
                m = m.with("vs memcpy", si / sb);
            } else if i == 7 {
                m = m.with("vs /dev/shm read", sj / sh);
            } else if i == 8 {
                m = m.with("vs memcpy", sk / sb);
            }
            results.push(m);
        }
        if huge_rows {
            notes.push(format!(
                "{n} proc, huge pages (segment on a tmpfs with huge=within_size): a fresh process's first \
                 checkpoint = {:.2}x memcpy (target >= 0.9); its restart read = {:.2}x a fresh read() from /dev/shm \
                 (target >= 1.0)",
                si / sb,
                sj / sh
            ));
        }
        notes.push(format!(
            "{n} proc: a fresh process's first checkpoint = {:.2}x memcpy (target >= 0.9); a fresh process's \
             restart read = {:.2}x a fresh read() from /dev/shm (target >= 1.0)",
            sg / sb,
            sd / sh
        ));
        notes.push(format!(
            "{n} proc: with CKPTFS_WARM=all, the first checkpoint {} ms after the process started (row k) = \
             {:.2}x memcpy",
            crate::store::WARM_INIT_MS,
            sk / sb
        ));
        notes.push(format!(
            "{n} proc: shim write = {:.2}x memcpy (target >= 0.85), {:.2}x /dev/shm write (target >= 2); {}",
            sa / sb,
            sa / sc,
            if sa / sb >= 0.85 && sa / sc >= 2.0 {
                "targets met"
            } else {
                "target missed"
            }
        ));
    }
    if a.small_files > 0 {
        anyhow::ensure!(a.small_size > 0, "--small-size must be positive");
        small::small_rows(
            &small_worker,
            &store,
            &shim_env,
            &shm,
            a.small_files,
            a.small_size,
            a.reps,
            &mut results,
            &mut notes,
        )?;
    }
    // (e) pass-through cost on a non-store path.
    let target = tmp.path().join("plain-file");
    std::fs::write(&target, b"x")?;
    let ops = a.passthrough_ops.to_string();
    let tgt = target.display().to_string();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..a.reps {
        without.push(crate::procs::run_commands(
            1,
            &|_| vec![w.clone(), "p".into(), ops.clone(), tgt.clone()],
            &[],
        )?);
        with.push(crate::procs::run_commands(
            1,
            &|_| vec![w.clone(), "p".into(), ops.clone(), tgt.clone()],
            &shim_env,
        )?);
    }
    let per = |v: &[f64]| median(v) / a.passthrough_ops as f64 * 1e9;
    let overhead = (median(&with) / median(&without) - 1.0) * 100.0;
    results.push(
        Measurement::new("e open/fstat/close, no shim", 1, 0, without.clone()).with("ns/iter", per(&without)),
    );
    results.push(
        Measurement::new("e open/fstat/close, shim", 1, 0, with.clone())
            .with("ns/iter", per(&with))
            .with("overhead %", overhead),
    );
    notes.push(format!(
        "pass-through overhead {overhead:.1} % (target <= 5 %): {}",
        if overhead <= 5.0 { "met" } else { "missed" }
    ));
    // (f) locked writes: lock, write one block, unlock.
    let lops: u64 = 500;
    let (lo, shm_locked) = (lops.to_string(), shm.join("locked").display().to_string());
    let (mut l_shim, mut l_shm) = (Vec::new(), Vec::new());
    for _ in 0..a.reps {
        l_shm.push(crate::procs::run_commands(
            1,
            &|_| {
                vec![
                    w.clone(),
                    "l".into(),
                    lo.clone(),
                    shm_locked.clone(),
                    block.clone(),
                ]
            },
            &[],
        )?);
        l_shim.push(crate::procs::run_commands(
            1,
            &|_| {
                vec![
                    w.clone(),
                    "l".into(),
                    lo.clone(),
                    "/ckpt/locked".into(),
                    block.clone(),
                ]
            },
            &shim_env,
        )?);
    }
    let us = |v: &[f64]| median(v) / lops as f64 * 1e6;
    let ratio = median(&l_shim) / median(&l_shm);
    results.push(
        Measurement::new("f locked write /dev/shm", 1, lops * a.block, l_shm.clone())
            .with("us/iter", us(&l_shm)),
    );
    results.push(
        Measurement::new("f locked write shim", 1, lops * a.block, l_shim.clone())
            .with("us/iter", us(&l_shim))
            .with("vs /dev/shm", 1.0 / ratio),
    );
    notes.push(format!(
        "locked write (F_SETLKW, pwrite {} B, F_UNLCK): shim {:.1} us, /dev/shm {:.1} us per iteration ({:.2}x the time)",
        a.block,
        us(&l_shim),
        us(&l_shm),
        ratio
    ));
    Ok(Report {
        bench: "preload".into(),
        settings: serde_json::json!({
            "procs": nmax, "file_size": a.file_size, "block": a.block, "reps": a.reps,
            "passthrough_ops": a.passthrough_ops, "chunk_size": chunk, "machine": machine(),
            "small_files": a.small_files, "small_size": a.small_size, "store_mem_size": mem,
        }),
        results,
        notes,
    })
}
