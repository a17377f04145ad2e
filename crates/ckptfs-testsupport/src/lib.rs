//! Helpers shared by the ckptfs crates' tests. Used only as a dev-dependency, so test
//! code never pulls benchmark or CLI crates into a library's dependencies.
#![deny(missing_docs)]

/// Deterministic pseudo-random bytes for `seed` (xorshift; the tests' reference data).
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_bytes_are_reproducible_and_differ_by_seed() {
        assert_eq!(seeded_bytes(7, 1000), seeded_bytes(7, 1000));
        assert_ne!(seeded_bytes(7, 1000), seeded_bytes(8, 1000));
        assert_eq!(seeded_bytes(7, 10), seeded_bytes(7, 1000)[..10]);
    }
}
