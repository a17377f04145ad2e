//! Small files: a file whose data fits in [`Layout::small_max`] (64 KiB, at most a
//! quarter of a chunk) keeps it in a *run* of 4 KiB blocks inside a memory chunk shared
//! with other small files, instead of in whole chunks, so it costs what it holds (rounded
//! up to a power of two of blocks: a 4 KiB file takes 4 KiB, a 5 KiB file 8 KiB).
//!
//! - A chunk divided into blocks has the owner [`SMALL_OWNER`] in the chunk table, and
//!   the number of its blocks in use as its `logical` (with `meta` kept to match). Runs
//!   are aligned to their size (a power of two), so one never crosses a bitmap word or a
//!   chunk. Before a run is taken from a chunk, the chunk's bits are counted against that
//!   number: a damaged bitmap is rebuilt from the inodes, never trusted to hand out a
//!   file's blocks.
//! - Source of truth: each inode's `srun` (first block + 1, block count), one 64-bit store
//!   made under the allocation lock and the file lock. The block bitmap at `block_map_off`
//!   is derived: rebuilt from the inodes with the free stacks (a dead allocation-lock
//!   holder, `fsck --repair`). A small-file chunk none of whose blocks is used goes back
//!   to the free stack.
//! - The run's checksum `ssum` works like a chunk's `sum` (high-water mark, CRC32C, stale
//!   bit); an overwrite marks it stale before the copy and recomputes it right after (a
//!   run is at most 64 KiB).
//! - A write that would take the file past its run moves the data, under the allocation
//!   lock, to a free run twice as large or more (copy, then the `srun` store commits; the
//!   old blocks are freed). A write past [`Layout::small_max`] moves it into a whole chunk
//!   at logical index 0 (copy and checksum into the chunk, then clearing `srun` commits).
//!   A writer killed between the two leaves a file with both a run and chunks: the run is
//!   the truth and the chunks are freed when the file lock's death is noticed.
//! - Runs are taken from memory only; when no memory chunk is left for a new run, the
//!   file gets whole chunks as before (from the spill file).

use crate::checksum::{crc32c, crc32c_append_zeros};
use crate::error::{Result, StoreError};
use crate::integrity::seal_data;
use crate::layout::*;
use crate::store::Store;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// A small file's run of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// First block (index in the memory data region, in 4 KiB blocks).
    pub first: u32,
    /// Number of blocks (a power of two).
    pub blocks: u32,
}

impl Run {
    /// Bytes the run holds.
    pub(crate) fn bytes(self) -> u64 {
        (self.blocks as u64) << BLOCK_SHIFT
    }

    /// Byte offset of the run in the memory data region.
    pub(crate) fn offset(self) -> u64 {
        (self.first as u64) << BLOCK_SHIFT
    }

    fn pack(self) -> u64 {
        (self.blocks as u64) << 32 | (self.first as u64 + 1)
    }
}

/// Blocks of the run for a file of `end` bytes: a power of two.
pub(crate) fn blocks_for(end: u64) -> u32 {
    (end.div_ceil(BLOCK_SIZE).max(1) as u32).next_power_of_two()
}

impl Store {
    /// The run of `fid`, if it has one; `Err(what)` when its `srun` is damaged (out of
    /// range, misaligned, or in a chunk that is not a small-file chunk).
    pub(crate) fn run_raw(&self, fid: u32) -> std::result::Result<Option<Run>, String> {
        let seg = &*self.seg;
        let v = seg.inode(fid).srun.load(Acquire);
        if v == 0 {
            return Ok(None);
        }
        let (first1, blocks) = (v as u32, (v >> 32) as u32);
        let l = &seg.layout;
        let max = (l.small_max() >> BLOCK_SHIFT) as u32;
        let bad = || format!("small-file run {v:#x} out of range");
        if first1 == 0 || !blocks.is_power_of_two() || blocks > max {
            return Err(bad());
        }
        let run = Run {
            first: first1 - 1,
            blocks,
        };
        if !run.first.is_multiple_of(blocks) || run.first as u64 + blocks as u64 > l.mem_blocks() {
            return Err(bad());
        }
        let c = run.first >> l.blocks_shift();
        if seg.chunk(c).owner.load(Acquire) != SMALL_OWNER {
            return Err(format!(
                "small-file run in chunk {c}, which is not a small-file chunk"
            ));
        }
        Ok(Some(run))
    }

    /// [`Store::run_raw`] with damage reported as EIO naming the file.
    pub(crate) fn run_of(&self, fid: u32, path: &str) -> Result<Option<Run>> {
        self.run_raw(fid).map_err(|w| self.damaged(fid, path, &w))
    }

