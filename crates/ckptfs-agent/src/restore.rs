//! Multi-level read: bring drained files back from the destination into the store,
//! checking every chunk against the manifest.
//!
//! A file is written into the store under a temporary name
//! (`.ckptfs-restore.PID.HASH` in the same store directory) and renamed to its real
//! name only when all its bytes matched the manifest, so an application never opens a
//! half-restored checkpoint. Its mode and mtime are set from the manifest, so the agent
//! recognises it as already drained and does not copy it back.

use crate::beneath::{valid_component, Dir, Kind};
use crate::config::Target;
use crate::error::{AgentError, Refusal};
use crate::manifest::{self, store_path_of, Entry, Manifest};
use crate::pfs::read::PfsReader;
use crate::pfs::PfsLevel;
use ckptfs_level::{ChunkReader, Level};
use ckptfs_store::level::crcs_from_chunks;
use ckptfs_store::level::StoreLevel;
use ckptfs_store::{Store, WriteState};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;

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

/// One manifest entry chosen for restore, with what ties it to where it was found.
pub(crate) struct Found {
    /// Destination root it was found under.
    pub(crate) root: PathBuf,
    /// Directory components below the root (the store directory).
    pub(crate) rel: Vec<String>,
    /// Device and inode of that directory when the manifest was read.
    pub(crate) dir_id: (u64, u64),
    /// Owner of the manifest: the data file must have the same.
    pub(crate) manifest_uid: u32,
    /// The entry's key: the data file's name in that directory.
    pub(crate) name: String,
    pub(crate) entry: Entry,
}

impl Found {
    fn file(&self) -> PathBuf {
        let mut p = self.root.clone();
        p.extend(&self.rel);
        p.push(&self.name);
        p
    }
}

fn under(path: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || path == p || path.starts_with(&format!("{p}/"))
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

/// What an open or a type check of a destination entry refused, as an error.
pub(crate) fn open_error(op: &'static str, path: &Path, e: io::Error) -> AgentError {
    let reason = match e.raw_os_error() {
        Some(libc::ELOOP) => Some(Refusal::Symlink),
        Some(libc::EISDIR) => Some(Refusal::NotRegular),
        None if e.kind() == io::ErrorKind::InvalidInput => Some(Refusal::NotRegular),
        _ => None,
    };
    match reason {
        Some(reason) => AgentError::Refused {
            path: path.into(),
            reason,
        },
        None => AgentError::dest(op, path, e),
    }
}

/// Open subdirectory `name` of `dir` without following a symbolic link. `Ok(None)`: it
/// does not exist or is not a directory.
pub(crate) fn open_sub(dir: &Dir, name: &str, path: &Path) -> Result<Option<Dir>, AgentError> {
    match dir.open_dir(name) {
        Ok(d) => Ok(Some(d)),
        Err(e) => match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            Some(libc::ENOTDIR | libc::ELOOP) => match dir.kind(name) {
                Ok(Kind::Symlink) => Err(AgentError::Refused {
                    path: path.into(),
                    reason: Refusal::Symlink,
                }),
                _ => Ok(None),
            },
            _ => Err(AgentError::dest("open", path, e)),
        },
    }
}

/// One destination root being searched.
struct Walk<'a> {
    root: &'a Path,
    prefix: &'a str,
    /// Only the manifests of these nodes (all with `None`).
    nodes: Option<&'a [String]>,
    found: BTreeMap<String, Found>,
    failed: Vec<(String, AgentError)>,
    /// Store paths listed only by other nodes' manifests, with the node.
    skipped: BTreeMap<String, String>,
}

