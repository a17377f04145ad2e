//! The aggregate memory pool from C (`ckptfs_pool_*`, docs/capi.md and docs/pool.md):
//! a client of the pool's manager, files written through its write buffer and committed
//! at `ckptfs_pool_close`, read back chunk by chunk (each checked against its BLAKE3
//! hash and CRC32C, falling back to replicas and drained copies).
//!
//! Clients and files are small non-negative integers in tables of this library. A file
//! descriptor is either a write (sequential `ckptfs_pool_write`, committed by
//! `ckptfs_pool_close`) or a read (`ckptfs_pool_pread` at any offset) of the newest
//! version when it was opened.

use crate::error::{CapiError, Result};
use ckptfs_pool::msg::FileInfo;
use ckptfs_pool::{PoolClient, PoolError, PoolNet, PoolWrite};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// Default write buffer of a client (bytes) when the caller passes 0.
pub const DEFAULT_BUFFER: u64 = 64 << 20;

fn perr(e: PoolError) -> CapiError {
    CapiError::new(e.errno(), e.to_string())
}

/// An open pool file.
pub enum PoolFile {
    /// Being written.
    Write(Option<PoolWrite>),
    /// Open for reading: the version, the connections, the last chunk read.
    Read {
        /// The version read.
        f: FileInfo,
        /// Its client.
        client: PoolClient,
        /// Connections to benefactors.
        conns: ckptfs_pool::client::Conns,
        /// The last chunk read (index, bytes).
        last: Option<(u64, Vec<u8>)>,
    },
}

static CLIENTS: LazyLock<Mutex<HashMap<i32, PoolClient>>> = LazyLock::new(Default::default);
static FILES: LazyLock<Mutex<HashMap<i32, Arc<Mutex<PoolFile>>>>> = LazyLock::new(Default::default);
static NEXT: AtomicI32 = AtomicI32::new(0);

fn next_id() -> Result<i32> {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    if id < 0 {
        return Err(CapiError::new(libc::EMFILE, "pool handles exhausted"));
    }
    Ok(id)
}

fn client(id: i32) -> Result<PoolClient> {
    CLIENTS
        .lock()
        .unwrap()
        .get(&id)
        .cloned()
        .ok_or_else(|| CapiError::new(libc::EBADF, format!("{id}: not a pool client")))
}

fn file(fd: i32) -> Result<Arc<Mutex<PoolFile>>> {
    FILES
        .lock()
        .unwrap()
        .get(&fd)
        .cloned()
        .ok_or_else(|| CapiError::new(libc::EBADF, format!("{fd}: not an open pool file")))
}

fn add_file(f: PoolFile) -> Result<i32> {
    let id = next_id()?;
    FILES.lock().unwrap().insert(id, Arc::new(Mutex::new(f)));
    Ok(id)
}

/// Connect to the pool of the cluster file `cluster` (None: `CKPTFS_CLUSTER`) as the
/// client of node `node` (None: `CKPTFS_NODE_ID`, else the manager's node).
pub fn connect(cluster: Option<&str>, node: Option<&str>, buffer: u64) -> Result<i32> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let file = cluster
        .map(str::to_string)
        .or_else(|| env("CKPTFS_CLUSTER"))
        .ok_or_else(|| CapiError::new(libc::EINVAL, "no cluster file (argument or CKPTFS_CLUSTER)"))?;
    let c = ckptfs_cluster::Cluster::load(std::path::Path::new(&file))
        .map_err(|e| CapiError::new(libc::EINVAL, e.to_string()))?;
    let me = node
        .map(str::to_string)
        .or_else(|| env("CKPTFS_NODE_ID"))
        .or_else(|| c.pool.as_ref().map(|p| p.manager.clone()))
        .ok_or_else(|| CapiError::new(libc::EINVAL, "the cluster file has no [pool] section"))?;
    let net = PoolNet::client(&c, &me).map_err(perr)?;
    let buffer = if buffer == 0 { DEFAULT_BUFFER } else { buffer };
    let cl = PoolClient::new(net, buffer).map_err(perr)?;
    let id = next_id()?;
    CLIENTS.lock().unwrap().insert(id, cl);
    Ok(id)
}

