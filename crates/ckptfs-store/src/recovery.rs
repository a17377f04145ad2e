//! Lock acquisition with dead-holder recovery: a process SIGKILLed holding the namespace,
//! allocation or a file lock is detected by the next locker, which rebuilds what the dead
//! holder may have left half-changed from the sources of truth (inode records, chunk
//! owners). The namespace rebuild itself is in `namespace.rs`.

use crate::integrity::{fid_ok, seal_data, seal_ns};
use crate::layout::*;
use crate::lock::{Acquired, Guard};
use crate::store::{Ns, Store};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

impl Store {
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
            // The dead holder may have been between a field and its record checksum (an
            // unlink between setting ORPHAN and resealing, say): adopt every record as it
            // is before the rebuild judges them, or such a file would be taken for a
            // damaged one and moved to lost+found instead of being freed.
            self.reseal_all_ns();
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
            // It may have died between claiming a lease slot and counting it.
            self.recount_leases(fid);
            // Or while moving a small file's data into chunks.
            self.undo_interrupted_move(fid);
            // It may have died between changing the size or count and its checksum.
            seal_data(&self.seg, fid);
            // Its chunk list may have changed under every cached copy.
            ino.cgen.fetch_add(1, Release);
        }
        g
    }

    /// Rebuild both free stacks from chunk ownership (the source of truth). Caller holds
    /// the allocation lock.
    pub(crate) fn rebuild_free_stacks(&self) {
        let seg = &*self.seg;
        // Small-file chunks none of whose blocks a file uses become free first.
        self.rebuild_block_map();
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

    /// Free a link entry's slot during the namespace rebuild (before the free-id stack
    /// is final: it is pushed like any freed slot).
    fn drop_slot_in_rebuild(&self, fid: u32) {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        ino.parent.store(NONE, Relaxed);
        ino.kind.store(kind::FREE, Release);
        let sb = seg.sb();
        let t = sb.fid_top.load(Relaxed);
        if t < seg.layout.max_files {
            seg.fid_stack(t).store(fid, Relaxed);
            sb.fid_top.store(t + 1, Release);
        }
    }

    /// Rebuild the name hash, child lists and file id stack from the inode records;
    /// replay an interrupted rename; recount hard links; free orphans nobody holds.
    /// Caller holds the ns lock.
    pub(crate) fn rebuild_namespace(&self, ns: &Ns) {
        let seg = &*self.seg;
        self.note_lost();
        let sb = seg.sb();
        let ri = &sb.rename;
        if ri.active.load(Acquire) == 1 {
            let src = ri.src.load(Relaxed);
            let dst_parent = ri.dst_parent.load(Relaxed);
            let victim = ri.victim.load(Relaxed);
            let n = (ri.name_len.load(Relaxed) as usize).min(NAME_MAX);
            // SAFETY: namespace lock held.
            let name = unsafe { seg.intent_name()[..n].to_vec() };
            if fid_ok(seg, victim) && victim != src && seg.inode(victim).kind.load(Relaxed) != kind::FREE {
                seg.inode(victim).flags.fetch_or(iflag::ORPHAN, Relaxed);
                seg.inode(victim).parent.store(NONE, Relaxed);
                seal_ns(seg, victim);
            }
            if fid_ok(seg, src) && fid_ok(seg, dst_parent) {
                seg.inode(src).parent.store(dst_parent, Relaxed);
                // SAFETY: namespace lock held.
                unsafe { seg.set_name(src, &name) };
                seal_ns(seg, src);
            } else {
                tracing::warn!(store = %seg.name, src, dst_parent, "rename intent names no valid inode (damaged); dropped");
            }
            ri.active.store(0, Release);
        }
        for i in 0..seg.layout.hash_cap {
            seg.hash_slot(i).store(0, Relaxed);
        }
        let max = seg.layout.max_files;
        for fid in 0..max {
            let ino = seg.inode(fid);
            ino.first_child.store(NONE, Relaxed);
            ino.next_sib.store(NONE, Relaxed);
            ino.prev_sib.store(NONE, Relaxed);
        }
        let mut top = 0;
        let mut dropped_runs = false;
        for fid in (1..max).rev() {
            if seg.inode(fid).kind.load(Acquire) == kind::FREE {
                seg.fid_stack(top).store(fid, Relaxed);
                top += 1;
                // A symlink creator killed after writing its target, before the `kind`
                // store that commits it: nothing was created; its run goes back.
                if seg.inode(fid).srun.load(Relaxed) != 0 {
                    seg.inode(fid).srun.store(0, Release);
                    dropped_runs = true;
                }
            }
        }
        sb.fid_top.store(top, Release);
        if dropped_runs {
            let _a = self.alloc_lock();
            self.rebuild_free_stacks();
        }
        // Names per inode from the link entries (the source of truth for `nlink`): a
        // link or unlink killed between the entry and the count is recounted here. An
        // orphaned entry (a rename's victim) no longer counts; one naming no file is
        // damage and is dropped (its target is gone: it named nothing readable).
        let mut links = vec![0u32; max as usize];
        let mut dead_links = Vec::new();
        for fid in 1..max {
            let ino = seg.inode(fid);
            if ino.kind.load(Acquire) != kind::LINK {
                continue;
            }
            let t = ino.target.load(Relaxed);
            // No parent: its unlink was under way (the name is what a link entry is).
            let nameless = ino.parent.load(Relaxed) == NONE;
            if nameless || ino.flags.load(Relaxed) & iflag::ORPHAN != 0 || !self.link_target_ok(t) {
                dead_links.push(fid);
            } else {
                links[t as usize] += 1;
            }
        }
        for &fid in &dead_links {
            let i = seg.inode(fid);
            if i.flags.load(Relaxed) & iflag::ORPHAN == 0 && i.parent.load(Relaxed) != NONE {
                tracing::warn!(store = %seg.name, fid, "hard link naming no file dropped");
            }
            self.drop_slot_in_rebuild(fid);
        }
        let mut orphans = Vec::new();
        let mut misplaced = Vec::new();
        // Records whose checksum holds claim their names first: a name damaged into
        // another file's name must not push the undamaged file out.
        let order: Vec<u32> = {
            let (good, bad): (Vec<u32>, Vec<u32>) = (1..max).partition(|&f| crate::integrity::ns_ok(seg, f));
            good.into_iter().chain(bad).collect()
        };
        for fid in order {
            let ino = seg.inode(fid);
            if ino.kind.load(Acquire) == kind::FREE {
                continue;
            }
            let parent = ino.parent.load(Relaxed);
            let k = ino.kind.load(Relaxed);
            if k != kind::DIR && k != kind::LINK {
                let was_ok = crate::integrity::ns_ok(seg, fid);
                let extra = links[fid as usize];
                let orphan = ino.flags.load(Relaxed) & iflag::ORPHAN != 0;
                if extra > 0 && (orphan || parent == NONE) {
                    // Nameless: reached through its link entries only (its own name was
                    // removed, or it was a rename's victim), never an orphan.
                    ino.flags.fetch_and(!iflag::ORPHAN, Relaxed);
                    ino.parent.store(NONE, Relaxed);
                    ino.nlink.store(extra, Relaxed);
                    if was_ok {
                        seal_ns(seg, fid);
                    }
                    continue;
                }
                if !orphan && parent == NONE && was_ok {
                    // Its last link entry went away and the holder died before marking
                    // it: an orphan, whose record says so itself (no name).
                    ino.flags.fetch_or(iflag::ORPHAN, Relaxed);
                }
                let named = u32::from(ino.flags.load(Relaxed) & iflag::ORPHAN == 0);
                ino.nlink.store(named + extra, Relaxed);
                if was_ok {
                    seal_ns(seg, fid);
                }
            }
            let broken = parent == NONE
                || parent >= max
                || seg.inode(parent).kind.load(Relaxed) != kind::DIR
                // SAFETY: namespace lock held.
                || self.lookup_child(ns, parent, unsafe { seg.name_of(fid) }).is_some();
            if ino.flags.load(Relaxed) & iflag::ORPHAN != 0 {
                if crate::integrity::ns_ok(seg, fid) {
                    ino.parent.store(NONE, Relaxed);
                    orphans.push(fid);
                } else {
                    // Maybe a named file whose flag was damaged: kept, not freed.
                    misplaced.push(fid);
                }
                continue;
            }
            if broken {
                // A named file whose parent is gone or whose name another file already
                // has: only damage does this. Keep it (quarantined below), never free it.
                misplaced.push(fid);
                continue;
            }
            self.hash_insert(ns, fid);
            self.link_child(ns, parent, fid);
        }
        // Any record may have been half-changed by the dead holder (or just orphaned).
        self.reseal_all_ns();
        for fid in misplaced {
            let to = self.quarantine_inode(ns, fid);
            tracing::warn!(store = %seg.name, fid, ?to, "inode with a broken or duplicate name moved to lost+found");
        }
        for fid in orphans {
            self.release_if_unused(ns, fid);
        }
    }
}
