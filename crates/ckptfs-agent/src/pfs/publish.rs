//! The PFS level's write side: temporary files, the publish protocol (fsync, rename,
//! directory fsync) and the node's manifest in each directory (docs/agent.md, "Publish
//! protocol"). The drain engine streams a file's blocks into a [`PfsPut`] with its IO
//! threads and publishes it here; [`super::PfsLevel`]'s `Level::put` is the same path
//! for one file at a time.

use super::PfsLevel;
use crate::dest::{CreateOpts, DestFile, DestIo, IoPart};
use crate::error::AgentError;
use crate::manifest::{self, Entry, Manifest};
use crate::sys;
use ckptfs_settings::now_ns;
use ckptfs_store::fault::crash_point;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Temporary names are `.ckptfs-tmp.NODE.PID.HASH` (fixed length, so long names fit).
pub(crate) fn tmp_prefix(node: &str) -> String {
    format!(".ckptfs-tmp.{node}.")
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Removes the temporary file unless disarmed (the file was renamed into place).
pub(crate) struct TmpGuard<'a> {
    io: &'a dyn DestIo,
    pub(crate) path: PathBuf,
    armed: bool,
}

impl Drop for TmpGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.io.remove(&self.path);
        }
    }
}

/// A file being written under its temporary name (not yet durable, not visible).
pub struct PfsPut<'a> {
    pub(crate) f: Box<dyn DestFile>,
    pub(crate) guard: TmpGuard<'a>,
    pub(crate) dest: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) name: String,
    pub(crate) t0: Instant,
}

impl PfsPut<'_> {
    /// The temporary file's path.
    pub fn tmp(&self) -> &Path {
        &self.guard.path
    }

    /// The destination file.
    pub fn file(&self) -> &dyn DestFile {
        &*self.f
    }

    /// Write `parts` at `off` of the temporary file.
    pub fn write_at(&self, parts: &[IoPart<'_>], off: u64) -> Result<(), AgentError> {
        self.f
            .write_at(parts, off)
            .map_err(|e| AgentError::dest("write", &self.guard.path, e))
    }
}

/// A file renamed into place but not yet in the manifest.
pub(crate) struct Renamed {
    pub(crate) dest: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) name: String,
    pub(crate) entry: Entry,
    pub(crate) t0: Instant,
}

impl PfsLevel {
    /// The destination file of store path `path`.
    pub(crate) fn dest_of(&self, path: &str) -> PathBuf {
        self.target.dir.join(path.trim_start_matches('/'))
    }

    /// Run `f` on the node's manifest of `dir` (read on first use, then cached).
    pub(crate) fn with_manifest<R>(
        &self,
        dir: &Path,
        f: impl FnOnce(&mut Manifest) -> R,
    ) -> Result<R, AgentError> {
        let mut ms = super::lock(&self.manifests);
        if !ms.contains_key(dir) {
            let m = Manifest::load(&*self.io, &dir.join(manifest::file_name(&self.node)))?
                .unwrap_or_else(|| Manifest::new(&self.node, &self.store_name));
            ms.insert(dir.to_path_buf(), m);
        }
        Ok(f(ms.get_mut(dir).expect("just inserted")))
    }

