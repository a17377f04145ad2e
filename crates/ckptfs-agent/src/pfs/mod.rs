//! The PFS directory as a level ([`PfsLevel`]): what the drain publishes, with the
//! node's manifests, and what restore reads back.
//!
//! - `put`: the publish protocol (temporary file, fsync, rename, directory fsync,
//!   manifest: `publish.rs`); the drain engine drives the same steps with its IO threads
//!   and staged marshaling (it is the PFS path of the mover);
//! - `get`: a manifest entry's data file read beneath the destination root, every
//!   chunk checked against the manifest (`read.rs`);
//! - `list`/`stat`: the manifest entries that pass restore's checks (the search over
//!   the roots is restore's: the first root holding a path wins, and within one root the
//!   most recently drained copy);
//! - `verify`: read back and check every chunk; `delete`: drop the manifest entry
//!   (saved atomically), then the file.

pub(crate) mod find;
pub(crate) mod publish;
pub(crate) mod read;

use crate::config::{hostname_node_id, Target};
use crate::dest::{DestIo, PosixDest};
use crate::error::AgentError;
use crate::manifest::{Entry, Manifest};
use crate::pfs::find::{find, Found};
use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, IoPart, Level, LevelError, LevelKind, Stored, Version,
};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub use publish::PfsPut;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A PFS destination as a level: one write target (this node's, by vertical
/// placement) and the roots searched when reading (in order).
pub struct PfsLevel {
    pub(crate) target: Target,
    roots: Vec<PathBuf>,
    pub(crate) io: Arc<dyn DestIo>,
    pub(crate) node: String,
    pub(crate) store_name: String,
    pub(crate) direct: bool,
    pub(crate) manifests: Mutex<HashMap<PathBuf, Manifest>>,
    pub(crate) dirs_ready: Mutex<HashSet<PathBuf>>,
    meter: CostMeter,
}

impl std::fmt::Debug for PfsLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PfsLevel").field("target", &self.target).finish()
    }
}

impl PfsLevel {
    /// Node `node`'s files of store `store_name` written to `target` through `io`
    /// (`direct`: O_DIRECT for aligned writes) and read back from `target`.
    pub fn new(target: Target, io: Arc<dyn DestIo>, node: &str, store_name: &str, direct: bool) -> PfsLevel {
        PfsLevel {
            roots: vec![target.dir.clone()],
            target,
            io,
            node: node.to_string(),
            store_name: store_name.to_string(),
            direct,
            manifests: Mutex::new(HashMap::new()),
            dirs_ready: Mutex::new(HashSet::new()),
            meter: CostMeter::new(),
        }
    }

    /// For reading (restore): `dirs` searched in order; writes would go to the first.
    pub fn reading(dirs: &[PathBuf]) -> PfsLevel {
        let first = Target {
            dir: dirs.first().cloned().unwrap_or_default(),
            ost: None,
        };
        let mut l = PfsLevel::new(
            first,
            Arc::new(PosixDest::default()),
            &hostname_node_id(),
            "",
            false,
        );
        l.roots = dirs.to_vec();
        l
    }

    /// The write target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    fn roots(&self) -> Vec<&Path> {
        self.roots.iter().map(PathBuf::as_path).collect()
    }

    /// The usable manifest entries under `prefix`, and the refused ones with why.
    pub(crate) fn found(&self, prefix: &str) -> Result<self::find::Collected, AgentError> {
        find(&self.roots(), prefix)
    }

    fn found_one(&self, path: &str) -> Result<Option<Found>, LevelError> {
        let path = format!("/{}", path.trim_start_matches('/'));
        let (mut found, _) = self.found(&path).map_err(to_level)?;
        Ok(found.remove(&path))
    }
}

/// An agent error as a level error (kept whole, errno preserved).
pub(crate) fn to_level(e: AgentError) -> LevelError {
    LevelError::backend(e.errno(), e)
}

impl Level for PfsLevel {
    fn kind(&self) -> LevelKind {
        LevelKind::Pfs
    }

