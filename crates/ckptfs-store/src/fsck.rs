//! Consistency check and repair (`ckptfs fsck [--repair]`).
//!
//! Chunk ownership (`ChunkEntry::owner`) and the inode records are the source of truth;
//! free stacks, the name hash and child lists are derived from them and can always be
//! rebuilt. File data cannot be repaired: a checksum mismatch is reported with the file
//! and chunk so that the copy on another level can be used.

use crate::file::chunk_crc;
use crate::layout::*;
use crate::store::Store;
use serde::Serialize;
use std::collections::HashSet;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// Short machine-readable kind, e.g. `leaked-chunk`, `corrupt-chunk`.
    pub kind: &'static str,
    /// Human description naming the file and chunk.
    pub detail: String,
    /// Whether `--repair` fixed it.
    pub repaired: bool,
}

/// Result of a check.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FsckReport {
    /// Files examined.
    pub files: u32,
    /// Chunks examined.
    pub chunks: u32,
    /// Bytes whose checksum was verified.
    pub bytes_verified: u64,
    /// Files left incomplete by a dead writer (listed, not a fault of the store).
    pub incomplete: Vec<String>,
    /// Problems found.
    pub problems: Vec<Problem>,
    /// What `--repair` moved into `/lost+found` (also appended to `/lost+found/REPORT`).
    pub quarantined: Vec<String>,
}

impl FsckReport {
    /// No problem left unrepaired.
    pub fn is_clean(&self) -> bool {
        self.problems.iter().all(|p| p.repaired)
    }
}

