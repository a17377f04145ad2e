//! Queries: attributes, lookups, directory listings, paths and chunk lists.

use crate::error::{Result, StoreError};
use crate::integrity::fid_ok;
use crate::layout::*;
use crate::store::*;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

impl Store {
    /// Attributes of `path`.
    pub fn stat(&self, path: &str) -> Result<Stat> {
        let comps = components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.check_inode(fid, path)?;
        Ok(self.stat_fid(fid))
    }

    /// Attributes by inode number.
    pub fn stat_ino(&self, ino: u64) -> Result<Stat> {
        let ns = self.ns();
        let fid = self.fid_of_ino(&ns, ino)?;
        self.check_inode(fid, "")?;
        let st = self.stat_fid(fid);
        drop(ns);
        Ok(st)
    }

    /// Look a name up in a directory given by inode number (FUSE style).
    pub fn lookup(&self, parent_ino: u64, name: &str) -> Result<Stat> {
        if name.len() > NAME_MAX {
            return Err(StoreError::NameTooLong(name.into()));
        }
        let ns = self.ns();
        let pfid = self.fid_of_ino(&ns, parent_ino)?;
        if self.seg.inode(pfid).kind.load(Relaxed) != kind::DIR {
            return Err(StoreError::NotDir(name.into()));
        }
        let fid = match name {
            "." => pfid,
            ".." => {
                let p = self.seg.inode(pfid).parent.load(Relaxed);
                if p == NONE {
                    ROOT
                } else if !fid_ok(&self.seg, p) {
                    return Err(self.damaged(pfid, name, "parent link out of range"));
                } else {
                    p
                }
            }
            _ => {
                let e = self
                    .lookup_child(&ns, pfid, name.as_bytes())
                    .ok_or_else(|| StoreError::NotFound(name.into()))?;
                self.deref(e, name)?
            }
        };
        self.check_inode(fid, name)?;
        let st = self.stat_fid(fid);
        drop(ns);
        Ok(st)
    }

    /// The file id of inode number `ino`, which must be in use. Namespace lock held: a
    /// slot checked without it can be freed by an unlink before the caller takes the lock,
    /// and its record (whose checksum then no longer matches its kind) would be reported
    /// as damaged instead of gone.
    pub(crate) fn fid_of_ino(&self, _ns: &Ns, ino: u64) -> Result<u32> {
        self.check_live()?;
        if ino == 0 || ino > self.seg.layout.max_files as u64 {
            return Err(StoreError::NotFound(format!("inode {ino}")));
        }
        let fid = (ino - 1) as u32;
        // A link entry is a name, not an inode: its number is never given out.
        if matches!(self.seg.inode(fid).kind.load(Acquire), kind::FREE | kind::LINK) {
            return Err(StoreError::NotFound(format!("inode {ino}")));
        }
        Ok(fid)
    }

    pub(crate) fn stat_fid(&self, fid: u32) -> Stat {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        let k = file_kind(ino.kind.load(Acquire));
        let mut state = match ino.wstate.load(Acquire) {
            wstate::WRITING => WriteState::Writing,
            wstate::INCOMPLETE => WriteState::Incomplete,
            wstate::FAILED => WriteState::Failed,
            _ => WriteState::Complete,
        };
        if state == WriteState::Writing {
            let _g = self.file_lock(fid);
            self.reap_leases(fid);
            if ino.wstate.load(Relaxed) == wstate::INCOMPLETE {
                state = WriteState::Incomplete;
            }
        }
        let chunks = ino.nchunks.load(Relaxed);
        let spill_chunks = if chunks > 0 && seg.layout.spill_chunks > 0 {
            (seg.layout.mem_chunks..seg.nchunks())
                .filter(|&c| seg.chunk(c).owner.load(Relaxed) == fid + 1)
                .count() as u32
        } else {
            0
        };
        Stat {
            ino: fid as u64 + 1,
            generation: ino.igen.load(Relaxed),
            kind: k,
            mode: ino.mode.load(Relaxed),
            size: if k == FileKind::Dir || k.is_special() {
                0
            } else {
                ino.size.load(Acquire)
            },
            chunks,
            spill_chunks,
            allocated: ((chunks as u64) << seg.layout.chunk_shift)
                + self.run_raw(fid).ok().flatten().map_or(0, |r| r.bytes()),
            mtime_ns: ino.mtime_ns.load(Relaxed),
            ctime_ns: ino.ctime_ns.load(Relaxed),
            atime_ns: ino.atime_ns.load(Relaxed),
            uid: ino.uid.load(Relaxed),
            gid: ino.gid.load(Relaxed),
            nlink: if k == FileKind::Dir {
                0
            } else {
                ino.nlink.load(Relaxed)
            },
            rdev: ino.rdev.load(Relaxed),
            state,
        }
    }

