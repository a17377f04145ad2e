//! Hard links (format 5: link entries naming a data inode that counts its names) and
//! FIFOs, sockets and device nodes (names with attributes only): what each call does,
//! what other processes see, what fsck says, and where a process killed inside a link,
//! an unlink or a rename leaves them (crash points `link-after-kind`, `inode-after-kind`,
//! `unlink-link-before-free`, `unlink-linked-after-detach`, `rename-after-intent`).

mod crash_support;
mod support;

use ckptfs_store::*;
use crash_support::*;
use support::*;

/// Runs the writer when this executable is spawned as a child (see `support`).
#[test]
fn child_entry() {
    support::child_entry();
}

fn write_file(s: &Store, path: &str, seed: u64, size: usize) {
    let mut f = s.open(path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(seed, 0, size)).unwrap();
    f.close().unwrap();
}

fn assert_clean(s: &Store) {
    let rep = s.fsck(false);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_chunk_accounting(s);
}

#[test]
fn hard_links_share_one_inode_count_names_and_keep_the_data_until_the_last_name_goes() {
    let t = TempStore::new("hl-basic", 16 << 20, 64 << 10, 64, None);
    let s = t.attach();
    s.mkdir("/d", 0o755).unwrap();
    write_file(&s, "/a", 1, 200_000);
    let before = s.stat("/a").unwrap();
    assert_eq!(before.nlink, 1);
    std::thread::sleep(std::time::Duration::from_millis(2));
    let st = s.link("/a", "/d/b").unwrap();
    assert_eq!((st.ino, st.nlink, st.size), (before.ino, 2, 200_000));
    assert!(st.ctime_ns > before.ctime_ns, "link sets the file's ctime");
    // Another process sees one inode under two names.
    let o = t.attach();
    let (a, b) = (o.stat("/a").unwrap(), o.stat("/d/b").unwrap());
    assert_eq!((a.ino, b.ino, a.nlink, b.nlink), (st.ino, st.ino, 2, 2));
    assert_eq!(o.lookup(o.stat("/d").unwrap().ino, "b").unwrap().ino, st.ino);
    let listed = o.read_dir("/d").unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].ino, listed[0].kind), (st.ino, FileKind::File));
    let all: Vec<(String, u64)> = o.list_all().into_iter().map(|(p, st)| (p, st.ino)).collect();
    assert!(
        all.contains(&("/a".into(), st.ino)) && all.contains(&("/d/b".into(), st.ino)),
        "{all:?}"
    );
    // A write through one name is read through the other.
    let mut f = o
        .open(
            "/d/b",
            OpenFlags {
                write: true,
                ..Default::default()
            },
            0,
        )
        .unwrap();
    f.pwrite(b"LINKED", 10).unwrap();
    f.close().unwrap();
    let back = read_all(&s, "/a").unwrap();
    assert_eq!(&back[10..16], b"LINKED");
    assert_clean(&s);
    // Errors, as link(2): a directory EPERM, an existing name EEXIST, a missing source
    // or directory ENOENT, a path through a file ENOTDIR.
    assert_eq!(s.link("/d", "/d2").unwrap_err().errno(), libc::EPERM);
    assert_eq!(s.link("/", "/r").unwrap_err().errno(), libc::EPERM);
    assert_eq!(s.link("/a", "/d/b").unwrap_err().errno(), libc::EEXIST);
    assert_eq!(s.link("/a", "/d").unwrap_err().errno(), libc::EEXIST);
    assert_eq!(s.link("/nope", "/x").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(s.link("/a", "/nodir/x").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(s.link("/a", "/a/x").unwrap_err().errno(), libc::ENOTDIR);
    // Removing the original name keeps the data under the other one.
    std::thread::sleep(std::time::Duration::from_millis(2));
    s.unlink("/a").unwrap();
    assert_eq!(s.stat("/a").unwrap_err().errno(), libc::ENOENT);
    let b = o.stat("/d/b").unwrap();
    assert_eq!((b.ino, b.nlink), (st.ino, 1));
    assert!(
        b.ctime_ns > st.ctime_ns,
        "unlink of one name sets the file's ctime"
    );
    assert_eq!(o.path_of(st.ino).unwrap(), "/d/b");
    assert_eq!(&read_all(&o, "/d/b").unwrap()[10..16], b"LINKED");
    assert_clean(&s);
    // A link of a link entry names the same inode; the inode itself has no name now.
    s.link("/d/b", "/c").unwrap();
    assert_eq!(s.stat("/c").unwrap().nlink, 2);
    assert_eq!(s.stat("/c").unwrap().ino, st.ino);
    assert_clean(&s);
    s.unlink("/d/b").unwrap();
    assert_eq!(o.path_of(st.ino).unwrap(), "/c");
    assert_eq!(s.stat("/c").unwrap().nlink, 1);
    let used = s.info().mem_free_chunks;
    s.unlink("/c").unwrap();
    // The last name gone: the inode and its chunks are free.
    assert_eq!(o.stat_ino(st.ino).unwrap_err().errno(), libc::ENOENT);
    assert!(s.info().mem_free_chunks > used);
    assert_eq!(s.info().files, 0);
    assert_clean(&s);
}

#[test]
fn renames_among_hard_links_follow_posix() {
    let t = TempStore::new("hl-rename", 16 << 20, 64 << 10, 64, None);
    let s = t.attach();
    write_file(&s, "/a", 1, 5_000);
    s.link("/a", "/b").unwrap();
    // Two names of one inode: rename does nothing, both stay.
    s.rename("/a", "/b").unwrap();
    s.rename("/b", "/a").unwrap();
    assert_eq!(s.stat("/a").unwrap().nlink, 2);
    assert_eq!(s.stat("/b").unwrap().ino, s.stat("/a").unwrap().ino);
    // Moving a link entry keeps the count.
    s.mkdir("/d", 0o755).unwrap();
    s.rename("/b", "/d/b2").unwrap();
    assert_eq!(s.stat("/d/b2").unwrap().nlink, 2);
    assert_eq!(s.stat("/b").unwrap_err().errno(), libc::ENOENT);
    // A file renamed over one name of a linked file: that file keeps its data and its
    // other name, with one name less.
    write_file(&s, "/other", 2, 7_000);
    let ino = s.stat("/a").unwrap().ino;
    s.rename("/other", "/a").unwrap();
    assert_file_is(&s, "/a", 2, 7_000);
    let b2 = s.stat("/d/b2").unwrap();
    assert_eq!((b2.ino, b2.nlink), (ino, 1));
    assert_file_is(&s, "/d/b2", 1, 5_000);
    assert_clean(&s);
    // A link entry renamed over a file replaces it; a file over a link entry too.
    s.link("/d/b2", "/e").unwrap();
    s.rename("/e", "/a").unwrap();
    assert_file_is(&s, "/a", 1, 5_000);
    assert_eq!(s.stat("/a").unwrap().nlink, 2);
    write_file(&s, "/f", 3, 100);
    s.rename("/f", "/d/b2").unwrap();
    assert_file_is(&s, "/d/b2", 3, 100);
    assert_eq!(s.stat("/a").unwrap().nlink, 1);
    assert_eq!(s.stat("/a").unwrap().ino, ino);
    assert_clean(&s);
}

#[test]
fn a_linked_file_unlinked_by_every_name_while_open_lives_until_its_last_close() {
    let t = TempStore::new("hl-open", 16 << 20, 64 << 10, 64, None);
    let s = t.attach();
    write_file(&s, "/a", 4, 300_000);
    s.link("/a", "/b").unwrap();
    let mut h = s.open("/b", OpenFlags::READ, 0).unwrap();
    s.unlink("/a").unwrap();
    s.unlink("/b").unwrap();
    assert_eq!(h.stat().nlink, 0);
    let mut buf = vec![0u8; 300_000];
    assert_eq!(h.read_full(&mut buf).unwrap(), 300_000);
    assert_eq!(buf, pattern(4, 0, 300_000));
    assert_eq!(s.info().orphans, 1);
    h.close().unwrap();
    assert_eq!(s.info().orphans, 0);
    assert_clean(&s);
}

#[test]
fn fifos_sockets_and_device_nodes_are_names_with_attributes_only() {
    let t = TempStore::new("hl-special", 16 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let cases = [
        ("/fifo", FileKind::Fifo, 0),
        ("/sock", FileKind::Socket, 0),
        ("/chr", FileKind::CharDevice, libc::makedev(1, 3)),
        ("/blk", FileKind::BlockDevice, libc::makedev(8, 1)),
    ];
    for (p, k, rdev) in cases {
        let st = s.mknod(p, k, 0o640, rdev).unwrap();
        assert_eq!(
            (st.kind, st.mode, st.rdev, st.size, st.nlink),
            (k, 0o640, rdev, 0, 1)
        );
        let o = t.attach().stat(p).unwrap();
        assert_eq!((o.kind, o.rdev, o.ino), (k, rdev, st.ino));
        // No data in the store: the kernel serves their I/O.
        assert_eq!(
            s.open(p, OpenFlags::READ, 0).unwrap_err().errno(),
            libc::EOPNOTSUPP
        );
        assert_eq!(s.mknod(p, k, 0o640, rdev).unwrap_err().errno(), libc::EEXIST);
    }
    // A FIFO's device number is not kept; other kinds are refused.
    assert_eq!(s.mknod("/f2", FileKind::Fifo, 0o600, 77).unwrap().rdev, 0);
    assert_eq!(
        s.mknod("/x", FileKind::Dir, 0o600, 0).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        s.mknod("/x", FileKind::File, 0o600, 0).unwrap_err().errno(),
        libc::EINVAL
    );
    let kinds: Vec<(String, FileKind)> = s
        .read_dir("/")
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert!(kinds.contains(&("fifo".into(), FileKind::Fifo)), "{kinds:?}");
    assert!(
        kinds.contains(&("blk".into(), FileKind::BlockDevice)),
        "{kinds:?}"
    );
    // Linked, renamed, chmod'ed, removed like files.
    s.link("/fifo", "/fifo2").unwrap();
    assert_eq!(s.stat("/fifo2").unwrap().nlink, 2);
    s.rename("/chr", "/chr2").unwrap();
    assert_eq!(s.stat("/chr2").unwrap().rdev, libc::makedev(1, 3));
    s.chmod("/sock", 0o600).unwrap();
    assert_eq!(s.stat("/sock").unwrap().mode, 0o600);
    assert_clean(&s);
    for p in ["/fifo", "/fifo2", "/sock", "/chr2", "/blk", "/f2"] {
        s.unlink(p).unwrap();
    }
    assert!(s.read_dir("/").unwrap().is_empty());
    assert_clean(&s);
}

#[test]
fn a_damaged_link_count_is_eio_and_fsck_repair_keeps_the_file() {
    use ckptfs_store::layout::{Inode, Layout, INODE_SIZE};
    use std::os::unix::fs::FileExt;
    let t = TempStore::new("hl-damage", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    write_file(&s, "/a", 5, 5_000);
    let st = s.link("/a", "/b").unwrap();
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    let l = Layout::compute(16, 128, 0, 64);
    let off = l.inode_off + (st.ino - 1) * INODE_SIZE + std::mem::offset_of!(Inode, nlink) as u64;
    seg.write_all_at(&7u32.to_le_bytes(), off).unwrap();
    let o = t.attach();
    assert_eq!(o.stat("/a").unwrap_err().errno(), libc::EIO);
    let rep = o.fsck(true);
    assert!(!rep.problems.is_empty());
    assert!(o.fsck(false).problems.is_empty(), "{:?}", o.fsck(false).problems);
    // The data is kept (quarantined with its record, so marked incomplete) and still
    // reachable by the link.
    assert_eq!(read_all(&o, "/b").unwrap(), pattern(5, 0, 5_000));
    assert_eq!(o.stat("/b").unwrap().state, WriteState::Incomplete);
    assert_eq!(o.stat("/b").unwrap().nlink, 2);
    assert_chunk_accounting(&o);
}

// ------------------------------------------------------------------ crash points

/// A store with `/v/f0` (`size` bytes, seed 22) and `/keep/f0..1`; `prepare` runs next
/// (links made by this process), then `op` on `path` (to `to`) dies at `point`; then a
/// fresh attach checks `/keep`, runs `check`, and fsck must find nothing (the namespace
/// rebuild a dead holder triggers recounts the links) and allocation must work.
fn link_crash_case(
    point: &str,
    op: &str,
    path: &str,
    to: &str,
    prepare: impl FnOnce(&Store),
    check: impl FnOnce(&Store),
) {
    let t = TempStore::new(&format!("hl-cp-{point}-{op}"), 16 << 20, CHUNK, 64, None);
    let keep = setup_files(&t.name, "/keep", 2, 150_000, 11);
    setup_files(&t.name, "/v", 2, 100_000, 22);
    prepare(&t.attach());
    crash_at(point, &t.name, op, path, to, 0, 0);
    let name = t.name.clone();
    let store = with_timeout(30, "attaching after a crash", move || {
        Store::attach(&StoreOptions::named(&name)).unwrap()
    });
    for i in 0..2 {
        assert_file_is(&store, &keep.file_path(i), keep.file_seed(i), 150_000);
    }
    // The recovery ran (the dead process held the namespace lock).
    assert!(store.info().recoveries > 0);
    check(&store);
    let rep = store.fsck(false);
    assert!(rep.problems.is_empty(), "crash at {point}: {:?}", rep.problems);
    assert_chunk_accounting(&store);
    write_file(&store, "/after", 9, 100_000);
    assert_file_is(&store, "/after", 9, 100_000);
    assert!(store.fsck(false).problems.is_empty());
}

/// The victims' bytes: `/v/f0` was written by `setup_files` with seed 22, size 100,000.
fn v0(s: &Store, path: &str) {
    let want = Spec {
        dir: "/v".into(),
        seed: 22,
        ..Spec::new("x", "files")
    };
    assert_file_is(s, path, want.file_seed(0), 100_000);
}

#[test]
fn crash_in_link_after_the_entry_commits_leaves_both_names_and_a_recounted_nlink() {
    for point in ["inode-after-kind", "link-after-kind"] {
        link_crash_case(
            point,
            "link",
            "/v/f0",
            "/v/l",
            |_| {},
            |s| {
                let (a, b) = (s.stat("/v/f0").unwrap(), s.stat("/v/l").unwrap());
                assert_eq!((a.ino, a.nlink, b.nlink), (b.ino, 2, 2), "{point}");
                v0(s, "/v/l");
                s.unlink("/v/f0").unwrap();
                v0(s, "/v/l");
                s.unlink("/v/l").unwrap();
                assert_eq!(s.stat_ino(a.ino).unwrap_err().errno(), libc::ENOENT);
            },
        );
    }
}

#[test]
fn crash_in_unlink_of_a_link_entry_removes_that_name_only() {
    link_crash_case(
        "unlink-link-before-free",
        "unlink",
        "/v/l",
        "",
        |s| {
            s.link("/v/f0", "/v/l").unwrap();
        },
        |s| {
            assert_eq!(s.stat("/v/l").unwrap_err().errno(), libc::ENOENT);
            assert_eq!(s.stat("/v/f0").unwrap().nlink, 1);
            v0(s, "/v/f0");
            let names: Vec<String> = s.read_dir("/v").unwrap().into_iter().map(|e| e.name).collect();
            assert_eq!(names.len(), 2, "{names:?}");
        },
    );
}

#[test]
fn crash_in_unlink_of_a_linked_files_own_name_keeps_it_under_its_link() {
    link_crash_case(
        "unlink-linked-after-detach",
        "unlink",
        "/v/f0",
        "",
        |s| {
            s.link("/v/f0", "/v/l").unwrap();
        },
        |s| {
            assert_eq!(s.stat("/v/f0").unwrap_err().errno(), libc::ENOENT);
            let l = s.stat("/v/l").unwrap();
            assert_eq!(l.nlink, 1);
            assert_eq!(s.path_of(l.ino).unwrap(), "/v/l");
            v0(s, "/v/l");
        },
    );
}

#[test]
fn crash_in_a_rename_over_a_linked_file_keeps_it_under_its_other_name() {
    link_crash_case(
        "rename-after-intent",
        "rename",
        "/v/f1",
        "/v/f0",
        |s| {
            s.link("/v/f0", "/v/l").unwrap();
        },
        |s| {
            // The rename completed (replayed): f0 is f1's bytes; the old f0 lives on
            // under its link with one name.
            let f1 = Spec {
                dir: "/v".into(),
                seed: 22,
                ..Spec::new("x", "files")
            };
            assert_file_is(s, "/v/f0", f1.file_seed(1), 100_000);
            assert_eq!(s.stat("/v/f1").unwrap_err().errno(), libc::ENOENT);
            assert_eq!(s.stat("/v/l").unwrap().nlink, 1);
            v0(s, "/v/l");
        },
    );
}

/// Issue "Failures in sequence", item 6b: a link entry's `target` changed to name
/// another file. Before the fix, reading the link served that other file's bytes with
/// success (the entry's record checksum, which covers `target`, was never checked on
/// the way through a link) and fsck's quarantine kept it a link to the wrong file.
#[test]
fn a_link_whose_target_was_changed_is_eio_and_never_serves_another_files_bytes() {
    use ckptfs_store::layout::{Inode, Layout, INODE_SIZE};
    use std::os::unix::fs::FileExt;
    let t = TempStore::new("hl-target", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    write_file(&s, "/a", 5, 5_000);
    write_file(&s, "/c", 6, 7_000);
    s.link("/a", "/b").unwrap();
    let l = Layout::compute(16, 128, 0, 64);
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    let field = |fid: u64, off: usize| l.inode_off + fid * INODE_SIZE + off as u64;
    let kind_of = |fid: u64| {
        let mut b = [0u8; 4];
        seg.read_exact_at(&mut b, field(fid, std::mem::offset_of!(Inode, kind)))
            .unwrap();
        u32::from_le_bytes(b)
    };
    let entry = (1..64).find(|&f| kind_of(f) == 4).expect("a link entry");
    let c = s.stat("/c").unwrap().ino - 1;
    seg.write_all_at(
        &(c as u32).to_le_bytes(),
        field(entry, std::mem::offset_of!(Inode, target)),
    )
    .unwrap();
    let o = t.attach();
    assert_eq!(
        read_all(&o, "/b").map(|v| v.len()).unwrap_err().errno(),
        libc::EIO
    );
    assert_eq!(o.stat("/b").unwrap_err().errno(), libc::EIO);
    assert_file_is(&o, "/a", 5, 5_000);
    assert_file_is(&o, "/c", 6, 7_000);
    let rep = o.fsck(false);
    assert!(rep.problems.iter().any(|p| p.kind == "damaged-inode"), "{rep:?}");
    let rep = o.fsck(true);
    assert_eq!(rep.quarantined.len(), 1, "{rep:?}");
    assert!(o.fsck(false).problems.is_empty(), "{:?}", o.fsck(false).problems);
    // The quarantined entry names the file that lacked a name (its record counts two),
    // never /c.
    assert_eq!(o.stat("/b").unwrap_err().errno(), libc::ENOENT);
    let q = format!("/lost+found/ino{}", entry + 1);
    assert_eq!(read_all(&o, &q).unwrap(), pattern(5, 0, 5_000));
    assert_eq!(o.stat("/a").unwrap().nlink, 2);
    assert_eq!(o.stat("/c").unwrap().nlink, 1);
    assert_file_is(&o, "/c", 6, 7_000);
    assert_chunk_accounting(&o);
}

/// Item 6b, the other way out: a damaged link entry whose target no file confirms (no
/// file's record lacks a name) becomes an empty quarantined file, never a name of /c.
#[test]
fn a_damaged_link_no_file_confirms_is_quarantined_as_an_empty_file() {
    use ckptfs_store::layout::{Inode, Layout, INODE_SIZE};
    use std::os::unix::fs::FileExt;
    let t = TempStore::new("hl-target2", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    write_file(&s, "/a", 5, 5_000);
    write_file(&s, "/c", 6, 7_000);
    s.link("/a", "/b").unwrap();
    let l = Layout::compute(16, 128, 0, 64);
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    let field = |fid: u64, off: usize| l.inode_off + fid * INODE_SIZE + off as u64;
    let a = s.stat("/a").unwrap().ino - 1;
    let entry = (1..64u64)
        .find(|&f| {
            let mut b = [0u8; 4];
            seg.read_exact_at(&mut b, field(f, std::mem::offset_of!(Inode, kind)))
                .unwrap();
            u32::from_le_bytes(b) == 4
        })
        .unwrap();
    let c = s.stat("/c").unwrap().ino - 1;
    // /a's count no longer asks for a second name (damage too), and the link names /c.
    let o = t.attach();
    seg.write_all_at(
        &(c as u32).to_le_bytes(),
        field(entry, std::mem::offset_of!(Inode, target)),
    )
    .unwrap();
    seg.write_all_at(&1u32.to_le_bytes(), field(a, std::mem::offset_of!(Inode, nlink)))
        .unwrap();
    assert_eq!(o.stat("/b").unwrap_err().errno(), libc::EIO);
    o.fsck(true);
    assert!(o.fsck(false).problems.is_empty(), "{:?}", o.fsck(false).problems);
    let q = format!("/lost+found/ino{}", entry + 1);
    assert_eq!(read_all(&o, &q).unwrap(), Vec::<u8>::new());
    assert_file_is(&o, "/c", 6, 7_000);
    assert_eq!(o.stat("/c").unwrap().nlink, 1);
    assert_chunk_accounting(&o);
}
