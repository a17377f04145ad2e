//! A file's chunks written to a socket straight from the store, for partner copies and
//! restores between node daemons: `writev` from the shared mapping for memory chunks
//! (the kernel copies them into the socket; `sendfile` from the segment file with
//! `CKPTFS_PARTNER_SENDFILE=1`, see [`WireSource::with_sendfile`] for why it is not the
//! default), `sendfile` from the spill file for spilled ones, zeros from a static page
//! for holes and for the bytes of a chunk past what was written. No byte passes through
//! a user buffer on the sending side, and no checksum pass is made there: each wire chunk
//! carries the CRC32C the store recorded when the application wrote it, and the
//! receiver checks it (end to end: from the writer's buffer to the partner's store).
//!
//! The application may rewrite the file while it is sent (the daemon takes no lock):
//! the kernel then reads some mix of old and new bytes, which the receiver's CRC check
//! catches; the sender re-checks the chunk list before it ends the copy. No Rust
//! reference to the shared bytes is ever made here (see [`crate::region_io`]).

use crate::checksum::{crc32c_append, crc32c_append_zeros};
use crate::region_io::{writev_from, RegionIo, RegionSlice};
use crate::store::{ChunkInfo, ChunkLocation, Store};
use ckptfs_level::IoPart;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;

/// Zeros for holes and for the unwritten tail of a chunk.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
/// Most pieces handed to one `writev`.
const MAX_IOV: usize = 64;

/// Where a wire chunk's written bytes are.
#[derive(Debug, Clone, Copy)]
enum Src {
    /// In the memory data region at this byte offset (chunk id, offset).
    Mem(u32, u64),
    /// In the spill file at this byte offset.
    Spill(u64),
    /// A hole: zeros only.
    Hole,
}

/// One store chunk of a file as sent on the wire.
#[derive(Debug, Clone, Copy)]
pub struct WireChunk {
    /// Logical chunk index in the file.
    pub logical: u32,
    /// Byte offset in the file.
    pub offset: u64,
    /// Bytes on the wire: the file's bytes in this chunk (zeros past what was written).
    pub len: usize,
    /// CRC32C of those bytes, from the store's chunk record (extended by the zeros).
    pub crc: u32,
    /// Bytes of `len` held by the chunk; the rest are zeros.
    written: usize,
    src: Src,
}

/// Why a chunk list cannot be sent as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSendable {
    /// This logical chunk is being rewritten (stale checksum, or more bytes written than
    /// the file holds): the file is changing, send it later.
    Changing(u32),
    /// This chunk's recorded location is outside the store (a damaged record).
    OutOfRange(u32),
}

/// The chunks of one version of a file, ready to be written to a socket. Keeps the store
/// (and its mapping) alive.
pub struct WireSource {
    store: Store,
    /// The data region, read only through bounds-checked ranges.
    region: RegionIo,
    chunks: Vec<WireChunk>,
    /// The segment file, read-only, when it could be opened and is the mapped one:
    /// memory chunks then go out by `sendfile` (the socket references the pages, no
    /// copy on this side); otherwise by `writev` from the mapping.
    seg_file: Option<std::fs::File>,
}

/// Memory chunks go out by `writev` from the mapping unless `CKPTFS_PARTNER_SENDFILE=1`.
/// Between two simulated nodes on the AMD VM, `writev` was faster than `sendfile` for
/// restores and no slower for copies (docs/benchmarks.md, "Figures behind design
/// choices"): the page references `sendfile` hands the socket are 4 KiB tmpfs pages,
/// many small fragments per packet for the receiver's copy. On a NIC with zero-copy transmit, `sendfile` saves the sender's
/// copy; the variable selects it.
fn sendfile_wanted() -> bool {
    ckptfs_settings::job::partner_sendfile(&|k| std::env::var(k).ok())
}

