//! Attribute calls: modes, owners, timestamps and extended attributes.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use super::*;

// ------------------------------------------------------------------ attributes

unsafe fn chmod_at(dirfd: c_int, p: *const c_char, mode: Mode, fl: c_int) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path_f(
            dirfd,
            p,
            fl & libc::AT_SYMLINK_NOFOLLOW == 0,
            |d, p| real!(fchmodat: fn(c_int, *const c_char, Mode, c_int) -> c_int; -1; d, p, mode, fl),
            |_, p| ops::chmod(p, mode).map(|_| 0),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn chmod(p: *const c_char, mode: Mode) -> c_int {
    // SAFETY: as chmod(2).
    unsafe { chmod_at(libc::AT_FDCWD, p, mode, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn fchmodat(dirfd: c_int, p: *const c_char, mode: Mode, fl: c_int) -> c_int {
    // SAFETY: as fchmodat(2).
    unsafe { chmod_at(dirfd, p, mode, fl) }
}
#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: Mode) -> c_int {
    on_fd(fd, |d| ops::chmod(&d.path, mode).map(|_| 0))
        .unwrap_or_else(|| real!(fchmod: fn(c_int, Mode) -> c_int; -1; fd, mode))
}
unsafe fn chown_at(dirfd: c_int, p: *const c_char, u: libc::uid_t, g: libc::gid_t, fl: c_int) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        let follow = fl & libc::AT_SYMLINK_NOFOLLOW == 0;
        on_path_f(
            dirfd,
            p,
            follow,
            |d, p| real!(fchownat: fn(c_int, *const c_char, libc::uid_t, libc::gid_t, c_int) -> c_int; -1; d, p, u, g, fl),
            |_, p| ops::chown(p, u, g, follow).map(|_| 0),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn chown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int {
    // SAFETY: as chown(2).
    unsafe { chown_at(libc::AT_FDCWD, p, u, g, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn lchown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int {
    // SAFETY: as lchown(2).
    unsafe { chown_at(libc::AT_FDCWD, p, u, g, libc::AT_SYMLINK_NOFOLLOW) }
}
#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    p: *const c_char,
    u: libc::uid_t,
    g: libc::gid_t,
    fl: c_int,
) -> c_int {
    // SAFETY: as fchownat(2).
    unsafe { chown_at(dirfd, p, u, g, fl) }
}
#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, u: libc::uid_t, g: libc::gid_t) -> c_int {
    on_fd(fd, |d| ops::chown(&d.path, u, g, true).map(|_| 0))
        .unwrap_or_else(|| real!(fchown: fn(c_int, libc::uid_t, libc::gid_t) -> c_int; -1; fd, u, g))
}
unsafe fn times_of(t: *const libc::timespec) -> Option<[libc::timespec; 2]> {
    // SAFETY: null or two timespecs per utimensat(2).
    (!t.is_null()).then(|| unsafe { [*t, *t.add(1)] })
}
#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    p: *const c_char,
    t: *const libc::timespec,
    fl: c_int,
) -> c_int {
    if p.is_null() {
        // Linux: utimensat(fd, NULL, ...) acts on fd itself (futimens).
        // SAFETY: as futimens.
        return unsafe { futimens(dirfd, t) };
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        let follow = fl & libc::AT_SYMLINK_NOFOLLOW == 0;
        on_path_f(
            dirfd,
            p,
            follow,
            |d, p| real!(utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int; -1; d, p, t, fl),
            |_, p| ops::utimens(p, times_of(t), follow).map(|_| 0),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, t: *const libc::timespec) -> c_int {
    // SAFETY: t is null or two timespecs.
    let times = unsafe { times_of(t) };
    on_fd(fd, |d| ops::utimens(&d.path, times, true).map(|_| 0))
        .unwrap_or_else(|| real!(futimens: fn(c_int, *const libc::timespec) -> c_int; -1; fd, t))
}
#[no_mangle]
pub unsafe extern "C" fn utimes(p: *const c_char, tv: *const libc::timeval) -> c_int {
    // SAFETY: forwarding the caller's arguments; tv is null or two timevals.
    unsafe {
        on_path_f(
            libc::AT_FDCWD,
            p,
            true,
            |_, p| real!(utimes: fn(*const c_char, *const libc::timeval) -> c_int; -1; p, tv),
            |_, p| {
                let t = (!tv.is_null()).then(|| {
                    let c = |v: libc::timeval| libc::timespec {
                        tv_sec: v.tv_sec,
                        tv_nsec: v.tv_usec * 1000,
                    };
                    [c(*tv), c(*tv.add(1))]
                });
                ops::utimens(p, t, true).map(|_| 0)
            },
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn utime(p: *const c_char, ut: *const libc::utimbuf) -> c_int {
    // SAFETY: forwarding the caller's arguments; ut is null or one utimbuf.
    unsafe {
        on_path_f(
            libc::AT_FDCWD,
            p,
            true,
            |_, p| real!(utime: fn(*const c_char, *const libc::utimbuf) -> c_int; -1; p, ut),
            |_, p| {
                let t = (!ut.is_null()).then(|| {
                    let s = |sec| libc::timespec {
                        tv_sec: sec,
                        tv_nsec: 0,
                    };
                    [s((*ut).actime), s((*ut).modtime)]
                });
                ops::utimens(p, t, true).map(|_| 0)
            },
        )
    }
}

macro_rules! xattr_path {
    ($name:ident ($($a:ident : $t:ty),*) -> $r:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: *const c_char, $($a: $t),*) -> $r {
            // SAFETY: extended attributes are not supported on store files (EOPNOTSUPP).
            unsafe {
                on_path(
                    libc::AT_FDCWD,
                    p,
                    |_, p| real!($name: fn(*const c_char, $($t),*) -> $r; -1; p, $($a),*),
                    |_, p| ops::stat(p).and(Err(libc::EOPNOTSUPP)),
                )
            }
        }
    };
}
macro_rules! xattr_fd {
    ($name:ident ($($a:ident : $t:ty),*) -> $r:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> $r {
            on_fd(fd, |_| Err::<$r, _>(libc::EOPNOTSUPP))
                .unwrap_or_else(|| real!($name: fn(c_int, $($t),*) -> $r; -1; fd, $($a),*))
        }
    };
}
xattr_path!(listxattr(l: *mut c_char, n: usize) -> isize);
xattr_path!(llistxattr(l: *mut c_char, n: usize) -> isize);
xattr_path!(getxattr(name: *const c_char, v: *mut c_void, n: usize) -> isize);
xattr_path!(lgetxattr(name: *const c_char, v: *mut c_void, n: usize) -> isize);
xattr_path!(setxattr(name: *const c_char, v: *const c_void, n: usize, f: c_int) -> c_int);
xattr_path!(lsetxattr(name: *const c_char, v: *const c_void, n: usize, f: c_int) -> c_int);
xattr_path!(removexattr(name: *const c_char) -> c_int);
xattr_path!(lremovexattr(name: *const c_char) -> c_int);
xattr_fd!(flistxattr(l: *mut c_char, n: usize) -> isize);
xattr_fd!(fgetxattr(name: *const c_char, v: *mut c_void, n: usize) -> isize);
xattr_fd!(fsetxattr(name: *const c_char, v: *const c_void, n: usize, f: c_int) -> c_int);
xattr_fd!(fremovexattr(name: *const c_char) -> c_int);
