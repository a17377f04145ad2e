//! Crash semantics at the store's named crash points (`CKPTFS_CRASH_AT`): a child dies
//! at the point, then a process that attaches afterwards checks that closed files are
//! intact, the victim is what the failure case in docs/design.md says, and fsck repairs
//! what it reports. Also: checksums catching flipped bytes, stale checksums left by a dead
//! overwriter, forked children, and files closed after a failed write. Random SIGKILLs are
//! in `crash.rs`.

mod crash_support;
mod support;

use ckptfs_store::{ChunkLocation, OpenFlags, Store, StoreError, WriteState};
use crash_support::*;
use std::time::{Duration, Instant};
use support::*;

/// Runs the writer when this executable is spawned as a child (see `support`).
#[test]
fn child_entry() {
    support::child_entry();
}

#[test]
fn crash_at_alloc_before_owner_leaves_victim_incomplete_up_to_last_write() {
    // Appending 100_000 bytes to a 100_000-byte file: the first piece fills chunk 1 up to
    // 131072 (size updated), the allocation of chunk 2 dies.
    crash_point_case(
        "alloc-before-owner",
        100_000,
        "append",
        "",
        100_000,
        &[],
        |s, v| {
            let st = s.stat(&v.file_path(0)).unwrap();
            assert_eq!(st.state, WriteState::Incomplete);
            assert_eq!(
                assert_prefix_is(s, &v.file_path(0), v.file_seed(0), 200_000),
                131_072
            );
            assert_eq!(s.info().incomplete, 1);
        },
    );
}

#[test]
fn crash_at_alloc_after_owner_leaves_victim_incomplete_and_fsck_repairs_its_chunk() {
    crash_point_case(
        "alloc-after-owner",
        100_000,
        "append",
        "",
        100_000,
        &["chunk-past-eof", "bad-chunk-count"],
        |s, v| {
            let st = s.stat(&v.file_path(0)).unwrap();
            assert_eq!(st.state, WriteState::Incomplete);
            assert_eq!(
                assert_prefix_is(s, &v.file_path(0), v.file_seed(0), 200_000),
                131_072
            );
            assert_eq!(s.fsck(false).incomplete, vec![v.file_path(0)]);
        },
    );
}

#[test]
fn crash_in_the_middle_of_an_affinity_swap_loses_and_doubles_no_free_chunk() {
    // The writer dies between the two stores of a swap on the free stack (one chunk id
    // twice, one missing), holding the allocation lock: recovery rebuilds the stack from
    // the owners; assert_chunk_accounting and the allocations after it check the count.
    for point in ["affinity-before-swap", "affinity-mid-swap"] {
        crash_point_case(point, 100_000, "reuse", "", 100_000, &[], |s, v| {
            // The append's first piece filled chunk 1; the allocation of chunk 2 died
            // before taking it: the victim is incomplete, its first 131072 bytes intact.
            let st = s.stat(&v.file_path(0)).unwrap();
            assert_eq!(st.state, WriteState::Incomplete);
            assert_eq!(
                assert_prefix_is(s, &v.file_path(0), v.file_seed(0), 200_000),
                131_072
            );
        });
    }
}

#[test]
fn crash_at_free_after_owner_during_unlink_completes_the_unlink() {
    crash_point_case("free-after-owner", 300_000, "unlink", "", 0, &[], |s, v| {
        assert_eq!(s.stat(&v.file_path(0)).unwrap_err().errno(), libc::ENOENT);
        assert_file_is(s, &v.file_path(1), v.file_seed(1), 300_000);
        let names: Vec<String> = s.read_dir("/v").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec!["f1"]);
    });
}

#[test]
fn crash_at_free_after_owner_during_truncate_keeps_data_below_new_size() {
    crash_point_case(
        "free-after-owner",
        300_000,
        "truncate",
        "",
        70_000,
        &["bad-chunk-count", "chunk-past-eof"],
        |s, v| {
            let p = v.file_path(0);
            let st = s.stat(&p).unwrap();
            assert_eq!(
                st.state,
                WriteState::Incomplete,
                "truncate holds the file open for writing"
            );
            let data = read_all(s, &p).unwrap();
            assert!(data.len() >= 70_000);
            assert_eq!(first_mismatch(v.file_seed(0), 0, &data[..70_000]), None);
        },
    );
}

