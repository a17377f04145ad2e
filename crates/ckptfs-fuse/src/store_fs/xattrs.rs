//! Store mode, format 5: hard links, FIFOs/sockets/device nodes and extended attributes,
//! all kept by the store (docs/design.md "Hard links, special files and extended
//! attributes"). The kernel checks who may before a request arrives (default_permissions:
//! trusted.* needs CAP_SYS_ADMIN, user.* write permission on a regular file or directory,
//! device nodes CAP_MKNOD, protected_hardlinks for link).

use super::{store_err, StoreFs};
use ckptfs_store::{FileKind, XattrFlags};
use fuser::{Errno, INodeNo, ReplyEntry, ReplyXattr, Request};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering::Relaxed;

impl StoreFs {
    /// link(2): a link entry in the store naming `ino`.
    pub(super) fn hard_link(&self, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = (|| {
            let from = self.path(ino)?;
            let to = self.child_path(newparent, newname)?;
            self.store.link(&from, &to).map_err(store_err)
        })();
        self.reply_entry(reply, newparent, newname, r);
        self.refresh(newparent.0);
    }

    /// mknod(2) of a FIFO, socket or device node: a name with attributes in the store;
    /// the kernel serves their I/O. Device nodes only for root (as tmpfs: the kernel
    /// checks CAP_MKNOD first; this is the daemon's own guard).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mknod_special(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: FileKind,
        perm: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) && req.uid() != 0 {
            return reply.error(Errno::EPERM);
        }
        let r = self.child_path(parent, name).and_then(|p| {
            let st = self.store.mknod(&p, kind, perm, rdev as u64).map_err(store_err)?;
            self.give_to_caller(req, parent, &p, st)
        });
        self.reply_entry(reply, parent, name, r);
        self.refresh(parent.0);
    }

    pub(super) fn xattr_set(
        &self,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        self.counters.meta.fetch_add(1, Relaxed);
        let f = XattrFlags {
            create: flags & libc::XATTR_CREATE != 0,
            replace: flags & libc::XATTR_REPLACE != 0,
        };
        self.store
            .setxattr_ino(ino.0, name.as_bytes(), value, f)
            .map_err(store_err)?;
        self.refresh(ino.0);
        Ok(())
    }

    pub(super) fn xattr_get(&self, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.store.getxattr_ino(ino.0, name.as_bytes()) {
            Ok(v) => reply_xattr(reply, size, &v),
            Err(e) => reply.error(store_err(e)),
        }
    }

    /// The names, NUL-terminated; trusted.* only for root (as tmpfs lists them).
    pub(super) fn xattr_list(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.store.listxattr_ino(ino.0) {
            Ok(names) => {
                let mut v = Vec::new();
                for n in names {
                    if req.uid() != 0 && n.starts_with(b"trusted.") {
                        continue;
                    }
                    v.extend_from_slice(&n);
                    v.push(0);
                }
                reply_xattr(reply, size, &v)
            }
            Err(e) => reply.error(store_err(e)),
        }
    }

    pub(super) fn xattr_remove(&self, ino: INodeNo, name: &OsStr) -> Result<(), Errno> {
        self.counters.meta.fetch_add(1, Relaxed);
        self.store
            .removexattr_ino(ino.0, name.as_bytes())
            .map_err(store_err)?;
        self.refresh(ino.0);
        Ok(())
    }
}

/// An xattr reply: the size when asked with size 0, ERANGE when the buffer is too small.
fn reply_xattr(reply: ReplyXattr, size: u32, v: &[u8]) {
    if size == 0 {
        reply.size(v.len() as u32);
    } else if v.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(v);
    }
}
