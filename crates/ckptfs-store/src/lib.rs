//! # ckptfs-store: the node-local checkpoint store
//!
//! A store is one persistent shared-memory segment per node (`/dev/shm/ckptfs.NAME`),
//! created by the first process that opens it and attached by later ones. It outlives
//! every process that uses it, so checkpoints survive the application's crash, and it is
//! pre-faulted once at creation so that writing a checkpoint is a `memcpy` into memory
//! that never page-faults (CRUISE, Rajachandrasekar et al., sections 4-5).
//!
//! Inside the segment (see [`layout`]): a superblock, an inode table (files and
//! directories, addressed by file id, one per 8 KiB of memory by default), a lease table,
//! a chunk table (owner, logical index, checksum of every fixed-size chunk), free stacks,
//! a name hash, a ring of name changes, a small-file block bitmap and the data region.
//! Only offsets are stored, never pointers. A file of at most 64 KiB keeps its data in
//! 4 KiB blocks of a chunk shared with other small files; larger files take whole chunks.
//! When memory chunks run out, chunks are taken from an optional spill file on an SSD.
//!
//! Concurrency: many processes of a node share a store, each usually writing its own
//! files. A namespace lock, an allocation lock and one lock per file are robust,
//! process-shared mutexes: a holder SIGKILLed at any instruction is detected by the next
//! locker, which rebuilds the derived structures from the source of truth (chunk owners
//! and inode records). Files open for writing carry leases (pid + start time); a file
//! whose writer died is reported [`WriteState::Incomplete`], readable up to its last
//! completed write.
//!
//! Integrity: a CRC32C per chunk is extended as data is appended (hardware accelerated),
//! recomputed at fsync/close after overwrites, and verified by [`Store::fsck`], by
//! [`FileHandle::verify_all`] when copying out, and on read when the file was written by
//! another (possibly dead) process.
//!
//! ```no_run
//! use ckptfs_store::{Store, StoreOptions, OpenFlags};
//! let store = Store::open_or_create(&StoreOptions::named("demo"))?;
//! store.mkdir("/ckpt", 0o755)?;
//! let mut f = store.open("/ckpt/rank0", OpenFlags::CREATE, 0o644)?;
//! f.write_all(b"state")?;
//! f.close()?;
//! # Ok::<(), ckptfs_store::StoreError>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod affinity;
mod ahead;
mod ahead_state;
mod alloc;
mod changes;
pub mod checksum;
pub mod copy;
mod destroy;
mod error;
pub mod fault;
mod file;
mod fsck;
mod fsck_fix;
pub mod hugepages;
mod integrity;
pub mod layout;
mod leases;
pub mod level;
mod links;
mod lock;
mod namespace;
pub mod netin;
pub mod netio;
mod ops;
pub mod process;
mod query;
mod records;
mod recovery;
pub mod region_io;
mod segment;
pub mod shared_map;
mod small;
mod small_fsck;
mod small_io;
mod store;
mod symlink;
mod trust;
mod types;
mod verify;
mod warm;
mod xattr;

pub use changes::{ChangedInode, ChangedName, Changes};
pub use destroy::StoreUser;
pub use error::{Result, StoreError};
pub use file::FileHandle;
pub use fsck::{FsckReport, Problem};
pub use links::LINK_MAX;
pub use shared_map::SharedMapping;
pub use store::{
    default_max_files, default_store_name, is_system_path, job_rank, segment_path, segment_path_in,
    ChunkInfo, ChunkLocation, DataRegion, DirEntry, FileKind, OpenFlags, Stat, Store, StoreInfo,
    StoreOptions, WriteState, DEFAULT_CHUNK_SIZE, DEFAULT_MAX_FILES, DEFAULT_MEM_SIZE, ROOT_INO, SYSTEM_DIR,
    SYSTEM_DIR_NAME,
};
pub use symlink::SYMLINK_MAX;
pub use xattr::{XattrFlags, XATTR_NAME_MAX, XATTR_SIZE_MAX, XATTR_TOTAL_MAX};
