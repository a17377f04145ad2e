//! The mapped segment: creation, attach, validation, pre-faulting and typed access to the
//! structures inside it. Together with `lock` this is where the shared-memory `unsafe`
//! of ckptfs lives; everything above works with references handed out here.

use crate::checksum::crc32c;
use crate::error::{Result, StoreError};
use crate::layout::*;
use crate::lock::RobustMutex;
use crate::trust;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

/// A mapping of one store segment into this process.
pub struct Segment {
    base: *mut u8,
    len: usize,
    /// Path of the segment file in /dev/shm.
    pub path: PathBuf,
    /// Store name.
    pub name: String,
    /// Inode number of the segment file (a lock holder's process maps this inode).
    pub ino: u64,
    /// Copy of the validated layout.
    pub layout: Layout,
    spill: Option<File>,
    /// Per-chunk bit: page tables for this chunk populated in this process.
    populated: Vec<AtomicU64>,
    /// Fork generation the `populated` bits belong to (a child has no page tables).
    populated_gen: AtomicU64,
    /// Helper thread populating free chunks ahead of a fresh writer.
    pub(crate) ahead: crate::ahead_state::Ahead,
    /// Where this process's own (populated) free chunks are on the free stack.
    pub(crate) affinity: crate::affinity::Affinity,
    /// The segment file is on huge pages (tmpfs reports a 2 MiB `st_blksize` for a file
    /// it backs with them): populating a chunk maps one or two PMD entries, too cheap to
    /// hand to a helper thread.
    pub(crate) huge: bool,
}

/// `st_blksize` of a tmpfs file backed by huge pages (shmem reports HPAGE_PMD_SIZE).
const HUGE_BLKSIZE: u64 = 2 << 20;

/// Incremented in every child after fork(): a child's page tables for shared mappings are
/// empty, so its populated bits must be cleared.
static FORK_GEN: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
}

fn register_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a handler that only touches an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

// SAFETY: the mapping is shared memory whose mutable parts are only accessed through
// atomics or under the process-shared locks; the raw pointer itself is never mutated.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: base/len describe a mapping created by mmap in `map` and not yet unmapped.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Parameters for creating a segment.
pub struct CreateParams<'a> {
    /// Store name.
    pub name: &'a str,
    /// Segment file path.
    pub path: &'a Path,
    /// log2 chunk size.
    pub chunk_shift: u32,
    /// Memory chunks.
    pub mem_chunks: u32,
    /// Spill chunks.
    pub spill_chunks: u32,
    /// Max inodes.
    pub max_files: u32,
    /// Spill file path.
    pub spill_path: Option<&'a Path>,
    /// Makes the root directory's inode of a fresh segment (the store's integrity
    /// records: given by the caller, so that the segment does not name them).
    pub init_root: fn(&Segment),
}

use ckptfs_settings::now_ns;