impl Store {
    /// Check every invariant of the store; with `repair`, fix what can be fixed.
    pub fn fsck(&self, repair: bool) -> FsckReport {
        let seg = &*self.seg;
        let l = seg.layout;
        let cs = l.chunk_size();
        let mut rep = FsckReport::default();
        let ns = self.ns();
        if repair {
            // Repairs move, free and trim without logging each change.
            self.note_lost();
        }
        let add = |rep: &mut FsckReport, kind, detail: String, repaired| {
            rep.problems.push(crate::fsck::Problem {
                kind,
                detail,
                repaired,
            });
        };

        // 0. Inode records against their checksums. A damaged record cannot be trusted
        //    for its name, place or size: repair moves the inode (with its data) into
        //    /lost+found, never frees it and never gives its data to another file.
        let mut ns_bad = false;
        let mut quarantined = HashSet::new();
        if !crate::integrity::ns_ok(seg, ROOT) || !self.root_data_ok() {
            add(
                &mut rep,
                "damaged-inode",
                "the root directory's record checksum does not match".into(),
                repair,
            );
            if repair {
                self.reset_root(&ns);
                ns_bad = true;
            }
        }
        for fid in 1..l.max_files {
            let ino = seg.inode(fid);
            let k = ino.kind.load(Acquire);
            if k == kind::FREE {
                continue;
            }
            let ns_ok = crate::integrity::ns_ok(seg, fid);
            let data_ok = {
                let _g = self.file_lock(fid);
                crate::integrity::data_ok(seg, fid)
            };
            if ns_ok && data_ok && crate::fsck::known_kind(k) {
                continue;
            }
            let what = if !ns_ok {
                "name/parent/mode record"
            } else if !data_ok {
                "size/chunk-count record"
            } else {
                "kind"
            };
            let mut detail = format!("inode {}: {what} damaged (checksum mismatch)", fid + 1);
            if repair {
                quarantined.insert(fid);
                match self.quarantine_inode(&ns, fid) {
                    Some(to) => {
                        detail.push_str(&format!("; moved to {to}, marked incomplete"));
                        rep.quarantined.push(detail.clone());
                    }
                    None => detail.push_str("; could not create /lost+found"),
                }
                ns_bad = true;
            }
            add(&mut rep, "damaged-inode", detail, repair);
        }

        // 1. Namespace: every used inode reachable by name from a directory, free-id
        //    stack exact.
        let mut used = HashSet::new();
        // Names per inode from the link entries, against each inode's `nlink`.
        let mut links = vec![0u32; l.max_files as usize];
        for fid in 1..l.max_files {
            let ino = seg.inode(fid);
            if ino.kind.load(Acquire) == kind::LINK {
                let t = ino.target.load(Relaxed);
                if self.link_target_ok(t) {
                    links[t as usize] += 1;
                } else {
                    ns_bad = true;
                    add(
                        &mut rep,
                        "bad-link",
                        format!(
                            "hard link inode {} names no file (inode {})",
                            fid + 1,
                            t as u64 + 1
                        ),
                        repair,
                    );
                }
            }
        }
        for fid in 1..l.max_files {
            let ino = seg.inode(fid);
            let k = ino.kind.load(Acquire);
            if k == kind::FREE {
                continue;
            }
            used.insert(fid);
            if k != kind::DIR && k != kind::LINK {
                let named = ino.flags.load(Relaxed) & iflag::ORPHAN == 0 && ino.parent.load(Relaxed) != NONE;
                let want = u32::from(named) + links[fid as usize];
                if ino.nlink.load(Relaxed) != want {
                    ns_bad = true;
                    add(
                        &mut rep,
                        "bad-link-count",
                        format!(
                            "inode {} has link count {} but {want} names",
                            fid + 1,
                            ino.nlink.load(Relaxed)
                        ),
                        repair,
                    );
                }
                if !named && links[fid as usize] > 0 {
                    continue; // nameless: reached through its link entries
                }
            }
            if !known_kind(k) {
                add(
                    &mut rep,
                    "bad-inode",
                    format!("inode {} has unknown kind {k}", fid + 1),
                    false,
                );
                continue;
            }
            if ino.flags.load(Relaxed) & iflag::ORPHAN != 0 {
                continue;
            }
            let parent = ino.parent.load(Relaxed);
            // SAFETY: namespace lock held.
            let name = unsafe { seg.name_of(fid) }.to_vec();
            if parent >= l.max_files || self.lookup_child(&ns, parent, &name) != Some(fid) {
                ns_bad = true;
                add(
                    &mut rep,
                    "bad-name-index",
                    format!(
                        "inode {} ({}) is not found under its name",
                        fid + 1,
                        String::from_utf8_lossy(&name)
                    ),
                    repair,
                );
            }
        }
        let top = seg.sb().fid_top.load(Relaxed);
        let mut on_stack = HashSet::new();
        for i in 0..top.min(l.max_files) {
            let f = seg.fid_stack(i).load(Relaxed);
            if f == ROOT || f >= l.max_files || used.contains(&f) || !on_stack.insert(f) {
                ns_bad = true;
            }
        }
        if on_stack.len() + used.len() + 1 != l.max_files as usize {
            ns_bad = true;
        }
        if ns_bad {
            add(
                &mut rep,
                "bad-free-file-list",
                "free file id stack or name index inconsistent".into(),
                repair,
            );
            if repair {
                self.rebuild_namespace(&ns);
            }
        }

        // 1b. Extended attribute records of no named inode (a crash between an inode's
        //     last unlink and its record's removal).
        for (fid, path) in self.stray_xattr_records(&ns) {
            add(
                &mut rep,
                "stray-xattrs",
                format!("{path}: extended attribute record of no named inode"),
                repair,
            );
            if repair {
                self.detach_and_release(&ns, fid);
            }
        }

        // 1b'. The inode flag that says an inode has attributes, against the records.
        for detail in self.fsck_xattr_flags(&ns, repair) {
            add(&mut rep, "xattr-flag", detail, repair);
        }

        // 1c. Small-file runs shared with another file: a quarantined file gives its up.
        if repair && !quarantined.is_empty() {
            self.fsck_shared_runs(&quarantined, &mut rep);
        }

        // 2. Files: leases, checksums, chunks past the end, duplicate logical chunks.
        // Chunk-list generations before the ownership scan: a file whose generation has
        // moved by the time we hold its lock (a live writer allocated, a dead writer's
        // leftovers were trimmed) is rescanned rather than judged from a stale snapshot.
        let gens: Vec<u64> = (0..l.max_files)
            .map(|f| seg.inode(f).cgen.load(Acquire))
            .collect();
        let mut owned: Vec<Vec<u32>> = vec![Vec::new(); l.max_files as usize];
        for c in 0..seg.nchunks() {
            let o = seg.chunk(c).owner.load(Acquire);
            if o != 0 && o <= l.max_files {
                owned[o as usize - 1].push(c);
            }
        }
        let mut reclaimed = false;
        let mut runs = Vec::new();
        for fid in 1..l.max_files {
            let ino = seg.inode(fid);
            // Symlinks keep their target in a run like a small file's: checked the same.
            if !matches!(ino.kind.load(Acquire), kind::FILE | kind::SYMLINK) {
                continue;
            }
            rep.files += 1;
            let _g = self.file_lock(fid);
            self.reap_leases(fid);
            if ino.cgen.load(Acquire) != gens[fid as usize] {
                owned[fid as usize] = (0..seg.nchunks())
                    .filter(|&c| seg.chunk(c).owner.load(Acquire) == fid + 1)
                    .collect();
            }
            let path = self.path_of_fid_locked(&ns, fid);
            self.fsck_lease_count(fid, &path, repair, &mut rep);
            let orphan = ino.flags.load(Relaxed) & iflag::ORPHAN != 0;
            let holders = self.has_holder(fid);
            if orphan && !holders {
                if let (false, Ok(Some(r))) = (repair, self.run_raw(fid)) {
                    runs.push((fid, r)); // still in the bitmap until the orphan is freed
                }
                add(
                    &mut rep,
                    "leaked-orphan",
                    format!("unlinked inode {} held by no live process", fid + 1),
                    repair,
                );
                if repair {
                    drop(_g);
                    self.release_if_unused(&ns, fid);
                }
                continue;
            }
            let writing = ino.wstate.load(Relaxed) == wstate::WRITING;
            if ino.wstate.load(Relaxed) == wstate::INCOMPLETE {
                rep.incomplete.push(path.clone());
            }
            if let Some(run) = self.fsck_run(fid, &path, writing, repair, &mut rep) {
                runs.push((fid, run));
            }
            let size = ino.size.load(Acquire);
            let mut seen = HashSet::new();
            let mut count = 0;
            let mut cut = None;
            for &c in &owned[fid as usize].clone() {
                rep.chunks += 1;
                let e = seg.chunk(c);
                let logical = e.logical.load(Relaxed);
                count += 1;
                let entry_ok = crate::integrity::chunk_ok(seg, c);
                if !entry_ok || !seen.insert(logical) {
                    // Not attributable with certainty (its owner or index was changed,
                    // or two chunks claim one place): never given to a file, quarantined.
                    let mut detail = if entry_ok {
                        format!("{path}: two chunks claim logical chunk {logical}")
                    } else {
                        format!(
                            "{path}: chunk table entry {c} (logical {logical}) damaged (checksum mismatch)"
                        )
                    };
                    if repair {
                        match self.quarantine_chunk(&ns, c) {
                            Some(to) => {
                                detail.push_str(&format!("; its bytes moved to {to}"));
                                rep.quarantined.push(detail.clone());
                                count -= 1;
                                ino.cgen.fetch_add(1, Release);
                            }
                            None => detail.push_str("; could not quarantine"),
                        }
                    }
                    let k = if entry_ok {
                        "doubly-owned"
                    } else {
                        "damaged-chunk-entry"
                    };
                    add(&mut rep, k, detail, repair);
                    continue;
                }
                if writing {
                    continue; // a live writer is changing it; nothing to judge yet
                }
                if logical as u64 * cs >= size {
                    add(
                        &mut rep,
                        "chunk-past-eof",
                        format!("{path}: chunk {c} (logical {logical}) lies past the end ({size} bytes)"),
                        repair,
                    );
                    if repair {
                        self.release_chunk(c);
                        ino.cgen.fetch_add(1, Release);
                        count -= 1;
                    }
                    continue;
                }
                let (hwm, crc, stale) = unpack_sum(e.sum.load(Acquire));
                if hwm as u64 > cs {
                    let mut detail = format!("{path}: chunk {logical} claims {hwm} bytes");
                    if repair {
                        match self.restore_chunk_length(fid, c) {
                            Some(n) => {
                                detail.push_str(&format!(
                                    "; length restored to {n} (from the size; its checksum verifies)"
                                ));
                                rep.bytes_verified += u64::from(n);
                            }
                            None => {
                                detail.push_str("; no length verifies its bytes: the file is cut before it");
                                cut = Some(cut.map_or(logical, |x: u32| x.min(logical)));
                            }
                        }
                    }
                    add(&mut rep, "bad-chunk-length", detail, repair);
                    continue;
                }
                if hwm == 0 && !stale && crate::integrity::empty_chunk_is_damage(self, fid) {
                    add(
                        &mut rep,
                        "empty-chunk",
                        format!("{path}: chunk {logical} records no written bytes (its checksum word was zeroed?)"),
                        false,
                    );
                    continue;
                }
                match chunk_crc(self, c, hwm as usize) {
                    Ok(computed) if stale => {
                        add(&mut rep, "stale-checksum", format!("{path}: chunk {logical} has no current checksum"), repair);
                        if repair {
                            e.sum.store(pack_sum(hwm, computed, false), Release);
                        }
                    }
                    Ok(computed) if computed != crc => add(
                        &mut rep,
                        "corrupt-chunk",
                        format!("{path}: chunk {logical} checksum mismatch (stored {crc:#010x}, data {computed:#010x})"),
                        false,
                    ),
                    Ok(_) => rep.bytes_verified += hwm as u64,
                    Err(err) => add(&mut rep, "unreadable-chunk", format!("{path}: chunk {logical}: {err}"), false),
                }
            }
            if let Some(l) = cut {
                self.cut_before_chunk(fid, l, &path, &mut rep);
                count = (0..seg.nchunks())
                    .filter(|&c| seg.chunk(c).owner.load(Acquire) == fid + 1)
                    .count() as u32;
            }
            if repair && count < ino.nchunks.load(Relaxed) && !writing {
                // A chunk whose owner was damaged to 0 looks free, but its entry's
                // checksum still proves whose it is and where (frees clear it): give it
                // back rather than cut the file.
                for c in 0..seg.nchunks() {
                    let e = seg.chunk(c);
                    let l = e.logical.load(Relaxed);
                    if e.owner.load(Acquire) == 0
                        && e.meta.load(Acquire) == crate::integrity::chunk_meta(c, fid + 1, l)
                        && !seen.contains(&l)
                    {
                        let _a = self.alloc_lock();
                        if e.owner.load(Acquire) != 0 {
                            continue;
                        }
                        e.owner.store(fid + 1, Release);
                        seen.insert(l);
                        count += 1;
                        reclaimed = true;
                        ino.cgen.fetch_add(1, Release);
                        rep.problems.push(Problem {
                            kind: "lost-chunk",
                            detail: format!("{path}: chunk {c} (logical {l}) was marked free; its checksum proves it is this file's: given back"),
                            repaired: true,
                        });
                    }
                }
            }
            if ino.nchunks.load(Relaxed) != count {
                add(
                    &mut rep,
                    "bad-chunk-count",
                    format!(
                        "{path}: records {} chunks, owns {count}",
                        ino.nchunks.load(Relaxed)
                    ),
                    repair,
                );
                if repair {
                    ino.nchunks.store(count, Relaxed);
                    crate::integrity::seal_data(seg, fid);
                    ino.cgen.fetch_add(1, Release);
                    if !writing {
                        self.cut_at_first_hole(fid, &mut rep, &path);
                    }
                }
            }
        }

        self.fsck_lease_table(repair, &mut rep);

        // 3. Chunks owned by nothing valid (quarantined: their bytes may be someone's),
        //    and the free stacks.
        let mut stacks_bad = false;
        for c in 0..seg.nchunks() {
            let o = seg.chunk(c).owner.load(Acquire);
            let small = o == SMALL_OWNER && seg.is_mem(c);
            if o != 0 && !small && (o > l.max_files || seg.inode(o - 1).kind.load(Acquire) != kind::FILE) {
                let mut detail = format!("chunk {c} owned by inode {o}, which is not a file");
                if repair {
                    match self.quarantine_chunk(&ns, c) {
                        Some(to) => {
                            detail.push_str(&format!("; its bytes moved to {to}"));
                            rep.quarantined.push(detail.clone());
                        }
                        None => {
                            detail.push_str("; could not quarantine, freed");
                            seg.chunk(c).owner.store(0, Release);
                        }
                    }
                }
                add(&mut rep, "leaked-chunk", detail, repair);
                stacks_bad = true;
            }
        }
        let _a = self.alloc_lock();
        stacks_bad |= reclaimed;
        stacks_bad |= self.fsck_block_map(&runs, repair, &mut rep);
        let sb = seg.sb();
        let mut free_seen = HashSet::new();
        let mut check_stack = |top: u32, get: &dyn Fn(u32) -> u32, rep: &mut FsckReport| {
            for i in 0..top {
                let c = get(i);
                if c >= seg.nchunks() || !free_seen.insert(c) {
                    stacks_bad = true;
                } else if seg.chunk(c).owner.load(Acquire) != 0 {
                    stacks_bad = true;
                    add(
                        rep,
                        "doubly-owned",
                        format!("chunk {c} is both free and owned"),
                        repair,
                    );
                }
            }
        };
        check_stack(
            sb.mem_top.load(Relaxed).min(l.mem_chunks),
            &|i| seg.mem_stack(i).load(Relaxed),
            &mut rep,
        );
        check_stack(
            sb.spill_top.load(Relaxed).min(l.spill_chunks),
            &|i| seg.spill_stack(i).load(Relaxed),
            &mut rep,
        );
        let free_by_owner = (0..seg.nchunks())
            .filter(|&c| seg.chunk(c).owner.load(Acquire) == 0)
            .count();
        if free_by_owner != free_seen.len() {
            stacks_bad = true;
            add(
                &mut rep,
                "leaked-chunk",
                format!(
                    "{} chunks are neither free nor owned",
                    free_by_owner.abs_diff(free_seen.len())
                ),
                repair,
            );
        }
        if stacks_bad && repair {
            self.rebuild_free_stacks();
        }
        if repair && rep.is_clean() {
            sb.state.store(sbstate::CLEAN, Release);
        }
        drop(_a);
        drop(ns);
        if repair && !rep.quarantined.is_empty() {
            self.append_lost_found_report(&rep.quarantined);
        }
        rep
    }

