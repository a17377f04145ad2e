//! Change counters, for caches of the store's contents outside the segment (the FUSE
//! daemon's kernel attribute, entry and page caches).
//!
//! Every namespace change (create, unlink, rename, mkdir, rmdir, chmod, chown, times) and
//! every change of a file's data or size takes the next value of the store-wide sequence
//! `seq` ([`Store::change_seq`]) and stores it in the inode's `changed_seq`. Name changes
//! (a name added to or removed from a directory) are also logged, under the namespace
//! lock, in a ring of [`CHANGE_LOG`] entries. A poller remembers the sequence it last saw
//! and asks [`Store::changed_since`] what changed after it: the inodes to invalidate and
//! the directory entries to forget; when the ring was overwritten past its sequence, or a
//! crash recovery or repair changed the namespace without logging, the answer says so
//! (`complete: false`) and the poller drops everything it cached.
//!
//! Ordering, without a lock on the write path: a writer first marks the inode as changing
//! (`changed_seq = u64::MAX`), then takes the next `seq`, then stores it in the inode (all
//! `SeqCst`). A poller reads `seq` first, then the inodes. If the poller's read of an
//! inode misses the mark, the writer's `seq` was taken after the poller's, so the next poll
//! reports it; if it sees the mark, the inode is reported now. A writer killed between the
//! two stores leaves the mark, so that inode is reported by every poll until its next
//! change: extra invalidations, never a missed one.

use crate::layout::*;
use crate::store::{Ns, Store};
use serde::Serialize;
use std::sync::atomic::Ordering::{Relaxed, Release, SeqCst};

/// An inode changed after the sequence a poll asked about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangedInode {
    /// Inode number.
    pub ino: u64,
    /// Its current generation (a freed and reused slot has a new one).
    pub generation: u32,
    /// False when the inode has been freed since.
    pub exists: bool,
}

/// A name added to or removed from a directory after the sequence a poll asked about
/// (a rename logs the old and the new name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangedName {
    /// Inode number of the directory.
    pub parent_ino: u64,
    /// The name (lossily converted to UTF-8).
    pub name: String,
    /// Inode number the name referred to.
    pub ino: u64,
    /// That inode's generation then.
    pub generation: u32,
    /// Sequence number of the change.
    pub seq: u64,
}

/// What changed after a sequence number ([`Store::changed_since`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Changes {
    /// The store's sequence when the answer was taken: pass it to the next call.
    pub seq: u64,
    /// False when changes may be missing from the lists (the ring of name changes was
    /// overwritten past the sequence asked about, or a crash recovery or repair changed
    /// the namespace): drop every cached entry and attribute.
    pub complete: bool,
    /// Inodes changed (attributes, data, size, names, freed), in inode order.
    pub inodes: Vec<ChangedInode>,
    /// Names added or removed, oldest first.
    pub names: Vec<ChangedName>,
}

impl Store {
    /// The store-wide change sequence: it grows with every change of the namespace or of
    /// a file's data, size, times, mode or owner. Cheap (one atomic load): poll it, and
    /// call [`Store::changed_since`] when it moved.
    pub fn change_seq(&self) -> u64 {
        self.seg.sb().changes.seq.load(SeqCst)
    }

    /// How many chunk-sized pieces applications have written through file handles
    /// (wrapping; bytes landed from the network by `netin` do not count). Cheap (one
    /// atomic load): a daemon that sees it move knows an application is writing now.
    pub fn write_count(&self) -> u64 {
        self.seg.sb().changes.writes.load(Relaxed)
    }

    /// How many times a file's last writer has closed it (wrapping). Cheap (one atomic
    /// load); [`Store::wait_for_close`] sleeps until it moves.
    pub fn close_seq(&self) -> u32 {
        self.seg.sb().changes.closes.load(SeqCst)
    }

