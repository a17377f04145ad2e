//! `ckptfs bench store`, small-file rows: one process creates, writes and closes
//! `--small-files` files of `--small-size` bytes, stats them, reads them back (open, read,
//! close) and removes them, in the store (native API) and as files on /dev/shm (the
//! tmpfs baseline), in the same run. Rates are files per second (`files_per_s`); the
//! `bytes` column is the data moved. The store's memory used by the files is reported
//! next to the data size (`store_bytes_used`): small files take blocks of shared chunks.

use crate::report::{median, Measurement};
use anyhow::{Context, Result};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::io::{Read, Write};
use std::time::Instant;

/// The four phases, timed in seconds.
struct Phases {
    create: f64,
    stat: f64,
    read: f64,
    remove: f64,
}

fn store_phases(store: &Store, n: usize, data: &[u8]) -> Result<(Phases, u64)> {
    let mut buf = vec![0u8; data.len()];
    let t = Instant::now();
    for i in 0..n {
        let mut f = store.open(&format!("/s/f{i}"), OpenFlags::CREATE, 0o644)?;
        f.write_all(data)?;
        f.close()?;
    }
    let create = t.elapsed().as_secs_f64();
    let info = store.info();
    let used = (info.mem_chunks - info.mem_free_chunks) as u64 * info.chunk_size;
    let t = Instant::now();
    for i in 0..n {
        store.stat(&format!("/s/f{i}"))?;
    }
    let stat = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..n {
        let mut f = store.open(&format!("/s/f{i}"), OpenFlags::READ, 0)?;
        let got = f.read_full(&mut buf)?;
        anyhow::ensure!(got == data.len() && buf == data, "/s/f{i} read back wrong");
        f.close()?;
    }
    let read = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..n {
        store.unlink(&format!("/s/f{i}"))?;
    }
    let remove = t.elapsed().as_secs_f64();
    Ok((
        Phases {
            create,
            stat,
            read,
            remove,
        },
        used,
    ))
}

fn tmpfs_phases(dir: &std::path::Path, n: usize, data: &[u8]) -> Result<Phases> {
    let mut buf = vec![0u8; data.len()];
    let t = Instant::now();
    for i in 0..n {
        let mut f = std::fs::File::create(dir.join(format!("f{i}")))?;
        f.write_all(data)?;
    }
    let create = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..n {
        std::fs::metadata(dir.join(format!("f{i}")))?;
    }
    let stat = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..n {
        let mut f = std::fs::File::open(dir.join(format!("f{i}")))?;
        f.read_exact(&mut buf)?;
    }
    let read = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..n {
        std::fs::remove_file(dir.join(format!("f{i}")))?;
    }
    let remove = t.elapsed().as_secs_f64();
    Ok(Phases {
        create,
        stat,
        read,
        remove,
    })
}

/// Add the small-file rows (`small-create`, `small-stat`, `small-read`, `small-remove`,
/// each for `ckptfs` and `devshm`) to `results`, with a note comparing the rates.
pub fn small_table(
    files: usize,
    size: u64,
    reps: usize,
    results: &mut Vec<Measurement>,
    notes: &mut Vec<String>,
) -> Result<()> {
    anyhow::ensure!(
        files > 0 && size > 0,
        "--small-files and --small-size must be positive"
    );
    let data = crate::store::pattern(size as usize);
    // Memory for the data in whole chunks plus room: small files need much less.
    let mem = (files as u64 * size.max(4096) * 2).max(64 << 20);
    let name = format!("bench-small-{}", std::process::id());
    let _ = Store::destroy(&name);
    let store = Store::create(&StoreOptions {
        mem_size: Some(mem),
        max_files: Some(files as u32 + 16),
        ..StoreOptions::named(&name)
    })
    .with_context(|| format!("creating a {} MiB bench store", mem >> 20))?;
    store.mkdir("/s", 0o755)?;
    let mut ck: Vec<Phases> = Vec::new();
    let mut tm: Vec<Phases> = Vec::new();
    let mut used = 0;
    for _ in 0..reps {
        let (p, u) = store_phases(&store, files, &data)?;
        ck.push(p);
        used = u;
        let dir = tempfile::Builder::new()
            .prefix("ckptfs-bench-small")
            .tempdir_in("/dev/shm")?;
        tm.push(tmpfs_phases(dir.path(), files, &data)?);
    }
    drop(store);
    let _ = Store::destroy(&name);
    let bytes = files as u64 * size;
    let mut ratios = Vec::new();
    for (case, pick) in [
        ("small-create", (|p: &Phases| p.create) as fn(&Phases) -> f64),
        ("small-stat", |p: &Phases| p.stat),
        ("small-read", |p: &Phases| p.read),
        ("small-remove", |p: &Phases| p.remove),
    ] {
        let c: Vec<f64> = ck.iter().map(pick).collect();
        let t: Vec<f64> = tm.iter().map(pick).collect();
        let (rc, rt) = (files as f64 / median(&c), files as f64 / median(&t));
        let mut mc = Measurement::new(format!("ckptfs-{case}"), 1, bytes, c)
            .with("files", files)
            .with("file_size", size)
            .with("files_per_s", rc.round())
            .with("vs_devshm", rc / rt);
        if case == "small-create" {
            mc = mc.with("store_bytes_used", used);
        }
        results.push(mc);
        results.push(
            Measurement::new(format!("devshm-{case}"), 1, bytes, t)
                .with("files", files)
                .with("file_size", size)
                .with("files_per_s", rt.round()),
        );
        ratios.push(format!("{} {:.0}/s ({:.2}x /dev/shm)", &case[6..], rc, rc / rt));
    }
    notes.push(format!(
        "{files} files of {size} B, one process: {}; the files took {:.1} MiB of the store for {:.1} MiB of data",
        ratios.join(", "),
        used as f64 / (1 << 20) as f64,
        bytes as f64 / (1 << 20) as f64
    ));
    Ok(())
}
