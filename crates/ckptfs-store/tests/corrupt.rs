//! Damaged metadata is never served as data: one field of one structure of the segment
//! (superblock, inode, chunk entry, free stacks, name hash, lock words) is overwritten,
//! then a fresh attach reads every file, writes a new one, runs fsck and fsck --repair.
//! Every read returns the exact bytes written or an error (EIO naming the file, ENOENT
//! for a lost name); nothing panics or hangs; repair never drops or changes the
//! undamaged file, and a damaged file is either intact, an error, or quarantined in
//! /lost+found.

#[macro_use]
mod corrupt_support;
mod support;

use ckptfs_store::layout::{ChunkEntry, Inode, Layout, Superblock, LEASE_SLOT_SIZE};
use ckptfs_store::OpenFlags;
use corrupt_support::*;
use std::mem::offset_of;
use support::*;

#[test]
fn child_entry() {
    support::child_entry();
}

const DEAD_TID: u32 = 0x3fff_fff0;

// ---- superblock
case!(sb_magic, "sb.magic", false, |c| (0, Edit::Xor32(0x40)));
case!(sb_version, "sb.version", false, |c| (8, Edit::Set32(2)));
case!(sb_chunk_shift, "sb.chunk_shift", false, |c| (
    16 + offset_of!(Layout, chunk_shift) as u64,
    Edit::Xor32(1)
));
case!(sb_creator_uid, "sb.creator_uid", false, |c| (
    offset_of!(Superblock, creator_uid) as u64,
    Edit::Xor32(0x100)
));
case!(sb_mem_top_huge, "sb.mem_top_huge", false, |c| (
    offset_of!(Superblock, mem_top) as u64,
    Edit::Set32(u32::MAX)
));
case!(sb_mem_top_zero, "sb.mem_top_zero", false, |c| (
    offset_of!(Superblock, mem_top) as u64,
    Edit::Set32(0)
));
case!(sb_spill_top, "sb.spill_top", false, |c| (
    offset_of!(Superblock, spill_top) as u64,
    Edit::Set32(7)
));
case!(sb_fid_top_huge, "sb.fid_top_huge", false, |c| (
    offset_of!(Superblock, fid_top) as u64,
    Edit::Set32(u32::MAX)
));
case!(sb_ns_lock_dead_owner, "sb.ns_lock", false, |c| (
    offset_of!(Superblock, ns_lock) as u64,
    Edit::Set32(DEAD_TID)
));
/// A live process that does not map the segment (a `sleep` child) named as the holder
/// of a lock: recovered too, since it cannot hold a lock inside the segment.
fn unrelated_live_owner_case(case: &'static str, field: fn(&Ctx) -> u64) {
    struct Sleeper(std::process::Child);
    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let sleeper = Sleeper(std::process::Command::new("sleep").arg("300").spawn().unwrap());
    let pid = sleeper.0.id();
    run_case(case, move |c| (field(c), Edit::Set32(pid)), false);
}

#[test]
fn sb_ns_lock_unrelated_live_owner() {
    unrelated_live_owner_case("sb.ns_lock_live", |_| offset_of!(Superblock, ns_lock) as u64);
}

#[test]
fn ino_lock_unrelated_live_owner() {
    unrelated_live_owner_case("ino.lock_live", |c| c.inode(c.a, offset_of!(Inode, lock)));
}
// A mutex's type field damaged into "priority protect, ceiling 4095": glibc would abort
// the process (an assertion on the ceiling) rather than return an error.
const BAD_KIND: u32 = 0x00ff_f0c0;
case!(sb_ns_lock_kind, "sb.ns_lock_kind", false, |c| (
    offset_of!(Superblock, ns_lock) as u64 + 16,
    Edit::Set32(BAD_KIND)
));
case!(sb_alloc_lock_kind, "sb.alloc_lock_kind", false, |c| (
    offset_of!(Superblock, alloc_lock) as u64 + 16,
    Edit::Set32(BAD_KIND)
));
case!(ino_lock_kind, "ino.lock_kind", false, |c| (
    c.inode(c.a, offset_of!(Inode, lock)) + 16,
    Edit::Set32(BAD_KIND)
));
case!(sb_alloc_lock_dead_owner, "sb.alloc_lock", false, |c| (
    offset_of!(Superblock, alloc_lock) as u64,
    Edit::Set32(DEAD_TID)
));
case!(
    sb_alloc_lock_waiters_no_owner,
    "sb.alloc_lock_waiters",
    false,
    |c| (
        offset_of!(Superblock, alloc_lock) as u64,
        Edit::Set32(0x8000_0000)
    )
);

