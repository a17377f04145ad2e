//! Namespace and data-path behaviour of the store, through the public API.

use ckptfs_store::*;

/// A store with a unique name, destroyed on drop.
pub struct TempStore {
    pub store: Store,
    name: String,
}

impl Drop for TempStore {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
    }
}

pub fn temp_store(tag: &str, mem: u64, chunk: u64, spill: Option<(&std::path::Path, u64)>) -> TempStore {
    let name = format!("t-{tag}-{}", std::process::id());
    let _ = Store::destroy(&name);
    let opts = StoreOptions {
        name: name.clone(),
        mem_size: Some(mem),
        chunk_size: Some(chunk),
        max_files: Some(64),
        spill_dir: spill.map(|s| s.0.to_path_buf()),
        spill_size: spill.map(|s| s.1),
        private: false,
        ..Default::default()
    };
    TempStore {
        store: Store::create(&opts).unwrap(),
        name,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn write_read_back_across_chunks() {
    let t = temp_store("rw", 8 << 20, 64 << 10, None);
    let s = &t.store;
    s.mkdir("/ckpt", 0o755).unwrap();
    let data = pattern(300_000, 7);
    let mut f = s.open("/ckpt/a", OpenFlags::CREATE, 0o644).unwrap();
    for part in data.chunks(10_007) {
        assert_eq!(f.write(part).unwrap(), part.len());
    }
    f.close().unwrap();
    let st = s.stat("/ckpt/a").unwrap();
    assert_eq!(st.size, data.len() as u64);
    assert_eq!(st.state, WriteState::Complete);
    let mut r = s.open("/ckpt/a", OpenFlags::READ, 0).unwrap();
    let mut back = vec![0u8; data.len() + 10];
    assert_eq!(r.read_full(&mut back).unwrap(), data.len());
    assert_eq!(&back[..data.len()], &data[..]);
    assert!(s.fsck(false).is_clean());
}

#[test]
fn holes_read_as_zeros_and_truncate_frees() {
    let t = temp_store("hole", 8 << 20, 64 << 10, None);
    let s = &t.store;
    let mut f = s
        .open(
            "/f",
            OpenFlags {
                read: true,
                write: true,
                create: true,
                ..Default::default()
            },
            0o600,
        )
        .unwrap();
    f.pwrite(b"abc", 200_000).unwrap();
    assert_eq!(f.size(), 200_003);
    let mut buf = vec![1u8; 200_003];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), 200_003);
    assert!(buf[..200_000].iter().all(|&b| b == 0));
    assert_eq!(&buf[200_000..], b"abc");
    // Hole inside one chunk after the high-water mark.
    f.pwrite(b"x", 10).unwrap();
    f.pwrite(b"y", 100).unwrap();
    let mut b = [9u8; 101];
    f.pread(&mut b, 0).unwrap();
    assert_eq!(b[10], b'x');
    assert_eq!(b[100], b'y');
    assert!(b[..10].iter().chain(&b[11..100]).all(|&x| x == 0));
    let before = s.info().mem_free_chunks;
    f.set_len(5).unwrap();
    assert!(s.info().mem_free_chunks > before);
    f.set_len(70_000).unwrap();
    let mut b = vec![9u8; 70_000];
    f.pread(&mut b, 0).unwrap();
    assert!(b[11..].iter().all(|&x| x == 0), "shrunk bytes come back as zeros");
    f.close().unwrap();
    let rep = s.fsck(false);
    assert!(rep.is_clean(), "{:?}", rep.problems);
}

