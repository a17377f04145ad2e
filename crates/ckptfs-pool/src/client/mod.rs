//! The pool client: asks the manager for a striping plan, sends chunks straight to the
//! benefactors from a bounded write buffer ([`mod@write`]), commits the chunk map, reads
//! files back.
//!
//! Blocking: requests run on the calling thread over the transport's blocking
//! connection ([`ckptfs_transport::blocking`]); a write's senders are std threads
//! ([`mod@write`]). No runtime is started, so the client can live in an application
//! process (the C library's `ckptfs_pool_*`).
//!
//! **Reads.** Each chunk is read from its first live holder, checked against its BLAKE3
//! hash and CRC32C; a holder that is dead, fails or returns wrong bytes is passed over
//! for the next replica, and last for the chunk's drained file on the PFS.

pub mod write;

use crate::drain;
use crate::msg::{BenefactorInfo, ChunkHash, ChunkName, FileInfo, Reply, Request};
use crate::net::{ask, get_chunk, proto};
use crate::{PoolError, PoolNet, Result};
use ckptfs_transport::blocking::Conn;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
pub use write::PoolWrite;

/// A reader's connections to benefactors, by node id, kept between chunks
/// ([`PoolClient::read_chunk`]).
pub type Conns = HashMap<String, Conn>;

/// A pool client of node `net.me` (cheap to clone: clones share the connection to the
/// manager).
#[derive(Clone)]
pub struct PoolClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PoolClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolClient")
            .field("me", &self.inner.net.me)
            .field("manager", &self.inner.net.pool.addr)
            .field("buffer", &self.inner.buffer)
            .finish()
    }
}

struct Inner {
    net: PoolNet,
    mgr: Mutex<Option<Conn>>,
    buffer: u64,
    bytes_sent: Arc<AtomicU64>,
}

/// What one [`PoolClient::put_bytes`] or committed [`PoolWrite`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PutReport {
    /// Store path.
    pub path: String,
    /// Version committed.
    pub version: u64,
    /// Size.
    pub size: u64,
    /// Chunks in the version.
    pub chunks: u64,
    /// Chunks sent (the others were already in the pool).
    pub chunks_sent: u64,
    /// Bytes of chunk data sent.
    pub bytes_sent: u64,
    /// Seconds from open to the application's close.
    pub app_seconds: f64,
    /// Seconds from open until every chunk was stored remotely.
    pub stored_seconds: f64,
    /// Observed application bandwidth, bytes/s.
    pub oab: f64,
    /// Achieved storage bandwidth, bytes/s.
    pub asb: f64,
    /// The stripe used (node ids).
    pub stripe: Vec<String>,
}

/// A store path the manager would accept (EINVAL here rather than a protocol error).
fn checked(path: &str) -> Result<()> {
    crate::msg::check_path(path).map_err(|reason| PoolError::Refused {
        errno: libc::EINVAL,
        reason: format!("{path:?}: {reason}"),
    })
}

impl PoolClient {
    /// A client with a write buffer of `buffer` bytes.
    pub fn new(net: PoolNet, buffer: u64) -> Result<PoolClient> {
        Ok(PoolClient {
            inner: Arc::new(Inner {
                net,
                mgr: Mutex::new(None),
                buffer: buffer.max(1),
                bytes_sent: Arc::default(),
            }),
        })
    }

    /// Write buffer size in bytes.
    pub fn buffer(&self) -> u64 {
        self.inner.buffer
    }

    /// Bytes of chunk data sent to benefactors by this client (every write).
    pub fn bytes_sent(&self) -> u64 {
        self.inner.bytes_sent.load(Ordering::SeqCst)
    }

    /// The roles' network view.
    pub fn net(&self) -> &PoolNet {
        &self.inner.net
    }

    /// Ask the manager (one connection, reconnected after a failure).
    pub fn ask(&self, req: &Request) -> Result<Reply> {
        // A holder that panicked left the connection out of step: drop it.
        let mut g = self.inner.mgr.lock().unwrap_or_else(|p| {
            let mut g = p.into_inner();
            *g = None;
            g
        });
        if g.is_none() {
            *g = Some(self.inner.net.dial_manager()?);
        }
        let r = ask(g.as_mut().expect("connected"), req);
        if let Err(e) = &r {
            if !matches!(e, PoolError::Refused { .. }) {
                *g = None;
                return Err(PoolError::ManagerDown {
                    addr: self.inner.net.pool.addr.clone(),
                    why: e.to_string(),
                });
            }
        }
        r
    }

    /// The newest committed version of `path`.
    pub fn stat(&self, path: &str) -> Result<Option<FileInfo>> {
        checked(path)?;
        match self.ask(&Request::Stat { path: path.into() })? {
            Reply::File(f) => Ok(f),
            _ => Err(proto("manager", "unexpected reply to stat")),
        }
    }

    /// Files under `prefix`.
    pub fn list(&self, prefix: &str) -> Result<Vec<FileInfo>> {
        match self.ask(&Request::List {
            prefix: prefix.into(),
        })? {
            Reply::Files(f) => Ok(f),
            _ => Err(proto("manager", "unexpected reply to list")),
        }
    }

    /// Remove versions of `path` (all, or one); the number removed.
    pub fn remove(&self, path: &str, version: Option<u64>, crc32c: Option<u32>) -> Result<u64> {
        match self.ask(&Request::Delete {
            path: path.into(),
            version,
            crc32c,
        })? {
            Reply::Deleted(n) => Ok(n),
            _ => Err(proto("manager", "unexpected reply to delete")),
        }
    }

