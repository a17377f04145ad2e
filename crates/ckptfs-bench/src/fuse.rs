//! `ckptfs bench fuse`: the FUSE mounts measured against their baselines in one run.
//!
//! - (a) `crfs-raw`: CRFS aggregation throughput with a sink that discards the chunks
//!   (CRFS figure 5): writer threads each write `--raw-per-writer` bytes in
//!   `--raw-write` calls through the mount, for every pool x chunk size.
//! - (b) `ckpt-direct` vs `ckpt-crfs`: the checkpoint write profile of CRFS table I
//!   (half the writes under 64 bytes, a third 4-16 KiB, a few over 1 MiB carrying most
//!   bytes; about 24 MiB per process) from N forked processes, written straight to the
//!   backend directory or through a CRFS mount of it; every file fsynced and closed.
//! - (c) 1 MiB writes (`dd bs=1M`) into the node store through the mount (direct-I/O
//!   and page-cache opens), through the preload shim (if `libckptfs_preload.so` is
//!   built), and to /dev/shm.
//!
//! - (d) the store mount next to tmpfs: sequential 1 MiB write and read, and
//!   mdtest-like create/stat/remove rates (the private `fuse_store` module).
//!
//! The FUSE servers run in this process (fuser background sessions); writers of (b)
//! are forked children that only make raw system calls, (c) runs `dd`.

pub use crate::fuse_args::BenchArgs;
use crate::report::{machine, Measurement, Report};
use anyhow::{bail, Context, Result};
use ckptfs_fuse::crfs::{CrfsConfig, CrfsFs, DiscardSink, FileSink};
use ckptfs_fuse::{mount, IoMode, StoreFs};
use ckptfs_store::{Store, StoreOptions};
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

fn fmt_size(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else {
        format!("{}K", b >> 10)
    }
}

/// Run the selected parts.
pub fn run(a: BenchArgs) -> Result<Report> {
    let mut results = Vec::new();
    let mut notes = Vec::new();
    let want = |p: &str| a.parts.iter().any(|x| x == p);
    if want("a") {
        part_a(&a, &mut results, &mut notes)?;
    }
    if want("b") {
        part_b(&a, &mut results, &mut notes)?;
    }
    if want("c") {
        part_c(&a, &mut results, &mut notes)?;
    }
    if want("d") {
        crate::fuse_store::part_d(&a, &mut results, &mut notes)?;
    }
    Ok(Report {
        bench: "fuse".into(),
        settings: serde_json::json!({
            "machine": machine(),
            "reps": a.reps,
            "raw_writers": a.raw_writers,
            "raw_per_writer": a.raw_per_writer,
            "raw_write": a.raw_write,
            "procs": a.procs,
            "backend_dir": a.backend_dir,
            "store_bytes": a.store_bytes,
            "seq_bytes": a.seq_bytes,
            "md_files": a.md_files,
            "md_procs": a.md_procs,
            "io_uring_spin_us": a.io_uring_spin_us,
            "fuse_threads_crfs": 4,
            "fuse_threads_store": ckptfs_fuse::mount::STORE_THREADS,
            "max_write": ckptfs_fuse::MAX_WRITE,
            "cache_ttl_s": ckptfs_fuse::CacheConfig::DEFAULT.ttl.as_secs_f64(),
            "cache_poll_ms": ckptfs_fuse::CacheConfig::DEFAULT.poll.as_millis() as u64,
        }),
        results,
        notes,
    })
}

fn tempdir_in(base: &Path, tag: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("ckptfs-bench-fuse-{tag}-"))
        .tempdir_in(base)
        .with_context(|| format!("temporary directory in {}", base.display()))
}

