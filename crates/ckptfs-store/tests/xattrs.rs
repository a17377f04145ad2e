//! Extended attributes (format 5): kept per inode in a checksummed record replaced by a
//! crash-atomic rename; the errno of each limit as Linux gives it; shared by hard links,
//! removed with the last name, never seen by a reused slot; a process killed while
//! setting one leaves the old or the new set; fsck finds a record of no inode.

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

const C: XattrFlags = XattrFlags {
    create: true,
    replace: false,
};
const R: XattrFlags = XattrFlags {
    create: false,
    replace: true,
};

fn touch(s: &Store, p: &str) {
    s.open(p, OpenFlags::CREATE, 0o644).unwrap().close().unwrap();
}

#[test]
fn xattrs_are_set_read_listed_and_removed_with_linux_errnos() {
    let t = TempStore::new("xa-basic", 16 << 20, 64 << 10, 64, None);
    let s = t.attach();
    touch(&s, "/f");
    s.mkdir("/d", 0o755).unwrap();
    let e = |r: Result<()>| r.unwrap_err().errno();
    assert_eq!(s.getxattr("/f", b"user.a").unwrap_err().errno(), libc::ENODATA);
    assert!(s.listxattr("/f").unwrap().is_empty());
    let before = s.stat("/f").unwrap().ctime_ns;
    std::thread::sleep(std::time::Duration::from_millis(2));
    s.setxattr("/f", b"user.a", b"1", Default::default()).unwrap();
    assert!(s.stat("/f").unwrap().ctime_ns > before, "setxattr sets ctime");
    s.setxattr("/f", b"trusted.b", b"", C).unwrap();
    s.setxattr("/f", b"security.c", &[0, 255, 7], Default::default())
        .unwrap();
    s.setxattr("/d", b"user.dir", b"on a directory", Default::default())
        .unwrap();
    // Another process reads them back.
    let o = t.attach();
    assert_eq!(o.getxattr("/f", b"user.a").unwrap(), b"1");
    assert_eq!(o.getxattr("/f", b"trusted.b").unwrap(), b"");
    assert_eq!(o.getxattr("/f", b"security.c").unwrap(), [0, 255, 7]);
    assert_eq!(o.getxattr("/d", b"user.dir").unwrap(), b"on a directory");
    assert_eq!(
        o.listxattr("/f").unwrap(),
        vec![b"user.a".to_vec(), b"trusted.b".to_vec(), b"security.c".to_vec()]
    );
    // XATTR_CREATE / XATTR_REPLACE.
    assert_eq!(e(s.setxattr("/f", b"user.a", b"2", C)), libc::EEXIST);
    assert_eq!(e(s.setxattr("/f", b"user.new", b"2", R)), libc::ENODATA);
    s.setxattr("/f", b"user.a", b"22", R).unwrap();
    assert_eq!(o.getxattr("/f", b"user.a").unwrap(), b"22");
    // Limits: name length (ERANGE), value size (E2BIG), namespaces (EOPNOTSUPP), the
    // per-inode total (ENOSPC).
    assert_eq!(e(s.setxattr("/f", b"", b"x", Default::default())), libc::ERANGE);
    let long = [b"user.".to_vec(), vec![b'n'; 251]].concat();
    assert_eq!(e(s.setxattr("/f", &long, b"x", Default::default())), libc::ERANGE);
    let longest = [b"user.".to_vec(), vec![b'n'; 250]].concat();
    s.setxattr("/f", &longest, b"x", Default::default()).unwrap();
    let big = vec![7u8; XATTR_SIZE_MAX + 1];
    assert_eq!(
        e(s.setxattr("/f", b"user.big", &big, Default::default())),
        libc::E2BIG
    );
    for n in [&b"system.posix_acl_access"[..], b"other.x", b"user."] {
        assert_eq!(e(s.setxattr("/f", n, b"x", Default::default())), libc::EOPNOTSUPP);
    }
    s.setxattr("/f", b"user.max", &big[..XATTR_SIZE_MAX], Default::default())
        .unwrap();
    assert_eq!(o.getxattr("/f", b"user.max").unwrap().len(), XATTR_SIZE_MAX);
    assert_eq!(
        e(s.setxattr("/f", b"user.max2", &big[..XATTR_SIZE_MAX], Default::default())),
        libc::ENOSPC
    );
    assert_eq!(o.getxattr("/f", b"user.max2").unwrap_err().errno(), libc::ENODATA);
    // Remove.
    s.removexattr("/f", b"user.max").unwrap();
    assert_eq!(e(s.removexattr("/f", b"user.max")), libc::ENODATA);
    assert_eq!(s.getxattr("/nope", b"user.a").unwrap_err().errno(), libc::ENOENT);
    let rep = s.fsck(false);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_chunk_accounting(&s);
    // Nothing of it shows in the user's namespace.
    assert_eq!(s.list_all().len(), 2);
}

