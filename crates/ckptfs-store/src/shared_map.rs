//! Writable shared mappings of a store file (`mmap(PROT_WRITE, MAP_SHARED)` through the
//! preload shim): the file's chunks are chunk-size, page-aligned ranges of the store's
//! shared data region, which this process already maps `MAP_SHARED`, so a mapping is a
//! reserved address range into which each chunk's pages are aliased with
//! `mremap(old_size = 0)` (a second mapping of the same shared pages). Writes through it
//! land in the store itself and are seen by every process at once.
//!
//! The store checksums each chunk's written bytes; stores through a mapping bypass that,
//! so [`SharedMapping::refresh`] writes the mapped bytes back through the store (the
//! checksums follow). It copies them out through a private buffer first: the mapping and
//! the chunks are the same memory, so a direct write would copy a range onto itself
//! (and would form a `&[u8]` over bytes the same call modifies). Before mapping, the
//! range is *materialised*: its current bytes are read and written back, so every chunk
//! exists and holes read as zeros (a recycled chunk never exposes another file's old
//! bytes).
//!
//! Limits: the whole range must be in memory chunks (a spilled chunk: ENODEV); it must
//! lie inside the file (beyond EOF: ENXIO, where the kernel would SIGBUS on access); the
//! offset must be page-aligned (EINVAL); truncating a file below a live mapping's range
//! is not detected. This module and the rest of the store are the only code that forms
//! pointers into the shared region.

use crate::error::{Result, StoreError};
use crate::file::FileHandle;
use crate::store::{ChunkLocation, Store};
use std::io;

/// A writable alias of `len` bytes of a store file, at an address of this process.
/// The application owns the address range (it unmaps it); this value keeps a write
/// handle of the file (its lease keeps the chunks from being recycled if the file is
/// unlinked) and refreshes the checksums. Dropping it closes the handle and leaves the
/// mapping to the application.
pub struct SharedMapping {
    addr: usize,
    len: usize,
    off: u64,
    h: FileHandle,
}

fn os(what: &str, errno: i32) -> StoreError {
    StoreError::io(what, io::Error::from_raw_os_error(errno))
}

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Bytes copied out per step of [`SharedMapping::refresh`].
const BOUNCE: usize = 1 << 20;