    /// Address of byte `off` of `run` in this process (its chunk's page tables
    /// populated). `off` must be at most `run.bytes()`.
    pub(crate) fn run_ptr(&self, run: Run, off: usize) -> *mut u8 {
        let seg = &*self.seg;
        let bs = seg.layout.blocks_shift();
        let c = run.first >> bs;
        let within = ((run.first - (c << bs)) as usize) << BLOCK_SHIFT;
        assert!(off as u64 <= run.bytes());
        // SAFETY: a validated run lies inside memory chunk c, and off is inside the run.
        unsafe { seg.chunk_ptr(c).add(within + off) }
    }

    /// CRC32C of the first `len` bytes of `run` (at most the run). Caller holds the
    /// file's lock.
    pub(crate) fn run_crc(&self, run: Run, len: usize) -> u32 {
        let len = len.min(run.bytes() as usize);
        // SAFETY: the range is inside the run, whose bytes change only under the file
        // lock the caller holds.
        crc32c(unsafe { std::slice::from_raw_parts(self.run_ptr(run, 0), len) })
    }

    /// Copy bytes of `run` from `off` into `dst` (inside the run). File lock held.
    pub(crate) fn run_read(&self, run: Run, off: usize, dst: &mut [u8]) {
        assert!((off + dst.len()) as u64 <= run.bytes());
        // SAFETY: the source range is inside the run (checked above) and cannot overlap
        // the caller's buffer; the file lock keeps writers out.
        unsafe { std::ptr::copy_nonoverlapping(self.run_ptr(run, off), dst.as_mut_ptr(), dst.len()) };
    }

    // ------------------------------------------------------------ the block bitmap

