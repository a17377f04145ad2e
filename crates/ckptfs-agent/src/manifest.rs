//! Per-directory, per-node manifests of drained files.
//!
//! Every destination directory that receives files from node N holds
//! `.ckptfs-manifest.N.json`: the names, sizes, CRC32C of the whole file and of every
//! chunk, mode and mtime of the files N published there. One file per node, so nodes
//! that share a directory never rewrite each other's manifest. A manifest is replaced
//! atomically (temporary name, fsync, rename, directory fsync), so a reader sees either
//! the old or the new version. A file counts as drained only if it is in a manifest.

use crate::dest::{read_all, CreateOpts, DestIo};
use crate::error::AgentError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

/// Format tag written into every manifest.
pub const FORMAT: &str = "ckptfs-manifest/1";
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

    /// Load a manifest; `Ok(None)` if it does not exist.
    pub fn load(io: &dyn DestIo, path: &Path) -> Result<Option<Manifest>, AgentError> {
        let bytes = match read_all(io, path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(AgentError::dest("read", path, e)),
        };
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| AgentError::Manifest {
            path: path.into(),
            reason: e.to_string(),
        })?;
        if m.format != FORMAT {
            return Err(AgentError::Manifest {
                path: path.into(),
                reason: format!("unknown format {:?}", m.format),
            });
        }
        Ok(Some(m))
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
            .write_at(&[IoSlice::new(&text)], 0)
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
