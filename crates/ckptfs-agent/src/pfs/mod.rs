//! The PFS directory as a level ([`PfsLevel`]): what the drain publishes, with the
//! node's manifests, and what restore reads back.
//!
//! - `put`: the publish protocol (temporary file, fsync, rename, directory fsync,
//!   manifest: `publish.rs`); its writer takes the mover's gathered writes from several
//!   threads at once (O_DIRECT where aligned). The drain fills the same writer through
//!   its mover and runs the publish steps itself on its commit thread (staged
//!   marshaling: the commit of one file overlaps the writes of the next);
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
use crate::dest::DIRECT_ALIGN;
use crate::dest::{DestIo, PosixDest};
use crate::error::AgentError;
use crate::manifest::{Entry, Manifest};
use crate::pfs::find::{find, Found};
use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, GatherWrite, IoPart, Level, LevelError, LevelKind, Stored, Version,
};
use ckptfs_store::fault::crash_point;
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

impl PfsLevel {
    /// A writer of a new copy of `src` under its temporary name (steps 1-2 of the
    /// publish protocol). Its writes refuse with [`AgentError::Stopped`] once `stop`
    /// says so. `Level::put` is this writer; the drain takes it back after the mover
    /// filled it ([`PfsWriter::into_parts`]) and publishes on its commit thread.
    pub(crate) fn writer<'a>(
        &'a self,
        src: &Stored,
        stop: Option<StopFn<'a>>,
    ) -> Result<PfsWriter<'a>, AgentError> {
        let Some(crc32c) = src.version.crc32c else {
            return Err(AgentError::Changed(src.path.clone()));
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
        let put = self.begin(&src.path, entry.mode, entry.size)?;
        Ok(PfsWriter {
            lvl: self,
            put,
            entry,
            stop,
        })
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
        if src.version.crc32c.is_none() {
            return Err(LevelError::Changed(src.path.clone()));
        }
        Ok(Box::new(self.writer(src, None).map_err(to_level)?))
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

/// Says when a writer's writes should stop (the drain's stop request).
pub(crate) type StopFn<'a> = Box<dyn Fn() -> bool + Send + Sync + 'a>;

/// `Level::put` on the PFS: the publish protocol for one file. It takes writes from
/// several threads at once ([`GatherWrite`]: O_DIRECT where a write is aligned), which
/// is how the mover's gathered writes of the drain reach the temporary file.
pub(crate) struct PfsWriter<'a> {
    lvl: &'a PfsLevel,
    put: PfsPut<'a>,
    entry: Entry,
    stop: Option<StopFn<'a>>,
}

impl<'a> PfsWriter<'a> {
    /// The temporary file and the manifest entry it will get (the drain publishes them
    /// itself, [`PfsLevel::publish`] then [`PfsLevel::record`]).
    pub(crate) fn into_parts(self) -> (PfsPut<'a>, Entry) {
        (self.put, self.entry)
    }
}

impl GatherWrite for PfsWriter<'_> {
    fn write_at(&self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError> {
        if self.stop.as_ref().is_some_and(|s| s()) {
            return Err(to_level(AgentError::Stopped(self.entry.store_path.clone())));
        }
        self.put.write_at(parts, off).map_err(to_level)?;
        crash_point("agent-mid-write");
        Ok(())
    }

    fn align(&self) -> usize {
        if self.put.file().is_direct() {
            DIRECT_ALIGN
        } else {
            1
        }
    }
}

impl ChunkWriter for PfsWriter<'_> {
    fn write_at(&mut self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError> {
        GatherWrite::write_at(&*self, parts, off)
    }

    fn gather(&self) -> Option<&dyn GatherWrite> {
        Some(self)
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
