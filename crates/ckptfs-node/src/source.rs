//! Reading a complete file out of the node store for a partner copy or a Get, chunk by
//! chunk, each chunk checked against the CRC32C the store recorded for it
//! ([`Store::chunk_list`], CRUISE section 4.6), without the writer.
//!
//! The daemon takes no store lock while it reads, so the application may rewrite the
//! file meanwhile: [`FileReader::unchanged`] re-checks the identity and the chunk list
//! at the end, and a copy whose file changed is abandoned and redone.

use crate::error::NodeError;
use crate::levels::Identity;
use ckptfs_store::checksum::{crc32c, crc32c_append_zeros};
use ckptfs_store::{ChunkInfo, FileHandle, OpenFlags, Store, WriteState};

/// Most bytes of one wire chunk: a store chunk is sent in pieces of at most this size.
pub const PIECE: usize = 1 << 20;

/// Why a file could not be read for a copy.
#[derive(Debug)]
pub enum ReadProblem {
    /// It changed (rewritten, truncated, replaced, reopened for writing): copy it later.
    Changed,
    /// It is gone.
    Gone,
    /// A chunk does not match its recorded CRC while the file is unchanged.
    Corrupt(u32),
    /// Another error.
    Failed(NodeError),
}

/// A complete file being read for a copy.
pub struct FileReader {
    store: Store,
    path: String,
    file: FileHandle,
    identity: Identity,
    chunks: Vec<ChunkInfo>,
    chunk_size: u64,
    buf: Vec<u8>,
    /// Next logical chunk to read.
    next: u64,
}

impl FileReader {
    /// Open `path` if it is a complete file.
    pub fn open(store: &Store, path: &str) -> std::result::Result<FileReader, ReadProblem> {
        let file = match store.open(path, OpenFlags::READ, 0) {
            Ok(f) => f,
            Err(ckptfs_store::StoreError::NotFound(_)) => return Err(ReadProblem::Gone),
            Err(e) => return Err(ReadProblem::Failed(NodeError::store(format!("open {path}"), e))),
        };
        let st = file.stat();
        if st.state != WriteState::Complete {
            return Err(ReadProblem::Changed);
        }
        let chunks = file.chunk_list();
        Ok(FileReader {
            store: store.clone(),
            path: path.to_string(),
            identity: Identity::of(&st),
            chunk_size: store.chunk_size(),
            file,
            chunks,
            buf: Vec::new(),
            next: 0,
        })
    }

    /// The version being read.
    pub fn identity(&self) -> Identity {
        self.identity
    }

    /// The next store chunk: its byte offset and bytes (verified), or None at the end.
    /// Split it into pieces of at most [`PIECE`] bytes to send it.
    pub fn next_chunk(&mut self) -> std::result::Result<Option<(u64, &[u8])>, ReadProblem> {
        let off = self.next * self.chunk_size;
        if off >= self.identity.size {
            return Ok(None);
        }
        let len = (self.identity.size - off).min(self.chunk_size) as usize;
        self.buf.resize(len, 0);
        let mut done = 0;
        while done < len {
            match self.file.pread(&mut self.buf[done..], off + done as u64) {
                Ok(0) => return Err(ReadProblem::Changed),
                Ok(n) => done += n,
                Err(ckptfs_store::StoreError::Corrupt { .. }) => {
                    return Err(self.corrupt_or_changed(self.next as u32));
                }
                Err(e) => {
                    return Err(ReadProblem::Failed(NodeError::store(
                        format!("read {}", self.path),
                        e,
                    )));
                }
            }
        }
        let logical = self.next as u32;
        let expected = match self.chunks.iter().find(|c| c.logical == logical) {
            Some(c) => match c.crc {
                Some(crc) if c.written <= len as u64 => crc32c_append_zeros(crc, len - c.written as usize),
                // Being rewritten.
                _ => return Err(ReadProblem::Changed),
            },
            // A hole reads as zeros.
            None => crc32c_append_zeros(0, len),
        };
        if crc32c(&self.buf) != expected {
            return Err(self.corrupt_or_changed(logical));
        }
        self.next += 1;
        Ok(Some((off, &self.buf)))
    }

    fn corrupt_or_changed(&self, logical: u32) -> ReadProblem {
        if self.unchanged() {
            ReadProblem::Corrupt(logical)
        } else {
            ReadProblem::Changed
        }
    }

    /// Whether the file is still the version that was read (same identity, complete, same
    /// chunks and CRCs).
    pub fn unchanged(&self) -> bool {
        match self.store.stat(&self.path) {
            Ok(st) if st.state == WriteState::Complete && Identity::of(&st) == self.identity => {}
            _ => return false,
        }
        match self.store.chunk_list(&self.path) {
            Ok(now) => {
                now.len() == self.chunks.len()
                    && now
                        .iter()
                        .zip(&self.chunks)
                        .all(|(a, b)| a.chunk_id == b.chunk_id && a.written == b.written && a.crc == b.crc)
            }
            Err(_) => false,
        }
    }
}

/// Complete files of the store outside the system namespace, with their identities.
pub fn complete_files(store: &Store) -> Vec<(String, Identity)> {
    store
        .list_all()
        .into_iter()
        .filter(|(_, st)| st.kind == ckptfs_store::FileKind::File && st.state == WriteState::Complete)
        .map(|(p, st)| {
            let id = Identity::of(&st);
            (p, id)
        })
        .collect()
}