#[test]
fn crash_at_inode_after_kind_keeps_namespace_consistent() {
    crash_point_case("inode-after-kind", 50_000, "create", "", 0, &[], |s, v| {
        // The creation committed (kind set): the file exists, empty, under its name, and
        // is incomplete: its creator died before it could write or close it.
        let mut names: Vec<String> = s.read_dir("/v").unwrap().into_iter().map(|e| e.name).collect();
        names.sort();
        assert_eq!(names, vec!["f0", "f1", "new"]);
        let st = s.stat("/v/new").unwrap();
        assert_eq!((st.size, st.state), (0, WriteState::Incomplete));
        for i in 0..2 {
            assert_file_is(s, &v.file_path(i), v.file_seed(i), 50_000);
        }
    });
}

fn check_rename_completed(s: &Store, v: &Spec) {
    assert_eq!(s.stat(&v.file_path(0)).unwrap_err().errno(), libc::ENOENT);
    // The target now has the source's data.
    assert_file_is(s, &v.file_path(1), v.file_seed(0), 120_000);
    let names: Vec<String> = s.read_dir("/v").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec!["f1"]);
    assert_eq!(s.info().files, 2 + 1);
}

#[test]
fn crash_at_rename_after_intent_is_completed_by_recovery() {
    crash_point_case(
        "rename-after-intent",
        120_000,
        "rename",
        "x",
        0,
        &[],
        check_rename_completed,
    );
}

#[test]
fn crash_at_rename_after_victim_is_completed_by_recovery() {
    crash_point_case(
        "rename-after-victim",
        120_000,
        "rename",
        "x",
        0,
        &[],
        check_rename_completed,
    );
}

#[test]
fn crash_at_write_before_size_keeps_size_at_last_completed_write() {
    crash_point_case(
        "write-before-size",
        100_000,
        "append",
        "",
        100_000,
        &[],
        |s, v| {
            let st = s.stat(&v.file_path(0)).unwrap();
            assert_eq!(st.state, WriteState::Incomplete);
            assert_eq!(
                assert_prefix_is(s, &v.file_path(0), v.file_seed(0), 200_000),
                100_000
            );
        },
    );
}

#[test]
fn crash_at_unlink_after_orphan_flag_completes_the_unlink_not_a_quarantine() {
    // Killed holding the namespace lock between the ORPHAN flag and the record's
    // checksum: the recovery adopts the record, so the file is freed as unlinked, not
    // taken for a damaged one and moved to lost+found.
    crash_point_case(
        "unlink-after-orphan-flag",
        100_000,
        "unlink",
        "",
        0,
        &[],
        |s, v| {
            assert!(matches!(s.stat(&v.file_path(0)), Err(StoreError::NotFound(_))));
            assert!(s.read_dir("/lost+found").is_err(), "nothing quarantined");
            assert_eq!(s.info().orphans, 0);
            assert_file_is(s, &v.file_path(1), v.file_seed(1), 100_000);
        },
    );
}

#[test]
fn crash_at_lease_after_claim_leaves_the_file_as_it_was_and_the_slot_reusable() {
    // Killed inside open(), holding the file lock, after claiming a lease slot and
    // before counting it: the file was not touched; the next opener recounts and reaps.
    crash_point_case("lease-after-claim", 100_000, "append", "", 1_000, &[], |s, v| {
        let st = s.stat(&v.file_path(0)).unwrap();
        assert_eq!((st.state, st.size), (WriteState::Complete, 100_000));
        assert_file_is(s, &v.file_path(0), v.file_seed(0), 100_000);
        // Opened and closed again many times: slots are found and released as usual.
        for _ in 0..100 {
            let f = s
                .open(
                    &v.file_path(0),
                    OpenFlags {
                        write: true,
                        ..Default::default()
                    },
                    0,
                )
                .unwrap();
            f.close().unwrap();
        }
        assert_eq!(s.stat(&v.file_path(0)).unwrap().state, WriteState::Complete);
    });
}

// ------------------------------------------------------------------ small files