    /// Append what was quarantined to `/lost+found/REPORT` (best effort).
    fn append_lost_found_report(&self, lines: &[String]) {
        let path = format!("/{}/REPORT", crate::integrity::LOST_FOUND);
        let flags = crate::store::OpenFlags {
            write: true,
            create: true,
            append: true,
            ..Default::default()
        };
        let mut text = format!("fsck --repair at {} ns:\n", crate::segment::now());
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        let r = self.open(&path, flags, 0o600).and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.close()
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "could not write {path}");
        }
    }

    /// After chunks of `fid` were lost to damage: a hole where data was would read as
    /// zeros, which the file never held. Keep the prefix up to the first missing chunk
    /// (anywhere up to the file's end: the lost one may have been the last), drop what
    /// lies past it, and mark the file incomplete: the readable part is then exactly
    /// bytes that were written. File lock held.
    fn cut_at_first_hole(&self, fid: u32, rep: &mut FsckReport, path: &str) {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        if ino.srun.load(Acquire) != 0 {
            return; // a small file's data is its run, not chunks
        }
        let shift = seg.layout.chunk_shift;
        let mut have: Vec<u32> = (0..seg.nchunks())
            .filter(|&c| seg.chunk(c).owner.load(Acquire) == fid + 1)
            .map(|c| seg.chunk(c).logical.load(Relaxed))
            .collect();
        have.sort_unstable();
        let Some(&last) = have.last() else {
            if ino.size.load(Acquire) > 0 {
                ino.size.store(0, Release);
                crate::integrity::seal_data(seg, fid);
                ino.wstate.store(wstate::INCOMPLETE, Release);
            }
            return;
        };
        // Chunks the file's size covers (its last bytes may have been the lost chunk).
        let covered = ino.size.load(Acquire).div_ceil(1u64 << shift);
        let end = u64::from(last)
            .saturating_add(1)
            .max(covered)
            .min(u64::from(u32::MAX)) as u32;
        let hole = (0..end).find(|l| have.binary_search(l).is_err());
        let Some(hole) = hole else { return };
        let size = ino.size.load(Acquire).min((hole as u64) << shift);
        ino.size.store(size, Release);
        crate::integrity::seal_data(seg, fid);
        self.free_chunks_from(fid, hole);
        ino.wstate.store(wstate::INCOMPLETE, Release);
        rep.problems.push(Problem {
            kind: "lost-chunk",
            detail: format!(
                "{path}: chunk {hole} is missing; kept the first {size} bytes, marked incomplete"
            ),
            repaired: true,
        });
    }

    /// Give chunk `c` back to the free stacks. Caller holds the file lock of its owner.
    fn release_chunk(&self, c: u32) {
        let _a = self.alloc_lock();
        let seg = &*self.seg;
        let o = seg.chunk(c).owner.swap(0, Release);
        seg.chunk(c).meta.store(0, Relaxed);
        if o != 0 {
            let ino = seg.inode(o - 1);
            let n = ino.nchunks.load(Relaxed);
            ino.nchunks.store(n.saturating_sub(1), Relaxed);
            crate::integrity::seal_data(seg, o - 1);
        }
        self.rebuild_free_stacks();
    }
}

/// Kinds of inode this format knows.
pub(crate) fn known_kind(k: u32) -> bool {
    matches!(
        k,
        kind::FILE
            | kind::DIR
            | kind::SYMLINK
            | kind::LINK
            | kind::FIFO
            | kind::SOCKET
            | kind::CHAR_DEV
            | kind::BLOCK_DEV
    )
}
