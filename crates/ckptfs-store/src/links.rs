//! Hard links (format 5): a second name of a file is a *link entry*, an inode slot of kind
//! [`kind::LINK`] that has a name, a parent and sibling links like any entry, and in its
//! `target` the file id of the inode it names. It holds no data, is never opened and its
//! number is never given out: every lookup of its name answers the target. The target
//! counts its names in `nlink` (its own name, if it still has one, plus its link
//! entries); `nlink` is derived, part of the namespace record, and recounted from the
//! link entries by the namespace rebuild, so a process killed anywhere inside a link or
//! an unlink leaves either state, never a wrong count. Removing a file's own name while
//! link entries remain leaves it *nameless* (`parent` = NONE, not an orphan), reached
//! through its link entries; removing the last name makes it an orphan, freed at its last
//! close as before.
//!
//! FIFOs, sockets and device nodes (kinds 5 to 8, [`Store::mknod`]) are here too: names
//! with attributes (and a device number) only.

use crate::error::{Result, StoreError};
use crate::integrity::{ns_ok, seal_data, seal_ns};
use crate::layout::*;
use crate::segment::now;
use crate::store::{components, FileKind, Stat, Store};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Most names one file may have (link(2) is EMLINK beyond; ext4's limit).
pub const LINK_MAX: u32 = 65_000;

impl Store {
    /// Give the file at `existing` (a file, symlink or special file; never followed,
    /// as linkat(2) without `AT_SYMLINK_FOLLOW`) the additional name `new`. EPERM for a
    /// directory, EEXIST when `new` exists, EMLINK past [`LINK_MAX`] names. Returns the
    /// file's attributes (with the new link count).
    pub fn link(&self, existing: &str, new: &str) -> Result<Stat> {
        let ec = components(existing)?;
        let nc = components(new)?;
        let ns = self.ns();
        let seg = &*self.seg;
        let fid = self.resolve(&ns, &ec, existing)?;
        self.check_inode(fid, existing)?;
        let ino = seg.inode(fid);
        if fid == ROOT || ino.kind.load(Acquire) == kind::DIR {
            return Err(StoreError::NotPermitted(format!(
                "{existing}: hard link to a directory"
            )));
        }
        let (parent, name) = self.resolve_parent(&ns, &nc, new).map_err(|e| match e {
            StoreError::Busy(_) => StoreError::Exists(new.into()),
            e => e,
        })?;
        if self.lookup_child(&ns, parent, name.as_bytes()).is_some() {
            return Err(StoreError::Exists(new.into()));
        }
        if ino.nlink.load(Relaxed) >= LINK_MAX {
            return Err(StoreError::TooManyLinks(existing.into()));
        }
        let entry = self.alloc_inode_full(
            &ns,
            kind::LINK,
            parent,
            name.as_bytes(),
            0,
            false,
            (fid, 0),
            &|_| Ok(()),
        )?;
        debug_assert_eq!(seg.inode(entry).kind.load(Relaxed), kind::LINK);
        // Killed here: the entry exists and the count is one short; the rebuild that the
        // death triggers recounts it.
        crate::fault::crash_point("link-after-kind");
        ino.nlink.fetch_add(1, Relaxed);
        ino.ctime_ns.store(now(), Relaxed);
        seal_ns(seg, fid);
        self.note_change(fid);
        let st = self.stat_fid(fid);
        drop(ns);
        Ok(st)
    }
}

impl Store {
    /// Create a FIFO, socket or device node at `path` (format 5): a name with
    /// attributes only (`mode`'s permission bits as given; `rdev` kept for device nodes,
    /// 0 otherwise). Who may create device nodes is the front-end's rule (the FUSE mount:
    /// root only, as the kernel's `CAP_MKNOD`). EINVAL for another kind.
    pub fn mknod(&self, path: &str, kind: FileKind, mode: u32, rdev: u64) -> Result<Stat> {
        let k = match kind {
            FileKind::Fifo => kind::FIFO,
            FileKind::Socket => kind::SOCKET,
            FileKind::CharDevice => kind::CHAR_DEV,
            FileKind::BlockDevice => kind::BLOCK_DEV,
            _ => return Err(StoreError::Invalid(format!("{path}: mknod of a {kind:?}"))),
        };
        let rdev = if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
            rdev
        } else {
            0
        };
        let comps = components(path)?;
        let ns = self.ns();
        let (parent, name) = self.resolve_new(&ns, &comps, path)?;
        let fid = self.alloc_inode_full(
            &ns,
            k,
            parent,
            name.as_bytes(),
            mode,
            false,
            (NONE, rdev),
            &|_| Ok(()),
        )?;
        let st = self.stat_fid(fid);
        drop(ns);
        Ok(st)
    }
}

impl Store {
    /// A link entry whose namespace record fails its checksum (fsck `--repair`, before it
    /// is quarantined): its `target` may have been changed, and following it would serve
    /// another file's bytes. Keep the target only when the file it names confirms it (its
    /// own record, which verifies, counts more names than it has without this entry);
    /// else point it at the one file that lacks a name, if exactly one does; else turn
    /// the entry into an empty regular file that names nothing. Never gives it data.
    /// Namespace lock held.
    pub(crate) fn settle_damaged_link(&self, fid: u32) {
        let seg = &*self.seg;
        let max = seg.layout.max_files;
        let mut names = vec![0u32; max as usize];
        for f in 1..max {
            let i = seg.inode(f);
            if f != fid
                && i.kind.load(Acquire) == kind::LINK
                && ns_ok(seg, f)
                && i.flags.load(Relaxed) & iflag::ORPHAN == 0
                && i.parent.load(Relaxed) != NONE
            {
                let t = i.target.load(Relaxed);
                if self.link_target_ok(t) {
                    names[t as usize] += 1;
                }
            }
        }
        let lacks_a_name = |t: u32| {
            if !self.link_target_ok(t) || !ns_ok(seg, t) {
                return false;
            }
            let i = seg.inode(t);
            let own = u32::from(i.flags.load(Relaxed) & iflag::ORPHAN == 0 && i.parent.load(Relaxed) != NONE);
            i.nlink.load(Relaxed) > own + names[t as usize]
        };
        let ino = seg.inode(fid);
        let t = ino.target.load(Relaxed);
        if lacks_a_name(t) {
            return;
        }
        let mut short = (1..max).filter(|&f| lacks_a_name(f));
        if let (Some(only), None) = (short.next(), short.next()) {
            tracing::warn!(store = %seg.name, fid, was = t, now = only, "damaged hard link pointed back at the file that lacks a name");
            ino.target.store(only, Relaxed);
            return;
        }
        tracing::warn!(store = %seg.name, fid, target = t, "damaged hard link names no confirmed file; kept as an empty file");
        ino.target.store(NONE, Relaxed);
        ino.rdev.store(0, Relaxed);
        ino.nlink.store(0, Relaxed);
        {
            let _g = self.file_lock(fid);
            ino.srun.store(0, Release);
            ino.ssum.store(0, Relaxed);
            ino.size.store(0, Release);
            seal_data(seg, fid);
        }
        ino.kind.store(kind::FILE, Release);
    }
}