    /// The manifest entry of store path `path`, and whether its file is there with the
    /// entry's size. Reads no data.
    pub(crate) fn published(&self, path: &str) -> Result<Option<(Entry, bool)>, AgentError> {
        let dest = self.dest_of(path);
        let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
            return Ok(None);
        };
        let name = name.to_string_lossy().into_owned();
        let Some(e) = self.with_manifest(dir, |m| m.files.get(&name).cloned())? else {
            return Ok(None);
        };
        let there = self.io.len(&dest).ok() == Some(e.size);
        Ok(Some((e, there)))
    }

    /// Create `dir` and its missing parents durably; remove our node's temporary files
    /// left there by a killed agent (once per directory per run).
    pub(crate) fn prepare_dir(&self, dir: &Path) -> Result<(), AgentError> {
        if super::lock(&self.dirs_ready).contains(dir) {
            return Ok(());
        }
        let mut missing = Vec::new();
        let mut cur = dir;
        loop {
            match self.io.len(cur) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    missing.push(cur.to_path_buf());
                    match cur.parent() {
                        Some(p) if !p.as_os_str().is_empty() => cur = p,
                        _ => break,
                    }
                }
                Err(e) => return Err(AgentError::dest("stat", cur, e)),
            }
        }
        for d in missing.iter().rev() {
            match self.io.mkdir(d) {
                Ok(()) => {
                    if let Some(p) = d.parent() {
                        self.io.sync_dir(p).map_err(|e| AgentError::dest("fsync", p, e))?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(AgentError::dest("mkdir", d, e)),
            }
        }
        let prefix = tmp_prefix(&self.node);
        for e in self.io.list(dir).map_err(|e| AgentError::dest("list", dir, e))? {
            let Some(rest) = e.name.strip_prefix(&prefix) else {
                continue;
            };
            let pid = rest.split('.').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !sys::pid_alive(p)) {
                tracing::info!(file = %e.name, "removing a temporary file left by a killed agent");
                let _ = self.io.remove(&dir.join(&e.name));
            }
        }
        super::lock(&self.dirs_ready).insert(dir.to_path_buf());
        Ok(())
    }

    /// Create the temporary file for store path `path` (`mode`: its permission bits),
    /// `size` bytes preallocated (steps 1-2 of the publish protocol).
    pub(crate) fn begin(&self, path: &str, mode: u32, size: u64) -> Result<PfsPut<'_>, AgentError> {
        let t0 = Instant::now();
        let dest = self.dest_of(path);
        let dir = dest.parent().expect("store paths have a parent").to_path_buf();
        let name = dest
            .file_name()
            .expect("store files have a name")
            .to_string_lossy()
            .into_owned();
        self.prepare_dir(&dir)?;
        let tmp = dir.join(format!(
            "{}{}.{:016x}",
            tmp_prefix(&self.node),
            std::process::id(),
            fnv(&name)
        ));
        let io = &*self.io;
        let opts = CreateOpts {
            direct: self.direct,
            ost: self.target.ost,
            mode: mode | 0o200,
        };
        let f = match io.create(&tmp, &opts) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = io.remove(&tmp);
                io.create(&tmp, &opts)
            }
            r => r,
        }
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                // The directory was removed behind our back: create it again next time.
                super::lock(&self.dirs_ready).remove(&dir);
            }
            AgentError::dest("create", &tmp, e)
        })?;
        // Removes the temporary file if writing fails; handed on to the commit.
        let guard = TmpGuard {
            io,
            path: tmp.clone(),
            armed: true,
        };
        f.preallocate(size)
            .map_err(|e| AgentError::dest("allocate space for", &tmp, e))?;
        crash_point("agent-after-create");
        Ok(PfsPut {
            f,
            guard,
            dest,
            dir,
            name,
            t0,
        })
    }

    /// Refuse to replace a destination file that another node's manifest in the same
    /// directory lists with a newer version (nodes sharing one PFS directory): the
    /// version of store path `path` modified at `mtime_ns` (with `content`: its CRC32C
    /// and size, if known) is not published when another node drained different
    /// content with an mtime at least as recent. Other nodes' manifests are read only
    /// when the destination file exists; one that cannot be read is logged and left out.
    pub(crate) fn check_not_older(
        &self,
        path: &str,
        mtime_ns: u64,
        content: Option<(u32, u64)>,
    ) -> Result<(), AgentError> {
        let dest = self.dest_of(path);
        let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
            return Ok(());
        };
        let name = name.to_string_lossy();
        match self.io.len(&dest) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(AgentError::dest("stat", &dest, e)),
        }
        let own = manifest::file_name(&self.node);
        let list = self.io.list(dir).map_err(|e| AgentError::dest("list", dir, e))?;
        for d in list {
            let Some(node) = manifest::node_of(&d.name) else {
                continue;
            };
            if d.is_dir || d.name == own {
                continue;
            }
            let mpath = dir.join(&d.name);
            let m = match Manifest::load(&*self.io, &mpath) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(manifest = %mpath.display(), error = %e, "another node's manifest is not readable; not compared");
                    continue;
                }
            };
            let Some(o) = m.files.get(name.as_ref()) else {
                continue;
            };
            let same = content.is_some_and(|(crc, size)| o.crc32c == crc && o.size == size);
            if !same && o.mtime_ns >= mtime_ns {
                return Err(AgentError::NewerElsewhere {
                    path: path.to_string(),
                    dest,
                    node: node.to_string(),
                    other_mtime_ns: o.mtime_ns,
                    mtime_ns,
                });
            }
        }
        Ok(())
    }

    /// Make the temporary file durable, check `still_valid` (the source did not change
    /// meanwhile), drop a stale manifest entry, rename the file into place and fsync the
    /// directory (steps 3-6). The manifest entry is added by [`PfsLevel::record`].
    pub(crate) fn publish(
        &self,
        w: PfsPut<'_>,
        entry: Entry,
        still_valid: impl FnOnce() -> Result<(), AgentError>,
    ) -> Result<Renamed, AgentError> {
        let PfsPut {
            f,
            mut guard,
            dest,
            dir,
            name,
            t0,
        } = w;
        let io = &*self.io;
        let tmp = guard.path.clone();
        f.sync().map_err(|e| AgentError::dest("fsync", &tmp, e))?;
        drop(f);
        crash_point("agent-after-fsync");
        still_valid()?;
        let (crc, size) = (entry.crc32c, entry.size);
        // Last look before the rename: another node may have drained a newer version
        // of the same name since the copy began.
        self.check_not_older(&entry.store_path, entry.mtime_ns, Some((crc, size)))?;
        // Replacing a published file: drop its entry first, so the manifest never
        // describes content the file does not have.
        let stale = self.with_manifest(&dir, |m| {
            m.files
                .get(&name)
                .is_some_and(|e| e.crc32c != crc || e.size != size)
        })?;
        if stale {
            self.with_manifest(&dir, |m| {
                m.files.remove(&name);
                m.save(io, &dir)
            })??;
        }
        crash_point("agent-before-rename");
        io.rename(&tmp, &dest)
            .map_err(|e| AgentError::dest("rename", &dest, e))?;
        guard.armed = false;
        crash_point("agent-after-rename");
        io.sync_dir(&dir)
            .map_err(|e| AgentError::dest("fsync", &dir, e))?;
        Ok(Renamed {
            dest,
            dir,
            name,
            entry,
            t0,
        })
    }

    /// Add renamed files of one directory to its manifest with one atomic save (step 7).
    /// On failure no entry of the batch stays in the cached manifest.
    pub(crate) fn record(&self, batch: &[Renamed]) -> Result<(), AgentError> {
        let Some(dir) = batch.first().map(|b| b.dir.clone()) else {
            return Ok(());
        };
        let io = &*self.io;
        let saved = self
            .with_manifest(&dir, |m| {
                let now = now_ns();
                for b in batch {
                    m.files.insert(
                        b.name.clone(),
                        Entry {
                            drained_ns: now,
                            ..b.entry.clone()
                        },
                    );
                }
                let r = m.save(io, &dir);
                if r.is_err() {
                    for b in batch {
                        m.files.remove(&b.name);
                    }
                }
                r
            })
            .and_then(|r| r);
        crash_point("agent-after-manifest");
        saved
    }
}
