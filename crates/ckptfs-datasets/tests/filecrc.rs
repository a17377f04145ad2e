//! The whole-file CRC32C from the store's chunk CRCs equals the CRC of the bytes read
//! back: small and empty files, holes, partly written chunks, spilled chunks, a chunk
//! whose CRC is stale (an overwrite in progress), and a property test over sizes.

use ckptfs_datasets::{file_crc, file_crc_from_chunks};
use ckptfs_store::checksum::crc32c;
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};

const CS: u64 = 64 << 10;
static N: AtomicU32 = AtomicU32::new(0);

struct Fx {
    store: Store,
    name: String,
    _spill: tempfile::TempDir,
}

impl Drop for Fx {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
        ckptfs_agent::status::remove_status(&self.name);
        ckptfs_datasets::remove_lock(&self.name);
    }
}

/// A store of 8 memory chunks and a spill file: bigger files spill.
fn fixture() -> Fx {
    let name = format!(
        "hdf-crc-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let spill = tempfile::tempdir().unwrap();
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(8 * CS);
    o.chunk_size = Some(CS);
    o.spill_dir = Some(spill.path().to_path_buf());
    o.spill_size = Some(64 * CS);
    let store = Store::create(&o).expect("create store");
    Fx {
        store,
        name,
        _spill: spill,
    }
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            ((i as u64)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(97))
                >> 7) as u8
        })
        .collect()
}

fn write(store: &Store, path: &str, data: &[u8]) {
    let mut f = store.open(path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(data).unwrap();
    f.close().unwrap();
}

fn wr() -> OpenFlags {
    OpenFlags {
        write: true,
        ..Default::default()
    }
}

/// Both ways agree with each other and with the CRC of `want`; chunks read returned.
fn check(store: &Store, path: &str, want: &[u8]) -> u64 {
    let read = file_crc(store, path).unwrap();
    let chunks = file_crc_from_chunks(store, path).unwrap();
    assert_eq!(read, (want.len() as u64, crc32c(want)), "{path}: read back");
    assert_eq!((chunks.size, chunks.crc32c), read, "{path}: from chunk CRCs");
    chunks.chunks_read
}

#[test]
fn chunk_crcs_give_the_read_crc_for_small_sparse_and_spilled_files() {
    let fx = fixture();
    let s = &fx.store;
    write(s, "/empty", b"");
    assert_eq!(check(s, "/empty", b""), 0);
    write(s, "/small", b"seven b");
    assert_eq!(check(s, "/small", b"seven b"), 0);
    let exact = bytes(1, 2 * CS as usize);
    write(s, "/exact", &exact);
    assert_eq!(check(s, "/exact", &exact), 0);

    // Holes: chunk 0 and 2 unallocated, chunk 1 partly written, tail extended by set_len.
    write(s, "/sparse", b"");
    let mut f = s.open("/sparse", wr(), 0).unwrap();
    f.pwrite(b"tail", CS + 9).unwrap();
    f.set_len(3 * CS + 3).unwrap();
    f.close().unwrap();
    let mut sparse = vec![0u8; 3 * CS as usize + 3];
    sparse[CS as usize + 9..CS as usize + 13].copy_from_slice(b"tail");
    assert_eq!(check(s, "/sparse", &sparse), 0);

    // Spill: more than the 8 memory chunks.
    let big = bytes(2, 12 * CS as usize + 501);
    write(s, "/big", &big);
    assert!(s.info().spill_free_chunks < 64, "some chunks spilled");
    let spilled = s
        .chunk_list("/big")
        .unwrap()
        .iter()
        .filter(|c| !matches!(c.location, ckptfs_store::ChunkLocation::Memory(_)))
        .count();
    assert!(spilled > 0, "the big file has spill chunks");
    assert_eq!(check(s, "/big", &big), 0);

    // Overwritten in the middle and shrunk, then closed: CRCs recomputed at close.
    let mut over = bytes(3, 3 * CS as usize);
    write(s, "/over", &over);
    let mut f = s.open("/over", wr(), 0).unwrap();
    f.pwrite(b"XYZ", CS + 100).unwrap();
    f.set_len(2 * CS + 10).unwrap();
    f.close().unwrap();
    over[CS as usize + 100..CS as usize + 103].copy_from_slice(b"XYZ");
    over.truncate(2 * CS as usize + 10);
    assert_eq!(check(s, "/over", &over), 0);
}

#[test]
fn a_stale_chunk_crc_is_read_and_only_that_chunk() {
    let fx = fixture();
    let s = &fx.store;
    let mut data = bytes(4, 4 * CS as usize);
    write(s, "/f", &data);
    // A live writer overwrites inside chunk 2: its CRC is stale until close.
    let mut f = s.open("/f", wr(), 0).unwrap();
    f.pwrite(b"new", 2 * CS + 7).unwrap();
    data[2 * CS as usize + 7..2 * CS as usize + 10].copy_from_slice(b"new");
    let stale = s
        .chunk_list("/f")
        .unwrap()
        .iter()
        .filter(|c| c.crc.is_none())
        .count();
    assert_eq!(stale, 1, "the overwritten chunk's CRC is stale while open");
    assert_eq!(check(s, "/f", &data), 1);
    f.close().unwrap();
    assert_eq!(check(s, "/f", &data), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    /// Any size (around chunk boundaries too), optionally with a hole before a write.
    #[test]
    fn chunk_crcs_equal_the_read_crc_over_sizes(
        size in prop_oneof![0u64..300, (CS - 3)..(CS + 3), 0u64..(10 * CS)],
        hole in proptest::option::of(0u64..(3 * CS)),
        seed in any::<u64>(),
    ) {
        let fx = fixture();
        let s = &fx.store;
        let mut want = bytes(seed, size as usize);
        write(s, "/p", &want);
        if let Some(h) = hole {
            // Extend past a hole and write a few bytes there.
            let mut f = s.open("/p", wr(), 0).unwrap();
            f.pwrite(b"ab", size + h).unwrap();
            f.close().unwrap();
            want.resize((size + h) as usize, 0);
            want.extend_from_slice(b"ab");
        }
        let read = file_crc(s, "/p").unwrap();
        let chunks = file_crc_from_chunks(s, "/p").unwrap();
        prop_assert_eq!(read, (want.len() as u64, crc32c(&want)));
        prop_assert_eq!((chunks.size, chunks.crc32c), read);
        prop_assert_eq!(chunks.chunks_read, 0);
    }
}