fn part_a(a: &BenchArgs, out: &mut Vec<Measurement>, notes: &mut Vec<String>) -> Result<()> {
    let tmp = tempdir_in(&std::env::temp_dir(), "raw")?;
    let (be, mp) = (tmp.path().join("backend"), tmp.path().join("mnt"));
    std::fs::create_dir(&be)?;
    std::fs::create_dir(&mp)?;
    let block = vec![0x5au8; a.raw_write as usize];
    let bytes = a.raw_per_writer * a.raw_writers as u64;
    let mut best = 0f64;
    for &pool in &a.pools {
        for &chunk in &a.chunks {
            if chunk > pool {
                continue;
            }
            let cfg = CrfsConfig {
                backend: be.clone(),
                pool_size: pool as usize,
                chunk_size: chunk as usize,
                io_threads: 4,
            };
            let fs = CrfsFs::with_sink(cfg, IoMode::Auto, Arc::new(DiscardSink))?;
            let session = mount::spawn(fs, &mp, "crfs:bench", 4).context("mount CRFS")?;
            let mut secs = Vec::new();
            for _ in 0..a.reps {
                let t0 = Instant::now();
                std::thread::scope(|s| -> Result<()> {
                    let hs: Vec<_> = (0..a.raw_writers)
                        .map(|w| {
                            let (p, block) = (mp.join(format!("w{w}")), &block);
                            s.spawn(move || -> std::io::Result<()> {
                                let mut f = std::fs::File::create(p)?;
                                let mut left = a.raw_per_writer;
                                while left > 0 {
                                    let k = left.min(block.len() as u64) as usize;
                                    f.write_all(&block[..k])?;
                                    left -= k as u64;
                                }
                                Ok(())
                            })
                        })
                        .collect();
                    for h in hs {
                        h.join().expect("writer panicked")?;
                    }
                    Ok(())
                })?;
                secs.push(t0.elapsed().as_secs_f64());
            }
            mount::unmount_spawned(session, &mp).context("unmount")?;
            let m = Measurement::new("crfs-raw", a.raw_writers, bytes, secs)
                .with("pool", fmt_size(pool))
                .with("chunk", fmt_size(chunk));
            best = best.max(m.gbps());
            out.push(m);
        }
    }
    notes.push(format!(
        "(a) best raw aggregation {best:.2} GB/s (target >= 1 GB/s: {})",
        if best >= 1.0 { "met" } else { "NOT met" }
    ));
    Ok(())
}

/// CRFS table I as (share of writes in %, smallest, largest) per size class.
const TABLE_I: &[(f64, usize, usize)] = &[
    (50.86, 1, 64),
    (0.61, 64, 256),
    (0.25, 256, 1 << 10),
    (9.46, 1 << 10, 4 << 10),
    (36.49, 4 << 10, 16 << 10),
    (0.74, 16 << 10, 64 << 10),
    (0.49, 64 << 10, 256 << 10),
    (0.25, 256 << 10, 512 << 10),
    (0.61, 512 << 10, 1 << 20),
    (0.25, 4 << 20, 8 << 20),
];

/// The write sizes of one process's checkpoint: 1000 writes shaped like table I, in a
/// deterministic shuffled order.
pub fn profile_sizes(rank: usize) -> Vec<usize> {
    let mut x = 0x2545_F491_4F6C_DD1Du64 ^ (rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut v = Vec::new();
    for &(pct, lo, hi) in TABLE_I {
        let n = ((pct * 10.0).round() as usize).max(2);
        for _ in 0..n {
            v.push(lo + (rnd() as usize) % (hi - lo));
        }
    }
    for i in (1..v.len()).rev() {
        let j = (rnd() as usize) % (i + 1);
        v.swap(i, j);
    }
    v
}

/// Fork `paths.len()` children that each write `sizes[rank]` from `buf`, fsync and close;
/// returns wall seconds from the first fork to the last exit.
fn run_writers(paths: &[CString], sizes: &[Vec<usize>], buf: &[u8]) -> Result<f64> {
    let t0 = Instant::now();
    let mut pids = Vec::new();
    for (rank, path) in paths.iter().enumerate() {
        // SAFETY: the child only makes raw system calls on data prepared before the
        // fork (no allocation, no locks) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: as above; every pointer refers to memory inherited from the parent.
            unsafe {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                    0o644,
                );
                if fd < 0 {
                    libc::_exit(2);
                }
                for &s in &sizes[rank] {
                    let mut done = 0;
                    while done < s {
                        let n = libc::write(fd, buf.as_ptr().add(done).cast(), s - done);
                        if n <= 0 {
                            libc::_exit(3);
                        }
                        done += n as usize;
                    }
                }
                if libc::fsync(fd) != 0 || libc::close(fd) != 0 {
                    libc::_exit(4);
                }
                libc::_exit(0);
            }
        }
        pids.push(pid);
    }
    let mut failed = 0;
    for pid in pids {
        let mut st = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        if !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0) {
            failed += 1;
        }
    }
    if failed > 0 {
        bail!("{failed} writer process(es) failed");
    }
    Ok(t0.elapsed().as_secs_f64())
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

