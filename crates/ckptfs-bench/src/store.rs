//! `ckptfs bench store`: the node store against memcpy and /dev/shm (CRUISE section 7).
//!
//! Cases, for 1..N processes each writing its own file of `--file-size` in `--block`
//! writes:
//! - `memcpy`: copy into a pre-faulted shared anonymous mapping (the ceiling);
//! - `devshm-write`: write() of a new file on /dev/shm, open to close (the RAM disk);
//! - `ckptfs-write`: native API, open to close, into a store whose earlier files were
//!   deleted (steady-state checkpointing: chunks are recycled, never faulted);
//! - `ckptfs-write-fresh`: the same, but the timed checkpoint is the process's first;
//! - `ckptfs-write-warm`: a fresh process's first checkpoint, 0.5 s after it attached
//!   with warming on (`CKPTFS_WARM=all`: page tables built in the background while an
//!   application would initialise);
//! - `devshm-read-fresh`: a fresh process read()s a file on /dev/shm (restart baseline);
//! - `ckptfs-read`: a fresh process reads the store files back (a restart);
//! - `ckptfs-read-again`: the same process reading them a second time;
//! - `chunk-sweep`: ckptfs-write with chunk sizes 64 KiB to 64 MiB (CRUISE figure 6);
//! - `spill`: one process, a share of the file in the spill file (CRUISE table 3), next
//!   to the harmonic formula computed from the measured 0 % and 100 % rows;
//! - `small-create`/`-stat`/`-read`/`-remove`: many small files, ckptfs and /dev/shm
//!   (see `store_small.rs`).

#[path = "store_small.rs"]
mod store_small;

use crate::procs::run_parallel;
use crate::report::{machine, median, Measurement, Report};
use anyhow::{Context, Result};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::path::PathBuf;
use std::time::Instant;

/// Options of `ckptfs bench store`.
#[derive(clap::Args, Debug, Clone)]
pub struct StoreBenchArgs {
    /// Largest number of writer processes (1..N are measured); default: number of CPUs.
    #[arg(long)]
    pub procs: Option<usize>,
    /// Bytes each process writes (K/M/G suffixes).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub file_size: u64,
    /// Size of each write() call.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub block: u64,
    /// Chunk size of the store for the main cases.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub chunk_size: u64,
    /// Repetitions of each case (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Directory for the spill file in the spill-over case (a local disk or SSD).
    #[arg(long, default_value = "/var/tmp")]
    pub spill_dir: PathBuf,
    /// Skip the chunk-size sweep.
    #[arg(long)]
    pub no_sweep: bool,
    /// Skip the spill-over table.
    #[arg(long)]
    pub no_spill: bool,
    /// Files of the small-file rows (0 skips them).
    #[arg(long, default_value_t = 20_000)]
    pub small_files: usize,
    /// Size of each file of the small-file rows.
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    pub small_size: u64,
    /// Skip the huge-page rows (a fresh process's first checkpoint and restart read on a
    /// store whose segment is on a tmpfs mounted with huge=within_size, which the bench
    /// mounts for the run: root only, else the rows are skipped with a note).
    #[arg(long)]
    pub no_huge: bool,
    /// Run the huge-page rows in this existing directory on a tmpfs mounted with
    /// huge=within_size (the Slurm prolog's /dev/shm-ckptfs) instead of mounting one:
    /// no root needed.
    #[arg(long, value_name = "DIR")]
    pub huge_dir: Option<PathBuf>,
    /// Print a JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Sizes are parsed as by every other ckptfs front-end.
pub use ckptfs_settings::parse_size;

/// A deterministic, non-constant data block for benchmark writes.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(1))
        .collect()
}

struct BenchStore {
    name: String,
    shm_dir: Option<PathBuf>,
}

impl BenchStore {
    fn create(
        mem: u64,
        chunk: u64,
        spill: Option<(PathBuf, u64)>,
        max_files: u32,
    ) -> Result<(Self, Store, f64)> {
        Self::create_in(None, mem, chunk, spill, max_files)
    }

