//! `ckptfs bench fuse` part (d): the store mount next to tmpfs in the same run.
//!
//! - `seq-write` / `seq-read`: one file of `--seq-bytes` written and then read back in
//!   1 MiB `write()`/`read()` calls (IOR file-per-process style, one process), in a
//!   /dev/shm directory (tmpfs) and through a store mount (`--io-mode auto`: the
//!   write-only open uses direct I/O, the read-only one the page cache with read-ahead;
//!   the page cache of the file just written with direct I/O is empty).
//! - `md-create` / `md-stat` / `md-remove`: mdtest-like rates on `--md-files` empty
//!   files per process (open(O_CREAT|O_EXCL)+close, stat, unlink) for each process
//!   count of `--md-procs` (worker processes, each in its own directory: see
//!   [`crate::fuse_md`]); through the default mount (kernel attribute/entry caching invalidated by the
//!   store's change counter) and again with caching off (`store-mount-ttl0-*`).
//! - When the kernel offers FUSE-over-io-uring (`enable_uring`), the default mount uses
//!   it, and every case runs once more with requests through `/dev/fuse` only
//!   (`store-mount-devfuse-*`): the two transports side by side.
//!
//! Each case runs `--reps` times; the median is reported with the ratio to tmpfs.

use crate::fuse_args::BenchArgs;
use crate::report::Measurement;
use anyhow::{Context, Result};
use ckptfs_fuse::{mount, CacheConfig, IoMode, StoreFs};
use ckptfs_store::{Store, StoreOptions};
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

const BLOCK: usize = 1 << 20;

fn seq_write(p: &Path, bytes: u64, buf: &[u8]) -> Result<f64> {
    let _ = std::fs::remove_file(p);
    let t0 = Instant::now();
    let mut f = File::create(p).with_context(|| format!("create {}", p.display()))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n]).context("write")?;
        left -= n as u64;
    }
    drop(f);
    Ok(t0.elapsed().as_secs_f64())
}

