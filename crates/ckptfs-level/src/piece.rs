//! The pieces a level hands out and takes: caller buffers, and bytes of memory that other
//! processes may write while they are read (the node store's shared data region).
//!
//! Shared bytes are never a `&[u8]`: a Rust reference would promise the compiler that
//! they do not change. A level that owns such memory implements [`SharedBytes`] for its
//! own range type (the store's `RegionSlice`) and keeps every dereference in its own
//! crate; callers copy, checksum or hand the range to the kernel through the trait.

/// A range of memory that may change under the reader (another process writing it).
///
/// # Safety
/// `addr()..addr() + len()` must stay mapped and readable for as long as the value is
/// borrowed: callers hand it to the kernel (`pwritev`, `sendmsg`) by address.
pub unsafe trait SharedBytes: Sync {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the range is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Start address (for the kernel and for alignment checks only).
    fn addr(&self) -> usize;
    /// Copy the bytes into `dst[..self.len()]`. Panics if `dst` is shorter.
    fn copy_to(&self, dst: &mut [u8]);
    /// CRC32C of the bytes as they are now (a torn read yields a CRC that does not match,
    /// which every caller treats as a mismatch).
    fn crc32c(&self) -> u32;
}

impl std::fmt::Debug for dyn SharedBytes + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBytes")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .finish()
    }
}

/// One piece of a chunk's content, in order with the others.
#[derive(Debug, Clone, Copy)]
pub enum IoPart<'a> {
    /// Bytes of shared memory (the node store's data region).
    Shared(&'a dyn SharedBytes),
    /// A caller buffer.
    Buf(&'a [u8]),
}

impl IoPart<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            IoPart::Shared(r) => r.len(),
            IoPart::Buf(b) => b.len(),
        }
    }

    /// Whether the piece is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Start address (for the kernel and for alignment checks only).
    pub fn addr(&self) -> usize {
        match self {
            IoPart::Shared(r) => r.addr(),
            IoPart::Buf(b) => b.as_ptr() as usize,
        }
    }

    /// Whether address and length are multiples of `align` (O_DIRECT eligibility).
    pub fn is_aligned(&self, align: usize) -> bool {
        self.addr().is_multiple_of(align) && self.len().is_multiple_of(align)
    }

    /// Copy the bytes into `dst[..self.len()]`. Panics if `dst` is shorter.
    pub fn copy_to(&self, dst: &mut [u8]) {
        match self {
            IoPart::Shared(r) => r.copy_to(dst),
            IoPart::Buf(b) => dst[..b.len()].copy_from_slice(b),
        }
    }

    /// Append the bytes to `out`.
    pub fn extend_vec(&self, out: &mut Vec<u8>) {
        match self {
            IoPart::Buf(b) => out.extend_from_slice(b),
            IoPart::Shared(r) => {
                let at = out.len();
                out.resize(at + r.len(), 0);
                r.copy_to(&mut out[at..]);
            }
        }
    }

    /// CRC32C of the bytes.
    pub fn crc32c(&self) -> u32 {
        match self {
            IoPart::Shared(r) => r.crc32c(),
            IoPart::Buf(b) => ckptfs_crc::crc32c(b),
        }
    }
}

/// CRC32C of pieces taken in order.
pub fn crc32c_of(parts: &[IoPart<'_>]) -> u32 {
    parts.iter().fold(0u32, |crc, p| {
        crate::crc::crc_combine(crc, p.crc32c(), p.len() as u64)
    })
}
