//! `ckptfs pool`: the aggregate memory pool's manager, benefactors and client commands
//! (docs/pool.md). Files move between a local file and the pool level through the mover.

use crate::config::Ctx;
use anyhow::{bail, Context, Result};
use ckptfs_level::mem::stored_of;
use ckptfs_level::{ChunkReader, ChunkWriter, IoPart, Level, LevelError, MoveOptions, Mover, Stored};
use ckptfs_pool::msg::FileInfo;
use ckptfs_pool::{drain, PoolClient, PoolLevel, PoolNet};
use clap::{Args, Subcommand};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// `ckptfs pool` options.
#[derive(Args, Debug)]
pub struct PoolArgs {
    #[command(subcommand)]
    cmd: PoolCmd,
}

impl PoolArgs {
    /// The daemons (manager, benefactor) keep SIGPIPE ignored; the listings do not.
    pub fn quiet_on_broken_pipe(&self) -> bool {
        !matches!(self.cmd, PoolCmd::Manager { .. } | PoolCmd::Benefactor { .. })
    }
}

fn size(s: &str) -> Result<u64, String> {
    ckptfs_settings::parse::parse_size(s)
}

#[derive(Subcommand, Debug)]
enum PoolCmd {
    /// Run the manager (the cluster map's `[pool] manager` node, at `[pool] addr`).
    Manager {
        /// Metadata directory [default: the map's pool.meta_dir, else `<cluster>.pool-meta`].
        #[arg(long, value_name = "DIR")]
        meta: Option<PathBuf>,
    },
    /// Lend memory to the pool as node --node-id.
    Benefactor {
        /// Memory lent (bytes; K, M, G suffixes).
        #[arg(long, value_parser = size)]
        mem: u64,
    },
    /// Write a local file into the pool; prints OAB and ASB.
    Put {
        /// Local file.
        src: PathBuf,
        /// Pool path (absolute).
        dst: String,
        /// Client write buffer (bytes; K, M, G suffixes).
        #[arg(long, value_parser = size, default_value = "64M")]
        buffer: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read a pool file (newest version) into a local file.
    Get {
        /// Pool path.
        src: String,
        /// Local file.
        dst: PathBuf,
    },
    /// List pool files.
    Ls {
        /// Pool path prefix.
        #[arg(default_value = "/")]
        prefix: String,
        /// Versions, chunks, benefactors, drained or not.
        #[arg(short, long)]
        long: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a pool file (every version, or one).
    // Its own --version (the binary's --version flag would clash; clap's debug check).
    #[command(disable_version_flag = true)]
    Rm {
        /// Pool path.
        path: String,
        /// Only this version.
        #[arg(long, value_name = "N")]
        version: Option<u64>,
    },
    /// Longevity of the files under a prefix: versions and/or seconds kept.
    Keep {
        /// Pool path prefix.
        prefix: String,
        /// Versions kept per file.
        #[arg(long)]
        versions: Option<u32>,
        /// Seconds a version is kept.
        #[arg(long)]
        seconds: Option<u64>,
    },
    /// Benefactors alive, memory lent and used.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild the original files from the drained chunk files, verified.
    Reassemble {
        /// Where to write them.
        dest: PathBuf,
        /// Drain directory [default: the map's pool.drain_dir].
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
    },
}

/// The pool roles of this node: a server (manager, benefactor) or a client.
fn net(ctx: &Ctx, server: bool) -> Result<PoolNet> {
    let cluster = ctx
        .cluster
        .as_ref()
        .context("ckptfs pool needs --cluster FILE (or CKPTFS_CLUSTER)")?;
    let pool = cluster
        .pool
        .as_ref()
        .context("the cluster file has no [pool] section")?;
    let me = match &ctx.node_id {
        Some(id) => id.clone(),
        None => pool.manager.clone(),
    };
    Ok(if server {
        PoolNet::server(cluster, &me)?
    } else {
        PoolNet::client(cluster, &me)?
    })
}

/// Run `ckptfs pool`.
pub fn main(a: PoolArgs, ctx: &Ctx) -> Result<i32> {
    match a.cmd {
        PoolCmd::Manager { meta } => {
            let net = net(ctx, true)?;
            if net.me != net.pool.manager {
                bail!("node {} is not the pool manager ({})", net.me, net.pool.manager);
            }
            let dir = match meta.or_else(|| net.pool.meta_dir.clone()) {
                Some(d) => net.cluster.resolve_path(&d),
                None => net
                    .cluster
                    .source
                    .as_ref()
                    .map(|s| s.with_extension("pool-meta"))
                    .context("no metadata directory (--meta)")?,
            };
            eprintln!(
                "pool manager {} on {} (metadata {})",
                net.me,
                net.pool.addr,
                dir.display()
            );
            ckptfs_pool::manager::run(net, &dir)?;
            Ok(0)
        }
        PoolCmd::Benefactor { mem } => {
            if ctx.node_id.is_none() {
                bail!("ckptfs pool benefactor needs --node-id (or CKPTFS_NODE_ID)");
            }
            let net = net(ctx, true)?;
            eprintln!(
                "pool benefactor {} lending {mem} bytes on {}",
                net.me,
                net.benefactor_addr(&net.me)?
            );
            ckptfs_pool::benefactor::run(net, mem)?;
            Ok(0)
        }
        PoolCmd::Put {
            src,
            dst,
            buffer,
            json,
        } => put(ctx, &src, &dst, buffer, json),
        PoolCmd::Get { src, dst } => get(ctx, &src, &dst),
        PoolCmd::Ls { prefix, long, json } => {
            let c = PoolClient::new(net(ctx, false)?, 1 << 20)?;
            let files = c.list(&prefix)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&files)?);
            } else {
                for f in &files {
                    print_file(f, long);
                }
            }
            Ok(0)
        }
        PoolCmd::Rm { path, version } => {
            let c = PoolClient::new(net(ctx, false)?, 1 << 20)?;
            let n = c.remove(&path, version, None)?;
            if n == 0 {
                eprintln!("{path}: no such pool file or version");
                return Ok(1);
            }
            Ok(0)
        }
        PoolCmd::Keep {
            prefix,
            versions,
            seconds,
        } => {
            let c = PoolClient::new(net(ctx, false)?, 1 << 20)?;
            c.keep(&prefix, versions, seconds)?;
            Ok(0)
        }
        PoolCmd::Status { json } => {
            let c = PoolClient::new(net(ctx, false)?, 1 << 20)?;
            let s = c.status()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                println!(
                    "{:<12} {:<22} {:>6} {:>12} {:>12} {:>8}",
                    "node", "addr", "alive", "lent", "used", "chunks"
                );
                for b in &s {
                    println!(
                        "{:<12} {:<22} {:>6} {:>12} {:>12} {:>8}",
                        b.node, b.addr, b.alive, b.mem, b.used, b.chunks
                    );
                }
            }
            Ok(0)
        }
        PoolCmd::Reassemble { dest, from } => {
            let n = net(ctx, false)?;
            let dir = match from.or_else(|| n.pool.drain_dir.clone()) {
                Some(d) => n.cluster.resolve_path(&d),
                None => bail!("no drain directory (--from, or pool.drain_dir in the cluster file)"),
            };
            let (done, bad) = drain::reassemble(&dir, &dest)?;
            for r in &done {
                println!(
                    "{} v{} {} bytes -> {}",
                    r.path,
                    r.version,
                    r.size,
                    r.dest.display()
                );
            }
            for b in &bad {
                eprintln!("not rebuilt: {b}");
            }
            Ok(if bad.is_empty() { 0 } else { 1 })
        }
    }
}

