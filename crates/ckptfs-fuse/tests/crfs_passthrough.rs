//! CRFS mode passes its backend's semantics through: open(O_RDONLY | O_CREAT) creates,
//! times set before close survive the buffered chunks (cp -a, cp -p, tar -x), xattrs
//! reach the backend, and with a root daemon each user's calls run as that user (owner,
//! supplementary groups, setgid and sticky directories).

mod common;

use common::*;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[test]
fn zz_daemon_entry() {
    daemon_entry();
}

/// A temp dir other users can traverse, with `mnt` and `backend` in it.
fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (mp, be) = (tmp.path().join("mnt"), tmp.path().join("backend"));
    for d in [&mp, &be] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (tmp, mp, be)
}

fn open_raw(p: &Path, flags: i32, mode: u32) -> Result<i32, i32> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        // SAFETY: our own fresh descriptor.
        unsafe { libc::close(fd) };
        Ok(fd)
    }
}

#[test]
fn crfs_open_rdonly_creat_creates_the_file_and_names_are_bytes() {
    let (_tmp, mp, be) = dirs();
    let d = Daemon::crfs(&be, &mp, 1 << 20, 128 << 10, 2);
    // Was EIO with nothing created.
    open_raw(&mp.join("ro"), libc::O_RDONLY | libc::O_CREAT, 0o640).expect("O_RDONLY|O_CREAT");
    let m = std::fs::metadata(be.join("ro")).expect("created on the backend");
    assert!(m.is_file());
    assert_eq!(m.len(), 0);
    assert_eq!(
        open_raw(
            &mp.join("ro"),
            libc::O_RDONLY | libc::O_CREAT | libc::O_EXCL,
            0o640
        ),
        Err(libc::EEXIST)
    );
    // Names are bytes: a Latin-1 name (not UTF-8) goes through as on the backend.
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9");
    std::fs::write(mp.join(latin1), b"l1").unwrap();
    assert_eq!(std::fs::read(be.join(latin1)).unwrap(), b"l1");
    assert!(std::fs::read_dir(&mp)
        .unwrap()
        .any(|e| e.unwrap().file_name() == latin1));
    // flock(1) opens its lock file O_RDONLY|O_CREAT.
    let (rc, _, err) = sh(&mp, "flock -x lockfile -c 'echo locked > held'");
    assert_eq!(rc, 0, "flock(1) on the mount: {err}");
    assert_eq!(std::fs::read_to_string(be.join("held")).unwrap(), "locked\n");
    assert!(be.join("lockfile").is_file());
    assert_eq!(d.stop(), 0);
}

/// "relative-path mtime size mode" of every entry under `dir`, sorted.
fn times(dir: &Path) -> String {
    let (rc, out, err) = sh(dir, "find . -mindepth 1 -printf '%P %T@ %s %m\\n' | sort");
    assert_eq!(rc, 0, "{err}");
    out
}

#[test]
fn crfs_cp_a_and_tar_x_preserve_times() {
    let (tmp, mp, be) = dirs();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    // Sizes below, at and across the 128 KiB chunk so data is still buffered at utimens
    // (the pax format keeps nanoseconds).
    for (i, (name, len)) in [
        ("empty", 0),
        ("small", 100),
        ("chunk", 128 << 10),
        ("sub/big", 700 << 10),
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(src.join(name), pattern(i as u64, *len)).unwrap();
    }
    let (rc, _, err) = sh(
        &src,
        "touch -d '2001-02-03 04:05:06.123456789' empty small chunk sub/big && \
         touch -d '1999-12-31 23:59:58.5' sub && tar --format=posix -cf ../t.tar .",
    );
    assert_eq!(rc, 0, "{err}");
    let want = times(&src);
    let d = Daemon::crfs(&be, &mp, 1 << 20, 128 << 10, 2);
    let (s, t) = (src.display(), tmp.path().join("t.tar"));
    let cmds = [
        ("cp -a", format!("cp -a {s} cpa"), "cpa"),
        (
            "cp -p",
            format!("mkdir cpp && cp -p {s}/small {s}/chunk cpp/ && cp -rp {s}/sub cpp/"),
            "cpp",
        ),
        (
            "tar -x",
            format!("mkdir tx && tar -C tx -xf {}", t.display()),
            "tx",
        ),
    ];
    for (what, cmd, dir) in cmds {
        let (rc, _, err) = sh(&mp, &cmd);
        assert_eq!(rc, 0, "{what}: {err}");
        if what == "cp -p" {
            let got = times(&mp.join(dir));
            for l in want.lines().filter(|l| !l.starts_with("empty ")) {
                assert!(got.contains(l), "{what}: {l:?} missing in\n{got}");
            }
        } else {
            assert_eq!(times(&mp.join(dir)), want, "{what}: times through the mount");
            assert_eq!(times(&be.join(dir)), want, "{what}: times on the backend");
        }
    }
    // Reading right after the extraction: no "file changed as we read it".
    let (rc, _, err) = sh(&mp, "tar -cf /dev/null cpa cpp tx");
    assert_eq!(rc, 0, "tar -c of what was just extracted: {err}");
    assert!(!err.contains("changed"), "{err}");
    assert_eq!(d.stop(), 0);
    assert_eq!(times(&be.join("tx")), want, "times after unmount");
}