    /// The bitmap word and mask of `n` blocks from `first` (aligned runs of at most 64
    /// blocks never cross a word).
    fn block_bits(&self, first: u32, n: u32) -> (&std::sync::atomic::AtomicU64, u64) {
        let w = self.seg.block_word(first as u64 / 64);
        let mask = if n >= 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << (first % 64)
        };
        (w, mask)
    }

    /// Are all blocks of memory chunk `c` free in the bitmap? Allocation lock held.
    fn chunk_blocks_free(&self, c: u32) -> bool {
        let bs = self.seg.layout.blocks_shift();
        let (start, n) = (c << bs, 1u32 << bs);
        if n <= 64 {
            let (w, m) = self.block_bits(start, n);
            w.load(Relaxed) & m == 0
        } else {
            (0..n / 64).all(|k| self.seg.block_word((start / 64 + k) as u64).load(Relaxed) == 0)
        }
    }

    /// Blocks of memory chunk `c` marked used in the bitmap. Allocation lock held.
    fn chunk_blocks_used(&self, c: u32) -> u32 {
        let bs = self.seg.layout.blocks_shift();
        let (start, n) = (c << bs, 1u32 << bs);
        if n <= 64 {
            let (w, m) = self.block_bits(start, n);
            (w.load(Relaxed) & m).count_ones()
        } else {
            (0..n / 64)
                .map(|k| {
                    self.seg
                        .block_word((start / 64 + k) as u64)
                        .load(Relaxed)
                        .count_ones()
                })
                .sum()
        }
    }

    /// Record `used` blocks in use in small-file chunk `c` (its `logical`, and `meta`
    /// to match). Allocation lock held.
    fn set_chunk_used(&self, c: u32, used: u32) {
        let e = self.seg.chunk(c);
        e.logical.store(used, Relaxed);
        e.meta
            .store(crate::integrity::chunk_meta(c, SMALL_OWNER, used), Relaxed);
    }

    /// A free aligned run of `blocks` in small-file chunk `c`. Allocation lock held.
    /// `Err(())` when the chunk's bitmap does not match its count of used blocks.
    fn free_run_in(&self, c: u32, blocks: u32) -> std::result::Result<Option<u32>, ()> {
        let seg = &*self.seg;
        if c >= seg.layout.mem_chunks || seg.chunk(c).owner.load(Relaxed) != SMALL_OWNER {
            return Ok(None);
        }
        if self.chunk_blocks_used(c) != seg.chunk(c).logical.load(Relaxed) {
            return Err(());
        }
        let bs = seg.layout.blocks_shift();
        let (start, end) = (c << bs, (c + 1) << bs);
        let mut b = start;
        while b < end {
            let (w, m) = self.block_bits(b, blocks);
            let v = w.load(Relaxed);
            if v & m == 0 {
                return Ok(Some(b));
            }
            if v == u64::MAX {
                b = (b / 64 + 1) * 64; // a full word
            } else {
                b += blocks;
            }
        }
        Ok(None)
    }

    /// Take a free run of `blocks` blocks: in a small-file chunk with room, or in a new one
    /// from memory. None when no memory chunk is left. Allocation lock held.
    fn take_run_locked(&self, blocks: u32) -> Result<Option<Run>> {
        let seg = &*self.seg;
        let sb = seg.sb();
        let bs = seg.layout.blocks_shift();
        let hint = sb.small_hint.load(Relaxed);
        let found = std::iter::once(hint)
            .chain(0..seg.layout.mem_chunks)
            .map(|c| self.free_run_in(c, blocks))
            .find(|r| !matches!(r, Ok(None)));
        let first = match found {
            Some(Ok(Some(b))) => b,
            Some(_) => {
                // A chunk's bitmap disagrees with its count of used blocks: damage.
                tracing::warn!(store = %seg.name, "small-file block bitmap damaged; rebuilding it");
                self.mark_dirty();
                self.rebuild_free_stacks();
                return self.take_run_locked(blocks);
            }
            None => match self.pop_chunk_locked(SMALL_OWNER, 0, true) {
                Ok(c) => c << bs,
                Err(StoreError::NoSpace) => return Ok(None),
                Err(e) => return Err(e),
            },
        };
        let c = first >> bs;
        sb.small_hint.store(c, Relaxed);
        let (w, m) = self.block_bits(first, blocks);
        w.fetch_or(m, Relaxed);
        self.set_chunk_used(c, seg.chunk(c).logical.load(Relaxed) + blocks);
        Ok(Some(Run { first, blocks }))
    }

    /// Free `run`'s blocks; a small-file chunk left with none goes back to the free stack.
    /// Allocation lock held.
    fn release_run_locked(&self, run: Run) {
        let (w, m) = self.block_bits(run.first, run.blocks);
        w.fetch_and(!m, Relaxed);
        let c = run.first >> self.seg.layout.blocks_shift();
        let used = self.seg.chunk(c).logical.load(Relaxed);
        self.set_chunk_used(c, used.saturating_sub(run.blocks));
        if self.chunk_blocks_free(c) {
            self.release_small_chunk(c);
        }
    }

    /// Give an unused small-file chunk back to the free stack. Allocation lock held.
    pub(crate) fn release_small_chunk(&self, c: u32) {
        let e = self.seg.chunk(c);
        e.owner.store(0, Release);
        e.meta.store(0, Relaxed);
        self.push_free(c);
    }

    /// Set `fid`'s run: the commit point of every run change. Allocation and file lock
    /// held.
    fn set_run(&self, fid: u32, run: Option<Run>) {
        let ino = self.seg.inode(fid);
        ino.srun.store(run.map_or(0, Run::pack), Release);
        seal_data(&self.seg, fid);
        ino.cgen.fetch_add(1, Release);
    }

    /// Rebuild the block bitmap from the inodes' runs and release small-file chunks with
    /// no run. Allocation lock held (called with the free-stack rebuild, before it).
    pub(crate) fn rebuild_block_map(&self) {
        let seg = &*self.seg;
        let l = &seg.layout;
        for i in 0..l.mem_blocks().div_ceil(64) {
            seg.block_word(i).store(0, Relaxed);
        }
        for fid in 1..l.max_files {
            if seg.inode(fid).kind.load(Acquire) == kind::FREE {
                continue;
            }
            if let Ok(Some(run)) = self.run_raw(fid) {
                let (w, m) = self.block_bits(run.first, run.blocks);
                w.fetch_or(m, Relaxed);
            }
        }
        for c in 0..l.mem_chunks {
            if seg.chunk(c).owner.load(Acquire) != SMALL_OWNER {
                continue;
            }
            if self.chunk_blocks_free(c) {
                let e = seg.chunk(c);
                e.owner.store(0, Release);
                e.meta.store(0, Relaxed);
            } else {
                self.set_chunk_used(c, self.chunk_blocks_used(c));
            }
        }
    }

    // ------------------------------------------------------------ file operations

    /// Write `src` at `off` into `fid`'s run, taking or enlarging the run as needed.
    /// Callers check that the file has no chunks and `off + src.len()` is at most
    /// `small_max`. Returns false (nothing written) when no memory is left for a run: the
    /// caller then writes whole chunks. File lock held.
    pub(crate) fn small_write(&self, fid: u32, path: &str, src: &[u8], off: u64) -> Result<bool> {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        let end = off + src.len() as u64;
        let mut run = self.run_of(fid, path)?;
        if run.is_none_or(|r| r.bytes() < end) {
            let _g = self.alloc_lock();
            let Some(new) = self.take_run_locked(blocks_for(end))? else {
                return Ok(false);
            };
            if let Some(old) = run {
                let (hwm, _, _) = unpack_sum(ino.ssum.load(Relaxed));
                let n = (hwm as u64).min(old.bytes()) as usize;
                // SAFETY: the new run was free, so the ranges do not overlap; both are
                // inside their runs; the file lock keeps other writers out.
                unsafe { std::ptr::copy_nonoverlapping(self.run_ptr(old, 0), self.run_ptr(new, 0), n) };
            } else {
                ino.ssum.store(0, Relaxed);
            }
            crate::fault::crash_point("small-before-switch");
            self.set_run(fid, Some(new));
            if let Some(old) = run {
                self.release_run_locked(old);
            }
            run = Some(new);
        }
        let run = run.expect("a run was taken above");
        let (hwm, mut crc, stale) = unpack_sum(ino.ssum.load(Relaxed));
        let mut h = (hwm as u64).min(run.bytes()) as usize;
        let at = off as usize;
        let overwrite = at < h;
        if overwrite && !stale {
            // Stale before the copy: a writer killed mid-copy leaves "stale" (recomputed
            // when its death is noticed), never a false mismatch.
            ino.ssum.store(pack_sum(h as u32, crc, true), Release);
            std::sync::atomic::fence(SeqCst);
        }
        if at > h {
            // Bytes between the old high-water mark and this write read as zeros.
            // SAFETY: [h, at) is inside the run (at < end <= run bytes); file lock held.
            unsafe { std::ptr::write_bytes(self.run_ptr(run, h), 0, at - h) };
            crc = crc32c_append_zeros(crc, at - h);
            h = at;
        }
        // SAFETY: [at, end) is inside the run; file lock held; src is the caller's buffer.
        let appended = unsafe { crate::copy::copy_with_crc(self.run_ptr(run, at), src, Some(crc)) };
        let new_hwm = h.max(end as usize);
        let crc = if overwrite || stale {
            self.run_crc(run, new_hwm)
        } else {
            appended.expect("a CRC was given")
        };
        ino.ssum.store(pack_sum(new_hwm as u32, crc, false), Release);
        crate::fault::crash_point("write-before-size");
        if end > ino.size.load(Relaxed) {
            ino.size.store(end, Release);
            seal_data(seg, fid);
        }
        Ok(true)
    }

    /// Keep only the first `len` bytes of `fid`'s run under its checksum (after a
    /// truncation, or a dead writer's bytes past the size). File lock held.
    pub(crate) fn small_trim(&self, fid: u32, len: u64) {
        let Ok(Some(run)) = self.run_raw(fid) else { return };
        let ino = self.seg.inode(fid);
        let (hwm, _, _) = unpack_sum(ino.ssum.load(Relaxed));
        if hwm as u64 > len {
            let n = len.min(run.bytes()) as usize;
            ino.ssum
                .store(pack_sum(n as u32, self.run_crc(run, n), false), Release);
        }
    }

    /// Recompute a stale run checksum (its writer died mid-overwrite). File lock held.
    pub(crate) fn small_recompute_stale(&self, fid: u32) {
        let Ok(Some(run)) = self.run_raw(fid) else { return };
        let ino = self.seg.inode(fid);
        let (hwm, _, stale) = unpack_sum(ino.ssum.load(Relaxed));
        if stale {
            let n = (hwm as u64).min(run.bytes()) as usize;
            ino.ssum
                .store(pack_sum(n as u32, self.run_crc(run, n), false), Release);
        }
    }

    /// Free `fid`'s run, if any (O_TRUNC, truncation to 0, the file's release). File
    /// lock held.
    pub(crate) fn free_run(&self, fid: u32) {
        if self.seg.inode(fid).srun.load(Acquire) == 0 {
            return;
        }
        let _g = self.alloc_lock();
        let run = self.run_raw(fid);
        self.set_run(fid, None);
        self.seg.inode(fid).ssum.store(0, Relaxed);
        if let Ok(Some(run)) = run {
            self.release_run_locked(run);
        }
    }

    /// Free chunks of `fid` from logical index `from`, and its run when `from` is 0.
    /// File lock held.
    pub(crate) fn free_data_from(&self, fid: u32, from: u32) {
        self.free_chunks_from(fid, from);
        if from == 0 {
            self.free_run(fid);
        }
    }

    /// Clear `fid`'s run after its bytes were copied into chunk 0 (the commit point of a
    /// move into whole chunks). File lock held.
    pub(crate) fn drop_run_after_move(&self, fid: u32, run: Run) {
        let _g = self.alloc_lock();
        self.set_run(fid, None);
        self.seg.inode(fid).ssum.store(0, Relaxed);
        self.release_run_locked(run);
    }

    /// A file lock's holder died: a file with a run and chunks was being moved into
    /// chunks; the run is the truth, the chunks are freed. File lock held.
    pub(crate) fn undo_interrupted_move(&self, fid: u32) {
        let ino = self.seg.inode(fid);
        if ino.srun.load(Acquire) != 0 && ino.nchunks.load(Relaxed) > 0 {
            tracing::warn!(store = %self.seg.name, fid, "a move into chunks was interrupted; the small-file run stays");
            self.free_chunks_from(fid, 0);
        }
    }
}
