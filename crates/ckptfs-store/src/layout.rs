//! Byte layout of a store segment. Everything is addressed by offsets from the segment
//! base, never by pointers, so that every process may map it at a different address.
//!
//! ```text
//! 0            Superblock (4 KiB): magic, version, Layout, state, locks, intents
//! inode_off    Inode[max_files]            512 B each, index = file id (0 = root dir)
//! lease_off    LeaseSlot[lease_slots]      32 B each: who holds which file open
//! chunk_off    ChunkEntry[mem + spill]     24 B each, index = chunk id
//! mem_stack    u32[mem_chunks]             free memory chunk ids (stack)
//! spill_stack  u32[spill_chunks]           free spill chunk ids (stack)
//! fid_stack    u32[max_files]              free file ids (stack)
//! hash_off     u32[hash_cap]               (parent, name) -> file id + 1, linear probing
//! change_off   ChangeEntry[CHANGE_LOG]     ring of recent name changes (288 B each)
//! block_map    u64[mem_blocks / 64]        used 4 KiB blocks of small-file chunks (bitmap)
//! data_off     chunk data (2 MiB aligned)  mem_chunks * chunk_size
//! ```
//! Chunk ids `0..mem_chunks` live in the data region, ids `mem_chunks..` in the spill file
//! at `(id - mem_chunks) * chunk_size`.

use crate::lock::RobustMutex;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// First 8 bytes of every segment.
pub const MAGIC: [u8; 8] = *b"CKPTFS\0\x01";
/// Format version this build reads and writes (5: hard links: name-only link entries
/// (kind [`kind::LINK`]) pointing at a data inode whose `nlink` counts its names, and the
/// `target`, `nlink` and `rdev` inode fields in the namespace record.
/// 4: change counters: a store-wide change
/// sequence, a per-inode `changed_seq` and a ring of recent name changes; small files in
/// 4 KiB blocks of shared chunks; leases in a shared table; 512-byte inodes, their number
/// derived from the memory size.
/// 3: metadata checksums in the superblock, inodes and chunk entries; uid, gid and atime
/// in inodes; 24-byte chunk entries. 2: 64 leases per inode, 2 KiB inodes).
pub const FORMAT_VERSION: u32 = 5;
/// Entries in the ring of recent name changes ([`ChangeEntry`]).
pub const CHANGE_LOG: u32 = 1024;
/// Bytes per [`ChangeEntry`].
pub const CHANGE_ENTRY_SIZE: u64 = 288;
/// Bytes per chunk table entry.
pub const CHUNK_ENTRY_SIZE: u64 = 24;
/// Size reserved for the superblock.
pub const SUPERBLOCK_SIZE: u64 = 4096;
/// Longest name of one path component.
pub const NAME_MAX: usize = 255;
/// Longest path argument of one call (the C API's and the shim's limit, as Linux's
/// PATH_MAX less its NUL).
pub const PATH_MAX: usize = 4095;
/// Longest store path the store resolves (from its root). Longer than [`PATH_MAX`]:
/// the FUSE mount turns a path the kernel resolved relative to a directory (at most
/// PATH_MAX bytes from there, as pjdfstest checks) into a path from the store root,
/// which is longer by that directory's own path.
pub const TREE_PATH_MAX: usize = 8 * 4096 - 1;
/// Smallest and largest chunk size.
pub const MIN_CHUNK: u64 = ckptfs_settings::MIN_CHUNK_SIZE;
/// Largest chunk size.
pub const MAX_CHUNK: u64 = ckptfs_settings::MAX_CHUNK_SIZE;
/// Distinct processes that may hold one file open at once (one node's ranks of an N-1
/// checkpoint, or of a shared restart file, each open it).
pub const LEASES: usize = 64;
/// Default memory per inode when the file count is not given: one inode per 8 KiB of
/// memory, as tmpfs's default (`nr_inodes` = half the pages).
pub const BYTES_PER_INODE: u64 = ckptfs_settings::BYTES_PER_FILE;
/// Block size of small files (data in shared chunks).
pub const BLOCK_SIZE: u64 = 4096;
/// log2([`BLOCK_SIZE`]).
pub const BLOCK_SHIFT: u32 = 12;
/// Largest small file: a file whose data fits in this many bytes (and in a quarter of a
/// chunk) lives in blocks of a shared chunk; past it, it grows into whole chunks.
pub const SMALL_MAX: u64 = 64 << 10;
/// Owner value of a chunk divided into small-file blocks (never a file id + 1).
pub const SMALL_OWNER: u32 = u32::MAX - 1;
/// Lease slots per inode for the default lease table size (at least [`MIN_LEASE_SLOTS`]).
pub const LEASE_SLOTS_PER_INODES: u32 = 4;
/// Smallest lease table.
pub const MIN_LEASE_SLOTS: u32 = 4096;
/// Largest lease table.
pub const MAX_LEASE_SLOTS: u32 = 1 << 20;
/// "No file id" in parent/sibling links.
pub const NONE: u32 = u32::MAX;
/// File id of the root directory.
pub const ROOT: u32 = 0;
/// Alignment of the data region (huge-page and O_DIRECT friendly).
pub const DATA_ALIGN: u64 = 2 << 20;

