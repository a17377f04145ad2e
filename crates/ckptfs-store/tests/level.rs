//! The node store as a level: copies between two stores go chunk by chunk through
//! `get`/`put` and come out byte-identical; corruption, a rewrite during the read, an
//! uncommitted writer and a stale delete each have their observable outcome and errno.

use ckptfs_level::{copy, IoPart, Level, LevelError, Version};
use ckptfs_store::level::StoreLevel;
use ckptfs_store::{OpenFlags, Store, StoreOptions};

const CS: usize = 64 << 10;

struct TestStore {
    store: Store,
    name: String,
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
    }
}

fn store(tag: &str, opts: impl FnOnce(&mut StoreOptions)) -> TestStore {
    let name = format!("hlv-{tag}-{}", std::process::id());
    let _ = Store::destroy(&name);
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(64 << 20);
    o.chunk_size = Some(CS as u64);
    opts(&mut o);
    TestStore {
        store: Store::create(&o).expect("create store"),
        name,
    }
}

fn data(seed: u64, size: usize) -> Vec<u8> {
    ckptfs_testsupport::seeded_bytes(seed, size)
}

fn put(s: &Store, path: &str, bytes: &[u8]) {
    let mut cur = String::new();
    for c in path
        .rsplit_once('/')
        .unwrap()
        .0
        .split('/')
        .filter(|c| !c.is_empty())
    {
        cur.push('/');
        cur.push_str(c);
        let _ = s.mkdir(&cur, 0o755);
    }
    let mut f = s.open(path, OpenFlags::CREATE, 0o640).unwrap();
    f.write_all(bytes).unwrap();
    f.close().unwrap();
}

fn read(s: &Store, path: &str) -> Vec<u8> {
    let mut f = s.open(path, OpenFlags::READ, 0).unwrap();
    let mut v = vec![0u8; f.size() as usize];
    assert_eq!(f.read_full(&mut v).unwrap(), v.len());
    v
}

fn flip(s: &Store, path: &str, logical: u32) {
    let c = s
        .chunk_list(path)
        .unwrap()
        .into_iter()
        .find(|c| c.logical == logical)
        .unwrap();
    let ckptfs_store::ChunkLocation::Memory(off) = c.location else {
        panic!("spilled")
    };
    let region = s.data_region();
    // SAFETY: off + 5 is inside the data region of our own test store; no other thread
    // or process uses it now.
    unsafe { *(region.base as *mut u8).add(off as usize + 5) ^= 0x10 };
}

/// Names in the store, hidden ones included (temporaries must not be left).
fn names(s: &Store) -> Vec<String> {
    let mut v: Vec<String> = s.list_all().into_iter().map(|(p, _)| p).collect();
    v.sort();
    v
}

#[test]
fn copies_between_stores_are_byte_identical_keep_mode_and_mtime_and_are_metered() {
    let spill = tempfile::tempdir().unwrap();
    let sp = spill.path().to_path_buf();
    // A small memory: some chunks of `a` land in the spill file.
    let a = store("src", |o| {
        o.mem_size = Some(8 * CS as u64);
        o.spill_dir = Some(sp);
        o.spill_size = Some(32 * CS as u64);
    });
    let b = store("dst", |_| {});
    let files = vec![
        ("/ck/s1/r0", data(1, 5 * CS + 77)),
        ("/ck/s1/r1", data(2, 4 * CS)),
        ("/ck/s1/empty", Vec::new()),
        ("/top", data(3, 10)),
    ];
    for (p, d) in &files {
        put(&a.store, p, d);
    }
    // A sparse file: a hole chunk, then a partly written one.
    put(&a.store, "/ck/s1/sparse", b"");
    let mut f = a
        .store
        .open(
            "/ck/s1/sparse",
            OpenFlags {
                write: true,
                ..Default::default()
            },
            0,
        )
        .unwrap();
    f.pwrite(b"tail", (CS + 9) as u64).unwrap();
    f.set_len((2 * CS + 3) as u64).unwrap();
    f.close().unwrap();
    let mut sparse = vec![0u8; 2 * CS + 3];
    sparse[CS + 9..CS + 13].copy_from_slice(b"tail");
    assert!(a.store.info().spill_free_chunks < 32, "some chunks spilled");

    let la = StoreLevel::new(&a.store).unwrap();
    let lb = StoreLevel::new(&b.store).unwrap();
    let listed = la.list("/ck").unwrap();
    assert_eq!(listed.len(), 4, "{listed:?}");
    for s in la.list("/").unwrap() {
        let t = copy(&la, &lb, &s.path).unwrap();
        assert_eq!(t.bytes, s.version.size);
        assert!(t.stored.version.same_content(&s.version), "{}", s.path);
        assert_eq!(t.stored.version.mtime_ns, s.version.mtime_ns);
        assert_eq!(t.stored.mode, 0o640);
        assert_eq!(t.stored.chunk_crc32c, s.chunk_crc32c);
    }
    for (p, d) in &files {
        assert_eq!(&read(&b.store, p), d, "{p}");
    }
    assert_eq!(read(&b.store, "/ck/s1/sparse"), sparse);
    // Whole-file CRC of the version equals the CRC of the bytes.
    let v = lb.stat("/ck/s1/r0").unwrap().unwrap().version;
    assert_eq!(v.crc32c, Some(ckptfs_store::checksum::crc32c(&files[0].1)));
    // No temporary is left.
    assert!(
        names(&b.store).iter().all(|n| !n.contains(".ckptfs-restore")),
        "{:?}",
        names(&b.store)
    );
    // Both meters saw the five files.
    assert_eq!(la.cost().gets, 5);
    assert_eq!(lb.cost().puts, 5);
    let total: u64 = files.iter().map(|f| f.1.len() as u64).sum::<u64>() + sparse.len() as u64;
    assert_eq!(lb.cost().put_bytes, total);
    // A dataset (set of files) is held when every file is there with its CRC.
    let set: Vec<(String, u32)> = vec![
        ("/ck/s1/r0".into(), v.crc32c.unwrap()),
        ("/ck/s1/r1".into(), 0xdead_beef),
        ("/nope".into(), 0),
    ];
    assert_eq!(lb.holds(&set).unwrap(), [true, false, false]);
    // Verify reads every chunk.
    for s in lb.list("/").unwrap() {
        lb.verify(&s.path, &s.version).unwrap();
    }
}

