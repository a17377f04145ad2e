//! Repairs of single-field damage that `fsck --repair` used to leave behind (issue
//! "Failures in sequence", item 6): after one repair a second fsck is clean, the
//! undamaged file is intact, and the damaged one is whole (its field restored from what
//! verifies), a verified prefix marked incomplete, or quarantined; never another file's
//! bytes.

#[macro_use]
mod corrupt_support;
mod support;

use ckptfs_store::layout::{ChunkEntry, Inode, INODE_SIZE};
use ckptfs_store::{OpenFlags, WriteState};
use corrupt_support::*;
use std::mem::offset_of;
use support::*;

#[test]
fn child_entry() {
    support::child_entry();
}

fn assert_second_fsck_clean(store: &ckptfs_store::Store) {
    let rep = store.fsck(false);
    assert!(rep.problems.is_empty(), "a second fsck: {:?}", rep.problems);
    assert_chunk_accounting(store);
}

/// A middle chunk's length made huge: EIO, then repair restores the length the size
/// implies (the stored CRC verifies under it): the file is whole again. Before, repair
/// left `bad-chunk-length` unrepaired and every later fsck reported it.
#[test]
fn a_huge_chunk_length_is_restored_from_the_size_when_the_crc_verifies() {
    let (_t, _c, store) = damaged("fix-hwm-mid", |c| {
        (
            c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, sum) + 4),
            Edit::Set32(0x7fff_ffff),
        )
    });
    assert_eq!(read_all(&store, "/d/a").unwrap_err().errno(), libc::EIO);
    let rep = store.fsck(true);
    assert!(
        rep.problems
            .iter()
            .any(|p| p.kind == "bad-chunk-length" && p.repaired),
        "{rep:?}"
    );
    assert_second_fsck_clean(&store);
    assert_file_is(&store, "/d/a", 1, A_SIZE);
    assert_file_is(&store, "/d/b", 2, B_SIZE);
}

/// The last chunk's whole checksum word replaced (a huge length and another CRC): no
/// length verifies, so repair keeps the prefix before it, marked incomplete.
#[test]
fn a_huge_chunk_length_that_no_size_verifies_cuts_the_file_before_it() {
    let (_t, _c, store) = damaged("fix-hwm-last", |c| {
        (
            c.chunk(c.a_chunks[3], offset_of!(ChunkEntry, sum)),
            Edit::Set64(0x7fff_ffff_1234_5678),
        )
    });
    assert_eq!(read_all(&store, "/d/a").unwrap_err().errno(), libc::EIO);
    store.fsck(true);
    assert_second_fsck_clean(&store);
    let st = store.stat("/d/a").unwrap();
    assert_eq!((st.size, st.state), (3 * CHUNK, WriteState::Incomplete));
    assert_prefix_is(&store, "/d/a", 1, A_SIZE);
    assert_file_is(&store, "/d/b", 2, B_SIZE);
}

/// A small file's run length made huge: restored from the size when the CRC verifies.
#[test]
fn a_huge_small_run_length_is_restored_or_the_file_kept_empty() {
    let (t, c, store) = damaged("fix-hwm-small", |_| (0, Edit::Multi(vec![])));
    let mut f = store.open("/d/s", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(7, 0, 3000)).unwrap();
    f.close().unwrap();
    let s = store.stat("/d/s").unwrap().ino - 1;
    let ssum = c.layout.inode_off + s * INODE_SIZE + offset_of!(Inode, ssum) as u64;
    poke(&t.name, ssum + 4, &Edit::Set32(0x7fff_ffff));
    let o = t.attach();
    assert_eq!(read_all(&o, "/d/s").unwrap_err().errno(), libc::EIO);
    o.fsck(true);
    assert_second_fsck_clean(&o);
    assert_file_is(&o, "/d/s", 7, 3000);
    // Its CRC replaced too: nothing verifies, the file is kept empty and incomplete.
    poke(&t.name, ssum, &Edit::Set64(0x7fff_ffff_0bad_0bad));
    let o = t.attach();
    assert_eq!(read_all(&o, "/d/s").unwrap_err().errno(), libc::EIO);
    o.fsck(true);
    assert_second_fsck_clean(&o);
    let st = o.stat("/d/s").unwrap();
    assert_eq!((st.size, st.state), (0, WriteState::Incomplete));
    assert_file_is(&o, "/d/a", 1, A_SIZE);
    assert_file_is(&o, "/d/b", 2, B_SIZE);
}
