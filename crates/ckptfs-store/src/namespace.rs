//! The namespace: name hash, child lists, inode allocation and release, and path
//! resolution. Their rebuild after a crash is in `recovery.rs`.

use crate::error::{Result, StoreError};
use crate::integrity::{fid_ok, seal_data, seal_ns};
use crate::layout::*;
use crate::segment::now;
use crate::store::{name_hash, Ns, Store};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

impl Store {
    pub(crate) fn lookup_child(&self, _ns: &Ns, parent: u32, name: &[u8]) -> Option<u32> {
        let seg = &*self.seg;
        let mask = seg.layout.hash_cap - 1;
        let mut i = name_hash(parent, name) & mask;
        // Bounded: a damaged table with no empty slot must not loop forever.
        for _ in 0..seg.layout.hash_cap {
            let v = seg.hash_slot(i).load(Relaxed);
            if v == 0 {
                return None;
            }
            let fid = v - 1;
            // A damaged slot naming no valid file is skipped (fsck rebuilds the table).
            // SAFETY: namespace lock held (the `Ns` proof).
            if fid_ok(seg, fid)
                && seg.inode(fid).kind.load(Relaxed) != kind::FREE
                && seg.inode(fid).parent.load(Relaxed) == parent
                // SAFETY: namespace lock held (the `Ns` proof).
                && unsafe { seg.name_of(fid) } == name
            {
                return Some(fid);
            }
            i = (i + 1) & mask;
        }
        None
    }

    pub(crate) fn hash_insert(&self, _ns: &Ns, fid: u32) {
        let seg = &*self.seg;
        let mask = seg.layout.hash_cap - 1;
        // SAFETY: namespace lock held.
        let mut i = name_hash(seg.inode(fid).parent.load(Relaxed), unsafe { seg.name_of(fid) }) & mask;
        for _ in 0..seg.layout.hash_cap {
            if seg.hash_slot(i).load(Relaxed) == 0 {
                seg.hash_slot(i).store(fid + 1, Relaxed);
                return;
            }
            i = (i + 1) & mask;
        }
        // Full of damaged entries (it holds at most half live ones): rebuilt by fsck.
        tracing::warn!(store = %seg.name, "name hash table has no free slot (damaged)");
    }

    pub(crate) fn hash_remove(&self, _ns: &Ns, fid: u32) {
        let seg = &*self.seg;
        let mask = seg.layout.hash_cap - 1;
        let home = |f: u32| {
            if !fid_ok(seg, f) {
                return None;
            }
            // SAFETY: namespace lock held.
            Some(name_hash(seg.inode(f).parent.load(Relaxed), unsafe { seg.name_of(f) }) & mask)
        };
        let Some(mut i) = home(fid) else { return };
        let mut probes = 0;
        loop {
            let v = seg.hash_slot(i).load(Relaxed);
            if v == 0 || probes > seg.layout.hash_cap {
                return; // not present
            }
            if v == fid + 1 {
                break;
            }
            i = (i + 1) & mask;
            probes += 1;
        }
        // Backward-shift deletion keeps probe chains intact without tombstones.
        let mut j = i;
        for _ in 0..seg.layout.hash_cap {
            j = (j + 1) & mask;
            let v = seg.hash_slot(j).load(Relaxed);
            if v == 0 {
                break;
            }
            let Some(k) = home(v - 1) else {
                continue; // a damaged slot: left for fsck's rebuild
            };
            let between = if i <= j { i < k && k <= j } else { i < k || k <= j };
            if between {
                continue;
            }
            seg.hash_slot(i).store(v, Relaxed);
            i = j;
        }
        seg.hash_slot(i).store(0, Relaxed);
    }

    pub(crate) fn link_child(&self, _ns: &Ns, parent: u32, fid: u32) {
        let seg = &*self.seg;
        let p = seg.inode(parent);
        let me = seg.inode(fid);
        let mut head = p.first_child.load(Relaxed);
        if !fid_ok(seg, head) {
            head = NONE; // damaged link: the namespace rebuild restores the list
        }
        me.prev_sib.store(NONE, Relaxed);
        me.next_sib.store(head, Relaxed);
        if head != NONE {
            seg.inode(head).prev_sib.store(fid, Relaxed);
        }
        p.first_child.store(fid, Relaxed);
    }