    fn create_in(
        shm_dir: Option<&std::path::Path>,
        mem: u64,
        chunk: u64,
        spill: Option<(PathBuf, u64)>,
        max_files: u32,
    ) -> Result<(Self, Store, f64)> {
        let name = format!("bench-{}-{}", std::process::id(), chunk);
        let _ = Store::destroy_in(shm_dir, &name);
        let t = Instant::now();
        let store = Store::create(&StoreOptions {
            name: name.clone(),
            shm_dir: shm_dir.map(|d| d.to_path_buf()),
            mem_size: Some(mem),
            chunk_size: Some(chunk),
            max_files: Some(max_files),
            spill_dir: spill.as_ref().map(|s| s.0.clone()),
            spill_size: spill.map(|s| s.1),
            private: false,
            ..Default::default()
        })
        .with_context(|| format!("creating a {} MiB bench store", mem >> 20))?;
        let shm_dir = shm_dir.map(|d| d.to_path_buf());
        Ok((BenchStore { name, shm_dir }, store, t.elapsed().as_secs_f64()))
    }
}

impl Drop for BenchStore {
    fn drop(&mut self) {
        let _ = Store::destroy_in(self.shm_dir.as_deref(), &self.name);
    }
}

/// Write a new store file of `size` bytes in `block`-sized writes, open to close.
pub fn write_file(store: &Store, path: &str, size: u64, block: &[u8]) -> Result<()> {
    let mut f = store.open(path, OpenFlags::CREATE, 0o644)?;
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.close()?;
    Ok(())
}

/// Write a new local file of `size` bytes in `block`-sized write() calls; with `fsync`,
/// sync it before returning (the direct-to-disk baselines).
pub fn write_local_file(path: &std::path::Path, size: u64, block: &[u8], fsync: bool) -> Result<()> {
    write_local(path, size, block, fsync, 0)
}

/// [`write_local_file`] through `O_DIRECT` (then fsync): `block` must be aligned for
/// it, and every write but the last a multiple of the alignment.
pub fn write_local_file_o_direct(path: &std::path::Path, size: u64, block: &[u8]) -> Result<()> {
    write_local(path, size, block, true, libc::O_DIRECT)
}

fn write_local(path: &std::path::Path, size: u64, block: &[u8], fsync: bool, flags: i32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(flags)
        .open(path)?;
    let mut left = size;
    while left > 0 {
        let k = left.min(block.len() as u64) as usize;
        f.write_all(&block[..k])?;
        left -= k as u64;
    }
    if fsync {
        f.sync_all()?;
    }
    Ok(())
}

