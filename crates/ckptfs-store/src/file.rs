//! Open files: positional and cursor I/O over a file's chunks, checksums kept as data is
//! written, verification on read, fsync and close.

use crate::checksum::{crc32c, crc32c_append, crc32c_append_zeros};
use crate::error::{Result, StoreError};
use crate::layout::*;
use crate::process::{self, ProcId};
use crate::segment::now;
use crate::store::{DirEntry, OpenFlags, Stat, Store};
use std::io::SeekFrom;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// An open file or directory of a [`Store`]. Dropping it closes it (errors ignored); call
/// [`FileHandle::close`] to see them.
pub struct FileHandle {
    pub(crate) store: Store,
    pub(crate) fid: u32,
    pub(crate) flags: OpenFlags,
    pub(crate) is_dir: bool,
    pub(crate) pos: u64,
    /// Logical chunk index -> chunk id (NONE = hole), valid while `map_gen` matches.
    pub(crate) map: Vec<u32>,
    pub(crate) map_gen: u64,
    pub(crate) verify: bool,
    pub(crate) verified: Vec<u64>,
    pub(crate) spill_dirty: bool,
    /// This handle's process is recorded in its lease as having changed the file.
    pub(crate) wrote_marked: bool,
    pub(crate) owner: ProcId,
    pub(crate) closed: bool,
    pub(crate) path: String,
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandle")
            .field("ino", &(self.fid + 1))
            .field("flags", &self.flags)
            .field("pos", &self.pos)
            .finish()
    }
}

impl FileHandle {
    pub(crate) fn new(
        store: Store,
        fid: u32,
        flags: OpenFlags,
        is_dir: bool,
        owner: ProcId,
        verify: bool,
        path: &str,
    ) -> Self {
        FileHandle {
            store,
            fid,
            flags,
            is_dir,
            pos: 0,
            map: Vec::new(),
            map_gen: u64::MAX,
            verify,
            verified: Vec::new(),
            spill_dirty: false,
            wrote_marked: false,
            owner,
            closed: false,
            path: path.to_string(),
        }
    }

    /// Inode number.
    pub fn ino(&self) -> u64 {
        self.fid as u64 + 1
    }

    /// The path it was opened by (it may have been renamed or unlinked since).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Flags it was opened with.
    pub fn flags(&self) -> OpenFlags {
        self.flags
    }

    /// Change the O_APPEND flag (fcntl F_SETFL).
    pub fn set_append(&mut self, append: bool) {
        self.flags.append = append;
    }

    /// Is this a directory handle?
    pub fn is_dir(&self) -> bool {
        self.is_dir
    }

