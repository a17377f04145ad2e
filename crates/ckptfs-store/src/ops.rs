//! Namespace changes: open/create, mkdir, rmdir, unlink, rename, truncate, chmod.

use crate::error::{Result, StoreError};
use crate::file::FileHandle;
use crate::integrity::{fid_ok, seal_data, seal_ns};
use crate::layout::*;
use crate::process;
use crate::segment::now;
use crate::store::*;
use std::sync::atomic::Ordering::{Relaxed, Release};

impl Store {
    /// Open (and with `flags.create` create) a file, or open a directory for reading.
    /// `mode` is used for new files as given (apply the umask before calling).
    pub fn open(&self, path: &str, flags: OpenFlags, mode: u32) -> Result<FileHandle> {
        let comps = components(path)?;
        let ns = self.ns();
        let seg = &*self.seg;
        let mut created = false;
        let fid = if comps.is_empty() {
            ROOT
        } else {
            let (parent, name) = self.resolve_parent(&ns, &comps, path)?;
            match self.lookup_child(&ns, parent, name.as_bytes()) {
                Some(fid) => {
                    if flags.create && flags.excl {
                        return Err(StoreError::Exists(path.into()));
                    }
                    self.deref(fid, path)?
                }
                None if flags.create && !flags.directory => {
                    created = true;
                    self.alloc_inode(&ns, kind::FILE, parent, name.as_bytes(), mode, flags.write)?
                }
                None => return Err(StoreError::NotFound(path.into())),
            }
        };
        if !created {
            self.check_inode(fid, path)?;
        }
        let ino = seg.inode(fid);
        if ino.kind.load(Relaxed) == kind::SYMLINK {
            // The store never follows a symlink (the front-ends do): as O_NOFOLLOW.
            return Err(StoreError::Loop(path.into()));
        }
        if matches!(
            ino.kind.load(Relaxed),
            kind::FIFO | kind::SOCKET | kind::CHAR_DEV | kind::BLOCK_DEV
        ) {
            // No data in the store: the kernel serves a FIFO's or device's I/O.
            return Err(StoreError::Unsupported(
                "opening a FIFO, socket or device node through the store (the kernel serves them)",
            ));
        }
        let is_dir = ino.kind.load(Relaxed) == kind::DIR;
        if is_dir && (flags.write || flags.trunc) {
            return Err(StoreError::IsDir(path.into()));
        }
        if flags.directory && !is_dir {
            return Err(StoreError::NotDir(path.into()));
        }
        let who = process::me();
        let g = self.file_lock(fid);
        if !created && ino.wstate.load(Relaxed) == wstate::WRITING {
            // A writer that died since anyone looked must not count as writing: its
            // file is incomplete and, below, read with checksum verification.
            self.reap_leases(fid);
        }
        let new_session = flags.write && !self.has_writer(fid);
        self.add_lease(fid, who, flags.write)?;
        if flags.write {
            if new_session {
                // A new writing session: an earlier session's dead writer is history (its
                // file was incomplete until now; what this session writes decides).
                ino.flags.fetch_and(!iflag::DEAD_WRITER, Release);
            }
            ino.wstate.store(wstate::WRITING, Release);
            if flags.trunc {
                // Emptied: an earlier failed write no longer matters.
                ino.flags.fetch_and(!iflag::FAILED, Release);
                if ino.size.load(Relaxed) > 0 {
                    self.mark_wrote(fid, who);
                    // Size first, then the chunks: a truncation killed half-way leaves an
                    // empty file with chunks past its end (trimmed when its death is
                    // noticed), never the old size over freed (zero) chunks.
                    ino.size.store(0, Release);
                    seal_data(seg, fid);
                    crate::fault::crash_point("otrunc-after-size");
                    self.free_data_from(fid, 0);
                    ino.mtime_ns.store(now(), Relaxed);
                    self.note_change(fid);
                }
            }
        }
        // Every handle that can read verifies each chunk's checksum once before serving
        // it, except chunks the handle wrote itself (see `FileHandle::verify_chunk`).
        let verify = flags.read;
        drop(g);
        drop(ns);
        Ok(FileHandle::new(
            self.clone(),
            fid,
            flags,
            is_dir,
            who,
            verify,
            path,
        ))
    }

