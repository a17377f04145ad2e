//! Small files: data of a few KiB takes a few KiB of the store (4 KiB blocks of shared
//! chunks), the file count follows the memory size, and files growing past the small
//! size move into whole chunks with their bytes and checksums intact.

mod support;

use ckptfs_store::*;
use std::os::unix::fs::FileExt;
use support::*;

/// Runs the writer when this executable is spawned as a child (see `support`).
#[test]
fn child_entry() {
    support::child_entry();
}

/// A store of `mem` bytes with default chunk size and file count.
fn store_of(tag: &str, mem: u64) -> (Store, String) {
    let name = format!("t-{tag}-{}", std::process::id());
    let _ = Store::destroy(&name);
    let s = Store::create(&StoreOptions {
        mem_size: Some(mem),
        ..StoreOptions::named(&name)
    })
    .unwrap();
    (s, name)
}

struct Destroy(String);
impl Drop for Destroy {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.0);
    }
}

#[test]
fn twenty_thousand_4k_files_fit_in_256_mib_and_read_back_identical() {
    let (s, name) = store_of("small-20k", 256 << 20);
    let _d = Destroy(name);
    let info = s.info();
    assert_eq!(info.max_files, 32_768, "one inode per 8 KiB of memory");
    for d in 0..20 {
        s.mkdir(&format!("/d{d}"), 0o755).unwrap();
    }
    const N: u64 = 20_000;
    for i in 0..N {
        let p = format!("/d{}/f{i}", i % 20);
        let mut f = s.open(&p, OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&pattern(i, 0, 4096)).unwrap();
        f.close().unwrap();
    }
    let info = s.info();
    assert_eq!(info.files as u64, N);
    // 4 KiB each: 20,000 blocks in 79 chunks of 1 MiB (256 blocks each), not 20,000 chunks.
    assert_eq!(info.small_blocks_used, N);
    assert_eq!(info.small_chunks as u64, N.div_ceil(256));
    assert_eq!(info.mem_chunks - info.mem_free_chunks, info.small_chunks);
    let st = s.stat("/d7/f7").unwrap();
    assert_eq!((st.size, st.allocated, st.chunks), (4096, 4096, 0));
    // A fresh mapping (as a restarted process) reads every file back, checksums verified.
    let again = Store::attach(&StoreOptions::named(s.name())).unwrap();
    for i in 0..N {
        let p = format!("/d{}/f{i}", i % 20);
        let data = read_all(&again, &p).unwrap();
        assert_eq!(data.len(), 4096, "{p}");
        assert_eq!(first_mismatch(i, 0, &data), None, "{p}");
    }
    let rep = again.fsck(false);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(rep.bytes_verified, N * 4096);
    // Removing them gives every block and chunk back.
    for i in 0..N {
        again.unlink(&format!("/d{}/f{i}", i % 20)).unwrap();
    }
    let info = again.info();
    assert_eq!((info.small_chunks, info.small_blocks_used), (0, 0));
    assert_eq!(info.mem_free_chunks, info.mem_chunks);
}

