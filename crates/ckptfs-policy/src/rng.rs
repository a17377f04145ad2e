//! A small, fully specified pseudo-random number generator.
//!
//! The simulator must give the same numbers for the same `--seed` on every
//! machine and every future build, so it does not depend on an external crate
//! whose algorithms may change: this is xoshiro256++ (Blackman and Vigna),
//! seeded through SplitMix64.

/// SplitMix64 step: used to expand seeds and to derive independent streams.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256++ generator.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator seeded from one 64-bit seed.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Rng { s }
    }

    /// A generator for one independent stream, identified by a seed and a path
    /// of stream labels (e.g. `[run, node, purpose]`). The same inputs always
    /// give the same stream; different paths give unrelated streams.
    pub fn stream(seed: u64, path: &[u64]) -> Self {
        let mut sm = seed;
        let mut acc = splitmix64(&mut sm);
        for &p in path {
            let mut x = acc ^ p.wrapping_mul(0xD605_BBB5_8C8A_BBFD);
            acc = splitmix64(&mut x);
        }
        Rng::new(acc)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[0]
            .wrapping_add(self.s[3])
            .rotate_left(23)
            .wrapping_add(self.s[0]);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform number in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// An exponential variate with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        // 1 - U is in (0, 1], so the logarithm is finite.
        -mean * (1.0 - self.uniform()).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers_and_streams_differ() {
        let a: Vec<u64> = (0..4).map(|_| Rng::new(7).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut x = Rng::stream(1, &[0, 5]);
        let mut y = Rng::stream(1, &[0, 6]);
        assert_ne!(x.next_u64(), y.next_u64());
    }

    #[test]
    fn uniform_mean_is_one_half() {
        let mut r = Rng::new(42);
        let n = 200_000;
        let m: f64 = (0..n).map(|_| r.uniform()).sum::<f64>() / n as f64;
        assert!((m - 0.5).abs() < 0.005, "{m}");
    }
}
