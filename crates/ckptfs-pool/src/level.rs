//! The pool as a storage level (`pool:<manager node>`), and its registry entry.
//!
//! A copy is the newest committed version of a pool file (its [`Version::serial`] is 0:
//! the pool's version numbers are not the source's copy generations). [`Level::put`] writes through a [`PoolWrite`] (the bytes are checked
//! against the source's CRC32C before the commit); a writer dropped uncommitted aborts
//! the write, and its chunks are reclaimed. Reads check every chunk against its BLAKE3
//! hash and CRC32C and fall back to the drained chunk file where the benefactor is lost.

use crate::client::{PoolClient, PoolWrite, PutReport};
use crate::msg::FileInfo;
use crate::{PoolError, PoolNet};
use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, IoPart, Level, LevelError, LevelFactory, LevelId, LevelKind, Stored,
    Version,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The pool level.
pub struct PoolLevel {
    client: PoolClient,
    meter: CostMeter,
    last: Mutex<Option<PutReport>>,
}

impl PoolLevel {
    /// The level over `client`.
    pub fn new(client: PoolClient) -> PoolLevel {
        PoolLevel {
            client,
            meter: CostMeter::new(),
            last: Mutex::new(None),
        }
    }

    /// The report (OAB, ASB, chunks sent) of the last put committed through this level.
    pub fn last_put(&self) -> Option<PutReport> {
        self.last.lock().unwrap().clone()
    }

    /// Its client.
    pub fn client(&self) -> &PoolClient {
        &self.client
    }

    fn stored(f: &FileInfo) -> Stored {
        Stored {
            path: f.path.clone(),
            version: Version {
                ino: 0,
                generation: 0,
                size: f.size,
                mtime_ns: f.mtime_ns,
                crc32c: Some(f.crc32c),
                // The pool's version numbers are its own: the registry orders copies of
                // different levels by serial only where both keep the source's copy
                // generation, so the pool leaves it unknown (mtime decides).
                serial: 0,
            },
            mode: f.mode,
            chunk_size: f.chunk_size,
            chunk_crc32c: f.chunk_crc32c.clone(),
        }
    }
}

fn lerr(e: PoolError) -> LevelError {
    e.into()
}

impl Level for PoolLevel {
    fn kind(&self) -> LevelKind {
        LevelKind::Pool
    }

    fn name(&self) -> String {
        format!("pool:{}", self.client.net().pool.manager)
    }

    fn id(&self) -> LevelId {
        LevelId::new("pool", self.client.net().pool.manager.clone())
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError> {
        let p = if prefix.is_empty() { "/" } else { prefix };
        Ok(self
            .client
            .list(p)
            .map_err(lerr)?
            .iter()
            .map(Self::stored)
            .collect())
    }

    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError> {
        Ok(self.client.stat(path).map_err(lerr)?.as_ref().map(Self::stored))
    }

    fn get<'a>(&'a self, path: &str) -> Result<Box<dyn ChunkReader + 'a>, LevelError> {
        let f = self
            .client
            .stat(path)
            .map_err(lerr)?
            .ok_or_else(|| LevelError::NotFound {
                level: self.name(),
                path: path.to_string(),
            })?;
        Ok(Box::new(PoolReader {
            lvl: self,
            stored: Self::stored(&f),
            f,
            conns: HashMap::new(),
        }))
    }

    fn put<'a>(&'a self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'a>, LevelError> {
        let want = src
            .version
            .crc32c
            .ok_or_else(|| LevelError::Changed(src.path.clone()))?;
        let w = self
            .client
            .create(&src.path, Some(src.chunk_size))
            .map_err(lerr)?;
        Ok(Box::new(PoolWriter {
            lvl: self,
            w: Some(w),
            src: src.clone(),
            want,
            buf: Vec::new(),
        }))
    }

    fn delete(&self, path: &str, want: &Version) -> Result<bool, LevelError> {
        match self.client.stat(path).map_err(lerr)? {
            // The level's copy is the file: every version kept goes with it (an older
            // version must not reappear as the copy).
            Some(f) if Self::stored(&f).version.same_content(want) => {
                Ok(self.client.remove(path, None, None).map_err(lerr)? > 0)
            }
            _ => Ok(false),
        }
    }

    fn meter(&self) -> &CostMeter {
        &self.meter
    }
}