/// Inode kinds.
pub mod kind {
    /// Unused slot.
    pub const FREE: u32 = 0;
    /// Regular file.
    pub const FILE: u32 = 1;
    /// Directory.
    pub const DIR: u32 = 2;
    /// Symbolic link: its target is its data (a small-file run), never followed by the
    /// store's own path resolution.
    pub const SYMLINK: u32 = 3;
    /// Hard link: a name only (parent, name, sibling links, like any entry) whose inode
    /// is the one in its `target` field (a file, symlink or special file, never a
    /// directory). It holds no data and is never opened; every lookup of its name gives
    /// the target. Format 5.
    pub const LINK: u32 = 4;
    /// Named pipe (FIFO): a name and attributes only; the kernel of the FUSE mount
    /// serves its I/O. Format 5.
    pub const FIFO: u32 = 5;
    /// Unix domain socket node (as FIFO).
    pub const SOCKET: u32 = 6;
    /// Character device node: its device number is the inode's `rdev`.
    pub const CHAR_DEV: u32 = 7;
    /// Block device node: its device number is the inode's `rdev`.
    pub const BLOCK_DEV: u32 = 8;
}

/// Inode write states (files only).
pub mod wstate {
    /// Last writer closed normally (or never written): complete.
    pub const COMPLETE: u32 = 0;
    /// At least one writer holds it open.
    pub const WRITING: u32 = 1;
    /// A writer died while it was open: its data up to the last completed write remains.
    pub const INCOMPLETE: u32 = 2;
    /// Its writers closed it, but a write (or truncation, or flush) to it failed since it
    /// was last truncated to zero (ENOSPC, an I/O error of the spill file): its content is
    /// not what the application meant to write. Never drained or restored as complete.
    pub const FAILED: u32 = 3;
}

/// Inode flags.
pub mod iflag {
    /// Unlinked while open: freed on last close (or by recovery once its openers died).
    pub const ORPHAN: u32 = 1;
    /// A process that had written to the file died holding it open, in the current
    /// writing session (cleared when a writer opens it while no live writer holds it).
    /// The last normal close then leaves it `incomplete`, not `complete`.
    pub const DEAD_WRITER: u32 = 2;
    /// A write, truncation or flush to the file failed since it was last emptied
    /// (`O_TRUNC`, `set_len(0)`): the last close leaves it `failed`.
    pub const FAILED: u32 = 4;
    /// The inode may have extended attributes (a record under `/.ckptfs/xattr`): set
    /// before the record is written, cleared after it is removed, so a clear bit means
    /// none (a hint read without a lock; see `xattr.rs`).
    pub const XATTRS: u32 = 8;
}

/// Superblock states.
pub mod sbstate {
    /// No recovery has been needed since creation or the last `fsck --repair`.
    pub const CLEAN: u32 = 0;
    /// A process died holding a lock or a file open for writing; `fsck` is advised.
    pub const DIRTY: u32 = 1;
}