#[test]
fn directories_and_errors() {
    let t = temp_store("dirs", 4 << 20, 64 << 10, None);
    let s = &t.store;
    s.mkdir("/a", 0o755).unwrap();
    s.mkdir("/a/b", 0o755).unwrap();
    assert_eq!(s.mkdir("/a", 0o755).unwrap_err().errno(), libc::EEXIST);
    s.open("/a/b/f", OpenFlags::CREATE, 0o644)
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(s.rmdir("/a/b").unwrap_err().errno(), libc::ENOTEMPTY);
    assert_eq!(
        s.open("/a/b/f/x", OpenFlags::CREATE, 0o644).unwrap_err().errno(),
        libc::ENOTDIR
    );
    assert_eq!(
        s.open("/nope/x", OpenFlags::CREATE, 0o644).unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(
        s.open("/a", OpenFlags::CREATE, 0o644).unwrap_err().errno(),
        libc::EISDIR
    );
    let mut d = s.open("/a", OpenFlags::READ, 0).unwrap();
    assert_eq!(d.read(&mut [0u8; 4]).unwrap_err().errno(), libc::EISDIR);
    assert_eq!(
        s.open(
            "/a/b/f",
            OpenFlags {
                create: true,
                excl: true,
                write: true,
                ..Default::default()
            },
            0
        )
        .unwrap_err()
        .errno(),
        libc::EEXIST
    );
    let long = "x".repeat(256);
    assert_eq!(
        s.open(&format!("/{long}"), OpenFlags::CREATE, 0)
            .unwrap_err()
            .errno(),
        libc::ENAMETOOLONG
    );
    let names: Vec<_> = s.read_dir("/a/b").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec!["f"]);
    s.rename("/a/b/f", "/a/g").unwrap();
    assert_eq!(s.stat("/a/b/f").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(s.stat("/a/g").unwrap().kind, FileKind::File);
    s.rmdir("/a/b").unwrap();
    assert_eq!(s.unlink("/a").unwrap_err().errno(), libc::EISDIR);
    assert_eq!(s.rmdir("/a/g").unwrap_err().errno(), libc::ENOTDIR);
    s.unlink("/a/g").unwrap();
    s.rmdir("/a").unwrap();
    assert!(s.read_dir("/").unwrap().is_empty());
    let rep = s.fsck(false);
    assert!(rep.is_clean(), "{:?}", rep.problems);
}

#[test]
fn rename_replaces_and_unlinked_open_file_keeps_data() {
    let t = temp_store("ren", 4 << 20, 64 << 10, None);
    let s = &t.store;
    let mut a = s.open("/a", OpenFlags::CREATE, 0o644).unwrap();
    a.write_all(b"new").unwrap();
    a.close().unwrap();
    let mut b = s.open("/b", OpenFlags::CREATE, 0o644).unwrap();
    b.write_all(&pattern(100_000, 1)).unwrap();
    b.close().unwrap();
    let mut held = s.open("/b", OpenFlags::READ, 0).unwrap();
    s.rename("/a", "/b").unwrap();
    let mut buf = [0u8; 3];
    s.open("/b", OpenFlags::READ, 0).unwrap().read(&mut buf).unwrap();
    assert_eq!(&buf, b"new");
    // The replaced file is still readable through the handle opened before.
    let mut old = vec![0u8; 100_000];
    assert_eq!(held.read_full(&mut old).unwrap(), 100_000);
    assert_eq!(old, pattern(100_000, 1));
    let used = s.info().mem_chunks - s.info().mem_free_chunks;
    held.close().unwrap();
    assert!(
        s.info().mem_chunks - s.info().mem_free_chunks < used,
        "freed at last close"
    );
    assert!(s.fsck(false).is_clean());
}

#[test]
fn enospc_short_write_keeps_other_files() {
    let t = temp_store("full", 256 << 10, 64 << 10, None);
    let s = &t.store;
    let keep = pattern(64 << 10, 3);
    let mut k = s.open("/keep", OpenFlags::CREATE, 0o644).unwrap();
    k.write_all(&keep).unwrap();
    k.close().unwrap();
    let mut f = s.open("/big", OpenFlags::CREATE, 0o644).unwrap();
    let n = f.write(&vec![5u8; 1 << 20]).unwrap();
    assert_eq!(n, 3 * (64 << 10), "short write of what fitted");
    assert_eq!(f.write(b"more").unwrap_err().errno(), libc::ENOSPC);
    f.close().unwrap();
    let mut back = vec![0u8; keep.len()];
    s.open("/keep", OpenFlags::READ, 0)
        .unwrap()
        .read_full(&mut back)
        .unwrap();
    assert_eq!(back, keep);
    s.unlink("/big").unwrap();
    assert_eq!(s.info().mem_free_chunks, 3);
}

#[test]
fn spill_over_when_memory_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let t = temp_store("spill", 128 << 10, 64 << 10, Some((dir.path(), 256 << 10)));
    let s = &t.store;
    let data = pattern(300_000, 9);
    let mut f = s.open("/s", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&data).unwrap();
    f.close().unwrap();
    let st = s.stat("/s").unwrap();
    assert_eq!(st.chunks, 5);
    assert_eq!(st.spill_chunks, 3);
    let mut back = vec![0u8; data.len()];
    s.open("/s", OpenFlags::READ, 0)
        .unwrap()
        .read_full(&mut back)
        .unwrap();
    assert_eq!(back, data);
    let list = s.chunk_list("/s").unwrap();
    assert_eq!(
        list.iter()
            .filter(|c| matches!(c.location, ChunkLocation::Spill(_)))
            .count(),
        3
    );
    assert!(s.fsck(false).is_clean());
    let mut g = s.open("/t", OpenFlags::CREATE, 0o644).unwrap();
    assert_eq!(g.write(&[1u8; 100 << 10]).unwrap(), 64 << 10);
}

