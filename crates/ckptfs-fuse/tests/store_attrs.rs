//! Store mode attributes and limits: directory link counts, an open-but-unlinked file's
//! nlink 0, 255-byte names and paths near PATH_MAX, the documented errno of each call the
//! store cannot serve (docs/fuse.md), symbolic links kept by the store and followed by
//! the kernel, and (format 5) hard links, FIFOs, sockets and device nodes.

mod common;

use ckptfs_store::{Store, StoreOptions};
use common::*;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[test]
fn zz_daemon_entry() {
    daemon_entry();
}

struct StoreGuard(String);
impl Drop for StoreGuard {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.0);
    }
}

fn mounted(tag: &str) -> (StoreGuard, tempfile::TempDir, PathBuf, Daemon) {
    let name = store_name(tag);
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(64 << 20);
    o.max_files = Some(1024);
    Store::create(&o).unwrap();
    let g = StoreGuard(name);
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let d = Daemon::store(&g.0, &mp);
    (g, tmp, mp, d)
}

fn nlink(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().nlink()
}

#[test]
fn store_directory_nlink_counts_subdirectories_across_rename() {
    let (_g, _tmp, mp, d) = mounted("nlink");
    std::fs::create_dir_all(mp.join("a/x")).unwrap();
    std::fs::create_dir(mp.join("a/y")).unwrap();
    std::fs::create_dir(mp.join("b")).unwrap();
    std::fs::write(mp.join("a/file"), b"f").unwrap();
    assert_eq!(nlink(&mp.join("a")), 4, "a: . .. x/.. y/..");
    assert_eq!(nlink(&mp.join("b")), 2);
    std::fs::rename(mp.join("a/x"), mp.join("b/x")).unwrap();
    assert_eq!(nlink(&mp.join("a")), 3, "a after moving x out");
    assert_eq!(nlink(&mp.join("b")), 3, "b after moving x in");
    std::fs::remove_dir(mp.join("a/y")).unwrap();
    assert_eq!(nlink(&mp.join("a")), 2);
    assert_eq!(nlink(&mp.join("a/file")), 1);
    assert_eq!(d.stop(), 0);
}

#[test]
fn store_open_unlinked_file_has_nlink_zero() {
    let (_g, _tmp, mp, d) = mounted("unlinked");
    let p = mp.join("gone");
    std::fs::write(&p, b"still here").unwrap();
    let f = std::fs::File::open(&p).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 1);
    std::fs::remove_file(&p).unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(m.nlink(), 0, "fstat of an open, unlinked file");
    assert_eq!(m.len(), 10);
    drop(f);
    assert_eq!(d.stop(), 0);
}

#[test]
fn store_long_names_and_paths_near_path_max() {
    let (_g, _tmp, mp, d) = mounted("long");
    let name255 = "n".repeat(255);
    std::fs::write(mp.join(&name255), b"x").unwrap();
    assert_eq!(std::fs::read(mp.join(&name255)).unwrap(), b"x");
    let e = std::fs::write(mp.join("n".repeat(256)), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    // Nest 200-byte directories until the absolute path is just below PATH_MAX (4096
    // with its NUL), then create and read a file there through that path.
    let comp = "d".repeat(200);
    let mut p = mp.clone();
    while p.as_os_str().len() + 1 + comp.len() < 3900 {
        p = p.join(&comp);
        std::fs::create_dir(&p).unwrap();
    }
    let left = 4095 - p.as_os_str().len() - 1;
    let f = p.join("f".repeat(left.min(255)));
    assert!(f.as_os_str().len() > 3900);
    std::fs::write(&f, b"deep").unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"deep");
    assert_eq!(d.stop(), 0);
}