#[test]
fn crfs_xattrs_pass_through_to_the_backend() {
    let (_tmp, mp, be) = dirs();
    let d = Daemon::crfs(&be, &mp, 1 << 20, 128 << 10, 2);
    std::fs::write(mp.join("f"), b"x").unwrap();
    let script = format!(
        r#"
import errno, os
m, b = {m:?}, {b:?}
os.setxattr(m + "/f", "user.k", b"v1")
print("backend", os.getxattr(b + "/f", "user.k"))
os.setxattr(b + "/f", "user.j", b"from-backend")
print("mount", os.getxattr(m + "/f", "user.j"), sorted(os.listxattr(m + "/f")))
try:
    os.getxattr(m + "/f", "user.none")
except OSError as e:
    print("missing", errno.errorcode[e.errno])
try:
    os.setxattr(m + "/f", "user.k", b"v2", os.XATTR_CREATE)
except OSError as e:
    print("create", errno.errorcode[e.errno])
os.removexattr(m + "/f", "user.k")
print("after remove", sorted(os.listxattr(b + "/f")))
"#,
        m = mp.display().to_string(),
        b = be.display().to_string()
    );
    let (rc, out, err) = sh(&mp, &format!("python3 -c '{script}'"));
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        out,
        "backend b'v1'\nmount b'from-backend' ['user.j', 'user.k']\nmissing ENODATA\ncreate EEXIST\n\
         after remove ['user.j']\n"
    );
    assert_eq!(d.stop(), 0);
}

/// Create system user/group `name` when missing; its uid and gid.
fn ensure_user(name: &str) -> (u32, u32) {
    let (rc, _, _) = sh(Path::new("/"), &format!("id -u {name}"));
    if rc != 0 {
        let (rc, _, err) = sh(
            Path::new("/"),
            &format!("useradd -M -U -r -s /usr/sbin/nologin {name}"),
        );
        assert_eq!(rc, 0, "useradd {name}: {err}");
    }
    let id = |f: &str| {
        let (_, out, _) = sh(Path::new("/"), &format!("id {f} {name}"));
        out.trim().parse::<u32>().unwrap()
    };
    (id("-u"), id("-g"))
}

/// Run `cmd` in `dir` as `user` with its groups; (exit code, stderr).
fn as_user(user: &str, dir: &Path, cmd: &str) -> (i32, String) {
    let (rc, _, err) = sh(
        dir,
        &format!("setpriv --reuid={user} --regid={user} --init-groups bash -c {cmd:?}"),
    );
    (rc, err)
}

fn owner(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.uid(), m.gid())
}

