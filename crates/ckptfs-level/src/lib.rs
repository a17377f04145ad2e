//! # ckptfs-level: the storage levels behind one interface
//!
//! A checkpoint file lives on one or more *levels* (`ckptfs_settings::types::Level`):
//! the node store, a partner's memory, an erasure set, a memory pool, the parallel file
//! system, object storage. Every level implements [`Level`]:
//!
//! - [`Level::list`] / [`Level::stat`]: what it holds, each copy with its identity and
//!   version ([`Version`]: inode, generation, size, mtime, CRC32C) and per-chunk CRCs;
//! - [`Level::get`]: a [`ChunkReader`] that hands out one verified chunk at a time as
//!   gathered pieces ([`IoPart`]: shared memory ranges, buffers), never
//!   the whole file in one buffer and never a `&[u8]` over shared memory;
//! - [`Level::put`]: a [`ChunkWriter`] that takes those pieces at file offsets and
//!   publishes the copy atomically on [`ChunkWriter::commit`] (dropped uncommitted,
//!   nothing is published);
//! - [`Level::verify`]: re-read the copy and check every chunk against its CRC;
//! - [`Level::delete`]: remove the copy if it is still the version given;
//! - [`Level::cost`]: bandwidth smoothed over the level's own recent transfers
//!   ([`CostMeter`]).
//!
//! A *dataset* is a set of files: [`Level::holds`] answers for a whole set at once.
//! [`transfer`] moves one file from a reader to a writer and charges both levels'
//! meters; the agent (`ckptfs-agent`) is the mover that decides what goes where.
//! [`Registry`] holds a node's level instances in read order; [`open_levels`] builds
//! the read order of the settings' `[levels]` section ([`ReadOrder`]), opening each
//! listed level with the [`LevelFactory`] of its kind.
//!
//! This crate holds the interface only: no level is implemented here, and it depends on
//! no implementation (the node store as a level is `ckptfs_store::level::StoreLevel`,
//! the PFS directory is in `ckptfs-agent`, partner copies in `ckptfs-node`). Errors
//! carry one errno each ([`LevelError::errno`]).
#![deny(missing_docs)]

pub mod conformance;
pub mod cost;
pub mod crc;
mod error;
pub mod gather;
mod id;
pub mod mem;
pub mod mover;
pub mod order;
mod piece;
pub mod protection;
pub mod registry;

pub use ckptfs_settings::types::Level as LevelKind;
pub use cost::{Cost, CostMeter, Direction};
pub use error::LevelError;
pub use gather::{GatherRead, GatherWrite, Pace, RateLimit};
pub use id::LevelId;
pub use mover::{Job, MoveOptions, Moved, Mover, Progress};
pub use order::{open_levels, ReadOrder, Step};
pub use piece::{crc32c_of, IoPart, SharedBytes};
pub use protection::{
    dataset_key, MemberFile, MemberRecovery, Part, PartFile, Recovered, SetProtection, SetState,
};
pub use registry::{Holders, Holding, LevelFactory, Registry};

use std::os::fd::BorrowedFd;

/// Identity and version of one stored copy. Two copies hold the same content when
/// [`Version::same_content`] says so; a copy changed when any field changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Version {
    /// Inode number of the copy on its level (0 where the level has none).
    pub ino: u64,
    /// Generation of that inode number (0 where the level has none).
    pub generation: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time of the content, ns since the epoch.
    pub mtime_ns: u64,
    /// CRC32C of the whole content; None while a checksum is stale (being rewritten).
    pub crc32c: Option<u32>,
    /// The source's copy generation of this version where the level keeps one (partner
    /// copies: it increases with every version the source node copies, so copies on
    /// several holders can be ordered); 0 where unknown.
    pub serial: u64,
}

impl Version {
    /// Same bytes (same size and whole-file CRC32C, both known)?
    pub fn same_content(&self, other: &Version) -> bool {
        self.size == other.size && self.crc32c.is_some() && self.crc32c == other.crc32c
    }
}

/// One copy of a file on a level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Store path of the file (`/a/b/c`), the same on every level.
    pub path: String,
    /// Identity and version of this copy.
    pub version: Version,
    /// Permission bits.
    pub mode: u32,
    /// Chunk size of `chunk_crc32c`.
    pub chunk_size: u64,
    /// CRC32C of each chunk's content (empty if unknown).
    pub chunk_crc32c: Vec<u32>,
}

impl Stored {
    /// Number of chunks of `chunk_size` the content spans.
    pub fn chunks(&self) -> u64 {
        self.version.size.div_ceil(self.chunk_size.max(1))
    }