fn read_file(store: &Store, path: &str, buf: &mut [u8]) -> Result<u64> {
    let mut f = store.open(path, OpenFlags::READ, 0)?;
    let mut total = 0;
    loop {
        let n = f.read(buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    Ok(total)
}

/// Time `reps` repetitions of a parallel case; `between` cleans up before each.
fn measure<T>(
    reps: usize,
    n: usize,
    prep: &dyn Fn(usize) -> Result<T>,
    work: &dyn Fn(usize, T) -> Result<()>,
    between: &dyn Fn() -> Result<()>,
) -> Result<Vec<f64>> {
    let mut v = Vec::new();
    for _ in 0..reps {
        between()?;
        v.push(run_parallel(n, prep, work)?);
    }
    between()?;
    Ok(v)
}

/// Store write bandwidth of `n` processes with the given chunk size.
fn store_cases(a: &StoreBenchArgs, n: usize, chunk: u64, with_read: bool) -> Result<StoreTimes> {
    store_cases_in(None, a, n, chunk, with_read)
}

/// [`store_cases`] on a store whose segment is in `shm_dir` (the huge-page rows).
fn store_cases_in(
    shm_dir: Option<&std::path::Path>,
    a: &StoreBenchArgs,
    n: usize,
    chunk: u64,
    with_read: bool,
) -> Result<StoreTimes> {
    let per = a.file_size.div_ceil(chunk) * chunk;
    let (_guard, store, create_s) = BenchStore::create_in(shm_dir, per * n as u64 + chunk, chunk, None, 64)?;
    let env: Vec<(String, String)> = shm_dir
        .map(|d| ("CKPTFS_SHM_DIR".to_string(), d.display().to_string()))
        .into_iter()
        .collect();
    let block = pattern(a.block as usize);
    // Warm-up: write and delete once so that every chunk has been used (steady state).
    for r in 0..n {
        write_file(&store, &format!("/warm{r}"), a.file_size, &block)?;
    }
    let clean = || -> Result<()> {
        for r in 0..n {
            for p in [format!("/warm{r}"), format!("/ckpt{r}")] {
                let _ = store.unlink(&p);
            }
        }
        Ok(())
    };
    let name = store.name().to_string();
    // Workers are separate exec'd processes (`ckptfs bench store-worker`), as applications
    // are. Each attaches, writes and deletes one checkpoint before the barrier, so the
    // timed write is its second checkpoint: the steady state of an application that
    // checkpoints repeatedly (recycled chunks whose page tables it already has).
    // (Forked workers that attach afresh measured 10-13 GB/s here against 16-20 GB/s for
    // exec'd ones; the cause is not understood yet, see docs/benchmarks.md.)
    let exe = std::env::current_exe()?.display().to_string();
    let argv = |mode: &'static str| {
        let exe = exe.clone();
        let name = name.clone();
        move |r: usize| {
            vec![
                exe.clone(),
                "bench".into(),
                "store-worker".into(),
                mode.into(),
                name.clone(),
                format!("/ckpt{r}"),
                a.file_size.to_string(),
                a.block.to_string(),
            ]
        }
    };
    let write_argv = argv("write");
    let fresh_argv = argv("write-fresh");
    let warm_argv = argv("write-warm");
    let mut t = StoreTimes {
        create_s,
        ..Default::default()
    };
    // Second and first checkpoints interleaved, so that machine noise hits both alike.
    for _ in 0..a.reps {
        clean()?;
        t.write.push(crate::procs::run_commands(n, &write_argv, &env)?);
        if with_read {
            clean()?;
            t.write_fresh
                .push(crate::procs::run_commands(n, &fresh_argv, &env)?);
            clean()?;
            t.write_warm
                .push(crate::procs::run_commands(n, &warm_argv, &env)?);
        }
    }
    clean()?;
    if with_read {
        for r in 0..n {
            write_file(&store, &format!("/ckpt{r}"), a.file_size, &block)?;
        }
        let read_argv = argv("read");
        let again_argv = argv("read-again");
        for _ in 0..a.reps {
            t.read.push(crate::procs::run_commands(n, &read_argv, &env)?);
            t.read_again
                .push(crate::procs::run_commands(n, &again_argv, &env)?);
        }
    }
    Ok(t)
}

/// Timings of the store cases, seconds per repetition.
#[derive(Default)]
struct StoreTimes {
    /// A process's second checkpoint (steady state).
    write: Vec<f64>,
    /// A fresh process's first checkpoint.
    write_fresh: Vec<f64>,
    /// A fresh process's first checkpoint, 0.5 s after an attach with warming on.
    write_warm: Vec<f64>,
    /// A fresh process reading its checkpoint (a restart).
    read: Vec<f64>,
    /// The same process reading it a second time.
    read_again: Vec<f64>,
    create_s: f64,
}

/// A fresh process's read() of files on /dev/shm (the restart baseline), `n` at once.
fn tmpfs_read_baseline(a: &StoreBenchArgs, n: usize, block: &[u8]) -> Result<Vec<f64>> {
    let dir = tempfile::Builder::new()
        .prefix("ckptfs-bench-rd")
        .tempdir_in("/dev/shm")?;
    for r in 0..n {
        write_local_file(&dir.path().join(format!("f{r}")), a.file_size, block, false)?;
    }
    let exe = std::env::current_exe()?.display().to_string();
    let argv = |r: usize| {
        vec![
            exe.clone(),
            "bench".into(),
            "store-worker".into(),
            "tmpfs-read".into(),
            "-".into(),
            dir.path().join(format!("f{r}")).display().to_string(),
            a.file_size.to_string(),
            a.block.to_string(),
        ]
    };
    let mut v = Vec::new();
    for _ in 0..a.reps {
        v.push(crate::procs::run_commands(n, &argv, &[])?);
    }
    Ok(v)
}

/// Run the benchmark and print its report.
pub fn run(a: StoreBenchArgs) -> Result<Report> {
    anyhow::ensure!(
        a.block > 0 && a.file_size > 0 && a.reps > 0,
        "sizes and --reps must be positive"
    );
    let nmax = a
        .procs
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let mut results = Vec::new();
    let mut notes = Vec::new();
    let block = pattern(a.block as usize);
    // The huge-page rows: the store's segment on a tmpfs mounted with huge=within_size.
    let huge = if a.no_huge {
        None
    } else {
        let room = (a.file_size.div_ceil(a.chunk_size) * a.chunk_size) * nmax as u64 + (256 << 20);
        let h = match &a.huge_dir {
            Some(d) => crate::huge::HugeTmpfs::existing(d),
            None => crate::huge::HugeTmpfs::mount(room),
        };
        match h {
            Ok(h) => Some(h),
            Err(why) => {
                notes.push(format!("huge-page rows skipped: {why}"));
                None
            }
        }
    };
    for n in 1..=nmax {
        let total = a.file_size * n as u64;
        // (a) memcpy into a pre-faulted shared mapping (the ceiling).
        let memcpy = memcpy_ceiling(a.file_size as usize, &block, n, a.reps)?;
        let m_memcpy = Measurement::new("memcpy", n, total, memcpy);
        let stream = stream_ceiling(a.file_size as usize, &block, n, a.reps)?;
        let m_stream = Measurement::new("stream-copy", n, total, stream);
        let (fused, serial) = crc_copy_rows(a.file_size as usize, &block, n, a.reps)?;
        let m_fused = Measurement::new("copy-crc-fused", n, total, fused);
        let m_serial = Measurement::new("copy-then-crc", n, total, serial);
        let (f_vs, s_vs) = (
            m_fused.gbps() / m_memcpy.gbps(),
            m_serial.gbps() / m_memcpy.gbps(),
        );
        notes.push(format!(
            "{n} proc: copy + CRC32C in one loop (ckptfs-crc, {}) = {f_vs:.2}x memcpy; \
             CRC (crc-fast) then streaming copy per 16 KiB piece = {s_vs:.2}x memcpy",
            if ckptfs_crc::fused_available() {
                "folding kernel"
            } else {
                "no kernel on this CPU: fallback"
            }
        ));
        let m_fused = m_fused.with("vs_memcpy", f_vs);
        let m_serial = m_serial.with("vs_memcpy", s_vs);
        // (b) /dev/shm write() of new files.
        let dir = tempfile::Builder::new()
            .prefix("ckptfs-bench")
            .tempdir_in("/dev/shm")?;
        let dpath = dir.path().to_path_buf();
        let shm = measure(
            a.reps,
            n,
            &|_| Ok(()),
            &|r, ()| write_local_file(&dpath.join(format!("f{r}")), a.file_size, &block, false),
            &|| {
                for r in 0..n {
                    let _ = std::fs::remove_file(dpath.join(format!("f{r}")));
                }
                Ok(())
            },
        )?;
        drop(dir);
        let m_shm = Measurement::new("devshm-write", n, total, shm);
        // (c), (d) the store.
        let t = store_cases(&a, n, a.chunk_size, true)?;
        let tmpfs_rd = tmpfs_read_baseline(&a, n, &block)?;
        let create_s = t.create_s;
        let m_w = Measurement::new("ckptfs-write", n, total, t.write);
        let vs_memcpy = m_w.gbps() / m_memcpy.gbps();
        let vs_stream = m_w.gbps() / m_stream.gbps();
        let vs_shm = m_w.gbps() / m_shm.gbps();
        let m_w = m_w
            .with("vs_memcpy", vs_memcpy)
            .with("vs_devshm", vs_shm)
            .with("vs_stream", vs_stream)
            .with("store_create_s", create_s);
        if n == 1 {
            notes.push(format!(
                "1 process: ckptfs-write = {vs_memcpy:.2}x memcpy (target >= 0.9), {vs_shm:.2}x /dev/shm (target >= 2); \
                 ckptfs copies with streaming stores and checksums every byte, so it is also compared with a \
                 streaming copy without checksum: {vs_stream:.2}x"
            ));
        }
        let m_wf = Measurement::new("ckptfs-write-fresh", n, total, t.write_fresh);
        let wf_vs_memcpy = m_wf.gbps() / m_memcpy.gbps();
        let m_wf = m_wf.with("vs_memcpy", wf_vs_memcpy);
        let m_ww = Measurement::new("ckptfs-write-warm", n, total, t.write_warm);
        let ww_vs_memcpy = m_ww.gbps() / m_memcpy.gbps();
        let m_ww = m_ww.with("vs_memcpy", ww_vs_memcpy);
        notes.push(format!(
            "{n} proc: a fresh process's first checkpoint {WARM_INIT_MS} ms after attaching with CKPTFS_WARM=all \
             (page tables built in the background, as while an application initialises) = {ww_vs_memcpy:.2}x memcpy"
        ));
        let m_tr = Measurement::new("devshm-read-fresh", n, total, tmpfs_rd);
        let m_r = Measurement::new("ckptfs-read", n, total, t.read);
        let r_vs_tmpfs = m_r.gbps() / m_tr.gbps();
        let m_r = m_r.with("vs_devshm_read", r_vs_tmpfs);
        let m_ra = Measurement::new("ckptfs-read-again", n, total, t.read_again);
        let ra_vs_tmpfs = m_ra.gbps() / m_tr.gbps();
        let m_ra = m_ra.with("vs_devshm_read", ra_vs_tmpfs);
        notes.push(format!(
            "{n} proc: a fresh process's first checkpoint = {wf_vs_memcpy:.2}x memcpy (target >= 0.9); \
             a fresh process's restart read = {r_vs_tmpfs:.2}x a fresh read() from /dev/shm (target >= 1.0); \
             reading again in the same process {ra_vs_tmpfs:.2}x"
        ));
        let huge_rows = match &huge {
            Some(h) => {
                let th = store_cases_in(Some(h.path()), &a, n, a.chunk_size, true)?;
                let m_hf = Measurement::new("ckptfs-write-fresh-huge", n, total, th.write_fresh);
                let hf_vs_memcpy = m_hf.gbps() / m_memcpy.gbps();
                let m_hr = Measurement::new("ckptfs-read-huge", n, total, th.read);
                let hr_vs_tmpfs = m_hr.gbps() / m_tr.gbps();
                notes.push(format!(
                    "{n} proc, huge pages (segment on a tmpfs with huge=within_size): a fresh process's first \
                     checkpoint = {hf_vs_memcpy:.2}x memcpy (target >= 0.9); its restart read = {hr_vs_tmpfs:.2}x a \
                     fresh read() from /dev/shm (target >= 1.0)"
                ));
                vec![
                    m_hf.with("vs_memcpy", hf_vs_memcpy),
                    m_hr.with("vs_devshm_read", hr_vs_tmpfs),
                ]
            }
            None => Vec::new(),
        };
        results.extend([
            m_memcpy, m_stream, m_fused, m_serial, m_shm, m_w, m_wf, m_ww, m_tr, m_r, m_ra,
        ]);
        results.extend(huge_rows);
    }
    if !a.no_sweep {
        // (e) chunk-size sweep with all processes (CRUISE figure 6).
        let mut cs = 64u64 << 10;
        while cs <= 64 << 20 {
            let t = store_cases(&a, nmax, cs, false)?;
            results.push(
                Measurement::new("chunk-sweep", nmax, a.file_size * nmax as u64, t.write)
                    .with("chunk_kib", cs >> 10),
            );
            cs *= 4;
        }
    }
    if !a.no_spill {
        spill_table(&a, &block, &mut results, &mut notes)?;
    }
    if a.small_files > 0 {
        store_small::small_table(a.small_files, a.small_size, a.reps, &mut results, &mut notes)?;
    }
    let settings = serde_json::json!({
        "file_size": a.file_size, "block": a.block, "chunk_size": a.chunk_size,
        "reps": a.reps, "max_procs": nmax, "spill_dir": a.spill_dir, "machine": machine(),
        "small_files": a.small_files, "small_size": a.small_size,
    });
    Ok(Report {
        bench: "store".into(),
        settings,
        results,
        notes,
    })
}

/// A copy with streaming stores (what ckptfs uses) into pre-populated shared memory, no
/// checksum: the ceiling for ckptfs's own copy.
fn stream_ceiling(len: usize, block: &[u8], n: usize, reps: usize) -> Result<Vec<f64>> {
    copy_ceiling(len, block, n, reps, Copy::Stream)
}

/// memcpy into pre-populated shared mappings (glibc memcpy, the ceiling).
fn memcpy_ceiling(len: usize, block: &[u8], n: usize, reps: usize) -> Result<Vec<f64>> {
    copy_ceiling(len, block, n, reps, Copy::Memcpy)
}

/// How [`copy_ceiling`] copies.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Copy {
    /// glibc memcpy.
    Memcpy,
    /// Streaming stores, no checksum.
    Stream,
    /// `ckptfs_crc::copy_with_crc`: copy and CRC32C in one loop (what a store write does
    /// where the CPU has the folding kernel).
    FusedCrc,
    /// The CRC32C of each 16 KiB piece by crc-fast, then its streaming copy: the store's
    /// write path before the folding kernel (and where the CPU lacks it).
    SerialCrc,
}

