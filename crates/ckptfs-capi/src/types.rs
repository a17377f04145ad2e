//! `#[repr(C)]` structures and constants shared with `include/ckptfs.h`. The header must
//! match these byte for byte; `tests/header.rs` compiles the header and compares sizes,
//! offsets and constant values.

use std::ffi::c_char;

/// `CKPTFS_MOUNT_ATTACH`: attach to an existing store only (ENOENT if there is none).
pub const MOUNT_ATTACH: u32 = 1;
/// `CKPTFS_MOUNT_EXCL`: create a new store (EEXIST if one of that name exists).
pub const MOUNT_EXCL: u32 = 2;
/// `CKPTFS_MOUNT_PRIVATE`: one segment per process (`NAME.RANK`).
pub const MOUNT_PRIVATE: u32 = 4;

/// `CKPTFS_KIND_FILE`.
pub const KIND_FILE: u32 = 1;
/// `CKPTFS_KIND_DIR`.
pub const KIND_DIR: u32 = 2;

/// `CKPTFS_STATE_COMPLETE`: the last writer closed the file.
pub const STATE_COMPLETE: u32 = 0;
/// `CKPTFS_STATE_WRITING`: a live process has it open for writing.
pub const STATE_WRITING: u32 = 1;
/// `CKPTFS_STATE_INCOMPLETE`: a writer died with it open.
pub const STATE_INCOMPLETE: u32 = 2;

/// `CKPTFS_CHUNK_MEMORY`: the chunk is in the data region, `offset` from its base.
pub const CHUNK_MEMORY: u32 = 0;
/// `CKPTFS_CHUNK_SPILL`: the chunk is in the spill file, at byte `offset`.
pub const CHUNK_SPILL: u32 = 1;

/// Most descriptors one process can hold open at once (EMFILE beyond).
pub const MAX_DESCRIPTORS: usize = 1 << 16;

/// `ckptfs_options`: how `ckptfs_mount` finds or creates its store. Zero/NULL fields take
/// the existing segment's setting, or the default when creating.
#[repr(C)]
#[derive(Debug)]
pub struct CkptfsOptions {
    /// Must be `sizeof(ckptfs_options)` (set by `CKPTFS_OPTIONS_INIT`).
    pub size: u32,
    /// `CKPTFS_MOUNT_*` bits.
    pub flags: u32,
    /// Store name; NULL or "" = `u<UID>`.
    pub store: *const c_char,
    /// Memory data region size in bytes.
    pub mem_size: u64,
    /// Chunk size in bytes (power of two, 64 KiB .. 64 MiB).
    pub chunk_size: u64,
    /// Directory of the spill file; NULL = no spill file.
    pub spill_dir: *const c_char,
    /// Spill file size in bytes.
    pub spill_size: u64,
    /// Maximum files and directories (root included).
    pub max_files: u32,
}

/// `struct ckptfs_stat`: attributes of a file or directory.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct CkptfsStat {
    /// Inode number (the mount's root is 1).
    pub ino: u64,
    /// Size in bytes (directories: 0).
    pub size: u64,
    /// Bytes allocated (chunks x chunk size).
    pub allocated: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: u64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: u64,
    /// File type and permission bits, as `st_mode` (S_IFREG or S_IFDIR | 0777 bits).
    pub mode: u32,
    /// `CKPTFS_KIND_*`.
    pub kind: u32,
    /// `CKPTFS_STATE_*`.
    pub state: u32,
    /// Chunks allocated.
    pub chunks: u32,
    /// Chunks of those in the spill file.
    pub spill_chunks: u32,
    /// Generation of the inode number (bumped when the number is reused).
    pub generation: u32,
}

/// `ckptfs_chunk_meta`: one chunk of a file (CRUISE `get_chunk_meta_list`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct CkptfsChunkMeta {
    /// Logical index: the chunk holds file bytes from `logical * chunk_size`.
    pub logical: u32,
    /// `CKPTFS_CHUNK_MEMORY` or `CKPTFS_CHUNK_SPILL`.
    pub location: u32,
    /// Byte offset from the data region base (memory) or in the spill file (spill).
    pub offset: u64,
    /// Bytes of file data in this chunk (up to the file size).
    pub length: u64,
    /// Bytes written from the chunk start, covered by `crc32c`; bytes of `length` past
    /// it read as zeros.
    pub written: u64,
    /// CRC32C (Castagnoli) of the first `written` bytes.
    pub crc32c: u32,
    /// 1 if `crc32c` is current, 0 while the chunk is being overwritten.
    pub crc_valid: u32,
    /// Physical chunk number in the store.
    pub chunk_id: u32,
}

/// `ckptfs_dirent`: one directory entry.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CkptfsDirent {
    /// Inode number.
    pub ino: u64,
    /// `CKPTFS_KIND_*`.
    pub kind: u32,
    /// Length of `name` in bytes (without the NUL).
    pub namelen: u32,
    /// NUL-terminated name.
    pub name: [c_char; 256],
}