    /// Longevity of files under `prefix`.
    pub fn keep(&self, prefix: &str, versions: Option<u32>, seconds: Option<u64>) -> Result<()> {
        self.ask(&Request::Keep {
            prefix: prefix.into(),
            versions,
            seconds,
        })
        .map(|_| ())
    }

    /// The benefactors.
    pub fn status(&self) -> Result<Vec<BenefactorInfo>> {
        match self.ask(&Request::Status)? {
            Reply::Status(v) => Ok(v),
            _ => Err(proto("manager", "unexpected reply to status")),
        }
    }

    /// Start writing `path` (chunk size: `chunk_size`, or the pool's).
    pub fn create(&self, path: &str, chunk_size: Option<u64>) -> Result<PoolWrite> {
        checked(path)?;
        PoolWrite::open(self.clone(), path, chunk_size)
    }

    /// Write `data` as `path`; the report of the commit.
    pub fn put_bytes(&self, path: &str, data: &[u8], mtime_ns: u64) -> Result<PutReport> {
        let mut w = self.create(path, None)?;
        let cs = w.cs as usize;
        for piece in data.chunks(cs.max(1)) {
            w.write(piece)?;
        }
        w.commit(mtime_ns, 0o644, None)
    }

    /// Read chunk `i` of version `f` from its first live holder that returns the right
    /// bytes; from its drained file when no holder does. Checked against its hash and
    /// CRC32C.
    pub fn read_chunk(&self, f: &FileInfo, i: u64, conns: &mut Conns) -> Result<Vec<u8>> {
        let c = f
            .chunks
            .get(i as usize)
            .ok_or_else(|| proto("manager", "chunk index out of range"))?;
        let mut why: Option<PoolError> = None;
        let mut data = None;
        for (node, alive) in c.holders() {
            if !alive {
                continue;
            }
            match self.fetch(node, &c.hash, conns) {
                Ok(d) if ChunkHash::of(&d) == c.hash => {
                    data = Some(d);
                    break;
                }
                Ok(_) => {
                    tracing::warn!("pool: {}: chunk {i}: wrong bytes from {node}", f.path);
                    why = Some(PoolError::Corrupt {
                        what: format!("{} from benefactor {node}", f.path),
                        chunk: i,
                    });
                }
                Err(e) => {
                    tracing::warn!("pool: {}: chunk {i}: {node}: {e}; trying another copy", f.path);
                    if !matches!(why, Some(PoolError::Corrupt { .. })) {
                        why = Some(e);
                    }
                }
            }
        }
        let data = match data {
            Some(d) => d,
            None => match self.drained(f, i) {
                Some(Ok(d)) => d,
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(match why {
                        Some(e @ PoolError::Corrupt { .. }) => e,
                        _ => PoolError::Lost {
                            path: f.path.clone(),
                            chunk: i,
                            node: c.holders().iter().map(|(n, _)| *n).collect::<Vec<_>>().join(","),
                        },
                    })
                }
            },
        };
        if f.chunk_crc32c.get(i as usize) != Some(&ckptfs_crc::crc32c(&data)) {
            return Err(PoolError::Corrupt {
                what: f.path.clone(),
                chunk: i,
            });
        }
        Ok(data)
    }

    fn drain_dir(&self) -> Option<PathBuf> {
        self.inner
            .net
            .pool
            .drain_dir
            .as_ref()
            .map(|d| self.inner.net.cluster.resolve_path(d))
    }

    fn drained(&self, f: &FileInfo, i: u64) -> Option<Result<Vec<u8>>> {
        let dir = self.drain_dir()?;
        let c = &f.chunks[i as usize];
        let n = ChunkName {
            path: f.path.clone(),
            version: f.version,
            index: i,
            count: f.chunks.len() as u64,
            hash: c.hash.clone(),
            drain: true,
        };
        if !drain::chunk_file(&dir, &n).exists() {
            return None;
        }
        Some(drain::read_chunk(&dir, &n))
    }

    fn fetch(&self, node: &str, hash: &ChunkHash, conns: &mut Conns) -> Result<Vec<u8>> {
        if !conns.contains_key(node) {
            let addr = self.inner.net.benefactor_addr(node)?;
            conns.insert(node.to_string(), self.inner.net.dial(&addr, node)?);
        }
        let conn = conns.get_mut(node).expect("connected");
        let r = get_chunk(conn, &self.inner.net.me, hash);
        if r.is_err() {
            conns.remove(node);
        }
        r
    }

    /// Read the newest version of `path` whole.
    pub fn get_bytes(&self, path: &str) -> Result<(FileInfo, Vec<u8>)> {
        let f = self.stat(path)?.ok_or_else(|| PoolError::Refused {
            errno: libc::ENOENT,
            reason: format!("{path}: no such pool file"),
        })?;
        let mut out = Vec::with_capacity(f.size as usize);
        let mut conns = Conns::new();
        for i in 0..f.chunks.len() as u64 {
            out.extend_from_slice(&self.read_chunk(&f, i, &mut conns)?);
        }
        if ckptfs_crc::crc32c(&out) != f.crc32c || out.len() as u64 != f.size {
            return Err(PoolError::Corrupt {
                what: path.to_string(),
                chunk: 0,
            });
        }
        Ok((f, out))
    }
}
