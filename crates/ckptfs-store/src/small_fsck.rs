//! fsck for small files (see `small.rs`): each run against its inode, size and checksum;
//! the block bitmap against the runs; small-file chunks no run uses. And for the shared
//! lease table: each file's slots against its count, slots naming no file.

use crate::fsck::{FsckReport, Problem};
use crate::layout::*;
use crate::small::Run;
use crate::store::Store;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

fn add(rep: &mut FsckReport, kind: &'static str, detail: String, repaired: bool) {
    rep.problems.push(Problem {
        kind,
        detail,
        repaired,
    });
}

impl Store {
    /// Check file `fid`'s run (if any) and return it for the bitmap check. File lock held
    /// (its leases reaped).
    pub(crate) fn fsck_run(
        &self,
        fid: u32,
        path: &str,
        writing: bool,
        repair: bool,
        rep: &mut FsckReport,
    ) -> Option<Run> {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        let run = match self.run_raw(fid) {
            Ok(r) => r?,
            Err(what) => {
                // Where its bytes are is unknown: keep nothing, mark it incomplete.
                add(rep, "damaged-small-run", format!("{path}: {what}"), repair);
                if repair {
                    let _a = self.alloc_lock();
                    ino.srun.store(0, Release);
                    ino.ssum.store(0, Relaxed);
                    ino.size.store(0, Release);
                    crate::integrity::seal_data(seg, fid);
                    ino.wstate.store(wstate::INCOMPLETE, Release);
                    ino.cgen.fetch_add(1, Release);
                }
                return None;
            }
        };
        if ino.nchunks.load(Relaxed) > 0 {
            add(
                rep,
                "small-and-chunks",
                format!("{path}: has a small-file run and chunks (an interrupted move)"),
                repair,
            );
            if repair {
                self.undo_interrupted_move(fid);
            }
        }
        if writing {
            return Some(run);
        }
        let (hwm, crc, stale) = unpack_sum(ino.ssum.load(Acquire));
        let size = ino.size.load(Acquire);
        if hwm as u64 > run.bytes() {
            let mut detail = format!("{path}: small-file run claims {hwm} bytes");
            if repair {
                detail.push_str("; ");
                detail.push_str(&self.fix_run_length(fid, run));
            }
            add(rep, "bad-chunk-length", detail, repair);
            return Some(run);
        }
        if hwm as u64 > size {
            add(
                rep,
                "chunk-past-eof",
                format!("{path}: small-file run holds {hwm} bytes past the end ({size} bytes)"),
                repair,
            );
            if repair {
                self.small_trim(fid, size);
            }
            return Some(run);
        }
        let computed = self.run_crc(run, hwm as usize);
        if stale {
            add(
                rep,
                "stale-checksum",
                format!("{path}: small-file run has no current checksum"),
                repair,
            );
            if repair {
                ino.ssum.store(pack_sum(hwm, computed, false), Release);
            }
        } else if computed != crc {
            add(
                rep,
                "corrupt-chunk",
                format!(
                    "{path}: small-file run checksum mismatch (stored {crc:#010x}, data {computed:#010x})"
                ),
                false,
            );
        } else {
            rep.bytes_verified += hwm as u64;
        }
        Some(run)
    }

    /// `--repair`, before the files are checked: runs that share blocks with another
    /// file's run. A run whose inode was quarantined this pass (its record failed its
    /// checksum: the run may have been moved onto blocks since given to another file)
    /// gives up its run: the file keeps nothing (size 0, `incomplete`), so that neither
    /// its checksum nor its later removal from `/lost+found` touches the other file's
    /// blocks; the blocks it held alone are free again when the bitmap is rebuilt from
    /// the runs. Runs of two trusted records that overlap are left as found (reported
    /// `doubly-owned` by the bitmap check): which one is right cannot be told. Never
    /// moves a block from one file to another. Namespace lock held.
    pub(crate) fn fsck_shared_runs(
        &self,
        quarantined: &std::collections::HashSet<u32>,
        rep: &mut FsckReport,
    ) {
        let seg = &*self.seg;
        let mut runs: Vec<(u32, Run)> = (1..seg.layout.max_files)
            .filter(|&f| matches!(seg.inode(f).kind.load(Acquire), kind::FILE | kind::SYMLINK))
            .filter_map(|f| self.run_raw(f).ok().flatten().map(|r| (f, r)))
            .collect();
        runs.sort_by_key(|&(_, r)| r.first);
        let mut drop = std::collections::BTreeMap::new();
        for (i, &(a, ra)) in runs.iter().enumerate() {
            for &(b, rb) in &runs[i + 1..] {
                if rb.first >= ra.first + ra.blocks {
                    break;
                }
                for (x, y) in [(a, b), (b, a)] {
                    if quarantined.contains(&x) {
                        drop.entry(x).or_insert(y);
                    }
                }
            }
        }
        for (fid, other) in drop {
            let ino = seg.inode(fid);
            let _g = self.file_lock(fid);
            {
                let _a = self.alloc_lock();
                ino.srun.store(0, Release);
                ino.ssum.store(0, Relaxed);
                ino.size.store(0, Release);
                crate::integrity::seal_data(seg, fid);
                ino.cgen.fetch_add(1, Release);
            }
            ino.wstate.store(wstate::INCOMPLETE, Release);
            add(
                rep,
                "doubly-owned",
                format!(
                    "inodes {} and {} claim the same small-file blocks; the damaged inode {} gave up its run (kept empty, incomplete)",
                    fid + 1,
                    other + 1,
                    fid + 1
                ),
                true,
            );
        }
    }