fn sync_all() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
}

fn part_b(a: &BenchArgs, out: &mut Vec<Measurement>, notes: &mut Vec<String>) -> Result<()> {
    let tmp = tempdir_in(&a.backend_dir, "ckpt")?;
    let (direct, be, mp) = (
        tmp.path().join("direct"),
        tmp.path().join("backend"),
        tmp.path().join("mnt"),
    );
    for d in [&direct, &be, &mp] {
        std::fs::create_dir(d)?;
    }
    let (be_wb, mp_wb) = (tmp.path().join("backend-wb"), tmp.path().join("mnt-wb"));
    std::fs::create_dir(&be_wb)?;
    std::fs::create_dir(&mp_wb)?;
    let fs = CrfsFs::with_sink(CrfsConfig::new(&be), IoMode::Auto, Arc::new(FileSink))?;
    let session = mount::spawn(fs, &mp, "crfs:bench", 4).context("mount CRFS")?;
    let fs = CrfsFs::with_sink(CrfsConfig::new(&be_wb), IoMode::Writeback, Arc::new(FileSink))?;
    let session_wb = mount::spawn(fs, &mp_wb, "crfs:bench", 4).context("mount CRFS")?;
    // The same mount with chunks discarded: what FUSE and aggregation cost alone.
    let (be_null, mp_null) = (tmp.path().join("backend-null"), tmp.path().join("mnt-null"));
    std::fs::create_dir(&be_null)?;
    std::fs::create_dir(&mp_null)?;
    let fs = CrfsFs::with_sink(CrfsConfig::new(&be_null), IoMode::Auto, Arc::new(DiscardSink))?;
    let session_null = mount::spawn(fs, &mp_null, "crfs:bench", 4).context("mount CRFS")?;
    let maxn = a.procs.iter().copied().max().unwrap_or(1);
    let sizes: Vec<Vec<usize>> = (0..maxn).map(profile_sizes).collect();
    let biggest = sizes.iter().flatten().copied().max().unwrap_or(1);
    let buf: Vec<u8> = (0..biggest).map(|i| (i * 31 % 251) as u8).collect();
    let mut ratios = Vec::new();
    for &n in &a.procs {
        let bytes: u64 = sizes[..n].iter().flatten().map(|&s| s as u64).sum();
        let writes: usize = sizes[..n].iter().map(Vec::len).sum();
        let mut pair = Vec::new();
        for (case, dir) in [
            ("ckpt-direct", &direct),
            ("ckpt-crfs", &mp),
            ("ckpt-crfs-writeback", &mp_wb),
            ("ckpt-crfs-discard", &mp_null),
        ] {
            let paths: Vec<CString> = (0..n).map(|r| cpath(&dir.join(format!("rank{r}")))).collect();
            let mut secs = Vec::new();
            for _ in 0..a.reps {
                for r in 0..n {
                    let _ = std::fs::remove_file(dir.join(format!("rank{r}")));
                }
                sync_all();
                secs.push(run_writers(&paths, &sizes[..n], &buf)?);
            }
            let m = Measurement::new(case, n, bytes, secs).with("writes", writes as u64);
            pair.push(m.median_s());
            out.push(m);
        }
        let k = out.len();
        for (i, m) in out[k - 3..].iter_mut().enumerate() {
            let speedup = pair[0] / pair[i + 1];
            m.extra.insert(
                "speedup_vs_direct".into(),
                serde_json::json!((speedup * 100.0).round() / 100.0),
            );
        }
        ratios.push((n, pair[0] / pair[1], pair[0] / pair[2]));
    }
    mount::unmount_spawned(session, &mp).context("unmount")?;
    mount::unmount_spawned(session_wb, &mp_wb).context("unmount")?;
    mount::unmount_spawned(session_null, &mp_null).context("unmount")?;
    let faster: Vec<String> = ratios
        .iter()
        .filter(|(n, _, _)| *n >= 4)
        .map(|(n, r, w)| format!("N={n}: {r:.2}x ({w:.2}x with the writeback cache)"))
        .collect();
    notes.push(format!(
        "(b) CRFS vs direct (time direct / time CRFS) for N >= 4: {}",
        if faster.is_empty() {
            "not measured".into()
        } else {
            faster.join(", ")
        }
    ));
    Ok(())
}