/// Layout parameters fixed at creation. Covered by `Superblock::layout_crc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Size of the whole segment in bytes.
    pub total_size: u64,
    /// log2(chunk size).
    pub chunk_shift: u32,
    /// Maximum number of inodes (files + directories, root included).
    pub max_files: u32,
    /// Number of chunks in the memory data region.
    pub mem_chunks: u32,
    /// Number of chunks in the spill file (0 = no spill).
    pub spill_chunks: u32,
    /// Capacity of the name hash table (power of two).
    pub hash_cap: u32,
    /// Slots in the lease table.
    pub lease_slots: u32,
    /// Offset of the inode table.
    pub inode_off: u64,
    /// Offset of the lease table.
    pub lease_off: u64,
    /// Offset of the chunk table.
    pub chunk_off: u64,
    /// Offset of the free memory chunk stack.
    pub mem_stack_off: u64,
    /// Offset of the free spill chunk stack.
    pub spill_stack_off: u64,
    /// Offset of the free file id stack.
    pub fid_stack_off: u64,
    /// Offset of the name hash table.
    pub hash_off: u64,
    /// Offset of the ring of recent name changes.
    pub change_off: u64,
    /// Offset of the small-file block bitmap.
    pub block_map_off: u64,
    /// Offset of the data region.
    pub data_off: u64,
    /// Path of the spill file, NUL padded.
    pub spill_path: [u8; 512],
}

impl Layout {
    /// Compute the layout for the given parameters.
    pub fn compute(chunk_shift: u32, mem_chunks: u32, spill_chunks: u32, max_files: u32) -> Layout {
        fn align(x: u64, a: u64) -> u64 {
            x.div_ceil(a) * a
        }
        let hash_cap = (max_files as u64 * 2).next_power_of_two().max(16) as u32;
        let lease_slots = (max_files / LEASE_SLOTS_PER_INODES).clamp(MIN_LEASE_SLOTS, MAX_LEASE_SLOTS);
        let inode_off = SUPERBLOCK_SIZE;
        let lease_off = align(inode_off + max_files as u64 * INODE_SIZE, 64);
        let chunk_off = align(lease_off + lease_slots as u64 * LEASE_SLOT_SIZE, 64);
        let nchunks = mem_chunks as u64 + spill_chunks as u64;
        let mem_stack_off = align(chunk_off + nchunks * CHUNK_ENTRY_SIZE, 64);
        let spill_stack_off = align(mem_stack_off + mem_chunks as u64 * 4, 64);
        let fid_stack_off = align(spill_stack_off + spill_chunks as u64 * 4, 64);
        let hash_off = align(fid_stack_off + max_files as u64 * 4, 64);
        let change_off = align(hash_off + hash_cap as u64 * 4, 64);
        let block_map_off = align(change_off + CHANGE_LOG as u64 * CHANGE_ENTRY_SIZE, 64);
        let mem_blocks = (mem_chunks as u64) << (chunk_shift - BLOCK_SHIFT);
        let data_off = align(block_map_off + mem_blocks.div_ceil(64) * 8, DATA_ALIGN);
        let total_size = data_off + ((mem_chunks as u64) << chunk_shift);
        Layout {
            total_size,
            chunk_shift,
            max_files,
            mem_chunks,
            spill_chunks,
            hash_cap,
            lease_slots,
            inode_off,
            lease_off,
            chunk_off,
            mem_stack_off,
            spill_stack_off,
            fid_stack_off,
            hash_off,
            change_off,
            block_map_off,
            data_off,
            spill_path: [0; 512],
        }
    }

    /// Chunk size in bytes.
    pub fn chunk_size(&self) -> u64 {
        1 << self.chunk_shift
    }

    /// Size of the memory data region.
    pub fn data_size(&self) -> u64 {
        (self.mem_chunks as u64) << self.chunk_shift
    }

    /// log2(blocks per chunk).
    pub fn blocks_shift(&self) -> u32 {
        self.chunk_shift - BLOCK_SHIFT
    }

    /// Largest small file of this layout: [`SMALL_MAX`], at most a quarter of a chunk.
    pub fn small_max(&self) -> u64 {
        SMALL_MAX.min(self.chunk_size() / 4)
    }

    /// Number of 4 KiB blocks in the memory data region.
    pub fn mem_blocks(&self) -> u64 {
        (self.mem_chunks as u64) << self.blocks_shift()
    }

    /// Spill file path, if any.
    pub fn spill_path(&self) -> Option<std::path::PathBuf> {
        let end = self.spill_path.iter().position(|&b| b == 0).unwrap_or(512);
        if end == 0 {
            return None;
        }
        use std::os::unix::ffi::OsStrExt;
        Some(std::ffi::OsStr::from_bytes(&self.spill_path[..end]).into())
    }

