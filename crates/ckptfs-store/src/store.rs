//! The store: creating, attaching and destroying segments, the settings check, path
//! splitting, and usage figures. The rest of `Store`'s methods live by responsibility in
//! `ops.rs` (namespace changes), `query.rs` (attributes and listings), `alloc.rs` (chunk
//! allocation), `recovery.rs` (locks with dead-holder recovery and the rebuilds of derived
//! structures), `namespace.rs` (hash and child lists), `leases.rs` and `file.rs` (I/O).

use crate::error::{Result, StoreError};
use crate::layout::*;
use crate::lock::Guard;
use crate::segment::{CreateParams, Segment};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;

pub use crate::types::*;

/// A node store attached to this process. Cheap to clone; all clones share one mapping.
#[derive(Clone)]
pub struct Store {
    pub(crate) seg: Arc<Segment>,
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

/// The file count of a store of `mem_size` bytes of memory when none is given: one inode
/// per [`BYTES_PER_INODE`] (8 KiB), at least 256, at most 4,194,304.
pub fn default_max_files(mem_size: u64) -> u32 {
    (mem_size / BYTES_PER_INODE).clamp(256, 1 << 22) as u32
}

/// Namespace lock held: proof for functions that need it.
pub(crate) struct Ns<'a> {
    pub(crate) _g: Guard<'a>,
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

    fn open_inner(opts: &StoreOptions, create: bool, exclusive: bool) -> Result<Store> {
        let name = opts.effective_name()?;
        if let Some(d) = &opts.shm_dir {
            crate::hugepages::check_dir(d)?;
        }
        let path = segment_path_in(opts.shm_dir.as_deref(), &name);
        for _ in 0..5 {
            match Segment::attach(&name, &path, opts.allow_foreign_owner) {
                Ok(seg) if seg.sb().destroyed.load(Acquire) != 0 => {
                    // Being destroyed (marked, not yet unlinked): wait for the name.
                    drop(seg);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                }
                Ok(seg) => {
                    if exclusive {
                        return Err(StoreError::Exists(format!("store {name} ({})", path.display())));
                    }
                    let store = Store { seg: Arc::new(seg) };
                    store.check_settings(opts)?;
                    store.recover_dead_openers();
                    if let Some(b) = opts.warm {
                        store.warm_in_background(b);
                    }
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
            let max_files = opts
                .max_files
                .unwrap_or_else(|| default_max_files(mem_chunks << shift));
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
                init_root: crate::records::init_root,
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
            huge_pages: crate::hugepages::for_dir(
                seg.path.parent().unwrap_or(std::path::Path::new("/dev/shm")),
            ),
            format_version: FORMAT_VERSION,
            chunk_size: l.chunk_size(),
            mem_size: l.data_size(),
            mem_chunks: l.mem_chunks,
            mem_free_chunks: sb.mem_top.load(Relaxed),
            spill_path: l.spill_path(),
            spill_size: (l.spill_chunks as u64) << l.chunk_shift,
            spill_chunks: l.spill_chunks,
            spill_free_chunks: sb.spill_top.load(Relaxed),
            small_chunks: (0..l.mem_chunks)
                .filter(|&c| seg.chunk(c).owner.load(Relaxed) == SMALL_OWNER)
                .count() as u32,
            small_blocks_used: (0..l.mem_blocks().div_ceil(64))
                .map(|i| seg.block_word(i).load(Relaxed).count_ones() as u64)
                .sum(),
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

    /// Populate this process's page tables for every memory chunk not yet populated
    /// (page tables only, never bytes or metadata: safe at any time). For long-lived
    /// processes that will touch any chunk, e.g. the node daemon, which receives partner
    /// copies into whatever chunks are free: done once at start, in the background, a
    /// copy no longer pays the first touch of its chunks (about 70-120 ms per GiB on the
    /// AMD VM). Returns the chunks populated by this call.
    pub fn populate_all(&self) -> u32 {
        let mut n = 0;
        for c in 0..self.seg.layout.mem_chunks {
            if !self.seg.is_populated(c) {
                self.seg.populate(c);
                n += 1;
            }
        }
        n
    }

    /// The memory data region as mapped in this process (CRUISE `get_data_region`).
    pub fn data_region(&self) -> DataRegion {
        DataRegion {
            base: self.seg.data_base(),
            len: self.seg.layout.data_size(),
            chunk_size: self.chunk_size(),
        }
    }
}

impl Store {
    /// A second descriptor of the store's spill file (checked when the store was
    /// attached), for readers such as the drain agent; `None` without a spill file.
    pub fn spill_file(&self) -> Result<Option<File>> {
        match self.seg.spill() {
            Some(f) => f
                .try_clone()
                .map(Some)
                .map_err(|e| StoreError::io("duplicate the spill file descriptor", e)),
            None => Ok(None),
        }
    }
}
