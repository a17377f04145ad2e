//! The store: creating/attaching segments, the namespace (files and directories), chunk
//! allocation, leases and crash recovery. File data access lives in `file.rs`.

use crate::error::{Result, StoreError};
use crate::file::FileHandle;
use crate::integrity::{fid_ok, seal_data, seal_ns};
use crate::layout::*;
use crate::lock::{Acquired, Guard};
use crate::process;
use crate::segment::{now, CreateParams, Segment};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;

pub use ckptfs_settings::{default_store_name, DEFAULT_CHUNK_SIZE, DEFAULT_MAX_FILES, DEFAULT_MEM_SIZE};
/// Inode number of the root directory (FUSE convention). Inode numbers are file id + 1.
pub const ROOT_INO: u64 = 1;

/// How to find or create a store. `None` settings accept whatever an existing segment
/// has, and use the defaults when creating.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Store name (`[A-Za-z0-9._-]`, at most 64 bytes); empty = [`default_store_name`].
    pub name: String,
    /// Memory data region size in bytes (rounded down to whole chunks).
    pub mem_size: Option<u64>,
    /// Chunk size: a power of two from 64 KiB to 64 MiB.
    pub chunk_size: Option<u64>,
    /// Maximum number of files and directories (root included).
    pub max_files: Option<u32>,
    /// Directory of the spill file (used only when memory chunks run out).
    pub spill_dir: Option<PathBuf>,
    /// Size of the spill file in bytes (rounded down to whole chunks).
    pub spill_size: Option<u64>,
    /// One private segment per process (`NAME.RANK`, rank from the MPI/Slurm
    /// environment) instead of one shared by all processes of the node.
    pub private: bool,
    /// Attach a segment owned by another user (for root, explicitly: `ckptfs
    /// --allow-foreign-owner`, `CKPTFS_ALLOW_FOREIGN_OWNER=1`). Off by default: a segment
    /// must be owned by the caller; mode 0600 and the spill file's checks always apply.
    pub allow_foreign_owner: bool,
}

/// Path of the segment file of store `name`.
pub fn segment_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/ckptfs.{name}"))
}

/// Rank of this process in its parallel job, from the usual launcher variables.
pub fn job_rank() -> Option<String> {
    [
        "CKPTFS_RANK",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
        "RANK",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
}

impl StoreOptions {
    /// Options for the store `name` with all settings left to the segment or defaults.
    pub fn named(name: impl Into<String>) -> Self {
        StoreOptions {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The segment name this process uses (with the rank suffix for private segments).
    pub fn effective_name(&self) -> Result<String> {
        let base = if self.name.is_empty() {
            default_store_name()
        } else {
            self.name.clone()
        };
        let name = if self.private {
            let rank = job_rank().unwrap_or_else(|| std::process::id().to_string());
            format!("{base}.{rank}")
        } else {
            base
        };
        ckptfs_settings::check_store_name(&name).map_err(StoreError::Invalid)?;
        Ok(name)
    }
}

impl From<ckptfs_settings::StoreSettings> for StoreOptions {
    fn from(s: ckptfs_settings::StoreSettings) -> StoreOptions {
        StoreOptions {
            name: s.name,
            mem_size: s.mem_size,
            chunk_size: s.chunk_size,
            max_files: s.max_files,
            spill_dir: s.spill_dir,
            spill_size: s.spill_size,
            private: s.private,
            allow_foreign_owner: s.allow_foreign_owner,
        }
    }
}

/// File or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
}

/// Whether a file's content is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteState {
    /// Its last writer closed it normally.
    Complete,
    /// A live process has it open for writing.
    Writing,
    /// A writer died with it open: data up to its last completed write is readable.
    Incomplete,
    /// Its writers closed it, but a write to it failed (ENOSPC, an I/O error): its
    /// content is not what was meant to be written. Never drained or restored.
    Failed,
}

/// Attributes of a file or directory.
#[derive(Debug, Clone, Serialize)]
pub struct Stat {
    /// Inode number (file id + 1; the root is 1).
    pub ino: u64,
    /// Slot generation, bumped each time an inode number is reused.
    pub generation: u32,
    /// File or directory.
    pub kind: FileKind,
    /// Permission bits.
    pub mode: u32,
    /// Size in bytes (directories: 0).
    pub size: u64,
    /// Chunks allocated.
    pub chunks: u32,
    /// Chunks of those in the spill file.
    pub spill_chunks: u32,
    /// Bytes allocated (chunks x chunk size).
    pub allocated: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: u64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: u64,
    /// Access time, ns since the epoch (only set by [`Store::set_times`]).
    pub atime_ns: u64,
    /// Owner user id (the creator's effective uid, or [`Store::chown`]).
    pub uid: u32,
    /// Owner group id.
    pub gid: u32,
    /// Write state (directories: always complete).
    pub state: WriteState,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, Serialize)]
pub struct DirEntry {
    /// Name within the directory.
    pub name: String,
    /// Inode number.
    pub ino: u64,
    /// File or directory.
    pub kind: FileKind,
}

