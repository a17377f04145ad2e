//! Reading chunk bytes straight from the store's shared data region, without the
//! writer and without the store's file locks (CRUISE section 4.6, steps 2 and 6).
//!
//! The region stays mapped for as long as this process holds a [`Store`] clone, so
//! every in-bounds address is valid memory. A process may write a chunk while we read
//! it (a file rewritten or a chunk reused during the copy): the bytes we see are then
//! some mix, which is harmless for `u8` and is caught by the checks around every use:
//! the CRC32C of the bytes must match the chunk list taken before the copy, and the
//! file's identity, size, mtime and chunk list must be unchanged after it.

use ckptfs_store::Store;

/// The data region of a store as mapped in this process.
pub(crate) struct Region {
    _store: Store,
    base: usize,
    len: u64,
}

impl Region {
    pub(crate) fn new(store: &Store) -> Region {
        let r = store.data_region();
        Region {
            _store: store.clone(),
            base: r.base as usize,
            len: r.len,
        }
    }

    /// `len` bytes at byte offset `off` of the region.
    pub(crate) fn bytes(&self, off: u64, len: usize) -> &[u8] {
        assert!(off.checked_add(len as u64).is_some_and(|end| end <= self.len));
        // SAFETY: the range is inside the mapping, which `_store` keeps alive as long as
        // `self`; concurrent writers may change the bytes (see the module comment), and
        // every value is a valid u8.
        unsafe { std::slice::from_raw_parts((self.base + off as usize) as *const u8, len) }
    }

    /// Map the pages of a range into this process's page tables in one call, so that
    /// reading it takes no page faults.
    pub(crate) fn populate(&self, off: u64, len: usize) {
        assert!(off.checked_add(len as u64).is_some_and(|end| end <= self.len));
        // SAFETY: advisory call on a range inside our mapping; failure is harmless.
        unsafe {
            libc::madvise(
                (self.base + off as usize) as *mut libc::c_void,
                len,
                libc::MADV_POPULATE_READ,
            )
        };
    }

    /// Map the whole region writable into this process's page tables (benchmark
    /// workers: a long-running application has done this by its first checkpoint).
    pub(crate) fn populate_write_all(&self) {
        // SAFETY: advisory call on our own mapping; failure is harmless.
        unsafe {
            libc::madvise(
                self.base as *mut libc::c_void,
                self.len as usize,
                libc::MADV_POPULATE_WRITE,
            )
        };
    }
}
