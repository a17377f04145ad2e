//! Finding drained files in a destination: the manifests under a store path prefix,
//! read beneath the destination root without following symbolic links, each entry
//! with what ties it to the directory it was found in ([`Found`]). The PFS level reads
//! through it; restore (`crate::restore`) brings what it finds back into the store.

use crate::beneath::{valid_component, Dir, Kind};
use crate::error::{AgentError, Refusal};
use crate::manifest::{self, store_path_of, Entry, Manifest};
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;

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
    pub(crate) fn file(&self) -> PathBuf {
        let mut p = self.root.clone();
        p.extend(&self.rel);
        p.push(&self.name);
        p
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

/// Is store path `path` at or below `prefix`?
pub(crate) fn under(path: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || path == p || path.starts_with(&format!("{p}/"))
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
pub(crate) struct Walked(pub(crate) Collected, pub(crate) BTreeMap<String, String>);

impl From<Walk<'_>> for Walked {
    fn from(w: Walk<'_>) -> Walked {
        Walked((w.found, w.failed), w.skipped)
    }
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