    /// The bytes covered by the layout checksum.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: Layout is repr(C), Copy, made only of integers and byte arrays with
        // explicit padding fields, so every byte is initialised.
        unsafe {
            std::slice::from_raw_parts(self as *const Layout as *const u8, std::mem::size_of::<Layout>())
        }
    }

    /// Sanity checks on a layout read from a segment of `file_size` bytes.
    pub fn validate(&self, file_size: u64) -> Result<(), String> {
        let cs = 1u64.checked_shl(self.chunk_shift).unwrap_or(0);
        if !(MIN_CHUNK..=MAX_CHUNK).contains(&cs) {
            return Err(format!("chunk size 2^{} out of range", self.chunk_shift));
        }
        let expect = Layout::compute(
            self.chunk_shift,
            self.mem_chunks,
            self.spill_chunks,
            self.max_files,
        );
        let mut mine = *self;
        mine.spill_path = [0; 512];
        if mine != expect {
            return Err("layout offsets are inconsistent".into());
        }
        if file_size != self.total_size {
            return Err(format!(
                "segment is {file_size} bytes but its superblock describes {} bytes",
                self.total_size
            ));
        }
        Ok(())
    }
}

/// A pending rename, replayed by namespace recovery if its author died mid-way.
#[repr(C)]
pub struct RenameIntent {
    /// 1 while a rename is in progress.
    pub active: AtomicU32,
    /// File id being moved.
    pub src: AtomicU32,
    /// New parent directory.
    pub dst_parent: AtomicU32,
    /// Inode replaced by the rename, or NONE.
    pub victim: AtomicU32,
    /// Length of the new name.
    pub name_len: AtomicU32,
    /// Padding.
    pub _pad: u32,
    /// New name.
    pub name: UnsafeCell<[u8; 256]>,
}

/// The superblock at offset 0.
#[repr(C)]
pub struct Superblock {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// CRC32C of `layout`.
    pub layout_crc: u32,
    /// Layout parameters.
    pub layout: Layout,
    /// [`sbstate`] value.
    pub state: AtomicU32,
    /// Uid of the creator.
    pub creator_uid: u32,
    /// Creation time, ns since the epoch.
    pub created_ns: u64,
    /// Time the creator spent creating and pre-faulting, in ns.
    pub create_time_ns: u64,
    /// Number of dead-holder lock recoveries so far.
    pub recoveries: AtomicU64,
    /// Protects the namespace: inode allocation, names, hash, sibling lists, fid stack.
    pub ns_lock: RobustMutex,
    /// Protects chunk ownership and the free chunk stacks.
    pub alloc_lock: RobustMutex,
    /// Top of the free memory chunk stack.
    pub mem_top: AtomicU32,
    /// Top of the free spill chunk stack.
    pub spill_top: AtomicU32,
    /// Top of the free file id stack.
    pub fid_top: AtomicU32,
    /// A small-file chunk likely to have free blocks (a hint; any value is safe).
    pub small_hint: AtomicU32,
    /// CRC32C of the identity fields written once at creation (`creator_uid`,
    /// `created_ns`, `create_time_ns`), checked at attach.
    pub ident_crc: u32,
    /// Rename in progress.
    pub rename: RenameIntent,
    /// Change counters (on their own cache line: every write bumps `seq`).
    pub changes: ChangeCounters,
    /// Set (1) by `destroy` just before the segment file is removed: a process that still
    /// maps it (a FUSE mount, a daemon, a process under the shim, after
    /// `destroy --force`) gets ESTALE from its next operation instead of writing into
    /// memory nobody will see again. Zero in segments made before it (was padding of the
    /// reserved superblock page).
    pub destroyed: AtomicU32,
}