fn seq_read(p: &Path, bytes: u64, buf: &mut [u8]) -> Result<f64> {
    let t0 = Instant::now();
    let mut f = File::open(p).with_context(|| format!("open {}", p.display()))?;
    let mut total = 0u64;
    loop {
        let n = f.read(buf).context("read")?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    anyhow::ensure!(
        total == bytes,
        "read {total} bytes of {bytes} from {}",
        p.display()
    );
    Ok(t0.elapsed().as_secs_f64())
}

/// Every case on one target directory: (case, processes, bytes or files, seconds per
/// rep). `seq` false: the metadata cases only.
fn measure(dir: &Path, a: &BenchArgs, bytes: u64, seq: bool) -> Result<Vec<Case>> {
    let mut out = Vec::new();
    if seq {
        let mut buf = vec![0x5au8; BLOCK];
        let (mut w, mut r) = (Vec::new(), Vec::new());
        let file = dir.join("seq");
        for _ in 0..a.reps {
            w.push(seq_write(&file, bytes, &buf)?);
            r.push(seq_read(&file, bytes, &mut buf)?);
        }
        std::fs::remove_file(&file)?;
        out.push(("seq-write", 1, bytes, w));
        out.push(("seq-read", 1, bytes, r));
    }
    for &procs in &a.md_procs {
        let md = dir.join(format!("md{procs}"));
        std::fs::create_dir(&md)?;
        let mut rounds = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..a.reps {
            let t = crate::fuse_md::round(&md, procs, a.md_files)?;
            for (v, s) in rounds.iter_mut().zip(t) {
                v.push(s);
            }
        }
        std::fs::remove_dir(&md)?;
        let files = (a.md_files * procs) as u64;
        for (phase, t) in crate::fuse_md::PHASES.into_iter().zip(rounds) {
            out.push((phase, procs, files, t));
        }
    }
    Ok(out)
}

/// (case, processes, bytes or files, seconds per repetition).
type Case = (&'static str, usize, u64, Vec<f64>);

const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// The kernel's `enable_uring`, set for the run and put back when dropped.
struct UringParam;

impl UringParam {
    /// As root, with the parameter present and off: turn it on. None otherwise.
    fn on_for_run() -> Option<UringParam> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || ckptfs_fuse::io_uring_enabled() != Some(false) {
            return None;
        }
        std::fs::write(URING_PARAM, "Y").ok().map(|()| UringParam)
    }
}

impl Drop for UringParam {
    fn drop(&mut self) {
        let _ = std::fs::write(URING_PARAM, "N");
    }
}

/// Part (d): store mount vs tmpfs, sequential 1 MiB I/O and metadata rates.
pub(crate) fn part_d(a: &BenchArgs, out: &mut Vec<Measurement>, notes: &mut Vec<String>) -> Result<()> {
    let bytes = (a.seq_bytes & !((BLOCK as u64) - 1)).max(BLOCK as u64);
    let name = format!("bench-fuse-d-{}", std::process::id());
    let mut opts = StoreOptions::named(&name);
    opts.mem_size = Some(bytes + (64 << 20));
    opts.chunk_size = Some(1 << 20);
    let most = a.md_procs.iter().copied().max().unwrap_or(1);
    // The default file count of a store this size (one per 8 KiB of memory), as a user
    // gets it, unless the metadata cases need more.
    let need = ((a.md_files * most) as u64).saturating_add(64 + most as u64);
    let default = ckptfs_store::default_max_files(opts.mem_size.unwrap_or(0)) as u64;
    if need > default {
        opts.max_files = Some(need.min(u32::MAX as u64) as u32);
    }
    Store::create(&opts).context("create the benchmark store")?;
    struct Destroy(String);
    impl Drop for Destroy {
        fn drop(&mut self) {
            let _ = Store::destroy(&self.0);
        }
    }
    let _destroy = Destroy(name.clone());
    let store = Store::attach(&opts).context("attach the benchmark store")?;

    let shm = tempfile::Builder::new()
        .prefix("ckptfs-bench-fuse-d-")
        .tempdir_in("/dev/shm")
        .context("temporary directory in /dev/shm")?;
    let tmpfs = measure(shm.path(), a, bytes, true)?;

    let tmp = tempfile::Builder::new()
        .prefix("ckptfs-bench-fuse-d-")
        .tempdir()
        .context("temporary directory")?;
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp)?;
    // The default mount (kernel caching with invalidation), then the same metadata
    // cases with caching off (TTL 0, what the mount did before store format 4).
    // As root, the run turns the kernel's FUSE-over-io-uring on (and back off after), so
    // that one run shows both transports, as `scripts/test.sh` does for its tests.
    let switched = UringParam::on_for_run();
    if switched.is_some() {
        notes.push(
            "(d) the kernel's enable_uring was off: turned on for this run (root) and back off after".into(),
        );
    }
    let ring = ckptfs_fuse::io_uring_enabled() == Some(true);
    let mut through = Vec::new();
    let mut mounts = vec![
        (CacheConfig::DEFAULT, true, true),
        (CacheConfig::OFF, false, true),
    ];
    if ring {
        mounts.push((CacheConfig::DEFAULT, true, false));
    }
    for (cache, seq, uring) in mounts {
        let session = mount::spawn_store(
            StoreFs::with_cache(store.clone(), IoMode::Auto, cache)
                .with_io_uring(uring)
                .with_io_uring_spin(std::time::Duration::from_micros(a.io_uring_spin_us)),
            &mp,
            &format!("ckptfs:{name}"),
            0, // the store mount's default (mount::STORE_THREADS)
        )
        .context("mount the store")?;
        let r = measure(&mp, a, bytes, seq);
        session.unmount(&mp).context("unmount")?;
        through.push(r?);
    }
    let devfuse = if ring {
        through.pop().unwrap_or_default()
    } else {
        Vec::new()
    };
    let nocache = through.pop().unwrap_or_default();
    let through = through.pop().unwrap_or_default();

    let find = |case: &str, procs: usize| {
        tmpfs
            .iter()
            .find(|(c, p, _, _)| *c == case && *p == procs)
            .map(|(_, _, _, t)| t.clone())
    };
    let rows = tmpfs
        .iter()
        .map(|(case, p, n, t)| (format!("tmpfs-{case}"), *case, *p, *n, t.clone()))
        .chain(
            through
                .into_iter()
                .map(|(case, p, n, t)| (format!("store-mount-{case}"), case, p, n, t)),
        )
        .chain(
            nocache
                .into_iter()
                .map(|(case, p, n, t)| (format!("store-mount-ttl0-{case}"), case, p, n, t)),
        )
        .chain(
            devfuse
                .into_iter()
                .map(|(case, p, n, t)| (format!("store-mount-devfuse-{case}"), case, p, n, t)),
        )
        .collect::<Vec<_>>();
    for (label, case, procs, n, t) in rows {
        let meas = Measurement::new(label, procs, 0, t);
        let base = find(case, procs).map(|b| Measurement::new("base", procs, 0, b));
        let r = base.map(|b| b.median_s() / meas.median_s()).unwrap_or(1.0);
        let meas = if case.starts_with("seq") {
            Measurement::new(meas.case, procs, n, meas.seconds).with("vs_tmpfs", (r * 100.0).round() / 100.0)
        } else {
            let rate = n as f64 / meas.median_s();
            meas.with("files", n)
                .with("ops_per_s", rate.round())
                .with("vs_tmpfs", (r * 1000.0).round() / 1000.0)
        };
        out.push(meas);
    }
    notes.push(format!(
        "(d) seq: one process, {} MiB in 1 MiB calls; md (mdtest-like): {} files per process, \
         each process in its own directory, phases between barriers, rate = all files / (last \
         end - first start); store-mount: \
         kernel attribute/entry cache (TTL {} s) invalidated by the store's change counter \
         (poll {} ms); store-mount-ttl0: caching off; requests {}; see docs/fuse.md",
        bytes >> 20,
        a.md_files,
        CacheConfig::DEFAULT.ttl.as_secs(),
        CacheConfig::DEFAULT.poll.as_millis(),
        if ring {
            "over io_uring (the kernel's enable_uring is on), store-mount-devfuse: through /dev/fuse"
        } else {
            "through /dev/fuse (the kernel does not offer io_uring: enable_uring off or missing)"
        },
    ));
    Ok(())
}
