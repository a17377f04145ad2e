//! The object level's reader: ranged GETs of `part_size` (or one compressed frame each),
//! `concurrency` of them in flight ahead of the chunk asked for; every chunk checked
//! against the manifest's CRC32C (after decompression) before it is handed out.

use crate::error::ObjectError;
use crate::manifest::Entry;
use crate::ObjectLevel;
use bytes::Bytes;
use ckptfs_level::{ChunkReader, IoPart, LevelError, Stored};
use object_store::path::Path;
use object_store::ObjectStore;
use std::collections::VecDeque;
use std::ops::Range;
use tokio::task::JoinHandle;

/// One ranged read: bytes `obj` of the object hold uncompressed bytes
/// `ustart..ustart + ulen` of the file.
struct Seg {
    obj: Range<u64>,
    ustart: u64,
    ulen: u64,
}

pub(crate) struct ObjectReader<'a> {
    lvl: &'a ObjectLevel,
    stored: Stored,
    entry: Entry,
    key: Path,
    segs: Vec<Seg>,
    /// Uncompressed bytes per segment (a multiple of the chunk size).
    seg_len: u64,
    inflight: VecDeque<(usize, JoinHandle<object_store::Result<Bytes>>)>,
    next: usize,
    cur: Option<(usize, Bytes)>,
}

impl<'a> ObjectReader<'a> {
    pub(crate) fn new(lvl: &'a ObjectLevel, entry: Entry) -> Result<ObjectReader<'a>, ObjectError> {
        let key = lvl.data_key(&entry.path)?;
        let cs = entry.chunk_size;
        let mut segs = Vec::new();
        let seg_len;
        match &entry.zstd {
            Some(z) => {
                seg_len = z.group;
                let mut off = 0;
                for (j, f) in z.frames.iter().enumerate() {
                    let ustart = j as u64 * z.group;
                    segs.push(Seg {
                        obj: off..off + f,
                        ustart,
                        ulen: z.group.min(entry.size - ustart),
                    });
                    off += f;
                }
            }
            None => {
                seg_len = lvl.part_size_for(entry.size, cs);
                let mut ustart = 0;
                while ustart < entry.size {
                    let ulen = seg_len.min(entry.size - ustart);
                    segs.push(Seg {
                        obj: ustart..ustart + ulen,
                        ustart,
                        ulen,
                    });
                    ustart += ulen;
                }
            }
        }
        Ok(ObjectReader {
            lvl,
            stored: crate::stored_of(&entry),
            entry,
            key,
            segs,
            seg_len,
            inflight: VecDeque::new(),
            next: 0,
            cur: None,
        })
    }

    fn corrupt(&self, chunk: u64) -> LevelError {
        LevelError::Corrupt {
            level: self.lvl.cfg.name(),
            path: self.entry.path.clone(),
            chunk,
        }
    }

    /// The uncompressed bytes of segment `j` (fetching ahead).
    fn segment(&mut self, j: usize, chunk: u64) -> Result<Bytes, LevelError> {
        if let Some((c, b)) = &self.cur {
            if *c == j {
                return Ok(b.clone());
            }
        }
        // Not the next segment fetched ahead (a chunk skipped forward, or read again
        // after the mover's window moved on): drop the fetches ahead and start at `j`.
        if self.inflight.front().map(|(i, _)| *i) != Some(j) {
            for (_, h) in self.inflight.drain(..) {
                h.abort();
            }
            self.next = j;
        }
        while self.inflight.len() < self.lvl.cfg.concurrency && self.next < self.segs.len() {
            let (s3, key, range) = (
                self.lvl.store(),
                self.key.clone(),
                self.segs[self.next].obj.clone(),
            );
            self.inflight.push_back((
                self.next,
                self.lvl.spawn(async move { s3.get_range(&key, range).await }),
            ));
            self.next += 1;
        }
        let Some((_, h)) = self.inflight.pop_front() else {
            return Err(self.corrupt(chunk));
        };
        let raw = match self.lvl.block(h)? {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return Err(self.lvl.err("get", &self.key, e).into()),
            Err(e) => return Err(ObjectError::Config(format!("read task: {e}")).into()),
        };
        let seg = &self.segs[j];
        if raw.len() as u64 != seg.obj.end - seg.obj.start {
            return Err(self.corrupt(chunk));
        }
        let data = if self.entry.zstd.is_some() {
            let out = zstd::bulk::Decompressor::new()
                .and_then(|mut d| d.decompress(&raw, seg.ulen as usize))
                .map_err(|_| self.corrupt(chunk))?;
            if out.len() as u64 != seg.ulen {
                return Err(self.corrupt(chunk));
            }
            Bytes::from(out)
        } else {
            raw
        };
        self.cur = Some((j, data.clone()));
        Ok(data)
    }
}

impl ChunkReader for ObjectReader<'_> {
    fn stored(&self) -> &Stored {
        &self.stored
    }

    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let cs = self.entry.chunk_size;
        let start = i.checked_mul(cs).filter(|s| *s < self.entry.size);
        let Some(start) = start else {
            return Err(LevelError::io(
                "read chunk",
                self.entry.path.clone(),
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ));
        };
        let len = cs.min(self.entry.size - start);
        let j = (start / self.seg_len) as usize;
        let seg = self.segment(j, i)?;
        let off = (start - self.segs[j].ustart) as usize;
        let bytes = &seg[off..off + len as usize];
        if ckptfs_crc::crc32c(bytes) != self.entry.chunk_crc32c[i as usize] {
            return Err(self.corrupt(i));
        }
        sink(&[IoPart::Buf(bytes)])
    }

    /// Ranged reads: any chunk can be read again.
    fn rereadable(&self) -> bool {
        true
    }

    fn finish(mut self: Box<Self>) -> Result<(), LevelError> {
        for (_, h) in self.inflight.drain(..) {
            h.abort();
        }
        // Still the object the manifest names (not replaced by a later drain while read)?
        let (s3, key) = (self.lvl.store(), self.key.clone());
        let meta = self
            .lvl
            .block(async move { s3.head(&key).await })?
            .map_err(|e| self.lvl.err("head", &self.key, e))?;
        let same_tag = match (&meta.e_tag, &self.entry.e_tag) {
            (Some(a), Some(b)) => a.trim_matches('"') == b.trim_matches('"'),
            _ => true,
        };
        if meta.size != self.entry.object_size || !same_tag {
            return Err(LevelError::Changed(self.entry.path.clone()));
        }
        Ok(())
    }
}