    /// Entries of a directory (without `.` and `..`), in no particular order. The
    /// system directory [`SYSTEM_DIR`] is left out of the root's listing (see
    /// [`Store::read_dir_all`]).
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let comps = components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.read_dir_fid(&ns, fid, path, false)
    }

    /// Like [`Store::read_dir`], but the root's listing includes [`SYSTEM_DIR`].
    pub fn read_dir_all(&self, path: &str) -> Result<Vec<DirEntry>> {
        let comps = components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.read_dir_fid(&ns, fid, path, true)
    }

    /// Entries of a directory given by inode number ([`SYSTEM_DIR`] left out of the root).
    pub fn read_dir_ino(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let ns = self.ns();
        let fid = self.fid_of_ino(&ns, ino)?;
        self.read_dir_fid(&ns, fid, &format!("inode {ino}"), false)
    }

    /// How many subdirectories directory `ino` holds ([`SYSTEM_DIR`] left out of the
    /// root), as [`Store::read_dir_ino`] would list them, without building the listing:
    /// a directory's link count, asked by the FUSE mount after every change in it.
    pub fn count_subdirs_ino(&self, ino: u64) -> Result<u32> {
        let ns = self.ns();
        let fid = self.fid_of_ino(&ns, ino)?;
        let seg = &*self.seg;
        let path = || format!("inode {ino}");
        if seg.inode(fid).kind.load(Relaxed) != kind::DIR {
            return Err(StoreError::NotDir(path()));
        }
        let (mut seen, mut dirs) = (0u32, 0u32);
        let mut c = seg.inode(fid).first_child.load(Relaxed);
        while c != NONE {
            if !fid_ok(seg, c) || seen >= seg.layout.max_files {
                return Err(self.damaged(fid, &path(), "directory child list is damaged"));
            }
            seen += 1;
            let ino = seg.inode(c);
            // A hard link names a file, never a directory (link() of a directory is
            // refused), so only the entry's own kind matters.
            if ino.kind.load(Relaxed) == kind::DIR
                // SAFETY: namespace lock held.
                && !(fid == ROOT && unsafe { seg.name_of(c) } == SYSTEM_DIR_NAME.as_bytes())
            {
                dirs += 1;
            }
            c = ino.next_sib.load(Relaxed);
        }
        Ok(dirs)
    }

    fn read_dir_fid(&self, _ns: &Ns, fid: u32, path: &str, system: bool) -> Result<Vec<DirEntry>> {
        let seg = &*self.seg;
        if seg.inode(fid).kind.load(Relaxed) != kind::DIR {
            return Err(StoreError::NotDir(path.into()));
        }
        let mut out = Vec::new();
        let mut c = seg.inode(fid).first_child.load(Relaxed);
        while c != NONE {
            // A damaged link (out of range, or a cycle) ends the listing with EIO.
            if !fid_ok(seg, c) || out.len() >= seg.layout.max_files as usize {
                return Err(self.damaged(fid, path, "directory child list is damaged"));
            }
            let ino = seg.inode(c);
            // SAFETY: namespace lock held.
            if !system && fid == ROOT && unsafe { seg.name_of(c) } == SYSTEM_DIR_NAME.as_bytes() {
                c = ino.next_sib.load(Relaxed);
                continue;
            }
            // A hard link lists the inode it names (a damaged one as itself: a lookup of
            // it is then EIO).
            let t = self.deref(c, path).unwrap_or(c);
            out.push(DirEntry {
                // SAFETY: namespace lock held.
                name: String::from_utf8_lossy(unsafe { seg.name_of(c) }).into_owned(),
                ino: t as u64 + 1,
                kind: file_kind(seg.inode(t).kind.load(Relaxed)),
            });
            c = ino.next_sib.load(Relaxed);
        }
        Ok(out)
    }

    /// Every file and directory with its full path, sorted by path, except
    /// [`SYSTEM_DIR`] and what it holds (see [`Store::list_all_system`]).
    pub fn list_all(&self) -> Vec<(String, Stat)> {
        let mut v = self.list_everything();
        v.retain(|(p, _)| !is_system_path(p));
        v
    }

    /// Every file and directory under [`SYSTEM_DIR`] (itself included), sorted by path.
    pub fn list_all_system(&self) -> Vec<(String, Stat)> {
        let mut v = self.list_everything();
        v.retain(|(p, _)| is_system_path(p));
        v
    }

    fn list_everything(&self) -> Vec<(String, Stat)> {
        let seg = &*self.seg;
        let fids: Vec<u32> = {
            let _ns = self.ns();
            (1..seg.layout.max_files)
                .filter(|&f| {
                    let i = seg.inode(f);
                    i.kind.load(Relaxed) != kind::FREE && i.flags.load(Relaxed) & iflag::ORPHAN == 0
                })
                .collect()
        };
        // Each file's path and attributes under one hold of the namespace lock (taken per
        // file, so that a large store's listing does not stop every create for its whole
        // length): a file removed since the scan above is left out, and a slot reused
        // since is listed as the file it is now, never a path of one with another's
        // attributes.
        let mut out: Vec<(String, Stat)> = fids
            .into_iter()
            .filter_map(|f| {
                let ns = self.ns();
                let i = seg.inode(f);
                if i.kind.load(Relaxed) == kind::FREE || i.flags.load(Relaxed) & iflag::ORPHAN != 0 {
                    return None;
                }
                // A hard link is listed under its own path with its target's attributes
                // (the target's own name, if any, is listed too).
                let t = self.deref(f, "").ok()?;
                let p = self.entry_path_locked(&ns, f);
                (!p.is_empty()).then(|| (p, self.stat_fid(t)))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Full store path of an inode (`/` for the root).
    pub fn path_of(&self, ino: u64) -> Result<String> {
        let ns = self.ns();
        let fid = self.fid_of_ino(&ns, ino)?;
        Ok(self.path_of_fid_locked(&ns, fid))
    }

    /// Full store path of inode `fid`: its own name's, else (a hard-linked file whose
    /// own name was removed) one of its link entries'. Empty for an orphan.
    pub(crate) fn path_of_fid_locked(&self, ns: &Ns, fid: u32) -> String {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        if fid != ROOT
            && ino.parent.load(Relaxed) == NONE
            && ino.nlink.load(Relaxed) > 0
            && ino.kind.load(Relaxed) != kind::LINK
        {
            if let Some(l) = self.fids_in_use(ns).find(|&l| {
                let li = seg.inode(l);
                li.kind.load(Relaxed) == kind::LINK && li.target.load(Relaxed) == fid
            }) {
                return self.entry_path_locked(ns, l);
            }
        }
        self.entry_path_locked(ns, fid)
    }

    /// Full store path of the entry (an inode's own name or a link entry) `fid`.
    pub(crate) fn entry_path_locked(&self, _ns: &Ns, fid: u32) -> String {
        let seg = &*self.seg;
        let mut parts = Vec::new();
        let mut cur = fid;
        let mut guard = 0;
        while cur != ROOT && fid_ok(seg, cur) && guard < 4096 {
            // SAFETY: namespace lock held.
            parts.push(String::from_utf8_lossy(unsafe { seg.name_of(cur) }).into_owned());
            cur = seg.inode(cur).parent.load(Relaxed);
            guard += 1;
        }
        if cur != ROOT {
            return String::new(); // orphan (or a damaged parent link)
        }
        parts.reverse();
        format!("/{}", parts.join("/"))
    }

    /// The chunks of a file in logical order (CRUISE `get_chunk_meta_list`).
    pub fn chunk_list(&self, path: &str) -> Result<Vec<ChunkInfo>> {
        let st = self.stat(path)?;
        if st.kind == FileKind::Dir {
            return Err(StoreError::IsDir(path.into()));
        }
        Ok(self.chunk_list_fid((st.ino - 1) as u32))
    }

    pub(crate) fn chunk_list_fid(&self, fid: u32) -> Vec<ChunkInfo> {
        let seg = &*self.seg;
        let _g = self.file_lock(fid);
        let size = seg.inode(fid).size.load(Acquire);
        let cs = seg.layout.chunk_size();
        let mut out: Vec<ChunkInfo> = (0..seg.nchunks())
            .filter(|&c| seg.chunk(c).owner.load(Acquire) == fid + 1)
            .map(|c| {
                let e = seg.chunk(c);
                let logical = e.logical.load(Relaxed);
                let (hwm, crc, stale) = unpack_sum(e.sum.load(Acquire));
                let start = logical as u64 * cs;
                let len = size.saturating_sub(start).min(cs);
                ChunkInfo {
                    logical,
                    chunk_id: c,
                    location: if seg.is_mem(c) {
                        ChunkLocation::Memory(c as u64 * cs)
                    } else {
                        ChunkLocation::Spill(seg.spill_offset(c))
                    },
                    len,
                    written: hwm as u64,
                    crc: (!stale).then_some(crc),
                }
            })
            .collect();
        if let Ok(Some(run)) = self.run_raw(fid) {
            // A small file: its run, as logical chunk 0 in the chunk that holds it.
            let (hwm, crc, stale) = unpack_sum(seg.inode(fid).ssum.load(Acquire));
            out.push(ChunkInfo {
                logical: 0,
                chunk_id: run.first >> seg.layout.blocks_shift(),
                location: ChunkLocation::Memory(run.offset()),
                len: size.min(cs),
                written: (hwm as u64).min(run.bytes()),
                crc: (!stale).then_some(crc),
            });
        }
        out.sort_by_key(|c| c.logical);
        out
    }
}

/// The public kind of an inode's `kind` word (anything unknown reads as a file, which
/// fsck reports).
pub(crate) fn file_kind(k: u32) -> FileKind {
    match k {
        kind::DIR => FileKind::Dir,
        kind::SYMLINK => FileKind::Symlink,
        kind::FIFO => FileKind::Fifo,
        kind::SOCKET => FileKind::Socket,
        kind::CHAR_DEV => FileKind::CharDevice,
        kind::BLOCK_DEV => FileKind::BlockDevice,
        _ => FileKind::File,
    }
}