fn print_file(f: &FileInfo, long: bool) {
    if !long {
        println!("{}", f.path);
        return;
    }
    let drained = f.chunks.iter().filter(|c| c.drained).count();
    let mut nodes: Vec<&str> = f
        .chunks
        .iter()
        .flat_map(|c| c.holders().into_iter().map(|(n, _)| n))
        .collect();
    nodes.sort();
    nodes.dedup();
    println!(
        "{:<9} v{:<3} {:>12} {:>5} chunks {:>5} drained  [{}] older {:?}  {}",
        f.state,
        f.version,
        f.size,
        f.chunks.len(),
        drained,
        nodes.join(","),
        f.older,
        f.path
    );
}

/// A local file as a source copy: chunks read with `pread`, checked against the CRCs
/// taken when it was described.
struct FileSource {
    f: std::fs::File,
    stored: Stored,
    buf: Vec<u8>,
}

impl ChunkReader for FileSource {
    fn stored(&self) -> &Stored {
        &self.stored
    }

    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let cs = self.stored.chunk_size.max(1);
        let len = self.stored.version.size.saturating_sub(i * cs).min(cs) as usize;
        self.buf.resize(len, 0);
        self.f
            .read_exact_at(&mut self.buf, i * cs)
            .map_err(|e| LevelError::io("read", self.stored.path.clone(), e))?;
        if self.stored.chunk_crc32c.get(i as usize) != Some(&ckptfs_crc::crc32c(&self.buf)) {
            return Err(LevelError::Changed(self.stored.path.clone()));
        }
        sink(&[IoPart::Buf(&self.buf)])
    }

    fn finish(self: Box<Self>) -> Result<(), LevelError> {
        Ok(())
    }
}