#[test]
fn crash_in_symlink_creation_before_the_kind_store_leaves_no_symlink_and_no_block() {
    // Killed holding the namespace lock after the target was written into a run, before
    // the inode's kind commits it: nothing is created and the run goes back.
    crash_point_case("symlink-before-kind", 5_000, "symlink", "to", 0, &[], |s, v| {
        assert_eq!(
            s.stat(&format!("{}/new", v.dir)).unwrap_err().errno(),
            libc::ENOENT
        );
        let names: Vec<String> = s.read_dir("/v").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert_file_is(s, &v.file_path(0), v.file_seed(0), 5_000);
        // The two 5,000-byte files' runs are all the blocks in use.
        assert_eq!(s.info().small_blocks_used, 4);
    });
}

#[test]
fn crash_in_symlink_creation_after_the_kind_store_leaves_a_complete_symlink() {
    crash_point_case("inode-after-kind", 5_000, "symlink", "to", 0, &[], |s, v| {
        let p = format!("{}/new", v.dir);
        assert_eq!(s.stat(&p).unwrap().kind, ckptfs_store::FileKind::Symlink);
        assert_eq!(s.readlink(&p).unwrap(), v.file_path(1).as_bytes());
    });
}

#[test]
fn crash_at_small_grow_before_switch_keeps_the_old_run_and_its_bytes() {
    // 5,000 bytes in a run of 2 blocks; appending 5,000 more needs 4: killed holding the
    // allocation lock after the copy, before the run switch.
    crash_point_case("small-before-switch", 5_000, "append", "", 5_000, &[], |s, v| {
        let st = s.stat(&v.file_path(0)).unwrap();
        assert_eq!(st.state, WriteState::Incomplete);
        assert_eq!((st.size, st.allocated), (5_000, 8192));
        assert_eq!(
            assert_prefix_is(s, &v.file_path(0), v.file_seed(0), 10_000),
            5_000
        );
        assert_file_is(s, &v.file_path(1), v.file_seed(1), 5_000);
    });
}

#[test]
fn crash_at_move_after_alloc_keeps_the_run_and_frees_the_chunk() {
    // 10,000 bytes in a run; appending 20,000 takes it past 16 KiB: killed after the
    // chunk was allocated, before the bytes were copied into it.
    crash_point_case("move-after-alloc", 10_000, "append", "", 20_000, &[], |s, v| {
        let st = s.stat(&v.file_path(0)).unwrap();
        assert_eq!(st.state, WriteState::Incomplete);
        assert_eq!((st.size, st.chunks, st.allocated), (10_000, 0, 16384));
        assert_eq!(
            assert_prefix_is(s, &v.file_path(0), v.file_seed(0), 30_000),
            10_000
        );
    });
}

#[test]
fn crash_at_move_before_switch_keeps_the_run_and_frees_the_chunk() {
    crash_point_case("move-before-switch", 10_000, "append", "", 20_000, &[], |s, v| {
        let st = s.stat(&v.file_path(0)).unwrap();
        assert_eq!(st.state, WriteState::Incomplete);
        assert_eq!((st.size, st.chunks), (10_000, 0));
        assert_eq!(
            assert_prefix_is(s, &v.file_path(0), v.file_seed(0), 30_000),
            10_000
        );
    });
}

#[test]
fn crash_at_write_before_size_in_a_small_file_keeps_its_size() {
    crash_point_case("write-before-size", 3_000, "append", "", 2_000, &[], |s, v| {
        let st = s.stat(&v.file_path(0)).unwrap();
        assert_eq!(st.state, WriteState::Incomplete);
        assert_eq!(st.size, 3_000);
        assert_eq!(assert_prefix_is(s, &v.file_path(0), v.file_seed(0), 5_000), 3_000);
        // Growing it shows zeros past the old end, not the dead write's bytes.
        let mut f = s
            .open(
                &v.file_path(0),
                OpenFlags {
                    write: true,
                    ..Default::default()
                },
                0,
            )
            .unwrap();
        f.set_len(5_000).unwrap();
        f.close().unwrap();
        let data = read_all(s, &v.file_path(0)).unwrap();
        assert!(data[3_000..].iter().all(|&b| b == 0));
    });
}

// ------------------------------------------------------------------ overwrites, checksums

