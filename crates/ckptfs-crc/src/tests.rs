use super::*;
use proptest::prelude::*;

fn reference(crc: u32, data: &[u8]) -> u32 {
    crc32c_append_crc_fast(crc, data)
}

#[test]
fn known_vectors() {
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    assert_eq!(crc32c(&[]), 0);
    // 32 bytes of zeros and of 0xFF (RFC 3720, B.4).
    assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
    assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
    // A length that takes the kernel (1 MiB) against crc-fast.
    let big: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    assert_eq!(crc32c(&big), reference(0, &big));
}

#[test]
fn the_kernel_runs_where_the_cpu_has_it() {
    // The tests below check the fused path only if detection finds it: make sure it does
    // on a CPU that has the features (unless switched off on purpose).
    #[cfg(target_arch = "x86_64")]
    if std::env::var_os("CKPTFS_CRC_NO_FOLD").is_none() {
        let has = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.2");
        assert_eq!(fused_available(), has);
    }
}

#[test]
fn combine_joins_two_checksums() {
    let a = b"checkpoint ";
    let b = b"data, second part";
    let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
    assert_eq!(
        crc32c_combine(crc32c(a), crc32c(b), b.len() as u64),
        crc32c(&whole)
    );
}

fn check_copy(data: &[u8], off: usize, crc: u32, stores: Stores) {
    let mut dst = vec![0xEEu8; data.len() + off + 64];
    // SAFETY: off + data.len() <= dst.len(); separate allocations do not overlap.
    let got = unsafe { copy_with_crc(dst.as_mut_ptr().add(off), data, crc, stores) };
    assert_eq!(
        got,
        reference(crc, data),
        "crc, len {} off {off} {stores:?}",
        data.len()
    );
    assert_eq!(
        &dst[off..off + data.len()],
        data,
        "bytes, len {} off {off}",
        data.len()
    );
    assert!(
        dst[..off].iter().all(|&b| b == 0xEE),
        "wrote before the destination"
    );
    assert!(
        dst[off + data.len()..].iter().all(|&b| b == 0xEE),
        "wrote past the destination"
    );
}

#[test]
fn copies_at_the_edges_of_every_path() {
    let data: Vec<u8> = (0..70_000u32).map(|i| (i * 31 + 7) as u8).collect();
    for len in [
        0,
        1,
        127,
        128,
        255,
        256,
        257,
        383,
        384,
        1000,
        4096,
        16 << 10,
        65_536,
        69_999,
    ] {
        for off in [0, 1, 31, 32, 63, 64] {
            for stores in [Stores::Streaming, Stores::Cached] {
                check_copy(&data[..len], off, 0x1234_5678, stores);
                check_copy(&data[3..3 + len.min(data.len() - 3)], off, 0, stores);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn checksum_matches_crc_fast(data in proptest::collection::vec(any::<u8>(), 0..5000), crc in any::<u32>(), skip in 0usize..64) {
        let d = &data[skip.min(data.len())..];
        prop_assert_eq!(crc32c_append(crc, d), reference(crc, d));
    }

    #[test]
    fn copy_matches_crc_fast(data in proptest::collection::vec(any::<u8>(), 0..5000), crc in any::<u32>(), off in 0usize..64, streaming in any::<bool>()) {
        check_copy(&data, off, crc, if streaming { Stores::Streaming } else { Stores::Cached });
    }

    #[test]
    fn appending_in_pieces_equals_one_pass(data in proptest::collection::vec(any::<u8>(), 0..3000), cut in 0usize..3000) {
        let cut = cut.min(data.len());
        let whole = crc32c(&data);
        let pieces = crc32c_append(crc32c(&data[..cut]), &data[cut..]);
        prop_assert_eq!(whole, pieces);
    }
}
