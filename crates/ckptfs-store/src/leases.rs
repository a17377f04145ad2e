//! Leases (who holds a file open), dead-holder reaping, and what a dead writer leaves
//! behind (trimmed past the size, stale checksums recomputed, the file incomplete).
//!
//! Leases live in one table shared by all files (`LeaseSlot`s at `lease_off`), so an inode
//! need not reserve room for 64 of them. A file's slots are found from a home position
//! derived from its id, scanning forward until the inode's `nleases` slots were seen; a
//! file with no lease costs no scan. A slot is claimed with a compare-and-swap of its `fid`
//! from 0 (files claim concurrently, each under its own lock) and changed afterwards only
//! under its file's lock. A claimer killed between the swap and the count leaves a slot
//! with pid 0, freed by the next reaping (the file lock's holder died, so the count is
//! recomputed from the table first).

use crate::error::{Result, StoreError};
use crate::layout::*;
use crate::process::{self, ProcId};
use crate::store::Store;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

impl Store {
    fn lease_home(&self, fid: u32) -> u32 {
        ((fid as u64).wrapping_mul(0x9E37_79B1) % self.seg.layout.lease_slots as u64) as u32
    }

    /// The lease slots of `fid`: from its home slot on, until `nleases` were found (none
    /// scanned when it holds no lease). Caller holds the file lock.
    pub(crate) fn leases_of(&self, fid: u32) -> impl Iterator<Item = &LeaseSlot> + '_ {
        let seg = &*self.seg;
        let n = seg.layout.lease_slots;
        let home = self.lease_home(fid);
        let want = seg.inode(fid).nleases.load(Relaxed).min(n) as usize;
        (0..if want == 0 { 0 } else { n })
            .map(move |k| seg.lease((home + k) % n))
            .filter(move |l| l.fid.load(Acquire) == fid + 1)
            .take(want)
    }

    /// Count `fid`'s lease slots in the whole table (after its lock holder died).
    pub(crate) fn recount_leases(&self, fid: u32) {
        let seg = &*self.seg;
        let n = (0..seg.layout.lease_slots)
            .filter(|&i| seg.lease(i).fid.load(Acquire) == fid + 1)
            .count() as u32;
        seg.inode(fid).nleases.store(n, Relaxed);
    }

    /// Give slot `l` of `fid` back to the table. Caller holds the file lock.
    fn release_slot(&self, fid: u32, l: &LeaseSlot) {
        l.writers.store(0, Relaxed);
        l.readers.store(0, Relaxed);
        l.wrote.store(0, Relaxed);
        l.pid.store(0, Relaxed);
        l.fid.store(0, Release);
        let ino = self.seg.inode(fid);
        let n = ino.nleases.load(Relaxed);
        ino.nleases.store(n.saturating_sub(1), Relaxed);
    }

    /// Whether some live-or-not-yet-reaped process holds `fid` open. File lock held.
    pub(crate) fn has_holder(&self, fid: u32) -> bool {
        self.leases_of(fid).any(|l| l.pid.load(Relaxed) != 0)
    }

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
        let held: Vec<&LeaseSlot> = self.leases_of(fid).collect();
        for l in held {
            let pid = l.pid.load(Relaxed);
            if pid == 0 {
                // Left by a claimer killed before it filled the slot in.
                self.release_slot(fid, l);
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
                self.release_slot(fid, l);
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
        self.small_recompute_stale(fid);
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
            .leases_of(fid)
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
        self.free_data_from(fid, size.div_ceil(1 << shift) as u32);
        self.small_trim(fid, size);
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
        self.leases_of(fid)
            .any(|l| l.pid.load(Relaxed) != 0 && l.writers.load(Relaxed) > 0)
    }

    /// Register `who` as holding `fid` open. Caller holds the file lock.
    pub(crate) fn add_lease(&self, fid: u32, who: ProcId, write: bool) -> Result<()> {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        let mine = |l: &&LeaseSlot| l.pid.load(Relaxed) == who.pid && l.start.load(Relaxed) == who.start;
        let slot = match self.leases_of(fid).find(mine) {
            Some(l) => l,
            None => {
                if ino.nleases.load(Relaxed) as usize >= LEASES {
                    self.reap_leases(fid);
                    if ino.nleases.load(Relaxed) as usize >= LEASES {
                        return Err(StoreError::TooManyOpeners(format!("inode {}", fid + 1)));
                    }
                }
                let n = seg.layout.lease_slots;
                let home = self.lease_home(fid);
                let claimed = (0..n).map(|k| seg.lease((home + k) % n)).find(|l| {
                    l.fid.load(Relaxed) == 0 && l.fid.compare_exchange(0, fid + 1, Acquire, Relaxed).is_ok()
                });
                let Some(l) = claimed else {
                    return Err(StoreError::TooManyOpeners(format!(
                        "inode {}: the store's lease table ({n} slots) is full",
                        fid + 1
                    )));
                };
                crate::fault::crash_point("lease-after-claim");
                ino.nleases.fetch_add(1, Relaxed);
                l.writers.store(0, Relaxed);
                l.readers.store(0, Relaxed);
                l.wrote.store(0, Relaxed);
                l.start.store(who.start, Relaxed);
                l
            }
        };
        if write {
            slot.writers.fetch_add(1, Relaxed);
        } else {
            slot.readers.fetch_add(1, Relaxed);
        }
        slot.pid.store(who.pid, Release);
        Ok(())
    }

    /// Undo one `add_lease`. Caller holds the file lock.
    pub(crate) fn drop_lease(&self, fid: u32, who: ProcId, write: bool) {
        if let Some(l) = self
            .leases_of(fid)
            .find(|l| l.pid.load(Relaxed) == who.pid && l.start.load(Relaxed) == who.start)
        {
            let c = if write { &l.writers } else { &l.readers };
            let v = c.load(Relaxed);
            c.store(v.saturating_sub(1), Relaxed);
            if l.writers.load(Relaxed) == 0 && l.readers.load(Relaxed) == 0 {
                self.release_slot(fid, l);
            }
        }
    }

    /// At attach: turn files whose writers died into `incomplete` and free orphans whose
    /// holders died. Visits only the inodes in use (see [`Store::fids_in_use`]): a store
    /// sized for many files but holding few costs a read of the free-id stack, not of
    /// every inode.
    pub(crate) fn recover_dead_openers(&self) {
        let seg = &*self.seg;
        let ns = self.ns();
        for fid in self.fids_in_use(&ns) {
            let ino = seg.inode(fid);
            if ino.kind.load(Acquire) == kind::FREE {
                continue;
            }
            let busy = ino.nleases.load(Relaxed) != 0;
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
