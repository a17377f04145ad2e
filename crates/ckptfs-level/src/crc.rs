//! CRC32C arithmetic: combining the CRCs of consecutive pieces into the CRC of the whole
//! (a copy's whole-file CRC from its chunk CRCs, with no data read).

/// CRC32C of `b` followed by `a`'s `len_b` bytes.
pub fn crc_combine(a: u32, b: u32, len_b: u64) -> u32 {
    // Appending n zero bytes to a CRC register is linear over GF(2): apply the
    // precomputed operator of every power of two in n (one 32-step product per set bit;
    // a generic combine rebuilds the operator on every call, ~20 us each, which cost
    // ~25 ms per GiB of 1 MiB chunks at publish time).
    let ops = zero_ops();
    let (mut crc, mut n, mut k) = (a, len_b, 0);
    while n != 0 {
        if n & 1 == 1 {
            crc = gf2_times(&ops[k], crc);
        }
        n >>= 1;
        k += 1;
    }
    crc ^ b
}

/// A 32x32 GF(2) matrix, one column per bit.
type Gf2Matrix = [u32; 32];

fn gf2_times(m: &Gf2Matrix, mut v: u32) -> u32 {
    let mut out = 0;
    let mut i = 0;
    while v != 0 {
        if v & 1 == 1 {
            out ^= m[i];
        }
        v >>= 1;
        i += 1;
    }
    out
}

/// `ops[k]` appends 2^k zero bytes to a (reflected) CRC32C register.
fn zero_ops() -> &'static [Gf2Matrix; 64] {
    static OPS: std::sync::OnceLock<[Gf2Matrix; 64]> = std::sync::OnceLock::new();
    OPS.get_or_init(|| {
        // One zero bit: shift right, xor the reflected polynomial if the low bit was set.
        let mut bit = [0u32; 32];
        bit[0] = 0x82f6_3b78;
        for (i, c) in bit.iter_mut().enumerate().skip(1) {
            *c = 1 << (i - 1);
        }
        let square = |m: &Gf2Matrix| -> Gf2Matrix { std::array::from_fn(|i| gf2_times(m, m[i])) };
        let mut op = square(&square(&square(&bit))); // 8 bits = 1 byte
        let mut ops = [[0u32; 32]; 64];
        for o in ops.iter_mut() {
            *o = op;
            op = square(&op);
        }
        ops
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckptfs_crc::crc32c;

    #[test]
    fn crc_combine_matches_the_crc_of_the_concatenation() {
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for split in [0, 1, 7, 4096, 65_536, 69_999, 70_000] {
            let (a, b) = data.split_at(split);
            assert_eq!(
                crc_combine(crc32c(a), crc32c(b), b.len() as u64),
                crc32c(&data),
                "split {split}"
            );
        }
        let big = 3 << 30;
        assert_eq!(
            crc_combine(0x1234_5678, 0x9abc_def0, big),
            crc_fast::checksum_combine(crc_fast::CrcAlgorithm::Crc32Iscsi, 0x1234_5678, 0x9abc_def0, big)
                as u32
        );
    }
}