fn dd(of: &Path, bytes: u64, env: &[(&str, &std::ffi::OsStr)]) -> Result<f64> {
    let mut cmd = Command::new("dd");
    cmd.arg("if=/dev/zero")
        .arg(format!("of={}", of.display()))
        .arg("bs=1M")
        .arg(format!("count={}", bytes >> 20))
        .arg("status=none");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let o = cmd.output().context("run dd")?;
    let s = t0.elapsed().as_secs_f64();
    if !o.status.success() {
        bail!(
            "dd of={} failed: {}",
            of.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(s)
}

fn preload_library() -> Option<PathBuf> {
    let dirs = [
        std::env::var_os("CKPTFS_BIN_DIR").map(PathBuf::from),
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf)),
    ];
    dirs.into_iter()
        .flatten()
        .map(|d| d.join("libckptfs_preload.so"))
        .find(|p| p.exists())
}

fn part_c(a: &BenchArgs, out: &mut Vec<Measurement>, notes: &mut Vec<String>) -> Result<()> {
    let bytes = a.store_bytes & !((1 << 20) - 1);
    let name = format!("bench-fuse-{}", std::process::id());
    let mut opts = StoreOptions::named(&name);
    opts.mem_size = Some(bytes + (64 << 20));
    opts.chunk_size = Some(1 << 20);
    let store = Store::create(&opts).context("create the benchmark store")?;
    struct Destroy(String);
    impl Drop for Destroy {
        fn drop(&mut self) {
            let _ = Store::destroy(&self.0);
        }
    }
    let _destroy = Destroy(name.clone());
    let tmp = tempdir_in(&std::env::temp_dir(), "store")?;
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp)?;
    let mut table = Vec::new();

    // In a fresh 0700 directory with a random name: /dev/shm is shared with every user.
    let shm_dir = tempdir_in(Path::new("/dev/shm"), "devshm")?;
    let shm = shm_dir.path().join("dd");
    let mut secs = Vec::new();
    for _ in 0..a.reps {
        let _ = std::fs::remove_file(&shm);
        secs.push(dd(&shm, bytes, &[])?);
    }
    let _ = std::fs::remove_file(&shm);
    table.push(Measurement::new("devshm-dd", 1, bytes, secs));

    for (case, io) in [
        ("mount-direct-dd", IoMode::Auto),
        ("mount-cached-dd", IoMode::Cached),
    ] {
        let session = mount::spawn_store(StoreFs::new(store.clone(), io), &mp, &format!("ckptfs:{name}"), 0)
            .context("mount")?;
        let mut secs = Vec::new();
        for _ in 0..a.reps {
            let _ = std::fs::remove_file(mp.join("f"));
            secs.push(dd(&mp.join("f"), bytes, &[])?);
        }
        let _ = std::fs::remove_file(mp.join("f"));
        session.unmount(&mp).context("unmount")?;
        table.push(Measurement::new(case, 1, bytes, secs));
    }

    match preload_library() {
        Some(lib) => {
            let prefix = PathBuf::from("/ckptfs-bench-fuse");
            let mut secs = Vec::new();
            for _ in 0..a.reps {
                let _ = store.unlink("/f");
                secs.push(dd(
                    &prefix.join("f"),
                    bytes,
                    &[
                        ("LD_PRELOAD", lib.as_os_str()),
                        ("CKPTFS_STORE", name.as_ref()),
                        ("CKPTFS_MOUNT", prefix.as_os_str()),
                    ],
                )?);
            }
            let _ = store.unlink("/f");
            table.push(Measurement::new("preload-dd", 1, bytes, secs));
        }
        None => notes.push("(c) preload shim not built (libckptfs_preload.so): its row is missing".into()),
    }
    let base = table[0].median_s();
    for m in table {
        let r = base / m.median_s();
        out.push(m.with("vs_devshm", (r * 100.0).round() / 100.0));
    }
    Ok(())
}