#[test]
fn missing_file_is_enoent_and_a_flipped_byte_is_eio_with_nothing_published() {
    let a = store("flip", |_| {});
    let b = store("flipdst", |_| {});
    put(&a.store, "/d/bad", &data(4, 3 * CS));
    let la = StoreLevel::new(&a.store).unwrap();
    let lb = StoreLevel::new(&b.store).unwrap();
    let e = la.get("/d/none").err().expect("no such file");
    assert_eq!(e.errno(), libc::ENOENT);
    assert!(la.stat("/d/none").unwrap().is_none());

    let v = la.stat("/d/bad").unwrap().unwrap().version;
    flip(&a.store, "/d/bad", 1);
    let e = copy(&la, &lb, "/d/bad").unwrap_err();
    assert!(matches!(e, LevelError::Corrupt { chunk: 1, .. }), "{e}");
    assert_eq!(e.errno(), libc::EIO);
    assert!(
        e.to_string().contains("/d/bad") && e.to_string().contains("chunk 1"),
        "{e}"
    );
    // Nothing under the final name, no temporary.
    assert!(lb.stat("/d/bad").unwrap().is_none());
    assert!(names(&b.store)
        .iter()
        .all(|n| !n.contains("bad") && !n.contains(".ckptfs-restore")));
    let e = la.verify("/d/bad", &v).unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    // Nothing measured for a failed transfer.
    assert_eq!(lb.cost().puts, 0);
}

#[test]
fn file_rewritten_during_the_read_is_changed_eagain() {
    let a = store("race", |_| {});
    let b = store("racedst", |_| {});
    put(&a.store, "/r/f", &data(5, 3 * CS));
    let la = StoreLevel::new(&a.store).unwrap();
    let lb = StoreLevel::new(&b.store).unwrap();
    let mut r = la.get("/r/f").unwrap();
    let mut w = lb.put(r.stored()).unwrap();
    r.read_chunk(0, &mut |p| w.write_at(p, 0)).unwrap();
    // Another writer rewrites the file (same size) between two chunks.
    let mut f = a
        .store
        .open(
            "/r/f",
            OpenFlags {
                write: true,
                ..Default::default()
            },
            0,
        )
        .unwrap();
    f.pwrite(&data(6, 10), (2 * CS) as u64).unwrap();
    f.close().unwrap();
    r.read_chunk(1, &mut |p| w.write_at(p, CS as u64)).unwrap();
    let e = match r.read_chunk(2, &mut |p| w.write_at(p, 2 * CS as u64)) {
        Err(e) => e,
        Ok(()) => r.finish().unwrap_err(),
    };
    assert!(matches!(e, LevelError::Changed(_)), "{e}");
    assert_eq!(e.errno(), libc::EAGAIN);
    drop(w);
    assert!(lb.stat("/r/f").unwrap().is_none());
    assert!(names(&b.store).iter().all(|n| !n.contains(".ckptfs-restore")));
}

#[test]
fn uncommitted_writer_leaves_nothing_and_delete_removes_only_the_version_given() {
    let a = store("del", |_| {});
    put(&a.store, "/x/f", &data(7, CS + 1));
    let la = StoreLevel::new(&a.store).unwrap();
    let s = la.stat("/x/f").unwrap().unwrap();
    // A writer dropped before commit: the old copy stays, no temporary.
    {
        let mut w = la.put(&s).unwrap();
        w.write_at(&[IoPart::Buf(b"partial")], 0).unwrap();
    }
    assert_eq!(read(&a.store, "/x/f"), data(7, CS + 1));
    assert_eq!(names(&a.store), ["/x", "/x/f"]);
    // A stale version is not deleted.
    let stale = Version {
        mtime_ns: s.version.mtime_ns - 1,
        ..s.version
    };
    assert!(!la.delete("/x/f", &stale).unwrap());
    assert!(a.store.stat("/x/f").is_ok());
    assert!(la.delete("/x/f", &s.version).unwrap());
    assert!(a.store.stat("/x/f").is_err());
    assert!(!la.delete("/x/f", &s.version).unwrap());
}

#[test]
fn the_store_level_passes_the_level_conformance_suite() {
    let ts = store("conf", |_| {});
    ts.store.mkdir("/conf", 0o755).unwrap();
    let level = StoreLevel::new(&ts.store).unwrap();
    ckptfs_level::conformance::run(&ckptfs_level::conformance::Harness::new(
        &level, CS as u64, "/conf",
    ))
    .unwrap();
}