impl SharedMapping {
    /// Map `len` bytes of the file open as `h` (read-write) at file offset `off`, shared
    /// and writable, with protection `prot`; at `addr` when `flags` has `MAP_FIXED` or
    /// `MAP_FIXED_NOREPLACE` (the only flags looked at), else where the kernel puts it
    /// (`addr` a hint). On error the handle is closed.
    ///
    /// # Safety
    /// As mmap(2): with `MAP_FIXED`, whatever was mapped at `addr..addr + len` is given up
    /// by the caller (it is replaced).
    pub unsafe fn map(
        store: &Store,
        mut h: FileHandle,
        addr: *mut libc::c_void,
        len: usize,
        prot: i32,
        flags: i32,
        off: u64,
    ) -> Result<SharedMapping> {
        let pg = page_size();
        if len == 0 || !(off as usize).is_multiple_of(pg) {
            let _ = h.close();
            return Err(StoreError::Invalid("mapping: empty or not page-aligned".into()));
        }
        if off.checked_add(len as u64).is_none_or(|end| end > h.size()) {
            let _ = h.close();
            return Err(os("map beyond the end of the file", libc::ENXIO));
        }
        if let Err(e) = materialise(&mut h, off, len) {
            let _ = h.close();
            return Err(e);
        }
        // A small file's blocks move as it grows: pin its data in whole chunks first.
        if let Err(e) = h.make_chunked() {
            let _ = h.close();
            return Err(e);
        }
        let region = store.data_region();
        let cs = region.chunk_size;
        let chunks = h.chunk_list();
        let keep = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE);
        // SAFETY: an anonymous reservation; MAP_FIXED only at the caller's request, whose
        // contract gives up what is there.
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
            return Err(StoreError::io("reserve the mapping", io::Error::last_os_error()));
        }
        let fail = |e: StoreError, h: FileHandle| {
            // SAFETY: unmapping the reservation made above, nothing else.
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
                return fail(os("a chunk of the range is missing", libc::EIO), h);
            };
            let ChunkLocation::Memory(at) = c.location else {
                // A spilled chunk is not in the shared memory region.
                return fail(os("map a spilled chunk", libc::ENODEV), h);
            };
            if at + within + piece > region.len {
                return fail(os("a chunk outside the data region", libc::EIO), h);
            }
            // Round the piece up to whole pages (the last one of the range; chunks are
            // whole pages).
            let plen = (piece as usize).div_ceil(pg) * pg;
            // SAFETY: `at + within` (checked just above) lies in this process's MAP_SHARED
            // data region, and the chunk holds whole pages from there; old_size 0 makes a
            // second mapping of the same pages at an address inside our reservation
            // (`pos + plen <= len` rounded up to the page the reservation also covers).
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
                return fail(StoreError::io("alias a chunk", io::Error::last_os_error()), h);
            }
            pos += piece;
        }
        // SAFETY: our own mapping, the caller's protection.
        unsafe { libc::mprotect(base, len, prot) };
        Ok(SharedMapping {
            addr: base as usize,
            len,
            off,
            h,
        })
    }

    /// Start address of the mapping.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: a mapping has at least one byte (here for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `addr..addr + len` overlaps the mapping.
    pub fn overlaps(&self, addr: usize, len: usize) -> bool {
        addr < self.addr + self.len && self.addr < addr.saturating_add(len)
    }

    /// Whether the mapping lies wholly inside `addr..addr + len`.
    pub fn inside(&self, addr: usize, len: usize) -> bool {
        addr <= self.addr && self.addr + self.len <= addr.saturating_add(len)
    }

    /// The file's write handle (e.g. to adopt its lease after a fork).
    pub fn handle_mut(&mut self) -> &mut FileHandle {
        &mut self.h
    }

    /// The write handle, the mapping forgotten (the application unmaps it).
    pub fn into_handle(self) -> FileHandle {
        self.h
    }

    /// Write the mapped bytes back through the store, so the chunks' checksums match
    /// what was stored through the mapping. The bytes go through a private buffer: the
    /// mapping and the chunks are the same memory.
    pub fn refresh(&mut self) -> Result<()> {
        let mut buf = vec![0u8; self.len.min(BOUNCE)];
        let mut done = 0;
        while done < self.len {
            let n = buf.len().min(self.len - done);
            // SAFETY: `addr + done .. + n` lies in the mapping, which is alive (the
            // application has not unmapped it: callers refresh before they forget it)
            // and readable; `buf` is a private buffer of at least `n` bytes, so the
            // ranges do not overlap. Other processes may store into the shared pages
            // meanwhile: the copy takes whatever bytes it sees, as a write() from the
            // mapping would.
            unsafe { std::ptr::copy_nonoverlapping((self.addr + done) as *const u8, buf.as_mut_ptr(), n) };
            let mut put = 0;
            while put < n {
                let w = self.h.pwrite(&buf[put..n], self.off + (done + put) as u64)?;
                if w == 0 {
                    return Err(os("refresh a mapping", libc::EIO));
                }
                put += w;
            }
            done += n;
        }
        Ok(())
    }
}

/// Read `len` bytes at `off` and write them back (allocates chunks, zero-fills holes).
fn materialise(h: &mut FileHandle, off: u64, len: usize) -> Result<()> {
    let mut buf = vec![0u8; len.min(BOUNCE)];
    let mut done = 0;
    while done < len {
        let n = buf.len().min(len - done);
        let mut got = 0;
        while got < n {
            let r = h.pread(&mut buf[got..n], off + (done + got) as u64)?;
            if r == 0 {
                break;
            }
            got += r;
        }
        buf[got..n].fill(0);
        let mut put = 0;
        while put < n {
            let w = h.pwrite(&buf[put..n], off + (done + put) as u64)?;
            if w == 0 {
                return Err(os("materialise a mapping", libc::EIO));
            }
            put += w;
        }
        done += n;
    }
    Ok(())
}
