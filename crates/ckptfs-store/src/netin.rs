//! Receiving a file's bytes from a socket straight into its chunks (partner copies and
//! restores between node daemons): no buffer between the socket and the store.
//!
//! A [`Landing`] is the range of a file (open for writing) that the next wire chunk
//! appends: [`Landing::begin`] gives the file the chunks that range needs (allocated
//! under the file lock, as a write would, but with nothing published: the file's size
//! and the chunks' checksums do not change), the bytes then land in the chunks'
//! memory by `readv` from the socket ([`Landing::read_from`]) or by a copy of bytes
//! already read ([`Landing::put`]), their CRC32C taken piece by piece as they land,
//! while they are still in cache. Only [`Landing::commit`] publishes them: each chunk's
//! checksum extended, then the size (the commit point, as in the write path). A landing
//! dropped without commit (its CRC did not match what the sender announced) publishes
//! nothing; the next landing at the same offset reuses its chunks.
//!
//! Spill chunks take the ordinary write path (the bytes are read into a buffer and
//! written with `pwrite` at commit).
//!
//! Nothing but the receiving daemon holds its incoming file open, so no lock is held
//! while bytes land in chunks past the file's size (no reader looks past the size, and a
//! recovery after a crash trims what a dead writer left there).

use crate::error::{Result, StoreError};
use crate::file::FileHandle;
use crate::layout::{pack_sum, unpack_sum};
use crate::store::Store;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Most pieces handed to one `readv`.
const MAX_IOV: usize = 64;

/// One store chunk's part of a landing.
#[derive(Debug, Clone, Copy)]
struct Piece {
    /// Logical chunk index in the file.
    logical: u32,
    /// Chunk id; None until the first byte of the piece arrives (a chunk is taken only
    /// when bytes arrive for it, never for what a header merely announces).
    c: Option<u32>,
    /// Byte offset in the chunk where the piece starts (the chunk's high-water mark).
    within: usize,
    /// Bytes of the piece.
    k: usize,
    /// CRC32C of the bytes of the piece landed so far.
    crc: u32,
    /// Address of the piece's first byte in this process (memory chunks), or None
    /// (not taken yet, or a spill chunk: the bytes then land in `Landing::buf`).
    addr: Option<usize>,
}

/// The range of a file the next wire chunk appends (see the module docs).
pub struct Landing {
    store: Store,
    fid: u32,
    off: u64,
    len: usize,
    pieces: Vec<Piece>,
    landed: usize,
    /// Bytes for spill pieces (the whole range when any piece is in the spill file).
    buf: Option<Vec<u8>>,
    /// The errno of a chunk that could not be taken (ENOSPC): nothing more lands.
    failed: Option<i32>,
}

impl std::fmt::Debug for Landing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Landing")
            .field("off", &self.off)
            .field("len", &self.len)
            .field("landed", &self.landed)
            .finish()
    }
}

fn crc_combine(a: u32, b: u32, b_len: usize) -> u32 {
    crate::checksum::crc32c_combine(a, b, b_len as u64)
}

fn crc_append(crc: u32, data: &[u8]) -> u32 {
    crate::checksum::crc32c_append(crc, data)
}

