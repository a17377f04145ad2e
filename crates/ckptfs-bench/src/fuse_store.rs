//! `ckptfs bench fuse` part (d): the store mount next to tmpfs in the same run.
//!
//! - `seq-write` / `seq-read`: one file of `--seq-bytes` written and then read back in
//!   1 MiB `write()`/`read()` calls (IOR file-per-process style, one process), in a
//!   /dev/shm directory (tmpfs) and through a store mount (`--io-mode auto`: the
//!   write-only open uses direct I/O, the read-only one the page cache with read-ahead;
//!   the page cache of the file just written with direct I/O is empty).
//! - `md-create` / `md-stat` / `md-remove`: mdtest-like rates on `--md-files` empty
//!   files in one directory (open(O_CREAT|O_EXCL)+close, stat, unlink), one process;
//!   through the default mount (kernel attribute/entry caching invalidated by the
//!   store's change counter) and again with caching off (`store-mount-ttl0-*`).
//! - When the kernel offers FUSE-over-io-uring (`enable_uring`), the default mount uses
//!   it, and every case runs once more with requests through `/dev/fuse` only
//!   (`store-mount-devfuse-*`): the two transports side by side.
//!
//! Each case runs `--reps` times; the median is reported with the ratio to tmpfs.

use crate::fuse::BenchArgs;
use crate::report::Measurement;
use anyhow::{Context, Result};
use ckptfs_fuse::{mount, CacheConfig, IoMode, StoreFs};
use ckptfs_store::{Store, StoreOptions};
use std::fs::{File, OpenOptions};
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

/// (create, stat, remove) seconds for `n` empty files in `dir`.
fn metadata_round(dir: &Path, n: usize) -> Result<[f64; 3]> {
    let names: Vec<_> = (0..n).map(|i| dir.join(format!("f{i:06}"))).collect();
    let t0 = Instant::now();
    for p in &names {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)
            .with_context(|| format!("create {}", p.display()))?;
    }
    let create = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    for p in &names {
        std::fs::metadata(p).with_context(|| format!("stat {}", p.display()))?;
    }
    let stat = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    for p in &names {
        std::fs::remove_file(p).with_context(|| format!("remove {}", p.display()))?;
    }
    Ok([create, stat, t0.elapsed().as_secs_f64()])
}

/// Every case on one target directory: (case, bytes or files, seconds per rep).
/// `seq` false: the metadata cases only.
fn measure(dir: &Path, a: &BenchArgs, bytes: u64, seq: bool) -> Result<Vec<(&'static str, u64, Vec<f64>)>> {
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
        out.push(("seq-write", bytes, w));
        out.push(("seq-read", bytes, r));
    }
    let md = dir.join("md");
    std::fs::create_dir(&md)?;
    let mut rounds = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..a.reps {
        let t = metadata_round(&md, a.md_files)?;
        for (v, s) in rounds.iter_mut().zip(t) {
            v.push(s);
        }
    }
    std::fs::remove_dir(&md)?;
    let files = a.md_files as u64;
    let [c, s, rm] = rounds;
    out.extend([
        ("md-create", files, c),
        ("md-stat", files, s),
        ("md-remove", files, rm),
    ]);
    Ok(out)
}

/// Part (d): store mount vs tmpfs, sequential 1 MiB I/O and metadata rates.
pub(crate) fn part_d(a: &BenchArgs, out: &mut Vec<Measurement>, notes: &mut Vec<String>) -> Result<()> {
    let bytes = (a.seq_bytes & !((BLOCK as u64) - 1)).max(BLOCK as u64);
    let name = format!("bench-fuse-d-{}", std::process::id());
    let mut opts = StoreOptions::named(&name);
    opts.mem_size = Some(bytes + (64 << 20));
    opts.chunk_size = Some(1 << 20);
    opts.max_files = Some((a.md_files as u32).saturating_add(64));
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
            StoreFs::with_cache(store.clone(), IoMode::Auto, cache).with_io_uring(uring),
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

    let find = |case: &str| {
        tmpfs
            .iter()
            .find(|(c, _, _)| *c == case)
            .map(|(_, _, t)| t.clone())
    };
    let rows = tmpfs
        .iter()
        .map(|(case, n, t)| (format!("tmpfs-{case}"), *case, *n, t.clone()))
        .chain(
            through
                .into_iter()
                .map(|(case, n, t)| (format!("store-mount-{case}"), case, n, t)),
        )
        .chain(
            nocache
                .into_iter()
                .map(|(case, n, t)| (format!("store-mount-ttl0-{case}"), case, n, t)),
        )
        .chain(
            devfuse
                .into_iter()
                .map(|(case, n, t)| (format!("store-mount-devfuse-{case}"), case, n, t)),
        )
        .collect::<Vec<_>>();
    for (label, case, n, t) in rows {
        let meas = Measurement::new(label, 1, 0, t);
        let base = find(case).map(|b| Measurement::new("base", 1, 0, b));
        let r = base.map(|b| b.median_s() / meas.median_s()).unwrap_or(1.0);
        let meas = if case.starts_with("seq") {
            Measurement::new(meas.case, 1, n, meas.seconds).with("vs_tmpfs", (r * 100.0).round() / 100.0)
        } else {
            let rate = n as f64 / meas.median_s();
            meas.with("files", n)
                .with("ops_per_s", rate.round())
                .with("vs_tmpfs", (r * 1000.0).round() / 1000.0)
        };
        out.push(meas);
    }
    notes.push(format!(
        "(d) one process; seq: {} MiB in 1 MiB calls; md: {} files in one directory; store-mount: \
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