#[test]
fn attach_checks_settings_and_format() {
    let t = temp_store("attach", 1 << 20, 64 << 10, None);
    let name = t.store.name().to_string();
    let again = Store::attach(&StoreOptions::named(&name)).unwrap();
    assert_eq!(again.chunk_size(), 64 << 10);
    let err = Store::attach(&StoreOptions {
        chunk_size: Some(1 << 20),
        ..StoreOptions::named(&name)
    })
    .err()
    .unwrap();
    assert!(matches!(err, StoreError::ConflictingSettings { .. }), "{err}");
    assert!(matches!(
        Store::attach(&StoreOptions::named("t-none-x")).err().unwrap(),
        StoreError::NoStore(_)
    ));
    // A foreign file in place of a segment.
    let fake = format!("t-foreign-{}", std::process::id());
    std::fs::write(segment_path(&fake), vec![0x55u8; 8192]).unwrap();
    // (Mode 0600 like a real segment, so the content check is what refuses it.)
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(segment_path(&fake), std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = Store::attach(&StoreOptions::named(&fake)).err().unwrap();
    assert!(err.to_string().contains("not a ckptfs segment"), "{err}");
    std::fs::remove_file(segment_path(&fake)).unwrap();
}

/// A segment of another format version, a damaged superblock and a truncated segment
/// are refused with a message naming the segment, and nothing is attached.
#[test]
fn other_version_damaged_and_truncated_segments_are_refused() {
    let t = temp_store("badseg", 1 << 20, 64 << 10, None);
    let name = t.store.name().to_string();
    let path = segment_path(&name);
    let original = std::fs::read(&path).unwrap();
    let attach_err = || {
        Store::attach(&StoreOptions::named(&name))
            .err()
            .expect("attach must fail")
            .to_string()
    };

    let other = ckptfs_store::layout::FORMAT_VERSION + 1;
    let mut v = original.clone();
    v[8..12].copy_from_slice(&other.to_le_bytes());
    std::fs::write(&path, &v).unwrap();
    let e = attach_err();
    assert!(
        e.contains(&format!("format version {other}")) && e.contains(&path.display().to_string()),
        "{e}"
    );

    // A store of the previous format (3: before the change counters) is refused by name.
    let mut v3 = original.clone();
    v3[8..12].copy_from_slice(&3u32.to_le_bytes());
    std::fs::write(&path, &v3).unwrap();
    let e = attach_err();
    assert!(
        e.contains("format version 3") && e.contains(&path.display().to_string()),
        "{e}"
    );

    let mut d = original.clone();
    d[40] ^= 0xff; // inside the layout block
    std::fs::write(&path, &d).unwrap();
    let e = attach_err();
    assert!(e.contains("damaged"), "{e}");

    std::fs::write(&path, &original[..original.len() / 2]).unwrap();
    let e = attach_err();
    assert!(e.contains("bytes"), "{e}");

    std::fs::write(&path, b"short").unwrap();
    let e = attach_err();
    assert!(e.contains("too small"), "{e}");

    // Put it back: the store attaches again and is intact.
    std::fs::write(&path, &original).unwrap();
    let s = Store::attach(&StoreOptions::named(&name)).unwrap();
    assert!(s.fsck(false).is_clean());
}

#[test]
fn system_dir_is_hidden_from_root_listing_and_list_all_but_reachable() {
    let t = temp_store("sys", 4 << 20, 64 << 10, None);
    let s = &t.store;
    s.mkdir("/ckpt", 0o755).unwrap();
    s.mkdir(SYSTEM_DIR, 0o700).unwrap();
    s.mkdir("/.ckptfs/partners", 0o700).unwrap();
    let mut f = s.open("/.ckptfs/partners/x", OpenFlags::CREATE, 0o600).unwrap();
    f.write_all(b"partner copy").unwrap();
    f.close().unwrap();
    let names: Vec<_> = s.read_dir("/").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec!["ckpt"]);
    let root = s.stat("/").unwrap().ino;
    assert_eq!(s.read_dir_ino(root).unwrap().len(), 1);
    assert_eq!(
        s.count_subdirs_ino(root).unwrap(),
        1,
        "the system directory is not counted"
    );
    let mut all: Vec<_> = s.read_dir_all("/").unwrap().into_iter().map(|e| e.name).collect();
    all.sort();
    assert_eq!(all, vec![".ckptfs", "ckpt"]);
    let listed: Vec<_> = s.list_all().into_iter().map(|(p, _)| p).collect();
    assert!(listed.iter().all(|p| !p.starts_with("/.ckptfs")), "{listed:?}");
    let sys: Vec<_> = s.list_all_system().into_iter().map(|(p, _)| p).collect();
    assert_eq!(sys, vec!["/.ckptfs", "/.ckptfs/partners", "/.ckptfs/partners/x"]);
    assert!(is_system_path("/ckpt/../.ckptfs/a"));
    assert!(!is_system_path("/ckpt/.ckptfs"));
    assert_eq!(s.stat("/.ckptfs/partners/x").unwrap().size, 12);
}

