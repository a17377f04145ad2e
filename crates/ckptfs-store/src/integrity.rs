//! The checks that keep damaged metadata from being served as data: every inode and
//! chunk record is checked against its CRC32C (the records and how they are sealed:
//! [`crate::records`]) before the store trusts it, and a mismatch is reported as damage
//! naming the file.

use crate::error::{Result, StoreError};
use crate::layout::*;
pub(crate) use crate::records::{
    caller_ids, chunk_meta, chunk_ok, data_ok, fid_ok, ns_crc_with_kind, ns_ok, seal_data, seal_ns,
};
use crate::store::Store;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Is an owned chunk of `fid` that records no bytes (high-water mark 0) damage? Every
/// chunk is taken by a write of at least one byte (a write, a landing, a small file's
/// move with bytes to move) and freed when a truncation leaves it past the end, so a
/// finished file (`complete`, no writer left) never owns an empty one; its checksum word
/// zeroed by damage would otherwise verify, the CRC of no bytes being 0. While a writer
/// works, or after one died (`incomplete`), a chunk taken but not yet written is normal.
pub(crate) fn empty_chunk_is_damage(store: &Store, fid: u32) -> bool {
    store.seg.inode(fid).wstate.load(Acquire) == wstate::COMPLETE && !store.has_writer(fid)
}

impl Store {
    /// Check both records of inode `fid` (namespace lock held; takes the file lock).
    pub(crate) fn check_inode(&self, fid: u32, path: &str) -> Result<()> {
        self.check_live()?;
        let seg = &*self.seg;
        if !ns_ok(seg, fid) {
            return Err(self.damaged(fid, path, "inode name/parent/mode record checksum mismatch"));
        }
        let _g = self.file_lock(fid);
        self.check_data(fid, path)
    }

    /// Check inode `fid`'s data record (file lock held).
    pub(crate) fn check_data(&self, fid: u32, path: &str) -> Result<()> {
        self.check_live()?;
        if data_ok(&self.seg, fid) {
            Ok(())
        } else {
            Err(self.damaged(fid, path, "inode size/chunk-count record checksum mismatch"))
        }
    }

    pub(crate) fn damaged(&self, fid: u32, path: &str, what: &str) -> StoreError {
        tracing::error!(store = %self.seg.name, fid, path, what, "damaged metadata");
        StoreError::Damaged {
            path: if path.is_empty() {
                format!("inode {}", fid as u64 + 1)
            } else {
                path.to_string()
            },
            what: what.to_string(),
        }
    }

    /// Change the owner ids (stored and reported, not enforced).
    pub fn chown(&self, path: &str, uid: u32, gid: u32) -> Result<()> {
        let comps = crate::store::components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.check_inode(fid, path)?;
        let ino = self.seg.inode(fid);
        ino.uid.store(uid, Relaxed);
        ino.gid.store(gid, Relaxed);
        seal_ns(&self.seg, fid);
        ino.ctime_ns.store(crate::segment::now(), Relaxed);
        self.note_change(fid);
        Ok(())
    }

    /// Set the access and modification times (ns since the epoch).
    pub fn set_times(&self, path: &str, atime_ns: u64, mtime_ns: u64) -> Result<()> {
        let comps = crate::store::components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        let ino = self.seg.inode(fid);
        ino.atime_ns.store(atime_ns, Relaxed);
        ino.mtime_ns.store(mtime_ns, Relaxed);
        ino.ctime_ns.store(crate::segment::now(), Relaxed);
        self.note_change(fid);
        Ok(())
    }

    /// Recompute every in-use inode's namespace CRC: after a namespace-lock holder died,
    /// any record may have been half-changed. Namespace lock held.
    pub(crate) fn reseal_all_ns(&self) {
        let seg = &*self.seg;
        for fid in 0..seg.layout.max_files {
            if seg.inode(fid).kind.load(Acquire) != kind::FREE {
                seal_ns(seg, fid);
            }
        }
    }
}

/// Name of the quarantine directory under the root.
pub const LOST_FOUND: &str = "lost+found";

impl Store {
    /// The `/lost+found` directory, created (mode 0700) if missing. Namespace lock held.
    pub(crate) fn lost_found(&self, ns: &crate::store::Ns) -> Option<u32> {
        if let Some(f) = self.lookup_child(ns, ROOT, LOST_FOUND.as_bytes()) {
            if self.seg.inode(f).kind.load(Acquire) == kind::DIR {
                return Some(f);
            }
        }
        self.alloc_inode(ns, kind::DIR, ROOT, LOST_FOUND.as_bytes(), 0o700, false)
            .ok()
    }