/// The store-wide change counters, polled by the FUSE daemon to invalidate kernel caches.
#[repr(C, align(64))]
pub struct ChangeCounters {
    /// Bumped (fetch_add) on every namespace change and every change of a file's data,
    /// size, times, mode or owner; the new value is stored in the inode's `changed_seq`.
    pub seq: AtomicU64,
    /// Name changes logged so far; entry `n` is in ring slot `n % CHANGE_LOG`.
    pub names: AtomicU64,
    /// Highest `seq` of a change a poller may have missed: of a ring entry overwritten,
    /// or of a recovery or repair that changed the namespace without logging it. A
    /// poller whose last seen seq is below it must drop all its cached entries.
    pub lost_seq: AtomicU64,
    /// Bumped when a file's last writer closes it (complete or not): the node daemon
    /// waits on it (a futex) to start partner copies at once instead of at its next
    /// scan. In what was padding up to format 5's 64 bytes (zero in older segments).
    pub closes: AtomicU32,
    /// Processes waiting on `closes` (a closer wakes them only if not 0).
    pub close_waiters: AtomicU32,
    /// Bumped (relaxed) for every chunk-sized piece an application writes through a
    /// file handle (not for bytes a daemon lands from the network, `netin`): the node
    /// daemon's partner copies step back while it moves. In former padding too.
    pub writes: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<ChangeCounters>() == 64);

/// One name change in the ring: `name` was added to or removed from directory `parent`.
/// Written under the namespace lock, `seq` last.
#[repr(C)]
pub struct ChangeEntry {
    /// Change sequence number of the event (0 = empty slot).
    pub seq: AtomicU64,
    /// Directory file id.
    pub parent: AtomicU32,
    /// File id the name referred to.
    pub fid: AtomicU32,
    /// Generation of that inode.
    pub igen: AtomicU32,
    /// Length of `name`.
    pub name_len: AtomicU32,
    /// The name.
    pub name: UnsafeCell<[u8; 256]>,
    /// Padding.
    pub _pad: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<ChangeEntry>() == CHANGE_ENTRY_SIZE as usize);

const _: () = assert!(std::mem::size_of::<Superblock>() <= SUPERBLOCK_SIZE as usize);

/// Bytes per lease slot.
pub const LEASE_SLOT_SIZE: u64 = 32;

/// One process's hold on an open file, in the shared lease table. A slot belongs to file
/// `fid - 1` while `fid != 0`; it is claimed with a compare-and-swap of `fid` from 0 and
/// otherwise changed only under that file's lock.
#[repr(C)]
pub struct LeaseSlot {
    /// File id + 1 the slot belongs to; 0 = free.
    pub fid: AtomicU32,
    /// Process id, 0 while being claimed or released.
    pub pid: AtomicU32,
    /// Open handles for writing held by that process.
    pub writers: AtomicU32,
    /// Open handles for reading only.
    pub readers: AtomicU32,
    /// 1 once that process changed the file's data through this lease (write, truncate):
    /// only such a holder's death makes the file incomplete.
    pub wrote: AtomicU32,
    /// Padding.
    pub _pad: u32,
    /// Process start time (clock ticks since boot) to tell a reused pid apart.
    pub start: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<LeaseSlot>() == LEASE_SLOT_SIZE as usize);

/// Bytes per inode.
pub const INODE_SIZE: u64 = 512;