/// Settings and usage of a store (`ckptfs status`).
#[derive(Debug, Clone, Serialize)]
pub struct StoreInfo {
    /// Store name.
    pub name: String,
    /// Segment file.
    pub segment: PathBuf,
    /// Format version.
    pub format_version: u32,
    /// Chunk size in bytes.
    pub chunk_size: u64,
    /// Memory data region size.
    pub mem_size: u64,
    /// Memory chunks.
    pub mem_chunks: u32,
    /// Free memory chunks.
    pub mem_free_chunks: u32,
    /// Spill file, if any.
    pub spill_path: Option<PathBuf>,
    /// Spill file size.
    pub spill_size: u64,
    /// Spill chunks.
    pub spill_chunks: u32,
    /// Free spill chunks.
    pub spill_free_chunks: u32,
    /// Maximum files and directories.
    pub max_files: u32,
    /// Files.
    pub files: u32,
    /// Directories (root included).
    pub dirs: u32,
    /// Files being written by a live process.
    pub writing: u32,
    /// Files whose writer died.
    pub incomplete: u32,
    /// Files closed after a failed write (ENOSPC, I/O error).
    pub failed: u32,
    /// Unlinked files still held open.
    pub orphans: u32,
    /// "clean" or "dirty" (a process died holding a lock or a file open for writing).
    pub state: &'static str,
    /// Dead-holder lock recoveries so far.
    pub recoveries: u64,
    /// Creation time, ns since the epoch.
    pub created_ns: u64,
    /// Time spent creating and pre-faulting the segment, in seconds.
    pub create_seconds: f64,
    /// Uid of the creator.
    pub creator_uid: u32,
}

/// Where a chunk's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "in", content = "offset")]
pub enum ChunkLocation {
    /// In the memory data region, at this byte offset from its base.
    Memory(u64),
    /// In the spill file, at this byte offset.
    Spill(u64),
}

/// One chunk of a file, for copying it out without the writer (CRUISE section 4.6).
#[derive(Debug, Clone, Serialize)]
pub struct ChunkInfo {
    /// Logical chunk index in the file (byte offset = index x chunk size).
    pub logical: u32,
    /// Physical chunk id.
    pub chunk_id: u32,
    /// Where its bytes are.
    pub location: ChunkLocation,
    /// Bytes of file data in the chunk (up to the file size; bytes past the written
    /// high-water mark read as zeros).
    pub len: u64,
    /// Bytes written from the chunk start, covered by `crc`. Bytes of `len` beyond it
    /// read as zeros. (Transiently larger than `len` while a write is in progress.)
    pub written: u64,
    /// CRC32C of the `written` bytes; None while stale (being overwritten).
    pub crc: Option<u32>,
}

/// The memory data region as mapped in this process.
#[derive(Debug, Clone, Copy)]
pub struct DataRegion {
    /// Address of the first chunk in this process.
    pub base: *const u8,
    /// Size in bytes.
    pub len: u64,
    /// Chunk size.
    pub chunk_size: u64,
}

/// Flags for [`Store::open`], mirroring open(2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFlags {
    /// Open for reading.
    pub read: bool,
    /// Open for writing.
    pub write: bool,
    /// Create if missing (O_CREAT).
    pub create: bool,
    /// With create: fail if it exists (O_EXCL).
    pub excl: bool,
    /// Truncate to zero (O_TRUNC, with write).
    pub trunc: bool,
    /// Every write appends (O_APPEND).
    pub append: bool,
    /// Must be a directory (O_DIRECTORY).
    pub directory: bool,
}

impl OpenFlags {
    /// Read only.
    pub const READ: OpenFlags = OpenFlags {
        read: true,
        write: false,
        create: false,
        excl: false,
        trunc: false,
        append: false,
        directory: false,
    };
    /// Create or truncate for writing, like `creat(2)` / `fopen("w")`.
    pub const CREATE: OpenFlags = OpenFlags {
        read: false,
        write: true,
        create: true,
        excl: false,
        trunc: true,
        append: false,
        directory: false,
    };

    /// From POSIX `open(2)` flags. Unknown access modes are EINVAL.
    pub fn from_posix(flags: i32) -> Result<OpenFlags> {
        let (read, write) = match flags & libc::O_ACCMODE {
            libc::O_RDONLY => (true, false),
            libc::O_WRONLY => (false, true),
            libc::O_RDWR => (true, true),
            _ => return Err(StoreError::Invalid("bad access mode".into())),
        };
        Ok(OpenFlags {
            read,
            write,
            create: flags & libc::O_CREAT != 0,
            excl: flags & libc::O_EXCL != 0,
            trunc: flags & libc::O_TRUNC != 0,
            append: flags & libc::O_APPEND != 0,
            directory: flags & libc::O_DIRECTORY != 0,
        })
    }
}

/// Name of the system directory in the root of every store.
pub const SYSTEM_DIR_NAME: &str = ".ckptfs";

/// The system directory: ckptfs's own files (partner copies of other nodes' files,
/// records of which levels hold each file). Left out of [`Store::read_dir`] of `/` and of
/// [`Store::list_all`], so applications, the shim, FUSE and the drain agent do not see
/// it; it stays reachable by its path.
pub const SYSTEM_DIR: &str = "/.ckptfs";

/// Whether a store path is [`SYSTEM_DIR`] or below it (after `.`/`..` resolution).
pub fn is_system_path(path: &str) -> bool {
    match components(path) {
        Ok(c) => c.first() == Some(&SYSTEM_DIR_NAME),
        Err(_) => false,
    }
}

/// A node store attached to this process. Cheap to clone; all clones share one mapping.
#[derive(Clone)]
pub struct Store {
    pub(crate) seg: Arc<Segment>,
}

/// Split a store path into components, resolving `.` and `..` lexically (the store has
/// no symbolic links). Relative paths are taken from the root.
pub(crate) fn components(path: &str) -> Result<Vec<&str>> {
    if path.len() > PATH_MAX {
        return Err(StoreError::NameTooLong(format!("{}...", &path[..64])));
    }
    if path.contains('\0') {
        return Err(StoreError::Invalid("path contains a NUL byte".into()));
    }
    ckptfs_settings::path::components_checked(path, NAME_MAX)
        .map_err(|c| StoreError::NameTooLong(c.to_string()))
}