#[test]
fn xattrs_follow_the_inode_through_renames_and_links_and_go_with_its_last_name() {
    let t = TempStore::new("xa-life", 16 << 20, 64 << 10, 64, None);
    let s = t.attach();
    touch(&s, "/f");
    s.setxattr("/f", b"user.k", b"v", Default::default()).unwrap();
    s.rename("/f", "/g").unwrap();
    assert_eq!(s.getxattr("/g", b"user.k").unwrap(), b"v");
    s.link("/g", "/h").unwrap();
    s.setxattr("/h", b"user.k2", b"w", Default::default()).unwrap();
    assert_eq!(s.getxattr("/g", b"user.k2").unwrap(), b"w");
    s.unlink("/g").unwrap();
    assert_eq!(s.getxattr("/h", b"user.k").unwrap(), b"v");
    let ino = s.stat("/h").unwrap().ino;
    let records = |s: &Store| {
        s.list_all_system()
            .into_iter()
            .filter(|(p, st)| p.starts_with("/.ckptfs/xattr/") && st.kind == FileKind::File)
            .count()
    };
    assert_eq!(records(&s), 1);
    s.unlink("/h").unwrap();
    assert_eq!(records(&s), 0, "the record goes with the last name");
    // A file that reuses the slot has no attributes.
    touch(&s, "/new");
    let st = s.stat("/new").unwrap();
    assert_eq!(st.ino, ino, "the slot is reused");
    assert!(s.listxattr("/new").unwrap().is_empty());
    // Replacing a file by rename drops the replaced file's record.
    s.setxattr("/new", b"user.x", b"1", Default::default()).unwrap();
    touch(&s, "/other");
    s.rename("/other", "/new").unwrap();
    assert!(s.listxattr("/new").unwrap().is_empty());
    assert_eq!(records(&s), 0);
    assert!(s.fsck(false).problems.is_empty());
    assert_chunk_accounting(&s);
}