/// The segment file of `store` opened read-only, if it is the file this process maps
/// (`O_NOFOLLOW`, regular, same inode, long enough): a file renamed or replaced since
/// the attach is not used.
fn open_segment(store: &Store) -> Option<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let seg = &*store.seg;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&seg.path)
        .ok()?;
    let md = f.metadata().ok()?;
    let end = seg.layout.data_off + seg.layout.data_size();
    (md.file_type().is_file() && md.ino() == seg.ino && md.len() >= end).then_some(f)
}

impl std::fmt::Debug for WireSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireSource")
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

impl WireSource {
    /// The wire chunks of a file of `size` bytes with chunk list `list` (a snapshot from
    /// [`Store::chunk_list`] or `FileHandle::chunk_list`): one per store chunk, holes
    /// included, each with the CRC32C the store recorded for it.
    pub fn new(store: &Store, list: &[ChunkInfo], size: u64) -> Result<WireSource, NotSendable> {
        let cs = store.chunk_size();
        let region = store.data_region();
        let n = size.div_ceil(cs);
        let mut chunks = Vec::with_capacity(n as usize);
        let mut it = list.iter().peekable();
        for logical in 0..n {
            let offset = logical * cs;
            let len = (size - offset).min(cs) as usize;
            while it.peek().is_some_and(|c| (c.logical as u64) < logical) {
                it.next();
            }
            let l32 = logical as u32;
            let chunk = match it.peek() {
                Some(c) if c.logical as u64 == logical => {
                    let written = c.written as usize;
                    let Some(crc) = c.crc.filter(|_| written <= len) else {
                        return Err(NotSendable::Changing(l32));
                    };
                    let src = match c.location {
                        ChunkLocation::Memory(off) => {
                            if off.checked_add(written as u64).is_none_or(|e| e > region.len) {
                                return Err(NotSendable::OutOfRange(l32));
                            }
                            Src::Mem(c.chunk_id, off)
                        }
                        ChunkLocation::Spill(off) => {
                            if store.seg.spill().is_none() {
                                return Err(NotSendable::OutOfRange(l32));
                            }
                            Src::Spill(off)
                        }
                    };
                    WireChunk {
                        logical: l32,
                        offset,
                        len,
                        crc: crc32c_append_zeros(crc, len - written),
                        written,
                        src,
                    }
                }
                _ => WireChunk {
                    logical: l32,
                    offset,
                    len,
                    crc: crc32c_append_zeros(0, len),
                    written: 0,
                    src: Src::Hole,
                },
            };
            chunks.push(chunk);
        }
        Ok(WireSource {
            store: store.clone(),
            region: RegionIo::new(store),
            chunks,
            seg_file: if sendfile_wanted() {
                open_segment(store)
            } else {
                None
            },
        })
    }

    /// Send memory chunks by `sendfile` from the segment file (the socket references the
    /// pages) instead of `writev` from the mapping, if the segment file can be opened.
    pub fn with_sendfile(mut self) -> WireSource {
        if self.seg_file.is_none() {
            self.seg_file = open_segment(&self.store);
        }
        self
    }

    /// The wire chunks, in file order.
    pub fn chunks(&self) -> &[WireChunk] {
        &self.chunks
    }

