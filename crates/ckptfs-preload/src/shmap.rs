//! Writable shared mappings (`mmap(PROT_WRITE, MAP_SHARED)`) of store files, through
//! the store's [`SharedMapping`] (crates/ckptfs-store/src/shared_map.rs: a second mapping
//! of the file's chunk pages, so writes through it land in the store itself and are seen
//! by every process at once: numpy.memmap w+/r+, sqlite's WAL index, fio's mmap engine).
//! The shim keeps the list of live mappings, refreshes their checksums at `msync`,
//! `munmap` and at exit, and hands the file's lease to a fork child before it uses it.
//! No pointer into the store's shared memory is formed here.
//!
//! Limits (documented): a mapping needs the whole range in memory chunks (a file with
//! spilled chunks is ENODEV); the range must lie inside the file (beyond EOF: ENXIO,
//! where the kernel would SIGBUS on access); the offset must be page-aligned (EINVAL);
//! truncating a file below a live mapping's range is not detected.

use crate::state::{self, Desc, R};
use ckptfs_store::{OpenFlags, SharedMapping};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

struct Map {
    /// The mapping and the write handle it keeps (its lease keeps the chunks from being
    /// recycled if the file is unlinked).
    m: SharedMapping,
    /// The process whose lease the handle holds (a fork child adopts it before using it).
    pid: i32,
}

fn getpid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// A fork child inherits the mapping (shared pages) and the handle: take its own lease
/// before using or closing it, never the parent's.
fn adopt(m: &mut Map) -> R<()> {
    let me = getpid();
    if m.pid != me {
        m.m.handle_mut().adopt_after_fork().map_err(state::se)?;
        m.pid = me;
    }
    Ok(())
}

fn close(mut m: Map) {
    if adopt(&mut m).is_ok() {
        let _ = m.m.into_handle().close();
    } else {
        std::mem::forget(m.m.into_handle());
    }
}

static MAPS: Mutex<Vec<Map>> = Mutex::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn maps() -> std::sync::MutexGuard<'static, Vec<Map>> {
    MAPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Write the mapped bytes back through the store (checksums up to date).
fn refresh(m: &mut Map) -> R<()> {
    adopt(m)?;
    m.m.refresh().map_err(state::se)
}

/// Map `len` bytes of store file `d` at `off`, shared and writable.
///
/// # Safety
/// As mmap(2): with MAP_FIXED, `addr` names memory the caller gives up.
pub unsafe fn map(
    d: &Desc,
    addr: *mut libc::c_void,
    len: usize,
    prot: i32,
    flags: i32,
    off: i64,
) -> R<*mut libc::c_void> {
    if d.is_dir {
        return Err(libc::ENODEV);
    }
    if d.acc != libc::O_RDWR {
        return Err(libc::EACCES); // as the kernel: a shared writable mapping needs O_RDWR
    }
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(ckptfs_store::shared_map::page_size()) {
        return Err(libc::EINVAL);
    }
    let store = state::store()?;
    let h = store
        .open(
            &d.path,
            OpenFlags {
                read: true,
                write: true,
                ..Default::default()
            },
            0,
        )
        .map_err(state::se)?;
    // SAFETY: the caller's mmap(2) contract, passed on (MAP_FIXED gives up `addr`).
    let m = unsafe { SharedMapping::map(store, h, addr, len, prot, flags, off as u64) }.map_err(state::se)?;
    let base = m.addr() as *mut libc::c_void;
    maps().push(Map { m, pid: getpid() });
    COUNT.fetch_add(1, Ordering::Relaxed);
    Ok(base)
}

/// `msync`: refresh the checksums of every shared store mapping overlapping the range.
/// Returns whether any did.
pub fn sync(addr: usize, len: usize) -> R<bool> {
    let mut any = false;
    for m in maps().iter_mut() {
        if m.m.overlaps(addr, len) {
            any = true;
            refresh(m)?;
        }
    }
    Ok(any)
}

/// `munmap`: refresh and forget the shared store mappings inside the range (a partial
/// unmap refreshes them and keeps them until they are unmapped whole).
pub fn unmap(addr: usize, len: usize) {
    let mut ms = maps();
    let mut i = 0;
    while i < ms.len() {
        let m = &mut ms[i];
        if m.m.overlaps(addr, len) {
            let _ = refresh(m);
            if m.m.inside(addr, len) {
                let m = ms.swap_remove(i);
                COUNT.fetch_sub(1, Ordering::Relaxed);
                close(m);
                continue;
            }
        }
        i += 1;
    }
}

/// Any shared store mapping at all (fast test for the munmap/msync hooks)?
#[inline]
pub fn any() -> bool {
    COUNT.load(Ordering::Relaxed) != 0
}

/// At exit: refresh every mapping's checksums and release the handles.
pub fn flush_all() {
    if !any() {
        return;
    }
    let all = std::mem::take(&mut *maps());
    COUNT.store(0, Ordering::Relaxed);
    for mut m in all {
        let _ = refresh(&mut m);
        close(m);
    }
}