struct PoolReader<'a> {
    lvl: &'a PoolLevel,
    f: FileInfo,
    stored: Stored,
    conns: crate::client::Conns,
}

impl ChunkReader for PoolReader<'_> {
    fn stored(&self) -> &Stored {
        &self.stored
    }

    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let data = self
            .lvl
            .client
            .read_chunk(&self.f, i, &mut self.conns)
            .map_err(|e| match e {
                PoolError::Corrupt { .. } => LevelError::Corrupt {
                    level: self.lvl.name(),
                    path: self.f.path.clone(),
                    chunk: i,
                },
                e => lerr(e),
            })?;
        sink(&[IoPart::Buf(&data)])
    }

    fn finish(self: Box<Self>) -> Result<(), LevelError> {
        Ok(())
    }
}

struct PoolWriter<'a> {
    lvl: &'a PoolLevel,
    w: Option<PoolWrite>,
    src: Stored,
    want: u32,
    buf: Vec<u8>,
}

impl ChunkWriter for PoolWriter<'_> {
    fn write_at(&mut self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError> {
        let w = self.w.as_mut().expect("writer used after commit");
        if off != w.written() {
            return Err(LevelError::backend(
                libc::EINVAL,
                std::io::Error::other(format!(
                    "pool: {}: writes must be sequential (offset {off}, expected {})",
                    self.src.path,
                    w.written()
                )),
            ));
        }
        for p in parts {
            if w.written() + p.len() as u64 > self.src.version.size {
                return Err(LevelError::backend(
                    libc::EINVAL,
                    std::io::Error::other(format!("pool: write past the size of {}", self.src.path)),
                ));
            }
            self.buf.clear();
            p.extend_vec(&mut self.buf);
            w.write(&self.buf).map_err(lerr)?;
        }
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> Result<Stored, LevelError> {
        let w = self.w.take().expect("commit once");
        if w.written() != self.src.version.size {
            return Err(LevelError::Changed(self.src.path.clone()));
        }
        let r = w.commit(self.src.version.mtime_ns, self.src.mode, Some(self.want));
        match r {
            Ok(rep) => {
                *self.lvl.last.lock().unwrap() = Some(rep.clone());
                match self.lvl.client.stat(&self.src.path).map_err(lerr)? {
                    Some(f) if f.version == rep.version => Ok(PoolLevel::stored(&f)),
                    _ => Err(LevelError::Changed(self.src.path.clone())),
                }
            }
            Err(PoolError::Corrupt { .. }) => Err(LevelError::Corrupt {
                level: "pool".into(),
                path: self.src.path.clone(),
                chunk: 0,
            }),
            Err(e) => Err(lerr(e)),
        }
    }
}

/// The registry entry of the pool: `pool:<manager node>`, options `cluster` (the
/// cluster file), `node` (this node's id), `buffer` (write buffer bytes).
#[derive(Debug, Default, Clone, Copy)]
pub struct PoolFactory;

impl LevelFactory for PoolFactory {
    fn kind(&self) -> &'static str {
        "pool"
    }

    fn open(&self, id: &LevelId, options: &BTreeMap<String, String>) -> Result<Arc<dyn Level>, LevelError> {
        let bad = |m: String| LevelError::backend(libc::EINVAL, std::io::Error::other(m));
        let file = options.get("cluster").ok_or_else(|| {
            bad(format!(
                "level {id}: option cluster (the cluster file) is required"
            ))
        })?;
        let cluster =
            ckptfs_cluster::Cluster::load(std::path::Path::new(file)).map_err(|e| bad(e.to_string()))?;
        let manager = cluster
            .pool
            .as_ref()
            .map(|p| p.manager.clone())
            .unwrap_or_default();
        if manager != id.instance {
            return Err(bad(format!(
                "level {id}: the cluster map's pool manager is {manager:?}"
            )));
        }
        let node = options
            .get("node")
            .cloned()
            .or_else(|| std::env::var("CKPTFS_NODE_ID").ok())
            .unwrap_or(manager);
        let buffer = options
            .get("buffer")
            .and_then(|b| b.parse().ok())
            .unwrap_or(64 << 20);
        let net = PoolNet::client(&cluster, &node).map_err(lerr)?;
        Ok(Arc::new(PoolLevel::new(
            PoolClient::new(net, buffer).map_err(lerr)?,
        )))
    }
}