pub(crate) fn name_hash(parent: u32, name: &[u8]) -> u32 {
    // FNV-1a: names are short and this runs under the namespace lock.
    let mut h: u32 = 0x811c_9dc5;
    for b in parent.to_le_bytes().iter().chain(name) {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Namespace lock held: proof for functions that need it.
pub(crate) struct Ns<'a> {
    _g: Guard<'a>,
}

impl Store {
    /// Attach to the store, creating it if it does not exist.
    pub fn open_or_create(opts: &StoreOptions) -> Result<Store> {
        Self::open_inner(opts, true, false)
    }

    /// Create a new store; fails with `Exists` if one of that name exists.
    pub fn create(opts: &StoreOptions) -> Result<Store> {
        Self::open_inner(opts, true, true)
    }

    /// Attach to an existing store; fails with `NoStore` if there is none.
    pub fn attach(opts: &StoreOptions) -> Result<Store> {
        Self::open_inner(opts, false, false)
    }

    /// Remove the segment (and its spill file). Processes still attached keep their
    /// mapping until they exit; the name is free for a new store at once.
    pub fn destroy(name: &str) -> Result<()> {
        ckptfs_settings::check_store_name(name).map_err(StoreError::Invalid)?;
        let path = segment_path(name);
        // Only a segment the caller owns (mode 0600) is trusted to name its spill file.
        let seg = Segment::attach(name, &path, false);
        let spill = seg.as_ref().ok().and_then(|s| s.layout.spill_path());
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NoStore(name.into()))
            }
            Err(e) => return Err(StoreError::io(format!("remove {}", path.display()), e)),
        }
        if let Some(sp) = spill {
            crate::trust::remove_own_spill(&sp, name);
        }
        Ok(())
    }

    fn open_inner(opts: &StoreOptions, create: bool, exclusive: bool) -> Result<Store> {
        let name = opts.effective_name()?;
        let path = segment_path(&name);
        for _ in 0..5 {
            match Segment::attach(&name, &path, opts.allow_foreign_owner) {
                Ok(seg) => {
                    if exclusive {
                        return Err(StoreError::Exists(format!("store {name} ({})", path.display())));
                    }
                    let store = Store { seg: Arc::new(seg) };
                    store.check_settings(opts)?;
                    store.recover_dead_openers();
                    return Ok(store);
                }
                Err(StoreError::NoStore(_)) if create => {}
                Err(e) => return Err(e),
            }
            let cs = opts.chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE);
            if !cs.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&cs) {
                return Err(StoreError::Invalid(format!(
                    "chunk size {cs}: must be a power of two from 64 KiB to 64 MiB"
                )));
            }
            let shift = cs.trailing_zeros();
            let mem = opts.mem_size.unwrap_or(DEFAULT_MEM_SIZE);
            let mem_chunks = mem >> shift;
            if mem_chunks == 0 || mem_chunks > u32::MAX as u64 / 2 {
                return Err(StoreError::Invalid(format!(
                    "memory size {mem}: must hold at least one chunk of {cs} bytes"
                )));
            }
            let max_files = opts.max_files.unwrap_or(DEFAULT_MAX_FILES);
            if !(2..=1 << 22).contains(&max_files) {
                return Err(StoreError::Invalid(format!(
                    "max files {max_files}: must be 2 to 4194304"
                )));
            }
            let (spill_path, spill_chunks) = match (&opts.spill_dir, opts.spill_size) {
                (Some(dir), Some(sz)) if sz > 0 => {
                    let n = sz >> shift;
                    if n == 0 || n > u32::MAX as u64 / 2 {
                        return Err(StoreError::Invalid(format!(
                            "spill size {sz}: must hold at least one chunk"
                        )));
                    }
                    if !dir.is_dir() {
                        return Err(StoreError::NotFound(format!("spill directory {}", dir.display())));
                    }
                    let dir = dir
                        .canonicalize()
                        .map_err(|e| StoreError::io(dir.display().to_string(), e))?;
                    (Some(dir.join(crate::trust::spill_file_name(&name))), n as u32)
                }
                (Some(_), _) => {
                    return Err(StoreError::Invalid("a spill directory needs a spill size".into()))
                }
                (None, Some(sz)) if sz > 0 => {
                    return Err(StoreError::Invalid("a spill size needs a spill directory".into()))
                }
                _ => (None, 0),
            };
            let params = CreateParams {
                name: &name,
                path: &path,
                chunk_shift: shift,
                mem_chunks: mem_chunks as u32,
                spill_chunks,
                max_files,
                spill_path: spill_path.as_deref(),
            };
            if let Some(seg) = Segment::create(&params)? {
                tracing::info!(
                    store = %name,
                    seconds = seg.sb().create_time_ns as f64 / 1e9,
                    "created store"
                );
                return Ok(Store { seg: Arc::new(seg) });
            }
            // Lost the creation race: loop and attach the winner's segment.
        }
        Err(StoreError::Busy(format!(
            "store {name} is being created and destroyed repeatedly"
        )))
    }

    fn check_settings(&self, opts: &StoreOptions) -> Result<()> {
        let l = &self.seg.layout;
        let conflict = |setting, existing: String, requested: String| StoreError::ConflictingSettings {
            name: self.seg.name.clone(),
            setting,
            existing,
            requested,
        };
        if let Some(cs) = opts.chunk_size {
            if cs != l.chunk_size() {
                return Err(conflict("chunk size", l.chunk_size().to_string(), cs.to_string()));
            }
        }
        if let Some(m) = opts.mem_size {
            if m >> l.chunk_shift != l.mem_chunks as u64 {
                return Err(conflict("memory size", l.data_size().to_string(), m.to_string()));
            }
        }
        if let Some(n) = opts.max_files {
            if n != l.max_files {
                return Err(conflict("max files", l.max_files.to_string(), n.to_string()));
            }
        }
        if let Some(s) = opts.spill_size {
            if s >> l.chunk_shift != l.spill_chunks as u64 {
                let existing = (l.spill_chunks as u64) << l.chunk_shift;
                return Err(conflict("spill size", existing.to_string(), s.to_string()));
            }
        }
        if let Some(d) = &opts.spill_dir {
            let existing = l.spill_path();
            let want = d.canonicalize().unwrap_or(d.clone());
            if existing.as_ref().and_then(|p| p.parent()) != Some(want.as_path()) {
                return Err(conflict(
                    "spill directory",
                    existing
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| "none".into()),
                    d.display().to_string(),
                ));
            }
        }
        Ok(())
    }

    /// Store name.
    pub fn name(&self) -> &str {
        &self.seg.name
    }

    /// Chunk size in bytes.
    pub fn chunk_size(&self) -> u64 {
        self.seg.layout.chunk_size()
    }

    // ---------------------------------------------------------------- locking

    pub(crate) fn mark_dirty(&self) {
        self.seg.sb().state.store(sbstate::DIRTY, Release);
    }

    pub(crate) fn ns(&self) -> Ns<'_> {
        let (g, how) = self.seg.sb().ns_lock.lock_named("namespace", Some(self.seg.ino));
        let ns = Ns { _g: g };
        if how == Acquired::OwnerDied {
            tracing::warn!(store = %self.seg.name, "a process died holding the namespace lock; rebuilding");
            self.seg.sb().recoveries.fetch_add(1, Relaxed);
            self.mark_dirty();
            self.rebuild_namespace(&ns);
        }
        ns
    }

    pub(crate) fn alloc_lock(&self) -> Guard<'_> {
        let (g, how) = self
            .seg
            .sb()
            .alloc_lock
            .lock_named("allocation", Some(self.seg.ino));
        if how == Acquired::OwnerDied {
            tracing::warn!(store = %self.seg.name, "a process died holding the allocation lock; rebuilding free stacks");
            self.seg.sb().recoveries.fetch_add(1, Relaxed);
            self.mark_dirty();
            self.rebuild_free_stacks();
        }
        g
    }

    pub(crate) fn file_lock(&self, fid: u32) -> Guard<'_> {
        let ino = self.seg.inode(fid);
        let (g, how) = ino.lock.lock_named("file", Some(self.seg.ino));
        if how == Acquired::OwnerDied {
            tracing::warn!(store = %self.seg.name, fid, "a process died holding a file lock");
            self.seg.sb().recoveries.fetch_add(1, Relaxed);
            self.mark_dirty();
            // It may have died between changing a chunk's owner and the chunk count:
            // recount from the owners (only this file's lock holder changes them), or a
            // later unlink trusting a count of 0 would leak the chunk.
            let fid1 = fid + 1;
            let n = (0..self.seg.nchunks())
                .filter(|&c| self.seg.chunk(c).owner.load(Acquire) == fid1)
                .count();
            ino.nchunks.store(n as u32, Relaxed);
            // It may have died between changing the size or count and its checksum.
            seal_data(&self.seg, fid);
            // Its chunk list may have changed under every cached copy.
            ino.cgen.fetch_add(1, Release);
        }
        g
    }

    // ---------------------------------------------------------------- chunks

    /// Pop a free chunk (memory first, then spill) and give it to `fid` at `logical`.
    pub(crate) fn alloc_chunk(&self, fid: u32, logical: u32) -> Result<u32> {
        let seg = &*self.seg;
        let _g = self.alloc_lock();
        let sb = seg.sb();
        let (top, stack): (&std::sync::atomic::AtomicU32, &dyn Fn(u32) -> u32) =
            if sb.mem_top.load(Relaxed) > 0 {
                (&sb.mem_top, &|i| seg.mem_stack(i).load(Relaxed))
            } else if sb.spill_top.load(Relaxed) > 0 {
                (&sb.spill_top, &|i| seg.spill_stack(i).load(Relaxed))
            } else {
                return Err(StoreError::NoSpace);
            };
        let t = top.load(Relaxed);
        let cap = if std::ptr::eq(top, &sb.mem_top) {
            seg.layout.mem_chunks
        } else {
            seg.layout.spill_chunks
        };
        let c = if t <= cap { stack(t - 1) } else { u32::MAX };
        if c >= seg.nchunks() || seg.chunk(c).owner.load(Acquire) != 0 {
            // A damaged stack top or entry (the stacks are derived: rebuild them).
            tracing::warn!(store = %seg.name, top = t, id = c, "free chunk stack damaged; rebuilding it");
            self.mark_dirty();
            self.rebuild_free_stacks();
            drop(_g);
            return self.alloc_chunk(fid, logical);
        }
        let e = seg.chunk(c);
        e.logical.store(logical, Relaxed);
        e.sum.store(0, Relaxed);
        e.meta
            .store(crate::integrity::chunk_meta(c, fid + 1, logical), Relaxed);
        crate::fault::crash_point("alloc-before-owner");
        // Commit point: from here the chunk belongs to the file. A crash before the pop
        // below leaves it also on the stack; recovery rebuilds stacks from owners.
        e.owner.store(fid + 1, Release);
        crate::fault::crash_point("alloc-after-owner");
        top.store(t - 1, Release);
        Ok(c)
    }

    /// Release every chunk of `fid` whose logical index is `>= from`. Returns how many.
    /// Caller holds the file lock.
    pub(crate) fn free_chunks_from(&self, fid: u32, from: u32) -> u32 {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        if ino.nchunks.load(Relaxed) == 0 {
            return 0;
        }
        let _g = self.alloc_lock();
        let mut n = 0;
        for c in 0..seg.nchunks() {
            let e = seg.chunk(c);
            if e.owner.load(Relaxed) == fid + 1 && e.logical.load(Relaxed) >= from {
                e.owner.store(0, Release);
                // A free chunk keeps no proof of ownership (see fsck's reclaim).
                e.meta.store(0, Relaxed);
                crate::fault::crash_point("free-after-owner");
                self.push_free(c);
                n += 1;
            }
        }
        ino.nchunks.fetch_sub(n.min(ino.nchunks.load(Relaxed)), Relaxed);
        seal_data(seg, fid);
        ino.cgen.fetch_add(1, Release);
        n
    }

    fn push_free(&self, c: u32) {
        let seg = &*self.seg;
        let sb = seg.sb();
        let (top, cap) = if seg.is_mem(c) {
            (&sb.mem_top, seg.layout.mem_chunks)
        } else {
            (&sb.spill_top, seg.layout.spill_chunks)
        };
        let t = top.load(Relaxed);
        if t >= cap {
            // A damaged top: the stacks are derived from the owners, rebuild them.
            tracing::warn!(store = %seg.name, top = t, "free chunk stack top damaged; rebuilding it");
            self.mark_dirty();
            self.rebuild_free_stacks();
            return;
        }
        if seg.is_mem(c) {
            seg.mem_stack(t).store(c, Relaxed);
        } else {
            seg.spill_stack(t).store(c, Relaxed);
        }
        top.store(t + 1, Release);
    }

    /// Rebuild both free stacks from chunk ownership (the source of truth). Caller holds
    /// the allocation lock.
    pub(crate) fn rebuild_free_stacks(&self) {
        let seg = &*self.seg;
        let sb = seg.sb();
        let (mut m, mut s) = (0u32, 0u32);
        // Push high ids first so that low ids are handed out first again.
        for c in (0..seg.nchunks()).rev() {
            if seg.chunk(c).owner.load(Acquire) == 0 {
                if seg.is_mem(c) {
                    seg.mem_stack(m).store(c, Relaxed);
                    m += 1;
                } else {
                    seg.spill_stack(s).store(c, Relaxed);
                    s += 1;
                }
            }
        }
        sb.mem_top.store(m, Release);
        sb.spill_top.store(s, Release);
    }

    // ---------------------------------------------------------------- public file API

    /// Open (and with `flags.create` create) a file, or open a directory for reading.
    /// `mode` is used for new files as given (apply the umask before calling).
    pub fn open(&self, path: &str, flags: OpenFlags, mode: u32) -> Result<FileHandle> {
        let comps = components(path)?;
        let ns = self.ns();
        let seg = &*self.seg;
        let mut created = false;
        let fid = if comps.is_empty() {
            ROOT
        } else {
            let (parent, name) = self.resolve_parent(&ns, &comps, path)?;
            match self.lookup_child(&ns, parent, name.as_bytes()) {
                Some(fid) => {
                    if flags.create && flags.excl {
                        return Err(StoreError::Exists(path.into()));
                    }
                    fid
                }
                None if flags.create && !flags.directory => {
                    created = true;
                    self.alloc_inode(&ns, kind::FILE, parent, name.as_bytes(), mode, flags.write)?
                }
                None => return Err(StoreError::NotFound(path.into())),
            }
        };
        if !created {
            self.check_inode(fid, path)?;
        }
        let ino = seg.inode(fid);
        let is_dir = ino.kind.load(Relaxed) == kind::DIR;
        if is_dir && (flags.write || flags.trunc) {
            return Err(StoreError::IsDir(path.into()));
        }
        if flags.directory && !is_dir {
            return Err(StoreError::NotDir(path.into()));
        }
        let who = process::me();
        let g = self.file_lock(fid);
        if !created && ino.wstate.load(Relaxed) == wstate::WRITING {
            // A writer that died since anyone looked must not count as writing: its
            // file is incomplete and, below, read with checksum verification.
            self.reap_leases(fid);
        }
        let new_session = flags.write && !self.has_writer(fid);
        self.add_lease(fid, who, flags.write)?;
        if flags.write {
            if new_session {
                // A new writing session: an earlier session's dead writer is history (its
                // file was incomplete until now; what this session writes decides).
                ino.flags.fetch_and(!iflag::DEAD_WRITER, Release);
            }
            ino.wstate.store(wstate::WRITING, Release);
            if flags.trunc {
                // Emptied: an earlier failed write no longer matters.
                ino.flags.fetch_and(!iflag::FAILED, Release);
                if ino.size.load(Relaxed) > 0 {
                    self.mark_wrote(fid, who);
                    // Size first, then the chunks: a truncation killed half-way leaves an
                    // empty file with chunks past its end (trimmed when its death is
                    // noticed), never the old size over freed (zero) chunks.
                    ino.size.store(0, Release);
                    seal_data(seg, fid);
                    crate::fault::crash_point("otrunc-after-size");
                    self.free_chunks_from(fid, 0);
                    ino.mtime_ns.store(now(), Relaxed);
                }
            }
        }
        // Every handle that can read verifies each chunk's checksum once before serving
        // it, except chunks the handle wrote itself (see `FileHandle::verify_chunk`).
        let verify = flags.read;
        drop(g);
        drop(ns);
        Ok(FileHandle::new(
            self.clone(),
            fid,
            flags,
            is_dir,
            who,
            verify,
            path,
        ))
    }

    /// Attributes of `path`.
    pub fn stat(&self, path: &str) -> Result<Stat> {
        let comps = components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.check_inode(fid, path)?;
        Ok(self.stat_fid(fid))
    }

    /// Attributes by inode number.
    pub fn stat_ino(&self, ino: u64) -> Result<Stat> {
        let fid = self.fid_of_ino(ino)?;
        {
            let _ns = self.ns();
            self.check_inode(fid, "")?;
        }
        Ok(self.stat_fid(fid))
    }

    /// Look a name up in a directory given by inode number (FUSE style).
    pub fn lookup(&self, parent_ino: u64, name: &str) -> Result<Stat> {
        let pfid = self.fid_of_ino(parent_ino)?;
        if name.len() > NAME_MAX {
            return Err(StoreError::NameTooLong(name.into()));
        }
        let ns = self.ns();
        if self.seg.inode(pfid).kind.load(Relaxed) != kind::DIR {
            return Err(StoreError::NotDir(name.into()));
        }
        let fid = match name {
            "." => pfid,
            ".." => {
                let p = self.seg.inode(pfid).parent.load(Relaxed);
                if p == NONE {
                    ROOT
                } else if !fid_ok(&self.seg, p) {
                    return Err(self.damaged(pfid, name, "parent link out of range"));
                } else {
                    p
                }
            }
            _ => self
                .lookup_child(&ns, pfid, name.as_bytes())
                .ok_or_else(|| StoreError::NotFound(name.into()))?,
        };
        self.check_inode(fid, name)?;
        drop(ns);
        Ok(self.stat_fid(fid))
    }

    pub(crate) fn fid_of_ino(&self, ino: u64) -> Result<u32> {
        if ino == 0 || ino > self.seg.layout.max_files as u64 {
            return Err(StoreError::NotFound(format!("inode {ino}")));
        }
        let fid = (ino - 1) as u32;
        if self.seg.inode(fid).kind.load(Acquire) == kind::FREE {
            return Err(StoreError::NotFound(format!("inode {ino}")));
        }
        Ok(fid)
    }

    pub(crate) fn stat_fid(&self, fid: u32) -> Stat {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        let k = if ino.kind.load(Acquire) == kind::DIR {
            FileKind::Dir
        } else {
            FileKind::File
        };
        let mut state = match ino.wstate.load(Acquire) {
            wstate::WRITING => WriteState::Writing,
            wstate::INCOMPLETE => WriteState::Incomplete,
            wstate::FAILED => WriteState::Failed,
            _ => WriteState::Complete,
        };
        if state == WriteState::Writing {
            let _g = self.file_lock(fid);
            self.reap_leases(fid);
            if ino.wstate.load(Relaxed) == wstate::INCOMPLETE {
                state = WriteState::Incomplete;
            }
        }
        let chunks = ino.nchunks.load(Relaxed);
        let spill_chunks = if chunks > 0 && seg.layout.spill_chunks > 0 {
            (seg.layout.mem_chunks..seg.nchunks())
                .filter(|&c| seg.chunk(c).owner.load(Relaxed) == fid + 1)
                .count() as u32
        } else {
            0
        };
        Stat {
            ino: fid as u64 + 1,
            generation: ino.igen.load(Relaxed),
            kind: k,
            mode: ino.mode.load(Relaxed),
            size: if k == FileKind::Dir {
                0
            } else {
                ino.size.load(Acquire)
            },
            chunks,
            spill_chunks,
            allocated: (chunks as u64) << seg.layout.chunk_shift,
            mtime_ns: ino.mtime_ns.load(Relaxed),
            ctime_ns: ino.ctime_ns.load(Relaxed),
            atime_ns: ino.atime_ns.load(Relaxed),
            uid: ino.uid.load(Relaxed),
            gid: ino.gid.load(Relaxed),
            state,
        }
    }

    /// Entries of a directory (without `.` and `..`), in no particular order. The
    /// system directory [`SYSTEM_DIR`] is left out of the root's listing (see
    /// [`Store::read_dir_all`]).
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let comps = components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.read_dir_fid(&ns, fid, path, false)
    }

    /// Like [`Store::read_dir`], but the root's listing includes [`SYSTEM_DIR`].
    pub fn read_dir_all(&self, path: &str) -> Result<Vec<DirEntry>> {
        let comps = components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.read_dir_fid(&ns, fid, path, true)
    }

    /// Entries of a directory given by inode number ([`SYSTEM_DIR`] left out of the root).
    pub fn read_dir_ino(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let fid = self.fid_of_ino(ino)?;
        let ns = self.ns();
        self.read_dir_fid(&ns, fid, &format!("inode {ino}"), false)
    }

    fn read_dir_fid(&self, _ns: &Ns, fid: u32, path: &str, system: bool) -> Result<Vec<DirEntry>> {
        let seg = &*self.seg;
        if seg.inode(fid).kind.load(Relaxed) != kind::DIR {
            return Err(StoreError::NotDir(path.into()));
        }
        let mut out = Vec::new();
        let mut c = seg.inode(fid).first_child.load(Relaxed);
        while c != NONE {
            // A damaged link (out of range, or a cycle) ends the listing with EIO.
            if !fid_ok(seg, c) || out.len() >= seg.layout.max_files as usize {
                return Err(self.damaged(fid, path, "directory child list is damaged"));
            }
            let ino = seg.inode(c);
            // SAFETY: namespace lock held.
            if !system && fid == ROOT && unsafe { seg.name_of(c) } == SYSTEM_DIR_NAME.as_bytes() {
                c = ino.next_sib.load(Relaxed);
                continue;
            }
            out.push(DirEntry {
                // SAFETY: namespace lock held.
                name: String::from_utf8_lossy(unsafe { seg.name_of(c) }).into_owned(),
                ino: c as u64 + 1,
                kind: if ino.kind.load(Relaxed) == kind::DIR {
                    FileKind::Dir
                } else {
                    FileKind::File
                },
            });
            c = ino.next_sib.load(Relaxed);
        }
        Ok(out)
    }

    /// Every file and directory with its full path, sorted by path, except
    /// [`SYSTEM_DIR`] and what it holds (see [`Store::list_all_system`]).
    pub fn list_all(&self) -> Vec<(String, Stat)> {
        let mut v = self.list_everything();
        v.retain(|(p, _)| !is_system_path(p));
        v
    }

    /// Every file and directory under [`SYSTEM_DIR`] (itself included), sorted by path.
    pub fn list_all_system(&self) -> Vec<(String, Stat)> {
        let mut v = self.list_everything();
        v.retain(|(p, _)| is_system_path(p));
        v
    }

    fn list_everything(&self) -> Vec<(String, Stat)> {
        let seg = &*self.seg;
        let fids: Vec<u32> = {
            let _ns = self.ns();
            (1..seg.layout.max_files)
                .filter(|&f| {
                    let i = seg.inode(f);
                    i.kind.load(Relaxed) != kind::FREE && i.flags.load(Relaxed) & iflag::ORPHAN == 0
                })
                .collect()
        };
        let mut out: Vec<(String, Stat)> = fids
            .into_iter()
            .filter_map(|f| {
                let p = self.path_of_fid(f);
                (!p.is_empty()).then(|| (p, self.stat_fid(f)))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Full store path of an inode (`/` for the root).
    pub fn path_of(&self, ino: u64) -> Result<String> {
        let fid = self.fid_of_ino(ino)?;
        Ok(self.path_of_fid(fid))
    }

    pub(crate) fn path_of_fid(&self, fid: u32) -> String {
        let ns = self.ns();
        self.path_of_fid_locked(&ns, fid)
    }

    pub(crate) fn path_of_fid_locked(&self, _ns: &Ns, fid: u32) -> String {
        let seg = &*self.seg;
        let mut parts = Vec::new();
        let mut cur = fid;
        let mut guard = 0;
        while cur != ROOT && fid_ok(seg, cur) && guard < 4096 {
            // SAFETY: namespace lock held.
            parts.push(String::from_utf8_lossy(unsafe { seg.name_of(cur) }).into_owned());
            cur = seg.inode(cur).parent.load(Relaxed);
            guard += 1;
        }
        if cur != ROOT {
            return String::new(); // orphan (or a damaged parent link)
        }
        parts.reverse();
        format!("/{}", parts.join("/"))
    }

    /// Create a directory.
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<Stat> {
        let comps = components(path)?;
        let ns = self.ns();
        let (parent, name) = self.resolve_parent(&ns, &comps, path).map_err(|e| match e {
            StoreError::Busy(_) => StoreError::Exists(path.into()),
            e => e,
        })?;
        if self.lookup_child(&ns, parent, name.as_bytes()).is_some() {
            return Err(StoreError::Exists(path.into()));
        }
        let fid = self.alloc_inode(&ns, kind::DIR, parent, name.as_bytes(), mode, false)?;
        drop(ns);
        Ok(self.stat_fid(fid))
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<()> {
        let comps = components(path)?;
        let ns = self.ns();
        let (_, fid) = self.resolve_entry(&ns, &comps, path)?;
        let ino = self.seg.inode(fid);
        if ino.kind.load(Relaxed) != kind::DIR {
            return Err(StoreError::NotDir(path.into()));
        }
        if ino.first_child.load(Relaxed) != NONE {
            return Err(StoreError::NotEmpty(path.into()));
        }
        self.detach_and_release(&ns, fid);
        Ok(())
    }

    /// Remove a file. Processes holding it open keep reading and writing it; its chunks
    /// are freed at the last close.
    pub fn unlink(&self, path: &str) -> Result<()> {
        let comps = components(path)?;
        let ns = self.ns();
        let (_, fid) = self.resolve_entry(&ns, &comps, path)?;
        if self.seg.inode(fid).kind.load(Relaxed) == kind::DIR {
            return Err(StoreError::IsDir(path.into()));
        }
        self.detach_and_release(&ns, fid);
        Ok(())
    }

    /// Rename atomically, replacing the target (a file, or an empty directory when the
    /// source is a directory). Crash-atomic: an interrupted rename is completed by the
    /// next process that takes the namespace lock.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let seg = &*self.seg;
        let fc = components(from)?;
        let tc = components(to)?;
        let ns = self.ns();
        let (sp, src) = self.resolve_entry(&ns, &fc, from)?;
        let (dp, dname) = self.resolve_parent(&ns, &tc, to)?;
        let src_dir = seg.inode(src).kind.load(Relaxed) == kind::DIR;
        if src_dir {
            // A directory cannot move below itself.
            let mut cur = dp;
            let mut steps = 0;
            while cur != ROOT && cur != NONE {
                if cur == src {
                    return Err(StoreError::Invalid(format!("cannot move {from} into itself")));
                }
                steps += 1;
                if !fid_ok(seg, cur) || steps > seg.layout.max_files {
                    return Err(self.damaged(dp, to, "parent links are damaged"));
                }
                cur = seg.inode(cur).parent.load(Relaxed);
            }
        }
        let victim = self.lookup_child(&ns, dp, dname.as_bytes());
        if victim == Some(src) {
            return Ok(());
        }
        if let Some(v) = victim {
            let vdir = seg.inode(v).kind.load(Relaxed) == kind::DIR;
            match (src_dir, vdir) {
                (true, false) => return Err(StoreError::NotDir(to.into())),
                (false, true) => return Err(StoreError::IsDir(to.into())),
                (true, true) if seg.inode(v).first_child.load(Relaxed) != NONE => {
                    return Err(StoreError::NotEmpty(to.into()))
                }
                _ => {}
            }
        }
        // Write the intent, then apply it.
        let ri = &seg.sb().rename;
        ri.src.store(src, Relaxed);
        ri.dst_parent.store(dp, Relaxed);
        ri.victim.store(victim.unwrap_or(NONE), Relaxed);
        // SAFETY: namespace lock held.
        unsafe { seg.intent_name()[..dname.len()].copy_from_slice(dname.as_bytes()) };
        ri.name_len.store(dname.len() as u32, Relaxed);
        ri.active.store(1, Release);
        crate::fault::crash_point("rename-after-intent");
        if let Some(v) = victim {
            self.detach_and_release(&ns, v);
        }
        crate::fault::crash_point("rename-after-victim");
        self.hash_remove(&ns, src);
        self.unlink_child(&ns, src);
        seg.inode(sp).mtime_ns.store(now(), Relaxed);
        seg.inode(src).parent.store(dp, Relaxed);
        // SAFETY: namespace lock held.
        unsafe { seg.set_name(src, dname.as_bytes()) };
        seal_ns(seg, src);
        self.hash_insert(&ns, src);
        self.link_child(&ns, dp, src);
        seg.inode(src).ctime_ns.store(now(), Relaxed);
        seg.inode(dp).mtime_ns.store(now(), Relaxed);
        ri.active.store(0, Release);
        Ok(())
    }

    /// Set a file's size (grow with zeros, or shrink and free chunks).
    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        let mut f = self.open(
            path,
            OpenFlags {
                write: true,
                ..Default::default()
            },
            0,
        )?;
        f.set_len(len)?;
        f.close()
    }

    /// Change permission bits.
    pub fn chmod(&self, path: &str, mode: u32) -> Result<()> {
        let comps = components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.check_inode(fid, path)?;
        let ino = self.seg.inode(fid);
        ino.mode.store(mode & 0o7777, Relaxed);
        seal_ns(&self.seg, fid);
        ino.ctime_ns.store(now(), Relaxed);
        drop(ns);
        Ok(())
    }

    /// Set the modification time (ns since the epoch).
    pub fn set_mtime(&self, path: &str, mtime_ns: u64) -> Result<()> {
        let st = self.stat(path)?;
        self.seg
            .inode((st.ino - 1) as u32)
            .mtime_ns
            .store(mtime_ns, Relaxed);
        Ok(())
    }

    /// Settings and usage.
    pub fn info(&self) -> StoreInfo {
        let seg = &*self.seg;
        let l = &seg.layout;
        let sb = seg.sb();
        let (mut files, mut dirs, mut writing, mut incomplete, mut orphans) = (0, 0, 0, 0, 0);
        let mut failed = 0;
        for fid in 0..l.max_files {
            let ino = seg.inode(fid);
            match ino.kind.load(Acquire) {
                kind::DIR => dirs += 1,
                kind::FILE => {
                    if ino.flags.load(Relaxed) & iflag::ORPHAN != 0 {
                        orphans += 1;
                        continue;
                    }
                    files += 1;
                    match self.stat_fid(fid).state {
                        WriteState::Writing => writing += 1,
                        WriteState::Incomplete => incomplete += 1,
                        WriteState::Failed => failed += 1,
                        WriteState::Complete => {}
                    }
                }
                _ => {}
            }
        }
        StoreInfo {
            name: seg.name.clone(),
            segment: seg.path.clone(),
            format_version: FORMAT_VERSION,
            chunk_size: l.chunk_size(),
            mem_size: l.data_size(),
            mem_chunks: l.mem_chunks,
            mem_free_chunks: sb.mem_top.load(Relaxed),
            spill_path: l.spill_path(),
            spill_size: (l.spill_chunks as u64) << l.chunk_shift,
            spill_chunks: l.spill_chunks,
            spill_free_chunks: sb.spill_top.load(Relaxed),
            max_files: l.max_files,
            files,
            dirs,
            writing,
            incomplete,
            failed,
            orphans,
            state: if sb.state.load(Relaxed) == sbstate::CLEAN {
                "clean"
            } else {
                "dirty"
            },
            recoveries: sb.recoveries.load(Relaxed),
            created_ns: sb.created_ns,
            create_seconds: sb.create_time_ns as f64 / 1e9,
            creator_uid: sb.creator_uid,
        }
    }

    /// Path of the spill file, if the store has one.
    pub fn spill_path(&self) -> Option<PathBuf> {
        self.seg.layout.spill_path()
    }

    /// The memory data region as mapped in this process (CRUISE `get_data_region`).
    pub fn data_region(&self) -> DataRegion {
        DataRegion {
            base: self.seg.data_base(),
            len: self.seg.layout.data_size(),
            chunk_size: self.chunk_size(),
        }
    }

    /// The chunks of a file in logical order (CRUISE `get_chunk_meta_list`).
    pub fn chunk_list(&self, path: &str) -> Result<Vec<ChunkInfo>> {
        let st = self.stat(path)?;
        if st.kind == FileKind::Dir {
            return Err(StoreError::IsDir(path.into()));
        }
        Ok(self.chunk_list_fid((st.ino - 1) as u32))
    }

    pub(crate) fn chunk_list_fid(&self, fid: u32) -> Vec<ChunkInfo> {
        let seg = &*self.seg;
        let _g = self.file_lock(fid);
        let size = seg.inode(fid).size.load(Acquire);
        let cs = seg.layout.chunk_size();
        let mut out: Vec<ChunkInfo> = (0..seg.nchunks())
            .filter(|&c| seg.chunk(c).owner.load(Acquire) == fid + 1)
            .map(|c| {
                let e = seg.chunk(c);
                let logical = e.logical.load(Relaxed);
                let (hwm, crc, stale) = unpack_sum(e.sum.load(Acquire));
                let start = logical as u64 * cs;
                let len = size.saturating_sub(start).min(cs);
                ChunkInfo {
                    logical,
                    chunk_id: c,
                    location: if seg.is_mem(c) {
                        ChunkLocation::Memory(c as u64 * cs)
                    } else {
                        ChunkLocation::Spill(seg.spill_offset(c))
                    },
                    len,
                    written: hwm as u64,
                    crc: (!stale).then_some(crc),
                }
            })
            .collect();
        out.sort_by_key(|c| c.logical);
        out
    }
}
