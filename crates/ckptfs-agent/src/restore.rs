//! Multi-level read: bring drained files back from the destination into the store,
//! checking every chunk against the manifest.
//!
//! A file is written into the store under a temporary name
//! (`.ckptfs-restore.PID.HASH` in the same store directory) and renamed to its real
//! name only when all its bytes matched the manifest, so an application never opens a
//! half-restored checkpoint. Its mode and mtime are set from the manifest, so the agent
//! recognises it as already drained and does not copy it back.

use crate::config::Target;
use crate::dest::{DestIo, PosixDest};
use crate::engine::crcs_from_chunks;
use crate::error::AgentError;
use crate::manifest::{self, Entry};
use ckptfs_store::checksum::crc32c;
use ckptfs_store::{OpenFlags, Store, StoreError, WriteState};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Read};
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
}

struct Found {
    file: PathBuf,
    entry: Entry,
}

fn under(path: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || path == p || path.starts_with(&format!("{p}/"))
}

/// Collect manifest entries under `prefix` from one target, walking directories.
fn collect(
    io: &dyn DestIo,
    root: &Path,
    prefix: &str,
    out: &mut BTreeMap<String, Found>,
) -> Result<(), AgentError> {
    let rel = prefix.trim_matches('/');
    let start = root.join(rel);
    let mut stack = vec![start.clone()];
    // The prefix may name a file: its manifest is in the parent directory.
    if let Some(p) = start.parent() {
        if !rel.is_empty() {
            stack.push(p.to_path_buf());
        }
    }
    let mut seen = std::collections::HashSet::new();
    while let Some(dir) = stack.pop() {
        if !seen.insert(dir.clone()) {
            continue;
        }
        let entries = match io.list(&dir) {
            Ok(e) => e,
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => continue,
            Err(e) => return Err(AgentError::dest("list", &dir, e)),
        };
        for m in manifest::load_all(io, &dir)? {
            for (name, e) in m.files {
                if !under(&e.store_path, prefix) {
                    continue;
                }
                let newer = out
                    .get(&e.store_path)
                    .is_none_or(|f| f.entry.drained_ns < e.drained_ns);
                if newer {
                    out.insert(
                        e.store_path.clone(),
                        Found {
                            file: dir.join(&name),
                            entry: e,
                        },
                    );
                }
            }
        }
        if dir.starts_with(&start) {
            for e in entries {
                if e.is_dir {
                    stack.push(dir.join(e.name));
                }
            }
        }
    }
    Ok(())
}

fn mkdir_p(store: &Store, dir: &str) -> Result<(), AgentError> {
    let mut cur = String::new();
    for c in dir.split('/').filter(|c| !c.is_empty()) {
        cur.push('/');
        cur.push_str(c);
        match store.mkdir(&cur, 0o755) {
            Ok(_) | Err(StoreError::Exists(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
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

fn restore_one(store: &Store, io: &dyn DestIo, f: &Found) -> Result<(), AgentError> {
    let e = &f.entry;
    let (dir, name) = match e.store_path.rsplit_once('/') {
        Some((d, n)) if !n.is_empty() => (if d.is_empty() { "/" } else { d }, n),
        _ => {
            return Err(AgentError::Config(format!(
                "bad store path {:?} in manifest",
                e.store_path
            )))
        }
    };
    mkdir_p(store, dir)?;
    let tmp = format!(
        "{}/.ckptfs-restore.{}.{:08x}",
        dir.trim_end_matches('/'),
        std::process::id(),
        crc32c(name.as_bytes())
    );
    let mut src = io
        .open_read(&f.file)
        .map_err(|err| AgentError::dest("open", &f.file, err))?;
    let mut out = store.open(&tmp, OpenFlags::CREATE, e.mode & 0o7777)?;
    let r = (|| {
        let cs = e.chunk_size.max(1) as usize;
        let mut buf = vec![0u8; cs];
        let mut left = e.size;
        for (i, want) in e.chunk_crc32c.iter().enumerate() {
            let n = left.min(cs as u64) as usize;
            src.read_exact(&mut buf[..n])
                .map_err(|err| AgentError::dest("read", &f.file, err))?;
            let got = crc32c(&buf[..n]);
            if got != *want {
                return Err(AgentError::Mismatch {
                    path: f.file.clone(),
                    chunk: i as u64,
                    expected: *want,
                    found: got,
                });
            }
            out.write_all(&buf[..n])?;
            left -= n as u64;
        }
        if left != 0
            || src
                .read(&mut buf[..1])
                .map_err(|err| AgentError::dest("read", &f.file, err))?
                != 0
        {
            return Err(AgentError::Manifest {
                path: f.file.clone(),
                reason: format!("size differs from the manifest's {} bytes", e.size),
            });
        }
        Ok(())
    })();
    let r = r.and_then(|_| out.close().map_err(AgentError::from));
    if let Err(err) = r {
        let _ = store.unlink(&tmp);
        return Err(err);
    }
    store.rename(&tmp, &e.store_path)?;
    store.set_mtime(&e.store_path, e.mtime_ns)?;
    Ok(())
}

/// Restore every drained file under store path `prefix` (`/` for all) from `targets`
/// into `store`. Targets are searched in order; the first one holding a file wins, and
/// within one target the most recently drained copy.
pub fn restore(
    store: &Store,
    io: &dyn DestIo,
    targets: &[Target],
    prefix: &str,
) -> Result<RestoreReport, AgentError> {
    let mut found = BTreeMap::new();
    for t in targets.iter().rev() {
        let mut here = BTreeMap::new();
        collect(io, &t.dir, prefix, &mut here)?;
        found.extend(here);
    }
    let mut rep = RestoreReport::default();
    for (path, f) in found {
        if present(store, &f.entry) {
            rep.present.push(path);
            continue;
        }
        match restore_one(store, io, &f) {
            Ok(()) => rep.restored.push(Restored {
                path,
                size: f.entry.size,
                from: f.file,
            }),
            Err(err) => {
                tracing::error!(%path, error = %err, "restore failed");
                rep.failed.push(RestoreFailure {
                    path,
                    errno: err.errno(),
                    chunk: match &err {
                        AgentError::Mismatch { chunk, .. } => Some(*chunk),
                        _ => None,
                    },
                    error: err.to_string(),
                })
            }
        }
    }
    Ok(rep)
}

/// Restore one store file from the first destination directory whose manifest has it
/// (the hook for a read-through open in the preload shim). `Ok(false)`: no manifest
/// lists it. `Ok(true)`: it is in the store now (restored, or already there).
pub fn restore_path(store: &Store, dests: &[PathBuf], path: &str) -> Result<bool, AgentError> {
    let path = format!("/{}", path.trim_start_matches('/'));
    let io = PosixDest::default();
    let mut found = BTreeMap::new();
    for d in dests.iter().rev() {
        let mut here = BTreeMap::new();
        collect(&io, d, &path, &mut here)?;
        found.extend(here);
    }
    let Some(f) = found.remove(&path) else {
        return Ok(false);
    };
    if !present(store, &f.entry) {
        restore_one(store, &io, &f)?;
    }
    Ok(true)
}