    /// Create a directory.
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<Stat> {
        let comps = components(path)?;
        let ns = self.ns();
        let (parent, name) = self.resolve_new(&ns, &comps, path)?;
        let fid = self.alloc_inode(&ns, kind::DIR, parent, name.as_bytes(), mode, false)?;
        // Taken before the lock is let go: a racing rmdir could free the slot after it.
        let st = self.stat_fid(fid);
        drop(ns);
        Ok(st)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<()> {
        let comps = components(path)?;
        let ns = self.ns();
        let (_, fid) = self.resolve_entry(&ns, &comps, path)?;
        let ino = self.seg.inode(fid);
        if ino.kind.load(Relaxed) != kind::DIR {
            return Err(StoreError::NotDir(path.into()));
        }
        if ino.first_child.load(Relaxed) != NONE {
            return Err(StoreError::NotEmpty(path.into()));
        }
        self.detach_and_release(&ns, fid);
        Ok(())
    }

    /// Remove a file. Processes holding it open keep reading and writing it; its chunks
    /// are freed at the last close.
    pub fn unlink(&self, path: &str) -> Result<()> {
        let comps = components(path)?;
        let ns = self.ns();
        let (_, fid) = self.resolve_entry(&ns, &comps, path)?;
        if self.seg.inode(fid).kind.load(Relaxed) == kind::DIR {
            return Err(StoreError::IsDir(path.into()));
        }
        self.detach_and_release(&ns, fid);
        Ok(())
    }

    /// Rename atomically, replacing the target (a file, or an empty directory when the
    /// source is a directory). Crash-atomic: an interrupted rename is completed by the
    /// next process that takes the namespace lock.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let seg = &*self.seg;
        let fc = components(from)?;
        let tc = components(to)?;
        let ns = self.ns();
        let (sp, src) = self.resolve_entry(&ns, &fc, from)?;
        let (dp, dname) = self.resolve_parent(&ns, &tc, to)?;
        let src_dir = seg.inode(src).kind.load(Relaxed) == kind::DIR;
        if src_dir {
            // A directory cannot move below itself.
            let mut cur = dp;
            let mut steps = 0;
            while cur != ROOT && cur != NONE {
                if cur == src {
                    return Err(StoreError::Invalid(format!("cannot move {from} into itself")));
                }
                steps += 1;
                if !fid_ok(seg, cur) || steps > seg.layout.max_files {
                    return Err(self.damaged(dp, to, "parent links are damaged"));
                }
                cur = seg.inode(cur).parent.load(Relaxed);
            }
        }
        let victim = self.lookup_child(&ns, dp, dname.as_bytes());
        if victim == Some(src) {
            return Ok(());
        }
        let src_ino = self.deref(src, from)?;
        if let Some(v) = victim {
            // Two names of one inode (hard links): POSIX says do nothing.
            if self.deref(v, to)? == src_ino {
                return Ok(());
            }
        }
        if let Some(v) = victim {
            let vdir = seg.inode(v).kind.load(Relaxed) == kind::DIR;
            match (src_dir, vdir) {
                (true, false) => return Err(StoreError::NotDir(to.into())),
                (false, true) => return Err(StoreError::IsDir(to.into())),
                (true, true) if seg.inode(v).first_child.load(Relaxed) != NONE => {
                    return Err(StoreError::NotEmpty(to.into()))
                }
                _ => {}
            }
        }
        // Write the intent, then apply it.
        let ri = &seg.sb().rename;
        ri.src.store(src, Relaxed);
        ri.dst_parent.store(dp, Relaxed);
        ri.victim.store(victim.unwrap_or(NONE), Relaxed);
        // SAFETY: namespace lock held.
        unsafe { seg.intent_name()[..dname.len()].copy_from_slice(dname.as_bytes()) };
        ri.name_len.store(dname.len() as u32, Relaxed);
        ri.active.store(1, Release);
        crate::fault::crash_point("rename-after-intent");
        if let Some(v) = victim {
            self.detach_and_release(&ns, v);
        }
        crate::fault::crash_point("rename-after-victim");
        // SAFETY: namespace lock held.
        self.note_name(&ns, sp, src, unsafe { seg.name_of(src) });
        self.hash_remove(&ns, src);
        self.unlink_child(&ns, src);
        seg.inode(sp).mtime_ns.store(now(), Relaxed);
        seg.inode(src).parent.store(dp, Relaxed);
        // SAFETY: namespace lock held.
        unsafe { seg.set_name(src, dname.as_bytes()) };
        seal_ns(seg, src);
        self.hash_insert(&ns, src);
        self.link_child(&ns, dp, src);
        seg.inode(src_ino).ctime_ns.store(now(), Relaxed);
        seg.inode(dp).mtime_ns.store(now(), Relaxed);
        self.note_name(&ns, dp, src, dname.as_bytes());
        ri.active.store(0, Release);
        Ok(())
    }

    /// Set a file's size (grow with zeros, or shrink and free chunks).
    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        let mut f = self.open(
            path,
            OpenFlags {
                write: true,
                ..Default::default()
            },
            0,
        )?;
        f.set_len(len)?;
        f.close()
    }

    /// Change permission bits.
    pub fn chmod(&self, path: &str, mode: u32) -> Result<()> {
        let comps = components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.check_inode(fid, path)?;
        let ino = self.seg.inode(fid);
        ino.mode.store(mode & 0o7777, Relaxed);
        seal_ns(&self.seg, fid);
        ino.ctime_ns.store(now(), Relaxed);
        self.note_change(fid);
        drop(ns);
        Ok(())
    }

    /// Set the modification time (ns since the epoch).
    pub fn set_mtime(&self, path: &str, mtime_ns: u64) -> Result<()> {
        let st = self.stat(path)?;
        self.seg
            .inode((st.ino - 1) as u32)
            .mtime_ns
            .store(mtime_ns, Relaxed);
        self.note_change((st.ino - 1) as u32);
        Ok(())
    }
}
