//! Reading chunk bytes of the shared data region without the writer: checksum, copy,
//! and hand them to the kernel, all through raw pointers inside this crate.
//!
//! Other processes of the node may write a chunk while a reader (the drain agent) copies
//! it out (a file rewritten, a chunk reused during the copy). A Rust reference (`&[u8]`)
//! over such memory would promise the compiler that it does not change, so none is ever
//! handed out: a [`RegionSlice`] is a bounds-checked address range that only this module
//! dereferences. What a reader sees during a concurrent write is some mix of old and new
//! bytes, which is caught by the checks around every use (CRC32C against the chunk list
//! taken before, the file's identity, size, mtime and chunk list after: docs/agent.md).
//!
//! - [`RegionSlice::crc32c`] checksums the range (a transient view that never leaves
//!   this module and feeds only the checksum: a torn read yields a wrong CRC, which the
//!   caller reports as a mismatch);
//! - [`RegionSlice::copy_to`] copies it into a caller buffer;
//! - [`pwritev_all`] writes region ranges, caller buffers and zeros to a descriptor
//!   with `pwritev` (the kernel reads the pages; `O_DIRECT` DMA from them);
//! - [`writev_from`] sends a chunk's pieces after a header to a socket with `writev`, the
//!   store's one `writev` (the zero-copy send of a partner copy, and of the memory chunks
//!   and zeros of a [`crate::netio::WireSource`]);
//! - [`RegionSlice::populate`] and [`RegionIo::populate_write_all`] pre-fault pages.
//!
//! Later kernel paths (`sendfile`/`splice` from the segment descriptor, RDMA
//! registration) belong here too.

use crate::checksum::crc32c;
use crate::store::Store;
use ckptfs_level::IoPart;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The data region of a store as mapped in this process, kept mapped for as long as
/// this value lives.
pub struct RegionIo {
    _store: Store,
    base: *const u8,
    len: u64,
}

// SAFETY: `base` is an address in a shared mapping that `_store` keeps alive; this type
// only dereferences it through the bounds-checked raw-pointer operations below, which
// are valid from any thread.
unsafe impl Send for RegionIo {}
// SAFETY: as for Send: no method takes `&mut self` and no Rust reference to the mapping
// is created that could alias a concurrent write.
unsafe impl Sync for RegionIo {}

impl std::fmt::Debug for RegionIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionIo").field("len", &self.len).finish()
    }
}

impl RegionIo {
    /// The data region of `store` (the mapping stays alive with this value).
    pub fn new(store: &Store) -> RegionIo {
        let r = store.data_region();
        RegionIo {
            _store: store.clone(),
            base: r.base,
            len: r.len,
        }
    }

    /// Size of the region in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty (a store without memory chunks).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len` bytes at byte offset `off` of the region, or `None` if the range does not
    /// lie inside it.
    pub fn slice(&self, off: u64, len: usize) -> Option<RegionSlice<'_>> {
        let end = off.checked_add(len as u64)?;
        if end > self.len {
            return None;
        }
        Some(RegionSlice {
            // The range is inside the mapping, so `off` fits the address space.
            addr: self.base as usize + off as usize,
            len,
            _region: PhantomData,
        })
    }

    /// Map the whole region writable into this process's page tables (benchmark
    /// workers: a long-running application has done this by its first checkpoint).
    /// Advisory: a kernel without `MADV_POPULATE_WRITE` simply faults later.
    pub fn populate_write_all(&self) {
        // SAFETY: advisory call on exactly our own mapping, which `_store` keeps alive;
        // no Rust reference to the memory is created; failure is harmless.
        unsafe {
            libc::madvise(
                self.base as *mut libc::c_void,
                self.len as usize,
                libc::MADV_POPULATE_WRITE,
            )
        };
    }
}

/// A bounds-checked range of the data region (from [`RegionIo::slice`]); it keeps the
/// region borrowed, so the mapping outlives it. Never a Rust reference to the bytes.
#[derive(Clone, Copy)]
pub struct RegionSlice<'a> {
    addr: usize,
    len: usize,
    _region: PhantomData<&'a RegionIo>,
}

impl std::fmt::Debug for RegionSlice<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionSlice")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

