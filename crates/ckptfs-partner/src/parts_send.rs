//! The zero-copy send of a partner copy: the pieces a reader hands the
//! [`PartnerLevel`](crate::PartnerLevel)'s writer (the node store's shared ranges,
//! [`IoPart::Shared`], and caller buffers) go to the socket as they are, header and
//! pieces in one `writev` ([`ckptfs_store::region_io::writev_from`]), never copied into a
//! buffer of this process; the CRC32C the source recorded for the chunk travels with it
//! (the receiver checks it), computed here only when a write is not one whole chunk of
//! the source.

use ckptfs_level::{crc32c_of, IoPart, Stored};
use std::os::fd::BorrowedFd;

/// One wire chunk made of pieces, as the transport's chunk data.
pub(crate) struct Parts<'p, 'a>(pub(crate) &'p [IoPart<'a>]);

impl ckptfs_transport::ChunkData for Parts<'_, '_> {
    fn len(&self) -> usize {
        self.0.iter().map(IoPart::len).sum()
    }

    fn write_to(&self, fd: BorrowedFd<'_>, head: &[u8], at: usize) -> std::io::Result<usize> {
        ckptfs_store::region_io::writev_from(fd, head, self.0, at)
    }

    fn visit(&self, f: &mut dyn FnMut(&[u8])) -> std::io::Result<()> {
        // Shared bytes are copied out (64 KiB at a time) before anyone sees them.
        const STEP: usize = 64 << 10;
        let mut buf = Vec::new();
        for p in self.0 {
            match p {
                IoPart::Buf(b) => f(b),
                IoPart::Shared(_) => {
                    buf.clear();
                    p.extend_vec(&mut buf);
                    for piece in buf.chunks(STEP) {
                        f(piece);
                    }
                }
            }
        }
        Ok(())
    }
}

/// The CRC32C of `len` bytes at `off` of the copy of `src`: the one its level recorded
/// when they are exactly one of its chunks, else computed over `parts`.
pub(crate) fn crc_of(src: &Stored, off: u64, len: u64, parts: &[IoPart<'_>]) -> u32 {
    let cs = src.chunk_size;
    if cs > 0 && off.is_multiple_of(cs) {
        let i = (off / cs) as usize;
        let whole = (src.version.size - off).min(cs);
        if len == whole {
            if let Some(c) = src.chunk_crc32c.get(i) {
                return *c;
            }
        }
    }
    crc32c_of(parts)
}