fn map(file: &File, len: usize, path: &Path) -> Result<*mut u8> {
    // SAFETY: mapping a file we opened read-write, shared, at a kernel-chosen address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(StoreError::io(
            format!("mmap {}", path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(p as *mut u8)
}

impl Segment {
    /// Create a new segment at `params.path`. Returns `Ok(None)` if another process
    /// created it first (the caller then attaches).
    pub fn create(params: &CreateParams) -> Result<Option<Segment>> {
        let t0 = Instant::now();
        let mut layout = Layout::compute(
            params.chunk_shift,
            params.mem_chunks,
            params.spill_chunks,
            params.max_files,
        );
        if let Some(sp) = params.spill_path {
            use std::os::unix::ffi::OsStrExt;
            let b = sp.as_os_str().as_bytes();
            if b.len() >= layout.spill_path.len() {
                return Err(StoreError::NameTooLong(sp.display().to_string()));
            }
            layout.spill_path[..b.len()].copy_from_slice(b);
        }
        // Build under a temporary name and publish with link(2), which never replaces:
        // nobody can attach a half-initialised segment, and of two racing creators one wins.
        // Unique per creation attempt, not just per process: two threads of one process
        // racing to create the store must not share (and delete) each other's files.
        static ATTEMPTS: AtomicU64 = AtomicU64::new(0);
        let uniq = format!(
            "{}.{}",
            std::process::id(),
            ATTEMPTS.fetch_add(1, Ordering::Relaxed)
        );
        let dir = params.path.parent().unwrap_or(Path::new("/dev/shm"));
        let tmp = dir.join(format!(
            ".{}.tmp.{}",
            params
                .path
                .file_name()
                .and_then(|s| s.to_str())
                .unwrap_or("ckptfs"),
            uniq
        ));
        let _ = std::fs::remove_file(&tmp);
        remove_stale_tmps(&tmp, &uniq);
        if let Some(sp) = params.spill_path {
            let mut t = sp.as_os_str().to_owned();
            t.push(format!(".tmp.{uniq}"));
            remove_stale_tmps(Path::new(&t), &uniq);
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(trust::STORE_FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| StoreError::io(format!("create {}", tmp.display()), e))?;
        if let Err(e) = set_exact_mode(&file, &tmp) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let cleanup = |e: StoreError| {
            let _ = std::fs::remove_file(&tmp);
            e
        };
        // Reserve the memory now so that a full /dev/shm fails here, not as SIGBUS later.
        // SAFETY: fallocate on a file descriptor we own.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, layout.total_size as libc::off_t) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(cleanup(StoreError::io(
                format!("reserving {} bytes in {}", layout.total_size, dir.display()),
                e,
            )));
        }
        // The spill file is also built under a temporary name and renamed into place only
        // after this process has won the race to publish the segment.
        let spill_tmp = params.spill_path.map(|sp| {
            let mut t = sp.as_os_str().to_owned();
            t.push(format!(".tmp.{uniq}"));
            PathBuf::from(t)
        });
        let spill = match &spill_tmp {
            Some(sp) => {
                Some(create_spill(sp, (params.spill_chunks as u64) << params.chunk_shift).map_err(cleanup)?)
            }
            None => None,
        };
        let cleanup = |e: StoreError| {
            if let Some(t) = &spill_tmp {
                let _ = std::fs::remove_file(t);
            }
            cleanup(e)
        };
        let len = layout.total_size as usize;
        let base = map(&file, len, &tmp).map_err(cleanup)?;
        // Pre-fault the whole segment once so that writes never page-fault in this
        // process, and the pages are resident for every later process.
        prefault(base, len);
        let mut seg = Segment {
            base,
            len,
            path: params.path.to_path_buf(),
            name: params.name.to_string(),
            layout,
            spill,
            populated: Vec::new(),
            populated_gen: AtomicU64::new(FORK_GEN.load(Ordering::Relaxed)),
            ahead: Default::default(),
            affinity: crate::affinity::Affinity::new(params.mem_chunks),
            ino: {
                use std::os::unix::fs::MetadataExt;
                file.metadata().map(|m| m.ino()).unwrap_or(0)
            },
            huge: {
                use std::os::unix::fs::MetadataExt;
                file.metadata().is_ok_and(|m| m.blksize() >= HUGE_BLKSIZE)
            },
        };
        register_fork_handler();
        seg.populated = (0..(params.mem_chunks as usize).div_ceil(64))
            .map(|_| AtomicU64::new(!0))
            .collect();
        seg.init(params.init_root);
        seg.sb_mut_init(|sb| {
            sb.create_time_ns = t0.elapsed().as_nanos() as u64;
            sb.ident_crc = crate::layout::ident_crc(sb);
        });
        match std::fs::hard_link(&tmp, params.path) {
            Ok(()) => {
                let _ = std::fs::remove_file(&tmp);
                if let (Some(t), Some(sp)) = (&spill_tmp, params.spill_path) {
                    std::fs::rename(t, sp)
                        .map_err(|e| StoreError::io(format!("publish spill file {}", sp.display()), e))?;
                }
                Ok(Some(seg))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Another process published first; ours was never visible.
                drop(seg);
                let _ = cleanup(StoreError::Busy(String::new()));
                Ok(None)
            }
            Err(e) => Err(cleanup(StoreError::io(
                format!("publish {}", params.path.display()),
                e,
            ))),
        }
    }

    /// Attach to an existing segment, validating it before any use: a regular file with
    /// mode 0600 owned by the caller (or, with `allow_foreign_owner`, by anyone).
    pub fn attach(name: &str, path: &Path, allow_foreign_owner: bool) -> Result<Segment> {
        // Never through a link, and checked on the descriptor before anything is read.
        let file = match trust::open_nofollow(path, "segment") {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NoStore(name.into()))
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(trust::symlink_error(path)),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(StoreError::Permission(path.display().to_string()))
            }
            Err(e) => return Err(StoreError::io(format!("open {}", path.display()), e)),
        };
        let owner = trust::check_segment(&file, path, allow_foreign_owner)?;
        let bad = |reason: String| StoreError::BadSegment {
            path: path.display().to_string(),
            reason,
        };
        let meta = file
            .metadata()
            .map_err(|e| StoreError::io(format!("stat {}", path.display()), e))?;
        let size = meta.len();
        let ino = std::os::unix::fs::MetadataExt::ino(&meta);
        let huge = std::os::unix::fs::MetadataExt::blksize(&meta) >= HUGE_BLKSIZE;
        // Read and check the superblock with plain reads before mapping anything.
        let mut head = vec![0u8; SUPERBLOCK_SIZE as usize];
        if size < SUPERBLOCK_SIZE || file.read_exact_at(&mut head, 0).is_err() {
            return Err(bad(format!("too small ({size} bytes) to be a ckptfs segment")));
        }
        if head[..8] != MAGIC {
            return Err(bad("not a ckptfs segment (bad magic)".into()));
        }
        let version = u32::from_le_bytes(head[8..12].try_into().unwrap());
        if version != FORMAT_VERSION {
            return Err(bad(format!(
                "format version {version}, but this build of ckptfs reads version {FORMAT_VERSION}"
            )));
        }
        let stored_crc = u32::from_le_bytes(head[12..16].try_into().unwrap());
        let lsize = std::mem::size_of::<Layout>();
        // SAFETY: head holds at least size_of::<Layout>() + 16 bytes; Layout is plain
        // integers and bytes, valid for any bit pattern; read_unaligned copies it out.
        let layout: Layout =
            unsafe { std::ptr::read_unaligned(head[16..16 + lsize].as_ptr() as *const Layout) };
        if crc32c(layout.as_bytes()) != stored_crc {
            return Err(bad("superblock checksum mismatch (damaged segment)".into()));
        }
        layout.validate(size).map_err(bad)?;
        {
            use std::mem::offset_of;
            let rd = |off: usize, n: usize| &head[off..off + n];
            let mut ident = Vec::with_capacity(20);
            ident.extend_from_slice(rd(offset_of!(Superblock, creator_uid), 4));
            ident.extend_from_slice(rd(offset_of!(Superblock, created_ns), 8));
            ident.extend_from_slice(rd(offset_of!(Superblock, create_time_ns), 8));
            let stored = u32::from_le_bytes(rd(offset_of!(Superblock, ident_crc), 4).try_into().unwrap());
            if crc32c(&ident) != stored {
                return Err(bad(
                    "superblock identity checksum mismatch (damaged segment)".into()
                ));
            }
        }
        let spill = match layout.spill_path() {
            Some(sp) => Some(trust::open_spill(&sp, name, owner)?),
            None => None,
        };
        let len = layout.total_size as usize;
        let base = map(&file, len, path)?;
        Ok(Segment {
            ino,
            base,
            len,
            path: path.to_path_buf(),
            name: name.to_string(),
            layout,
            spill,
            populated: (0..(layout.mem_chunks as usize).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            populated_gen: {
                register_fork_handler();
                AtomicU64::new(FORK_GEN.load(Ordering::Relaxed))
            },
            ahead: Default::default(),
            affinity: crate::affinity::Affinity::new(layout.mem_chunks),
            huge,
        })
    }

    fn sb_mut_init(&mut self, f: impl FnOnce(&mut Superblock)) {
        // SAFETY: only called during creation, before the segment is published, so this
        // process has exclusive access.
        unsafe { f(&mut *(self.base as *mut Superblock)) }
    }

    /// Initialise a freshly created, zeroed segment; `init_root` makes the root
    /// directory's inode (with its checksummed records).
    fn init(&mut self, init_root: fn(&Segment)) {
        let l = self.layout;
        self.sb_mut_init(|sb| {
            sb.magic = MAGIC;
            sb.version = FORMAT_VERSION;
            sb.layout = l;
            sb.layout_crc = crc32c(l.as_bytes());
            // SAFETY: getuid has no preconditions.
            sb.creator_uid = unsafe { libc::getuid() };
            sb.created_ns = now_ns();
            sb.rename.dst_parent = AtomicU32::new(NONE);
        });
        // SAFETY: exclusive access during creation; the mutexes are inside the mapping.
        unsafe {
            RobustMutex::init_in_place(&self.sb().ns_lock as *const _ as *mut RobustMutex);
            RobustMutex::init_in_place(&self.sb().alloc_lock as *const _ as *mut RobustMutex);
            for fid in 0..l.max_files {
                RobustMutex::init_in_place(&self.inode(fid).lock as *const _ as *mut RobustMutex);
            }
        }
        for fid in 0..l.max_files {
            let ino = self.inode(fid);
            ino.parent.store(NONE, Ordering::Relaxed);
            ino.first_child.store(NONE, Ordering::Relaxed);
            ino.next_sib.store(NONE, Ordering::Relaxed);
            ino.prev_sib.store(NONE, Ordering::Relaxed);
        }
        // Stacks: pop order gives low ids first.
        for i in 0..l.mem_chunks {
            self.mem_stack(i).store(l.mem_chunks - 1 - i, Ordering::Relaxed);
        }
        for i in 0..l.spill_chunks {
            self.spill_stack(i)
                .store(l.mem_chunks + l.spill_chunks - 1 - i, Ordering::Relaxed);
        }
        let sb = self.sb();
        sb.mem_top.store(l.mem_chunks, Ordering::Relaxed);
        sb.spill_top.store(l.spill_chunks, Ordering::Relaxed);
        // Root directory is file id 0, never on the free stack.
        for i in 0..l.max_files - 1 {
            self.fid_stack(i).store(l.max_files - 1 - i, Ordering::Relaxed);
        }
        sb.fid_top.store(l.max_files - 1, Ordering::Relaxed);
        init_root(self);
    }

    /// The superblock.
    pub fn sb(&self) -> &Superblock {
        // SAFETY: the segment was validated to start with a superblock; all mutable
        // fields are atomics or lock-protected cells.
        unsafe { &*(self.base as *const Superblock) }
    }

    fn at<T>(&self, off: u64, idx: u64, size: u64) -> &T {
        let o = off + idx * size;
        debug_assert!(o + std::mem::size_of::<T>() as u64 <= self.len as u64);
        // SAFETY: offsets come from the validated layout and indices are bounds-checked
        // by the callers below; T is an atomic or lock-protected repr(C) type.
        unsafe { &*(self.base.add(o as usize) as *const T) }
    }

    /// Inode `fid` (panics if out of range: callers validate ids first).
    pub fn inode(&self, fid: u32) -> &Inode {
        assert!(fid < self.layout.max_files, "file id {fid} out of range");
        self.at(self.layout.inode_off, fid as u64, INODE_SIZE)
    }

    /// Chunk table entry `c`.
    pub fn chunk(&self, c: u32) -> &ChunkEntry {
        assert!(c < self.nchunks(), "chunk id {c} out of range");
        self.at(self.layout.chunk_off, c as u64, CHUNK_ENTRY_SIZE)
    }

    /// Total chunks (memory + spill).
    pub fn nchunks(&self) -> u32 {
        self.layout.mem_chunks + self.layout.spill_chunks
    }

    /// Slot `i` of the free memory chunk stack.
    pub fn mem_stack(&self, i: u32) -> &AtomicU32 {
        assert!(i < self.layout.mem_chunks);
        self.at(self.layout.mem_stack_off, i as u64, 4)
    }

    /// Slot `i` of the free spill chunk stack.
    pub fn spill_stack(&self, i: u32) -> &AtomicU32 {
        assert!(i < self.layout.spill_chunks);
        self.at(self.layout.spill_stack_off, i as u64, 4)
    }

    /// Slot `i` of the free file id stack.
    pub fn fid_stack(&self, i: u32) -> &AtomicU32 {
        assert!(i < self.layout.max_files);
        self.at(self.layout.fid_stack_off, i as u64, 4)
    }

    /// Slot `i` of the name hash table.
    pub fn hash_slot(&self, i: u32) -> &AtomicU32 {
        assert!(i < self.layout.hash_cap);
        self.at(self.layout.hash_off, i as u64, 4)
    }

    /// Word `i` of the small-file block bitmap (bit `b % 64` of word `b / 64` = block `b`).
    pub fn block_word(&self, i: u64) -> &AtomicU64 {
        assert!(i < self.layout.mem_blocks().div_ceil(64));
        self.at(self.layout.block_map_off, i, 8)
    }

    /// Slot `i` of the lease table.
    pub fn lease(&self, i: u32) -> &LeaseSlot {
        assert!(i < self.layout.lease_slots);
        self.at(self.layout.lease_off, i as u64, LEASE_SLOT_SIZE)
    }

    /// Slot `i` of the ring of recent name changes.
    pub fn change_entry(&self, i: u32) -> &ChangeEntry {
        assert!(i < CHANGE_LOG);
        self.at(self.layout.change_off, i as u64, CHANGE_ENTRY_SIZE)
    }

    /// Name bytes of change-ring slot `i`.
    ///
    /// # Safety
    /// Hold the namespace lock (ring entries change only under it).
    pub unsafe fn change_name(&self, i: u32) -> &[u8] {
        let e = self.change_entry(i);
        let n = (e.name_len.load(Ordering::Relaxed) as usize).min(NAME_MAX);
        // SAFETY: the cell is only written under the namespace lock, which the caller holds.
        unsafe { &(&*e.name.get())[..n] }
    }

    /// Set the name of change-ring slot `i`.
    ///
    /// # Safety
    /// Hold the namespace lock.
    pub unsafe fn set_change_name(&self, i: u32, name: &[u8]) {
        let e = self.change_entry(i);
        let n = name.len().min(NAME_MAX);
        // SAFETY: exclusive under the namespace lock held by the caller.
        unsafe { (&mut *e.name.get())[..n].copy_from_slice(&name[..n]) };
        e.name_len.store(n as u32, Ordering::Relaxed);
    }

    /// Base address of the data region in this process.
    pub fn data_base(&self) -> *mut u8 {
        // SAFETY: data_off < len by layout validation.
        unsafe { self.base.add(self.layout.data_off as usize) }
    }

    /// Is chunk `c` in memory (as opposed to spill)?
    pub fn is_mem(&self, c: u32) -> bool {
        c < self.layout.mem_chunks
    }

    /// Raw pointer to the start of memory chunk `c`, with its page tables populated in
    /// this process (once per chunk) so that copies never take page faults.
    pub fn chunk_ptr(&self, c: u32) -> *mut u8 {
        assert!(self.is_mem(c));
        let cs = self.layout.chunk_size() as usize;
        // SAFETY: c < mem_chunks, so the chunk lies inside the data region.
        let p = unsafe { self.data_base().add(c as usize * cs) };
        let gen = FORK_GEN.load(Ordering::Relaxed);
        if self.populated_gen.load(Ordering::Relaxed) != gen {
            for w in &self.populated {
                w.store(0, Ordering::Relaxed);
            }
            self.populated_gen.store(gen, Ordering::Relaxed);
        }
        let word = &self.populated[c as usize / 64];
        let bit = 1u64 << (c % 64);
        if word.load(Ordering::Relaxed) & bit == 0 {
            // SAFETY: advisory call on a range inside our mapping.
            // The pages exist (pre-faulted at creation); only this process's page tables
            // are missing. POPULATE_READ maps them (writable: a shared tmpfs mapping needs
            // no write fault for dirty tracking) several times faster than POPULATE_WRITE
            // (docs/benchmarks.md, "Figures behind design choices").
            unsafe { libc::madvise(p as *mut libc::c_void, cs, libc::MADV_POPULATE_READ) };
            word.fetch_or(bit, Ordering::Relaxed);
        }
        p
    }

    /// Has this process populated its page tables for memory chunk `c`?
    pub fn is_populated(&self, c: u32) -> bool {
        if self.populated_gen.load(Ordering::Relaxed) != FORK_GEN.load(Ordering::Relaxed) {
            return false;
        }
        self.populated
            .get(c as usize / 64)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1u64 << (c % 64)) != 0)
    }

    /// Populate this process's page tables for memory chunk `c` (if not yet done): only
    /// page tables, never the chunk's bytes, so any chunk may be populated at any time.
    pub fn populate(&self, c: u32) {
        if self.is_mem(c) {
            let _ = self.chunk_ptr(c);
        }
    }

    /// Read-only view of `len` bytes of memory chunk `c` from `off`.
    ///
    /// # Safety
    /// The caller must hold the owning file's lock (or otherwise know nobody is writing
    /// this range) for as long as the slice lives.
    pub unsafe fn chunk_slice(&self, c: u32, off: usize, len: usize) -> &[u8] {
        debug_assert!(off + len <= self.layout.chunk_size() as usize);
        // SAFETY: range inside the chunk, see the function's contract.
        unsafe { std::slice::from_raw_parts(self.chunk_ptr(c).add(off), len) }
    }

    /// Mutable view of `len` bytes of memory chunk `c` from `off`.
    ///
    /// # Safety
    /// The caller must hold the owning file's lock and own the chunk.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn chunk_slice_mut(&self, c: u32, off: usize, len: usize) -> &mut [u8] {
        debug_assert!(off + len <= self.layout.chunk_size() as usize);
        // SAFETY: range inside the chunk, see the function's contract.
        unsafe { std::slice::from_raw_parts_mut(self.chunk_ptr(c).add(off), len) }
    }

    /// The spill file, if the store has one.
    pub fn spill(&self) -> Option<&File> {
        self.spill.as_ref()
    }

    /// Byte offset of spill chunk `c` in the spill file.
    pub fn spill_offset(&self, c: u32) -> u64 {
        ((c - self.layout.mem_chunks) as u64) << self.layout.chunk_shift
    }

    /// Name bytes of inode `fid`.
    ///
    /// # Safety
    /// Hold the namespace lock (names change only under it).
    pub unsafe fn name_of(&self, fid: u32) -> &[u8] {
        let ino = self.inode(fid);
        let n = (ino.name_len.load(Ordering::Relaxed) as usize).min(NAME_MAX);
        // SAFETY: the cell is only written under the namespace lock, which the caller holds.
        unsafe { &(&*ino.name.get())[..n] }
    }

    /// Set the name of inode `fid`.
    ///
    /// # Safety
    /// Hold the namespace lock.
    pub unsafe fn set_name(&self, fid: u32, name: &[u8]) {
        let ino = self.inode(fid);
        // SAFETY: exclusive under the namespace lock held by the caller.
        unsafe { (&mut *ino.name.get())[..name.len()].copy_from_slice(name) };
        ino.name_len.store(name.len() as u32, Ordering::Release);
    }

    /// Rename intent name.
    ///
    /// # Safety
    /// Hold the namespace lock.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn intent_name(&self) -> &mut [u8; 256] {
        // SAFETY: exclusive under the namespace lock held by the caller.
        unsafe { &mut *self.sb().rename.name.get() }
    }
}

