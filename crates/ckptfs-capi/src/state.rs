//! Process-wide state behind the C ABI: the mount table (path prefix -> store) and the
//! descriptor table. Safe Rust only.
//!
//! Locking: `MOUNTS` (RwLock) before `TABLE` (Mutex) before a descriptor's own Mutex.
//! A descriptor's Mutex is held for the duration of one call on it, so calls on distinct
//! descriptors run in parallel and calls on the same descriptor are serialized (the file
//! position is shared, as with a kernel file description).

use crate::error::{CapiError, Result};
use crate::types::MAX_DESCRIPTORS;
use ckptfs_store::layout::{NAME_MAX, PATH_MAX};
use ckptfs_store::{DirEntry, FileHandle, OpenFlags, Store, StoreOptions};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// How `mount` obtains its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// Attach, or create if missing.
    OpenOrCreate,
    /// Attach only.
    Existing,
    /// Create only.
    New,
}

struct Mount {
    id: u64,
    prefix: String,
    store: Store,
}

/// An open descriptor.
pub struct Desc {
    /// The open file or directory.
    pub fh: FileHandle,
    /// Directory listing snapshot and cursor (taken at the first readdir).
    pub dir: Option<(Vec<DirEntry>, usize)>,
}

/// None once closed: a call that fetched the Arc before close sees EBADF.
type DescCell = Arc<Mutex<Option<Desc>>>;

struct Slot {
    mount_id: u64,
    desc: DescCell,
}

/// The descriptor table: `slots[fd]`, and the free numbers below `slots.len()` in a
/// min-heap so that open takes the lowest free number in O(log n).
struct Table {
    slots: Vec<Option<Slot>>,
    free: BinaryHeap<Reverse<usize>>,
}

impl Table {
    fn get(&self, fd: i32) -> Option<&Slot> {
        usize::try_from(fd).ok().and_then(|i| self.slots.get(i))?.as_ref()
    }

    fn take(&mut self, fd: i32) -> Option<Slot> {
        let i = usize::try_from(fd).ok()?;
        let slot = self.slots.get_mut(i)?.take()?;
        self.free.push(Reverse(i));
        Some(slot)
    }

    /// The lowest free number, occupied by `slot`.
    fn insert(&mut self, slot: Slot) -> Option<usize> {
        let i = match self.free.pop() {
            Some(Reverse(i)) => i,
            None if self.slots.len() < MAX_DESCRIPTORS => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return None,
        };
        self.slots[i] = Some(slot);
        Some(i)
    }
}

static MOUNTS: RwLock<Vec<Mount>> = RwLock::new(Vec::new());
static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: Vec::new(),
    free: BinaryHeap::new(),
});
static NEXT_MOUNT_ID: AtomicU64 = AtomicU64::new(1);

/// Lock, ignoring poisoning: a panic is caught at the ABI boundary and the tables stay
/// structurally valid (every update is a single assignment).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn enoent() -> CapiError {
    CapiError::new(libc::ENOENT, "not under a mounted ckptfs prefix")
}

/// Make `path` absolute (relative paths start at the process's working directory) and
/// resolve `.` and `..` lexically. Over-long paths and names are ENAMETOOLONG.
pub fn normalize(path: &str) -> Result<String> {
    if path.is_empty() {
        return Err(CapiError::new(libc::ENOENT, "empty path"));
    }
    if path.len() > PATH_MAX {
        return Err(CapiError::new(
            libc::ENAMETOOLONG,
            format!("path of {} bytes (at most {PATH_MAX})", path.len()),
        ));
    }
    let full = if path.starts_with('/') {
        path.to_string()
    } else {
        let cwd = std::env::current_dir()
            .map_err(|e| CapiError::new(e.raw_os_error().unwrap_or(libc::ENOENT), format!("getcwd: {e}")))?;
        let cwd = cwd
            .to_str()
            .ok_or_else(|| CapiError::new(libc::ENOENT, "working directory is not UTF-8"))?;
        format!("{cwd}/{path}")
    };
    let norm = ckptfs_settings::path::normalize_checked(&full, NAME_MAX).map_err(|n| {
        CapiError::new(
            libc::ENAMETOOLONG,
            format!("name of {n} bytes (at most {NAME_MAX})"),
        )
    })?;
    if norm.len() > PATH_MAX {
        return Err(CapiError::new(
            libc::ENAMETOOLONG,
            format!("path of {} bytes", norm.len()),
        ));
    }
    Ok(norm)
}