    /// Current file position.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The store it belongs to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn ino_ref(&self) -> &Inode {
        self.store.seg.inode(self.fid)
    }

    /// Current size in bytes (0 for a directory, as `stat` reports: its inode's size
    /// field is unused and never trusted).
    pub fn size(&self) -> u64 {
        if self.is_dir {
            return 0;
        }
        self.ino_ref().size.load(Acquire)
    }

    /// Attributes.
    pub fn stat(&self) -> Stat {
        self.store.stat_fid(self.fid)
    }

    /// The chunks of this open file in logical order (see [`Store::chunk_list`]); unlike
    /// the path-based call it cannot race with a rename or unlink.
    pub fn chunk_list(&self) -> Vec<crate::store::ChunkInfo> {
        self.store.chunk_list_fid(self.fid)
    }

    /// Entries of this directory.
    pub fn read_dir(&self) -> Result<Vec<DirEntry>> {
        self.store.read_dir_ino(self.ino())
    }

    /// Register this handle for the calling process after `fork()`: the child then holds
    /// its own lease, so its close or death is tracked separately from the parent's.
    pub fn adopt_after_fork(&mut self) -> Result<()> {
        let me = process::me();
        if me == self.owner || self.closed {
            return Ok(());
        }
        let _g = self.store.file_lock(self.fid);
        self.store.add_lease(self.fid, me, self.flags.write)?;
        self.owner = me;
        self.wrote_marked = false;
        Ok(())
    }

    /// Move the position like lseek(2). A resulting negative position is EINVAL.
    pub fn seek(&mut self, pos: SeekFrom) -> Result<u64> {
        let base: i128 = match pos {
            SeekFrom::Start(o) => o as i128,
            SeekFrom::Current(d) => self.pos as i128 + d as i128,
            SeekFrom::End(d) => self.size() as i128 + d as i128,
        };
        if !(0..=i64::MAX as i128).contains(&base) {
            return Err(StoreError::Invalid(
                "resulting file offset is negative or too large".into(),
            ));
        }
        self.pos = base as u64;
        Ok(self.pos)
    }

    /// Read at the position and advance it.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = self.pread(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Write at the position (or the end with O_APPEND) and advance it.
    pub fn write(&mut self, buf: &[u8]) -> Result<usize> {
        let (n, end) = self.write_inner(buf, self.pos)?;
        self.pos = end;
        Ok(n)
    }

    /// Read until `buf` is full or end of file.
    pub fn read_full(&mut self, mut buf: &mut [u8]) -> Result<usize> {
        let mut total = 0;
        while !buf.is_empty() {
            let n = self.read(buf)?;
            if n == 0 {
                break;
            }
            total += n;
            buf = &mut buf[n..];
        }
        Ok(total)
    }

    /// Write all of `buf` (ENOSPC if it does not all fit).
    pub fn write_all(&mut self, mut buf: &[u8]) -> Result<()> {
        while !buf.is_empty() {
            let n = self.write(buf)?;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Make the cached chunk map current, checking the file's data record, each owned
    /// chunk entry's checksum and that the chunks found are as many as the inode records
    /// (a chunk whose owner was changed away would otherwise read as a hole of zeros).
    /// Caller holds the file lock.
    pub(crate) fn refresh_map(&mut self) -> Result<()> {
        let seg = &*self.store.seg;
        let ino = seg.inode(self.fid);
        self.store.check_data(self.fid, &self.path)?;
        let gen = ino.cgen.load(Acquire);
        if gen == self.map_gen {
            return Ok(());
        }
        self.map.clear();
        let want = ino.nchunks.load(Relaxed);
        let mut found = 0u32;
        if want > 0 {
            for c in 0..seg.nchunks() {
                let e = seg.chunk(c);
                if e.owner.load(Acquire) == self.fid + 1 {
                    if !crate::integrity::chunk_ok(seg, c) {
                        self.map_gen = u64::MAX;
                        return Err(self.store.damaged(
                            self.fid,
                            &self.path,
                            &format!("chunk table entry {c} checksum mismatch"),
                        ));
                    }
                    let l = e.logical.load(Relaxed) as usize;
                    if self.map.len() <= l {
                        self.map.resize(l + 1, NONE);
                    }
                    if self.map[l] != NONE {
                        self.map_gen = u64::MAX;
                        return Err(self.store.damaged(
                            self.fid,
                            &self.path,
                            &format!("two chunks claim logical chunk {l}"),
                        ));
                    }
                    self.map[l] = c;
                    found += 1;
                }
            }
        }
        if found != want {
            self.map_gen = u64::MAX;
            return Err(self.store.damaged(
                self.fid,
                &self.path,
                &format!("the inode records {want} chunks but {found} are owned by it"),
            ));
        }
        self.map_gen = gen;
        Ok(())
    }

    fn chunk_of(&self, logical: u32) -> u32 {
        self.map.get(logical as usize).copied().unwrap_or(NONE)
    }

    /// Positional read; does not move the position.
    pub fn pread(&mut self, buf: &mut [u8], off: u64) -> Result<usize> {
        if self.is_dir {
            return Err(StoreError::IsDir(format!("inode {}", self.ino())));
        }
        if !self.flags.read {
            return Err(StoreError::BadHandle("not open for reading"));
        }
        if off > i64::MAX as u64 {
            return Err(StoreError::Invalid("negative offset".into()));
        }
        let store = self.store.clone();
        let seg = &*store.seg;
        let _g = store.file_lock(self.fid);
        let size = seg.inode(self.fid).size.load(Acquire);
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(size - off) as usize;
        self.refresh_map()?;
        if let Some(run) = store.run_of(self.fid, &self.path)? {
            return self.read_small(run, buf, off, n);
        }
        let shift = seg.layout.chunk_shift;
        let cs = 1usize << shift;
        let mut done = 0;
        while done < n {
            let p = off + done as u64;
            let logical = (p >> shift) as u32;
            let within = (p as usize) & (cs - 1);
            let k = (cs - within).min(n - done);
            let dst = &mut buf[done..done + k];
            let c = self.chunk_of(logical);
            if c == NONE {
                dst.fill(0);
            } else {
                let (hwm, _, _) = unpack_sum(seg.chunk(c).sum.load(Acquire));
                let avail = (hwm as usize).saturating_sub(within).min(k);
                // A read of a whole chunk copies and checks it in one pass (the CRC taken
                // from the caller's buffer, piece by piece, right after the copy).
                let whole = seg.is_mem(c) && within == 0 && avail == hwm as usize && avail > 0;
                let far = self.chunk_of(logical.saturating_add(crate::ahead_state::AHEAD));
                let cold = |n: u32| n != NONE && seg.is_mem(n) && !seg.is_populated(n);
                if cold(c) || cold(far) {
                    // A reader in a fresh process (a restart): the file's next chunks get
                    // their page tables while this one is copied and checked.
                    let next = self.map.iter().skip(logical as usize + 1);
                    let next = next.copied().filter(|&n| seg.is_mem(n) && !seg.is_populated(n));
                    seg.ahead.request_chunks(&store.seg, next);
                }
                let mut copied = false;
                if self.verify {
                    copied = self.verify_chunk(c, logical, whole.then_some(&mut dst[..avail]))?;
                }
                if copied {
                    // Done by the check.
                } else if seg.is_mem(c) {
                    // SAFETY: file lock held; range within the chunk.
                    dst[..avail].copy_from_slice(unsafe { seg.chunk_slice(c, within, avail) });
                } else if avail > 0 {
                    let f = seg.spill().expect("spill chunk without spill file");
                    f.read_exact_at(&mut dst[..avail], seg.spill_offset(c) + within as u64)
                        .map_err(|e| StoreError::io("read spill file", e))?;
                }
                dst[avail..].fill(0);
            }
            done += k;
        }
        Ok(n)
    }

    /// Record (once per handle) that this handle's process changed the file. Caller
    /// holds the file lock.
    fn note_wrote(&mut self) {
        if !self.wrote_marked {
            self.store.mark_wrote(self.fid, self.owner);
            self.wrote_marked = true;
        }
    }

    /// Remember that a write or truncation of this file failed (see [`iflag::FAILED`]).
    fn note_failed(&self) {
        self.ino_ref().flags.fetch_or(iflag::FAILED, Release);
    }

    /// Positional write; does not move the position (except with O_APPEND semantics for
    /// the offset used). Returns bytes written: short when space ran out part-way.
    pub fn pwrite(&mut self, buf: &[u8], off: u64) -> Result<usize> {
        self.write_inner(buf, off).map(|(n, _)| n)
    }

    /// Returns (bytes written, end offset). A failed or short write marks the file
    /// [`iflag::FAILED`].
    fn write_inner(&mut self, buf: &[u8], off: u64) -> Result<(usize, u64)> {
        let r = self.write_locked(buf, off);
        match &r {
            Ok((n, _)) if *n < buf.len() => self.note_failed(),
            Err(StoreError::NoSpace | StoreError::FileTooLarge | StoreError::Io { .. }) => self.note_failed(),
            _ => {}
        }
        r
    }

    fn write_locked(&mut self, buf: &[u8], off: u64) -> Result<(usize, u64)> {
        if self.is_dir {
            return Err(StoreError::IsDir(format!("inode {}", self.ino())));
        }
        if !self.flags.write {
            return Err(StoreError::BadHandle("not open for writing"));
        }
        if off > i64::MAX as u64 {
            return Err(StoreError::Invalid("negative offset".into()));
        }
        let store = self.store.clone();
        let seg = &*store.seg;
        let _g = store.file_lock(self.fid);
        let ino = seg.inode(self.fid);
        let off = if self.flags.append {
            ino.size.load(Relaxed)
        } else {
            off
        };
        if buf.is_empty() {
            return Ok((0, off));
        }
        let shift = seg.layout.chunk_shift;
        let max_size = ((u32::MAX as u64) << shift).min(i64::MAX as u64);
        if off >= max_size {
            return Err(StoreError::FileTooLarge);
        }
        let len = (buf.len() as u64).min(max_size - off) as usize;
        self.refresh_map()?;
        self.note_wrote();
        // A small file: blocks of a shared chunk (unless no memory is left for them).
        let small = ino.nchunks.load(Relaxed) == 0 && off + len as u64 <= seg.layout.small_max();
        if small && store.small_write(self.fid, &self.path, &buf[..len], off)? {
            self.set_verified(0);
            ino.mtime_ns.store(now(), Relaxed);
            store.note_change(self.fid);
            seg.sb().changes.writes.fetch_add(1, Relaxed);
            return Ok((len, off + len as u64));
        }
        if ino.srun.load(Relaxed) != 0 {
            // Outgrowing its run (or no room for a larger one): into whole chunks.
            self.move_to_chunks()?;
        }
        let cs = 1usize << shift;
        let mut done = 0;
        while done < len {
            let p = off + done as u64;
            let logical = (p >> shift) as u32;
            let within = (p as usize) & (cs - 1);
            let k = (cs - within).min(len - done);
            let mut c = self.chunk_of(logical);
            if c == NONE {
                match store.alloc_chunk(self.fid, logical) {
                    Ok(new) => {
                        c = new;
                        // A fresh writer: have the next free chunks' page tables populated
                        // while it copies into this one.
                        if seg.is_mem(c) {
                            seg.ahead.request(&store.seg);
                        }
                    }
                    Err(StoreError::NoSpace) if done > 0 => break,
                    Err(e) => return Err(e),
                }
                ino.nchunks.fetch_add(1, Relaxed);
                crate::integrity::seal_data(seg, self.fid);
                let g = ino.cgen.fetch_add(1, Release);
                if self.map.len() <= logical as usize {
                    self.map.resize(logical as usize + 1, NONE);
                }
                self.map[logical as usize] = c;
                if g == self.map_gen {
                    self.map_gen = g + 1;
                }
            }
            let src = &buf[done..done + k];
            let entry = seg.chunk(c);
            let (mut hwm, mut crc, mut stale) = unpack_sum(entry.sum.load(Relaxed));
            let mut hwm_us = hwm as usize;
            if within > hwm_us {
                // Bytes between the old high-water mark and this write read as zeros.
                self.put(c, hwm_us, None, within - hwm_us)?;
                if !stale {
                    crc = crc32c_append_zeros(crc, within - hwm_us);
                }
                hwm_us = within;
            }
            if within < hwm_us && !stale {
                // Overwriting checksummed bytes: mark the CRC stale *before* the copy, so
                // that a writer killed mid-copy leaves "stale", never a false mismatch.
                entry.sum.store(pack_sum(hwm, crc, true), Release);
                // Keep the copy below from being reordered before the flag.
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            }
            // Appending at the high-water mark extends the checksum; rewriting a whole
            // chunk from its start restarts it; other overwrites leave it stale until
            // fsync/close recompute it.
            let mode = if within == hwm_us && !stale {
                Some(crc)
            } else if within == 0 && k >= hwm_us {
                Some(0)
            } else {
                None
            };
            match self.put_data(c, within, src, mode)? {
                Some(new) => {
                    crc = new;
                    stale = false;
                }
                None => stale = true,
            }
            hwm = hwm_us.max(within + k) as u32;
            entry.sum.store(pack_sum(hwm, crc, stale), Release);
            // This handle's own bytes are not re-verified when it reads them back.
            self.set_verified(logical);
            crate::fault::crash_point("write-before-size");
            done += k;
            // An application is writing (the node daemon's copies step back): per piece,
            // so that one long write call shows as activity all along.
            seg.sb().changes.writes.fetch_add(1, Relaxed);
            // Size last: a reader (or a recovery after a crash) sees only bytes whose
            // write completed.
            if p + k as u64 > ino.size.load(Relaxed) {
                ino.size.store(p + k as u64, Release);
                // Once per chunk-sized piece, not per 16 KiB: a 16-byte CRC.
                crate::integrity::seal_data(seg, self.fid);
            }
        }
        ino.mtime_ns.store(now(), Relaxed);
        self.store.note_change(self.fid);
        Ok((done, off + done as u64))
    }

    /// Copy `src` into chunk `c` at `at`, extending `crc` if given.
    fn put_data(&mut self, c: u32, at: usize, src: &[u8], crc: Option<u32>) -> Result<Option<u32>> {
        let seg = &*self.store.seg;
        if seg.is_mem(c) {
            // SAFETY: we hold the file lock and own chunk c; the range is inside the chunk.
            return Ok(unsafe { crate::copy::copy_with_crc(seg.chunk_ptr(c).add(at), src, crc) });
        }
        self.put(c, at, Some(src), src.len())?;
        Ok(crc.map(|c| crc32c_append(c, src)))
    }

    /// Copy `src` (or zeros) into chunk `c` at `at`.
    pub(crate) fn put(&mut self, c: u32, at: usize, src: Option<&[u8]>, len: usize) -> Result<()> {
        let seg = &*self.store.seg;
        if seg.is_mem(c) {
            // SAFETY: we hold the file lock and own chunk c; range within the chunk.
            let dst = unsafe { seg.chunk_slice_mut(c, at, len) };
            match src {
                Some(s) => dst.copy_from_slice(s),
                None => dst.fill(0),
            }
            return Ok(());
        }
        let f = seg.spill().expect("spill chunk without spill file");
        let base = seg.spill_offset(c) + at as u64;
        let r = match src {
            Some(s) => f.write_all_at(s, base),
            None => f.write_all_at(&vec![0u8; len], base),
        };
        r.map_err(|e| StoreError::io("write spill file", e))?;
        self.spill_dirty = true;
        if at + len == seg.layout.chunk_size() as usize {
            // A filled spill chunk starts its writeback now, so the device works while the
            // application goes on writing and fsync/close only wait for the tail. Without
            // this, small spills paid the whole device latency at close and large ones
            // overlapped with background writeback: the cost was not linear in the spilled
            // bytes (CRUISE table 3 rows off the formula by up to 41 %).
            use std::os::fd::AsRawFd;
            // SAFETY: advisory call on our spill file descriptor and a range inside it.
            unsafe {
                libc::sync_file_range(
                    f.as_raw_fd(),
                    seg.spill_offset(c) as libc::off64_t,
                    seg.layout.chunk_size() as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                )
            };
        }
        Ok(())
    }

    /// Set the size: grow (the new range reads as zeros) or shrink (chunks past the end
    /// are freed).
    pub fn set_len(&mut self, len: u64) -> Result<()> {
        if self.is_dir {
            return Err(StoreError::IsDir(format!("inode {}", self.ino())));
        }
        if !self.flags.write {
            return Err(StoreError::Invalid("not open for writing".into()));
        }
        let store = self.store.clone();
        let seg = &*store.seg;
        let shift = seg.layout.chunk_shift;
        if len > ((u32::MAX as u64) << shift).min(i64::MAX as u64) {
            return Err(StoreError::FileTooLarge);
        }
        let _g = store.file_lock(self.fid);
        let ino = seg.inode(self.fid);
        let size = ino.size.load(Relaxed);
        self.refresh_map()?;
        self.note_wrote();
        if len == 0 {
            ino.flags.fetch_and(!iflag::FAILED, Release);
        }
        // Size first (the commit point), then the chunks: a truncation killed half-way
        // leaves the new size with chunks or bytes past it, which the dead writer's
        // reaping trims, never the old size over freed chunks that read as zeros.
        ino.size.store(len, Release);
        crate::integrity::seal_data(seg, self.fid);
        ino.mtime_ns.store(now(), Relaxed);
        store.note_change(self.fid);
        if len < size {
            crate::fault::crash_point("trunc-after-size");
            let cs = 1u64 << shift;
            let keep = len.div_ceil(cs) as u32;
            store.free_data_from(self.fid, keep);
            store.small_trim(self.fid, len);
            self.refresh_map()?;
            crate::fault::crash_point("trunc-after-free");
            // The chunk holding the new end keeps only bytes below it.
            if !len.is_multiple_of(cs) {
                let c = self.chunk_of((len >> shift) as u32);
                if c != NONE {
                    let e = seg.chunk(c);
                    let (hwm, _, _) = unpack_sum(e.sum.load(Relaxed));
                    let within = (len % cs) as u32;
                    if hwm > within {
                        match chunk_crc(&store, c, within as usize) {
                            Ok(crc) => e.sum.store(pack_sum(within, crc, false), Release),
                            Err(err) => {
                                // Never leave bytes past the end behind a valid checksum.
                                e.sum.store(pack_sum(within, 0, true), Release);
                                self.note_failed();
                                return Err(err);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Recompute stale checksums and flush spilled data to the device.
    pub fn sync(&mut self) -> Result<()> {
        if self.is_dir || !self.flags.write {
            return Ok(());
        }
        let store = self.store.clone();
        let _g = store.file_lock(self.fid);
        self.finalize_locked()
    }

    fn finalize_locked(&mut self) -> Result<()> {
        self.refresh_map()?;
        let store = self.store.clone();
        let seg = &*store.seg;
        store.small_recompute_stale(self.fid);
        for &c in &self.map {
            if c == NONE {
                continue;
            }
            let e = seg.chunk(c);
            let (hwm, _, stale) = unpack_sum(e.sum.load(Relaxed));
            if stale {
                let crc = chunk_crc(&self.store, c, hwm as usize)?;
                e.sum.store(pack_sum(hwm, crc, false), Release);
            }
        }
        if self.spill_dirty {
            if let Some(f) = seg.spill() {
                f.sync_data().map_err(|e| StoreError::io("fsync spill file", e))?;
            }
            self.spill_dirty = false;
        }
        Ok(())
    }

    /// Close: finish checksums, flush spill, release the lease; the last writer marks the
    /// file complete, the last opener of an unlinked file frees it.
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let store = self.store.clone();
        let seg = &*store.seg;
        let ino = seg.inode(self.fid);
        let g = store.file_lock(self.fid);
        let mut result = Ok(());
        let mut last_writer = false;
        if self.flags.write && !self.is_dir {
            result = self.finalize_locked();
            store.drop_lease(self.fid, self.owner, true);
            let dead = store.reap_leases(self.fid);
            if !store.has_writer(self.fid) {
                let flags = ino.flags.load(Acquire);
                let st = if dead || result.is_err() || flags & iflag::DEAD_WRITER != 0 {
                    wstate::INCOMPLETE
                } else if flags & iflag::FAILED != 0 {
                    wstate::FAILED
                } else {
                    wstate::COMPLETE
                };
                ino.last_writer_pid.store(self.owner.pid, Relaxed);
                ino.last_writer_start.store(self.owner.start, Relaxed);
                ino.wstate.store(st, Release);
                last_writer = true;
            }
        } else {
            store.drop_lease(self.fid, self.owner, false);
        }
        drop(g);
        if last_writer {
            store.note_closed();
        }
        // Only an unlinked file needs the namespace lock (to free its inode); checking the
        // flag after dropping our lease is race-free: an unlink that sets it later sees
        // our lease gone and frees the file itself.
        if ino.flags.load(Acquire) & iflag::ORPHAN != 0 {
            let ns = store.ns();
            store.release_if_unused(&ns, self.fid);
        }
        result
    }
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        if !self.closed {
            if let Err(e) = self.close_inner() {
                tracing::warn!(ino = self.ino(), error = %e, "error closing store file");
            }
        }
    }
}

/// CRC32C of the first `len` bytes of chunk `c`.
pub(crate) fn chunk_crc(store: &Store, c: u32, len: usize) -> Result<u32> {
    let seg = &*store.seg;
    if len as u64 > seg.layout.chunk_size() || c >= seg.nchunks() {
        return Err(StoreError::Damaged {
            path: format!("chunk {c}"),
            what: format!("length {len} out of range"),
        });
    }
    if seg.is_mem(c) {
        // SAFETY: callers hold the owning file's lock (or the fsck locks).
        return Ok(crc32c(unsafe { seg.chunk_slice(c, 0, len) }));
    }
    let f = seg.spill().expect("spill chunk without spill file");
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, seg.spill_offset(c))
        .map_err(|e| StoreError::io("read spill file", e))?;
    Ok(crc32c(&buf))
}
