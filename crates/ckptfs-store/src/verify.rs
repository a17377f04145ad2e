//! Verification of a file's chunks on read: each reading handle checks each chunk's
//! CRC32C once before serving it (except chunks it wrote itself), and `verify_all` before
//! a copy-out.

use crate::error::{Result, StoreError};
use crate::file::{chunk_crc, FileHandle};
use crate::layout::*;
use std::sync::atomic::Ordering::Acquire;

impl FileHandle {
    /// Check chunk `c` against its CRC once per handle. With `fill`, the chunk's bytes are
    /// copied into it and checked there in the same pass, if it is exactly as long as the
    /// checksummed range; returns whether that copy was made. Caller holds the file lock.
    pub(crate) fn verify_chunk(&mut self, c: u32, logical: u32, fill: Option<&mut [u8]>) -> Result<bool> {
        let word = logical as usize / 64;
        let bit = 1u64 << (logical % 64);
        if self.verified.get(word).is_some_and(|w| w & bit != 0) {
            return Ok(false);
        }
        let seg = &*self.store.seg;
        let (mut hwm, mut crc, mut stale) = unpack_sum(seg.chunk(c).sum.load(Acquire));
        if stale {
            // A stale checksum is legitimate only while a live writer is overwriting the
            // chunk. If its writer died, reaping recomputes it (the bytes are what the
            // file now holds) and we verify as usual; a stale checksum nobody explains is
            // damage, and the bytes are not served unchecked.
            self.store.reap_leases(self.fid);
            (hwm, crc, stale) = unpack_sum(seg.chunk(c).sum.load(Acquire));
            if stale {
                if self.store.has_writer(self.fid) {
                    return Ok(false); // checked on a later read, once it is current again
                }
                let path = self.path.clone();
                tracing::error!(%path, logical, chunk = c, "stale checksum without a writer");
                return Err(StoreError::Damaged {
                    path,
                    what: format!("chunk {logical} has no current checksum and no writer"),
                });
            }
        }
        if hwm as u64 > seg.layout.chunk_size() {
            return Err(StoreError::Damaged {
                path: self.path.clone(),
                what: format!("chunk {logical} claims {hwm} bytes"),
            });
        }
        if hwm == 0 && crate::integrity::empty_chunk_is_damage(&self.store, self.fid) {
            // A checksum word zeroed by damage would verify (the CRC of no bytes is 0)
            // and serve the chunk as zeros.
            let path = self.path.clone();
            tracing::error!(%path, logical, chunk = c, "an owned chunk records no bytes");
            return Err(StoreError::Damaged {
                path,
                what: format!("chunk {logical} records no written bytes"),
            });
        }
        let mut copied = false;
        {
            // Reaping a dead writer above may have trimmed the chunk: the copy is made only
            // if the buffer covers exactly the checksummed bytes.
            let computed = match fill {
                Some(b) if b.len() == hwm as usize && seg.is_mem(c) => {
                    copied = true;
                    crate::copy::copy_chunk_crc(seg, c, b)
                }
                _ => chunk_crc(&self.store, c, hwm as usize)?,
            };
            if computed != crc && self.store.has_writer(self.fid) {
                // A live writer may be changing the chunk outside the store's write path:
                // stores through a shared mapping (the preload shim's `mmap(MAP_SHARED)`)
                // bring the checksum up to date only at msync/munmap/exit. Not verified
                // yet, and not marked verified: checked again on the next read, and by
                // every reader once the writers have closed. (A copy made above is what
                // the chunk held, served as any read during such a writer is.)
                return Ok(copied);
            }
            if computed != crc {
                let path = self.path.clone();
                tracing::error!(%path, logical, chunk = c, "checksum mismatch");
                return Err(StoreError::Corrupt {
                    path,
                    logical,
                    stored: crc,
                    computed,
                });
            }
        }
        self.set_verified(logical);
        Ok(copied)
    }

    pub(crate) fn set_verified(&mut self, logical: u32) {
        let word = logical as usize / 64;
        if self.verified.len() <= word {
            self.verified.resize(word + 1, 0);
        }
        self.verified[word] |= 1u64 << (logical % 64);
    }

    /// Verify every chunk of the file against its CRC (used when copying a file out).
    pub fn verify_all(&mut self) -> Result<()> {
        let store = self.store.clone();
        let _g = store.file_lock(self.fid);
        self.refresh_map()?;
        if let Some(run) = store.run_of(self.fid, &self.path)? {
            self.verified.clear();
            return self.verify_run(run);
        }
        for (l, &c) in self.map.clone().iter().enumerate() {
            if c != NONE {
                self.verified.clear();
                self.verify_chunk(c, l as u32, None)?;
            }
        }
        Ok(())
    }
}
