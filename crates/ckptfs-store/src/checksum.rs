//! CRC32C (Castagnoli) helpers: the `ckptfs-crc` crate (its own folding kernel where
//! the CPU has AVX2 + VPCLMULQDQ, `crc-fast` otherwise).

pub use ckptfs_crc::{crc32c, crc32c_append, crc32c_combine};

/// Extend `crc` with `n` zero bytes.
pub fn crc32c_append_zeros(mut crc: u32, mut n: usize) -> u32 {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    while n > 0 {
        let k = n.min(ZEROS.len());
        crc = crc32c_append(crc, &ZEROS[..k]);
        n -= k;
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn append_matches_whole() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + 3) as u8).collect();
        for split in [0, 1, 7, 4096, 65_537, 99_999, 100_000] {
            let a = crc32c_append(crc32c(&data[..split]), &data[split..]);
            assert_eq!(a, crc32c(&data), "split {split}");
        }
        assert_eq!(crc32c_append(0, b"123456789"), 0xe306_9283);
    }

    #[test]
    fn zeros_match() {
        let z = vec![0u8; 200_000];
        assert_eq!(
            crc32c_append_zeros(crc32c(b"ab"), z.len()),
            crc32c_append(crc32c(b"ab"), &z)
        );
    }
}