/// Flip one byte of a memory chunk through this process's mapping.
fn flip_mem(store: &Store, loc: ChunkLocation, at: u64) {
    let ChunkLocation::Memory(off) = loc else {
        panic!("expected a memory chunk")
    };
    let r = store.data_region();
    assert!(off + at < r.len);
    // SAFETY: inside the mapped data region; nobody else uses this store.
    unsafe {
        let p = (r.base as *mut u8).add((off + at) as usize);
        p.write_volatile(p.read_volatile() ^ 0x10);
    }
}

#[test]
fn reader_in_the_writing_process_verifies_checksums_after_close() {
    // The FUSE daemon (and any process that writes then reads back) is the last writer
    // of what it wrote: a new read handle must still verify, or damage is served.
    let t = temp_store("basic-selfverify", 4 << 20, 64 << 10, None);
    let s = &t.store;
    let data = pattern(200_000, 3);
    let mut f = s.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&data).unwrap();
    f.close().unwrap();
    let chunks = s.chunk_list("/f").unwrap();
    flip_mem(s, chunks[1].location, 5);
    let mut r = s.open("/f", OpenFlags::READ, 0).unwrap();
    let mut buf = vec![0u8; 1000];
    assert_eq!(r.pread(&mut buf, 0).unwrap(), 1000);
    assert_eq!(r.pread(&mut buf, 70_000).unwrap_err().errno(), libc::EIO);
    flip_mem(s, chunks[1].location, 5);
    let mut r = s.open("/f", OpenFlags::READ, 0).unwrap();
    let mut all = vec![0u8; data.len()];
    assert_eq!(r.read_full(&mut all).unwrap(), data.len());
    assert_eq!(all, data);
}

#[test]
fn whole_chunk_reads_check_the_bytes_they_return() {
    // A read covering a whole chunk copies and checksums it in one pass (the CRC taken
    // from the caller's buffer, 64 KiB at a time): damage in any piece, the last partial
    // chunk included, must still be EIO, and intact data must come back identical.
    let mib = 1u64 << 20;
    let t = temp_store("basic-wholeread", 4 * mib, mib, None);
    let s = &t.store;
    let data = pattern(2 * mib as usize + 300_000, 9);
    let mut f = s.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&data).unwrap();
    f.close().unwrap();
    let chunks = s.chunk_list("/f").unwrap();
    assert_eq!(chunks.len(), 3);
    for (chunk, at) in [(0usize, 0u64), (0, 700_000), (1, mib - 1), (2, 299_999)] {
        flip_mem(s, chunks[chunk].location, at);
        // Chunk-sized reads, as a restart does.
        let mut r = s.open("/f", OpenFlags::READ, 0).unwrap();
        let mut buf = vec![0u8; mib as usize];
        let e = r.pread(&mut buf, chunk as u64 * mib).unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "chunk {chunk} byte {at}: {e}");
        // One read of the whole file.
        let mut r = s.open("/f", OpenFlags::READ, 0).unwrap();
        let mut all = vec![0u8; data.len()];
        assert_eq!(r.pread(&mut all, 0).unwrap_err().errno(), libc::EIO);
        flip_mem(s, chunks[chunk].location, at);
        let mut r = s.open("/f", OpenFlags::READ, 0).unwrap();
        let mut got = Vec::new();
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, data, "after restoring chunk {chunk} byte {at}");
    }
}