/// The part of normalized `path` below `prefix`, as a store path, if it is below it.
fn strip(prefix: &str, path: &str) -> Option<String> {
    if prefix == "/" {
        return Some(path.to_string());
    }
    let rest = path.strip_prefix(prefix)?;
    if rest.is_empty() {
        Some("/".into())
    } else if rest.starts_with('/') {
        Some(rest.to_string())
    } else {
        None
    }
}

fn mounts() -> std::sync::RwLockReadGuard<'static, Vec<Mount>> {
    MOUNTS.read().unwrap_or_else(|e| e.into_inner())
}

/// The mount with the longest prefix containing normalized `path`, and the store path.
fn find<'a>(ms: &'a [Mount], path: &str) -> Option<(&'a Mount, String)> {
    ms.iter()
        .filter_map(|m| strip(&m.prefix, path).map(|p| (m, p)))
        .max_by_key(|(m, _)| m.prefix.len())
}

/// A path resolved to its store.
pub struct Resolved {
    /// The mount's store.
    pub store: Store,
    /// Path inside the store.
    pub path: String,
}

/// Resolve a caller's path to (store, store path). Outside every mount: ENOENT.
pub fn resolve(path: &str) -> Result<Resolved> {
    let norm = normalize(path)?;
    let ms = mounts();
    let (m, p) = find(&ms, &norm).ok_or_else(enoent)?;
    Ok(Resolved {
        store: m.store.clone(),
        path: p,
    })
}

/// Resolve both paths of a rename. The target outside the source's store: EXDEV.
pub fn resolve_pair(from: &str, to: &str) -> Result<(Store, String, String)> {
    let (nf, nt) = (normalize(from)?, normalize(to)?);
    let ms = mounts();
    let (mf, pf) = find(&ms, &nf).ok_or_else(enoent)?;
    match find(&ms, &nt) {
        Some((mt, pt)) if mt.store.name() == mf.store.name() => Ok((mf.store.clone(), pf, pt)),
        _ => Err(CapiError::new(
            libc::EXDEV,
            "the target is not in the source's ckptfs store",
        )),
    }
}

/// Mount `prefix` on the store described by `opts`.
pub fn mount(prefix: &str, opts: &StoreOptions, how: Attach) -> Result<()> {
    let prefix = normalize(prefix)?;
    let taken = |ms: &[Mount]| {
        ms.iter()
            .any(|m| m.prefix == prefix)
            .then(|| CapiError::new(libc::EBUSY, "already mounted"))
    };
    if let Some(e) = taken(&mounts()) {
        return Err(e);
    }
    // Attach or create (pre-faulting can take a while) without blocking path calls.
    let store = match how {
        Attach::OpenOrCreate => Store::open_or_create(opts),
        Attach::Existing => Store::attach(opts),
        Attach::New => Store::create(opts),
    }?;
    let mut ms = MOUNTS.write().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = taken(&ms) {
        return Err(e);
    }
    ms.push(Mount {
        id: NEXT_MOUNT_ID.fetch_add(1, Ordering::Relaxed),
        prefix,
        store,
    });
    Ok(())
}

/// Unmount `prefix`. EINVAL if it is not mounted, EBUSY while descriptors are open on it.
pub fn unmount(prefix: &str) -> Result<()> {
    let prefix = normalize(prefix)?;
    let mut ms = MOUNTS.write().unwrap_or_else(|e| e.into_inner());
    let i = ms
        .iter()
        .position(|m| m.prefix == prefix)
        .ok_or_else(|| CapiError::new(libc::EINVAL, "not mounted"))?;
    let id = ms[i].id;
    let open = lock(&TABLE)
        .slots
        .iter()
        .flatten()
        .filter(|s| s.mount_id == id)
        .count();
    if open > 0 {
        return Err(CapiError::new(
            libc::EBUSY,
            format!("{open} descriptor(s) still open"),
        ));
    }
    ms.remove(i);
    Ok(())
}