impl Walk<'_> {
    /// Read the manifests of one directory (`rel` below the root) and check every entry.
    fn scan(&mut self, dir: &Dir, rel: &[String], entries: &[(String, Kind)]) {
        let rel_s = rel.join("/");
        let dir_id = match dir.ident() {
            Ok(i) => (i.dev, i.ino),
            Err(e) => {
                let p = self.root.join(&rel_s);
                self.failed
                    .push((store_path_of(&rel_s, ""), AgentError::dest("stat", &p, e)));
                return;
            }
        };
        for (mname, kind) in entries {
            let Some(node) = manifest::node_of(mname) else {
                continue;
            };
            let mpath = self.root.join(&rel_s).join(mname);
            if *kind == Kind::Dir {
                continue;
            }
            let wanted = self.nodes.is_none_or(|ns| ns.iter().any(|n| n == node));
            // A symbolic link, FIFO or device named like a manifest is refused by `load`.
            let (m, uid) = match load(dir, mname, &mpath) {
                Ok(x) => x,
                Err(e) => {
                    self.failed.push((store_path_of(&rel_s, mname), e));
                    continue;
                }
            };
            for (name, e) in m.files {
                let sp = store_path_of(&rel_s, &name);
                if !under(&sp, self.prefix) {
                    continue;
                }
                if !wanted {
                    self.skipped.entry(sp).or_insert_with(|| node.to_string());
                    continue;
                }
                if let Err(reason) = manifest::check_entry(&rel_s, &name, &e) {
                    let err = AgentError::BadEntry {
                        manifest: mpath.clone(),
                        name,
                        reason,
                    };
                    self.failed.push((sp, err));
                    continue;
                }
                let newer = self
                    .found
                    .get(&sp)
                    .is_none_or(|f| f.entry.drained_ns < e.drained_ns);
                if newer {
                    self.found.insert(
                        sp,
                        Found {
                            root: self.root.to_path_buf(),
                            rel: rel.to_vec(),
                            dir_id,
                            manifest_uid: uid,
                            name,
                            entry: e,
                        },
                    );
                }
            }
        }
    }

    /// Scan `dir` and, if `recurse`, every real directory below it (symbolic links to
    /// directories are not followed).
    fn walk(&mut self, dir: Dir, rel: Vec<String>, recurse: bool) {
        // Depth first; a subdirectory is opened only when it is its turn (through its
        // parent's descriptor, kept alive by the pending children), so at most one
        // directory per level is open however wide the tree is.
        let mut stack = vec![(Pending::Open(dir), rel)];
        while let Some((pending, rel)) = stack.pop() {
            let dir = match pending {
                Pending::Open(d) => Rc::new(d),
                Pending::Sub(parent, name) => {
                    let p = self.root.join(rel.join("/"));
                    match open_sub(&parent, &name, &p) {
                        Ok(Some(d)) => Rc::new(d),
                        Ok(None) => continue,
                        // Replaced by a symbolic link since the listing: not followed,
                        // and nothing there belongs to the drain layout.
                        Err(AgentError::Refused { .. }) => continue,
                        Err(e) => {
                            self.failed.push((store_path_of(&rel.join("/"), ""), e));
                            continue;
                        }
                    }
                }
            };
            let entries = match dir.entries() {
                Ok(e) => e,
                Err(e) => {
                    let p = self.root.join(rel.join("/"));
                    self.failed
                        .push((store_path_of(&rel.join("/"), ""), AgentError::dest("list", &p, e)));
                    continue;
                }
            };
            self.scan(&dir, &rel, &entries);
            if !recurse {
                continue;
            }
            for (name, kind) in entries.into_iter().rev() {
                if kind == Kind::Dir {
                    let mut sub = rel.clone();
                    sub.push(name.clone());
                    stack.push((Pending::Sub(dir.clone(), name), sub));
                }
            }
        }
    }
}

/// A directory still to be scanned.
enum Pending {
    Open(Dir),
    /// Subdirectory `name` of an open directory.
    Sub(Rc<Dir>, String),
}