    /// Check the block bitmap against the files' runs and the small-file chunks against
    /// both. Returns whether the free structures need a rebuild (which `--repair` does).
    /// Allocation lock held.
    pub(crate) fn fsck_block_map(&self, runs: &[(u32, Run)], repair: bool, rep: &mut FsckReport) -> bool {
        let seg = &*self.seg;
        let l = &seg.layout;
        let words = l.mem_blocks().div_ceil(64) as usize;
        let mut want = vec![0u64; words];
        let mut owner_of = std::collections::HashMap::new();
        for &(fid, run) in runs {
            let (w, m) = (run.first as usize / 64, bit_mask(run));
            if want[w] & m != 0 {
                let other = (0..run.blocks)
                    .find_map(|k| owner_of.get(&(run.first + k)).copied())
                    .unwrap_or(0);
                add(
                    rep,
                    "doubly-owned",
                    format!(
                        "inodes {} and {} claim the same small-file blocks",
                        other + 1,
                        fid + 1
                    ),
                    false,
                );
            }
            want[w] |= m;
            for k in 0..run.blocks {
                owner_of.insert(run.first + k, fid);
            }
        }
        let mut bad = false;
        let differ = (0..words)
            .filter(|&i| seg.block_word(i as u64).load(Relaxed) != want[i])
            .count();
        if differ > 0 {
            add(
                rep,
                "bad-block-map",
                format!("{differ} words of the small-file block bitmap do not match the runs"),
                repair,
            );
            bad = true;
        }
        let bs = l.blocks_shift();
        for c in 0..l.mem_chunks {
            if seg.chunk(c).owner.load(Acquire) != SMALL_OWNER {
                continue;
            }
            let (start, n) = ((c as u64) << bs, 1u64 << bs);
            let used = (start..start + n).any(|b| want[(b / 64) as usize] & (1 << (b % 64)) != 0);
            if !used {
                add(
                    rep,
                    "leaked-chunk",
                    format!("small-file chunk {c} holds no file's blocks"),
                    repair,
                );
                bad = true;
            }
        }
        bad
    }
}

fn bit_mask(run: Run) -> u64 {
    if run.blocks >= 64 {
        u64::MAX
    } else {
        ((1u64 << run.blocks) - 1) << (run.first % 64)
    }
}

impl Store {
    /// The lease slots of `fid` in the whole table against its count (`nleases`): a
    /// claimer killed before counting, or damage, leaves slots the count misses. File
    /// lock held (leases reaped).
    pub(crate) fn fsck_lease_count(&self, fid: u32, path: &str, repair: bool, rep: &mut FsckReport) {
        let seg = &*self.seg;
        let counted = seg.inode(fid).nleases.load(Relaxed);
        let held = (0..seg.layout.lease_slots)
            .filter(|&i| seg.lease(i).fid.load(Acquire) == fid + 1)
            .count() as u32;
        if held != counted {
            add(
                rep,
                "bad-lease-count",
                format!("{path}: holds {held} lease slots, counts {counted}"),
                repair,
            );
            if repair {
                self.recount_leases(fid);
                self.reap_leases(fid);
            }
        }
    }

    /// Lease slots naming no file or directory (its inode freed). Namespace lock held, so
    /// no such inode can be created and claim meanwhile.
    pub(crate) fn fsck_lease_table(&self, repair: bool, rep: &mut FsckReport) {
        let seg = &*self.seg;
        let l = &seg.layout;
        let stray: Vec<u32> = (0..l.lease_slots)
            .filter(|&i| {
                let f = seg.lease(i).fid.load(Acquire);
                f != 0 && (f > l.max_files || seg.inode(f - 1).kind.load(Acquire) == kind::FREE)
            })
            .collect();
        if !stray.is_empty() {
            add(
                rep,
                "leaked-lease",
                format!("{} lease slots name a free inode", stray.len()),
                repair,
            );
            if repair {
                for i in stray {
                    let s = seg.lease(i);
                    s.pid.store(0, Relaxed);
                    s.fid.store(0, Release);
                }
            }
        }
    }
}