#[test]
fn sigkill_during_overwrite_never_leaves_a_checksum_mismatch() {
    let t = TempStore::new("crash-ow", 16 << 20, CHUNK, 64, None);
    let mut rng = Rng::from_env(77);
    let size = 4 * CHUNK;
    for round in 0..10 {
        let mut s = Spec::new(&t.name, "overwrite");
        s.dir = format!("/ow{round}");
        s.size = size;
        let mut p = Proc::spawn(&s, &[]);
        assert!(
            p.wait_for(|l| l == "ready", Duration::from_secs(20)),
            "{:?}",
            p.lines()
        );
        std::thread::sleep(Duration::from_millis(rng.range(1, 40)));
        p.kill();
        let store = t.attach();
        let path = format!("{}/ow", s.dir);
        assert_eq!(store.stat(&path).unwrap().state, WriteState::Incomplete);
        // A torn overwrite may mix generations, but must never read as corrupt.
        let data = read_all(&store, &path).unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(data.len() as u64, size);
        assert!(data.iter().all(|&b| b == 0xaa || b == 0x55));
        let rep = store.fsck(false);
        for p in &rep.problems {
            assert_eq!(p.kind, "stale-checksum", "round {round}: {p:?}");
        }
        repair_and_assert_clean(&store);
    }
}

/// Flip one byte of a chunk in place (memory region or spill file).
fn flip(store: &Store, loc: ChunkLocation, at: u64) {
    match loc {
        ChunkLocation::Memory(off) => {
            let r = store.data_region();
            assert!(off + at < r.len);
            // SAFETY: the offset lies inside the mapped data region; this test is the only
            // process touching the store at this point.
            unsafe {
                let p = (r.base as *mut u8).add((off + at) as usize);
                p.write_volatile(p.read_volatile() ^ 0x40);
            }
        }
        ChunkLocation::Spill(off) => {
            use std::os::unix::fs::FileExt;
            let path = store.info().spill_path.unwrap();
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .unwrap();
            let mut b = [0u8];
            f.read_exact_at(&mut b, off + at).unwrap();
            b[0] ^= 0x40;
            f.write_all_at(&b, off + at).unwrap();
        }
    }
}

#[test]
fn flipped_byte_is_detected_by_fsck_verify_all_and_readers_in_memory_and_spill() {
    let dir = tempfile::tempdir().unwrap();
    // 2 memory chunks, then spill: the 4-chunk file has chunks 0-1 in memory, 2-3 in spill.
    let t = TempStore::new("crash-flip", 2 * CHUNK, CHUNK, 64, Some((dir.path(), 8 * CHUNK)));
    let spec = setup_files(&t.name, "/c", 1, 4 * CHUNK - 1000, 5);
    let path = spec.file_path(0);
    let store = t.attach();
    assert!(store.fsck(false).problems.is_empty());
    let chunks = store.chunk_list(&path).unwrap();
    assert_eq!(chunks.len(), 4);
    assert!(matches!(chunks[1].location, ChunkLocation::Memory(_)));
    assert!(matches!(chunks[3].location, ChunkLocation::Spill(_)));
    flip(&store, chunks[1].location, 1234);
    flip(&store, chunks[3].location, 7);

    let rep = store.fsck(false);
    let corrupt: Vec<_> = rep
        .problems
        .iter()
        .filter(|p| p.kind == "corrupt-chunk")
        .collect();
    assert_eq!(corrupt.len(), 2, "{:?}", rep.problems);
    assert!(
        corrupt[0].detail.contains(&path) && corrupt[0].detail.contains("chunk 1"),
        "{corrupt:?}"
    );
    assert!(corrupt[1].detail.contains("chunk 3"), "{corrupt:?}");
    assert!(
        !store.fsck(true).is_clean(),
        "data damage cannot be repaired, only reported"
    );

    let mut f = store.open(&path, OpenFlags::READ, 0).unwrap();
    assert_eq!(f.verify_all().unwrap_err().errno(), libc::EIO);
    // Reading in this process (not the writer): chunk 0 is fine, chunk 1 is EIO.
    let mut f = store.open(&path, OpenFlags::READ, 0).unwrap();
    let mut buf = vec![0u8; CHUNK as usize];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), CHUNK as usize);
    assert_eq!(first_mismatch(spec.file_seed(0), 0, &buf), None);
    assert_eq!(f.pread(&mut buf, CHUNK + 5).unwrap_err().errno(), libc::EIO);
    assert_eq!(f.pread(&mut buf, 3 * CHUNK).unwrap_err().errno(), libc::EIO);
    assert_eq!(read_all(&store, &path).unwrap_err().errno(), libc::EIO);

    // Undo the damage: everything verifies again (detection is exact, not sticky).
    flip(&store, chunks[1].location, 1234);
    flip(&store, chunks[3].location, 7);
    assert!(store.fsck(false).problems.is_empty());
    assert_file_is(&store, &path, spec.file_seed(0), 4 * CHUNK - 1000);
}