#[test]
fn sb_rename_intent_with_huge_ids() {
    run_case(
        "sb.rename",
        |_c| {
            let off = offset_of!(Superblock, rename) as u64;
            // active = 1 and src = huge, written together (src follows active).
            (off, Edit::Set64(1 | (0xffff_fff0u64 << 32)))
        },
        false,
    );
}

// ---- inode of /d/a
case!(ino_kind, "ino.kind", true, |c| (
    c.inode(c.a, offset_of!(Inode, kind)),
    Edit::Set32(9)
));
case!(ino_mode, "ino.mode", true, |c| (
    c.inode(c.a, offset_of!(Inode, mode)),
    Edit::Xor32(0o4000)
));
case!(ino_parent_huge, "ino.parent_huge", false, |c| (
    c.inode(c.a, offset_of!(Inode, parent)),
    Edit::Set32(0xffff_fff0)
));
case!(ino_parent_other, "ino.parent_other", false, |c| (
    c.inode(c.a, offset_of!(Inode, parent)),
    Edit::Set32(c.b)
));
case!(ino_name_len_huge, "ino.name_len", false, |c| (
    c.inode(c.a, offset_of!(Inode, name_len)),
    Edit::Set32(60_000)
));
// "a" -> "b": the damaged file takes the undamaged one's name.
case!(ino_name_to_other_name, "ino.name", false, |c| (
    c.inode(c.a, offset_of!(Inode, name)),
    Edit::Xor32((b'a' ^ b'b') as u32)
));
case!(ino_next_sib_huge, "ino.next_sib", false, |c| (
    c.inode(c.a, offset_of!(Inode, next_sib)),
    Edit::Set32(77_777)
));
case!(ino_prev_sib_huge, "ino.prev_sib", false, |c| (
    c.inode(c.a, offset_of!(Inode, prev_sib)),
    Edit::Set32(77_777)
));
case!(dir_parent_huge, "dir.parent", false, |c| (
    c.inode(c.d, offset_of!(Inode, parent)),
    Edit::Set32(0xffff_fff0)
));
case!(dir_parent_cycle, "dir.parent_cycle", false, |c| (
    c.inode(c.d, offset_of!(Inode, parent)),
    Edit::Set32(c.d)
));
case!(dir_first_child_huge, "dir.first_child", false, |c| (
    c.inode(c.d, offset_of!(Inode, first_child)),
    Edit::Set32(0xffff_fff0)
));
case!(ino_flags_orphan, "ino.flags", false, |c| (
    c.inode(c.a, offset_of!(Inode, flags)),
    Edit::Set32(1)
));
case!(ino_size_up, "ino.size_up", true, |c| (
    c.inode(c.a, offset_of!(Inode, size)),
    Edit::Add64(1000)
));
case!(ino_size_down, "ino.size_down", true, |c| (
    c.inode(c.a, offset_of!(Inode, size)),
    Edit::Add64(-1000)
));
case!(ino_nchunks_zero, "ino.nchunks", true, |c| (
    c.inode(c.a, offset_of!(Inode, nchunks)),
    Edit::Set32(0)
));
case!(ino_uid, "ino.uid", true, |c| (
    c.inode(c.a, offset_of!(Inode, uid)),
    Edit::Xor32(1)
));
case!(ino_ns_crc, "ino.ns_crc", true, |c| (
    c.inode(c.a, offset_of!(Inode, ns_crc)),
    Edit::Xor32(1)
));
case!(ino_data_crc, "ino.data_crc", true, |c| (
    c.inode(c.a, offset_of!(Inode, data_crc)),
    Edit::Xor32(1)
));
case!(ino_lock_dead_owner, "ino.lock", false, |c| (
    c.inode(c.a, offset_of!(Inode, lock)),
    Edit::Set32(DEAD_TID)
));
case!(ino_wstate, "ino.wstate", false, |c| (
    c.inode(c.a, offset_of!(Inode, wstate)),
    Edit::Set32(9)
));
case!(ino_lease_dead_writer, "ino.lease", false, |c| {
    // A lease slot of /d/a at its home position naming a process that does not exist
    // (pid 0x3ffffff0) with writers = 1, and the inode's lease count saying so.
    let home = (c.a as u64).wrapping_mul(0x9E37_79B1) % c.layout.lease_slots as u64;
    let slot = c.layout.lease_off + home * LEASE_SLOT_SIZE;
    (
        0,
        Edit::Multi(vec![
            (slot, Edit::Set64((c.a as u64 + 1) | (DEAD_TID as u64) << 32)),
            (slot + 8, Edit::Set32(1)),
            (c.inode(c.a, offset_of!(Inode, nleases)), Edit::Set32(1)),
        ]),
    )
});

