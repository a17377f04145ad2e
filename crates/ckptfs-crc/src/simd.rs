//! The folding kernel: CRC32C by carry-less multiplication (the method of Intel's "Fast
//! CRC Computation for Generic Polynomials Using PCLMULQDQ"), 256 bits per instruction,
//! fused with the copy.
//!
//! State: eight 128-bit accumulators (four 256-bit registers) hold the folded remainder
//! of the data so far, 128 bytes wide. Each step multiplies every accumulator by
//! x^1024 mod P (two carry-less multiplies of its 64-bit halves by precomputed constants)
//! and XORs in the next 128 bytes. At the end the eight lanes are folded into one by
//! x^128 steps, and the last 128 bits are reduced with two `crc32` instructions, which
//! compute exactly "append these 16 bytes to a zero register". Everything works on the
//! CRC *register* (the value before the final inversion): the caller passes `!crc` and
//! inverts the result.

/// Bytes folded per step; kernel lengths are multiples of it.
pub(crate) const BLOCK: usize = 128;
/// Below this the setup and final reduction cost more than they save.
pub(crate) const MIN_LEN: usize = 256;

/// Kernel modes: checksum only, checksum + streaming stores, checksum + ordinary stores.
pub(crate) const NONE: u8 = 0;
pub(crate) const STREAM: u8 = 1;
pub(crate) const STORE: u8 = 2;

/// x^exp mod P for CRC32C's P (0x1EDC6F41), bit-reflected and shifted into the 33-bit
/// form the reflected carry-less multiply wants (the same keys crc-fast generates).
const fn key(exp: u64) -> u64 {
    const P: u64 = 0x1edc_6f41 | (1 << 32);
    let mut n: u64 = 0x8000_0000;
    let mut i = 0;
    while i < exp - 31 {
        n <<= 1;
        if n & (1 << 32) != 0 {
            n ^= P;
        }
        i += 1;
    }
    n.reverse_bits() >> 31
}

/// Fold-by-128-bytes constants: the low half multiplies by x^(1024+32), the high by
/// x^(1024-32) (reflected order: the low 64 bits are the higher-degree coefficients).
const K1024_LO: u64 = key(1024 + 32);
const K1024_HI: u64 = key(1024 - 32);
/// Fold-by-16-bytes constants for merging the eight lanes.
const K128_LO: u64 = key(128 + 32);
const K128_HI: u64 = key(128 - 32);

#[cfg(target_arch = "x86_64")]
pub(crate) fn available() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    static CACHED: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 no, 2 yes
    match CACHED.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let yes = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
                && std::arch::is_x86_feature_detected!("vpclmulqdq")
                && std::arch::is_x86_feature_detected!("sse4.2")
                && std::env::var_os("CKPTFS_CRC_NO_FOLD").is_none();
            CACHED.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn available() -> bool {
    false
}

/// Use the kernel for plain checksums too? Only where crc-fast has no VPCLMULQDQ path of
/// its own (it needs AVX-512VL for that one, which is as fast as this kernel or faster).
pub(crate) fn prefer_for_checksums() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::atomic::{AtomicU8, Ordering};
        static CACHED: AtomicU8 = AtomicU8::new(0);
        match CACHED.load(Ordering::Relaxed) {
            1 => false,
            2 => true,
            _ => {
                let yes = available() && !std::arch::is_x86_feature_detected!("avx512vl");
                CACHED.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

pub(crate) fn store_fence() {
    // SAFETY: sfence has no preconditions (SSE is part of x86_64's baseline).
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Fold `n` bytes of `src` into CRC register `reg` and return the new register; with
/// MODE STREAM or STORE also copy them to `dst`.
///
/// # Safety
/// [`available`] returned true; `n` is a non-zero multiple of [`BLOCK`]; `src` is valid
/// for `n` bytes of reads; unless MODE is NONE, `dst` is valid for `n` bytes of writes,
/// does not overlap `src`, and for STREAM is 32-byte aligned.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,pclmulqdq,vpclmulqdq,sse4.2")]
pub(crate) unsafe fn fold<const MODE: u8>(dst: *mut u8, src: *const u8, n: usize, reg: u32) -> u32 {
    use std::arch::x86_64::*;
    debug_assert!(n >= BLOCK && n.is_multiple_of(BLOCK));
    // SAFETY: (the whole body) every load reads src[i..i + 128] with i + 128 <= n, every store
    // writes dst[i..i + 128] under the same bound (the caller's contract covers both
    // ranges); streaming stores are 32-byte aligned because dst is and i is a multiple of
    // 32; the target features are enabled by the caller's check of `available()`.
    unsafe {
        let ld = |i: usize| _mm256_loadu_si256(src.add(i) as *const __m256i);
        let st = |i: usize, v: __m256i| match MODE {
            STREAM => _mm256_stream_si256(dst.add(i) as *mut __m256i, v),
            STORE => _mm256_storeu_si256(dst.add(i) as *mut __m256i, v),
            _ => {}
        };
        let k = _mm256_set_epi64x(K1024_HI as i64, K1024_LO as i64, K1024_HI as i64, K1024_LO as i64);
        let step = |x: __m256i, y: __m256i| {
            _mm256_xor_si256(
                _mm256_xor_si256(
                    _mm256_clmulepi64_epi128(x, k, 0x00),
                    _mm256_clmulepi64_epi128(x, k, 0x11),
                ),
                y,
            )
        };
        let (mut x0, mut x1, mut x2, mut x3) = (ld(0), ld(32), ld(64), ld(96));
        st(0, x0);
        st(32, x1);
        st(64, x2);
        st(96, x3);
        // The register enters as the first 32 bits of the message XORed with it.
        x0 = _mm256_xor_si256(x0, _mm256_set_epi64x(0, 0, 0, reg as i64));
        let mut i = BLOCK;
        while i < n {
            let (y0, y1, y2, y3) = (ld(i), ld(i + 32), ld(i + 64), ld(i + 96));
            st(i, y0);
            st(i + 32, y1);
            st(i + 64, y2);
            st(i + 96, y3);
            x0 = step(x0, y0);
            x1 = step(x1, y1);
            x2 = step(x2, y2);
            x3 = step(x3, y3);
            i += BLOCK;
        }
        // Merge the eight 128-bit lanes, in message order, by x^128 steps.
        let k16 = _mm_set_epi64x(K128_HI as i64, K128_LO as i64);
        let lanes = [
            _mm256_extracti128_si256::<1>(x0),
            _mm256_castsi256_si128(x1),
            _mm256_extracti128_si256::<1>(x1),
            _mm256_castsi256_si128(x2),
            _mm256_extracti128_si256::<1>(x2),
            _mm256_castsi256_si128(x3),
            _mm256_extracti128_si256::<1>(x3),
        ];
        let mut a = _mm256_castsi256_si128(x0);
        for l in lanes {
            a = _mm_xor_si128(
                _mm_xor_si128(
                    _mm_clmulepi64_si128(a, k16, 0x00),
                    _mm_clmulepi64_si128(a, k16, 0x11),
                ),
                l,
            );
        }
        let r = _mm_crc32_u64(0, _mm_cvtsi128_si64(a) as u64);
        _mm_crc32_u64(r, _mm_extract_epi64::<1>(a) as u64) as u32
    }
}

/// Never called: [`available`] is false off x86_64.
///
/// # Safety
/// As the x86_64 version.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn fold<const MODE: u8>(dst: *mut u8, src: *const u8, n: usize, reg: u32) -> u32 {
    // SAFETY: the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(src, n) };
    if MODE != NONE {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    }
    !super::crc32c_append_crc_fast(!reg, s)
}