    /// Move inode `fid` (its namespace record cannot be trusted, or its name collides
    /// with an undamaged file's) into `/lost+found` as `ino<N>`, keeping its data, and
    /// mark a file `incomplete` so that it is never drained or restored as complete.
    /// A file whose size record is damaged keeps at most the bytes it holds. Returns its
    /// new path. Namespace lock held; `fid`'s file lock not held.
    pub(crate) fn quarantine_inode(&self, ns: &crate::store::Ns, fid: u32) -> Option<String> {
        let seg = &*self.seg;
        let lf = self.lost_found(ns)?;
        if lf == fid {
            return None;
        }
        let ino = seg.inode(fid);
        if ino.kind.load(Acquire) == kind::LINK && !ns_ok(seg, fid) {
            // Its target is part of the damaged record: keep the entry a link only to the
            // file whose own record says it lacks a name; else it names nothing.
            self.settle_damaged_link(fid);
        }
        let name = format!("ino{}", fid as u64 + 1);
        // Out of whatever list and hash slot it is in; rebuilt from the records later.
        ino.parent.store(lf, Relaxed);
        // SAFETY: namespace lock held.
        unsafe { seg.set_name(fid, name.as_bytes()) };
        ino.flags.fetch_and(!iflag::ORPHAN, Release);
        // A hard link stays one (to its target, which counts it); anything else but a
        // directory becomes a regular file holding what the inode holds.
        if !matches!(ino.kind.load(Acquire), kind::DIR | kind::LINK) {
            ino.kind.store(kind::FILE, Release);
        }
        ino.mode.store(ino.mode.load(Relaxed) & 0o777, Relaxed);
        seal_ns(seg, fid);
        self.hash_insert(ns, fid);
        self.link_child(ns, lf, fid);
        {
            let _g = self.file_lock(fid);
            let owned: Vec<u32> = (0..seg.nchunks())
                .filter(|&c| seg.chunk(c).owner.load(Acquire) == fid + 1)
                .collect();
            if ino.kind.load(Relaxed) == kind::FILE && !data_ok(seg, fid) {
                // The size is part of the damaged record: never claim more bytes than
                // the file holds (the end of its last trusted chunk, or its run).
                let held = match self.run_raw(fid) {
                    Ok(Some(r)) => r.bytes(),
                    Ok(None) | Err(_) => owned
                        .iter()
                        .filter(|&&c| chunk_ok(seg, c))
                        .map(|&c| {
                            let e = seg.chunk(c);
                            let (hwm, _, _) = unpack_sum(e.sum.load(Acquire));
                            (u64::from(e.logical.load(Relaxed)) << seg.layout.chunk_shift)
                                + u64::from(hwm).min(1 << seg.layout.chunk_shift)
                        })
                        .max()
                        .unwrap_or(0),
                };
                ino.size.store(ino.size.load(Acquire).min(held), Release);
            }
            ino.nchunks.store(owned.len() as u32, Relaxed);
            seal_data(seg, fid);
            ino.cgen.fetch_add(1, Release);
            if ino.kind.load(Relaxed) == kind::FILE {
                ino.wstate.store(wstate::INCOMPLETE, Release);
            }
        }
        Some(format!("/{LOST_FOUND}/{name}"))
    }

    /// Does the root directory's data record verify? Namespace lock held.
    pub(crate) fn root_data_ok(&self) -> bool {
        let _g = self.file_lock(ROOT);
        data_ok(&self.seg, ROOT)
    }

    /// Restore the root directory's fixed fields (kind, no parent, no name, no data) and
    /// reseal it; its children are found again by the namespace rebuild. Namespace lock
    /// held.
    pub(crate) fn reset_root(&self, _ns: &crate::store::Ns) {
        let seg = &*self.seg;
        let root = seg.inode(ROOT);
        root.kind.store(kind::DIR, Release);
        root.parent.store(NONE, Relaxed);
        root.name_len.store(0, Relaxed);
        root.target.store(NONE, Relaxed);
        root.nlink.store(0, Relaxed);
        root.rdev.store(0, Relaxed);
        root.mode.store(root.mode.load(Relaxed) & 0o7777, Relaxed);
        seal_ns(seg, ROOT);
        let _g = self.file_lock(ROOT);
        root.size.store(0, Relaxed);
        root.nchunks.store(0, Relaxed);
        seal_data(seg, ROOT);
    }

    /// Give chunk `c`, whose entry cannot be attributed to a file (its checksum does not
    /// match owner and index), to a new file `/lost+found/chunk<C>` of its written length,
    /// marked `incomplete`. Namespace and allocation locks not held by the caller except
    /// the namespace lock. Returns the new path.
    pub(crate) fn quarantine_chunk(&self, ns: &crate::store::Ns, c: u32) -> Option<String> {
        let seg = &*self.seg;
        let lf = self.lost_found(ns)?;
        let name = format!("chunk{c}");
        if self.lookup_child(ns, lf, name.as_bytes()).is_some() {
            return None;
        }
        let fid = self
            .alloc_inode(ns, kind::FILE, lf, name.as_bytes(), 0o600, false)
            .ok()?;
        let ino = seg.inode(fid);
        let _g = self.file_lock(fid);
        let e = seg.chunk(c);
        let hwm = (crate::layout::unpack_sum(e.sum.load(Acquire)).0 as u64).min(seg.layout.chunk_size());
        {
            let _a = self.alloc_lock();
            e.logical.store(0, Relaxed);
            e.meta.store(chunk_meta(c, fid + 1, 0), Relaxed);
            e.owner.store(fid + 1, Release);
        }
        ino.nchunks.store(1, Relaxed);
        ino.size.store(hwm, Release);
        seal_data(seg, fid);
        ino.cgen.fetch_add(1, Release);
        ino.wstate.store(wstate::INCOMPLETE, Release);
        Some(format!("/{LOST_FOUND}/{name}"))
    }
}