    /// Sleep until [`Store::close_seq`] differs from `seen` (a last writer closed a file
    /// meanwhile), at most `timeout`; returns its value then. For a daemon that acts on
    /// complete files (partner copies): it starts at once instead of at its next scan.
    pub fn wait_for_close(&self, seen: u32, timeout: std::time::Duration) -> u32 {
        let c = &self.seg.sb().changes;
        // Register first, then check: a closer bumps first, then looks for waiters, so
        // either it sees us or we see its bump (all SeqCst).
        c.close_waiters.fetch_add(1, SeqCst);
        if c.closes.load(SeqCst) == seen {
            crate::lock::futex_wait(&c.closes, seen, timeout);
        }
        let _ = c.close_waiters.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1));
        c.closes.load(SeqCst)
    }

    /// A file's last writer closed it: bump the close count and wake the waiters. A
    /// waiter count left high by a killed waiter only costs closes a futex call.
    pub(crate) fn note_closed(&self) {
        let c = &self.seg.sb().changes;
        c.closes.fetch_add(1, SeqCst);
        if c.close_waiters.load(SeqCst) != 0 {
            crate::lock::futex_wake(&c.closes);
        }
    }

    /// What changed after sequence `since` (a value [`Store::change_seq`] or an earlier
    /// answer's `seq` returned). A change may be reported twice (in this answer and the
    /// next); none is left out unless `complete` is false.
    pub fn changed_since(&self, since: u64) -> Changes {
        self.changed_since_among(since, None::<fn() -> Vec<u64>>)
    }

    /// Like [`Store::changed_since`], but of the inodes only those `inos` returns (inode
    /// numbers; out of range ones are skipped) and those of the changed names (the name's
    /// inode and its directory) are looked at. A poller that caches only some inodes
    /// (the FUSE daemon: those the kernel holds) reads those instead of every inode slot
    /// of the store (131,072 in a 1 GiB store, one cache line each).
    ///
    /// `inos` is called after the answer's `seq` is read: an inode the caller starts to
    /// cache after that is looked at by the next call (its change, if any, has a later
    /// sequence), so none is missed.
    pub fn changed_since_among(&self, since: u64, inos: Option<impl FnOnce() -> Vec<u64>>) -> Changes {
        let seg = &*self.seg;
        let ch = &seg.sb().changes;
        let mut out = Changes {
            complete: true,
            ..Default::default()
        };
        {
            let _ns = self.ns();
            out.seq = ch.seq.load(SeqCst);
            if out.seq == since {
                return out;
            }
            out.complete = ch.lost_seq.load(SeqCst) <= since && out.seq > since;
            let total = ch.names.load(Relaxed);
            let first = total.saturating_sub(CHANGE_LOG as u64);
            for n in first..total {
                let slot = (n % CHANGE_LOG as u64) as u32;
                let e = seg.change_entry(slot);
                let seq = e.seq.load(Relaxed);
                if seq <= since {
                    continue;
                }
                out.names.push(ChangedName {
                    parent_ino: e.parent.load(Relaxed) as u64 + 1,
                    // SAFETY: namespace lock held.
                    name: String::from_utf8_lossy(unsafe { seg.change_name(slot) }).into_owned(),
                    ino: e.fid.load(Relaxed) as u64 + 1,
                    generation: e.igen.load(Relaxed),
                    seq,
                });
            }
        }
        let max = seg.layout.max_files;
        let changed = |fid: u32| {
            let ino = seg.inode(fid);
            (ino.changed_seq.load(SeqCst) > since).then(|| ChangedInode {
                ino: fid as u64 + 1,
                generation: ino.igen.load(Relaxed),
                exists: !matches!(ino.kind.load(Relaxed), kind::FREE | kind::LINK),
            })
        };
        match inos {
            None => out.inodes.extend((0..max).filter_map(changed)),
            Some(inos) => {
                // Few of the inodes asked about have changed: sort those, not the list.
                out.inodes.extend(
                    inos()
                        .into_iter()
                        .chain(out.names.iter().flat_map(|n| [n.ino, n.parent_ino]))
                        .filter(|&i| i >= 1 && i <= max as u64)
                        .filter_map(|i| changed((i - 1) as u32)),
                );
                out.inodes.sort_unstable_by_key(|i| i.ino);
                out.inodes.dedup_by_key(|i| i.ino);
            }
        }
        out
    }

    /// Record a change of inode `fid` (see the module comment for the ordering).
    pub(crate) fn note_change(&self, fid: u32) {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        ino.changed_seq.store(u64::MAX, SeqCst);
        let s = seg.sb().changes.seq.fetch_add(1, SeqCst) + 1;
        ino.changed_seq.store(s, SeqCst);
    }

    /// Record that `name` was added to or removed from directory `parent` (it referred to
    /// `fid`), and the change of both inodes.
    pub(crate) fn note_name(&self, _ns: &Ns, parent: u32, fid: u32, name: &[u8]) {
        let seg = &*self.seg;
        // A link entry's name means its target's inode (the one the kernel was given).
        let fid = match seg.inode(fid).kind.load(Relaxed) {
            kind::LINK => {
                let t = seg.inode(fid).target.load(Relaxed);
                if self.link_target_ok(t) {
                    t
                } else {
                    fid
                }
            }
            _ => fid,
        };
        let ch = &seg.sb().changes;
        self.note_change(fid);
        self.note_change(parent);
        let s = ch.seq.fetch_add(1, SeqCst) + 1;
        let n = ch.names.load(Relaxed);
        let slot = (n % CHANGE_LOG as u64) as u32;
        let e = seg.change_entry(slot);
        // Slot is about to be overwritten: a poller older than its entry misses it.
        ch.lost_seq.fetch_max(e.seq.load(Relaxed), SeqCst);
        e.seq.store(0, Relaxed);
        e.parent.store(parent, Relaxed);
        e.fid.store(fid, Relaxed);
        e.igen.store(seg.inode(fid).igen.load(Relaxed), Relaxed);
        // SAFETY: namespace lock held (the `Ns` proof).
        unsafe { seg.set_change_name(slot, name) };
        e.seq.store(s, Release);
        ch.names.store(n + 1, Release);
    }

    /// Record that the namespace changed in ways not logged (a crash recovery's rebuild,
    /// a repair): every poller must drop its caches.
    pub(crate) fn note_lost(&self) {
        let ch = &self.seg.sb().changes;
        let s = ch.seq.fetch_add(1, SeqCst) + 1;
        ch.lost_seq.fetch_max(s, SeqCst);
    }
}