fn errno_of(r: libc::c_int) -> i32 {
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

#[test]
fn store_xattrs_are_kept_by_the_store_with_linux_errnos_and_unsupported_calls_answer_theirs() {
    let (g, _tmp, mp, d) = mounted("xattr");
    std::fs::write(mp.join("f"), b"x").unwrap();
    let c = |n: &str| CString::new(mp.join(n).as_os_str().as_bytes()).unwrap();
    let (f, to) = (c("f"), c("to"));
    let get = |name: &std::ffi::CStr, size: usize| -> Result<Vec<u8>, i32> {
        let mut buf = vec![0u8; size];
        // SAFETY: valid NUL-terminated path and name; buf has `size` writable bytes.
        let r = unsafe { libc::getxattr(f.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), size) };
        if r < 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
        }
        buf.truncate(r as usize);
        Ok(buf)
    };
    let set = |name: &std::ffi::CStr, v: &[u8], flags: i32| {
        // SAFETY: valid NUL-terminated path and name; v is readable for its length.
        errno_of(unsafe { libc::setxattr(f.as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), flags) })
    };
    assert_eq!(get(c"user.k", 16), Err(libc::ENODATA));
    assert_eq!(set(c"user.k", b"value", 0), 0);
    assert_eq!(set(c"trusted.t", b"root only", 0), 0);
    assert_eq!(get(c"user.k", 16).unwrap(), b"value");
    // SAFETY: a size query (NULL buffer, size 0) on a valid path and name.
    let n = unsafe { libc::getxattr(f.as_ptr(), c"user.k".as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(n, 5);
    assert_eq!(get(c"user.k", 2), Err(libc::ERANGE));
    assert_eq!(set(c"user.k", b"again", libc::XATTR_CREATE), libc::EEXIST);
    assert_eq!(set(c"user.nope", b"x", libc::XATTR_REPLACE), libc::ENODATA);
    assert_eq!(set(c"user.big", &vec![1u8; 65537], 0), libc::E2BIG);
    let mut list = vec![0u8; 256];
    // SAFETY: valid path; list has 256 writable bytes.
    let n = unsafe { libc::listxattr(f.as_ptr(), list.as_mut_ptr().cast(), 256) };
    list.truncate(n as usize);
    assert_eq!(list, b"user.k\0trusted.t\0");
    // The store holds them, another process sees them, and they stay with the inode
    // through a hard link.
    let s = Store::attach(&StoreOptions::named(&g.0)).unwrap();
    assert_eq!(s.getxattr("/f", b"user.k").unwrap(), b"value");
    s.setxattr("/f", b"user.from-store", b"1", Default::default())
        .unwrap();
    assert_eq!(get(c"user.from-store", 16).unwrap(), b"1");
    std::fs::hard_link(mp.join("f"), mp.join("g")).unwrap();
    assert_eq!(s.getxattr("/g", b"trusted.t").unwrap(), b"root only");
    // SAFETY: valid NUL-terminated path and name.
    let r = unsafe { libc::removexattr(f.as_ptr(), c"user.k".as_ptr()) };
    assert_eq!(errno_of(r), 0);
    assert_eq!(get(c"user.k", 16), Err(libc::ENODATA));
    // Still refused, each with its errno (docs/fuse.md): RENAME_EXCHANGE EINVAL.
    std::fs::write(mp.join("to"), b"y").unwrap();
    // SAFETY: valid NUL-terminated paths; renameat2 through the raw syscall.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(errno_of(r as libc::c_int), libc::EINVAL, "RENAME_EXCHANGE");
    assert!(s.fsck(false).problems.is_empty(), "{:?}", s.fsck(false).problems);
    assert_eq!(d.stop(), 0);
}

#[test]
fn store_write_by_a_user_clears_setuid_bits() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root (a root daemon and an unprivileged writer)");
        return;
    }
    let (rc, _, err) = sh(
        Path::new("/"),
        "id -u ckptfs-t1 || useradd -M -U -r -s /usr/sbin/nologin ckptfs-t1",
    );
    assert_eq!(rc, 0, "{err}");
    let (_g, tmp, mp, d) = mounted("killpriv");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for n in ["direct", "cached", "by-root"] {
        std::fs::write(mp.join(n), b"a").unwrap();
        std::fs::set_permissions(mp.join(n), std::fs::Permissions::from_mode(0o6777)).unwrap();
    }
    let (rc, _, err) = sh(
        &mp,
        "setpriv --reuid=ckptfs-t1 --regid=ckptfs-t1 --init-groups bash -c \
         'echo b >> direct && python3 -c \"f = open(\\\"cached\\\", \\\"r+\\\"); f.write(\\\"b\\\")\"' && \
         echo b >> by-root",
    );
    assert_eq!(rc, 0, "{err}");
    let mode = |n: &str| std::fs::metadata(mp.join(n)).unwrap().mode() & 0o7777;
    assert_eq!(mode("direct"), 0o777, "O_WRONLY (direct I/O) write by a user");
    assert_eq!(mode("cached"), 0o777, "O_RDWR (page cache) write by a user");
    assert_eq!(mode("by-root"), 0o6777, "root (CAP_FSETID) keeps the bits");
    assert_eq!(d.stop(), 0);
}

