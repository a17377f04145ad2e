//! The object level's writer: bytes in order, compressed per group when configured,
//! uploaded in parts of `part_size` (several in flight) or, for a small file, one PUT
//! on commit. Dropped uncommitted, its multipart upload is aborted.

use crate::error::ObjectError;
use crate::manifest::{Entry, Zstd};
use crate::ObjectLevel;
use bytes::Bytes;
use ckptfs_level::{ChunkWriter, IoPart, LevelError, Stored};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};
use std::collections::VecDeque;
use tokio::task::JoinHandle;

struct Upload {
    id: String,
    journal: Path,
}

pub(crate) struct ObjectWriter<'a> {
    lvl: &'a ObjectLevel,
    src: Stored,
    key: Path,
    part_size: u64,
    /// Uncompressed bytes taken so far, and their CRC32C.
    written: u64,
    crc: u32,
    /// Compression: bytes of the group being filled.
    group_buf: Vec<u8>,
    frames: Vec<u64>,
    /// Object bytes not uploaded yet.
    part_buf: Vec<u8>,
    upload: Option<Upload>,
    next_part: usize,
    inflight: VecDeque<JoinHandle<object_store::Result<PartId>>>,
    parts: Vec<PartId>,
    object_size: u64,
}

impl<'a> ObjectWriter<'a> {
    pub(crate) fn new(lvl: &'a ObjectLevel, src: &Stored) -> Result<ObjectWriter<'a>, ObjectError> {
        let key = lvl.data_key(&src.path)?;
        let part_size = lvl.part_size_for(src.version.size, src.chunk_size);
        Ok(ObjectWriter {
            lvl,
            src: src.clone(),
            key,
            part_size,
            written: 0,
            crc: 0,
            group_buf: Vec::new(),
            frames: Vec::new(),
            part_buf: Vec::with_capacity(part_size.min(src.version.size) as usize),
            upload: None,
            next_part: 0,
            inflight: VecDeque::new(),
            parts: Vec::new(),
            object_size: 0,
        })
    }

    fn group(&self) -> Option<(i32, u64)> {
        self.lvl.cfg.compression.map(|c| {
            let cs = self.src.chunk_size.max(1);
            (c.level, c.group.div_ceil(cs) * cs)
        })
    }

    /// Compress the first `n` bytes of the group buffer into one frame.
    fn compress(&mut self, n: usize, level: i32) -> Result<(), ObjectError> {
        let frame = zstd::bulk::compress(&self.group_buf[..n], level)
            .map_err(|e| ObjectError::Config(format!("zstd: {e}")))?;
        self.frames.push(frame.len() as u64);
        self.part_buf.extend_from_slice(&frame);
        self.group_buf.drain(..n);
        Ok(())
    }

    /// Start a part upload of the bytes buffered (waiting for the oldest part when the
    /// window is full).
    fn send_part(&mut self) -> Result<(), ObjectError> {
        if self.upload.is_none() {
            let s3 = self.lvl.store();
            let key = self.key.clone();
            let id = self
                .lvl
                .block(async move { s3.create_multipart(&key).await })?
                .map_err(|e| self.lvl.err("create multipart upload", &self.key, e))?;
            let journal = self.lvl.journal_add(&self.key, &id)?;
            self.upload = Some(Upload { id, journal });
        }
        let Some(up) = &self.upload else {
            unreachable!("created above")
        };
        let data = Bytes::from(std::mem::take(&mut self.part_buf));
        self.object_size += data.len() as u64;
        let (s3, key, id, idx) = (self.lvl.store(), self.key.clone(), up.id.clone(), self.next_part);
        self.next_part += 1;
        self.inflight.push_back(
            self.lvl
                .spawn(async move { s3.put_part(&key, &id, idx, PutPayload::from(data)).await }),
        );
        while self.inflight.len() > self.lvl.cfg.concurrency {
            self.wait_one()?;
        }
        Ok(())
    }

    fn wait_one(&mut self) -> Result<(), ObjectError> {
        let Some(h) = self.inflight.pop_front() else {
            return Ok(());
        };
        let r = self.lvl.block(h)?;
        let part = match r {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => return Err(self.lvl.err("upload part", &self.key, e)),
            Err(j) => return Err(ObjectError::Config(format!("part upload task: {j}"))),
        };
        self.parts.push(part);
        Ok(())
    }
}

impl ChunkWriter for ObjectWriter<'_> {
    fn write_at(&mut self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError> {
        if off != self.written {
            return Err(ObjectError::NotSequential {
                path: self.src.path.clone(),
                off,
                expected: self.written,
            }
            .into());
        }
        let group = self.group();
        for p in parts {
            let buf = if group.is_some() {
                &mut self.group_buf
            } else {
                &mut self.part_buf
            };
            let at = buf.len();
            p.extend_vec(buf);
            self.crc = ckptfs_crc::crc32c_append(self.crc, &buf[at..]);
            self.written += p.len() as u64;
        }
        if let Some((level, g)) = group {
            while self.group_buf.len() as u64 >= g {
                self.compress(g as usize, level)?;
            }
        }
        if self.part_buf.len() as u64 >= self.part_size {
            self.send_part()?;
        }
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> Result<Stored, LevelError> {
        if let Some((level, _)) = self.group() {
            if !self.group_buf.is_empty() {
                let n = self.group_buf.len();
                self.compress(n, level)?;
            }
        }
        if self.written != self.src.version.size || self.src.version.crc32c.is_some_and(|c| c != self.crc) {
            return Err(LevelError::Changed(self.src.path.clone()));
        }
        let (e_tag, parts) = if self.upload.is_none() {
            let data = Bytes::from(std::mem::take(&mut self.part_buf));
            self.object_size = data.len() as u64;
            let (s3, key) = (self.lvl.store(), self.key.clone());
            let r = self
                .lvl
                .block(async move { s3.put(&key, PutPayload::from(data)).await })?
                .map_err(|e| self.lvl.err("put", &self.key, e))?;
            (r.e_tag, 0)
        } else {
            if !self.part_buf.is_empty() {
                self.send_part()?;
            }
            while !self.inflight.is_empty() {
                self.wait_one()?;
            }
            let Some(up) = &self.upload else {
                unreachable!("multipart branch")
            };
            let (s3, key, id, plist) = (
                self.lvl.store(),
                self.key.clone(),
                up.id.clone(),
                std::mem::take(&mut self.parts),
            );
            let n = plist.len() as u32;
            let r = self
                .lvl
                .block(async move { s3.complete_multipart(&key, &id, plist).await })?
                .map_err(|e| self.lvl.err("complete multipart upload", &self.key, e))?;
            let journal = up.journal.clone();
            self.upload = None;
            // Completed: a journal entry left behind (error here) only costs a harmless
            // abort of a finished upload at the next drain's start.
            let _ = self.lvl.journal_remove(&journal);
            (r.e_tag, n)
        };
        let zstd = self.group().map(|(level, group)| Zstd {
            level,
            group,
            frames: std::mem::take(&mut self.frames),
        });
        let entry = Entry {
            path: self.src.path.clone(),
            deleted: false,
            size: self.src.version.size,
            mode: self.src.mode,
            mtime_ns: self.src.version.mtime_ns,
            chunk_size: self.src.chunk_size,
            crc32c: self.crc,
            chunk_crc32c: self.src.chunk_crc32c.clone(),
            object_size: self.object_size,
            e_tag,
            parts,
            zstd,
        };
        entry.check().map_err(|reason| ObjectError::Manifest {
            key: self.key.to_string(),
            reason,
        })?;
        let stored = crate::stored_of(&entry);
        self.lvl.record(entry)?;
        Ok(stored)
    }
}

impl Drop for ObjectWriter<'_> {
    fn drop(&mut self) {
        let Some(up) = self.upload.take() else {
            return;
        };
        for h in self.inflight.drain(..) {
            h.abort();
        }
        let (s3, key, id) = (self.lvl.store(), self.key.clone(), up.id.clone());
        match self.lvl.block(crate::abort(s3, key, id)) {
            Ok(Ok(())) => {
                let _ = self.lvl.journal_remove(&up.journal);
            }
            // Left in the journal: the next drain's recover_uploads aborts it.
            Ok(Err(e)) => tracing::warn!("abort of the upload of {}: {e}", self.key),
            Err(e) => tracing::warn!("abort of the upload of {}: {e}", self.key),
        }
    }
}