/// Open `path` and return a new descriptor (the lowest free one).
pub fn open(path: &str, flags: OpenFlags, mode: u32) -> Result<i32> {
    let norm = normalize(path)?;
    // Hold the mount table so that the mount cannot go away before the descriptor exists.
    let ms = mounts();
    let (m, p) = find(&ms, &norm).ok_or_else(enoent)?;
    // Reserve the descriptor first (EMFILE must not create or truncate anything), then
    // open without holding the table: store.open can wait for the store's namespace
    // lock, and every descriptor lookup needs the table. Until filled, the reserved slot
    // reads as closed (EBADF).
    let cell: DescCell = Arc::new(Mutex::new(None));
    let slot = Slot {
        mount_id: m.id,
        desc: cell.clone(),
    };
    let fd = lock(&TABLE).insert(slot).ok_or_else(|| {
        CapiError::new(
            libc::EMFILE,
            format!("{MAX_DESCRIPTORS} ckptfs descriptors already open"),
        )
    })? as i32;
    match m.store.open(&p, flags, mode) {
        Ok(fh) => *lock(&cell) = Some(Desc { fh, dir: None }),
        Err(e) => {
            let mut table = lock(&TABLE);
            // Unless a stray close already released it (and it was reused).
            if table.get(fd).is_some_and(|s| Arc::ptr_eq(&s.desc, &cell)) {
                table.take(fd);
            }
            return Err(e.into());
        }
    }
    Ok(fd)
}

fn bad_fd(fd: i32) -> CapiError {
    CapiError::new(libc::EBADF, format!("bad ckptfs descriptor {fd}"))
}

fn cell(fd: i32) -> Result<DescCell> {
    lock(&TABLE)
        .get(fd)
        .map(|s| s.desc.clone())
        .ok_or_else(|| bad_fd(fd))
}

/// Run `f` on descriptor `fd` (EBADF if it is not open).
pub fn with_desc<R>(fd: i32, f: impl FnOnce(&mut Desc) -> Result<R>) -> Result<R> {
    let cell = cell(fd)?;
    let mut g = lock(&cell);
    let d = g.as_mut().ok_or_else(|| bad_fd(fd))?;
    // A child of fork() takes its own lease on first use, so that its close or death is
    // tracked apart from the parent's.
    d.fh.adopt_after_fork()?;
    f(d)
}

/// Close descriptor `fd`. The descriptor is freed even if closing reports an error.
pub fn close(fd: i32) -> Result<()> {
    let slot = lock(&TABLE).take(fd).ok_or_else(|| bad_fd(fd))?;
    let desc = lock(&slot.desc).take();
    match desc {
        Some(mut d) => {
            if let Err(e) = d.fh.adopt_after_fork() {
                // Closing without our own lease would end the parent's: leave it be.
                std::mem::forget(d);
                return Err(e.into());
            }
            Ok(d.fh.close()?)
        }
        None => Err(bad_fd(fd)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_resolves_dots_and_rejects_long_names() {
        assert_eq!(normalize("/a/./b/../c//d/").unwrap(), "/a/c/d");
        assert_eq!(normalize("/../..").unwrap(), "/");
        assert_eq!(normalize("").unwrap_err().errno, libc::ENOENT);
        let long = format!("/ckpt/{}", "x".repeat(NAME_MAX + 1));
        assert_eq!(normalize(&long).unwrap_err().errno, libc::ENAMETOOLONG);
        let deep = format!("/{}", "d/".repeat(2100));
        assert_eq!(normalize(&deep).unwrap_err().errno, libc::ENAMETOOLONG);
        let rel = normalize("x/y").unwrap();
        assert!(rel.starts_with('/') && rel.ends_with("/x/y"), "{rel}");
    }

    #[test]
    fn strip_matches_whole_components_only() {
        assert_eq!(strip("/ckpt", "/ckpt").as_deref(), Some("/"));
        assert_eq!(strip("/ckpt", "/ckpt/a/b").as_deref(), Some("/a/b"));
        assert_eq!(strip("/ckpt", "/ckpt2/a"), None);
        assert_eq!(strip("/ckpt", "/other"), None);
        assert_eq!(strip("/", "/x").as_deref(), Some("/x"));
    }
}
