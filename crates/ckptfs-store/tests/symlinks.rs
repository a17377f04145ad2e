//! Symbolic links in the store: created with their target as a checksummed small-file
//! run, read back, reported by stat as symlinks of the target's length, never followed
//! by the store itself, removed and renamed like files, and checked by fsck. The crash
//! point inside their creation is in `crash_points.rs`.

mod support;

use ckptfs_store::*;
use std::os::unix::fs::FileExt;
use support::*;

/// Runs the writer when this executable is spawned as a child (see `support`).
#[test]
fn child_entry() {
    support::child_entry();
}

#[test]
fn a_symlink_keeps_its_target_and_is_listed_stated_renamed_and_unlinked_as_a_symlink() {
    let t = TempStore::new("sym-basic", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    s.mkdir("/d", 0o755).unwrap();
    let st = s.symlink(b"../some/target", "/d/l").unwrap();
    assert_eq!((st.kind, st.size, st.mode), (FileKind::Symlink, 14, 0o777));
    // Another process sees it.
    let o = t.attach();
    assert_eq!(o.readlink("/d/l").unwrap(), b"../some/target");
    let st2 = o.stat("/d/l").unwrap();
    assert_eq!((st2.kind, st2.size, st2.ino), (FileKind::Symlink, 14, st.ino));
    assert_eq!(o.readlink_ino(st.ino).unwrap(), b"../some/target");
    assert_eq!(
        o.lookup(o.stat("/d").unwrap().ino, "l").unwrap().kind,
        FileKind::Symlink
    );
    let names: Vec<(String, FileKind)> = o
        .read_dir("/d")
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert_eq!(names, vec![("l".to_string(), FileKind::Symlink)]);
    // The store never follows it: open is ELOOP, a path through it ENOTDIR, readlink of
    // a file EINVAL, a second symlink or mkdir of the name EEXIST.
    let mut f = s.open("/d/f", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(3, 0, 100)).unwrap();
    f.close().unwrap();
    assert_eq!(
        s.open("/d/l", OpenFlags::READ, 0).unwrap_err().errno(),
        libc::ELOOP
    );
    assert_eq!(
        s.open("/d/l", OpenFlags::CREATE, 0o644).unwrap_err().errno(),
        libc::ELOOP
    );
    assert_eq!(s.stat("/d/l/x").unwrap_err().errno(), libc::ENOTDIR);
    assert_eq!(s.readlink("/d/f").unwrap_err().errno(), libc::EINVAL);
    assert_eq!(s.readlink("/d").unwrap_err().errno(), libc::EINVAL);
    assert_eq!(s.symlink(b"x", "/d/l").unwrap_err().errno(), libc::EEXIST);
    assert_eq!(s.symlink(b"x", "/d/f").unwrap_err().errno(), libc::EEXIST);
    assert_eq!(s.mkdir("/d/l", 0o755).unwrap_err().errno(), libc::EEXIST);
    assert_eq!(s.symlink(b"x", "/nodir/l").unwrap_err().errno(), libc::ENOENT);
    // Rename moves it with its target; over a file replaces the file.
    s.rename("/d/l", "/d/f").unwrap();
    assert_eq!(s.readlink("/d/f").unwrap(), b"../some/target");
    assert_eq!(s.stat("/d/l").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(s.stat("/d/f").unwrap().kind, FileKind::Symlink);
    s.rename("/d/f", "/l2").unwrap();
    assert_eq!(s.readlink("/l2").unwrap(), b"../some/target");
    assert_eq!(s.rmdir("/l2").unwrap_err().errno(), libc::ENOTDIR);
    s.unlink("/l2").unwrap();
    assert_eq!(s.readlink("/l2").unwrap_err().errno(), libc::ENOENT);
    assert!(s.fsck(false).problems.is_empty());
    assert_chunk_accounting(&s);
}

#[test]
fn symlink_targets_are_checked_empty_nul_and_too_long_and_the_longest_fits() {
    let t = TempStore::new("sym-limits", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    assert_eq!(s.symlink(b"", "/e").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(s.symlink(b"a\0b", "/n").unwrap_err().errno(), libc::EINVAL);
    let long = vec![b'a'; SYMLINK_MAX + 1];
    assert_eq!(s.symlink(&long, "/t").unwrap_err().errno(), libc::ENAMETOOLONG);
    // None of the refused ones left a name or a block behind.
    assert!(s.read_dir("/").unwrap().is_empty());
    let max: Vec<u8> = (0..SYMLINK_MAX).map(|i| b'a' + (i % 26) as u8).collect();
    let st = s.symlink(&max, "/t").unwrap();
    assert_eq!((st.size, st.allocated), (SYMLINK_MAX as u64, 4096));
    assert_eq!(t.attach().readlink("/t").unwrap(), max);
    // Non-UTF-8 bytes are kept as they are.
    s.symlink(b"\xff\xfe/x", "/raw").unwrap();
    assert_eq!(s.readlink("/raw").unwrap(), b"\xff\xfe/x");
    assert!(s.fsck(false).problems.is_empty());
    s.unlink("/t").unwrap();
    s.unlink("/raw").unwrap();
    assert_chunk_accounting(&s);
}

#[test]
fn a_flipped_byte_in_a_symlink_target_is_eio_for_readlink_and_reported_by_fsck() {
    let t = TempStore::new("sym-flip", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    s.symlink(b"/the/target/of/this/link", "/l").unwrap();
    let list = s.chunk_list("/l").unwrap();
    assert_eq!(list.len(), 1);
    let ChunkLocation::Memory(at) = list[0].location else {
        panic!("a symlink target is in memory")
    };
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    let data_off = ckptfs_store::layout::Layout::compute(16, 128, 0, 64).data_off;
    let mut b = [0u8; 1];
    seg.read_exact_at(&mut b, data_off + at + 5).unwrap();
    assert_eq!(b[0], b't');
    seg.write_all_at(b"T", data_off + at + 5).unwrap();
    let other = t.attach();
    let e = other.readlink("/l").unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e:?}");
    assert_eq!(e.errno(), libc::EIO);
    // stat still answers (the record is intact), the damage is in the target.
    assert_eq!(other.stat("/l").unwrap().kind, FileKind::Symlink);
    let rep = other.fsck(false);
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    assert!(rep.problems[0].detail.starts_with("/l:"), "{:?}", rep.problems);
    // Restored, it reads back again.
    seg.write_all_at(b"t", data_off + at + 5).unwrap();
    assert_eq!(other.readlink("/l").unwrap(), b"/the/target/of/this/link");
}

#[test]
fn a_damaged_symlink_record_is_eio_and_fsck_repair_quarantines_it() {
    use ckptfs_store::layout::{Inode, INODE_SIZE};
    let t = TempStore::new("sym-rec", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let st = s.symlink(b"target", "/l").unwrap();
    // The size no longer matches its record checksum.
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    let l = ckptfs_store::layout::Layout::compute(16, 128, 0, 64);
    let off = l.inode_off + (st.ino - 1) * INODE_SIZE + std::mem::offset_of!(Inode, size) as u64;
    seg.write_all_at(&3u64.to_le_bytes(), off).unwrap();
    let other = t.attach();
    assert_eq!(other.readlink("/l").unwrap_err().errno(), libc::EIO);
    let rep = other.fsck(true);
    assert!(
        rep.problems.iter().any(|p| p.kind == "damaged-inode"),
        "{:?}",
        rep.problems
    );
    assert!(
        other.fsck(false).problems.is_empty(),
        "{:?}",
        other.fsck(false).problems
    );
    assert_eq!(other.stat("/l").unwrap_err().errno(), libc::ENOENT);
}
