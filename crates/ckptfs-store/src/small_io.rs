//! File handles over small files (see `small.rs`): reading and verifying a run, and
//! moving a file's data from its run into a whole chunk when it outgrows small files.

use crate::error::{Result, StoreError};
use crate::file::FileHandle;
use crate::layout::*;
use crate::small::Run;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

impl FileHandle {
    /// Read `n` bytes (already clipped to the size) at `off` from the file's run: the
    /// bytes up to the high-water mark, zeros past it. File lock held.
    pub(crate) fn read_small(&mut self, run: Run, buf: &mut [u8], off: u64, n: usize) -> Result<usize> {
        if self.verify {
            self.verify_run(run)?;
        }
        let ino = self.store.seg.inode(self.fid);
        let (hwm, _, _) = unpack_sum(ino.ssum.load(Acquire));
        let hwm = (hwm as u64).min(run.bytes());
        let avail = hwm.saturating_sub(off).min(n as u64) as usize;
        if avail > 0 {
            self.store.run_read(run, off as usize, &mut buf[..avail]);
        }
        buf[avail..n].fill(0);
        Ok(n)
    }

    /// Check the run against its CRC once per handle (as `verify_chunk` does for chunk 0).
    /// File lock held.
    pub(crate) fn verify_run(&mut self, run: Run) -> Result<()> {
        if self.verified.first().is_some_and(|w| w & 1 != 0) {
            return Ok(());
        }
        let ino = self.store.seg.inode(self.fid);
        let (mut hwm, mut crc, mut stale) = unpack_sum(ino.ssum.load(Acquire));
        if stale {
            // Legitimate only while a live writer overwrites it; a dead writer's is
            // recomputed by reaping; otherwise it is damage.
            self.store.reap_leases(self.fid);
            (hwm, crc, stale) = unpack_sum(ino.ssum.load(Acquire));
            if stale {
                if self.store.has_writer(self.fid) {
                    return Ok(());
                }
                return Err(StoreError::Damaged {
                    path: self.path.clone(),
                    what: "small file has no current checksum and no writer".into(),
                });
            }
        }
        if hwm as u64 > run.bytes() {
            return Err(StoreError::Damaged {
                path: self.path.clone(),
                what: format!("small file run claims {hwm} bytes"),
            });
        }
        let computed = self.store.run_crc(run, hwm as usize);
        if computed != crc {
            if self.store.has_writer(self.fid) {
                return Ok(()); // a mapping writer may be ahead of the checksum: see verify_chunk
            }
            tracing::error!(path = %self.path, "checksum mismatch in a small file");
            return Err(StoreError::Corrupt {
                path: self.path.clone(),
                logical: 0,
                stored: crc,
                computed,
            });
        }
        self.set_verified(0);
        Ok(())
    }

    /// Move the file's data from its run into a whole chunk at logical index 0 (it is
    /// outgrowing small files). File lock held.
    pub(crate) fn move_to_chunks(&mut self) -> Result<()> {
        let store = self.store.clone();
        let seg = &*store.seg;
        let Some(run) = store.run_of(self.fid, &self.path)? else {
            return Ok(());
        };
        let ino = seg.inode(self.fid);
        store.undo_interrupted_move(self.fid); // (only after damage: never both)
        let (hwm, crc, stale) = unpack_sum(ino.ssum.load(Relaxed));
        let n = (hwm as u64).min(run.bytes()) as usize;
        if n == 0 {
            // Nothing was written (the file is all holes): no chunk is taken. A chunk a
            // file owns always holds a written byte; reads rely on it (verify_chunk).
            store.drop_run_after_move(self.fid, run);
            self.map.clear();
            self.map_gen = ino.cgen.load(Acquire);
            return Ok(());
        }
        let mut bytes = vec![0u8; n];
        store.run_read(run, 0, &mut bytes);
        let c = store.alloc_chunk(self.fid, 0)?;
        ino.nchunks.fetch_add(1, Relaxed);
        crate::integrity::seal_data(seg, self.fid);
        ino.cgen.fetch_add(1, Release);
        crate::fault::crash_point("move-after-alloc");
        self.map.clear();
        self.map.push(c);
        self.map_gen = ino.cgen.load(Acquire);
        self.put(c, 0, Some(&bytes), n)?;
        // A stale run checksum (its writer died mid-overwrite) is what the file holds now.
        let crc = if stale {
            crate::checksum::crc32c(&bytes)
        } else {
            crc
        };
        seg.chunk(c).sum.store(pack_sum(n as u32, crc, false), Release);
        crate::fault::crash_point("move-before-switch");
        store.drop_run_after_move(self.fid, run);
        self.map_gen = ino.cgen.load(Acquire);
        Ok(())
    }

    /// Make sure the file's data lives in whole chunks, which never move while the file
    /// exists (a small file's run moves when it grows). Call before mapping chunk memory
    /// directly (the preload shim's `mmap(MAP_SHARED)`).
    pub fn make_chunked(&mut self) -> Result<()> {
        if self.is_dir || !self.flags.write {
            return Ok(());
        }
        let store = self.store.clone();
        let _g = store.file_lock(self.fid);
        self.refresh_map()?;
        self.move_to_chunks()
    }
}