    /// Write `head[at..]` and then chunk `i`'s bytes from where `at` says (`at` counts
    /// the header's bytes first) to `fd` with one system call: `writev` of the header,
    /// the bytes in the mapping and zeros, or `sendfile` from the spill file once the
    /// header is out. Returns the bytes written (possibly fewer: call again with `at`
    /// advanced); a non-blocking socket that is full answers `WouldBlock`.
    pub fn write_to(&self, i: usize, fd: BorrowedFd<'_>, head: &[u8], at: usize) -> io::Result<usize> {
        let c = self.chunks[i];
        let total = head.len() + c.len;
        if at >= total {
            return Ok(0);
        }
        // What is left of the header, then the chunk's bytes from `pos` on.
        let head_left = &head[at.min(head.len())..];
        let pos = at.saturating_sub(head.len());
        let mut mem = None;
        if pos < c.written {
            match c.src {
                Src::Mem(_, off) if self.seg_file.is_some() => {
                    let file = self.seg_file.as_ref().expect("checked");
                    if !head_left.is_empty() {
                        // The header alone, held back to leave with the data (MSG_MORE).
                        // SAFETY: the header slice is valid for the call; the kernel only
                        // reads it.
                        let r = unsafe {
                            libc::send(
                                fd.as_raw_fd(),
                                head_left.as_ptr() as *const libc::c_void,
                                head_left.len(),
                                libc::MSG_MORE | libc::MSG_NOSIGNAL,
                            )
                        };
                        return if r < 0 {
                            Err(io::Error::last_os_error())
                        } else {
                            Ok(r as usize)
                        };
                    }
                    let mut o = (self.store.seg.layout.data_off + off + pos as u64) as libc::off_t;
                    // SAFETY: plain system call on the socket (borrowed for the call) and
                    // the segment file this value holds, with a local offset variable; the
                    // range is inside the data region (checked in `new`).
                    let r =
                        unsafe { libc::sendfile(fd.as_raw_fd(), file.as_raw_fd(), &mut o, c.written - pos) };
                    return if r < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(r as usize)
                    };
                }
                Src::Mem(id, off) => {
                    if pos == 0 {
                        // This process's page tables for the chunk, in one call (a daemon
                        // never touched the application's pages): no fault per page
                        // while the kernel copies them.
                        self.store.seg.populate(id);
                    }
                    mem = Some(self.mem(off + pos as u64, c.written - pos)?);
                }
                Src::Spill(off) => {
                    if !head_left.is_empty() {
                        // The header first; the data follows by sendfile.
                        return writev_from(fd, head_left, &[], 0);
                    }
                    let spill = self.store.seg.spill().expect("checked in new");
                    let mut o = (off + pos as u64) as libc::off_t;
                    // SAFETY: plain system call on two descriptors we hold (the socket
                    // borrowed for the call, the store's spill file kept open by
                    // `self.store`) and a local offset variable; no memory of ours is
                    // written.
                    let r =
                        unsafe { libc::sendfile(fd.as_raw_fd(), spill.as_raw_fd(), &mut o, c.written - pos) };
                    return if r < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(r as usize)
                    };
                }
                Src::Hole => unreachable!("a hole has nothing written"),
            }
        }
        let mut parts: Vec<IoPart<'_>> = Vec::with_capacity(8);
        if let Some(m) = &mem {
            parts.push(IoPart::Shared(m));
        }
        // At most MAX_IOV pieces in all, the header's counted.
        let head_piece = usize::from(!head_left.is_empty());
        let mut z = pos.max(c.written);
        while z < c.len && parts.len() + head_piece < MAX_IOV {
            let k = (c.len - z).min(ZEROS.len());
            parts.push(IoPart::Buf(&ZEROS[..k]));
            z += k;
        }
        writev_from(fd, head_left, &parts, 0)
    }

    /// `len` bytes of the data region at `off` (inside it: checked in `new`).
    fn mem(&self, off: u64, len: usize) -> io::Result<RegionSlice<'_>> {
        self.region.slice(off, len).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{len} bytes at {off} are outside the data region"),
            )
        })
    }

    /// Hand chunk `i`'s bytes as they are now to `f`, in order, 64 KiB at a time, each
    /// piece copied out of the mapping (or read from the spill file) into a private
    /// buffer first, so no Rust reference to memory another process may be writing is
    /// ever made (the frame tag of a partner copy is computed over them). A concurrent
    /// rewrite yields bytes that do not match what is then sent, which the receiver
    /// refuses and asks for again.
    pub fn visit(&self, i: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        const STEP: usize = 64 << 10;
        let c = self.chunks[i];
        let mut buf = vec![0u8; STEP.min(c.written.max(1))];
        let mut pos = 0;
        while pos < c.written {
            let k = (c.written - pos).min(STEP);
            match c.src {
                Src::Mem(_, off) => self.mem(off + pos as u64, k)?.copy_to(&mut buf[..k]),
                Src::Spill(off) => {
                    let spill = self.store.seg.spill().expect("checked in new");
                    spill.read_exact_at(&mut buf[..k], off + pos as u64)?;
                }
                Src::Hole => unreachable!("a hole has nothing written"),
            }
            f(&buf[..k]);
            pos += k;
        }
        let mut z = c.written;
        while z < c.len {
            let k = (c.len - z).min(ZEROS.len());
            f(&ZEROS[..k]);
            z += k;
        }
        Ok(())
    }

    /// CRC32C of chunk `i`'s bytes as they are now (after the receiver found a mismatch:
    /// is the local chunk damaged, or was the wire?).
    pub fn crc_now(&self, i: usize) -> io::Result<u32> {
        let c = self.chunks[i];
        let crc = match c.src {
            Src::Hole => 0,
            Src::Mem(_, off) => {
                if c.written == 0 {
                    0
                } else {
                    self.mem(off, c.written)?.crc32c()
                }
            }
            Src::Spill(off) => {
                let spill = self.store.seg.spill().expect("checked in new");
                let mut buf = vec![0u8; c.written];
                spill.read_exact_at(&mut buf, off)?;
                crc32c_append(0, &buf)
            }
        };
        Ok(crc32c_append_zeros(crc, c.len - c.written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::crc32c;
    use crate::{OpenFlags, StoreOptions};
    use std::io::Read;
    use std::os::fd::AsFd;

    #[test]
    fn wire_chunks_carry_the_file_bytes_holes_and_recorded_crcs() {
        let name = format!("hnd-netio-{}", std::process::id());
        let _ = Store::destroy(&name);
        let store = Store::create(&StoreOptions {
            name: name.clone(),
            mem_size: Some(1 << 20),
            chunk_size: Some(64 << 10),
            max_files: Some(16),
            ..Default::default()
        })
        .unwrap();
        let data: Vec<u8> = (0..150_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        let mut f = store.open("/f", OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&data).unwrap();
        // A hole of two chunks, then a short write: zeros past it in its chunk.
        f.pwrite(b"tail", 5 * (64 << 10) + 10).unwrap();
        f.close().unwrap();
        let size = store.stat("/f").unwrap().size;
        let mut want = data.clone();
        want.resize(size as usize, 0);
        want[5 * (64 << 10) + 10..].copy_from_slice(b"tail");
        // sendfile from the segment file, and writev from the mapping without it.
        for by_sendfile in [true, false] {
            let mut src = WireSource::new(&store, &store.chunk_list("/f").unwrap(), size).unwrap();
            if by_sendfile {
                src = src.with_sendfile();
                assert!(src.seg_file.is_some());
            } else {
                src.seg_file = None;
            }
            assert_eq!(src.chunks().len(), 6);
            // Sent on `b`, read from `a`.
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            let sent = {
                let mut out = Vec::new();
                let mut rd = a;
                for (i, c) in src.chunks().iter().enumerate() {
                    let head = format!("H{i}").into_bytes();
                    let total = head.len() + c.len;
                    let mut got = vec![0u8; total];
                    let (mut at, mut read) = (0, 0);
                    while read < total {
                        if at < total {
                            at += src.write_to(i, b.as_fd(), &head, at).unwrap();
                        }
                        while read < at {
                            read += rd.read(&mut got[read..at]).unwrap();
                        }
                    }
                    out.push((got[..head.len()].to_vec(), got[head.len()..].to_vec()));
                }
                out
            };
            let mut all = Vec::new();
            for (i, (h, d)) in sent.iter().enumerate() {
                assert_eq!(h, format!("H{i}").as_bytes());
                assert_eq!(crc32c(d), src.chunks()[i].crc, "chunk {i}");
                assert_eq!(src.crc_now(i).unwrap(), src.chunks()[i].crc);
                all.extend_from_slice(d);
            }
            assert_eq!(all, want);
        }
        // A chunk being rewritten is not sendable.
        let mut list = store.chunk_list("/f").unwrap();
        list[1].crc = None;
        assert_eq!(
            WireSource::new(&store, &list, size).unwrap_err(),
            NotSendable::Changing(1)
        );
        drop(store);
        let _ = Store::destroy(&name);
    }
}