    fn name(&self) -> String {
        format!("pfs:{}", self.target.dir.display())
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError> {
        let (found, _) = self.found(prefix).map_err(to_level)?;
        Ok(found.values().map(|f| read::stored_of(&f.entry)).collect())
    }

    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError> {
        Ok(self.found_one(path)?.map(|f| read::stored_of(&f.entry)))
    }

    fn get<'a>(&'a self, path: &str) -> Result<Box<dyn ChunkReader + 'a>, LevelError> {
        let f = self.found_one(path)?.ok_or_else(|| LevelError::NotFound {
            level: self.name(),
            path: path.to_string(),
        })?;
        Ok(Box::new(read::PfsReader::open(&f).map_err(to_level)?))
    }

    fn put<'a>(&'a self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'a>, LevelError> {
        let Some(crc32c) = src.version.crc32c else {
            return Err(LevelError::Changed(src.path.clone()));
        };
        let entry = Entry {
            store_path: src.path.clone(),
            size: src.version.size,
            crc32c,
            chunk_size: src.chunk_size,
            chunk_crc32c: src.chunk_crc32c.clone(),
            mode: src.mode & 0o777,
            mtime_ns: src.version.mtime_ns,
            drained_ns: 0,
        };
        let put = self.begin(&src.path, entry.mode, entry.size).map_err(to_level)?;
        Ok(Box::new(PfsWriter {
            lvl: self,
            put,
            entry,
        }))
    }

    fn delete(&self, path: &str, want: &Version) -> Result<bool, LevelError> {
        let Some((e, _)) = self.published(path).map_err(to_level)? else {
            return Ok(false);
        };
        if !read::stored_of(&e).version.same_content(want) {
            return Ok(false);
        }
        let dest = self.dest_of(path);
        let dir = dest.parent().expect("store paths have a parent").to_path_buf();
        let name = dest
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        // The entry goes first: a manifest never lists a file that is not there.
        self.with_manifest(&dir, |m| {
            m.files.remove(&name);
            m.save(&*self.io, &dir)
        })
        .and_then(|r| r)
        .map_err(to_level)?;
        match self.io.remove(&dest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(to_level(AgentError::dest("remove", &dest, e))),
        }
        self.io
            .sync_dir(&dir)
            .map_err(|e| to_level(AgentError::dest("fsync", &dir, e)))?;
        Ok(true)
    }

    fn meter(&self) -> &CostMeter {
        &self.meter
    }
}

/// `Level::put` on the PFS: the publish protocol for one file.
struct PfsWriter<'a> {
    lvl: &'a PfsLevel,
    put: PfsPut<'a>,
    entry: Entry,
}

impl ChunkWriter for PfsWriter<'_> {
    fn write_at(&mut self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError> {
        self.put.write_at(parts, off).map_err(to_level)
    }

    fn commit(self: Box<Self>) -> Result<Stored, LevelError> {
        let stored = read::stored_of(&self.entry);
        let r = self
            .lvl
            .publish(self.put, self.entry, || Ok(()))
            .map_err(to_level)?;
        self.lvl.record(std::slice::from_ref(&r)).map_err(to_level)?;
        Ok(stored)
    }
}

/// The registry entry of a PFS directory named in the settings' `[levels]` order:
/// `pfs:/DIR`, read as restore reads a drain destination (manifests beneath `DIR`, every
/// node's). No options. (`pfs` without a directory, the drain destinations of `--dest`
/// and `CKPTFS_DEST`, is read by the front-ends' restore itself.)
#[derive(Debug, Default, Clone, Copy)]
pub struct PfsFactory;

impl ckptfs_level::LevelFactory for PfsFactory {
    fn kind(&self) -> &'static str {
        "pfs"
    }

    fn open(
        &self,
        id: &ckptfs_level::LevelId,
        _options: &std::collections::BTreeMap<String, String>,
    ) -> Result<Arc<dyn Level>, LevelError> {
        if !id.instance.starts_with('/') {
            return Err(LevelError::backend(
                libc::EINVAL,
                std::io::Error::other(format!("level {id}: needs an absolute directory (pfs:/DIR)")),
            ));
        }
        Ok(Arc::new(PfsLevel::reading(&[PathBuf::from(&id.instance)])))
    }
}