#[test]
fn reader_attached_before_writer_died_verifies_its_checksums() {
    let t = TempStore::new("crash-deadread", 8 << 20, CHUNK, 64, None);
    // This process stays attached while the writer dies, and never stats the file first.
    let store = t.attach();
    let mut s = Spec::new(&t.name, "files");
    s.dir = "/d".into();
    s.count = 0;
    s.keep = 1;
    s.size = 10_000;
    s.hold = 200_000;
    s.blocks = vec![100_000];
    let mut p = Proc::spawn(&s, &[]);
    assert!(p.wait_for(|l| l == "held /d/held 200000", Duration::from_secs(20)));
    // Located while the writer lives (stat would reap its lease after its death).
    let chunks = store.chunk_list(&s.held_path()).unwrap();
    p.kill();
    flip(&store, chunks[0].location, 99);
    let mut f = store.open(&s.held_path(), OpenFlags::READ, 0).unwrap();
    let mut buf = vec![0u8; 1000];
    let r = f.pread(&mut buf, 0);
    assert_eq!(
        r.map_err(|e| e.errno()),
        Err(libc::EIO),
        "a file whose writer died must be verified on read"
    );
}

#[test]
fn unlinking_file_whose_writer_died_in_alloc_frees_every_chunk() {
    let t = TempStore::new("crash-unlink-dead", 8 << 20, CHUNK, 64, None);
    // An empty file: the writer dies allocating its very first chunk.
    let v = setup_files(&t.name, "/v", 1, 0, 3);
    crash_at(
        "alloc-after-owner",
        &t.name,
        "append",
        &v.file_path(0),
        "",
        100_000,
        v.file_seed(0),
    );
    let name = t.name.clone();
    with_timeout(30, "unlink after crash", move || {
        let store = Store::attach(&ckptfs_store::StoreOptions::named(&name)).unwrap();
        // An application deletes its incomplete checkpoint without running fsck first.
        store.unlink(&v.file_path(0)).unwrap();
        let info = store.info();
        assert_eq!(info.mem_free_chunks, info.mem_chunks, "chunks leaked: {info:?}");
        let rep = store.fsck(false);
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}

#[test]
fn growing_a_file_after_its_writer_died_mid_write_reads_zeros_past_old_end() {
    let t = TempStore::new("crash-grow", 8 << 20, CHUNK, 64, None);
    let v = setup_files(&t.name, "/v", 1, 100_000, 4);
    crash_at(
        "write-before-size",
        &t.name,
        "append",
        &v.file_path(0),
        "",
        100_000,
        v.file_seed(0),
    );
    let store = t.attach();
    let p = v.file_path(0);
    assert_eq!(store.stat(&p).unwrap().size, 100_000);
    // ftruncate() to grow, and a pwrite past the end: the gap must read as zeros, not as
    // the bytes of the write that never completed.
    store.truncate(&p, 120_000).unwrap();
    let mut f = store
        .open(
            &p,
            OpenFlags {
                write: true,
                ..Default::default()
            },
            0,
        )
        .unwrap();
    f.pwrite(b"end", 125_000).unwrap();
    f.close().unwrap();
    let data = read_all(&store, &p).unwrap();
    assert_eq!(data.len(), 125_003);
    assert_eq!(first_mismatch(v.file_seed(0), 0, &data[..100_000]), None);
    assert!(
        data[100_000..125_000].iter().all(|&b| b == 0),
        "gap shows dead write's bytes"
    );
    assert_eq!(&data[125_000..], b"end");
    assert!(store.fsck(true).is_clean());
}

#[test]
fn creator_killed_while_prefaulting_leaves_no_temporary_segment_behind() {
    let name = format!("t-crash-creator-{}", std::process::id());
    let _ = Store::destroy(&name);
    let spill_dir = tempfile::tempdir().unwrap();
    let tmp_prefix = format!(".ckptfs.{name}.tmp.");
    let leftovers = |dir: &std::path::Path, prefix: &str| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(prefix))
            .collect()
    };
    let mut s = Spec::new(&name, "files");
    s.mem = Some(256 << 20);
    s.chunk = Some(CHUNK);
    s.count = 1;
    let mut p = Proc::spawn(&s, &[]);
    // Kill it while it reserves and pre-faults its (still unpublished) segment.
    let t0 = Instant::now();
    let reserved = || {
        leftovers(std::path::Path::new("/dev/shm"), &tmp_prefix)
            .iter()
            .any(|n| std::fs::metadata(format!("/dev/shm/{n}")).is_ok_and(|m| m.len() > 0))
    };
    while !reserved() {
        assert!(t0.elapsed() < Duration::from_secs(20), "creator never started");
        std::thread::sleep(Duration::from_micros(200));
    }
    p.kill();
    assert!(!support::segment_exists(&name), "killed before publishing");
    // The next creator cleans up after the dead one (the file holds 256 MiB of memory).
    let store = Store::open_or_create(&ckptfs_store::StoreOptions {
        mem_size: Some(4 << 20),
        chunk_size: Some(CHUNK),
        spill_dir: Some(spill_dir.path().to_path_buf()),
        spill_size: Some(1 << 20),
        ..ckptfs_store::StoreOptions::named(&name)
    })
    .unwrap();
    drop(store);
    Store::destroy(&name).unwrap();
    assert_eq!(
        leftovers(std::path::Path::new("/dev/shm"), &tmp_prefix),
        Vec::<String>::new()
    );
}

