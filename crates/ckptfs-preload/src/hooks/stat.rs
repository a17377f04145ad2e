//! The stat family: `stat`, `lstat`, `fstat`, `fstatat`, the `__xstat` forms and `statx`.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use super::*;

// ------------------------------------------------------------------ stat family

unsafe fn stat_at(dirfd: c_int, path: *const c_char, out: *mut libc::stat, flags: c_int) -> c_int {
    if !path.is_null() && flags & libc::AT_EMPTY_PATH != 0 {
        // SAFETY: path is a C string.
        if unsafe { *path } == 0 {
            if let Some(r) = on_fd(dirfd, |d| {
                let (st, nl) = ops::fstat(d)?;
                // SAFETY: out is a caller-provided struct stat.
                ops::fill_stat(&st, nl, unsafe { &mut *out });
                Ok(0)
            }) {
                return r;
            }
        }
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        on_path_f(
            dirfd,
            path,
            follow,
            |d, p| real!(fstatat64: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int; -1; d, p, out, flags),
            |_, p| {
                let (st, nl) = ops::stat(p)?;
                if follow && st.kind == ckptfs_store::FileKind::Symlink {
                    return Err(libc::ELOOP); // followed by on_path_f
                }
                ops::fill_stat(&st, nl, &mut *out);
                Ok(0)
            },
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: as stat(2).
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: as stat(2).
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: as lstat(2).
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}
#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: as lstat(2).
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}
#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat,
    fl: c_int,
) -> c_int {
    // SAFETY: as fstatat(2).
    unsafe { stat_at(dirfd, path, out, fl) }
}
#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat,
    fl: c_int,
) -> c_int {
    // SAFETY: as fstatat(2).
    unsafe { stat_at(dirfd, path, out, fl) }
}
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, out: *mut libc::stat) -> c_int {
    on_fd(fd, |d| {
        let (st, nl) = ops::fstat(d)?;
        // SAFETY: out is a caller-provided struct stat.
        ops::fill_stat(&st, nl, unsafe { &mut *out });
        Ok(0)
    })
    .unwrap_or_else(|| real!(fstat64: fn(c_int, *mut libc::stat) -> c_int; -1; fd, out))
}
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, out: *mut libc::stat) -> c_int {
    // SAFETY: as fstat.
    unsafe { fstat(fd, out) }
}
// The pre-2.33 glibc ABI: `ver` is _STAT_VER (1 on x86_64); struct stat is the same.
#[no_mangle]
pub unsafe extern "C" fn __xstat(_ver: c_int, path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: as stat.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn __xstat64(_ver: c_int, path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: as stat.
    unsafe { stat_at(libc::AT_FDCWD, path, out, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn __lxstat(_ver: c_int, path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: as lstat.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}
#[no_mangle]
pub unsafe extern "C" fn __lxstat64(_ver: c_int, path: *const c_char, out: *mut libc::stat) -> c_int {
    // SAFETY: as lstat.
    unsafe { stat_at(libc::AT_FDCWD, path, out, libc::AT_SYMLINK_NOFOLLOW) }
}
#[no_mangle]
pub unsafe extern "C" fn __fxstat(_ver: c_int, fd: c_int, out: *mut libc::stat) -> c_int {
    // SAFETY: as fstat.
    unsafe { fstat(fd, out) }
}
#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_ver: c_int, fd: c_int, out: *mut libc::stat) -> c_int {
    // SAFETY: as fstat.
    unsafe { fstat(fd, out) }
}
#[no_mangle]
pub unsafe extern "C" fn __fxstatat(
    _v: c_int,
    dirfd: c_int,
    p: *const c_char,
    out: *mut libc::stat,
    fl: c_int,
) -> c_int {
    // SAFETY: as fstatat.
    unsafe { stat_at(dirfd, p, out, fl) }
}
#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(
    _v: c_int,
    dirfd: c_int,
    p: *const c_char,
    out: *mut libc::stat,
    fl: c_int,
) -> c_int {
    // SAFETY: as fstatat.
    unsafe { stat_at(dirfd, p, out, fl) }
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    out: *mut libc::statx,
) -> c_int {
    if !path.is_null() && flags & libc::AT_EMPTY_PATH != 0 {
        // SAFETY: path is a C string.
        if unsafe { *path } == 0 {
            if let Some(r) = on_fd(dirfd, |d| {
                let (st, nl) = ops::fstat(d)?;
                // SAFETY: out is a caller-provided struct statx.
                ops::fill_statx(&st, nl, unsafe { &mut *out });
                Ok(0)
            }) {
                return r;
            }
        }
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        on_path_f(
            dirfd,
            path,
            follow,
            |d, p| real!(statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int; -1; d, p, flags, mask, out),
            |_, p| {
                let (st, nl) = ops::stat(p)?;
                if follow && st.kind == ckptfs_store::FileKind::Symlink {
                    return Err(libc::ELOOP); // followed by on_path_f
                }
                ops::fill_statx(&st, nl, &mut *out);
                Ok(0)
            },
        )
    }
}