/// Open and parse manifest `name` of `dir`: a regular file (no symbolic link, no FIFO),
/// at most [`manifest::MAX_BYTES`]. Returns it with its owner.
fn load(dir: &Dir, name: &str, path: &Path) -> Result<(Manifest, u32), AgentError> {
    let (f, id) = dir.open_file(name).map_err(|e| open_error("open", path, e))?;
    if id.size > manifest::MAX_BYTES {
        return Err(AgentError::Manifest {
            path: path.into(),
            reason: manifest::ManifestError::TooLarge {
                max: manifest::MAX_BYTES,
            },
        });
    }
    let mut bytes = Vec::with_capacity(id.size as usize);
    f.take(manifest::MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| AgentError::dest("read", path, e))?;
    let m = manifest::parse(&bytes).map_err(|reason| AgentError::Manifest {
        path: path.into(),
        reason,
    })?;
    Ok((m, id.uid))
}

/// The components of a store path prefix (`..` refused: restore stays beneath each
/// destination root).
fn components(prefix: &str) -> Result<Vec<String>, AgentError> {
    let mut out = Vec::new();
    for c in prefix.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if !valid_component(c) {
            return Err(AgentError::Config(format!(
                "store path {prefix:?}: {c:?} is not a file name"
            )));
        }
        out.push(c.to_string());
    }
    Ok(out)
}

/// Collect the manifest entries under store path `prefix` (components `comps`) from
/// one destination root: the directory the prefix names and everything below it, and
/// the manifests of its parent (the prefix may name a file).
pub(crate) type Collected = (BTreeMap<String, Found>, Vec<(String, AgentError)>);

fn collect(root: &Path, prefix: &str, comps: &[String], nodes: Option<&[String]>) -> Walked {
    let mut w = Walk {
        root,
        prefix,
        nodes,
        found: BTreeMap::new(),
        failed: Vec::new(),
        skipped: BTreeMap::new(),
    };
    let mut dir = match Dir::open_root(root) {
        Ok(d) => d,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return w.into(),
        Err(e) => {
            w.failed
                .push((prefix.to_string(), AgentError::dest("open", root, e)));
            return w.into();
        }
    };
    let mut rel = Vec::new();
    for (i, c) in comps.iter().enumerate() {
        let p = root.join(comps[..=i].join("/"));
        let sub = match open_sub(&dir, c, &p) {
            Ok(s) => s,
            Err(e) => {
                w.failed.push((prefix.to_string(), e));
                return w.into();
            }
        };
        if i + 1 == comps.len() {
            // The parent's manifests list the prefix if it names a file.
            w.walk(dir, rel.clone(), false);
            if let Some(d) = sub {
                rel.push(c.clone());
                w.walk(d, rel, true);
            }
            return w.into();
        }
        let Some(d) = sub else {
            return w.into();
        };
        dir = d;
        rel.push(c.clone());
    }
    w.walk(dir, rel, true);
    w.into()
}

/// What one root gave: usable entries, refused ones, and other nodes' paths.
pub(crate) struct Walked(Collected, BTreeMap<String, String>);

impl From<Walk<'_>> for Walked {
    fn from(w: Walk<'_>) -> Walked {
        Walked((w.found, w.failed), w.skipped)
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

/// Find what to restore under `prefix` in `dirs` (searched in order: the first one
/// holding a store path wins; within one, the most recently drained copy).
pub(crate) fn find(dirs: &[&Path], prefix: &str) -> Result<Collected, AgentError> {
    find_nodes(dirs, prefix, None).map(|w| w.0)
}

/// [`find`] over the manifests of `nodes` only (all with `None`); also returns the
/// store paths only other nodes' manifests list (path -> node).
pub(crate) fn find_nodes(
    dirs: &[&Path],
    prefix: &str,
    nodes: Option<&[String]>,
) -> Result<Walked, AgentError> {
    let comps = components(prefix)?;
    let prefix = format!("/{}", comps.join("/"));
    let mut found = BTreeMap::new();
    let mut failed = Vec::new();
    let mut skipped = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    let dirs: Vec<&Path> = dirs.iter().copied().filter(|d| seen.insert(*d)).collect();
    for d in dirs.iter().rev() {
        let Walked((here, bad), other) = collect(d, &prefix, &comps, nodes);
        found.extend(here);
        failed.extend(bad);
        skipped.extend(other);
    }
    skipped.retain(|p, _| !found.contains_key(p));
    Ok(Walked((found, failed), skipped))
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