#[test]
fn a_growing_file_moves_from_blocks_to_larger_runs_to_chunks_with_its_bytes() {
    let t = TempStore::new("small-grow", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let mut f = s.open("/g", OpenFlags::CREATE, 0o644).unwrap();
    let mut expect_alloc = vec![];
    let mut size = 0u64;
    // 64 KiB chunks: runs up to 16 KiB (a quarter chunk), then whole chunks.
    for step in [100u64, 3000, 1500, 4000, 6000, 2000, 9000, 50_000, 70_000] {
        f.write_all(&pattern(3, size, step as usize)).unwrap();
        size += step;
        let st = f.stat();
        expect_alloc.push((size, st.allocated, st.chunks));
        assert_eq!(st.size, size);
        assert_eq!(
            read_all(&s, "/g").unwrap(),
            pattern(3, 0, size as usize),
            "at {size}"
        );
    }
    assert_eq!(
        expect_alloc,
        vec![
            (100, 4096, 0),
            (3100, 4096, 0),
            (4600, 8192, 0),
            (8600, 16384, 0),
            (14600, 16384, 0),
            (16600, 65536, 1),
            (25600, 65536, 1),
            (75600, 131072, 2),
            (145600, 196608, 3),
        ]
    );
    f.close().unwrap();
    assert_file_is(&s, "/g", 3, 145_600);
    assert!(s.fsck(false).problems.is_empty());
    assert_chunk_accounting(&s);
    // Overwrites and sparse writes inside a run; truncation keeps the prefix.
    let mut h = s.open("/h", OpenFlags::CREATE, 0o644).unwrap();
    h.pwrite(b"tail", 10_000).unwrap();
    h.pwrite(b"head", 0).unwrap();
    h.pwrite(b"EA", 1).unwrap();
    h.close().unwrap();
    let data = read_all(&s, "/h").unwrap();
    assert_eq!(data.len(), 10_004);
    assert_eq!(&data[..4], b"hEAd");
    assert!(data[4..10_000].iter().all(|&b| b == 0));
    assert_eq!(&data[10_000..], b"tail");
    assert_eq!(s.stat("/h").unwrap().allocated, 16384);
    s.truncate("/h", 3).unwrap();
    assert_eq!(read_all(&s, "/h").unwrap(), b"hEA");
    s.truncate("/h", 5000).unwrap();
    assert_eq!(read_all(&s, "/h").unwrap(), [&b"hEA"[..], &[0u8; 4997]].concat());
    s.truncate("/h", 0).unwrap();
    assert_eq!(s.stat("/h").unwrap().allocated, 0);
    assert!(s.fsck(false).problems.is_empty());
    assert_chunk_accounting(&s);
}

#[test]
fn one_byte_files_no_longer_take_a_chunk_each() {
    // 8 MiB of 1 MiB chunks: 8 files used to fill it; now 2,000 fit in 8 chunks.
    let (s, name) = store_of("small-1b", 8 << 20);
    let _d = Destroy(name);
    for i in 0..1000 {
        let mut f = s.open(&format!("/f{i}"), OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&[i as u8]).unwrap();
        f.close().unwrap();
    }
    let info = s.info();
    assert_eq!(info.small_chunks, 4, "{info:?}");
    for i in 0..1000 {
        assert_eq!(read_all(&s, &format!("/f{i}")).unwrap(), vec![i as u8]);
    }
    // The remaining memory still takes a 4 MiB file in whole chunks.
    let mut f = s.open("/big", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(9, 0, 4 << 20)).unwrap();
    f.close().unwrap();
    assert_file_is(&s, "/big", 9, 4 << 20);
    assert_chunk_accounting(&s);
}

#[test]
fn a_flipped_byte_in_a_small_file_is_detected_by_readers_verify_all_and_fsck() {
    let t = TempStore::new("small-flip", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let mut f = s.open("/c", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(5, 0, 6000)).unwrap();
    f.close().unwrap();
    let list = s.chunk_list("/c").unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].logical, list[0].len, list[0].written), (0, 6000, 6000));
    let ChunkLocation::Memory(at) = list[0].location else {
        panic!("a small file is in memory")
    };
    assert_eq!(at % 4096, 0);
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    let data_off = ckptfs_store::layout::Layout::compute(16, 128, 0, 64).data_off;
    let mut b = [0u8; 1];
    seg.read_exact_at(&mut b, data_off + at + 1234).unwrap();
    seg.write_all_at(&[b[0] ^ 0x20], data_off + at + 1234).unwrap();
    let other = t.attach();
    assert_eq!(read_all(&other, "/c").err().map(|e| e.errno()), Some(libc::EIO));
    let mut h = other.open("/c", OpenFlags::READ, 0).unwrap();
    assert!(matches!(h.verify_all(), Err(StoreError::Corrupt { .. })));
    let rep = other.fsck(false);
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    assert_eq!(rep.problems[0].kind, "corrupt-chunk");
    assert!(rep.problems[0].detail.starts_with("/c:"), "{:?}", rep.problems);
}

