//! The node store as a level.
//!
//! - `list`/`stat`: complete files (closed by their last writer), with their identity
//!   and the CRCs derived from the chunk list (no data read);
//! - `get`: chunks straight from the data region as [`IoPart::Shared`] pieces (checked
//!   against the chunk list's CRC32C in place, through the store's `region_io`), spill
//!   chunks `pread` into one reused buffer, holes and unwritten tails as zeros; the
//!   reader also gathers ([`GatherRead`]: memory chunks checked in place ahead of their
//!   write, several chunks' ranges in one piece list for one `pwritev`, spill chunks read
//!   into page-aligned buffers and checked as read: the drain's zero-copy path); `finish`
//!   re-checks the file's identity and chunk list, so a copy that raced with a rewrite
//!   fails with [`LevelError::Changed`] instead of mixing two versions;
//! - `put`: written under `.ckptfs-restore.PID.HASH` in the file's directory, renamed to
//!   its name and given the source's mtime on commit (an application never opens a
//!   half-written copy); removed if dropped uncommitted. Its writer also takes chunks
//!   straight off a socket ([`ChunkWriter::land`]: a store `netin::Landing` in the
//!   file's chunks, published only when the reader found the bytes good);
//! - `verify`: every chunk re-read and checked; `delete`: unlink if the identity
//!   (inode, generation, size, mtime) is still the one given.

use crate::checksum::{crc32c, crc32c_append_zeros};
use crate::netin::Landing;
use crate::region_io::RegionIo;
use crate::region_io::RegionSlice;
use crate::{ChunkInfo, ChunkLocation, FileHandle, FileKind, OpenFlags, Stat, Store, StoreError, WriteState};
use ckptfs_level::crc::crc_combine;
use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, GatherRead, IoPart, Level, LevelError, LevelKind, Stored, Version,
};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;

/// The node store as a level (cheap to keep around: one mapping of the data region and
/// the spill file's descriptor).
pub struct StoreLevel {
    store: Store,
    region: RegionIo,
    spill: Option<File>,
    cs: u64,
    /// `cs` zeros from `zeros_at` (page-aligned, for O_DIRECT writers).
    zeros: Vec<u8>,
    zeros_at: usize,
    meter: CostMeter,
}

/// Alignment of the zeros and spill buffers the reader hands out (O_DIRECT's).
const ALIGN: usize = 4096;

/// A zeroed buffer of `n` bytes starting at a multiple of [`ALIGN`]: the vector and the
/// offset of the aligned start in it.
fn aligned_zeroed(n: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; n + ALIGN];
    let at = v.as_ptr().align_offset(ALIGN).min(ALIGN);
    (v, at)
}

impl std::fmt::Debug for StoreLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLevel")
            .field("store", &self.store.name())
            .finish()
    }
}

fn parent_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((p, _)) => p,
    }
}

fn under(path: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || path == p || path.starts_with(&format!("{p}/"))
}

/// The identity part of a version (what changes with any write, truncate or replace).
fn identity(v: &Version) -> (u64, u32, u64, u64) {
    (v.ino, v.generation, v.size, v.mtime_ns)
}

impl StoreLevel {
    /// The store `store` as a level.
    pub fn new(store: &Store) -> Result<StoreLevel, LevelError> {
        let cs = store.chunk_size();
        let (zeros, zeros_at) = aligned_zeroed(cs as usize);
        Ok(StoreLevel {
            region: RegionIo::new(store),
            spill: store.spill_file()?,
            store: store.clone(),
            cs,
            zeros,
            zeros_at,
            meter: CostMeter::new(),
        })
    }

