//! Copying checkpoint data into chunks.
//!
//! Large copies use non-temporal (streaming) stores: checkpoint data is not read again
//! soon, and streaming stores skip the read-for-ownership of every destination cache
//! line, which nearly doubles the copy rate into memory on this kind of machine
//! (docs/benchmarks.md, "Figures behind design choices"). When a CRC is
//! wanted, `ckptfs-crc` folds it into the copy (one loop loads, stores and checksums each
//! 128 bytes); on a CPU without its kernel, the CRC32C is computed from the source in
//! cache-sized pieces as it is copied, so the checksum costs one pass over data that is
//! already in cache.

use crate::checksum::crc32c_append;
use ckptfs_crc::Stores;

/// Below this size a plain copy is faster than streaming stores.
const STREAM_MIN: usize = 16 << 10;
/// Piece size for interleaving checksum and copy: fits L1 (the better of 16/64 KiB).
const PIECE: usize = 16 << 10;

/// Copy `src` to `dst` and, if `crc` is given, extend it with `src`.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and not overlap `src`.
pub unsafe fn copy_with_crc(dst: *mut u8, src: &[u8], mut crc: Option<u32>) -> Option<u32> {
    if let (Some(c), true) = (crc, ckptfs_crc::fused_available()) {
        let stores = if src.len() < STREAM_MIN {
            Stores::Cached
        } else {
            Stores::Streaming
        };
        // SAFETY: the caller guarantees dst is valid for src.len() bytes, no overlap.
        return Some(unsafe { ckptfs_crc::copy_with_crc(dst, src, c, stores) });
    }
    if src.len() < STREAM_MIN || !stream_available() {
        // SAFETY: the caller guarantees dst is valid for src.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        return crc.map(|c| crc32c_append(c, src));
    }
    let mut off = 0;
    while off < src.len() {
        let k = PIECE.min(src.len() - off);
        let piece = &src[off..off + k];
        // Checksum first: it pulls the piece into L1, where the streaming copy reads it.
        if let Some(c) = crc.as_mut() {
            *c = crc32c_append(*c, piece);
        }
        // SAFETY: off + k <= src.len(), so the destination range is inside the caller's.
        unsafe { stream_copy(dst.add(off), piece) };
        off += k;
    }
    // Streaming stores are weakly ordered: fence before the caller publishes the new
    // size, so another process that sees the size also sees the bytes.
    // SAFETY: sfence has no preconditions.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    crc
}

fn stream_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f") || std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Streaming copy; the destination is aligned to 64 bytes first with a plain copy.
///
/// # Safety
/// `dst` valid for `src.len()` bytes, no overlap, and `stream_available()` is true.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_copy(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let head = (dst as usize).wrapping_neg() & 63;
    let head = head.min(n);
    // SAFETY: head <= n, inside both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head) };
    let body = (n - head) & !255;
    // SAFETY: dst+head is 64-byte aligned; head + body <= n.
    unsafe {
        if std::arch::is_x86_feature_detected!("avx512f") {
            stream_avx512(dst.add(head), src.as_ptr().add(head), body);
        } else {
            stream_avx2(dst.add(head), src.as_ptr().add(head), body);
        }
        let done = head + body;
        std::ptr::copy_nonoverlapping(src.as_ptr().add(done), dst.add(done), n - done);
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn stream_copy(dst: *mut u8, src: &[u8]) {
    // SAFETY: forwarded contract.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

/// # Safety
/// `dst` 64-byte aligned, both valid for `n` bytes, `n` a multiple of 256, AVX-512F present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_avx512(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::*;
    let mut i = 0;
    while i < n {
        // SAFETY: i + 256 <= n; unaligned loads, aligned streaming stores.
        unsafe {
            let a = _mm512_loadu_si512(src.add(i) as *const _);
            let b = _mm512_loadu_si512(src.add(i + 64) as *const _);
            let c = _mm512_loadu_si512(src.add(i + 128) as *const _);
            let d = _mm512_loadu_si512(src.add(i + 192) as *const _);
            _mm512_stream_si512(dst.add(i) as *mut _, a);
            _mm512_stream_si512(dst.add(i + 64) as *mut _, b);
            _mm512_stream_si512(dst.add(i + 128) as *mut _, c);
            _mm512_stream_si512(dst.add(i + 192) as *mut _, d);
        }
        i += 256;
    }
}

/// # Safety
/// `dst` 32-byte aligned, both valid for `n` bytes, `n` a multiple of 256, AVX2 present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_avx2(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::*;
    let mut i = 0;
    while i < n {
        // SAFETY: i + 256 <= n; unaligned loads, aligned streaming stores.
        unsafe {
            for j in (0..256).step_by(32) {
                let v = _mm256_loadu_si256(src.add(i + j) as *const __m256i);
                _mm256_stream_si256(dst.add(i + j) as *mut __m256i, v);
            }
        }
        i += 256;
    }
}

/// Piece of a chunk copied and then checksummed while it is still in cache (L1/L2).
const VERIFY_PIECE: usize = 64 << 10;

/// Copy memory chunk `c` from its start into `dst` and return the CRC32C of the copy,
/// taken piece by piece right after each piece is copied: one pass over the chunk's
/// memory instead of a checksum pass and then a copy pass (a restart reads every chunk
/// once, so both passes came from memory). What is checked is what the caller gets.
/// Caller holds the owning file's lock.
pub(crate) fn copy_chunk_crc(seg: &crate::segment::Segment, c: u32, dst: &mut [u8]) -> u32 {
    if ckptfs_crc::fused_available() {
        // One loop: what it checksums is what it stored into the caller's buffer.
        // SAFETY: caller holds the file lock; the range is inside the chunk; dst is the
        // caller's buffer of exactly that length, separate from the segment.
        return unsafe {
            ckptfs_crc::copy_with_crc(
                dst.as_mut_ptr(),
                seg.chunk_slice(c, 0, dst.len()),
                0,
                Stores::Cached,
            )
        };
    }
    let mut crc = 0;
    let mut at = 0;
    while at < dst.len() {
        let k = VERIFY_PIECE.min(dst.len() - at);
        let piece = &mut dst[at..at + k];
        // SAFETY: caller holds the file lock; the range is inside the chunk.
        piece.copy_from_slice(unsafe { seg.chunk_slice(c, at, k) });
        crc = crc32c_append(crc, piece);
        at += k;
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::crc32c;

    #[test]
    fn copies_exactly_at_odd_alignments_and_sizes() {
        let src: Vec<u8> = (0..300_000u32).map(|i| (i * 13 + 5) as u8).collect();
        let mut dst = vec![0u8; 300_100];
        for (off, len) in [
            (0, 0),
            (1, 17),
            (3, 16 << 10),
            (7, 70_001),
            (64, 200_000),
            (13, 299_999),
        ] {
            dst.fill(0xEE);
            // SAFETY: off + len <= dst.len().
            let c = unsafe { copy_with_crc(dst.as_mut_ptr().add(off), &src[..len], Some(0)) };
            assert_eq!(&dst[off..off + len], &src[..len], "off {off} len {len}");
            assert!(dst[..off].iter().all(|&b| b == 0xEE));
            assert!(dst[off + len..].iter().all(|&b| b == 0xEE));
            assert_eq!(c, Some(crc32c(&src[..len])));
        }
    }
}