/// Forget client `id` (its open files keep working until closed).
pub fn disconnect(id: i32) -> Result<()> {
    CLIENTS
        .lock()
        .unwrap()
        .remove(&id)
        .map(|_| ())
        .ok_or_else(|| CapiError::new(libc::EBADF, format!("{id}: not a pool client")))
}

/// Start writing a new version of `path`.
pub fn create(id: i32, path: &str) -> Result<i32> {
    let w = client(id)?.create(path, None).map_err(perr)?;
    add_file(PoolFile::Write(Some(w)))
}

/// Open the newest version of `path` for reading.
pub fn open(id: i32, path: &str) -> Result<i32> {
    let c = client(id)?;
    let f = c
        .stat(path)
        .map_err(perr)?
        .ok_or_else(|| CapiError::new(libc::ENOENT, format!("{path}: no such pool file")))?;
    add_file(PoolFile::Read {
        f,
        client: c,
        conns: HashMap::new(),
        last: None,
    })
}

/// Append `data` to the file being written.
pub fn write(fd: i32, data: &[u8]) -> Result<usize> {
    let f = file(fd)?;
    let mut g = f.lock().unwrap();
    match &mut *g {
        PoolFile::Write(Some(w)) => {
            w.write(data).map_err(perr)?;
            Ok(data.len())
        }
        _ => Err(CapiError::new(libc::EBADF, format!("{fd}: not open for writing"))),
    }
}

/// Read up to `out.len()` bytes at `off`; 0 at the end.
pub fn pread(fd: i32, out: &mut [u8], off: u64) -> Result<usize> {
    let f = file(fd)?;
    let mut g = f.lock().unwrap();
    let PoolFile::Read {
        f,
        client,
        conns,
        last,
    } = &mut *g
    else {
        return Err(CapiError::new(libc::EBADF, format!("{fd}: not open for reading")));
    };
    let end = (off.saturating_add(out.len() as u64)).min(f.size);
    let cs = f.chunk_size.max(1);
    let mut pos = off;
    while pos < end {
        let i = pos / cs;
        if last.as_ref().is_none_or(|(k, _)| *k != i) {
            *last = Some((i, client.read_chunk(f, i, conns).map_err(perr)?));
        }
        let (_, d) = last.as_ref().expect("read");
        let from = (pos - i * cs) as usize;
        let to = ((end - i * cs) as usize).min(d.len());
        if from >= to {
            return Err(CapiError::new(libc::EIO, "chunk shorter than its map says"));
        }
        let at = (pos - off) as usize;
        out[at..at + (to - from)].copy_from_slice(&d[from..to]);
        pos += (to - from) as u64;
    }
    Ok((pos.max(off) - off) as usize)
}

/// The size of an open file (bytes written so far, for a write).
pub fn size(fd: i32) -> Result<u64> {
    let f = file(fd)?;
    let g = f.lock().unwrap();
    match &*g {
        PoolFile::Write(Some(w)) => Ok(w.written()),
        PoolFile::Write(None) => Err(CapiError::new(libc::EBADF, "closed")),
        PoolFile::Read { f, .. } => Ok(f.size),
    }
}

/// Close: a write is committed (the version is visible only when this succeeds).
pub fn close(fd: i32) -> Result<()> {
    let f = FILES
        .lock()
        .unwrap()
        .remove(&fd)
        .ok_or_else(|| CapiError::new(libc::EBADF, format!("{fd}: not an open pool file")))?;
    let mut g = f.lock().unwrap();
    if let PoolFile::Write(w) = &mut *g {
        if let Some(w) = w.take() {
            w.commit(ckptfs_settings::now_ns(), 0o644, None).map_err(perr)?;
        }
    }
    Ok(())
}

/// Remove every version of `path`.
pub fn unlink(id: i32, path: &str) -> Result<()> {
    match client(id)?.remove(path, None, None).map_err(perr)? {
        0 => Err(CapiError::new(libc::ENOENT, format!("{path}: no such pool file"))),
        _ => Ok(()),
    }
}
