//! Leases (who holds a file open), dead-holder reaping, and what a dead writer leaves
//! behind (trimmed past the size, stale checksums recomputed, the file incomplete).

use crate::error::{Result, StoreError};
use crate::layout::*;
use crate::process::{self, ProcId};
use crate::store::Store;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

impl Store {
    /// Drop leases of processes that no longer run. Returns true if a dead writer that
    /// had changed the file was found. Caller holds the file lock.
    ///
    /// A dead holder that opened the file for writing but never changed it (a forked
    /// child that inherited the descriptor, say) leaves the file as it was: the other
    /// writers' normal last close still makes it complete. A dead holder that changed it
    /// marks it [`iflag::DEAD_WRITER`] for the rest of the writing session, so the last
    /// close leaves it incomplete whoever closes it and whenever the death is noticed.
    pub(crate) fn reap_leases(&self, fid: u32) -> bool {
        let ino = self.seg.inode(fid);
        let mut dead_writer = false;
        for l in &ino.leases {
            let pid = l.pid.load(Relaxed);
            if pid == 0 {
                continue;
            }
            let p = ProcId {
                pid,
                start: l.start.load(Relaxed),
            };
            if !process::alive(p) {
                if l.writers.load(Relaxed) > 0 && l.wrote.load(Relaxed) != 0 {
                    dead_writer = true;
                }
                l.writers.store(0, Relaxed);
                l.readers.store(0, Relaxed);
                l.wrote.store(0, Relaxed);
                l.pid.store(0, Release);
                self.mark_dirty();
            }
        }
        if dead_writer {
            tracing::warn!(store = %self.seg.name, fid, "a writer died with the file open: marked incomplete");
            ino.flags.fetch_or(iflag::DEAD_WRITER, Release);
            self.trim_to_size(fid);
            self.recompute_stale(fid);
        }
        let live_writer = self.has_writer(fid);
        if !live_writer && (dead_writer || ino.wstate.load(Relaxed) == wstate::WRITING) {
            ino.wstate.store(wstate::INCOMPLETE, Release);
        }
        dead_writer
    }

    /// Recompute every stale checksum of `fid` (after its writer died mid-overwrite): the
    /// bytes up to each chunk's high-water mark are what the file now holds, and from
    /// here on a reader verifies them like any others instead of getting them unchecked.
    /// A chunk that cannot be read (spill I/O error) stays stale, which readers treat as
    /// EIO once no live writer explains it. Caller holds the file lock.
    pub(crate) fn recompute_stale(&self, fid: u32) {
        let seg = &*self.seg;
        if seg.inode(fid).nchunks.load(Relaxed) == 0 {
            return;
        }
        for c in 0..seg.nchunks() {
            let e = seg.chunk(c);
            if e.owner.load(Acquire) != fid + 1 {
                continue;
            }
            let (hwm, _, stale) = unpack_sum(e.sum.load(Acquire));
            if stale && (hwm as u64) <= seg.layout.chunk_size() {
                if let Ok(crc) = crate::file::chunk_crc(self, c, hwm as usize) {
                    e.sum.store(pack_sum(hwm, crc, false), Release);
                }
            }
        }
    }

    /// Record that `who` changed the file's data (see [`Lease::wrote`]). Caller holds the
    /// file lock.
    pub(crate) fn mark_wrote(&self, fid: u32, who: ProcId) {
        if let Some(l) = self
            .seg
            .inode(fid)
            .leases
            .iter()
            .find(|l| l.pid.load(Relaxed) == who.pid && l.start.load(Relaxed) == who.start)
        {
            l.wrote.store(1, Release);
        }
    }

