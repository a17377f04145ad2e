//! Multi-level read: bring drained files back from the destination into the store,
//! checking every chunk against the manifest.
//!
//! A file is written into the store under a temporary name
//! (`.ckptfs-restore.PID.HASH` in the same store directory) and renamed to its real
//! name only when all its bytes matched the manifest, so an application never opens a
//! half-restored checkpoint. Its mode and mtime are set from the manifest, so the agent
//! recognises it as already drained and does not copy it back.

use crate::config::Target;
use crate::error::AgentError;
use crate::manifest::Entry;
use crate::pfs::find::{find_nodes, Found, Walked};
use crate::pfs::read::PfsReader;
use crate::pfs::PfsLevel;
use ckptfs_level::{ChunkReader, Level};
use ckptfs_store::level::crcs_from_chunks;
use ckptfs_store::level::StoreLevel;
use ckptfs_store::{Store, WriteState};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A file brought back.
#[derive(Debug, Clone, Serialize)]
pub struct Restored {
    /// Store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Destination file it came from.
    pub from: PathBuf,
}

/// A file that could not be restored.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreFailure {
    /// Store path.
    pub path: String,
    /// What went wrong.
    pub error: String,
    /// POSIX errno.
    pub errno: i32,
    /// Mismatching chunk (manifest chunk size), if that was the problem.
    pub chunk: Option<u64>,
}

/// What a restore did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RestoreReport {
    /// Files copied into the store.
    pub restored: Vec<Restored>,
    /// Files already in the store with the same content (left alone).
    pub present: Vec<String>,
    /// Files that failed, e.g. a destination file that does not match its manifest.
    pub failed: Vec<RestoreFailure>,
    /// Files only other nodes drained (their manifests), left on the PFS: a restore
    /// takes the files of the nodes it is asked for ([`restore_nodes`]).
    pub skipped: Vec<Skipped>,
}

/// A drained file left out because it belongs to another node.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// Store path.
    pub path: String,
    /// The node whose manifest lists it.
    pub node: String,
}

fn failure(path: String, err: AgentError) -> RestoreFailure {
    // The caller reports failures (the CLI prints each once); Debug formatting keeps a
    // name with a newline on one log line.
    tracing::info!(path = ?path, error = ?err.to_string(), "not restored");
    RestoreFailure {
        path,
        errno: err.errno(),
        chunk: match &err {
            AgentError::Mismatch { chunk, .. } => Some(*chunk),
            _ => None,
        },
        error: err.to_string(),
    }
}

/// Is this exact content already in the store?
fn present(store: &Store, e: &Entry) -> bool {
    let Ok(st) = store.stat(&e.store_path) else {
        return false;
    };
    if st.state != WriteState::Complete || st.size != e.size {
        return false;
    }
    store
        .chunk_list(&e.store_path)
        .ok()
        .and_then(|c| crcs_from_chunks(st.size, store.chunk_size(), &c))
        .is_some_and(|(crc, _)| crc == e.crc32c)
}

/// Bring one file back: the PFS level's reader (every chunk checked against the
/// manifest) into the store level's writer (temporary name, renamed when complete).
fn restore_one(pfs: &PfsLevel, local: &StoreLevel, f: &Found) -> Result<(), AgentError> {
    let r = PfsReader::open(f)?;
    let w = local.put(r.stored())?;
    ckptfs_level::transfer(Box::new(r), w, (pfs.meter(), local.meter()))?;
    Ok(())
}

/// Restore every drained file under store path `prefix` (`/` for all) from `targets`
/// into `store`. Targets are searched in order; the first one holding a file wins, and
/// within one target the most recently drained copy.
///
/// Manifests and data files are restore *input* (docs/design.md, "Threat model:
/// restore input"): every entry is checked before use, files are read only beneath the
/// target, and a manifest, entry or file that fails a check spoils only the files it
/// describes: they are in [`RestoreReport::failed`] (store path and reason), the others
/// are restored. `Err` only for a prefix that is not a store path.
pub fn restore(store: &Store, targets: &[Target], prefix: &str) -> Result<RestoreReport, AgentError> {
    restore_from(store, targets, prefix, None)
}

/// [`restore`] of the files that the nodes `nodes` drained (their manifests), e.g. a
/// node's own id and those it is asked to take over. Files that only other nodes'
/// manifests list are left on the PFS and named in [`RestoreReport::skipped`]: nodes
/// sharing one PFS directory each restore their own files, so one node's memory is not
/// filled with everybody's checkpoints.
pub fn restore_nodes(
    store: &Store,
    targets: &[Target],
    prefix: &str,
    nodes: &[String],
) -> Result<RestoreReport, AgentError> {
    restore_from(store, targets, prefix, Some(nodes))
}

fn restore_from(
    store: &Store,
    targets: &[Target],
    prefix: &str,
    nodes: Option<&[String]>,
) -> Result<RestoreReport, AgentError> {
    let dirs: Vec<PathBuf> = targets.iter().map(|t| t.dir.clone()).collect();
    // The mover in the other direction: PFS level -> store level.
    let pfs = PfsLevel::reading(&dirs);
    let roots: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let Walked((found, failed), skipped) = find_nodes(&roots, prefix, nodes)?;
    let mut rep = RestoreReport {
        failed: failed.into_iter().map(|(p, e)| failure(p, e)).collect(),
        skipped: skipped
            .into_iter()
            .map(|(path, node)| Skipped { path, node })
            .collect(),
        ..Default::default()
    };
    let mut local = None;
    for (path, f) in found {
        if present(store, &f.entry) {
            rep.present.push(path);
            continue;
        }
        let l = match local.take() {
            Some(l) => l,
            None => StoreLevel::new(store)?,
        };
        let r = restore_one(&pfs, &l, &f);
        local = Some(l);
        match r {
            Ok(()) => rep.restored.push(Restored {
                path,
                size: f.entry.size,
                from: f.file(),
            }),
            Err(err) => rep.failed.push(failure(path, err)),
        }
    }
    rep.failed.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(rep)
}

/// Restore one store file from the first destination directory whose manifest has it
/// (the hook for a read-through open in the preload shim), with the checks of
/// [`restore`]. `Ok(false)`: no manifest lists it. `Ok(true)`: it is in the store now
/// (restored, or already there). A refused manifest entry, data file or content is an
/// error.
pub fn restore_path(store: &Store, dests: &[PathBuf], path: &str) -> Result<bool, AgentError> {
    let path = format!("/{}", path.trim_start_matches('/'));
    let pfs = PfsLevel::reading(dests);
    let (mut found, failed) = pfs.found(&path)?;
    let Some(f) = found.remove(&path) else {
        // A refused manifest or entry may have been the one listing it.
        let i = failed.iter().position(|(p, _)| *p == path).unwrap_or(0);
        return match failed.into_iter().nth(i) {
            Some((_, e)) => Err(e),
            None => Ok(false),
        };
    };
    if !present(store, &f.entry) {
        restore_one(&pfs, &StoreLevel::new(store)?, &f)?;
    }
    Ok(true)
}