/// A file or directory. Index in the table is the file id.
#[repr(C)]
pub struct Inode {
    /// Per-file lock: size, chunk list, leases, state.
    pub lock: RobustMutex,
    /// [`kind`] value; setting it is the commit point of creation.
    pub kind: AtomicU32,
    /// Permission bits.
    pub mode: AtomicU32,
    /// Parent directory id (NONE for orphans).
    pub parent: AtomicU32,
    /// Length of `name`.
    pub name_len: AtomicU32,
    /// First child (directories).
    pub first_child: AtomicU32,
    /// Next sibling in the parent's child list.
    pub next_sib: AtomicU32,
    /// Previous sibling.
    pub prev_sib: AtomicU32,
    /// [`iflag`] bits.
    pub flags: AtomicU32,
    /// [`wstate`] value.
    pub wstate: AtomicU32,
    /// Incremented each time the slot is reused (FUSE generation).
    pub igen: AtomicU32,
    /// Number of chunks owned.
    pub nchunks: AtomicU32,
    /// Pid of the last process that closed it after writing (0 = none).
    pub last_writer_pid: AtomicU32,
    /// Start time of that process.
    pub last_writer_start: AtomicU64,
    /// File size in bytes.
    pub size: AtomicU64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: AtomicU64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: AtomicU64,
    /// Chunk-list generation: bumped on every chunk allocation or release.
    pub cgen: AtomicU64,
    /// Owner user id (the creating process's effective uid). Stored, not enforced.
    pub uid: AtomicU32,
    /// Owner group id (the creating process's effective gid). Stored, not enforced.
    pub gid: AtomicU32,
    /// CRC32C of the namespace record (file id, kind, parent, mode, uid, gid, name),
    /// written under the namespace lock after each change of those fields.
    pub ns_crc: AtomicU32,
    /// CRC32C of the data record (file id, size, chunk count), written under the file
    /// lock after each change of those fields.
    pub data_crc: AtomicU32,
    /// Access time, ns since the epoch (set explicitly; reads do not update it).
    pub atime_ns: AtomicU64,
    /// Value of the store's change `seq` at this inode's last change (see
    /// [`ChangeCounters`]); also bumped when the slot is freed.
    pub changed_seq: AtomicU64,
    /// Lease slots this file holds in the lease table (a count kept under the file lock;
    /// recounted from the table when a lock holder died).
    pub nleases: AtomicU32,
    /// Link entry ([`kind::LINK`]): the file id of the inode it names. Others: NONE.
    /// Part of the namespace record.
    pub target: AtomicU32,
    /// Small file: its run of 4 KiB blocks in the memory data region, `blocks << 32 |
    /// (first block + 1)`; 0 = none (the data, if any, is in whole chunks). One store
    /// under the allocation lock (and the file lock) is the commit point of a small
    /// allocation, of a move to a larger run, and of a move into whole chunks (cleared).
    pub srun: AtomicU64,
    /// Small file: `hwm << 32 | crc32c` of the run, with the `SUM_STALE` bit, as a
    /// chunk's `sum`.
    pub ssum: AtomicU64,
    /// Name of the last path component.
    pub name: UnsafeCell<[u8; 256]>,
    /// Names of this inode (files, symlinks, special files): 1 for its own name (0 once
    /// it has none: unlinked, or only its link entries remain) plus its link entries.
    /// Derived from the link entries and rebuilt with the namespace; part of the
    /// namespace record. Directories and link entries: 0 (unused).
    pub nlink: AtomicU32,
    /// Padding.
    pub _pad3: u32,
    /// Device number of a character or block device node (0 otherwise). Part of the
    /// namespace record.
    pub rdev: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Inode>() <= INODE_SIZE as usize);

/// One entry of the chunk table.
#[repr(C)]
pub struct ChunkEntry {
    /// Owning file id + 1; 0 = free. Written only under the allocation lock.
    pub owner: AtomicU32,
    /// Logical chunk index within the owner.
    pub logical: AtomicU32,
    /// `hwm << 32 | crc32c` where `hwm` counts the bytes written from the chunk start
    /// (bytes beyond it read as zeros) and the CRC covers exactly those bytes. Bit 63 set
    /// = the CRC is stale (an overwrite happened) and is recomputed at fsync/close.
    pub sum: AtomicU64,
    /// CRC32C of (chunk id, owner, logical) for an owned chunk, stored before `owner`
    /// (the commit point), so a crash never leaves an owned chunk with a wrong one.
    pub meta: AtomicU32,
    /// Padding.
    pub _pad: u32,
}

const _: () = assert!(std::mem::size_of::<ChunkEntry>() == CHUNK_ENTRY_SIZE as usize);

/// `ChunkEntry::sum` flag: CRC stale.
pub const SUM_STALE: u64 = 1 << 63;

/// Pack a high-water mark and CRC.
pub fn pack_sum(hwm: u32, crc: u32, stale: bool) -> u64 {
    ((hwm as u64) << 32) | crc as u64 | if stale { SUM_STALE } else { 0 }
}

/// Unpack (hwm, crc, stale).
pub fn unpack_sum(v: u64) -> (u32, u32, bool) {
    (((v & !SUM_STALE) >> 32) as u32, v as u32, v & SUM_STALE != 0)
}

/// CRC of the superblock's identity fields (written once at creation).
pub(crate) fn ident_crc(sb: &Superblock) -> u32 {
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&sb.creator_uid.to_le_bytes());
    b[4..12].copy_from_slice(&sb.created_ns.to_le_bytes());
    b[12..].copy_from_slice(&sb.create_time_ns.to_le_bytes());
    crate::checksum::crc32c(&b)
}
