//! Repairs of damaged lengths (`fsck --repair`): a chunk's or a small-file run's recorded
//! length (`hwm`) out of range. A repair restores the length only when the file's size
//! gives one under which the stored CRC verifies the bytes (the length was the only
//! damaged field); else it keeps the verified part of the file: the prefix before that
//! chunk, or nothing of a small file, marked `incomplete`. It never moves data.

use crate::file::chunk_crc;
use crate::fsck::{FsckReport, Problem};
use crate::integrity::seal_data;
use crate::layout::*;
use crate::small::Run;
use crate::store::Store;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

impl Store {
    /// Chunk `c` of `fid` records a length past the chunk: restore the length the file's
    /// size implies (a whole chunk before the last, the rest in the last) when the stored
    /// CRC verifies the bytes under it. Returns the restored length. File lock held.
    pub(crate) fn restore_chunk_length(&self, fid: u32, c: u32) -> Option<u32> {
        let seg = &*self.seg;
        let cs = seg.layout.chunk_size();
        let e = seg.chunk(c);
        let start = u64::from(e.logical.load(Relaxed)) * cs;
        let size = seg.inode(fid).size.load(Acquire);
        if start >= size {
            return None;
        }
        let want = (size - start).min(cs) as u32;
        let (_, crc, stale) = unpack_sum(e.sum.load(Acquire));
        match chunk_crc(self, c, want as usize) {
            Ok(v) if !stale && v == crc => {
                e.sum.store(pack_sum(want, crc, false), Release);
                Some(want)
            }
            _ => None,
        }
    }

    /// Keep only the part of `fid` before logical chunk `logical` (whose length could
    /// not be restored): free it and the chunks after it, cut the size, mark the file
    /// `incomplete`. File lock held.
    pub(crate) fn cut_before_chunk(&self, fid: u32, logical: u32, path: &str, rep: &mut FsckReport) {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        let size = ino
            .size
            .load(Acquire)
            .min(u64::from(logical) << seg.layout.chunk_shift);
        ino.size.store(size, Release);
        seal_data(seg, fid);
        self.free_chunks_from(fid, logical);
        ino.wstate.store(wstate::INCOMPLETE, Release);
        rep.problems.push(Problem {
            kind: "bad-chunk-length",
            detail: format!(
                "{path}: kept the first {size} bytes (before chunk {logical}), marked incomplete"
            ),
            repaired: true,
        });
    }

    /// A small file's run records a length past the run: restore the file's size as the
    /// length when the stored CRC verifies the run's bytes under it; else keep nothing
    /// of the file (size 0, `incomplete`; the run stays its own until it is removed or
    /// rewritten). Returns what was done. File lock held.
    pub(crate) fn fix_run_length(&self, fid: u32, run: Run) -> String {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        let (_, crc, stale) = unpack_sum(ino.ssum.load(Acquire));
        let want = ino.size.load(Acquire).min(run.bytes()) as usize;
        if !stale && self.run_crc(run, want) == crc {
            ino.ssum.store(pack_sum(want as u32, crc, false), Release);
            return format!("length restored to {want} bytes (the size; its checksum verifies)");
        }
        ino.ssum.store(pack_sum(0, 0, false), Release);
        ino.size.store(0, Release);
        seal_data(seg, fid);
        ino.cgen.fetch_add(1, Release);
        ino.wstate.store(wstate::INCOMPLETE, Release);
        "no length verifies its bytes: kept nothing (size 0), marked incomplete".into()
    }
}