impl Landing {
    /// Prepare to append `len` bytes at `off` to `file`, which must be open for writing
    /// and exactly `off` bytes long (appends only, in order). Allocates the chunks the
    /// range needs (ENOSPC when the store is full), publishes nothing.
    pub fn begin(file: &FileHandle, off: u64, len: usize) -> Result<Landing> {
        if !file.flags().write || file.is_dir() {
            return Err(StoreError::BadHandle("not open for writing"));
        }
        let store = file.store().clone();
        let fid = (file.ino() - 1) as u32;
        let seg = &*store.seg;
        let shift = seg.layout.chunk_shift;
        let cs = 1usize << shift;
        let end = off
            .checked_add(len as u64)
            .filter(|&e| e <= ((u32::MAX as u64) << shift).min(i64::MAX as u64))
            .ok_or(StoreError::FileTooLarge)?;
        let _g = store.file_lock(fid);
        store.check_data(fid, file.path())?;
        let ino = seg.inode(fid);
        let size = ino.size.load(Acquire);
        if size != off {
            return Err(StoreError::Invalid(format!(
                "{}: a landing appends at the size {size}, not at {off}",
                file.path()
            )));
        }
        let mut pieces = Vec::new();
        let mut p = off;
        let mut spill = false;
        while p < end {
            let logical = (p >> shift) as u32;
            let within = (p as usize) & (cs - 1);
            let k = (cs - within).min((end - p) as usize);
            let found = (0..seg.nchunks()).find(|&c| {
                let e = seg.chunk(c);
                e.owner.load(Acquire) == fid + 1 && e.logical.load(Relaxed) == logical
            });
            let c = match found {
                Some(c) => {
                    let (hwm, _, stale) = unpack_sum(seg.chunk(c).sum.load(Acquire));
                    if hwm as usize != within || stale {
                        // Bytes past the size that a landing did not publish are only
                        // ever at the high-water mark; anything else is not an append.
                        return Err(StoreError::Invalid(format!(
                            "{}: chunk {logical} holds {hwm} bytes, the landing starts at {within}",
                            file.path()
                        )));
                    }
                    Some(c)
                }
                None if within != 0 => {
                    return Err(StoreError::Invalid(format!(
                        "{}: no chunk {logical} to append to at {within}",
                        file.path()
                    )));
                }
                // Taken when its first byte arrives (`take`).
                None => None,
            };
            let addr = c.filter(|&c| seg.is_mem(c)).map(|c| {
                // SAFETY: c is a memory chunk (checked) and within + k <= chunk size, so
                // the address is inside the data region; only the address is computed.
                unsafe { seg.chunk_ptr(c).add(within) as usize }
            });
            spill |= c.is_some() && addr.is_none();
            pieces.push(Piece {
                logical,
                c,
                within,
                k,
                crc: 0,
                addr,
            });
            p += k as u64;
        }
        let buf = spill.then(|| vec![0u8; len]);
        drop(_g);
        Ok(Landing {
            store,
            fid,
            off,
            len,
            pieces,
            landed: 0,
            buf,
            failed: None,
        })
    }