#[test]
fn make_chunked_pins_a_small_file_in_a_chunk_that_no_longer_moves() {
    let t = TempStore::new("small-pin", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let mut f = s.open("/m", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(1, 0, 3000)).unwrap();
    f.make_chunked().unwrap();
    let st = f.stat();
    assert_eq!((st.chunks, st.allocated), (1, 64 << 10));
    // Growing it now extends the chunk in place.
    let before = s.chunk_list("/m").unwrap()[0].chunk_id;
    f.write_all(&pattern(1, 3000, 30_000)).unwrap();
    f.close().unwrap();
    assert_eq!(s.chunk_list("/m").unwrap()[0].chunk_id, before);
    assert_file_is(&s, "/m", 1, 33_000);
    assert_chunk_accounting(&s);
}

#[test]
fn small_files_fall_back_to_whole_chunks_when_no_memory_chunk_is_left() {
    let dir = tempfile::tempdir().unwrap();
    // 2 memory chunks, both taken by a large file; small files then go to the spill file.
    let t = TempStore::new(
        "small-spill",
        128 << 10,
        64 << 10,
        64,
        Some((dir.path(), 1 << 20)),
    );
    let s = t.attach();
    let mut f = s.open("/big", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(2, 0, 128 << 10)).unwrap();
    f.close().unwrap();
    for i in 0..3 {
        let mut f = s.open(&format!("/s{i}"), OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&pattern(i, 0, 1000)).unwrap();
        f.close().unwrap();
        let st = s.stat(&format!("/s{i}")).unwrap();
        assert_eq!((st.chunks, st.spill_chunks), (1, 1));
    }
    for i in 0..3 {
        assert_file_is(&s, &format!("/s{i}"), i, 1000);
    }
    assert!(s.fsck(false).problems.is_empty());
    assert_chunk_accounting(&s);
}

#[test]
fn a_damaged_block_bitmap_is_rebuilt_before_any_block_is_handed_out() {
    let t = TempStore::new("small-bitmap", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    for i in 0..3 {
        let mut f = s.open(&format!("/s{i}"), OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&pattern(i, 0, 3000)).unwrap();
        f.close().unwrap();
    }
    // Every bit of the bitmap cleared: the three runs look free.
    let layout = ckptfs_store::layout::Layout::compute(16, 128, 0, 64);
    let seg = std::fs::OpenOptions::new()
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    seg.write_all_at(&[0u8; 8], layout.block_map_off).unwrap();
    let other = t.attach();
    for i in 3..6 {
        let mut f = other.open(&format!("/s{i}"), OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&pattern(i, 0, 3000)).unwrap();
        f.close().unwrap();
    }
    for i in 0..6 {
        assert_file_is(&other, &format!("/s{i}"), i, 3000);
    }
    let info = other.info();
    assert_eq!((info.small_chunks, info.small_blocks_used), (1, 6));
    assert!(other.fsck(false).problems.is_empty());
}

/// Issue "Failures in sequence", item 6a: a small file's run moved (damage to `srun`)
/// onto free blocks, one of which a new small file then takes. Before the fix, repair
/// quarantined the damaged file with its run, so it kept owning the other file's block
/// (`doubly-owned` on every fsck after), and removing `/lost+found` freed that block:
/// the next small file overwrote it and the undamaged file read EIO.
#[test]
fn repair_takes_a_moved_run_from_the_quarantined_file_never_the_other_files_block() {
    use ckptfs_store::layout::{Inode, Layout, INODE_SIZE};
    let t = TempStore::new("small-moved-run", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    for i in 0..2 {
        let mut f = s.open(&format!("/s{i}"), OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&pattern(i, 0, 3000)).unwrap();
        f.close().unwrap();
    }
    let layout = Layout::compute(16, 128, 0, 64);
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    let fid = s.stat("/s0").unwrap().ino - 1;
    let off = layout.inode_off + fid * INODE_SIZE + std::mem::offset_of!(Inode, srun) as u64;
    let mut b = [0u8; 8];
    seg.read_exact_at(&mut b, off).unwrap();
    let srun = u64::from_le_bytes(b);
    assert_eq!(srun >> 32, 1, "one block");
    // /s0 and /s1 hold the chunk's first two blocks; move /s0's run onto the third
    // (free), which the next small file takes.
    seg.write_all_at(&(srun + 2).to_le_bytes(), off).unwrap();
    let o = t.attach();
    let mut f = o.open("/s2", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(2, 0, 3000)).unwrap();
    f.close().unwrap();
    assert_eq!(read_all(&o, "/s0").unwrap_err().errno(), libc::EIO);
    assert_file_is(&o, "/s2", 2, 3000);
    let rep = o.fsck(true);
    assert!(!rep.quarantined.is_empty(), "{rep:?}");
    let again = o.fsck(false);
    assert!(again.problems.is_empty(), "a second fsck: {:?}", again.problems);
    for i in 1..3 {
        assert_file_is(&o, &format!("/s{i}"), i, 3000);
    }
    // Removing what was quarantined never touches /s1 or /s2, nor does reusing the
    // blocks it frees.
    remove_tree(&o, "/lost+found");
    for i in 3..8 {
        let mut f = o.open(&format!("/s{i}"), OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(&pattern(i, 0, 3000)).unwrap();
        f.close().unwrap();
    }
    for i in 1..8 {
        assert_file_is(&o, &format!("/s{i}"), i, 3000);
    }
    assert!(o.fsck(false).problems.is_empty(), "{:?}", o.fsck(false).problems);
    assert_chunk_accounting(&o);
}
