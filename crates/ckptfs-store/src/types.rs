//! The store's public types: options, attributes, listings, chunk descriptions and open
//! flags.

use crate::error::{Result, StoreError};
use crate::layout::{NAME_MAX, TREE_PATH_MAX};
#[cfg(doc)]
use crate::store::Store;
use serde::Serialize;
use std::path::PathBuf;

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
    /// Directory of the segment file (`DIR/ckptfs.NAME`); `None` = `/dev/shm`. It must
    /// be a tmpfs; one mounted with `huge=` gives the data region huge pages
    /// ([`crate::hugepages`]).
    pub shm_dir: Option<PathBuf>,
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
    /// Bytes of free chunks whose page tables an attach builds in the background
    /// ([`Store::warm_in_background`]; `Some(u64::MAX)`: all); `None`: none.
    pub warm: Option<u64>,
}

/// Path of the segment file of store `name` in the default directory (`/dev/shm`).
pub fn segment_path(name: &str) -> PathBuf {
    segment_path_in(None, name)
}

/// Path of the segment file of store `name` in directory `dir` (`None`: `/dev/shm`).
pub fn segment_path_in(dir: Option<&std::path::Path>, name: &str) -> PathBuf {
    dir.unwrap_or(std::path::Path::new(ckptfs_settings::DEFAULT_SHM_DIR))
        .join(format!("ckptfs.{name}"))
}

/// Rank of this process in its parallel job, from the usual launcher variables.
/// (The list is [`ckptfs_settings::job::RANK_VARS`].)
pub fn job_rank() -> Option<String> {
    ckptfs_settings::job::rank(&|k| std::env::var(k).ok())
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

    /// The segment file these options name.
    pub fn segment_path(&self) -> Result<PathBuf> {
        Ok(segment_path_in(self.shm_dir.as_deref(), &self.effective_name()?))
    }
}

impl From<ckptfs_settings::StoreSettings> for StoreOptions {
    fn from(s: ckptfs_settings::StoreSettings) -> StoreOptions {
        StoreOptions {
            name: s.name,
            mem_size: s.mem_size,
            chunk_size: s.chunk_size,
            max_files: s.max_files,
            shm_dir: s.shm_dir,
            spill_dir: s.spill_dir,
            spill_size: s.spill_size,
            private: s.private,
            allow_foreign_owner: s.allow_foreign_owner,
            warm: s.warm,
        }
    }
}

/// File, directory or symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (its size is the target's length; [`Store::readlink`] reads it).
    Symlink,
    /// Named pipe (FIFO; [`Store::mknod`]).
    Fifo,
    /// Unix domain socket node.
    Socket,
    /// Character device node ([`Stat::rdev`] is its number).
    CharDevice,
    /// Block device node.
    BlockDevice,
}

impl FileKind {
    /// A FIFO, socket or device node: a name and attributes only, no data in the store.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileKind::Fifo | FileKind::Socket | FileKind::CharDevice | FileKind::BlockDevice
        )
    }

    /// The `S_IFMT` bits of `st_mode` for this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
        }
    }

    /// The kind whose `S_IFMT` bits `mode` has (None for unknown bits).
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::File,
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => return None,
        })
    }
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
    /// Bytes allocated (chunks x chunk size, plus a small file's run of 4 KiB blocks).
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
    /// Names of the file (hard links, its own name included; 0 once unlinked while
    /// held open). Directories: 0 (their count, 2 + subdirectories, is the caller's).
    pub nlink: u32,
    /// Device number of a device node (0 otherwise).
    pub rdev: u64,
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
    /// Whether the segment's directory gives it huge pages (`tmpfs` mounted with
    /// `huge=`), as [`crate::hugepages::for_dir`] finds it.
    pub huge_pages: crate::hugepages::HugePages,
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
    /// Memory chunks divided into 4 KiB blocks for small files (counted in use).
    pub small_chunks: u32,
    /// 4 KiB blocks of those holding small files' data.
    pub small_blocks_used: u64,
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
    /// Physical chunk id (for a small file: the chunk holding its run of blocks, which
    /// `location` gives exactly).
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

/// Split a store path into components, resolving `.` and `..` lexically (the store has
/// no symbolic links). Relative paths are taken from the root.
pub(crate) fn components(path: &str) -> Result<Vec<&str>> {
    if path.len() > TREE_PATH_MAX {
        return Err(StoreError::NameTooLong(format!("{}...", &path[..64])));
    }
    if path.contains('\0') {
        return Err(StoreError::Invalid("path contains a NUL byte".into()));
    }
    ckptfs_settings::path::components_checked(path, NAME_MAX)
        .map_err(|c| StoreError::NameTooLong(c.to_string()))
}
