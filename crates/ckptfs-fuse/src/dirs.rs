//! Directory listings shared by both file systems.
//!
//! opendir takes a snapshot of the directory (so readdir offsets stay valid while entries
//! change), keeps it under a new FUSE file handle, readdir pages through it, and
//! releasedir drops it.

use fuser::{Errno, FileType, FopenFlags, INodeNo, ReplyDirectory, ReplyEmpty, ReplyOpen};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// A directory listing snapshot taken at opendir: (inode, type, name).
pub(crate) type Listing<N> = Vec<(u64, FileType, N)>;

/// A listing holding only "." (`ino`) and ".." (`parent`), to which opendir adds the
/// directory's entries.
pub(crate) fn dot_entries<N: for<'a> From<&'a str>>(ino: u64, parent: u64) -> Listing<N> {
    vec![
        (ino, FileType::Directory, N::from(".")),
        (parent, FileType::Directory, N::from("..")),
    ]
}

/// The open directories' listings, keyed by FUSE file handle.
pub(crate) struct DirTable<N> {
    lists: Mutex<HashMap<u64, Listing<N>>>,
}

impl<N: AsRef<OsStr>> DirTable<N> {
    pub(crate) fn new() -> DirTable<N> {
        DirTable {
            lists: Mutex::new(HashMap::new()),
        }
    }

    /// opendir: keep `list` under a new handle taken from `next_fh` and reply with it,
    /// or reply with the error that prevented the listing.
    pub(crate) fn open(&self, next_fh: &AtomicU64, list: Result<Listing<N>, Errno>, reply: ReplyOpen) {
        match list {
            Ok(list) => {
                let fh = next_fh.fetch_add(1, Relaxed);
                self.lists.lock().unwrap().insert(fh, list);
                reply.opened(fuser::FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    /// readdir: the entries of handle `fh` from `offset` on, as many as fit the reply.
    pub(crate) fn readdir(&self, fh: fuser::FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let lists = self.lists.lock().unwrap();
        let Some(list) = lists.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (ino, kind, name)) in list.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    /// releasedir: forget handle `fh`'s listing.
    pub(crate) fn release(&self, fh: fuser::FileHandle, reply: ReplyEmpty) {
        self.lists.lock().unwrap().remove(&fh.0);
        reply.ok();
    }
}