    /// Take the chunk of piece `i` now that bytes arrive for it (ENOSPC when the store
    /// is full). A spill chunk switches the landing to its buffer (the bytes landed so
    /// far are copied there; the commit then takes the write path).
    fn take(&mut self, i: usize) -> Result<()> {
        if self.pieces[i].c.is_some() {
            return Ok(());
        }
        let store = self.store.clone();
        let seg = &*store.seg;
        let _g = store.file_lock(self.fid);
        let c = store.alloc_chunk(self.fid, self.pieces[i].logical)?;
        let ino = seg.inode(self.fid);
        // A fresh receiver (a restore into a new store): have the next free chunks'
        // page tables populated while this one fills (as File::write).
        if seg.is_mem(c) {
            seg.ahead.request(&store.seg);
        }
        ino.nchunks.fetch_add(1, Relaxed);
        crate::integrity::seal_data(seg, self.fid);
        ino.cgen.fetch_add(1, Release);
        drop(_g);
        self.pieces[i].c = Some(c);
        if seg.is_mem(c) {
            // SAFETY: c is a memory chunk (checked) and within + k <= chunk size, so the
            // address is inside the data region; only the address is computed.
            self.pieces[i].addr = Some(unsafe { seg.chunk_ptr(c).add(self.pieces[i].within) } as usize);
        } else if self.buf.is_none() {
            let mut buf = vec![0u8; self.len];
            let mut at = 0;
            self.visit(&mut |b| {
                buf[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            });
            self.buf = Some(buf);
        }
        Ok(())
    }

    /// The errno of a chunk that could not be taken, if one could not (nothing lands
    /// after it; the landing must be dropped).
    pub fn failed(&self) -> Option<i32> {
        self.failed
    }

    /// Bytes of the range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes landed so far.
    pub fn landed(&self) -> usize {
        self.landed
    }

    /// CRC32C of the bytes landed so far (from the pieces' CRCs: no pass over the data).
    pub fn crc(&self) -> u32 {
        let mut crc = 0u32;
        let mut at = 0;
        for p in &self.pieces {
            if at >= self.landed {
                break;
            }
            let n = p.k.min(self.landed - at);
            crc = if at == 0 {
                p.crc
            } else {
                crc_combine(crc, p.crc, n)
            };
            at += p.k;
        }
        crc
    }

    /// Hand the bytes landed so far to `f`, in order (a frame tag is checked over them
    /// before they are published). The memory is this landing's own, written by this
    /// process and read by nobody else until [`Landing::commit`].
    pub fn visit(&self, f: &mut dyn FnMut(&[u8])) {
        if let Some(buf) = &self.buf {
            f(&buf[..self.landed]);
            return;
        }
        let mut at = 0;
        for p in &self.pieces {
            if at >= self.landed {
                break;
            }
            let n = p.k.min(self.landed - at);
            let addr = p.addr.expect("memory piece");
            // SAFETY: the range lies inside the piece, hence inside memory chunk `p.c` of
            // the live mapping that this landing's store keeps; the bytes were written by
            // this process (readv or `put`) past the file's size, where nobody else
            // writes or reads (see `landed_bytes`). The view lives only for the call.
            let view = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
            f(view);
            at += p.k;
        }
    }

    /// The pieces' remaining space from the landing position, as iovecs (at most
    /// MAX_IOV): the piece at the landing position (its chunk taken now if it was not)
    /// and the taken pieces after it. Fails when a chunk cannot be taken.
    fn iovecs(&mut self) -> io::Result<Vec<libc::iovec>> {
        if let Some(e) = self.failed {
            return Err(io::Error::from_raw_os_error(e));
        }
        let mut iov = Vec::new();
        if self.buf.is_none() {
            let mut at = 0;
            let mut first = None;
            for (i, p) in self.pieces.iter().enumerate() {
                if at + p.k > self.landed {
                    first = Some(i);
                    break;
                }
                at += p.k;
            }
            if let Some(i) = first {
                if let Err(e) = self.take(i) {
                    let errno = e.errno();
                    self.failed = Some(errno);
                    return Err(io::Error::from_raw_os_error(errno));
                }
            }
        }
        if let Some(buf) = self.buf.as_mut() {
            iov.push(libc::iovec {
                iov_base: buf[self.landed..].as_mut_ptr() as *mut libc::c_void,
                iov_len: self.len - self.landed,
            });
            return Ok(iov);
        }
        let mut at = 0;
        for p in &self.pieces {
            let end = at + p.k;
            if end > self.landed {
                let Some(addr) = p.addr.filter(|_| iov.len() < MAX_IOV) else {
                    break;
                };
                let skip = self.landed.saturating_sub(at);
                iov.push(libc::iovec {
                    iov_base: (addr + skip) as *mut libc::c_void,
                    iov_len: p.k - skip,
                });
            }
            at = end;
        }
        Ok(iov)
    }

    /// Extend the pieces' CRCs with the `n` bytes that just landed at the landing
    /// position, and advance it.
    fn landed_bytes(&mut self, n: usize) {
        let (from, to) = (self.landed, self.landed + n);
        let mut at = 0;
        for i in 0..self.pieces.len() {
            let p = self.pieces[i];
            let (s, e) = (from.max(at), to.min(at + p.k));
            if s < e {
                let crc = match (&self.buf, p.addr) {
                    (Some(buf), _) => crc_append(p.crc, &buf[s..e]),
                    (None, Some(addr)) => {
                        // SAFETY: the range lies inside the piece (s..e within at..at+k),
                        // hence inside memory chunk `p.c` of the live mapping, which this
                        // landing's store keeps; the bytes were just written by this
                        // process (by the kernel's readv or by `put`) and nobody else
                        // writes this file's chunks past its size. The view lives only for
                        // this checksum.
                        let view = unsafe { std::slice::from_raw_parts((addr + s - at) as *const u8, e - s) };
                        crc_append(p.crc, view)
                    }
                    (None, None) => unreachable!("a spill piece without a buffer"),
                };
                self.pieces[i].crc = crc;
            }
            at += p.k;
        }
        self.landed = to;
    }

    /// Land `data` (bytes already read, e.g. from a read-ahead buffer) at the landing
    /// position. Panics if more than the rest of the range. When a chunk cannot be
    /// taken, the rest is dropped and [`Landing::failed`] says why.
    pub fn put(&mut self, data: &[u8]) {
        assert!(
            data.len() <= self.len - self.landed,
            "more bytes than the landing holds"
        );
        let mut done = 0;
        while done < data.len() {
            let Ok(iov) = self.iovecs() else {
                return;
            };
            let mut n = 0;
            for v in iov {
                if done + n == data.len() {
                    break;
                }
                let k = v.iov_len.min(data.len() - done - n);
                // SAFETY: the destination is the landing's own remaining space (a
                // caller-owned buffer or memory chunk bytes past the file's size, see
                // `landed_bytes`), at least `k` bytes long; `data` is a distinct caller
                // slice, so they do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(data[done + n..].as_ptr(), v.iov_base as *mut u8, k) };
                n += k;
            }
            self.landed_bytes(n);
            done += n;
        }
    }

    /// One `readv` from `fd` into the rest of the range (the chunks it lands in taken
    /// as it goes). Returns the bytes landed (0 at end of stream); a non-blocking socket
    /// with nothing to read answers `WouldBlock`; a chunk that cannot be taken, its
    /// errno (ENOSPC).
    pub fn read_from(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        if self.landed == self.len {
            return Ok(0);
        }
        let iov = self.iovecs()?;
        // SAFETY: every iovec is the landing's own remaining space: bytes of its buffer,
        // or of memory chunks owned by this file past its size (inside the mapping kept
        // by `self.store`), which nobody else writes or reads; the kernel writes at most
        // the iovecs' lengths. iov.len() <= MAX_IOV.
        let r = unsafe { libc::readv(fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.landed_bytes(r as usize);
        Ok(r as usize)
    }

    /// Publish the landed range (all of it must have landed): each chunk's checksum
    /// extended, then the file's size. `file` is the handle the landing began with.
    pub fn commit(mut self, file: &mut FileHandle) -> Result<()> {
        if let Some(e) = self.failed {
            return Err(match e {
                libc::ENOSPC => StoreError::NoSpace,
                e => StoreError::Io {
                    context: "take a chunk for a landing".into(),
                    source: io::Error::from_raw_os_error(e),
                },
            });
        }
        if self.landed != self.len {
            return Err(StoreError::Invalid(format!(
                "landing of {} bytes committed after {}",
                self.len, self.landed
            )));
        }
        if (file.ino() - 1) as u32 != self.fid {
            return Err(StoreError::BadHandle("not the landing's file"));
        }
        if let Some(buf) = self.buf.take() {
            // Spill: the ordinary write path (it extends the checksums itself).
            let mut done = 0;
            while done < buf.len() {
                done += file.pwrite(&buf[done..], self.off + done as u64)?;
            }
            return Ok(());
        }
        let store = self.store.clone();
        let seg = &*store.seg;
        let _g = store.file_lock(self.fid);
        let ino = seg.inode(self.fid);
        if ino.size.load(Acquire) != self.off {
            return Err(StoreError::Invalid(format!(
                "{}: changed while a landing was in flight",
                file.path()
            )));
        }
        for p in &self.pieces {
            let Some(c) = p.c else {
                return Err(StoreError::Invalid(format!(
                    "{}: landing committed with a chunk never taken",
                    file.path()
                )));
            };
            let e = seg.chunk(c);
            let (hwm, crc, stale) = unpack_sum(e.sum.load(Acquire));
            if e.owner.load(Acquire) != self.fid + 1 || hwm as usize != p.within || stale {
                return Err(StoreError::Invalid(format!(
                    "{}: chunk {c} changed while a landing was in flight",
                    file.path(),
                )));
            }
            let crc = if p.within == 0 {
                p.crc
            } else {
                crc_combine(crc, p.crc, p.k)
            };
            e.sum
                .store(pack_sum((p.within + p.k) as u32, crc, false), Release);
        }
        // Size last: the commit point.
        ino.size.store(self.off + self.len as u64, Release);
        crate::integrity::seal_data(seg, self.fid);
        ino.mtime_ns.store(crate::segment::now(), Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::crc32c;
    use crate::{OpenFlags, StoreOptions, WriteState};
    use std::io::Write;
    use std::os::fd::AsFd;

    fn store(tag: &str, chunk: u64) -> (Store, String) {
        let name = format!("hnd-netin-{tag}-{}", std::process::id());
        let _ = Store::destroy(&name);
        let s = Store::create(&StoreOptions {
            name: name.clone(),
            mem_size: Some(2 << 20),
            chunk_size: Some(chunk),
            max_files: Some(16),
            ..Default::default()
        })
        .unwrap();
        (s, name)
    }

    fn data(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect()
    }

    #[test]
    fn bytes_land_from_a_socket_into_chunks_and_publish_only_on_commit() {
        let (s, name) = store("sock", 64 << 10);
        let mut f = s.open("/in", OpenFlags::CREATE, 0o600).unwrap();
        let d = data(200_000, 1);
        let (mut tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
        // Wire chunks that do not line up with the 64 KiB store chunks.
        let mut off = 0usize;
        for len in [70_000usize, 100_000, 30_000] {
            let part = d[off..off + len].to_vec();
            let w = std::thread::spawn(move || {
                tx.write_all(&part).unwrap();
                tx
            });
            let mut l = Landing::begin(&f, off as u64, len).unwrap();
            // A first few bytes as if from a read-ahead buffer, the rest by readv.
            let mut head = vec![0u8; 10];
            std::io::Read::read_exact(&mut &rx, &mut head).unwrap();
            l.put(&head);
            while l.landed() < len {
                l.read_from(rx.as_fd()).unwrap();
            }
            tx = w.join().unwrap();
            assert_eq!(l.crc(), crc32c(&d[off..off + len]));
            // Nothing visible before the commit.
            assert_eq!(s.stat("/in").unwrap().size, off as u64);
            l.commit(&mut f).unwrap();
            off += len;
            assert_eq!(s.stat("/in").unwrap().size, off as u64);
        }
        f.close().unwrap();
        let st = s.stat("/in").unwrap();
        assert_eq!(st.state, WriteState::Complete);
        let mut r = s.open("/in", OpenFlags::READ, 0).unwrap();
        r.verify_all().unwrap();
        let mut back = vec![0u8; d.len()];
        r.read_full(&mut back).unwrap();
        assert_eq!(back, d);
        drop(r);
        drop(s);
        let _ = Store::destroy(&name);
    }

    #[test]
    fn an_abandoned_landing_publishes_nothing_and_the_next_one_reuses_its_chunks() {
        let (s, name) = store("abandon", 64 << 10);
        let mut f = s.open("/in", OpenFlags::CREATE, 0o600).unwrap();
        let good = data(100_000, 2);
        let mut bad = good.clone();
        bad[5] ^= 1;
        let free = s.info().mem_free_chunks;
        let mut l = Landing::begin(&f, 0, bad.len()).unwrap();
        l.put(&bad);
        assert_ne!(l.crc(), crc32c(&good));
        drop(l);
        assert_eq!(s.stat("/in").unwrap().size, 0);
        // Appending elsewhere than at the size is refused.
        assert!(Landing::begin(&f, 10, 5).is_err());
        let mut l = Landing::begin(&f, 0, good.len()).unwrap();
        l.put(&good);
        assert_eq!(l.crc(), crc32c(&good));
        l.commit(&mut f).unwrap();
        // The same two chunks, not two more.
        assert_eq!(s.info().mem_free_chunks, free - 2);
        f.close().unwrap();
        let mut r = s.open("/in", OpenFlags::READ, 0).unwrap();
        r.verify_all().unwrap();
        let mut back = vec![0u8; good.len()];
        r.read_full(&mut back).unwrap();
        assert_eq!(back, good);
        drop(r);
        drop(s);
        let _ = Store::destroy(&name);
    }

    #[test]
    fn application_writes_move_the_write_count_and_landed_bytes_do_not() {
        let (s, name) = store("count", 64 << 10);
        let w0 = s.write_count();
        // An application's write: one count per chunk-sized piece (3 here).
        let mut f = s.open("/app", OpenFlags::CREATE, 0o600).unwrap();
        f.write_all(&data(3 * (64 << 10), 2)).unwrap();
        f.close().unwrap();
        let w1 = s.write_count();
        assert_eq!(w1 - w0, 3, "one per piece written");
        // A small file counts too.
        let mut f = s.open("/small", OpenFlags::CREATE, 0o600).unwrap();
        f.write_all(b"tiny").unwrap();
        f.close().unwrap();
        let w2 = s.write_count();
        assert_eq!(w2 - w1, 1);
        // Bytes landed from a socket (a partner copy, a restore) are not an
        // application's writes.
        let d = data(100_000, 3);
        let mut g = s.open("/in", OpenFlags::CREATE, 0o600).unwrap();
        let mut l = Landing::begin(&g, 0, d.len()).unwrap();
        l.put(&d);
        l.commit(&mut g).unwrap();
        g.close().unwrap();
        assert_eq!(s.write_count(), w2, "landings do not count");
        assert_eq!(s.stat("/in").unwrap().size, d.len() as u64);
        drop(s);
        let _ = Store::destroy(&name);
    }

    /// A header that announces many bytes takes no chunk: chunks are taken as bytes
    /// arrive (a peer announcing 43 MiB and sending 120 bytes held 43 MiB before).
    #[test]
    fn chunks_are_taken_as_bytes_arrive_not_as_announced() {
        let (s, name) = store("lazy", 64 << 10);
        let f = s.open("/lazy", OpenFlags::CREATE, 0o600).unwrap();
        let free = s.info().mem_free_chunks;
        let mut l = Landing::begin(&f, 0, 1 << 20).unwrap();
        assert_eq!(
            s.info().mem_free_chunks,
            free,
            "nothing taken for an announcement"
        );
        l.put(&data(120, 1));
        assert_eq!(s.info().mem_free_chunks, free - 1, "one chunk for 120 bytes");
        l.put(&data(70_000, 2));
        assert_eq!(s.info().mem_free_chunks, free - 2);
        let mut seen = Vec::new();
        l.visit(&mut |b| seen.extend_from_slice(b));
        let mut want = data(120, 1);
        want.extend(data(70_000, 2));
        assert_eq!(seen, want, "visit hands back what landed, in order");
        drop(l);
        drop(f);
        drop(s);
        Store::destroy(&name).unwrap();
    }
}