case!(ino_srun_garbage, "ino.srun", true, |c| (
    // A chunked file given a small-file run: its data record no longer matches.
    c.inode(c.a, offset_of!(Inode, srun)),
    Edit::Set64(0x0000_0004_0000_0011)
));
case!(ino_nleases_huge, "ino.nleases", false, |c| (
    c.inode(c.a, offset_of!(Inode, nleases)),
    Edit::Set32(1_000_000)
));
case!(block_map_all_set, "block_map", false, |c| (
    c.layout.block_map_off,
    Edit::Set64(u64::MAX)
));

// ---- chunk entry of /d/a's chunk 1
case!(chunk_owner_to_other_file, "chunk.owner_other", true, |c| (
    c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, owner)),
    Edit::Set32(c.b + 1)
));
case!(chunk_owner_free, "chunk.owner_free", true, |c| (
    c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, owner)),
    Edit::Set32(0)
));
case!(chunk_owner_huge, "chunk.owner_huge", true, |c| (
    c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, owner)),
    Edit::Set32(u32::MAX)
));
case!(chunk_logical, "chunk.logical", true, |c| (
    c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, logical)),
    Edit::Set32(2)
));
case!(chunk_logical_huge, "chunk.logical_huge", true, |c| (
    c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, logical)),
    Edit::Set32(u32::MAX - 1)
));
case!(chunk_length_huge, "chunk.hwm", true, |c| (
    c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, sum) + 4),
    Edit::Set32(0x7fff_ffff)
));
case!(chunk_crc, "chunk.crc", true, |c| (
    c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, sum)),
    Edit::Xor32(1)
));
case!(chunk_stale_bit, "chunk.stale", false, |c| (
    c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, sum) + 4),
    Edit::Xor32(0x8000_0000)
));
case!(chunk_meta, "chunk.meta", true, |c| (
    c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, meta)),
    Edit::Xor32(1)
));

// ---- free stacks and the name hash
case!(mem_stack_entry_huge, "stack.mem_entry", false, |c| (
    c.layout.mem_stack_off + (c.mem_top as u64 - 1) * 4,
    Edit::Set32(u32::MAX)
));
case!(mem_stack_entry_owned, "stack.mem_entry_owned", false, |c| (
    c.layout.mem_stack_off + (c.mem_top as u64 - 1) * 4,
    Edit::Set32(c.a_chunks[0])
));
case!(fid_stack_entry_huge, "stack.fid_entry", false, |c| (
    c.layout.fid_stack_off + (c.fid_top as u64 - 1) * 4,
    Edit::Set32(u32::MAX)
));
case!(fid_stack_entry_used, "stack.fid_entry_used", false, |c| (
    c.layout.fid_stack_off + (c.fid_top as u64 - 1) * 4,
    Edit::Set32(c.a)
));
case!(hash_slot_huge_file_id, "hash.slot_huge", false, |c| (
    c.layout.hash_off + c.a_slot as u64 * 4,
    Edit::Set32(0xffff_fff0)
));
case!(hash_empty_slot_huge_file_id, "hash.empty_slot_huge", false, |c| (
    c.layout.hash_off + c.empty_slot as u64 * 4,
    Edit::Set32(0xffff_fff0)
));
case!(hash_slot_other_file, "hash.slot_other", false, |c| (
    c.layout.hash_off + c.a_slot as u64 * 4,
    Edit::Set32(c.b + 1)
));