    pub(crate) fn unlink_child(&self, _ns: &Ns, fid: u32) {
        let seg = &*self.seg;
        let me = seg.inode(fid);
        let (prev, next) = (me.prev_sib.load(Relaxed), me.next_sib.load(Relaxed));
        if fid_ok(seg, next) {
            seg.inode(next).prev_sib.store(prev, Relaxed);
        }
        if fid_ok(seg, prev) {
            seg.inode(prev).next_sib.store(next, Relaxed);
        } else {
            let parent = me.parent.load(Relaxed);
            if fid_ok(seg, parent) {
                seg.inode(parent).first_child.store(next, Relaxed);
            }
        }
        me.prev_sib.store(NONE, Relaxed);
        me.next_sib.store(NONE, Relaxed);
    }

    /// Take an inode from the free stack and give it a name in `parent`.
    /// A file created for writing starts out `writing`, so that a creator killed before it
    /// registered its lease leaves an `incomplete` file, not a complete empty one.
    pub(crate) fn alloc_inode(
        &self,
        ns: &Ns,
        k: u32,
        parent: u32,
        name: &[u8],
        mode: u32,
        writing: bool,
    ) -> Result<u32> {
        self.alloc_inode_with(ns, k, parent, name, mode, writing, &|_| Ok(()))
    }

