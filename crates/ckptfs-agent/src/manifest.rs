//! Per-directory, per-node manifests of drained files.
//!
//! Every destination directory that receives files from node N holds
//! `.ckptfs-manifest.N.json`: the names, sizes, CRC32C of the whole file and of every
//! chunk, mode and mtime of the files N published there. One file per node, so nodes
//! that share a directory never rewrite each other's manifest. A manifest is replaced
//! atomically (temporary name, fsync, rename, directory fsync), so a reader sees either
//! the old or the new version. A file counts as drained only if it is in a manifest.

use crate::dest::IoPart;
use crate::dest::{CreateOpts, DestIo};
use crate::error::AgentError;
pub use crate::manifest_error::{EntryError, ManifestError, FORMAT, MAX_BYTES};
use ckptfs_store::layout::{MAX_CHUNK, MIN_CHUNK};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

const PREFIX: &str = ".ckptfs-manifest.";
const SUFFIX: &str = ".json";

/// One drained file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Store path it was drained from.
    pub store_path: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC32C of the whole file.
    pub crc32c: u32,
    /// Chunk size of `chunk_crc32c`.
    pub chunk_size: u64,
    /// CRC32C of each `chunk_size` piece of the file (the last one may be shorter).
    pub chunk_crc32c: Vec<u32>,
    /// Permission bits.
    pub mode: u32,
    /// Modification time in the store, ns since the epoch.
    pub mtime_ns: u64,
    /// When it was published, ns since the epoch.
    pub drained_ns: u64,
}

/// The manifest of one node in one destination directory.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Node id of the agent that wrote it.
    pub node: String,
    /// Store name it drained from.
    pub store: String,
    /// Files by name.
    pub files: BTreeMap<String, Entry>,
}

/// File name of node `node`'s manifest.
pub fn file_name(node: &str) -> String {
    format!("{PREFIX}{node}{SUFFIX}")
}

/// Is `name` a manifest file name? Returns the node id.
pub fn node_of(name: &str) -> Option<&str> {
    name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)
}

impl Manifest {
    /// An empty manifest.
    pub fn new(node: &str, store: &str) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            node: node.into(),
            store: store.into(),
            files: BTreeMap::new(),
        }
    }

    /// Load a manifest; `Ok(None)` if it does not exist. At most [`MAX_BYTES`] are read.
    pub fn load(io: &dyn DestIo, path: &Path) -> Result<Option<Manifest>, AgentError> {
        let mut bytes = Vec::new();
        let r = io
            .open_read(path)
            .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes));
        match r {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(AgentError::dest("read", path, e)),
        }
        parse(&bytes).map(Some).map_err(|reason| AgentError::Manifest {
            path: path.into(),
            reason,
        })
    }

    /// Replace the manifest in `dir` atomically and durably.
    pub fn save(&self, io: &dyn DestIo, dir: &Path) -> Result<(), AgentError> {
        let path = dir.join(file_name(&self.node));
        let tmp = PathBuf::from(format!("{}.tmp", path.display()));
        let mut text = serde_json::to_vec_pretty(self).expect("manifest serializes");
        text.push(b'\n');
        match io.remove(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(AgentError::dest("remove", &tmp, e)),
            _ => {}
        }
        let f = io
            .create(
                &tmp,
                &CreateOpts {
                    mode: 0o644,
                    ..Default::default()
                },
            )
            .map_err(|e| AgentError::dest("create", &tmp, e))?;
        let r = f
            .write_at(&[IoPart::Buf(&text)], 0)
            .map_err(|e| AgentError::dest("write", &tmp, e))
            .and_then(|_| f.sync().map_err(|e| AgentError::dest("fsync", &tmp, e)));
        drop(f);
        if let Err(e) = r {
            let _ = io.remove(&tmp);
            return Err(e);
        }
        ckptfs_store::fault::crash_point("agent-manifest-before-rename");
        io.rename(&tmp, &path)
            .map_err(|e| AgentError::dest("rename", &path, e))?;
        io.sync_dir(dir).map_err(|e| AgentError::dest("fsync", dir, e))
    }
}

/// Every manifest in a destination directory, with its node id.
pub fn load_all(io: &dyn DestIo, dir: &Path) -> Result<Vec<Manifest>, AgentError> {
    let entries = match io.list(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(AgentError::dest("list", dir, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        if !e.is_dir && node_of(&e.name).is_some() {
            if let Some(m) = Manifest::load(io, &dir.join(&e.name))? {
                out.push(m);
            }
        }
    }
    Ok(out)
}

/// Parse a manifest's bytes. Any input gives a manifest or a [`ManifestError`], never a
/// panic (fuzzed in tests/manifest_fuzz.rs). Entries are checked separately
/// ([`check_entry`]) so that one bad entry spoils only itself.
pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(ManifestError::TooLarge { max: MAX_BYTES });
    }
    let m: Manifest = serde_json::from_slice(bytes).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        match e.classify() {
            serde_json::error::Category::Eof => ManifestError::Truncated { line, column },
            serde_json::error::Category::Data => ManifestError::Fields { line, column },
            _ => ManifestError::Syntax { line, column },
        }
    })?;
    if m.format != FORMAT {
        return Err(ManifestError::Format);
    }
    Ok(m)
}

/// The store path a file named `name` in the destination directory `rel` (relative to
/// the target, components joined by `/`, empty for the target itself) was drained
/// from: the drain publishes store file `/a/b/c` as `TARGET/a/b/c`, listed as `c` in
/// the manifests of `TARGET/a/b`, so the directory decides the store path.
pub fn store_path_of(rel: &str, name: &str) -> String {
    let rel = rel.trim_matches('/');
    if rel.is_empty() {
        format!("/{name}")
    } else {
        format!("/{rel}/{name}")
    }
}

/// Check one entry of a manifest found in destination directory `rel` (see
/// [`store_path_of`]) before anything is read or allocated for it: a single-component
/// name, the store path tied to the directory, chunk size within the store's legal
/// range, as many chunk CRCs as the size needs, the whole-file CRC consistent with them,
/// a permission mode.
pub fn check_entry(rel: &str, name: &str, e: &Entry) -> Result<(), EntryError> {
    if !crate::beneath::valid_component(name) {
        return Err(EntryError::Name);
    }
    let expected = store_path_of(rel, name);
    if e.store_path != expected {
        return Err(EntryError::StorePath {
            found: e.store_path.clone(),
            expected,
        });
    }
    if !e.chunk_size.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&e.chunk_size) {
        return Err(EntryError::ChunkSize(e.chunk_size));
    }
    if e.size > i64::MAX as u64 {
        return Err(EntryError::Size(e.size));
    }
    let n = e.size.div_ceil(e.chunk_size);
    if e.chunk_crc32c.len() as u64 != n {
        return Err(EntryError::ChunkCount {
            found: e.chunk_crc32c.len(),
            expected: n,
            size: e.size,
            chunk_size: e.chunk_size,
        });
    }
    let mut crc = 0u32;
    for (i, c) in e.chunk_crc32c.iter().enumerate() {
        let len = (e.size - i as u64 * e.chunk_size).min(e.chunk_size);
        crc = ckptfs_level::crc::crc_combine(crc, *c, len);
    }
    if crc != e.crc32c {
        return Err(EntryError::FileCrc);
    }
    if e.mode & !0o7777 != 0 {
        return Err(EntryError::Mode(e.mode));
    }
    Ok(())
}