#[test]
fn read_write_handle_reads_its_own_overwrites_without_false_mismatch() {
    let t = temp_store("basic-rwself", 4 << 20, 64 << 10, None);
    let s = &t.store;
    let mut f = s
        .open(
            "/f",
            OpenFlags {
                read: true,
                write: true,
                create: true,
                ..Default::default()
            },
            0o644,
        )
        .unwrap();
    f.write_all(&pattern(150_000, 1)).unwrap();
    // An overwrite in the middle leaves the chunk's CRC stale until close.
    f.pwrite(b"xyz", 70_000).unwrap();
    let mut buf = [0u8; 3];
    assert_eq!(f.pread(&mut buf, 70_000).unwrap(), 3);
    assert_eq!(&buf, b"xyz");
    // Another handle of the same process reads it while the writer is live: no EIO.
    let mut r = s.open("/f", OpenFlags::READ, 0).unwrap();
    assert_eq!(r.pread(&mut buf, 70_000).unwrap(), 3);
    assert_eq!(&buf, b"xyz");
    f.close().unwrap();
    let mut r = s.open("/f", OpenFlags::READ, 0).unwrap();
    r.verify_all().unwrap();
}

#[test]
fn owner_ids_and_times_are_stored_and_reported() {
    let t = temp_store("basic-owner", 4 << 20, 64 << 10, None);
    let s = &t.store;
    let mut f = s.open("/f", OpenFlags::CREATE, 0o640).unwrap();
    f.write_all(b"x").unwrap();
    f.close().unwrap();
    let st = s.stat("/f").unwrap();
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    assert_eq!((st.uid, st.gid), (uid, gid));
    assert!(st.atime_ns > 0);
    s.chown("/f", 1234, 5678).unwrap();
    s.set_times("/f", 111, 222).unwrap();
    s.chmod("/f", 0o600).unwrap();
    let st = s.stat("/f").unwrap();
    assert_eq!(
        (st.uid, st.gid, st.atime_ns, st.mtime_ns, st.mode),
        (1234, 5678, 111, 222, 0o600)
    );
    // The changes keep the inode's checksums valid: it reads and fscks clean.
    let mut r = s.open("/f", OpenFlags::READ, 0).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(r.pread(&mut b, 0).unwrap(), 1);
    assert!(s.fsck(false).problems.is_empty());
    assert_eq!(s.chown("/nope", 1, 1).unwrap_err().errno(), libc::ENOENT);
}

#[test]
fn count_subdirs_counts_directories_only_as_the_listing_shows_them() {
    let t = temp_store("subdirs", 4 << 20, 64 << 10, None);
    let s = &t.store;
    s.mkdir("/d", 0o755).unwrap();
    let d = s.stat("/d").unwrap().ino;
    assert_eq!(s.count_subdirs_ino(d).unwrap(), 0);
    for sub in ["/d/a", "/d/b", "/d/b/c"] {
        s.mkdir(sub, 0o755).unwrap();
    }
    s.open("/d/f", OpenFlags::CREATE, 0o644).unwrap().close().unwrap();
    s.link("/d/f", "/d/hard").unwrap();
    s.symlink(b"a", "/d/sym").unwrap();
    let listed = |ino| {
        s.read_dir_ino(ino)
            .unwrap()
            .iter()
            .filter(|e| e.kind == FileKind::Dir)
            .count() as u32
    };
    assert_eq!(s.count_subdirs_ino(d).unwrap(), 2);
    assert_eq!(s.count_subdirs_ino(d).unwrap(), listed(d));
    let b = s.stat("/d/b").unwrap().ino;
    assert_eq!(s.count_subdirs_ino(b).unwrap(), 1);
    s.rmdir("/d/a").unwrap();
    assert_eq!(s.count_subdirs_ino(d).unwrap(), 1);
    let f = s.stat("/d/f").unwrap().ino;
    assert!(matches!(s.count_subdirs_ino(f), Err(StoreError::NotDir(_))));
}
