//! Store mode: the attributes the kernel is given (link counts, owners of new files,
//! times after a removal) and the attribute and entry replies, which also record what
//! the kernel now holds for the invalidation poller.

use super::{store_err, StoreFs};
use crate::{now_ns, system_time};
use ckptfs_store::{FileKind, Stat};
use fuser::{Errno, FileAttr, FileType, Generation, INodeNo, ReplyAttr, ReplyEntry, Request};
use std::ffi::OsStr;

impl StoreFs {
    /// The link count: a directory has 2 + one per subdirectory (their ".."); anything
    /// else its names in the store (hard links, format 5; 0 once unlinked while still
    /// open). Counting
    /// subdirectories walks the directory; with caching on the count is kept until a
    /// directory name in it changes (see `KernelView::subdirs`). With caching off, entry
    /// replies (made at every step of every path walk, with TTL 0) say 2: the kernel
    /// asks getattr (`exact`) before it shows a stat.
    pub(super) fn nlink(&self, st: &Stat, exact: bool) -> u32 {
        match st.kind {
            FileKind::Dir if !exact && !self.cache.enabled() => 2,
            FileKind::Dir => {
                let epoch = match self.view.subdirs(st.ino, st.generation) {
                    Ok(n) => return 2 + n,
                    Err(epoch) => epoch,
                };
                let subdirs = self.store.count_subdirs_ino(st.ino).unwrap_or(0);
                // Kept only if no directory name changed during the walk.
                self.view.set_subdirs(st.ino, st.generation, subdirs, epoch);
                2 + subdirs
            }
            _ => st.nlink,
        }
    }

    pub(super) fn attr(&self, st: &Stat) -> FileAttr {
        self.attr_of(st, false)
    }

    /// Attributes for a getattr/setattr reply (exact directory link count).
    pub(super) fn attr_exact(&self, st: &Stat) -> FileAttr {
        self.attr_of(st, true)
    }

    pub(super) fn attr_of(&self, st: &Stat, exact: bool) -> FileAttr {
        let nlink = self.nlink(st, exact);
        let kind = file_type(st.kind);
        let perm = (st.mode & 0o7777) as u16;
        let mtime = system_time(st.mtime_ns);
        FileAttr {
            ino: INodeNo(st.ino),
            size: st.size,
            // du shows what the file really occupies: whole chunks.
            blocks: st.allocated / 512,
            atime: system_time(st.atime_ns),
            mtime,
            ctime: system_time(st.ctime_ns),
            crtime: system_time(st.ctime_ns),
            kind,
            perm,
            nlink,
            uid: st.uid,
            gid: st.gid,
            rdev: st.rdev as u32,
            blksize: 1 << 20,
            flags: 0,
        }
    }

    /// A file or directory just created at `path` in `parent` belongs to the caller:
    /// uid = the caller's fsuid, gid = the parent's when it is setgid (a new directory
    /// then also gets the setgid bit), else the caller's fsgid.
    pub(super) fn give_to_caller(
        &self,
        req: &Request,
        parent: INodeNo,
        path: &str,
        st: Stat,
    ) -> Result<Stat, Errno> {
        let pst = self.store.stat_ino(parent.0).map_err(store_err)?;
        let setgid_dir = pst.mode & libc::S_ISGID != 0;
        let gid = if setgid_dir { pst.gid } else { req.gid() };
        let mut changed = false;
        if (st.uid, st.gid) != (req.uid(), gid) {
            self.store.chown(path, req.uid(), gid).map_err(store_err)?;
            changed = true;
        }
        if st.kind == FileKind::Dir && setgid_dir && st.mode & libc::S_ISGID == 0 {
            self.store
                .chmod(path, st.mode | libc::S_ISGID)
                .map_err(store_err)?;
            changed = true;
        }
        if changed {
            self.store.stat(path).map_err(store_err)
        } else {
            Ok(st)
        }
    }

    /// After an entry of `parent` was removed: its mtime and ctime are now.
    pub(super) fn touch_dir(&self, parent: INodeNo) {
        if let (Ok(p), Ok(st)) = (self.path(parent), self.store.stat_ino(parent.0)) {
            let _ = self.store.set_times(&p, st.atime_ns, now_ns());
        }
    }

    pub(super) fn reply_attr(&self, reply: ReplyAttr, r: Result<Stat, Errno>) {
        match r {
            Ok(st) => {
                self.view.attr(&st);
                reply.attr(&self.cache.ttl, &self.attr_exact(&st))
            }
            Err(e) => reply.error(e),
        }
    }

    /// An entry reply for `name` in `parent` (recorded in the kernel view first).
    pub(super) fn reply_entry(
        &self,
        reply: ReplyEntry,
        parent: INodeNo,
        name: &OsStr,
        r: Result<Stat, Errno>,
    ) {
        match r {
            Ok(st) => {
                if let Some(n) = name.to_str() {
                    self.view.entry(parent.0, n, &st);
                }
                reply.entry(&self.cache.ttl, &self.attr(&st), Generation(st.generation as u64))
            }
            Err(e) => reply.error(e),
        }
    }

    /// Record the current attributes of `ino` as what the kernel knows, after a change
    /// through the mount that the kernel accounts for itself (a namespace change in a
    /// directory, a write), so that the poller does not invalidate it again.
    pub(super) fn refresh(&self, ino: u64) {
        if self.view.enabled() {
            if let Ok(st) = self.store.stat_ino(ino) {
                self.view.attr(&st);
            }
        }
    }
}

pub(super) fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Dir => FileType::Directory,
        FileKind::File => FileType::RegularFile,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}
