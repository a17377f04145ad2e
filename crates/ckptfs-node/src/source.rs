//! Reading a complete file out of the node store for a partner copy or a Get, without
//! the writer and without copying its bytes: the file's chunk list
//! ([`Store::chunk_list`], CRUISE section 4.6) becomes a [`WireSource`] whose chunks
//! write themselves to the socket (`writev` from the shared mapping, `sendfile` from the
//! spill file) with the CRC32C the store recorded for each; the receiver checks it.
//!
//! The daemon takes no store lock while it sends, so the application may rewrite the
//! file meanwhile: [`FileReader::unchanged`] re-checks the identity and the chunk list
//! before the copy ends, and a copy whose file changed is abandoned and redone. A chunk
//! the receiver refuses is checked here against its recorded CRC
//! ([`FileReader::local_chunk_ok`]): damaged here (the copy is refused, never sent as
//! valid), or damaged on the wire (sent again).

use crate::levels::Identity;
use ckptfs_partner::NodeError;
use ckptfs_store::netio::{NotSendable, WireChunk, WireSource};
use ckptfs_store::{ChunkInfo, FileHandle, OpenFlags, Store, WriteState};
use std::os::fd::BorrowedFd;

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

/// A complete file being sent.
pub struct FileReader {
    store: Store,
    path: String,
    /// Held open so the file's chunks are not freed while they are sent (an unlinked
    /// file lives on while it is open).
    _file: FileHandle,
    identity: Identity,
    chunks: Vec<ChunkInfo>,
    wire: WireSource,
}

/// One wire chunk of a [`FileReader`], as the transport's zero-copy chunk data.
pub struct WirePiece<'a> {
    src: &'a WireSource,
    i: usize,
}

impl ckptfs_transport::ChunkData for WirePiece<'_> {
    fn len(&self) -> usize {
        self.src.chunks()[self.i].len
    }

    fn write_to(&self, fd: BorrowedFd<'_>, head: &[u8], at: usize) -> std::io::Result<usize> {
        self.src.write_to(self.i, fd, head, at)
    }

    fn visit(&self, f: &mut dyn FnMut(&[u8])) -> std::io::Result<()> {
        self.src.visit(self.i, f)
    }
}

impl FileReader {
    /// Open `path` (also a partner copy under `/.ckptfs`) if it is a complete file.
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
        let wire = match WireSource::new(store, &chunks, st.size) {
            Ok(w) => w,
            Err(NotSendable::Changing(_)) => return Err(ReadProblem::Changed),
            Err(NotSendable::OutOfRange(c)) => return Err(ReadProblem::Corrupt(c)),
        };
        Ok(FileReader {
            store: store.clone(),
            path: path.to_string(),
            identity: Identity::of(&st),
            _file: file,
            chunks,
            wire,
        })
    }

    /// The version being read.
    pub fn identity(&self) -> Identity {
        self.identity
    }

    /// The wire chunks (one per store chunk, holes included), in file order.
    pub fn chunks(&self) -> &[WireChunk] {
        self.wire.chunks()
    }

    /// Chunk `i` as the transport's zero-copy data.
    pub fn piece(&self, i: usize) -> WirePiece<'_> {
        WirePiece { src: &self.wire, i }
    }

    /// Whether chunk `i`'s bytes here still match the CRC the store recorded (after the
    /// receiver refused it).
    pub fn local_chunk_ok(&self, i: usize) -> bool {
        self.wire.crc_now(i).is_ok_and(|c| c == self.wire.chunks()[i].crc)
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

/// What one scan of the store's listing found (outside the system namespace).
pub struct Scan {
    /// Complete files, with their identities.
    pub complete: Vec<(String, Identity)>,
    /// Whether some file is still being written (a live writer has it open): it may
    /// become complete without the store's change sequence moving.
    pub writing: bool,
}

/// Scan the store's listing: its complete files and whether any file is being written.
pub fn scan(store: &Store) -> Scan {
    let mut writing = false;
    let complete = store
        .list_all()
        .into_iter()
        .filter(|(_, st)| st.kind == ckptfs_store::FileKind::File)
        .filter(|(_, st)| {
            writing |= st.state == WriteState::Writing;
            st.state == WriteState::Complete
        })
        .map(|(p, st)| {
            let id = Identity::of(&st);
            (p, id)
        })
        .collect();
    Scan { complete, writing }
}

/// Complete files of the store outside the system namespace, with their identities.
pub fn complete_files(store: &Store) -> Vec<(String, Identity)> {
    scan(store).complete
}