    /// Check chunk `i`'s bytes against the CRC32C this copy records for it (every
    /// reader's check before it hands a chunk on): [`LevelError::Corrupt`] naming
    /// `level`, the file and the chunk when they differ or the chunk has no CRC.
    pub fn check_chunk(&self, level: &str, i: u64, bytes: &[u8]) -> Result<(), LevelError> {
        let want = usize::try_from(i).ok().and_then(|i| self.chunk_crc32c.get(i));
        if want == Some(&ckptfs_crc::crc32c(bytes)) {
            Ok(())
        } else {
            Err(LevelError::Corrupt {
                level: level.to_string(),
                path: self.path.clone(),
                chunk: i,
            })
        }
    }
}

/// Hands out one copy's bytes, chunk by chunk, each checked against its CRC32C.
pub trait ChunkReader {
    /// The copy being read.
    fn stored(&self) -> &Stored;
    /// Pass chunk `i`'s content (`min(chunk_size, size - i * chunk_size)` bytes, in
    /// order, as gathered pieces) to `sink`, after checking it. Chunks are read in
    /// increasing order.
    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError>;
    /// Read chunk `i` into `writer` at byte offset `off`. The default passes
    /// [`read_chunk`](ChunkReader::read_chunk)'s pieces to
    /// [`ChunkWriter::write_at`]; a reader whose bytes come off a descriptor (a socket)
    /// lands them straight in the writer's memory instead where the writer offers it
    /// ([`ChunkWriter::land`]), checked all the same.
    fn read_chunk_to(&mut self, i: u64, off: u64, writer: &mut dyn ChunkWriter) -> Result<(), LevelError> {
        let mut at = off;
        self.read_chunk(i, &mut |parts| {
            writer.write_at(parts, at)?;
            at += parts.iter().map(|p| p.len() as u64).sum::<u64>();
            Ok(())
        })
    }
    /// Whether [`read_chunk`](ChunkReader::read_chunk) may be called again for the same
    /// chunk (a copy read by offset: a file, memory). A reader of a stream (a socket)
    /// says no, and the mover sends the whole file again instead.
    fn rereadable(&self) -> bool {
        false
    }
    /// The same chunks checked and handed out from several threads, several chunks in
    /// one piece list, where the reader can ([`GatherRead`]; None: it cannot). The mover
    /// uses it for writes larger than a chunk or several writers per file, when the
    /// writer offers [`ChunkWriter::gather`] too.
    fn gather(&self) -> Option<&dyn GatherRead> {
        None
    }
    /// After the last chunk: confirm the copy is still the version that was read (and,
    /// for a file, that nothing follows its end).
    fn finish(self: Box<Self>) -> Result<(), LevelError>;
}