    /// [`Store::alloc_inode`], calling `fill` on the new id before the `kind` store that
    /// commits it (a symlink's target is written there, so that a creator killed at any
    /// point leaves either no symlink or a complete one). A `fill` error frees what it
    /// took and creates nothing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn alloc_inode_with(
        &self,
        ns: &Ns,
        k: u32,
        parent: u32,
        name: &[u8],
        mode: u32,
        writing: bool,
        fill: &dyn Fn(u32) -> Result<()>,
    ) -> Result<u32> {
        self.alloc_inode_full(ns, k, parent, name, mode, writing, (NONE, 0), fill)
    }

    /// [`Store::alloc_inode_with`] with a link entry's target file id and a device
    /// node's number (`(NONE, 0)` for anything else), both part of the namespace record
    /// written before the `kind` store.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn alloc_inode_full(
        &self,
        ns: &Ns,
        k: u32,
        parent: u32,
        name: &[u8],
        mode: u32,
        writing: bool,
        (target, rdev): (u32, u64),
        fill: &dyn Fn(u32) -> Result<()>,
    ) -> Result<u32> {
        let seg = &*self.seg;
        let sb = seg.sb();
        let top = sb.fid_top.load(Relaxed);
        if top == 0 {
            return Err(StoreError::TooManyFiles(seg.layout.max_files));
        }
        let fid = if top <= seg.layout.max_files {
            seg.fid_stack(top - 1).load(Relaxed)
        } else {
            NONE
        };
        if fid == ROOT || !fid_ok(seg, fid) || seg.inode(fid).kind.load(Acquire) != kind::FREE {
            // A damaged top or entry: the stack is derived from the inodes, rebuild it.
            tracing::warn!(store = %seg.name, top, fid, "free file id stack damaged; rebuilding the namespace");
            self.mark_dirty();
            self.rebuild_namespace(ns);
            if sb.fid_top.load(Relaxed) == 0 {
                return Err(StoreError::TooManyFiles(seg.layout.max_files));
            }
            return self.alloc_inode_full(ns, k, parent, name, mode, writing, (target, rdev), fill);
        }
        let ino = seg.inode(fid);
        let t = now();
        let (uid, gid) = crate::integrity::caller_ids();
        ino.uid.store(uid, Relaxed);
        ino.gid.store(gid, Relaxed);
        ino.atime_ns.store(t, Relaxed);
        ino.mode.store(mode & 0o7777, Relaxed);
        ino.parent.store(parent, Relaxed);
        // SAFETY: namespace lock held.
        unsafe { seg.set_name(fid, name) };
        ino.first_child.store(NONE, Relaxed);
        ino.flags.store(0, Relaxed);
        ino.wstate.store(
            if writing {
                wstate::WRITING
            } else {
                wstate::COMPLETE
            },
            Relaxed,
        );
        ino.nchunks.store(0, Relaxed);
        ino.size.store(0, Relaxed);
        ino.mtime_ns.store(t, Relaxed);
        ino.ctime_ns.store(t, Relaxed);
        ino.last_writer_pid.store(0, Relaxed);
        // A freed inode holds no live lease (see `release_if_unused`); slots a killed
        // claimer left half-filled are found by a recount when they matter.
        ino.nleases.store(0, Relaxed);
        ino.srun.store(0, Relaxed);
        ino.ssum.store(0, Relaxed);
        ino.target.store(target, Relaxed);
        ino.rdev.store(rdev, Relaxed);
        // Its own name; directories and link entries keep no count.
        ino.nlink
            .store(u32::from(k != kind::DIR && k != kind::LINK), Relaxed);
        ino.igen.fetch_add(1, Relaxed);
        ino.cgen.fetch_add(1, Relaxed);
        ino.ns_crc
            .store(crate::integrity::ns_crc_with_kind(seg, fid, k), Relaxed);
        seal_data(seg, fid);
        if let Err(e) = fill(fid) {
            let _g = self.file_lock(fid);
            self.free_run(fid);
            return Err(e);
        }
        // Commit point; a crash before the pop leaves it on the stack too, which the
        // namespace rebuild corrects.
        ino.kind.store(k, Release);
        crate::fault::crash_point("inode-after-kind");
        sb.fid_top.store(top - 1, Release);
        self.hash_insert(ns, fid);
        self.link_child(ns, parent, fid);
        seg.inode(parent).mtime_ns.store(t, Relaxed);
        self.note_name(ns, parent, fid, name);
        Ok(fid)
    }

    /// The file ids in use, ascending, the root left out: those not on the free-id stack.
    /// Reads the stack (4 bytes per free id, in order) instead of every inode's `kind`
    /// (one cache line per inode, 512 bytes apart): on a store whose file count is sized
    /// by its memory (131,072 ids per GiB) the inode scan took 10-20 ms of every attach.
    /// Under the namespace lock the stack holds exactly the free ids (a holder killed
    /// between an inode's `kind` and the stack change left EOWNERDEAD, and the rebuild
    /// has run). A damaged stack (a top past the table, an id out of range) gives every
    /// id; an in-use id damaged onto the stack is left out, which only defers its
    /// reaping to the next open, stat or listing of it (callers check `kind` anyway).
    pub(crate) fn fids_in_use(&self, _ns: &Ns) -> impl Iterator<Item = u32> {
        let seg = &*self.seg;
        let max = seg.layout.max_files;
        let mut used = vec![u64::MAX; (max as usize).div_ceil(64)];
        let top = seg.sb().fid_top.load(Acquire);
        if top < max {
            for i in 0..top {
                let f = seg.fid_stack(i).load(Relaxed);
                if f >= max {
                    used.fill(u64::MAX);
                    break;
                }
                used[f as usize / 64] &= !(1 << (f % 64));
            }
        }
        used[0] &= !1; // the root
        (0..used.len()).flat_map(move |w| {
            let mut bits = used[w];
            std::iter::from_fn(move || {
                let b = (bits != 0).then(|| bits.trailing_zeros())?;
                bits &= bits - 1;
                Some(w as u32 * 64 + b)
            })
            .filter(move |&f| f < max)
        })
    }

    /// Free an inode nobody holds open: its chunks, then the slot.
    pub(crate) fn free_inode(&self, _ns: &Ns, fid: u32) {
        let seg = &*self.seg;
        self.free_data_from(fid, 0);
        let ino = seg.inode(fid);
        ino.size.store(0, Relaxed);
        ino.parent.store(NONE, Relaxed);
        ino.kind.store(kind::FREE, Release);
        self.note_change(fid);
        let sb = seg.sb();
        let t = sb.fid_top.load(Relaxed);
        seg.fid_stack(t).store(fid, Relaxed);
        sb.fid_top.store(t + 1, Release);
    }

    /// Remove a name (an entry: an inode's own name or a link entry). A link entry's slot
    /// is freed at once and its target loses a name; an inode that still has other
    /// names keeps its data (nameless, reached through its link entries); the last name
    /// gone, it is freed unless some live process still has it open.
    pub(crate) fn detach_and_release(&self, ns: &Ns, fid: u32) {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        let t = now();
        let parent = ino.parent.load(Relaxed);
        if fid_ok(seg, parent) {
            seg.inode(parent).mtime_ns.store(t, Relaxed);
            // SAFETY: namespace lock held (the `Ns` proof).
            self.note_name(ns, parent, fid, unsafe { seg.name_of(fid) });
        }
        self.hash_remove(ns, fid);
        self.unlink_child(ns, fid);
        let k = ino.kind.load(Relaxed);
        if k == kind::LINK {
            let target = ino.target.load(Relaxed);
            // A link entry holds no data and is never open: its slot goes back now. A
            // crash from here on is repaired by the namespace rebuild, which recounts
            // every target's names from the link entries left.
            ino.parent.store(NONE, Relaxed);
            crate::fault::crash_point("unlink-link-before-free");
            self.free_slot(fid);
            if self.link_target_ok(target) {
                self.drop_name(ns, target, t);
            }
            return;
        }
        if k != kind::DIR && ino.nlink.load(Relaxed) > 1 {
            // Other names remain (link entries): the inode loses its own name only.
            ino.parent.store(NONE, Relaxed);
            ino.nlink.fetch_sub(1, Relaxed);
            ino.ctime_ns.store(t, Relaxed);
            seal_ns(seg, fid);
            crate::fault::crash_point("unlink-linked-after-detach");
            self.note_change(fid);
            return;
        }
        self.drop_xattrs(ns, fid);
        ino.nlink.store(0, Relaxed);
        ino.flags.fetch_or(iflag::ORPHAN, Release);
        crate::fault::crash_point("unlink-after-orphan-flag");
        ino.parent.store(NONE, Relaxed);
        seal_ns(seg, fid);
        self.release_if_unused(ns, fid);
    }

    /// Does `target` name an inode a link entry may point at (a file, symlink or special
    /// file in use)?
    pub(crate) fn link_target_ok(&self, target: u32) -> bool {
        fid_ok(&self.seg, target)
            && target != ROOT
            && !matches!(
                self.seg.inode(target).kind.load(Acquire),
                kind::FREE | kind::DIR | kind::LINK
            )
    }

    /// One name of `fid` (a link entry) is gone: count it; with no name left, the inode
    /// becomes an orphan, freed unless someone holds it open.
    fn drop_name(&self, ns: &Ns, fid: u32, t: u64) {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        let n = ino.nlink.load(Relaxed).saturating_sub(1);
        ino.nlink.store(n, Relaxed);
        ino.ctime_ns.store(t, Relaxed);
        if n == 0 {
            self.drop_xattrs(ns, fid);
            ino.flags.fetch_or(iflag::ORPHAN, Release);
            ino.parent.store(NONE, Relaxed);
        }
        seal_ns(seg, fid);
        self.note_change(fid);
        if n == 0 {
            self.release_if_unused(ns, fid);
        }
    }

    /// The inode a directory entry names: itself, or a link entry's target. A link entry
    /// whose target is not a file in use, or whose record (the target field included)
    /// fails its checksum, is damaged metadata (EIO): a changed target would otherwise
    /// serve another file's bytes under this name. Namespace lock held.
    pub(crate) fn deref(&self, fid: u32, path: &str) -> Result<u32> {
        let ino = self.seg.inode(fid);
        if ino.kind.load(Acquire) != kind::LINK {
            return Ok(fid);
        }
        if !crate::integrity::ns_ok(&self.seg, fid) {
            return Err(self.damaged(fid, path, "hard link record checksum mismatch"));
        }
        let t = ino.target.load(Relaxed);
        if self.link_target_ok(t) {
            Ok(t)
        } else {
            Err(self.damaged(fid, path, "hard link names no file"))
        }
    }

    /// Free a slot that holds no data and that nobody can hold open (a link entry).
    pub(crate) fn free_slot(&self, fid: u32) {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        ino.parent.store(NONE, Relaxed);
        ino.kind.store(kind::FREE, Release);
        self.note_change(fid);
        let sb = seg.sb();
        let t = sb.fid_top.load(Relaxed);
        seg.fid_stack(t).store(fid, Relaxed);
        sb.fid_top.store(t + 1, Release);
    }

    /// Free an orphan once no live process holds it.
    pub(crate) fn release_if_unused(&self, ns: &Ns, fid: u32) {
        let ino = self.seg.inode(fid);
        let _g = self.file_lock(fid);
        self.reap_leases(fid);
        // kind check: a close and an unlink may both try to free the same orphan. A record
        // failing its checksum is never freed (fsck quarantines it).
        if ino.kind.load(Acquire) != kind::FREE
            && ino.flags.load(Relaxed) & iflag::ORPHAN != 0
            && !self.has_holder(fid)
            && crate::integrity::ns_ok(&self.seg, fid)
        {
            self.free_inode(ns, fid);
        }
    }

    /// Resolve `path` to a file id. Holds the ns lock via `ns`.
    pub(crate) fn resolve(&self, ns: &Ns, comps: &[&str], path: &str) -> Result<u32> {
        self.check_live()?;
        let seg = &*self.seg;
        let mut cur = ROOT;
        for c in comps {
            if seg.inode(cur).kind.load(Relaxed) != kind::DIR {
                return Err(StoreError::NotDir(path.into()));
            }
            cur = self
                .lookup_child(ns, cur, c.as_bytes())
                .ok_or_else(|| StoreError::NotFound(path.into()))?;
            cur = self.deref(cur, path)?;
        }
        Ok(cur)
    }

    /// Resolve all but the last component; returns (parent id, last name).
    pub(crate) fn resolve_parent<'p>(
        &self,
        ns: &Ns,
        comps: &[&'p str],
        path: &str,
    ) -> Result<(u32, &'p str)> {
        let (last, dirs) = comps
            .split_last()
            .ok_or_else(|| StoreError::Busy(format!("{path}: the root directory")))?;
        let parent = self.resolve(ns, dirs, path)?;
        if self.seg.inode(parent).kind.load(Relaxed) != kind::DIR {
            return Err(StoreError::NotDir(path.into()));
        }
        Ok((parent, last))
    }

    /// Resolve a name to be created: its parent must exist and the name must not (the
    /// root counts as existing). Returns (parent id, last name).
    pub(crate) fn resolve_new<'p>(&self, ns: &Ns, comps: &[&'p str], path: &str) -> Result<(u32, &'p str)> {
        let (parent, name) = self.resolve_parent(ns, comps, path).map_err(|e| match e {
            StoreError::Busy(_) => StoreError::Exists(path.into()),
            e => e,
        })?;
        if self.lookup_child(ns, parent, name.as_bytes()).is_some() {
            return Err(StoreError::Exists(path.into()));
        }
        Ok((parent, name))
    }

    /// Resolve an existing entry other than the root; returns (parent id, its id).
    pub(crate) fn resolve_entry(&self, ns: &Ns, comps: &[&str], path: &str) -> Result<(u32, u32)> {
        let (parent, name) = self.resolve_parent(ns, comps, path)?;
        let fid = self
            .lookup_child(ns, parent, name.as_bytes())
            .ok_or_else(|| StoreError::NotFound(path.into()))?;
        Ok((parent, fid))
    }
}