    /// `n` (at most a chunk's) zeros, page-aligned.
    fn zeros(&self, n: usize) -> &[u8] {
        &self.zeros[self.zeros_at..self.zeros_at + n]
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The data region as mapped here (the drain engine reads chunks through it).
    pub fn region(&self) -> &RegionIo {
        &self.region
    }

    /// The store's spill file, if it has one.
    pub fn spill(&self) -> Option<&File> {
        self.spill.as_ref()
    }

    /// The version of a file from its `stat` and chunk list.
    pub fn version_of(st: &Stat, chunks: &[ChunkInfo], cs: u64) -> Version {
        Version {
            ino: st.ino,
            generation: st.generation,
            size: st.size,
            mtime_ns: st.mtime_ns,
            crc32c: crcs_from_chunks(st.size, cs, chunks).map(|c| c.0),
            serial: 0,
        }
    }

    fn stored_of(&self, path: &str, st: &Stat) -> Result<Stored, LevelError> {
        let chunks = self.store.chunk_list(path)?;
        let crcs = crcs_from_chunks(st.size, self.cs, &chunks);
        Ok(Stored {
            path: path.to_string(),
            version: Version {
                ino: st.ino,
                generation: st.generation,
                size: st.size,
                mtime_ns: st.mtime_ns,
                crc32c: crcs.as_ref().map(|c| c.0),
                serial: 0,
            },
            mode: st.mode & 0o7777,
            chunk_size: self.cs,
            chunk_crc32c: crcs.map(|c| c.1).unwrap_or_default(),
        })
    }

    /// A complete file's stat, or None (absent, a directory, or still being written).
    fn complete(&self, path: &str) -> Result<Option<Stat>, LevelError> {
        match self.store.stat(path) {
            Ok(st) if st.kind == FileKind::File && st.state == WriteState::Complete => Ok(Some(st)),
            Ok(_) | Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn mkdir_p(&self, dir: &str) -> Result<(), LevelError> {
        let mut cur = String::new();
        for c in dir.split('/').filter(|c| !c.is_empty()) {
            cur.push('/');
            cur.push_str(c);
            match self.store.mkdir(&cur, 0o755) {
                Ok(_) | Err(StoreError::Exists(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl Level for StoreLevel {
    fn kind(&self) -> LevelKind {
        LevelKind::Local
    }

    fn name(&self) -> String {
        format!("local:{}", self.store.name())
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError> {
        let mut out = Vec::new();
        for (path, st) in self.store.list_all() {
            if st.kind != FileKind::File || st.state != WriteState::Complete || !under(&path, prefix) {
                continue;
            }
            match self.stored_of(&path, &st) {
                Ok(s) => out.push(s),
                // Removed since the listing.
                Err(e) if matches!(e.backend_ref::<StoreError>(), Some(StoreError::NotFound(_))) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError> {
        match self.complete(path)? {
            Some(st) => self.stored_of(path, &st).map(Some),
            None => Ok(None),
        }
    }

    fn get<'a>(&'a self, path: &str) -> Result<Box<dyn ChunkReader + 'a>, LevelError> {
        let st = self.complete(path)?.ok_or_else(|| LevelError::NotFound {
            level: self.name(),
            path: path.to_string(),
        })?;
        let chunks = self.store.chunk_list(path)?;
        let stored = self.stored_of(path, &st)?;
        if stored.version.crc32c.is_none() {
            return Err(LevelError::Changed(path.to_string()));
        }
        Ok(Box::new(StoreReader {
            lvl: self,
            by: chunks.iter().map(|c| (c.logical, c.clone())).collect(),
            chunks,
            stored,
            buf: Vec::new(),
        }))
    }

    fn put<'a>(&'a self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'a>, LevelError> {
        let dir = parent_of(&src.path);
        let name = src.path.rsplit('/').next().unwrap_or_default();
        self.mkdir_p(dir)?;
        let tmp = format!(
            "{}/.ckptfs-restore.{}.{:08x}",
            dir.trim_end_matches('/'),
            std::process::id(),
            crc32c(name.as_bytes())
        );
        // Permission bits only: a copy never becomes set-id.
        let out = self.store.open(&tmp, OpenFlags::CREATE, src.mode & 0o777)?;
        Ok(Box::new(StoreWriter {
            lvl: self,
            out: Some(out),
            tmp,
            src: src.clone(),
            buf: Vec::new(),
        }))
    }

    fn delete(&self, path: &str, want: &Version) -> Result<bool, LevelError> {
        let Some(st) = self.complete(path)? else {
            return Ok(false);
        };
        let v = Version {
            ino: st.ino,
            generation: st.generation,
            size: st.size,
            mtime_ns: st.mtime_ns,
            crc32c: None,
            serial: 0,
        };
        if identity(&v) != identity(want) {
            return Ok(false);
        }
        self.store.unlink(path)?;
        Ok(true)
    }

    fn meter(&self) -> &CostMeter {
        &self.meter
    }
}

struct StoreReader<'a> {
    lvl: &'a StoreLevel,
    chunks: Vec<ChunkInfo>,
    by: HashMap<u32, ChunkInfo>,
    stored: Stored,
    buf: Vec<u8>,
}

impl StoreReader<'_> {
    /// Is the file still the version this reader started from?
    fn unchanged(&self) -> bool {
        let s = &self.lvl.store;
        let Ok(st) = s.stat(&self.stored.path) else {
            return false;
        };
        let v = &self.stored.version;
        if (st.ino, st.generation, st.size, st.mtime_ns) != identity(v) || st.state != WriteState::Complete {
            return false;
        }
        let Ok(now) = s.chunk_list(&self.stored.path) else {
            return false;
        };
        now.len() == self.chunks.len()
            && now.iter().zip(&self.chunks).all(|(a, b)| {
                a.logical == b.logical && a.chunk_id == b.chunk_id && a.written == b.written && a.crc == b.crc
            })
    }

    /// `len` bytes at `off` of the data region (a chunk list entry that points outside
    /// it is refused as a store error, never read).
    fn region_of(&self, off: u64, len: usize) -> Result<RegionSlice<'_>, LevelError> {
        self.lvl.region.slice(off, len).ok_or_else(|| {
            LevelError::from(StoreError::Invalid(format!(
                "chunk bytes {off}+{len} lie outside the {}-byte data region",
                self.lvl.region.len()
            )))
        })
    }

    /// Chunk `i`'s entry and CRC (None: a hole); a stale CRC or an entry longer than a
    /// chunk means the file changed.
    fn entry(&self, i: u64) -> Result<Option<(&ChunkInfo, u32)>, LevelError> {
        let Some(c) = self.by.get(&(i as u32)) else {
            return Ok(None);
        };
        match c.crc {
            Some(crc) if c.written <= self.lvl.cs => Ok(Some((c, crc))),
            _ => Err(LevelError::Changed(self.stored.path.clone())),
        }
    }

    /// A CRC mismatch is corruption only if the file did not change meanwhile.
    fn mismatch(&self, chunk: u64) -> LevelError {
        if self.unchanged() {
            LevelError::Corrupt {
                level: self.lvl.name(),
                path: self.stored.path.clone(),
                chunk,
            }
        } else {
            LevelError::Changed(self.stored.path.clone())
        }
    }
}

impl ChunkReader for StoreReader<'_> {
    fn rereadable(&self) -> bool {
        true
    }

    fn stored(&self) -> &Stored {
        &self.stored
    }

    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let cs = self.lvl.cs;
        let size = self.stored.version.size;
        if i * cs >= size {
            return Ok(());
        }
        let len = (size - i * cs).min(cs) as usize;
        let changed = || LevelError::Changed(self.stored.path.clone());
        let Some(c) = self.by.get(&(i as u32)).cloned() else {
            return sink(&[IoPart::Buf(self.lvl.zeros(len))]);
        };
        let crc = c.crc.ok_or_else(changed)?;
        if c.written > cs {
            return Err(changed());
        }
        let written = c.written as usize;
        let n = written.min(len);
        let zeros = IoPart::Buf(self.lvl.zeros(len - n));
        match c.location {
            ChunkLocation::Memory(off) => {
                let r = self.lvl.region.slice(off, written).ok_or_else(|| {
                    LevelError::from(StoreError::Invalid(format!(
                        "chunk bytes {off}+{written} lie outside the {}-byte data region",
                        self.lvl.region.len()
                    )))
                })?;
                // This process's page tables for the chunk in one call (a daemon never
                // touched the application's pages): no fault per page in the check.
                r.populate();
                if r.crc32c() != crc {
                    return Err(self.mismatch(i));
                }
                let head = r.prefix(n);
                sink(&[IoPart::Shared(&head), zeros])
            }
            ChunkLocation::Spill(off) => {
                let spill = self.lvl.spill.as_ref().ok_or_else(|| {
                    LevelError::from(StoreError::Invalid("spill chunk without a spill file".into()))
                })?;
                self.buf.resize(written, 0);
                spill
                    .read_exact_at(&mut self.buf, off)
                    .map_err(|e| LevelError::io("read spill file of", self.lvl.store.name(), e))?;
                if crc32c(&self.buf) != crc {
                    return Err(self.mismatch(i));
                }
                sink(&[IoPart::Buf(&self.buf[..n]), zeros])
            }
        }
    }

    fn gather(&self) -> Option<&dyn GatherRead> {
        Some(self)
    }

    fn finish(self: Box<Self>) -> Result<(), LevelError> {
        if self.unchanged() {
            Ok(())
        } else {
            Err(LevelError::Changed(self.stored.path.clone()))
        }
    }
}

impl GatherRead for StoreReader<'_> {
    fn check(&self, i: u64) -> Result<(), LevelError> {
        let Some((c, crc)) = self.entry(i)? else {
            return Ok(());
        };
        if let ChunkLocation::Memory(off) = c.location {
            let r = self.region_of(off, c.written as usize)?;
            r.populate();
            if r.crc32c() != crc {
                return Err(self.mismatch(i));
            }
        }
        Ok(())
    }

    fn read_chunks(
        &self,
        first: u64,
        end: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let cs = self.lvl.cs;
        let size = self.stored.version.size;
        let end = end.min(size.div_ceil(cs));
        // Spill chunks are read (and checked) first, memory chunks' ranges taken next:
        // the pieces below borrow both.
        let mut spilled: Vec<(Vec<u8>, usize)> = Vec::new();
        let mut ranges: Vec<RegionSlice<'_>> = Vec::new();
        for i in first..end {
            let Some((c, crc)) = self.entry(i)? else { continue };
            let written = c.written as usize;
            match c.location {
                ChunkLocation::Memory(off) => ranges.push(self.region_of(off, written)?),
                ChunkLocation::Spill(off) => {
                    let spill = self.lvl.spill.as_ref().ok_or_else(|| {
                        LevelError::from(StoreError::Invalid("spill chunk without a spill file".into()))
                    })?;
                    let (mut v, at) = aligned_zeroed(written);
                    spill
                        .read_exact_at(&mut v[at..at + written], off)
                        .map_err(|e| LevelError::io("read spill file of", self.lvl.store.name(), e))?;
                    if crc32c(&v[at..at + written]) != crc {
                        return Err(self.mismatch(i));
                    }
                    spilled.push((v, at));
                }
            }
        }
        let mut heads: Vec<RegionSlice<'_>> = Vec::with_capacity(ranges.len());
        let mut parts: Vec<IoPart<'_>> = Vec::with_capacity(2 * (end - first) as usize);
        // The memory chunks' heads (the bytes within the file's size) first: the pieces
        // borrow them.
        let mut r = ranges.iter();
        for i in first..end {
            let len = (size - i * cs).min(cs) as usize;
            if let Some((c, _)) = self.entry(i)? {
                if matches!(c.location, ChunkLocation::Memory(_)) {
                    heads.push(r.next().expect("one range per memory chunk").prefix(len));
                }
            }
        }
        let (mut h, mut sp) = (heads.iter(), spilled.iter());
        for i in first..end {
            let len = (size - i * cs).min(cs) as usize;
            let n = match self.entry(i)? {
                None => 0,
                Some((c, _)) => {
                    let n = (c.written as usize).min(len);
                    match c.location {
                        ChunkLocation::Memory(_) => {
                            parts.push(IoPart::Shared(h.next().expect("one head per memory chunk")))
                        }
                        ChunkLocation::Spill(_) => {
                            let (v, at) = sp.next().expect("one buffer per spill chunk");
                            parts.push(IoPart::Buf(&v[*at..*at + n]));
                        }
                    }
                    n
                }
            };
            if n < len {
                parts.push(IoPart::Buf(self.lvl.zeros(len - n)));
            }
        }
        parts.retain(|p| !p.is_empty());
        sink(&parts)
    }
}

struct StoreWriter<'a> {
    lvl: &'a StoreLevel,
    out: Option<FileHandle>,
    tmp: String,
    src: Stored,
    buf: Vec<u8>,
}

fn pwrite_all(out: &mut FileHandle, mut b: &[u8], mut off: u64) -> Result<(), LevelError> {
    while !b.is_empty() {
        let n = out.pwrite(b, off)?;
        if n == 0 {
            return Err(LevelError::from(StoreError::Invalid(
                "store write made no progress".into(),
            )));
        }
        b = &b[n..];
        off += n as u64;
    }
    Ok(())
}

impl ChunkWriter for StoreWriter<'_> {
    fn write_at(&mut self, parts: &[IoPart<'_>], mut off: u64) -> Result<(), LevelError> {
        let out = self.out.as_mut().expect("writer used after commit");
        for p in parts {
            match p {
                IoPart::Buf(b) => pwrite_all(out, b, off)?,
                IoPart::Shared(r) => {
                    // Shared bytes are never borrowed as `&[u8]`: copy them out first.
                    self.buf.resize(r.len(), 0);
                    r.copy_to(&mut self.buf);
                    pwrite_all(out, &self.buf, off)?;
                }
            }
            off += p.len() as u64;
        }
        Ok(())
    }

    fn land(
        &mut self,
        off: u64,
        len: usize,
        fill: &mut ckptfs_level::Fill<'_>,
    ) -> Option<Result<bool, LevelError>> {
        let out = self.out.as_mut().expect("writer used after commit");
        let mut go = || -> Result<bool, LevelError> {
            // The bytes land in the file's chunks past its size (a spill chunk: in a
            // buffer written at commit); only the commit publishes them.
            let mut l = Landing::begin(out, off, len)?;
            if !fill(&mut l)? {
                return Ok(false);
            }
            l.commit(out)?;
            Ok(true)
        };
        Some(go())
    }

    fn commit(mut self: Box<Self>) -> Result<Stored, LevelError> {
        let s = &self.lvl.store;
        self.out.take().expect("committed once").close()?;
        s.rename(&self.tmp, &self.src.path)?;
        // Renamed: nothing left for Drop to remove.
        self.tmp.clear();
        s.set_mtime(&self.src.path, self.src.version.mtime_ns)?;
        self.lvl
            .stat(&self.src.path)?
            .ok_or_else(|| LevelError::Changed(self.src.path.clone()))
    }
}

impl ckptfs_level::Landing for Landing {
    fn remaining(&self) -> usize {
        self.len() - self.landed()
    }

    fn put(&mut self, data: &[u8]) {
        Landing::put(self, data)
    }

    fn read_from(&mut self, fd: BorrowedFd<'_>) -> std::io::Result<usize> {
        Landing::read_from(self, fd)
    }

    fn crc(&self) -> u32 {
        Landing::crc(self)
    }

    fn visit(&self, f: &mut dyn FnMut(&[u8])) {
        Landing::visit(self, f)
    }
}

impl Drop for StoreWriter<'_> {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            drop(self.out.take());
            let _ = self.lvl.store.unlink(&self.tmp);
        }
    }
}

/// Per-chunk content CRCs and the whole-file CRC of a store file, derived from its
/// chunk list without reading data; None if a checksum is stale.
pub fn crcs_from_chunks(size: u64, cs: u64, chunks: &[ChunkInfo]) -> Option<(u32, Vec<u32>)> {
    let n = size.div_ceil(cs);
    let by: HashMap<u32, &ChunkInfo> = chunks.iter().map(|c| (c.logical, c)).collect();
    let mut file = 0u32;
    let mut out = Vec::with_capacity(n as usize);
    for l in 0..n {
        let len = (size - l * cs).min(cs);
        let c = match by.get(&(l as u32)) {
            None => crc32c_append_zeros(0, len as usize),
            Some(c) if c.written <= len => crc32c_append_zeros(c.crc?, (len - c.written) as usize),
            Some(_) => return None,
        };
        file = crc_combine(file, c, len);
        out.push(c);
    }
    Some((file, out))
}

impl From<StoreError> for LevelError {
    fn from(e: StoreError) -> Self {
        LevelError::backend(e.errno(), e)
    }
}
