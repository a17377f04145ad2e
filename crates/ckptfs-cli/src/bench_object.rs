//! `ckptfs bench object`: drain to and restore from a real S3 server (versitygw started
//! by scripts/s3-local.sh) against the AWS command-line client copying the same files
//! and a plain file copy to the server's disk; zstd ratio and speed on checkpoint data
//! (the heat demo's field, a torch state dict when the checkout's .venv has torch, and
//! random bytes), a compressed drain of the field, and the application's write into the
//! store while the drain runs against the same write alone. Medians of `--repeat` runs.

use anyhow::{bail, Context, Result};
use ckptfs_bench::report::{machine, Measurement, Report};
use ckptfs_object::drain::{drain_once, restore, DrainOptions};
use ckptfs_object::{Compression, ObjectConfig, ObjectLevel};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Options of `ckptfs bench object`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Total bytes of the drained files (K/M/G).
    #[arg(long, default_value = "256M", value_parser = crate::config::parse_size)]
    pub size: u64,
    /// Number of files.
    #[arg(long, default_value_t = 4)]
    pub files: usize,
    /// Repetitions of each case (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// The checkout (scripts/s3-local.sh, .tools/s3, examples/heat) [default: the
    /// current directory, or the one holding this binary].
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Python with torch for the state-dict case [default: the checkout's .venv].
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn find_root(given: &Option<PathBuf>) -> Result<PathBuf> {
    let mut cands: Vec<PathBuf> = given.iter().cloned().collect();
    if let Ok(c) = std::env::current_dir() {
        cands.push(c);
    }
    if let Some(r) = std::env::current_exe()
        .ok()
        .and_then(|e| e.ancestors().nth(3).map(Path::to_path_buf))
    {
        cands.push(r);
    }
    cands
        .into_iter()
        .find(|r| r.join("scripts/s3-local.sh").exists())
        .context("scripts/s3-local.sh not found: run from the checkout or pass --root")
}

struct Server {
    root: PathBuf,
    dir: PathBuf,
    env: HashMap<String, String>,
}

impl Server {
    fn start(root: &Path, dir: &Path) -> Result<Server> {
        let out = Command::new("bash")
            .arg(root.join("scripts/s3-local.sh"))
            .arg("start")
            .arg(dir)
            .output()?;
        if !out.status.success() {
            bail!("s3-local.sh start: {}", String::from_utf8_lossy(&out.stderr));
        }
        let env = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(Server {
            root: root.to_path_buf(),
            dir: dir.to_path_buf(),
            env,
        })
    }

    fn level(&self, prefix: &str, compress: Option<Compression>) -> Result<ObjectLevel> {
        let env = self.env.clone();
        let mut cfg = ObjectConfig::from_url(&format!("s3://ckptfs/{prefix}"), &|k| {
            env.get(k).cloned().or_else(|| match k {
                "HOME" | "CKPTFS_S3_PART_SIZE" | "CKPTFS_S3_CONCURRENCY" => std::env::var(k).ok(),
                _ => None,
            })
        })?;
        cfg.compression = compress;
        Ok(ObjectLevel::new(cfg)?)
    }

    fn aws(&self, aws: &Path, args: &[&str]) -> Result<f64> {
        let t0 = Instant::now();
        let out = Command::new(aws)
            .args([
                "--endpoint-url",
                &self.env["AWS_ENDPOINT_URL"],
                "--only-show-errors",
            ])
            .args(args)
            .envs(&self.env)
            .env("HOME", &self.dir)
            .output()?;
        let s = t0.elapsed().as_secs_f64();
        if !out.status.success() {
            bail!("aws {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(s)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(self.root.join("scripts/s3-local.sh"))
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

fn new_store(name: &str, size: u64) -> Result<Store> {
    let _ = Store::destroy(name);
    let mut o = StoreOptions::named(name);
    o.mem_size = Some(size + size / 4 + (64 << 20));
    Ok(Store::create(&o)?)
}

fn store_put(s: &Store, path: &str, bytes: &[u8]) -> Result<()> {
    let _ = s.mkdir("/b", 0o755);
    let mut f = s.open(path, OpenFlags::CREATE, 0o644)?;
    f.write_all(bytes)?;
    f.close()?;
    Ok(())
}

/// Plain copy of every file of `from` into `to` (created), with fsync: the baseline of
/// moving the bytes to the server's disk without S3.
fn plain_copy(from: &Path, to: &Path) -> Result<f64> {
    let t0 = Instant::now();
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dst = to.join(e.file_name());
        std::fs::copy(e.path(), &dst)?;
        std::fs::File::open(&dst)?.sync_all()?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// The heat demo's field: examples/heat/heat.c run for 200 steps of a 2048x2048 grid.
fn heat_field(root: &Path, work: &Path) -> Option<Vec<u8>> {
    let src = root.join("examples/heat/heat.c");
    let bin = work.join("heat");
    let ok = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .ok()?
        .success();
    if !ok {
        return None;
    }
    let dir = work.join("heat-ckpt");
    std::fs::create_dir_all(&dir).ok()?;
    // HEAT_SEGMENT=1: a checkpoint after the last step too (heat.200), the state a
    // restart would read.
    let st = Command::new(&bin)
        .env("HEAT_SEGMENT", "1")
        .args(["2048", "2048", "200", "100"])
        .arg(&dir)
        .arg(work.join("heat.result"))
        .output()
        .ok()?;
    if !st.status.success() {
        return None;
    }
    std::fs::read(dir.join("heat.200")).ok()
}

/// A torch state dict (a 6-layer transformer encoder, float32, torch.save) when the
/// checkout's .venv has torch.
fn torch_state_dict(root: &Path, python: &Option<PathBuf>, work: &Path) -> Option<Vec<u8>> {
    let py = python.clone().unwrap_or_else(|| root.join(".venv/bin/python"));
    if !py.exists() {
        return None;
    }
    let out = work.join("state.pt");
    let script = format!(
        "import torch\ntorch.manual_seed(0)\nm = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(512, 8, 2048), 6)\n\
         opt = torch.optim.Adam(m.parameters())\nx = torch.randn(16, 4, 512)\nfor _ in range(3):\n    opt.zero_grad(); m(x).pow(2).mean().backward(); opt.step()\n\
         torch.save({{'model': m.state_dict(), 'optim': opt.state_dict()}}, {:?})\n",
        out.display().to_string()
    );
    let ok = Command::new(py)
        .args(["-c", &script])
        .output()
        .ok()?
        .status
        .success();
    if !ok {
        return None;
    }
    std::fs::read(out).ok()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// zstd ratio and speed on `data` in groups of 8 MiB (what the level does).
fn zstd_case(kind: &str, data: &[u8], level: i32, repeat: usize) -> Result<Measurement> {
    let group = 8 << 20;
    let mut ct = Vec::new();
    let mut dt = Vec::new();
    let mut csize = 0;
    for _ in 0..repeat {
        let t0 = Instant::now();
        let frames: Vec<Vec<u8>> = data
            .chunks(group)
            .map(|g| zstd::bulk::compress(g, level))
            .collect::<Result<_, _>>()?;
        ct.push(t0.elapsed().as_secs_f64());
        csize = frames.iter().map(|f| f.len()).sum::<usize>();
        let t0 = Instant::now();
        for (f, g) in frames.iter().zip(data.chunks(group)) {
            let out = zstd::bulk::decompress(f, g.len())?;
            assert_eq!(out.len(), g.len());
        }
        dt.push(t0.elapsed().as_secs_f64());
    }
    let n = data.len() as f64;
    Ok(
        Measurement::new(format!("zstd:{level} {kind}"), 1, data.len() as u64, ct.clone())
            .with("ratio", (n / csize.max(1) as f64 * 100.0).round() / 100.0)
            .with("compress_mbps", (n / median(&mut ct) / 1e6).round())
            .with("decompress_mbps", (n / median(&mut dt) / 1e6).round()),
    )
}

/// Run the benchmark.
pub fn run(a: BenchArgs) -> Result<Report> {
    let root = find_root(&a.root)?;
    if !root.join(".tools/s3/bin/versitygw").exists() {
        bail!("no S3 server: run scripts/setup-s3.sh (needs Go)");
    }
    let work = tempfile::Builder::new().prefix("obj-bench-").tempdir_in("/tmp")?;
    let srv = Server::start(&root, &work.path().join("s3"))?;
    let aws = root.join(".tools/s3/venv/bin/aws");
    let repeat = a.repeat.max(1);
    let nfiles = a.files.max(1);
    let per = a.size / nfiles as u64;
    let total = per * nfiles as u64;

    // The same files in a directory (for aws and cp) and in a store (for ckptfs).
    let src = work.path().join("src");
    std::fs::create_dir_all(&src)?;
    let sname = format!("obj-bench-{}", std::process::id());
    let store = new_store(&sname, total)?;
    for i in 0..nfiles {
        let bytes = ckptfs_testsupport_bytes(i as u64 + 1, per as usize);
        std::fs::write(src.join(format!("f{i}")), &bytes)?;
        store_put(&store, &format!("/b/f{i}"), &bytes)?;
    }

    let mut results = Vec::new();
    let mut notes = Vec::new();
    let (mut dr, mut ar, mut pr) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..repeat {
        let obj = srv.level(&format!("ck{r}"), None)?;
        let rep = drain_once(&store, &obj, &DrainOptions::default())?;
        if rep.drained_files != nfiles as u64 || !rep.failed.is_empty() {
            bail!("drain: {rep:?}");
        }
        dr.push(rep.seconds);
        if aws.exists() {
            let s = src.display().to_string();
            ar.push(srv.aws(
                &aws,
                &["s3", "cp", "--recursive", &s, &format!("s3://ckptfs/aws{r}/")],
            )?);
        }
        pr.push(plain_copy(&src, &work.path().join(format!("s3/plain{r}")))?);
    }
    results.push(Measurement::new(
        "drain: ckptfs agent (store -> S3)",
        1,
        total,
        dr.clone(),
    ));
    if !ar.is_empty() {
        results.push(Measurement::new(
            "drain: aws s3 cp --recursive (dir -> S3)",
            1,
            total,
            ar.clone(),
        ));
    } else {
        notes.push("awscli missing (.tools/s3/venv/bin/aws): no client comparison".into());
    }
    results.push(Measurement::new(
        "drain: plain copy + fsync to the server's disk",
        1,
        total,
        pr.clone(),
    ));

    let (mut rr, mut arr, mut prr) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..repeat {
        let dst = new_store(&format!("{sname}-r"), total)?;
        let rep = restore(&dst, &srv.level("ck0", None)?, "/")?;
        if rep.restored_files != nfiles as u64 || !rep.failed.is_empty() {
            bail!("restore: {rep:?}");
        }
        rr.push(rep.seconds);
        drop(dst);
        let _ = Store::destroy(&format!("{sname}-r"));
        if aws.exists() {
            let d = work.path().join(format!("aws-back{r}"));
            arr.push(srv.aws(
                &aws,
                &[
                    "s3",
                    "cp",
                    "--recursive",
                    "s3://ckptfs/aws0/",
                    &d.display().to_string(),
                ],
            )?);
            std::fs::remove_dir_all(&d)?;
        }
        let d = work.path().join(format!("plain-back{r}"));
        prr.push(plain_copy(&work.path().join("s3/plain0"), &d)?);
        std::fs::remove_dir_all(&d)?;
    }
    results.push(Measurement::new(
        "restore: ckptfs restore (S3 -> store, CRCs checked)",
        1,
        total,
        rr.clone(),
    ));
    if !arr.is_empty() {
        results.push(Measurement::new(
            "restore: aws s3 cp --recursive (S3 -> dir)",
            1,
            total,
            arr.clone(),
        ));
    }
    results.push(Measurement::new(
        "restore: plain copy + fsync from the server's disk",
        1,
        total,
        prr.clone(),
    ));
    if !ar.is_empty() {
        let d = median(&mut ar) / median(&mut dr);
        let r = median(&mut arr) / median(&mut rr);
        notes.push(format!(
            "ckptfs vs aws s3 cp: drain {d:.2}x, restore {r:.2}x the client's bandwidth (target >= 0.9x)"
        ));
    }
    // The application's write while the drain runs: the same bytes written into another
    // store alone, then while `drain_once` of the first store to S3 runs on another
    // thread (the application never waits for the drain: target about 1x).
    let (alone, during) = app_write_while_draining(&srv, &store, &sname, nfiles, per, repeat)?;
    results.push(Measurement::new(
        "application write into the store, no drain",
        1,
        total,
        alone.clone(),
    ));
    results.push(Measurement::new(
        "application write into the store while the S3 drain runs",
        1,
        total,
        during.clone(),
    ));
    let (mut alone, mut during) = (alone, during);
    notes.push(format!(
        "application write while the S3 drain runs: {:.2}x its rate with no drain (the write returns at memory speed; the drain moves the bytes after close)",
        median(&mut alone) / median(&mut during)
    ));
    drop(store);
    let _ = Store::destroy(&sname);

    // Compression on checkpoint data.
    let mut kinds: Vec<(&str, Vec<u8>)> = Vec::new();
    match heat_field(&root, work.path()) {
        Some(f) => kinds.push(("heat field", f)),
        None => notes.push("heat field not measured (cc or examples/heat/heat.c missing)".into()),
    }
    match torch_state_dict(&root, &a.python, work.path()) {
        Some(t) => kinds.push(("torch state dict", t)),
        None => {
            notes.push("torch state dict not measured (.venv without torch: scripts/setup-python.sh)".into())
        }
    }
    kinds.push(("random", ckptfs_testsupport_bytes(99, 32 << 20)));
    for (kind, data) in &kinds {
        for level in [1, 3] {
            results.push(zstd_case(kind, data, level, repeat)?);
        }
    }
    // End to end: the field drained with and without compression.
    if let Some((_, field)) = kinds.iter().find(|(k, _)| *k == "heat field") {
        let fname = format!("{sname}-z");
        let zs = new_store(&fname, field.len() as u64)?;
        store_put(&zs, "/b/heat.200", field)?;
        for (label, comp) in [
            ("off", None),
            (
                "zstd:1",
                Some(Compression {
                    level: 1,
                    group: 8 << 20,
                }),
            ),
            (
                "zstd:3",
                Some(Compression {
                    level: 3,
                    group: 8 << 20,
                }),
            ),
        ] {
            let mut t = Vec::new();
            let mut obytes = 0;
            for r in 0..repeat {
                let obj = srv.level(&format!("z{label}{r}").replace(':', ""), comp)?;
                let rep = drain_once(&zs, &obj, &DrainOptions::default())?;
                t.push(rep.seconds);
                obytes = rep.object_bytes;
            }
            results.push(
                Measurement::new(
                    format!("drain heat field, compression {label}"),
                    1,
                    field.len() as u64,
                    t,
                )
                .with("object_bytes", obytes),
            );
        }
        drop(zs);
        let _ = Store::destroy(&fname);
    }
    notes.push(
        "server: versitygw posix backend on this machine's disk over loopback; client and server share the 2 CPUs"
            .into(),
    );
    Ok(Report {
        bench: "object".into(),
        settings: serde_json::json!({
            "size": total, "files": nfiles, "repeat": repeat, "machine": machine(),
            "part_size": std::env::var("CKPTFS_S3_PART_SIZE").unwrap_or_else(|_| "8M".into()),
            "concurrency": std::env::var("CKPTFS_S3_CONCURRENCY").unwrap_or_else(|_| "4".into()),
            "load": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        }),
        results,
        notes,
    })
}

/// Seconds to write `nfiles` files of `per` bytes into a fresh store: alone, and while a
/// drain of `drained` to S3 runs on another thread (one of each per repetition).
fn app_write_while_draining(
    srv: &Server,
    drained: &Store,
    sname: &str,
    nfiles: usize,
    per: u64,
    repeat: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let blobs: Vec<Vec<u8>> = (0..nfiles)
        .map(|i| ckptfs_testsupport_bytes(i as u64 + 101, per as usize))
        .collect();
    let wname = format!("{sname}-w");
    let write_all = |ws: &Store| -> Result<f64> {
        let t = Instant::now();
        for (i, b) in blobs.iter().enumerate() {
            store_put(ws, &format!("/b/w{i}"), b)?;
        }
        Ok(t.elapsed().as_secs_f64())
    };
    let (mut alone, mut during) = (Vec::new(), Vec::new());
    for r in 0..repeat {
        let ws = new_store(&wname, per * nfiles as u64)?;
        alone.push(write_all(&ws)?);
        drop(ws);
        let ws = new_store(&wname, per * nfiles as u64)?;
        let obj = srv.level(&format!("oab{r}"), None)?;
        let started = std::sync::atomic::AtomicBool::new(false);
        let (secs, drain) = std::thread::scope(|sc| {
            let h = sc.spawn(|| {
                started.store(true, std::sync::atomic::Ordering::SeqCst);
                drain_once(drained, &obj, &DrainOptions::default())
            });
            while !started.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::yield_now();
            }
            // Let the drain's first uploads get under way before the application writes.
            std::thread::sleep(std::time::Duration::from_millis(30));
            let secs = write_all(&ws);
            (secs, h.join())
        });
        let secs = secs?;
        let rep = drain
            .map_err(|_| anyhow::anyhow!("the drain thread panicked"))?
            .context("drain while the application writes")?;
        if rep.seconds < secs {
            bail!(
                "the drain ({:.3} s) ended before the application's write ({secs:.3} s): make --size larger",
                rep.seconds
            );
        }
        during.push(secs);
        drop(ws);
        let _ = Store::destroy(&wname);
    }
    Ok((alone, during))
}

/// Deterministic incompressible bytes (xorshift).
fn ckptfs_testsupport_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() + 8 <= len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.resize(len, 0);
    v
}