#[test]
fn crfs_root_daemon_runs_each_users_calls_as_that_user() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root (a root daemon serving two unprivileged users)");
        return;
    }
    let (u1, g1) = ensure_user("ckptfs-t1");
    let (u2, _) = ensure_user("ckptfs-t2");
    let (rc, _, _) = sh(Path::new("/"), "getent group ckptfs-tg || groupadd -r ckptfs-tg");
    assert_eq!(rc, 0);
    let (rc, _, err) = sh(Path::new("/"), "usermod -aG ckptfs-tg ckptfs-t1");
    assert_eq!(rc, 0, "{err}");
    let (_, tg, _) = sh(Path::new("/"), "getent group ckptfs-tg | cut -d: -f3");
    let tg: u32 = tg.trim().parse().unwrap();

    let (_tmp, mp, be) = dirs();
    let d = Daemon::crfs(&be, &mp, 1 << 20, 128 << 10, 2);
    let (rc, _, err) = sh(
        &mp,
        "mkdir -m 1777 sticky && mkdir grp && chgrp ckptfs-tg grp && chmod 0770 grp && \
         mkdir sgid && chgrp ckptfs-tg sgid && chmod 2777 sgid",
    );
    assert_eq!(rc, 0, "{err}");

    // New files and directories belong to the caller (were the daemon's).
    let (rc, err) = as_user(
        "ckptfs-t1",
        &mp,
        "echo a > sticky/f1 && mkdir sticky/d1 && mkfifo sticky/p1",
    );
    assert_eq!(rc, 0, "{err}");
    for n in ["f1", "d1", "p1"] {
        assert_eq!(owner(&be.join("sticky").join(n)), (u1, g1), "{n}");
    }
    // Sticky directory: the owner overwrites, appends, removes; another user may not.
    let (rc, err) = as_user(
        "ckptfs-t1",
        &mp,
        "echo b > sticky/f1 && echo c >> sticky/f1 && cat sticky/f1 > /dev/null && rm sticky/f1 && \
         echo keep > sticky/f2 && chmod 666 sticky/f2",
    );
    assert_eq!(rc, 0, "owner in a sticky dir: {err}");
    let (rc, err) = as_user("ckptfs-t2", &mp, "rm -f sticky/f2");
    assert_ne!(rc, 0, "another user removed a file in a sticky directory");
    assert!(err.contains("not permitted"), "{err}");
    let (rc, err) = as_user("ckptfs-t2", &mp, "echo more >> sticky/f2");
    assert_eq!(rc, 0, "a 0666 file is writable by others: {err}");
    assert_eq!(
        std::fs::read_to_string(be.join("sticky/f2")).unwrap(),
        "keep\nmore\n"
    );
    // Supplementary group: t1 (member of ckptfs-tg) may create in a 0770 group dir.
    let (rc, err) = as_user("ckptfs-t1", &mp, "touch grp/g1");
    assert_eq!(rc, 0, "supplementary group: {err}");
    let (rc, err) = as_user("ckptfs-t2", &mp, "touch grp/g2");
    assert_ne!(rc, 0, "a non-member created a file in a 0770 directory");
    assert!(err.contains("denied"), "{err}");
    // setgid directory: new entries get its group.
    let (rc, err) = as_user("ckptfs-t1", &mp, "touch sgid/s1");
    assert_eq!(rc, 0, "{err}");
    assert_eq!(owner(&be.join("sgid/s1")), (u1, tg));
    // chown to someone else is refused for a user, allowed for root.
    let (rc, _) = as_user("ckptfs-t1", &mp, &format!("chown {u2} sgid/s1"));
    assert_ne!(rc, 0, "a user gave a file away");
    let (rc, _, err) = sh(&mp, &format!("chown {u2} sgid/s1"));
    assert_eq!(rc, 0, "root chown: {err}");
    assert_eq!(owner(&be.join("sgid/s1")).0, u2);
    // A user's write clears set-user-ID and set-group-ID (the chunks are written by the
    // root daemon, which would keep them): direct I/O (O_WRONLY) and page-cache (O_RDWR).
    let (rc, _, err) = sh(
        &mp,
        "echo a > sticky/suid1 && echo a > sticky/suid2 && chmod 6777 sticky/suid1 sticky/suid2",
    );
    assert_eq!(rc, 0, "{err}");
    let (rc, err) = as_user(
        "ckptfs-t2",
        &mp,
        "echo b >> sticky/suid1 && python3 -c 'f = open(\"sticky/suid2\", \"r+\"); f.write(\"b\"); f.close()'",
    );
    assert_eq!(rc, 0, "{err}");
    for n in ["suid1", "suid2"] {
        let mode = std::fs::metadata(be.join("sticky").join(n)).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o777, "{n}: set-id bits after another user's write");
    }
    assert_eq!(d.stop(), 0);
}