/// Run `cmd` in `dir` as `user` with its groups; (exit code, stderr).
fn as_user(user: &str, dir: &Path, cmd: &str) -> (i32, String) {
    let (rc, _, err) = sh(
        dir,
        &format!("setpriv --reuid={user} --regid={user} --init-groups bash -c {cmd:?}"),
    );
    (rc, err)
}

fn ensure_user(name: &str) -> (u32, u32) {
    let (rc, _, err) = sh(
        Path::new("/"),
        &format!("id -u {name} >/dev/null || useradd -M -U -r -s /usr/sbin/nologin {name}"),
    );
    assert_eq!(rc, 0, "useradd {name}: {err}");
    let id = |f: &str| {
        let (_, out, _) = sh(Path::new("/"), &format!("id {f} {name}"));
        out.trim().parse::<u32>().unwrap()
    };
    (id("-u"), id("-g"))
}

#[test]
fn store_root_daemon_files_belong_to_the_caller_and_sticky_rules_hold() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root (a root daemon serving two unprivileged users)");
        return;
    }
    let (u1, g1) = ensure_user("ckptfs-t1");
    let (u2, _) = ensure_user("ckptfs-t2");
    let (_g, tmp, mp, d) = mounted("owners");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (rc, _, err) = sh(
        &mp,
        "mkdir -m 1777 sticky && mkdir sgid && chgrp 100 sgid && chmod 2777 sgid",
    );
    assert_eq!(rc, 0, "{err}");
    let owner = |p: &str| {
        let m = std::fs::metadata(mp.join(p)).unwrap();
        (m.uid(), m.gid())
    };
    // Files and directories belong to their creator (were the daemon's, root).
    let (rc, err) = as_user("ckptfs-t1", &mp, "echo a > sticky/f1 && mkdir sticky/d1");
    assert_eq!(rc, 0, "{err}");
    assert_eq!(owner("sticky/f1"), (u1, g1));
    assert_eq!(owner("sticky/d1"), (u1, g1));
    // Sticky directory: the owner overwrites, appends and removes (were EACCES/EPERM).
    let (rc, err) = as_user(
        "ckptfs-t1",
        &mp,
        "echo b > sticky/f1 && echo c >> sticky/f1 && rm sticky/f1 && echo k > sticky/f2 && chmod 666 sticky/f2",
    );
    assert_eq!(rc, 0, "owner in a sticky directory: {err}");
    let (rc, err) = as_user("ckptfs-t2", &mp, "rm -f sticky/f2");
    assert_ne!(rc, 0, "another user removed a file in a sticky directory");
    assert!(err.contains("not permitted"), "{err}");
    // setgid directory: new entries get its group, new directories its setgid bit.
    let (rc, err) = as_user("ckptfs-t1", &mp, "touch sgid/s1 && mkdir sgid/sd");
    assert_eq!(rc, 0, "{err}");
    assert_eq!(owner("sgid/s1"), (u1, 100));
    assert_ne!(
        std::fs::metadata(mp.join("sgid/sd")).unwrap().mode() & libc::S_ISGID,
        0
    );
    // chown: a user may not give a file away; root may.
    let (rc, _) = as_user("ckptfs-t1", &mp, &format!("chown {u2} sgid/s1"));
    assert_ne!(rc, 0, "a user gave a file away");
    let (rc, _, err) = sh(&mp, &format!("chown {u2} sgid/s1"));
    assert_eq!(rc, 0, "{err}");
    assert_eq!(owner("sgid/s1").0, u2);
    // atime is kept apart from mtime (touch -a did nothing).
    let (rc, _, err) = sh(
        &mp,
        "touch -m -d '2001-01-01' sgid/s1 && touch -a -d '2002-02-02' sgid/s1",
    );
    assert_eq!(rc, 0, "{err}");
    let m = std::fs::metadata(mp.join("sgid/s1")).unwrap();
    assert_eq!((m.mtime(), m.atime()), (978307200, 1012608000));
    assert_eq!(d.stop(), 0);
}