#[test]
fn a_record_of_no_inode_is_reported_by_fsck_and_removed_by_repair() {
    let t = TempStore::new("xa-stray", 16 << 20, 64 << 10, 64, None);
    let s = t.attach();
    touch(&s, "/f");
    s.setxattr("/f", b"user.k", b"v", Default::default()).unwrap();
    // As a crash between a last unlink and the record's removal leaves it.
    touch(&s, "/.ckptfs/xattr/60.9");
    let rep = s.fsck(false);
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    assert_eq!(rep.problems[0].kind, "stray-xattrs");
    s.fsck(true);
    assert!(s.fsck(false).problems.is_empty());
    assert_eq!(s.stat("/.ckptfs/xattr/60.9").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(s.getxattr("/f", b"user.k").unwrap(), b"v");
}

#[test]
fn a_flipped_byte_in_a_record_is_eio_not_a_wrong_value() {
    use std::os::unix::fs::FileExt;
    let t = TempStore::new("xa-flip", 16 << 20, 64 << 10, 64, None);
    let s = t.attach();
    touch(&s, "/f");
    s.setxattr("/f", b"user.k", b"value", Default::default()).unwrap();
    let ino = s.stat("/f").unwrap();
    let rec = format!("/.ckptfs/xattr/{}.{}", ino.ino, ino.generation);
    let list = s.chunk_list(&rec).unwrap();
    let ChunkLocation::Memory(at) = list[0].location else {
        panic!("a record is in memory")
    };
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    let data_off = ckptfs_store::layout::Layout::compute(16, 256, 0, 64).data_off;
    let len = 8 + 6 + 6 + 5;
    let mut b = [0u8; 1];
    seg.read_exact_at(&mut b, data_off + at + len - 1).unwrap();
    assert_eq!(b[0], b'e');
    seg.write_all_at(b"E", data_off + at + len - 1).unwrap();
    assert_eq!(
        t.attach().getxattr("/f", b"user.k").unwrap_err().errno(),
        libc::EIO
    );
}

fn xattr_crash_case(point: &str, check: impl FnOnce(&Store)) {
    let t = TempStore::new(&format!("xa-cp-{point}"), 16 << 20, CHUNK, 64, None);
    let keep = setup_files(&t.name, "/keep", 2, 150_000, 11);
    {
        let s = t.attach();
        s.setxattr(&keep.file_path(0), b"user.k", b"old", Default::default())
            .unwrap();
    }
    crash_at(point, &t.name, "setxattr", &keep.file_path(0), "new", 0, 0);
    let s = t.attach();
    assert!(s.info().recoveries > 0 || point == "xattr-before-rename");
    for i in 0..2 {
        assert_file_is(&s, &keep.file_path(i), keep.file_seed(i), 150_000);
    }
    check(&s);
    let rep = s.fsck(false);
    assert!(rep.problems.is_empty(), "crash at {point}: {:?}", rep.problems);
    // A later change works.
    s.setxattr(&keep.file_path(0), b"user.k", b"later", Default::default())
        .unwrap();
    assert_eq!(s.getxattr(&keep.file_path(0), b"user.k").unwrap(), b"later");
    assert_chunk_accounting(&s);
}

#[test]
fn crash_before_the_record_rename_keeps_the_old_value() {
    xattr_crash_case("xattr-before-rename", |s| {
        assert_eq!(s.getxattr("/keep/f0", b"user.k").unwrap(), b"old");
    });
}

#[test]
fn crash_inside_the_record_rename_gives_the_new_value() {
    // Killed after the rename intent: the next namespace locker completes the rename.
    xattr_crash_case("rename-after-intent", |s| {
        assert_eq!(s.getxattr("/keep/f0", b"user.k").unwrap(), b"new");
    });
}

/// Issue "Failures in sequence", item 6c: the inode flag that says an inode has
/// attributes cleared (or set) by damage. Before, fsck saw nothing and the attributes
/// read as none; now fsck reports `xattr-flag` and `--repair` sets the flag again when
/// the record exists (its bytes verify under their CRCs) and clears it when none does.
#[test]
fn a_damaged_xattr_flag_is_reported_by_fsck_and_repaired_from_the_records() {
    use ckptfs_store::layout::{iflag, Inode, Layout, INODE_SIZE};
    use std::os::unix::fs::FileExt;
    let t = TempStore::new("xa-flag", 16 << 20, 64 << 10, 64, None);
    let s = t.attach();
    touch(&s, "/f");
    touch(&s, "/g");
    s.setxattr("/f", b"user.k", b"value", Default::default()).unwrap();
    let l = Layout::compute(16, 256, 0, 64);
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(s.name()))
        .unwrap();
    let flip = |path: &str| {
        let off = l.inode_off
            + (s.stat(path).unwrap().ino - 1) * INODE_SIZE
            + std::mem::offset_of!(Inode, flags) as u64;
        let mut b = [0u8; 4];
        seg.read_exact_at(&mut b, off).unwrap();
        seg.write_all_at(&(u32::from_le_bytes(b) ^ iflag::XATTRS).to_le_bytes(), off)
            .unwrap();
    };
    flip("/f");
    flip("/g");
    let o = t.attach();
    let rep = o.fsck(false);
    let found: Vec<_> = rep.problems.iter().filter(|p| p.kind == "xattr-flag").collect();
    assert_eq!(found.len(), 2, "{:?}", rep.problems);
    o.fsck(true);
    assert!(o.fsck(false).problems.is_empty(), "{:?}", o.fsck(false).problems);
    assert_eq!(o.getxattr("/f", b"user.k").unwrap(), b"value");
    assert_eq!(o.listxattr("/f").unwrap(), vec![b"user.k".to_vec()]);
    assert_eq!(o.getxattr("/g", b"user.k").unwrap_err().errno(), libc::ENODATA);
    assert!(o.listxattr("/g").unwrap().is_empty());
    o.setxattr("/g", b"user.n", b"1", Default::default()).unwrap();
    assert_eq!(o.getxattr("/g", b"user.n").unwrap(), b"1");
    assert!(o.fsck(false).problems.is_empty());
}
