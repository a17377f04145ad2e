//! Writable shared mappings (`mmap(PROT_WRITE, MAP_SHARED)`) of store files. A file's
//! chunks are chunk-size, page-aligned ranges of the store's shared data region, which
//! this process already maps `MAP_SHARED`: the shim reserves an address range and
//! aliases each chunk's pages into it with `mremap(old_size = 0)`, which creates a second
//! mapping of the same shared pages. Writes through the mapping therefore land in the
//! store itself and are seen by every process at once (numpy.memmap w+/r+, sqlite's WAL
//! index, fio's mmap engine).
//!
//! The store checksums each chunk's written bytes; stores through a mapping bypass that,
//! so the shim brings them up to date by writing the mapped bytes onto themselves through
//! the store (`pwrite` from the mapping to the same offset) at `msync`, `munmap`, and at
//! exit. Before mapping, the range is *materialised*: its current bytes are read and
//! written back, so every chunk exists and holes read as zeros (a recycled chunk never
//! exposes another file's old bytes).
//!
//! Limits (documented): a mapping needs the whole range in memory chunks (a file with
//! spilled chunks is ENODEV); the range must lie inside the file (beyond EOF: ENXIO,
//! where the kernel would SIGBUS on access); the offset must be page-aligned (EINVAL);
//! truncating a file below a live mapping's range is not detected.

use crate::state::{self, Desc, R};
use ckptfs_store::{ChunkLocation, FileHandle, OpenFlags};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

struct Map {
    addr: usize,
    len: usize,
    off: u64,
    /// A write handle of the file kept while the mapping lives (its lease keeps the
    /// chunks from being recycled if the file is unlinked).
    h: FileHandle,
    /// The process whose lease `h` holds (a fork child adopts it before using it).
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
        m.h.adopt_after_fork().map_err(state::se)?;
        m.pid = me;
    }
    Ok(())
}

fn close(mut m: Map) {
    if adopt(&mut m).is_ok() {
        let _ = m.h.close();
    } else {
        std::mem::forget(m.h);
    }
}

static MAPS: Mutex<Vec<Map>> = Mutex::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn maps() -> std::sync::MutexGuard<'static, Vec<Map>> {
    MAPS.lock().unwrap_or_else(|e| e.into_inner())
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Write the mapped bytes onto themselves through the store (checksums up to date).
fn refresh(m: &mut Map) -> R<()> {
    adopt(m)?;
    // SAFETY: the mapping is alive and len bytes long.
    let bytes = unsafe { std::slice::from_raw_parts(m.addr as *const u8, m.len) };
    let mut done = 0;
    while done < m.len {
        let n =
            m.h.pwrite(&bytes[done..], m.off + done as u64)
                .map_err(state::se)?;
        if n == 0 {
            return Err(libc::EIO);
        }
        done += n;
    }
    Ok(())
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
    let pg = page();
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(pg) {
        return Err(libc::EINVAL);
    }
    let store = state::store()?;
    let mut h = store
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
    let off = off as u64;
    if off + len as u64 > h.size() {
        let _ = h.close();
        return Err(libc::ENXIO);
    }
    // Materialise: read the range and write it back (allocates chunks, zero-fills holes).
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let n = h.pread(&mut buf[got..], off + got as u64).map_err(state::se)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let mut put = 0;
    while put < len {
        let n = h.pwrite(&buf[put..], off + put as u64).map_err(state::se)?;
        put += n;
    }
    drop(buf);
    // A small file's blocks move as it grows: pin its data in whole chunks first.
    if let Err(e) = h.make_chunked() {
        let _ = h.close();
        return Err(state::se(e));
    }
    let region = store.data_region();
    let cs = region.chunk_size;
    let chunks = h.chunk_list();
    // Reserve the range (or the caller's fixed address).
    let keep = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE);
    // SAFETY: an anonymous reservation; MAP_FIXED only at the caller's request.
    let base = unsafe {
        libc::mmap(
            addr,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        let _ = h.close();
        return Err(crate::sys::errno());
    }
    let fail = |e: i32, h: FileHandle| {
        // SAFETY: unmapping our own reservation.
        unsafe { libc::munmap(base, len) };
        let _ = h.close();
        Err(e)
    };
    let mut pos = 0u64;
    while pos < len as u64 {
        let fo = off + pos;
        let logical = (fo / cs) as u32;
        let within = fo % cs;
        let piece = (cs - within).min(len as u64 - pos);
        let Some(c) = chunks.iter().find(|c| c.logical == logical) else {
            return fail(libc::EIO, h);
        };
        let ChunkLocation::Memory(at) = c.location else {
            return fail(libc::ENODEV, h); // spilled chunk: not in the shared memory region
        };
        // Round the piece up to whole pages (the last one of the range).
        let plen = (piece as usize).div_ceil(pg) * pg;
        // SAFETY: the chunk lies in this process's MAP_SHARED data region; old_size 0
        // makes a second mapping of the same pages at a fixed address of our reservation.
        let r = unsafe {
            libc::mremap(
                region.base.add((at + within) as usize) as *mut libc::c_void,
                0,
                plen,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                (base as *mut u8).add(pos as usize) as *mut libc::c_void,
            )
        };
        if r == libc::MAP_FAILED {
            let e = crate::sys::errno();
            return fail(e, h);
        }
        pos += piece;
    }
    // SAFETY: our mapping; the caller's protection.
    unsafe { libc::mprotect(base, len, prot) };
    maps().push(Map {
        addr: base as usize,
        len,
        off,
        h,
        pid: getpid(),
    });
    COUNT.fetch_add(1, Ordering::Relaxed);
    Ok(base)
}

/// `msync`: refresh the checksums of every shared store mapping overlapping the range.
/// Returns whether any did.
pub fn sync(addr: usize, len: usize) -> R<bool> {
    let mut any = false;
    for m in maps().iter_mut() {
        if addr < m.addr + m.len && m.addr < addr + len {
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
        if addr < m.addr + m.len && m.addr < addr + len {
            let _ = refresh(m);
            if addr <= m.addr && m.addr + m.len <= addr + len {
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