#[test]
fn store_symlinks_are_kept_by_the_store_and_followed_by_the_kernel() {
    let (g, _tmp, mp, d) = mounted("symlink");
    std::fs::create_dir(mp.join("d")).unwrap();
    std::fs::write(mp.join("d/f"), b"through the link").unwrap();
    std::os::unix::fs::symlink("d/f", mp.join("l")).unwrap();
    std::os::unix::fs::symlink("d", mp.join("ld")).unwrap();
    std::os::unix::fs::symlink("nowhere", mp.join("dangling")).unwrap();
    // lstat: a symlink of the target's length; stat and open follow it.
    let m = std::fs::symlink_metadata(mp.join("l")).unwrap();
    assert!(m.file_type().is_symlink());
    assert_eq!((m.len(), m.nlink(), m.mode() & 0o7777), (3, 1, 0o777));
    assert_eq!(std::fs::read_link(mp.join("l")).unwrap(), Path::new("d/f"));
    assert_eq!(std::fs::read(mp.join("l")).unwrap(), b"through the link");
    assert_eq!(std::fs::read(mp.join("ld/f")).unwrap(), b"through the link");
    assert!(std::fs::metadata(mp.join("ld")).unwrap().is_dir());
    let e = std::fs::read(mp.join("dangling")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(
        std::os::unix::fs::symlink("x", mp.join("l"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EEXIST)
    );
    // Writing through the link writes the file; the store sees the same objects.
    std::fs::write(mp.join("l"), b"rewritten").unwrap();
    let s = Store::attach(&StoreOptions::named(&g.0)).unwrap();
    assert_eq!(s.readlink("/l").unwrap(), b"d/f");
    assert_eq!(s.stat("/l").unwrap().kind, ckptfs_store::FileKind::Symlink);
    s.symlink(b"d/f", "/from-store").unwrap();
    assert_eq!(std::fs::read(mp.join("from-store")).unwrap(), b"rewritten");
    // Rename and unlink act on the link, not its target.
    std::fs::rename(mp.join("l"), mp.join("d/l2")).unwrap();
    assert_eq!(std::fs::read_link(mp.join("d/l2")).unwrap(), Path::new("d/f"));
    std::fs::remove_file(mp.join("d/l2")).unwrap();
    assert_eq!(std::fs::read(mp.join("d/f")).unwrap(), b"rewritten");
    let names: Vec<String> = std::fs::read_dir(mp.join("."))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            format!(
                "{}{}",
                e.file_name().to_string_lossy(),
                if e.file_type().unwrap().is_symlink() {
                    "@"
                } else {
                    ""
                }
            )
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(names, vec!["d", "dangling@", "from-store@", "ld@"]);
    assert!(s.fsck(false).problems.is_empty());
    assert_eq!(d.stop(), 0);
}

#[test]
fn store_hard_links_fifos_sockets_and_device_nodes_work_through_the_mount() {
    use std::io::{Read, Write};
    use std::os::unix::fs::FileTypeExt;
    let (g, _tmp, mp, d) = mounted("links");
    std::fs::write(mp.join("f"), b"one inode").unwrap();
    std::fs::create_dir(mp.join("d")).unwrap();
    std::fs::hard_link(mp.join("f"), mp.join("d/g")).unwrap();
    let (f, gm) = (
        std::fs::metadata(mp.join("f")).unwrap(),
        std::fs::metadata(mp.join("d/g")).unwrap(),
    );
    assert_eq!((f.ino(), f.nlink(), gm.nlink()), (gm.ino(), 2, 2));
    std::fs::write(mp.join("d/g"), b"written through g").unwrap();
    assert_eq!(std::fs::read(mp.join("f")).unwrap(), b"written through g");
    let e = std::fs::hard_link(mp.join("d"), mp.join("d2")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "link of a directory");
    let e = std::fs::hard_link(mp.join("f"), mp.join("d/g")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    // The store holds one inode with two names.
    let s = Store::attach(&StoreOptions::named(&g.0)).unwrap();
    assert_eq!(s.stat("/d/g").unwrap().nlink, 2);
    assert_eq!(s.stat("/d/g").unwrap().ino, f.ino());
    // One name removed: the data stays under the other, with one link.
    std::fs::remove_file(mp.join("f")).unwrap();
    assert_eq!(std::fs::metadata(mp.join("d/g")).unwrap().nlink(), 1);
    assert_eq!(std::fs::read(mp.join("d/g")).unwrap(), b"written through g");
    // A link made by another process shows in the mount's link count (the kernel's
    // cached attributes are invalidated by the change counters).
    s.link("/d/g", "/h").unwrap();
    let t = std::time::Instant::now();
    while std::fs::metadata(mp.join("d/g")).unwrap().nlink() != 2 {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "link count never 2"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(std::fs::read(mp.join("h")).unwrap(), b"written through g");

    // A FIFO: the kernel carries the bytes between a writer and a reader.
    let fifo = CString::new(mp.join("p").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    let m = std::fs::symlink_metadata(mp.join("p")).unwrap();
    assert!(m.file_type().is_fifo());
    assert_eq!(m.mode() & 0o7777, 0o640);
    let p = mp.join("p");
    let w = std::thread::spawn(move || {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .write_all(b"through a fifo")
    });
    let mut got = String::new();
    std::fs::File::open(mp.join("p"))
        .unwrap()
        .read_to_string(&mut got)
        .unwrap();
    w.join().unwrap().unwrap();
    assert_eq!(got, "through a fifo");
    // A unix socket bound in the mount.
    let l = std::os::unix::net::UnixListener::bind(mp.join("sock")).unwrap();
    assert!(std::fs::symlink_metadata(mp.join("sock"))
        .unwrap()
        .file_type()
        .is_socket());
    let mut c = std::os::unix::net::UnixStream::connect(mp.join("sock")).unwrap();
    c.write_all(b"via socket").unwrap();
    drop(c);
    let mut got = String::new();
    l.accept().unwrap().0.read_to_string(&mut got).unwrap();
    assert_eq!(got, "via socket");
    // A bound socket holds the mount busy until it is closed.
    drop(l);
    // Device nodes (the tests run as root, as tmpfs needs too) with their numbers.
    for (n, mode, dev) in [
        ("chr", libc::S_IFCHR, libc::makedev(1, 3)),
        ("blk", libc::S_IFBLK, libc::makedev(7, 0)),
    ] {
        let c = CString::new(mp.join(n).as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mknod(c.as_ptr(), mode | 0o600, dev) }, 0, "{n}");
        let m = std::fs::symlink_metadata(mp.join(n)).unwrap();
        assert_eq!((m.mode() & libc::S_IFMT, m.rdev()), (mode, dev), "{n}");
    }
    let kinds: Vec<ckptfs_store::FileKind> = ["/p", "/sock", "/chr", "/blk"]
        .iter()
        .map(|p| s.stat(p).unwrap().kind)
        .collect();
    use ckptfs_store::FileKind::*;
    assert_eq!(kinds, vec![Fifo, Socket, CharDevice, BlockDevice]);
    for n in ["p", "sock", "chr", "blk", "h", "d/g"] {
        std::fs::remove_file(mp.join(n)).unwrap();
    }
    assert!(s.fsck(false).problems.is_empty(), "{:?}", s.fsck(false).problems);
    assert_eq!(s.info().files, 0);
    assert_eq!(d.stop(), 0);
}

/// pjdfstest (C) chown/00.t: a user's chown of its own file, FIFO or socket to itself
/// clears set-user-ID and set-group-ID (with group execute), as tmpfs does; a
/// directory keeps them. set-group-ID without group execute is cleared only when the
/// user is not in the file's group. Checked against a plain directory (the local file system) too.
#[test]
fn store_chown_by_a_user_clears_setid_bits_of_every_non_directory() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root (a root daemon and an unprivileged chown)");
        return;
    }
    ensure_user("ckptfs-t1");
    let (_g, tmp, mp, d) = mounted("chownkill");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let plain = tmp.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    for dir in [&mp, &plain] {
        let (rc, _, err) = sh(
            dir,
            "touch reg && mkfifo fifo && mkdir dir && \
             python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' && \
             chown ckptfs-t1:ckptfs-t1 reg fifo dir sock && chmod 06555 reg fifo dir sock && \
             touch nx-own nx-other && chown ckptfs-t1:ckptfs-t1 nx-own && chown ckptfs-t1:root nx-other && \
             chmod 02644 nx-own nx-other",
        );
        assert_eq!(rc, 0, "{err}");
        let (rc, err) = as_user(
            "ckptfs-t1",
            dir,
            "chown ckptfs-t1:ckptfs-t1 reg fifo dir sock nx-own nx-other",
        );
        assert_eq!(rc, 0, "{err}");
        let mode = |n: &str| std::fs::symlink_metadata(dir.join(n)).unwrap().mode() & 0o7777;
        let what = if dir == &mp { "mount" } else { "plain directory" };
        for n in ["reg", "fifo", "sock"] {
            assert_eq!(mode(n), 0o555, "{n} on the {what} after a user's chown");
        }
        assert_eq!(mode("dir"), 0o6555, "a directory keeps its bits ({what})");
        // set-group-ID without group execute: kept when the caller is in the file's
        // group, cleared when not (the kernel's setattr_should_drop_sgid).
        assert_eq!(mode("nx-own"), 0o2644, "nx-own on the {what}");
        assert_eq!(mode("nx-other"), 0o644, "nx-other on the {what}");
    }
    assert_eq!(d.stop(), 0);
}

/// pjdfstest (C) `*/03.t` ENAMETOOLONG checks: a path of PATH_MAX - 1 (4,095) bytes
/// relative to a directory of the mount (the suite's cwd) works, one byte more is
/// ENAMETOOLONG (the kernel's limit on one path argument). The store path of such a
/// file is longer than 4,095 bytes (its leading `/` and the directory's own path): it
/// was ENAMETOOLONG from the store's limit on a whole store path.
#[test]
fn store_relative_paths_up_to_path_max_work_below_any_directory() {
    let (_g, _tmp, mp, d) = mounted("relpath");
    std::fs::create_dir_all(mp.join("sub/deeper")).unwrap();
    let script = r#"
import errno, os, sys
os.umask(0)
os.chdir(sys.argv[1])
comp = "d" * 127
nx = "/".join([comp] * 31)
nx = nx + "/" + "f" * (4095 - len(nx) - 1)
assert len(nx) == 4095, len(nx)
os.makedirs(os.path.dirname(nx))
fd = os.open(nx, os.O_CREAT | os.O_WRONLY, 0o642)
os.write(fd, b"deep")
os.close(fd)
assert open(nx, "rb").read() == b"deep"
assert oct(os.stat(nx).st_mode & 0o777) == oct(0o642)
try:
    os.open(nx + "x", os.O_CREAT | os.O_WRONLY, 0o642)
    sys.exit("a 4,096-byte path was accepted")
except OSError as e:
    assert e.errno == errno.ENAMETOOLONG, e
os.unlink(nx)
print("ok")
"#;
    for dir in [mp.clone(), mp.join("sub/deeper")] {
        let out = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(d.stop(), 0);
}