/// Copy with CRC32C into pre-populated shared memory, one loop (`fused`) or checksum
/// then copy per 16 KiB piece: what the folding kernel is worth on this CPU.
pub(crate) fn crc_copy_rows(len: usize, block: &[u8], n: usize, reps: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    Ok((
        copy_ceiling(len, block, n, reps, Copy::FusedCrc)?,
        copy_ceiling(len, block, n, reps, Copy::SerialCrc)?,
    ))
}

/// Each worker populates its mapping before the barrier, then copies `len` bytes in
/// `block` pieces.
fn copy_ceiling(len: usize, block: &[u8], n: usize, reps: usize, how: Copy) -> Result<Vec<f64>> {
    // Map and populate once in the parent; forked workers share the pages (MAP_SHARED) and
    // the page tables are set up again in the child by touching before the barrier.
    let mut out = Vec::new();
    let maps: Vec<usize> = (0..n)
        .map(|_| {
            // SAFETY: anonymous shared mapping, unmapped at the end of this function.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                    -1,
                    0,
                )
            };
            p as usize
        })
        .collect();
    anyhow::ensure!(
        maps.iter().all(|&p| p != libc::MAP_FAILED as usize),
        "mmap failed"
    );
    for _ in 0..reps {
        out.push(run_parallel(
            n,
            &|r| {
                // Page tables of a fork child are empty: populate before the barrier.
                // SAFETY: advisory call on our mapping.
                unsafe { libc::madvise(maps[r] as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
                Ok(())
            },
            &|r, ()| {
                let dst = maps[r] as *mut u8;
                let mut off = 0;
                let mut crc = 0u32;
                while off < len {
                    let k = (len - off).min(block.len());
                    // SAFETY: off + k <= len, inside the mapping.
                    unsafe {
                        match how {
                            Copy::Stream => {
                                ckptfs_store::copy::copy_with_crc(dst.add(off), &block[..k], None);
                            }
                            Copy::Memcpy => std::ptr::copy_nonoverlapping(block.as_ptr(), dst.add(off), k),
                            Copy::FusedCrc => {
                                crc = ckptfs_crc::copy_with_crc(
                                    dst.add(off),
                                    &block[..k],
                                    crc,
                                    ckptfs_crc::Stores::Streaming,
                                )
                            }
                            Copy::SerialCrc => {
                                for (i, piece) in block[..k].chunks(16 << 10).enumerate() {
                                    crc = ckptfs_crc::crc32c_append_crc_fast(crc, piece);
                                    ckptfs_store::copy::copy_with_crc(
                                        dst.add(off + i * (16 << 10)),
                                        piece,
                                        None,
                                    );
                                }
                            }
                        }
                    }
                    off += k;
                }
                std::hint::black_box(crc);
                Ok(())
            },
        )?);
    }
    for p in maps {
        // SAFETY: unmapping what we mapped above.
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
    }
    Ok(out)
}

/// (f) CRUISE table 3: share of the file in spill, measured vs harmonic formula.
fn spill_table(
    a: &StoreBenchArgs,
    block: &[u8],
    results: &mut Vec<Measurement>,
    notes: &mut Vec<String>,
) -> Result<()> {
    let chunk = a.chunk_size;
    let size = a.file_size.div_ceil(chunk) * chunk;
    let nch = size / chunk;
    let shares = [0.0, 3.125, 6.25, 12.5, 25.0, 50.0, 100.0];
    // All rows' stores exist at once and the repetitions go round the rows, so that a
    // slow spell of the (noisy) device hits every row alike instead of one row's block.
    let mut rows = Vec::new();
    for &pct in &shares {
        let spill_chunks = ((nch as f64) * pct / 100.0).round() as u64;
        let mem_chunks = nch - spill_chunks;
        // One extra memory chunk, held by a filler file, so the store is valid even at
        // 100 % and the file gets exactly `mem_chunks` memory chunks.
        let (guard, store, _) = BenchStore::create(
            (mem_chunks + 1) * chunk,
            chunk,
            Some((a.spill_dir.clone(), (spill_chunks.max(1)) * chunk)),
            64,
        )?;
        write_file(&store, "/filler", chunk, block)?;
        // One untimed checkpoint first (steady state: the spill file's reserved extents
        // are written once, as in a job's second and later checkpoints).
        write_file(&store, "/ckpt", size, block)?;
        store.unlink("/ckpt")?;
        rows.push((pct, spill_chunks, guard, store, Vec::new()));
    }
    // The device is noisier than memory: at least 9 repetitions per row.
    for _ in 0..a.reps.max(9) {
        for (_, spill_chunks, _, store, secs) in rows.iter_mut() {
            let t = Instant::now();
            write_file(store, "/ckpt", size, block)?;
            secs.push(t.elapsed().as_secs_f64());
            let st = store.stat("/ckpt")?;
            anyhow::ensure!(
                st.spill_chunks as u64 == *spill_chunks,
                "expected {spill_chunks} spill chunks, got {}",
                st.spill_chunks
            );
            store.unlink("/ckpt")?;
        }
    }
    let measured: Vec<(f64, u64, f64, Vec<f64>)> = rows
        .into_iter()
        .map(|(pct, sc, _guard, _store, secs)| (pct, sc * chunk, median(&secs), secs))
        .collect();
    let t_mem = size as f64 / measured[0].2; // bytes/s with 0 % spilled
    let t_ssd = size as f64 / measured.last().map(|m| m.2).unwrap_or(1.0);
    let mut worst: f64 = 0.0;
    for (pct, spill_bytes, _med, secs) in measured {
        let mem_bytes = size - spill_bytes;
        let theory = size as f64 / (mem_bytes as f64 / t_mem + spill_bytes as f64 / t_ssd) / 1e9;
        let m = Measurement::new("spill", 1, size, secs);
        let dev = (m.gbps() - theory) / theory * 100.0;
        worst = worst.max(dev.abs());
        results.push(
            m.with("spill_pct", pct)
                .with("spill_mib", spill_bytes >> 20)
                .with("formula_gbps", theory)
                .with("dev_pct", dev),
        );
    }
    notes.push(format!(
        "spill rows deviate at most {worst:.1} % from the harmonic formula T = S / (S_mem/T_mem + S_spill/T_spill) (target 10 %); spill dir {}",
        a.spill_dir.display()
    ));
    Ok(())
}

/// How long a `write-warm` worker waits between its attach (warming on) and its first
/// checkpoint: a stand-in for an application's initialisation.
pub const WARM_INIT_MS: u64 = 500;

/// Arguments of the hidden `ckptfs bench store-worker` (one benchmark process).
#[derive(clap::Args, Debug, Clone)]
pub struct WorkerArgs {
    /// `write` (warm-up checkpoint, then the timed one), `write-fresh` (the timed one is
    /// the process's first), `write-warm` (the first, [`WARM_INIT_MS`] after an attach
    /// with warming on), `read` (a fresh process reads), `read-again` (reads once,
    /// then the timed read) or `tmpfs-read` (read() of the local file PATH; STORE unused).
    pub mode: String,
    /// Store name.
    pub store: String,
    /// Store path of this worker's file.
    pub path: String,
    /// Bytes to write.
    pub size: u64,
    /// Bytes per call.
    pub block: u64,
}

/// Body of `ckptfs bench store-worker`: prepare, print `ready`, wait for the start
/// ([`crate::procs::wait_for_go`]),
/// run the timed part, print `T0 T1`.
pub fn worker(a: WorkerArgs) -> Result<()> {
    use std::io::Write;
    let block = pattern(a.block as usize);
    let mut buf = vec![0u8; a.block as usize];
    if a.mode == "tmpfs-read" {
        use std::io::Read;
        println!("ready");
        std::io::stdout().flush()?;
        crate::procs::wait_for_go()?;
        let t0 = crate::procs::monotonic();
        let mut f = std::fs::File::open(&a.path)?;
        let mut got = 0u64;
        loop {
            let k = f.read(&mut buf)?;
            if k == 0 {
                break;
            }
            got += k as u64;
        }
        drop(f);
        let t1 = crate::procs::monotonic();
        anyhow::ensure!(got == a.size, "read {got} of {} bytes", a.size);
        println!("{t0:.9} {t1:.9}");
        return Ok(());
    }
    let s = Store::attach(&StoreOptions {
        // The huge-page rows' store lives in the directory the bench passes on.
        shm_dir: std::env::var_os("CKPTFS_SHM_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from),
        warm: (a.mode == "write-warm").then_some(u64::MAX),
        ..StoreOptions::named(&a.store)
    })?;
    if a.mode == "write-warm" {
        std::thread::sleep(std::time::Duration::from_millis(WARM_INIT_MS));
    }
    if a.mode == "write" {
        let warm = format!("{}.warm", a.path);
        write_file(&s, &warm, a.size, &block)?;
        s.unlink(&warm)?;
    }
    if a.mode == "read-again" {
        read_file(&s, &a.path, &mut buf)?;
    }
    println!("ready");
    std::io::stdout().flush()?;
    crate::procs::wait_for_go()?;
    let t0 = crate::procs::monotonic();
    match a.mode.as_str() {
        "write" | "write-fresh" | "write-warm" => write_file(&s, &a.path, a.size, &block)?,
        "read" | "read-again" => {
            let got = read_file(&s, &a.path, &mut buf)?;
            anyhow::ensure!(got == a.size, "read {got} of {} bytes", a.size);
        }
        m => anyhow::bail!("unknown worker mode {m:?}"),
    }
    let t1 = crate::procs::monotonic();
    println!("{t0:.9} {t1:.9}");
    Ok(())
}