/// Remove the temporary files of earlier creators that died before publishing (SIGKILLed
/// while pre-faulting, say): each holds a whole segment's memory or spill space, and
/// nobody else would ever remove it. `tmp` is our own temporary path, ending in `uniq`
/// (`PID.N`); theirs differ only in that part.
fn remove_stale_tmps(tmp: &Path, uniq: &str) {
    let (Some(dir), Some(name)) = (tmp.parent(), tmp.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let prefix = &name[..name.len() - uniq.len()];
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name();
        let Some(rest) = n.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        // Our own process may be creating on another thread; a live pid may be creating.
        // Only our own files: in a shared directory, others' names are not ours to remove.
        let ours = std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_file() && m.uid() == trust::euid());
        if ours && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Run `f` (which starts one of the store's own helper threads) with every signal blocked
/// in the calling thread, restoring its mask afterwards: the new thread inherits the full
/// mask from its first instruction, so the program's process-directed signals (an aio
/// completion it waits for with `sigwaitinfo`, say) are never delivered to it.
pub(crate) fn with_all_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises `all`; pthread_sigmask reads it and writes `old`.
    let rc = unsafe {
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr())
    };
    let r = f();
    if rc == 0 {
        // SAFETY: `old` was filled by the successful call above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut()) };
    }
    r
}

