//! The inodes the kernel holds in CRFS mode: one O_PATH descriptor of the backend inode
//! per FUSE inode number, with the kernel's lookup count; forget drops it.

use fuser::{Errno, INodeNo};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

struct Node {
    fd: Arc<OwnedFd>,
    lookups: u64,
}

/// FUSE inode number -> O_PATH descriptor of the backend inode.
pub(super) struct Nodes {
    map: Mutex<HashMap<u64, Node>>,
}

impl Nodes {
    /// A table holding the root (FUSE inode 1), never forgotten. Lifts the process's
    /// soft RLIMIT_NOFILE to the hard limit: one descriptor per inode the kernel holds.
    pub(super) fn new(root: OwnedFd) -> Nodes {
        raise_nofile_limit();
        let mut map = HashMap::new();
        map.insert(
            1,
            Node {
                fd: Arc::new(root),
                lookups: 1,
            },
        );
        Nodes { map: Mutex::new(map) }
    }

    /// The descriptor of an inode the kernel knows.
    pub(super) fn get(&self, ino: INodeNo) -> Result<Arc<OwnedFd>, Errno> {
        self.map
            .lock()
            .unwrap()
            .get(&ino.0)
            .map(|n| n.fd.clone())
            .ok_or(Errno::ENOENT)
    }

    /// One more kernel lookup of `ino`, whose descriptor is `fd` unless the inode is
    /// already known (another name of it: the known descriptor stays, `fd` is closed).
    pub(super) fn remember(&self, ino: u64, fd: OwnedFd) {
        let mut map = self.map.lock().unwrap();
        let n = map.entry(ino).or_insert_with(|| Node {
            fd: Arc::new(fd),
            lookups: 0,
        });
        n.lookups += 1;
    }

    /// One more kernel lookup of a known inode (a link reply).
    pub(super) fn add_lookup(&self, ino: u64) {
        if let Some(n) = self.map.lock().unwrap().get_mut(&ino) {
            n.lookups += 1;
        }
    }

    /// The kernel forgets `nlookup` lookups; the descriptor closes at zero.
    pub(super) fn forget(&self, ino: u64, nlookup: u64) {
        if ino == 1 {
            return;
        }
        let mut map = self.map.lock().unwrap();
        if let Some(n) = map.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(nlookup);
            if n.lookups == 0 {
                map.remove(&ino);
            }
        }
    }
}

fn raise_nofile_limit() {
    // SAFETY: rlimit is plain data; get/setrlimit read and write only it.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}