    /// Forget what a dead writer left past the file size (the write it did not finish):
    /// chunks wholly past it, and bytes past it in the last chunk. Otherwise growing the
    /// file later (ftruncate, pwrite past the end) would show them instead of zeros.
    /// Caller holds the file lock.
    pub(crate) fn trim_to_size(&self, fid: u32) {
        let seg = &*self.seg;
        let size = seg.inode(fid).size.load(Acquire);
        let shift = seg.layout.chunk_shift;
        self.free_chunks_from(fid, size.div_ceil(1 << shift) as u32);
        let within = (size & ((1 << shift) - 1)) as u32;
        let last = (size >> shift) as u32;
        let found = (0..seg.nchunks()).find(|&c| {
            let e = seg.chunk(c);
            e.owner.load(Acquire) == fid + 1 && e.logical.load(Relaxed) == last
        });
        if let Some(c) = found.filter(|_| within > 0) {
            let e = seg.chunk(c);
            let hwm = unpack_sum(e.sum.load(Acquire)).0;
            if hwm > within && hwm as u64 <= seg.layout.chunk_size() {
                if let Ok(crc) = crate::file::chunk_crc(self, c, within as usize) {
                    e.sum.store(pack_sum(within, crc, false), Release);
                }
            }
        }
    }

    pub(crate) fn has_writer(&self, fid: u32) -> bool {
        self.seg
            .inode(fid)
            .leases
            .iter()
            .any(|l| l.pid.load(Relaxed) != 0 && l.writers.load(Relaxed) > 0)
    }

    /// Register `who` as holding `fid` open. Caller holds the file lock.
    pub(crate) fn add_lease(&self, fid: u32, who: ProcId, write: bool) -> Result<()> {
        let ino = self.seg.inode(fid);
        for attempt in 0..2 {
            let slot = ino
                .leases
                .iter()
                .find(|l| l.pid.load(Relaxed) == who.pid && l.start.load(Relaxed) == who.start)
                .or_else(|| ino.leases.iter().find(|l| l.pid.load(Relaxed) == 0));
            if let Some(l) = slot {
                if l.pid.load(Relaxed) == 0 {
                    l.writers.store(0, Relaxed);
                    l.readers.store(0, Relaxed);
                    l.wrote.store(0, Relaxed);
                    l.start.store(who.start, Relaxed);
                }
                if write {
                    l.writers.fetch_add(1, Relaxed);
                } else {
                    l.readers.fetch_add(1, Relaxed);
                }
                l.pid.store(who.pid, Release);
                return Ok(());
            }
            if attempt == 0 {
                self.reap_leases(fid);
            }
        }
        Err(StoreError::TooManyOpeners(format!("inode {}", fid + 1)))
    }

    /// Undo one `add_lease`. Caller holds the file lock.
    pub(crate) fn drop_lease(&self, fid: u32, who: ProcId, write: bool) {
        let ino = self.seg.inode(fid);
        if let Some(l) = ino
            .leases
            .iter()
            .find(|l| l.pid.load(Relaxed) == who.pid && l.start.load(Relaxed) == who.start)
        {
            let c = if write { &l.writers } else { &l.readers };
            let v = c.load(Relaxed);
            c.store(v.saturating_sub(1), Relaxed);
            if l.writers.load(Relaxed) == 0 && l.readers.load(Relaxed) == 0 {
                l.wrote.store(0, Relaxed);
                l.pid.store(0, Release);
            }
        }
    }

    /// At attach: turn files whose writers died into `incomplete` and free orphans whose
    /// holders died. Cheap when nothing is open.
    pub(crate) fn recover_dead_openers(&self) {
        let seg = &*self.seg;
        let ns = self.ns();
        for fid in 1..seg.layout.max_files {
            let ino = seg.inode(fid);
            if ino.kind.load(Acquire) == kind::FREE {
                continue;
            }
            let busy = ino.leases.iter().any(|l| l.pid.load(Relaxed) != 0);
            if busy || ino.wstate.load(Relaxed) == wstate::WRITING {
                let _g = self.file_lock(fid);
                self.reap_leases(fid);
            }
            if ino.flags.load(Relaxed) & iflag::ORPHAN != 0 {
                self.release_if_unused(&ns, fid);
            }
        }
    }
}