impl<'a> RegionSlice<'a> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `n` bytes (all of them if `n` is larger).
    pub fn prefix(self, n: usize) -> RegionSlice<'a> {
        RegionSlice {
            len: self.len.min(n),
            ..self
        }
    }

    /// Whether address and length are multiples of `align` (O_DIRECT eligibility).
    pub fn is_aligned(&self, align: usize) -> bool {
        self.addr.is_multiple_of(align) && self.len.is_multiple_of(align)
    }

    /// CRC32C of the bytes as they are now.
    pub fn crc32c(&self) -> u32 {
        if self.len == 0 {
            return crc32c(&[]);
        }
        // SAFETY: the range is inside the live mapping (checked by `RegionIo::slice`;
        // `'a` keeps the mapping). The view exists only for the duration of this pure
        // checksum and never leaves this function, so nothing can rely on the bytes
        // staying unchanged: a concurrent write yields a CRC that does not match the
        // chunk list, which every caller treats as a mismatch. Every byte value is a
        // valid u8.
        let view = unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) };
        crc32c(view)
    }

    /// Copy the bytes into `dst[..self.len()]`. Panics if `dst` is shorter.
    pub fn copy_to(&self, dst: &mut [u8]) {
        let dst = &mut dst[..self.len];
        // SAFETY: the source range is inside the live mapping (see `crc32c`) and is read
        // through a raw pointer only; `dst` is a distinct, uniquely borrowed buffer of
        // exactly `len` bytes in this process's private memory, so the two cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.addr as *const u8, dst.as_mut_ptr(), self.len) };
    }

    /// Map the pages of the range into this process's page tables in one call, so that
    /// reading it takes no page faults. Advisory: failure is harmless.
    pub fn populate(&self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: advisory call on a range inside our live mapping; it creates no Rust
        // reference and does not change the bytes.
        unsafe { libc::madvise(self.addr as *mut libc::c_void, self.len, libc::MADV_POPULATE_READ) };
    }
}

// SAFETY: a `RegionSlice` is a bounds-checked range of a mapping that its lifetime `'a`
// keeps alive (`RegionIo::slice`), so `addr..addr + len` stays mapped and readable for as
// long as it is borrowed.
unsafe impl ckptfs_level::SharedBytes for RegionSlice<'_> {
    fn len(&self) -> usize {
        self.len
    }
    fn addr(&self) -> usize {
        self.addr
    }
    fn copy_to(&self, dst: &mut [u8]) {
        RegionSlice::copy_to(self, dst)
    }
    fn crc32c(&self) -> u32 {
        RegionSlice::crc32c(self)
    }
}

fn iovec(p: &IoPart<'_>) -> libc::iovec {
    libc::iovec {
        iov_base: p.addr() as *mut libc::c_void,
        iov_len: p.len(),
    }
}

/// Write all of `parts` at `off` of `fd` with `pwritev`, retrying short and interrupted
/// writes (at most `UIO_MAXIOV` pieces per call).
pub fn pwritev_all(fd: BorrowedFd<'_>, parts: &[IoPart<'_>], mut off: u64) -> io::Result<()> {
    let mut iov: Vec<libc::iovec> = parts.iter().filter(|p| !p.is_empty()).map(iovec).collect();
    let mut first = 0;
    while first < iov.len() {
        let n = (iov.len() - first).min(libc::UIO_MAXIOV as usize);
        // SAFETY: every iovec points into a caller buffer borrowed by `parts` or a
        // shared range whose `SharedBytes` contract keeps it mapped while `parts`
        // borrows it; the kernel only reads from them, and `iov[first..first + n]` is in
        // bounds.
        let r = unsafe { libc::pwritev(fd.as_raw_fd(), iov[first..].as_ptr(), n as i32, off as i64) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"));
        }
        let mut r = r as usize;
        off += r as u64;
        while r > 0 {
            let v = &mut iov[first];
            if r >= v.iov_len {
                r -= v.iov_len;
                first += 1;
            } else {
                // Advance within the same piece (address arithmetic only).
                v.iov_base = (v.iov_base as usize + r) as *mut libc::c_void;
                v.iov_len -= r;
                r = 0;
            }
        }
    }
    Ok(())
}