/// The writer's own memory for the next bytes of a copy, filled straight from a
/// descriptor ([`ChunkWriter::land`]): nothing of it is published unless the filler
/// says the bytes are good.
pub trait Landing: Send {
    /// Bytes still to land.
    fn remaining(&self) -> usize;
    /// Land `data` (bytes already read, e.g. from a read-ahead buffer); at most
    /// [`remaining`](Landing::remaining) bytes.
    fn put(&mut self, data: &[u8]);
    /// One read from `fd` into the rest; the bytes landed (0 at end of stream, or when
    /// nothing remains). A non-blocking descriptor with nothing to read answers
    /// `WouldBlock`.
    fn read_from(&mut self, fd: BorrowedFd<'_>) -> std::io::Result<usize>;
    /// CRC32C of the bytes landed so far.
    fn crc(&self) -> u32;
    /// Hands the bytes landed so far to `f`, in order (a frame tag is checked over them
    /// before anything is published).
    fn visit(&self, f: &mut dyn FnMut(&[u8]));
}

/// What fills a [`Landing`]: `Ok(true)` when every byte landed and matched its
/// checksum, `Ok(false)` when the bytes are bad (nothing is published).
pub type Fill<'f> = dyn FnMut(&mut dyn Landing) -> Result<bool, LevelError> + 'f;

/// Receives a new copy; nothing is visible on the level before [`ChunkWriter::commit`].
/// Dropped without a commit, the partial copy is removed.
pub trait ChunkWriter {
    /// Write the pieces at byte offset `off`.
    fn write_at(&mut self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError>;
    /// Take the `len` bytes at `off` (the copy's end so far) straight into the writer's
    /// memory: `fill` lands them ([`Landing`]) and says whether they are good; only then
    /// are they kept. Returns what `fill` said, or `None` when this writer has no such
    /// path (the default; the caller then uses [`write_at`](ChunkWriter::write_at)).
    fn land(&mut self, off: u64, len: usize, fill: &mut Fill<'_>) -> Option<Result<bool, LevelError>> {
        let _ = (off, len, fill);
        None
    }
    /// The same writer taking writes from several threads at once, where it can
    /// ([`GatherWrite`]; None: it cannot). See [`ChunkReader::gather`].
    fn gather(&self) -> Option<&dyn GatherWrite> {
        None
    }
    /// Make the copy durable and publish it under its path; returns it as stored.
    fn commit(self: Box<Self>) -> Result<Stored, LevelError>;
}

/// A storage level (see the crate documentation).
pub trait Level: Send + Sync {
    /// Which level this is.
    fn kind(&self) -> LevelKind;
    /// A name for messages (`local:STORE`, `pfs:/dir`).
    fn name(&self) -> String;
    /// This instance's id in the registry (`partner:node3`, `s3:bucket/prefix`); by
    /// default parsed from [`Level::name`], whose form is `kind:instance`.
    fn id(&self) -> LevelId {
        LevelId::parse(&self.name()).unwrap_or_else(|| LevelId::new(self.kind().name(), self.name()))
    }
    /// The copies under store path `prefix` (`/` for all).
    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError>;
    /// The copy of `path`, if any.
    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError>;
    /// Read the copy of `path`.
    fn get<'a>(&'a self, path: &str) -> Result<Box<dyn ChunkReader + 'a>, LevelError>;
    /// Start a new copy of the file `src` describes (its path, mode, mtime, size and
    /// CRCs are kept with the copy). The writer records `src`'s CRCs as given: the bytes
    /// are checked against them on the way in by the source's reader ([`transfer`]),
    /// and against them again whenever the copy is read back.
    fn put<'a>(&'a self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'a>, LevelError>;
    /// Read the copy of `path` and check every chunk; it must be version `want`
    /// (same content). Returns the copy. The default reads it through [`Level::get`]
    /// (whose reader checks each chunk's CRC32C, and the whole copy in `finish`).
    fn verify(&self, path: &str, want: &Version) -> Result<Stored, LevelError> {
        let mut r = self.get(path)?;
        let stored = r.stored().clone();
        if !stored.version.same_content(want) {
            return Err(LevelError::Changed(path.to_string()));
        }
        for i in 0..stored.chunks() {
            r.read_chunk(i, &mut |_| Ok(()))?;
        }
        r.finish()?;
        Ok(stored)
    }
    /// Remove the copy of `path` if it still has `want`'s content. `Ok(false)`: there
    /// is none, or it has other content (left alone).
    fn delete(&self, path: &str, want: &Version) -> Result<bool, LevelError>;
    /// The level's transfer meter.
    fn meter(&self) -> &CostMeter;
    /// Its measured cost.
    fn cost(&self) -> Cost {
        self.meter().cost()
    }
    /// A dataset's files: for each `(path, crc32c)`, does this level hold that content?
    fn holds(&self, files: &[(String, u32)]) -> Result<Vec<bool>, LevelError> {
        files
            .iter()
            .map(|(p, crc)| Ok(self.stat(p)?.is_some_and(|s| s.version.crc32c == Some(*crc))))
            .collect()
    }
}

/// What one [`transfer`] moved.
#[derive(Debug, Clone)]
pub struct Transfer {
    /// The new copy.
    pub stored: Stored,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Move one copy from an open `reader` to an open `writer` through a default [`Mover`]
/// (chunk by chunk, no whole-file buffer), then confirm the source is unchanged and
/// commit. On any error the writer is dropped (the partial copy removed). The time is
/// charged to `meters` (the source's as a get, the destination's as a put).
pub fn transfer(
    reader: Box<dyn ChunkReader + '_>,
    writer: Box<dyn ChunkWriter + '_>,
    meters: (&CostMeter, &CostMeter),
) -> Result<Transfer, LevelError> {
    Mover::default().copy_open(reader, writer, meters)
}

/// Copy `path` from level `from` to level `to` with a default [`Mover`] (one stream,
/// chunk by chunk, resent after a transient failure).
pub fn copy(from: &dyn Level, to: &dyn Level, path: &str) -> Result<Transfer, LevelError> {
    Mover::default().copy(from, to, path)
}

/// Move an open reader's copy into an open writer of one level (its meter charged as a
/// put): a source that is not a level (a buffer, a socket).
pub fn copy_reader(
    reader: Box<dyn ChunkReader + '_>,
    writer: Box<dyn ChunkWriter + '_>,
    meter: &CostMeter,
) -> Result<Transfer, LevelError> {
    let scratch = CostMeter::default();
    Mover::default().copy_open(reader, writer, (&scratch, meter))
}
