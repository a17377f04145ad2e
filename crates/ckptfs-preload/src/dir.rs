//! `DIR*` streams on store directories: a snapshot of the entries taken at opendir (and
//! at rewinddir), handed out one `struct dirent64` at a time.

use crate::lock::RwSpin;
use crate::state::{self, se, R};
use ckptfs_store::FileKind;
use std::cell::UnsafeCell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Lock of the stream table (also taken by the fork handlers).
pub static LOCK: RwSpin = RwSpin::new();

struct Dirs(UnsafeCell<BTreeSet<usize>>);
// SAFETY: only touched with LOCK held.
unsafe impl Sync for Dirs {}
static DIRS: Dirs = Dirs(UnsafeCell::new(BTreeSet::new()));
static NDIRS: AtomicUsize = AtomicUsize::new(0);

/// A directory stream on a store directory.
pub struct ShimDir {
    /// Its store descriptor (dirfd).
    pub fd: i32,
    entries: Vec<(Vec<u8>, u64, u8)>,
    pos: usize,
    ent: libc::dirent64,
}

fn snapshot(fd: i32) -> R<Vec<(Vec<u8>, u64, u8)>> {
    state::with_fd(fd, |d| {
        if !d.is_dir {
            return Err(libc::ENOTDIR);
        }
        let store = state::store()?;
        let h = d.handle()?;
        let h = h.as_ref().ok_or(libc::EBADF)?;
        let me = h.ino();
        let parent = if d.path == "/" {
            me
        } else {
            let pp = std::path::Path::new(&d.path)
                .parent()
                .and_then(|p| p.to_str())
                .unwrap_or("/");
            store.stat(pp).map(|s| s.ino).unwrap_or(me)
        };
        let mut v = vec![
            (b".".to_vec(), me, libc::DT_DIR),
            (b"..".to_vec(), parent, libc::DT_DIR),
        ];
        for e in h.read_dir().map_err(se)? {
            let t = match e.kind {
                FileKind::Dir => libc::DT_DIR,
                FileKind::Symlink => libc::DT_LNK,
                FileKind::File => libc::DT_REG,
                FileKind::Fifo => libc::DT_FIFO,
                FileKind::Socket => libc::DT_SOCK,
                FileKind::CharDevice => libc::DT_CHR,
                FileKind::BlockDevice => libc::DT_BLK,
            };
            v.push((e.name.into_bytes(), e.ino, t));
        }
        Ok(v)
    })
    .unwrap_or(Err(libc::EBADF))
}

/// fdopendir on store descriptor `fd` (the stream owns it from now on).
pub fn open(fd: i32) -> R<*mut libc::DIR> {
    let entries = snapshot(fd)?;
    let d = Box::new(ShimDir {
        fd,
        entries,
        pos: 0,
        // SAFETY: dirent64 is plain old data.
        ent: unsafe { std::mem::zeroed() },
    });
    let p = Box::into_raw(d) as usize;
    LOCK.write();
    // SAFETY: LOCK held exclusively.
    unsafe { &mut *DIRS.0.get() }.insert(p);
    NDIRS.fetch_add(1, Ordering::Relaxed);
    LOCK.write_unlock();
    Ok(p as *mut libc::DIR)
}

/// Is `d` one of ours?
#[inline]
pub fn is_ours(d: *mut libc::DIR) -> bool {
    if NDIRS.load(Ordering::Relaxed) == 0 {
        return false;
    }
    LOCK.read();
    // SAFETY: LOCK held shared.
    let r = unsafe { &*DIRS.0.get() }.contains(&(d as usize));
    LOCK.read_unlock();
    r
}

/// # Safety
/// `d` must be one of ours (checked with [`is_ours`]) and not used by another thread.
pub unsafe fn get<'a>(d: *mut libc::DIR) -> &'a mut ShimDir {
    // SAFETY: per the contract.
    unsafe { &mut *(d as *mut ShimDir) }
}

impl ShimDir {
    /// Next entry, or None at the end.
    pub fn next_entry(&mut self) -> Option<*mut libc::dirent64> {
        let (name, ino, t) = self.entries.get(self.pos)?;
        self.pos += 1;
        let e = &mut self.ent;
        e.d_ino = *ino;
        e.d_off = self.pos as i64;
        e.d_type = *t;
        let n = name.len().min(255);
        for (dst, src) in e.d_name.iter_mut().zip(&name[..n]) {
            *dst = *src as libc::c_char;
        }
        e.d_name[n] = 0;
        e.d_reclen = (std::mem::offset_of!(libc::dirent64, d_name) + n + 1).next_multiple_of(8) as u16;
        Some(e as *mut libc::dirent64)
    }

    /// rewinddir: start again with a fresh snapshot.
    pub fn rewind(&mut self) {
        if let Ok(v) = snapshot(self.fd) {
            self.entries = v;
        }
        self.pos = 0;
    }

    /// telldir.
    pub fn tell(&self) -> i64 {
        self.pos as i64
    }

    /// seekdir.
    pub fn seek(&mut self, pos: i64) {
        self.pos = pos.max(0) as usize;
    }
}

/// closedir: forget the stream and return its descriptor (to be closed by the caller).
///
/// # Safety
/// `d` must be one of ours.
pub unsafe fn close(d: *mut libc::DIR) -> i32 {
    LOCK.write();
    // SAFETY: LOCK held exclusively.
    unsafe { &mut *DIRS.0.get() }.remove(&(d as usize));
    NDIRS.fetch_sub(1, Ordering::Relaxed);
    LOCK.write_unlock();
    // SAFETY: created by Box::into_raw in `open`, removed from the table above.
    let b = unsafe { Box::from_raw(d as *mut ShimDir) };
    b.fd
}