/// Write `head[at..]` and then `parts` from byte `at - head.len()` on (`at` counts the
/// header's bytes first) to the socket or pipe `fd` with one `writev`: the zero-copy send
/// of a chunk whose bytes are pieces of the data region (a partner copy). Returns the
/// bytes written (possibly fewer: call again with `at` advanced); a non-blocking socket
/// that is full answers `WouldBlock`.
pub fn writev_from(fd: BorrowedFd<'_>, head: &[u8], parts: &[IoPart<'_>], at: usize) -> io::Result<usize> {
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(parts.len() + 1);
    if at < head.len() {
        iov.push(libc::iovec {
            iov_base: head[at..].as_ptr() as *mut libc::c_void,
            iov_len: head.len() - at,
        });
    }
    let mut skip = at.saturating_sub(head.len());
    for p in parts {
        if iov.len() >= libc::UIO_MAXIOV as usize {
            break;
        }
        let n = p.len();
        if skip >= n {
            skip -= n;
            continue;
        }
        // Address arithmetic only: the piece from `skip` on.
        iov.push(libc::iovec {
            iov_base: (p.addr() + skip) as *mut libc::c_void,
            iov_len: n - skip,
        });
        skip = 0;
    }
    if iov.is_empty() {
        return Ok(0);
    }
    // SAFETY: every iovec points into `head` (borrowed for the call), a caller buffer
    // borrowed by `parts`, or a shared range whose `SharedBytes` contract keeps it mapped
    // while `parts` borrows it, each within its length; the kernel only reads from them,
    // and `iov.len()` is at most UIO_MAXIOV.
    let r = unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{OpenFlags, StoreOptions};

    #[test]
    fn region_slice_copy_crc_and_pwritev_return_the_file_bytes() {
        let name = format!("hr2-regionio-{}", std::process::id());
        let _ = Store::destroy(&name);
        let store = Store::create(&StoreOptions {
            name: name.clone(),
            mem_size: Some(4 << 20),
            chunk_size: Some(1 << 20),
            max_files: Some(16),
            ..Default::default()
        })
        .unwrap();
        let data: Vec<u8> = (0..100_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        let mut f = store.open("/f", OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&data).unwrap();
        f.close().unwrap();
        let chunk = store.chunk_list("/f").unwrap()[0].clone();
        let off = match chunk.location {
            crate::ChunkLocation::Memory(offset) => offset,
            other => panic!("expected a memory chunk, got {other:?}"),
        };
        let region = RegionIo::new(&store);
        assert!(region.slice(region.len() - 1, 2).is_none());
        assert!(region.slice(u64::MAX, 1).is_none());
        let s = region.slice(off, data.len()).unwrap();
        assert_eq!(s.crc32c(), crc32c(&data));
        assert_eq!(s.prefix(10).crc32c(), crc32c(&data[..10]));
        let mut copy = vec![0u8; data.len()];
        s.copy_to(&mut copy);
        assert_eq!(copy, data);

        let dir = tempfile::tempdir().unwrap();
        let out = std::fs::File::create(dir.path().join("out")).unwrap();
        let tail = [7u8; 5];
        let head = s.prefix(1000);
        let parts = [IoPart::Shared(&head), IoPart::Buf(&tail), IoPart::Shared(&s)];
        pwritev_all(std::os::fd::AsFd::as_fd(&out), &parts, 3).unwrap();
        let mut want = vec![0u8; 3];
        for p in &parts {
            p.extend_vec(&mut want);
        }
        assert_eq!(std::fs::read(dir.path().join("out")).unwrap(), want);
        assert_eq!(&want[3..1003], &data[..1000]);
        drop(region);
        drop(store);
        let _ = Store::destroy(&name);
    }

    #[test]
    fn writev_from_sends_the_header_then_the_pieces_from_any_offset() {
        let name = format!("hr2-writev-{}", std::process::id());
        let _ = Store::destroy(&name);
        let store = Store::create(&StoreOptions {
            name: name.clone(),
            mem_size: Some(4 << 20),
            chunk_size: Some(1 << 20),
            max_files: Some(16),
            ..Default::default()
        })
        .unwrap();
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut f = store.open("/f", OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&data).unwrap();
        f.close().unwrap();
        let off = match store.chunk_list("/f").unwrap()[0].location {
            crate::ChunkLocation::Memory(offset) => offset,
            other => panic!("expected a memory chunk, got {other:?}"),
        };
        let region = RegionIo::new(&store);
        let s = region.slice(off, data.len()).unwrap();
        let tail = [9u8; 100];
        let parts = [IoPart::Shared(&s), IoPart::Buf(&tail)];
        let head = b"HEADER";
        let mut want = head.to_vec();
        for p in &parts {
            p.extend_vec(&mut want);
        }
        for start in [0, 3, head.len(), head.len() + 1000, want.len() - 1] {
            let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
            let reader = std::thread::spawn(move || {
                let mut got = Vec::new();
                std::io::Read::read_to_end(&mut b, &mut got).unwrap();
                got
            });
            let mut at = start;
            while at < want.len() {
                let n = writev_from(std::os::fd::AsFd::as_fd(&a), head, &parts, at).unwrap();
                assert!(n > 0);
                at += n;
            }
            assert_eq!(
                writev_from(std::os::fd::AsFd::as_fd(&a), head, &parts, at).unwrap(),
                0
            );
            drop(a);
            assert_eq!(reader.join().unwrap(), want[start..], "from {start}");
        }
        drop(region);
        drop(store);
        let _ = Store::destroy(&name);
    }
}