/// The repair of a chunk whose owner was changed to another file does not give it to
/// that file: both files read as before or EIO, and the chunk's bytes are kept in
/// /lost+found with a report.
#[test]
fn repair_quarantines_a_chunk_with_a_changed_owner_instead_of_moving_it() {
    let (_t, ctx, store) = damaged("corrupt-repair-owner", |c| {
        (
            c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, owner)),
            Edit::Set32(c.b + 1),
        )
    });
    let rep = store.fsck(false);
    assert!(
        rep.problems.iter().any(|p| p.kind == "damaged-chunk-entry"),
        "{:?}",
        rep.problems
    );
    let rep = store.fsck(true);
    assert_eq!(rep.quarantined.len(), 1, "{rep:?}");
    assert_file_is(&store, "/d/b", 2, B_SIZE);
    // /d/a lost a chunk: it stays, marked incomplete, and never reads wrong bytes as a
    // complete file.
    let st = store.stat("/d/a").unwrap();
    assert_eq!(st.state, ckptfs_store::WriteState::Incomplete);
    let names: Vec<String> = store
        .read_dir("/lost+found")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&format!("chunk{}", ctx.a_chunks[1])), "{names:?}");
    assert!(names.contains(&"REPORT".to_string()), "{names:?}");
    let data = read_all(&store, &format!("/lost+found/chunk{}", ctx.a_chunks[1])).unwrap();
    assert_eq!(data, pattern(1, CHUNK, CHUNK as usize));
}

/// A name damaged into another file's name: repair keeps the undamaged file under its
/// name and moves the damaged one to /lost+found with its data.
#[test]
fn repair_keeps_the_undamaged_file_when_a_name_is_changed_to_its_name() {
    let (_t, ctx, store) = damaged("corrupt-repair-name", |c| {
        (
            c.inode(c.a, offset_of!(Inode, name)),
            Edit::Xor32((b'a' ^ b'b') as u32),
        )
    });
    let rep = store.fsck(true);
    assert!(rep.problems.iter().any(|p| p.kind == "damaged-inode"), "{rep:?}");
    assert_file_is(&store, "/d/b", 2, B_SIZE);
    let moved = format!("/lost+found/ino{}", ctx.a + 1);
    assert_eq!(read_all(&store, &moved).unwrap(), pattern(1, 0, A_SIZE as usize));
    assert_eq!(
        store.stat(&moved).unwrap().state,
        ckptfs_store::WriteState::Incomplete
    );
}

/// A chunk whose owner was zeroed looks free; its entry checksum still proves whose it
/// is: reads are EIO (the file is short of a chunk), and repair gives it back, so the
/// file reads whole again instead of being cut.
#[test]
fn repair_gives_back_a_chunk_whose_owner_was_zeroed() {
    let (_t, _, store) = damaged("corrupt-repair-zeroed", |c| {
        (
            c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, owner)),
            Edit::Set32(0),
        )
    });
    assert_eq!(read_all(&store, "/d/a").unwrap_err().errno(), libc::EIO);
    let rep = store.fsck(true);
    assert!(rep.is_clean(), "{rep:?}");
    assert!(rep.quarantined.is_empty(), "{rep:?}");
    assert_file_is(&store, "/d/a", 1, A_SIZE);
    assert_file_is(&store, "/d/b", 2, B_SIZE);
    assert!(store.fsck(false).problems.is_empty());
    // The chunk is no longer on a free stack: new files do not take it.
    let mut f = store.open("/new", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(3, 0, 20 * CHUNK as usize)).unwrap();
    f.close().unwrap();
    assert_file_is(&store, "/d/a", 1, A_SIZE);
}