/// Populate page tables for a whole range (faulting in the pages).
fn prefault(base: *mut u8, len: usize) {
    // SAFETY: advisory call on our own fresh mapping.
    let rc = unsafe { libc::madvise(base as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
    if rc != 0 {
        // Kernels before 5.14: touch every page.
        for off in (0..len).step_by(4096) {
            // SAFETY: off < len, inside our mapping; the memory is zero and we write 0.
            unsafe { std::ptr::write_volatile(base.add(off), 0) };
        }
    }
}

fn create_spill(path: &Path, size: u64) -> Result<File> {
    // A fresh name (O_EXCL, never through a link) in a directory others may share.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(trust::STORE_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| StoreError::io(format!("create spill file {}", path.display()), e))?;
    set_exact_mode(&f, path)?;
    // Reserve the blocks so that spilling later cannot hit ENOSPC on the device.
    // SAFETY: fallocate on our own descriptor.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, size as libc::off_t) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        // Filesystems without fallocate: fall back to a sparse file of the right size.
        if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
            f.set_len(size)
                .map_err(|e| StoreError::io(format!("size spill file {}", path.display()), e))?;
        } else {
            let _ = std::fs::remove_file(path);
            return Err(StoreError::io(
                format!("reserve {size} bytes for spill file {}", path.display()),
                e,
            ));
        }
    }
    Ok(f)
}

/// Give a freshly created segment or spill file exactly mode 0600 (the umask may have
/// narrowed it), on its descriptor.
fn set_exact_mode(f: &File, path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(trust::STORE_FILE_MODE))
        .map_err(|e| StoreError::io(format!("chmod {}", path.display()), e))
}

/// Current wall-clock time in ns.
pub fn now() -> u64 {
    now_ns()
}
