//! CRC32C (Castagnoli) for ckptfs: checksums, and copies that checksum what they copy.
//!
//! Every byte a checkpoint writes is copied once (into the store's segment) and
//! checksummed once. Done one after the other, the two passes add up: on a machine whose
//! CRC runs at the copy's speed, a checksummed copy takes twice as long as `memcpy`. This
//! crate folds the checksum into the copy: one loop loads 128 bytes, stores them to the
//! destination and folds them into the CRC with carry-less multiplies, so the checksum is
//! computed by otherwise idle vector units while the loop waits on memory.
//!
//! The folding kernel needs AVX2 and VPCLMULQDQ (256-bit carry-less multiply: Intel Ice
//! Lake and later, AMD Zen 3 and later). `crc-fast` (used for everything else) only uses
//! VPCLMULQDQ together with AVX-512VL, so on AVX2-only CPUs it falls back to 128-bit code;
//! on those, pure checksums of 256 bytes and more use this crate's kernel as well (measured
//! in docs/benchmarks.md). Without the CPU features every call falls back to a plain copy
//! and `crc-fast`, with identical results.

mod simd;

/// CRC32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// Extend `crc` (the CRC32C of some prefix) with `data`.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    if data.len() >= simd::MIN_LEN && simd::prefer_for_checksums() {
        let body = data.len() & !(simd::BLOCK - 1);
        // SAFETY: prefer_for_checksums() checked the CPU features; body is a non-zero
        // multiple of BLOCK inside `data`; no destination is written (Mode::None).
        let reg = unsafe { simd::fold::<{ simd::NONE }>(std::ptr::null_mut(), data.as_ptr(), body, !crc) };
        return crc32c_append_crc_fast(!reg, &data[body..]);
    }
    crc32c_append_crc_fast(crc, data)
}

/// CRC32C of A followed by B, from `a` = CRC32C(A), `b` = CRC32C(B) and B's length.
pub fn crc32c_combine(a: u32, b: u32, b_len: u64) -> u32 {
    crc_fast::checksum_combine(crc_fast::CrcAlgorithm::Crc32Iscsi, a as u64, b as u64, b_len) as u32
}

/// [`crc32c_append`] by crc-fast alone, never the folding kernel: the fallback, and the
/// reference benchmarks compare the kernel with.
pub fn crc32c_append_crc_fast(crc: u32, data: &[u8]) -> u32 {
    if data.is_empty() {
        return crc;
    }
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, (crc ^ 0xffff_ffff) as u64);
    d.update(data);
    d.finalize() as u32
}

/// How [`copy_with_crc`] writes the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stores {
    /// Non-temporal stores: for data not read again soon (a checkpoint written into the
    /// store). They skip the read-for-ownership of every destination line. The function
    /// ends with a store fence, so the bytes are visible before whatever the caller
    /// publishes next.
    Streaming,
    /// Ordinary stores: for data the caller reads next (a restart's read buffer).
    Cached,
}

/// True when [`copy_with_crc`] runs as one fused pass on this CPU (otherwise it copies,
/// then checksums).
pub fn fused_available() -> bool {
    simd::available()
}

/// Copy `src` to `dst` and return `crc` extended with `src`, in one pass when the CPU
/// allows (see the crate documentation).
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and must not overlap `src`.
pub unsafe fn copy_with_crc(dst: *mut u8, src: &[u8], crc: u32, stores: Stores) -> u32 {
    let n = src.len();
    if n < simd::MIN_LEN || !simd::available() {
        // SAFETY: the caller guarantees dst is valid for n bytes and does not overlap src.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n) };
        return crc32c_append_crc_fast(crc, src);
    }
    // Streaming stores want whole, aligned cache lines: copy up to the next 64-byte
    // boundary of the destination first.
    let head = match stores {
        Stores::Streaming => ((dst as usize).wrapping_neg() & 63).min(n),
        Stores::Cached => 0,
    };
    // SAFETY: head <= n, inside both ranges (caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head) };
    let mut crc = crc32c_append_crc_fast(crc, &src[..head]);
    let body = (n - head) & !(simd::BLOCK - 1);
    if body > 0 {
        // SAFETY: simd::available() checked the CPU features; [head, head + body) lies
        // inside both ranges; for Streaming, dst + head is 64-byte aligned.
        let reg = unsafe {
            match stores {
                Stores::Streaming => {
                    simd::fold::<{ simd::STREAM }>(dst.add(head), src.as_ptr().add(head), body, !crc)
                }
                Stores::Cached => {
                    simd::fold::<{ simd::STORE }>(dst.add(head), src.as_ptr().add(head), body, !crc)
                }
            }
        };
        crc = !reg;
    }
    let done = head + body;
    // SAFETY: done <= n; the rest lies inside both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(done), dst.add(done), n - done) };
    crc = crc32c_append_crc_fast(crc, &src[done..]);
    if stores == Stores::Streaming {
        simd::store_fence();
    }
    crc
}

#[cfg(test)]
mod tests;