// ------------------------------------------------------------------ truncation windows

#[test]
fn crash_at_trunc_after_size_shows_new_size_and_old_bytes_below_it() {
    crash_point_case(
        "trunc-after-size",
        300_000,
        "truncate",
        "",
        70_000,
        &["chunk-past-eof", "bad-chunk-count"],
        |s, v| {
            let p = v.file_path(0);
            let st = s.stat(&p).unwrap();
            assert_eq!((st.size, st.state), (70_000, WriteState::Incomplete));
            let data = read_all(s, &p).unwrap();
            assert_eq!(first_mismatch(v.file_seed(0), 0, &data), None);
        },
    );
}

#[test]
fn crash_at_trunc_after_free_then_growing_reads_zeros_past_the_cut() {
    crash_point_case(
        "trunc-after-free",
        300_000,
        "truncate",
        "",
        70_000,
        &["chunk-past-eof", "bad-chunk-count"],
        |s, v| {
            let p = v.file_path(0);
            assert_eq!(s.stat(&p).unwrap().size, 70_000);
            // The chunk holding the cut still had the old bytes past it: growing the file
            // must show zeros there, not them.
            s.truncate(&p, 200_000).unwrap();
            let data = read_all(s, &p).unwrap();
            assert_eq!(data.len(), 200_000);
            assert_eq!(first_mismatch(v.file_seed(0), 0, &data[..70_000]), None);
            assert!(data[70_000..].iter().all(|&b| b == 0), "old bytes past the cut");
        },
    );
}

#[test]
fn crash_at_otrunc_after_size_leaves_an_empty_incomplete_file_not_zeros() {
    crash_point_case(
        "otrunc-after-size",
        300_000,
        "rewrite",
        "",
        50_000,
        &["chunk-past-eof", "bad-chunk-count"],
        |s, v| {
            let p = v.file_path(0);
            let st = s.stat(&p).unwrap();
            assert_eq!((st.size, st.state), (0, WriteState::Incomplete));
            assert_eq!(read_all(s, &p).unwrap(), Vec::<u8>::new());
            assert_file_is(s, &v.file_path(1), v.file_seed(1), 300_000);
        },
    );
}

// ------------------------------------------------------------------ stale checksums, forks