/// A local file as a destination: written under a temporary name, renamed on commit.
struct FileDest {
    f: Option<std::fs::File>,
    tmp: PathBuf,
    dest: PathBuf,
    stored: Stored,
}

impl ChunkWriter for FileDest {
    fn write_at(&mut self, parts: &[IoPart<'_>], mut off: u64) -> Result<(), LevelError> {
        let f = self.f.as_ref().expect("open");
        let mut b = Vec::new();
        for p in parts {
            b.clear();
            p.extend_vec(&mut b);
            f.write_all_at(&b, off)
                .map_err(|e| LevelError::io("write", self.dest.display().to_string(), e))?;
            off += b.len() as u64;
        }
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> Result<Stored, LevelError> {
        let f = self.f.take().expect("open");
        f.sync_all()
            .map_err(|e| LevelError::io("sync", self.dest.display().to_string(), e))?;
        std::fs::rename(&self.tmp, &self.dest)
            .map_err(|e| LevelError::io("rename", self.dest.display().to_string(), e))?;
        Ok(self.stored.clone())
    }
}

impl Drop for FileDest {
    fn drop(&mut self) {
        if self.f.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn put(ctx: &Ctx, src: &Path, dst: &str, buffer: u64, json: bool) -> Result<i32> {
    let level = PoolLevel::new(PoolClient::new(net(ctx, false)?, buffer)?);
    let cs = level.client().net().pool.chunk_size as u64;
    let f = std::fs::File::open(src).with_context(|| format!("open {}", src.display()))?;
    // Describe the source (its chunk CRCs), then move it with the mover.
    let len = f.metadata()?.len();
    let mut crcs = Vec::new();
    let mut buf = vec![0u8; cs as usize];
    let mut whole = 0u32;
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(cs) as usize;
        f.read_exact_at(&mut buf[..n], off)?;
        let c = ckptfs_crc::crc32c(&buf[..n]);
        crcs.push(c);
        whole = ckptfs_level::crc::crc_combine(whole, c, n as u64);
        off += n as u64;
    }
    let mut stored = stored_of(dst, &[], cs, 0, 0);
    stored.version.size = len;
    stored.version.crc32c = Some(whole);
    stored.version.mtime_ns = std::fs::metadata(src)?
        .modified()?
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    stored.chunk_crc32c = crcs;
    let reader = Box::new(FileSource {
        f,
        stored: stored.clone(),
        buf: Vec::new(),
    });
    let writer = level.put(&stored)?;
    let scratch = ckptfs_level::CostMeter::default();
    Mover::new(MoveOptions::default()).copy_open(reader, writer, (&scratch, level.meter()))?;
    let r = level
        .last_put()
        .context("the pool level kept no report of the put")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{} v{}: {} bytes, {} of {} chunks sent over [{}]; OAB {:.1} MB/s ({:.3} s), ASB {:.1} MB/s ({:.3} s)",
            r.path,
            r.version,
            r.size,
            r.chunks_sent,
            r.chunks,
            r.stripe.join(","),
            r.oab / 1e6,
            r.app_seconds,
            r.asb / 1e6,
            r.stored_seconds
        );
    }
    Ok(0)
}

fn get(ctx: &Ctx, src: &str, dst: &Path) -> Result<i32> {
    let level = PoolLevel::new(PoolClient::new(net(ctx, false)?, 1 << 20)?);
    let reader = level.get(src)?;
    let stored = reader.stored().clone();
    let dir = dst
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.pool-get.{}",
        dst.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .with_context(|| format!("create {}", tmp.display()))?;
    let writer = Box::new(FileDest {
        f: Some(f),
        tmp,
        dest: dst.to_path_buf(),
        stored: stored.clone(),
    });
    let scratch = ckptfs_level::CostMeter::default();
    let t = Mover::new(MoveOptions::default()).copy_open(reader, writer, (level.meter(), &scratch))?;
    eprintln!("{src}: {} bytes in {:.3} s", t.bytes, t.seconds);
    Ok(0)
}
