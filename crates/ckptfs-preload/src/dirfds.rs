//! Kernel directory descriptors whose directory is an *ancestor* of a mount prefix (`/`
//! for `/ckpt`, `/scratch` for `/scratch/ck`). Programs that walk paths one component at
//! a time from `/` (rsync's receiver: `openat(AT_FDCWD, "/", O_PATH)`, then
//! `fstatat(fd, "ckpt")`, `openat(fd, "ckpt", O_NOFOLLOW)`) reach the store through
//! them; the kernel cannot, as `/ckpt` does not exist. The shim remembers the path of
//! such descriptors when they are opened by absolute path or relative to another such
//! descriptor, and `*at` calls relative to them are classified on the joined path.
//!
//! Only ancestors are tracked (a handful of descriptors), so ordinary directory walks
//! pay one length comparison per open. Descriptors made by `dup` or inherited across
//! exec are not tracked (their `*at` calls go to the kernel unchanged).

use crate::paths;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

static ANCESTORS: Mutex<BTreeMap<i32, String>> = Mutex::new(BTreeMap::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn table() -> std::sync::MutexGuard<'static, BTreeMap<i32, String>> {
    ANCESTORS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Is normalised absolute path `p` a proper ancestor of a mount prefix?
pub fn is_ancestor(mounts: &[String], p: &str) -> bool {
    mounts
        .iter()
        .any(|m| p.len() < m.len() && m.starts_with(p) && (p == "/" || m.as_bytes()[p.len()] == b'/'))
}

/// The tracked path of kernel directory descriptor `fd`.
#[inline]
pub fn path_of(fd: i32) -> Option<String> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    table().get(&fd).cloned()
}

/// A pass-through open of C string `path` relative to `dirfd` returned kernel
/// descriptor `fd`: track it if it names an ancestor of a mount prefix. Costs two atomic
/// loads and a scan of at most a few bytes for the common long path (no `strlen`).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
#[inline]
pub unsafe fn note_open_c(mounts: &[String], dirfd: i32, path: *const libc::c_char, fd: i32) {
    if fd < 0 || path.is_null() {
        return;
    }
    if COUNT.load(Ordering::Relaxed) == 0 {
        // Nothing tracked: only a short absolute path can be an ancestor.
        let longest = mounts.iter().map(|m| m.len()).max().unwrap_or(0) + 2;
        // SAFETY: path is NUL-terminated; stop at the NUL.
        if unsafe { *path } as u8 != b'/' {
            return;
        }
        // SAFETY: reading up to the NUL or `longest` bytes, whichever is first.
        let short = (1..=longest).any(|i| unsafe { *path.add(i) } == 0);
        if !short {
            return;
        }
    }
    // SAFETY: as above.
    let b = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    note_open(mounts, dirfd, b, fd);
}

/// A pass-through open of `path` relative to `dirfd` returned kernel descriptor `fd`:
/// track it if it names an ancestor of a mount prefix.
pub fn note_open(mounts: &[String], dirfd: i32, path: &[u8], fd: i32) {
    if fd < 0 {
        return;
    }
    // The number may have been a tracked descriptor closed behind the shim's back.
    forget(fd);
    if path.is_empty() {
        return;
    }
    let longest = mounts.iter().map(|m| m.len()).max().unwrap_or(0);
    let full = if path[0] == b'/' {
        if path.len() > longest + 2 {
            return;
        }
        let Ok(s) = std::str::from_utf8(path) else { return };
        paths::normalize(s)
    } else {
        let Some(base) = path_of(dirfd) else { return };
        let Ok(s) = std::str::from_utf8(path) else { return };
        paths::join(&base, s)
    };
    if is_ancestor(mounts, &full) && table().insert(fd, full).is_none() {
        COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

/// Kernel descriptor `fd` was closed (or reused): stop tracking it.
#[inline(always)]
pub fn forget(fd: i32) {
    if COUNT.load(Ordering::Relaxed) != 0 {
        forget_tracked(fd);
    }
}

#[cold]
#[inline(never)]
fn forget_tracked(fd: i32) {
    if table().remove(&fd).is_some() {
        COUNT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Descriptors `[lo, hi]` were closed.
pub fn forget_range(lo: u32, hi: u32) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut t = table();
    let before = t.len();
    t.retain(|fd, _| !(lo..=hi).contains(&(*fd as u32)));
    COUNT.fetch_sub(before - t.len(), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_of_the_mounts_only() {
        let m = vec!["/ckpt".to_string(), "/scratch/ck".to_string()];
        assert!(is_ancestor(&m, "/"));
        assert!(is_ancestor(&m, "/scratch"));
        assert!(!is_ancestor(&m, "/ckpt"));
        assert!(!is_ancestor(&m, "/scr"));
        assert!(!is_ancestor(&m, "/tmp"));
        note_open(&m, libc::AT_FDCWD, b"/", 900);
        note_open(&m, 900, b"scratch", 901);
        note_open(&m, 900, b"tmp", 902);
        note_open(&m, libc::AT_FDCWD, b"/tmp/a/long/path/not/an/ancestor", 903);
        assert_eq!(path_of(900).as_deref(), Some("/"));
        assert_eq!(path_of(901).as_deref(), Some("/scratch"));
        assert_eq!(path_of(902), None);
        assert_eq!(path_of(903), None);
        forget(900);
        forget_range(0, 1000);
        assert_eq!(path_of(901), None);
    }
}