#[test]
fn stale_checksum_left_by_a_dead_overwriter_is_recomputed_and_then_verified() {
    let t = TempStore::new("crash-stale", 16 << 20, CHUNK, 64, None);
    let mut s = Spec::new(&t.name, "overwrite");
    s.dir = "/ow".into();
    s.size = 4 * CHUNK;
    let mut p = Proc::spawn(&s, &[]);
    assert!(p.wait_for(|l| l == "ready", Duration::from_secs(20)));
    std::thread::sleep(Duration::from_millis(20));
    p.kill();
    let store = t.attach();
    let path = "/ow/ow";
    // Attaching reaped the dead writer: no chunk is left without a current checksum.
    assert_eq!(store.stat(path).unwrap().state, WriteState::Incomplete);
    let chunks = store.chunk_list(path).unwrap();
    assert!(chunks.iter().all(|c| c.crc.is_some()), "{chunks:?}");
    assert!(store.fsck(false).problems.is_empty());
    // So damage to those bytes is caught on read instead of being served unchecked.
    flip(&store, chunks[2].location, 17);
    let mut f = store.open(path, OpenFlags::READ, 0).unwrap();
    let mut buf = vec![0u8; 100];
    assert_eq!(f.pread(&mut buf, 2 * CHUNK).unwrap_err().errno(), libc::EIO);
}

fn fork_case(tag: &str, child_writes: bool) -> (Store, TempStore, Spec) {
    let t = TempStore::new(tag, 8 << 20, CHUNK, 64, None);
    let v = setup_files(&t.name, "/v", 1, 100_000, 9);
    let mut s = Spec::new(&t.name, "op");
    s.op = "fork".into();
    s.path = v.file_path(0);
    s.to = if child_writes { "write" } else { "" }.into();
    s.size = 50_000;
    s.seed = v.file_seed(0);
    let mut p = Proc::spawn(&s, &[]);
    let st = p.wait_timeout(Duration::from_secs(30)).expect("fork op hangs");
    p.assert_no_error();
    assert!(st.success(), "{st} {:?}", p.lines());
    (t.attach(), t, v)
}

#[test]
fn forked_child_killed_without_writing_does_not_keep_parents_file_incomplete() {
    let (store, _t, v) = fork_case("fork-nowrite", false);
    let p = v.file_path(0);
    let st = store.stat(&p).unwrap();
    assert_eq!((st.state, st.size), (WriteState::Complete, 150_000));
    assert_file_is(&store, &p, v.file_seed(0), 150_000);
}

#[test]
fn forked_child_killed_after_writing_leaves_parents_file_incomplete() {
    let (store, _t, v) = fork_case("fork-write", true);
    let st = store.stat(&v.file_path(0)).unwrap();
    assert_eq!((st.state, st.size), (WriteState::Incomplete, 150_005));
    assert_eq!(store.fsck(false).incomplete, vec![v.file_path(0)]);
}

// ------------------------------------------------------------------ failed writes

#[test]
fn file_closed_after_enospc_is_failed_until_rewritten() {
    let t = TempStore::new("crash-enospc", 4 * CHUNK, CHUNK, 64, None);
    let mut s = Spec::new(&t.name, "fill");
    s.dir = "/f".into();
    s.blocks = vec![100_000];
    let mut p = Proc::spawn(&s, &[]);
    let st = p.wait_timeout(Duration::from_secs(30)).expect("fill hangs");
    p.assert_no_error();
    assert!(st.success());
    assert!(
        p.lines().iter().any(|l| l.starts_with("enospc")),
        "{:?}",
        p.lines()
    );
    let store = t.attach();
    let st = store.stat("/f/fill").unwrap();
    assert_eq!(st.state, WriteState::Failed);
    assert_eq!(store.info().failed, 1);
    // Closing it again normally (no truncation) does not make it complete.
    store
        .open(
            "/f/fill",
            OpenFlags {
                write: true,
                ..Default::default()
            },
            0,
        )
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(store.stat("/f/fill").unwrap().state, WriteState::Failed);
    // Rewritten from scratch (O_TRUNC) it is a new, complete file.
    let mut f = store.open("/f/fill", OpenFlags::CREATE, 0).unwrap();
    f.write_all(&pattern(1, 0, 1000)).unwrap();
    f.close().unwrap();
    assert_eq!(store.stat("/f/fill").unwrap().state, WriteState::Complete);
}