/// The owner of a file's *last* chunk changed to an id no file has: the file is a chunk
/// short, and the missing one lies past every chunk it still owns. Reads are EIO;
/// repair keeps the whole chunks before it and marks the file incomplete, instead of
/// keeping the size and serving zeros for the lost tail.
#[test]
fn repair_cuts_a_file_whose_last_chunk_was_lost_instead_of_serving_zeros() {
    let (_t, ctx, store) = damaged("corrupt-repair-tail", |c| {
        (
            c.chunk(*c.a_chunks.last().unwrap(), offset_of!(ChunkEntry, owner)),
            Edit::Set32(u32::MAX),
        )
    });
    assert_eq!(read_all(&store, "/d/a").unwrap_err().errno(), libc::EIO);
    let rep = store.fsck(true);
    assert!(rep.problems.iter().any(|p| p.kind == "lost-chunk"), "{rep:?}");
    let kept = (ctx.a_chunks.len() as u64 - 1) * CHUNK;
    let st = store.stat("/d/a").unwrap();
    assert_eq!((st.size, st.state), (kept, ckptfs_store::WriteState::Incomplete));
    assert_eq!(read_all(&store, "/d/a").unwrap(), pattern(1, 0, kept as usize));
    assert_file_is(&store, "/d/b", 2, B_SIZE);
}

/// A file's size record damaged to a huge value: repair moves the file to /lost+found
/// with the bytes it holds and the size they cover, not the damaged size (which would
/// read as an exabyte of zeros).
#[test]
fn repair_quarantines_a_file_with_a_damaged_size_at_the_size_its_chunks_hold() {
    let (_t, ctx, store) = damaged("corrupt-repair-size", |c| {
        (c.inode(c.b, offset_of!(Inode, size)), Edit::Set64(1 << 60))
    });
    assert_eq!(read_all(&store, "/d/b").unwrap_err().errno(), libc::EIO);
    store.fsck(true);
    let moved = format!("/lost+found/ino{}", ctx.b + 1);
    let st = store.stat(&moved).unwrap();
    assert_eq!(
        (st.size, st.state),
        (B_SIZE, ckptfs_store::WriteState::Incomplete)
    );
    assert_eq!(read_all(&store, &moved).unwrap(), pattern(2, 0, B_SIZE as usize));
    assert_file_is(&store, "/d/a", 1, A_SIZE);
}

/// A middle chunk's checksum word zeroed (length 0 and CRC 0, which would verify: the CRC
/// of no bytes is 0): reads are EIO instead of a chunk of zeros, and fsck names it.
#[test]
fn a_zeroed_checksum_word_is_damage_not_a_chunk_of_zeros() {
    let (_t, _, store) = damaged("corrupt-zero-sum", |c| {
        (
            c.chunk(c.a_chunks[1], offset_of!(ChunkEntry, sum)),
            Edit::Set64(0),
        )
    });
    assert_eq!(read_all(&store, "/d/a").unwrap_err().errno(), libc::EIO);
    let rep = store.fsck(false);
    assert!(rep.problems.iter().any(|p| p.kind == "empty-chunk"), "{rep:?}");
    assert_file_is(&store, "/d/b", 2, B_SIZE);
}

/// The other side of that rule: sparse files (a small file cut short, grown by a
/// truncation, then written far past its end; a file of holes only) read back as holes
/// and data, not EIO, and fsck finds nothing.
#[test]
fn sparse_files_read_back_with_the_empty_chunk_rule() {
    let t = TempStore::new("corrupt-sparse", MEM, CHUNK, MAX_FILES, None);
    let store = t.attach();
    let mut f = store.open("/s", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(b"small").unwrap();
    f.set_len(2).unwrap();
    f.set_len(3 * CHUNK).unwrap();
    let far = 5 * CHUNK + 17;
    assert_eq!(f.pwrite(&pattern(4, 0, 100), far).unwrap(), 100);
    f.close().unwrap();
    let data = read_all(&store, "/s").unwrap();
    assert_eq!(data.len() as u64, far + 100);
    assert_eq!(&data[..2], b"sm");
    assert!(data[2..far as usize].iter().all(|&b| b == 0));
    assert_eq!(&data[far as usize..], &pattern(4, 0, 100)[..]);
    let mut h = store.open("/holes", OpenFlags::CREATE, 0o644).unwrap();
    h.set_len(2 * CHUNK + 5).unwrap();
    h.close().unwrap();
    assert_eq!(
        read_all(&store, "/holes").unwrap(),
        vec![0u8; 2 * CHUNK as usize + 5]
    );
    let rep = store.fsck(false);
    assert!(rep.problems.is_empty(), "{rep:?}");
}