#[cfg(test)]
mod tests {
    use crate::layout::ROOT;
    use crate::{OpenFlags, Store, StoreOptions};
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn fids_in_use_are_the_ids_off_the_free_stack_or_all_when_it_is_damaged() {
        let name = format!("hsm-fids-{}", std::process::id());
        let _ = Store::destroy(&name);
        let opts = StoreOptions {
            mem_size: Some(8 << 20),
            chunk_size: Some(64 << 10),
            max_files: Some(300),
            ..StoreOptions::named(&name)
        };
        let s = Store::create(&opts).unwrap();
        s.mkdir("/d", 0o755).unwrap();
        for i in 0..200 {
            s.open(&format!("/d/f{i}"), OpenFlags::CREATE, 0o644)
                .unwrap()
                .close()
                .unwrap();
        }
        for i in (0..200).step_by(3) {
            s.unlink(&format!("/d/f{i}")).unwrap();
        }
        // Held open and unlinked: an orphan, in use until closed.
        let held = s.open("/d/f1", OpenFlags::READ, 0).unwrap();
        s.unlink("/d/f1").unwrap();
        let mut want: Vec<u32> = s.list_all().iter().map(|(_, st)| st.ino as u32 - 1).collect();
        want.retain(|&f| f != ROOT);
        want.push(held.ino() as u32 - 1);
        want.sort();
        let got: Vec<u32> = s.fids_in_use(&s.ns()).collect();
        assert_eq!(got, want);
        // A damaged stack (top past the table) yields every id: nothing is skipped.
        let sb = s.seg.sb();
        let top = sb.fid_top.load(Relaxed);
        sb.fid_top.store(u32::MAX, Relaxed);
        assert_eq!(s.fids_in_use(&s.ns()).count(), 299);
        sb.fid_top.store(top, Relaxed);
        drop(held);
        drop(s);
        Store::destroy(&name).unwrap();
    }
}
