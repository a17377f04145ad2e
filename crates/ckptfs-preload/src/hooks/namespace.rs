//! Namespace calls: `access`, `unlink`, `rmdir`, `mkdir`, `rename`, links, symlinks, `mknod`, `mkfifo`.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use super::*;

// ------------------------------------------------------------------ namespace

unsafe fn access_at(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path_f(
            dirfd,
            path,
            true,
            |d, p| real!(faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int; -1; d, p, mode, flags),
            |_, p| ops::access(p, mode).map(|_| 0),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: as access(2).
    unsafe { access_at(libc::AT_FDCWD, path, mode, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    // SAFETY: as faccessat(2).
    unsafe { access_at(dirfd, path, mode, flags) }
}
#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: as access(2).
    unsafe { access_at(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}
#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: as access(2).
    unsafe { access_at(libc::AT_FDCWD, path, mode, libc::AT_EACCESS) }
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path(
            dirfd,
            path,
            |d, p| real!(unlinkat: fn(c_int, *const c_char, c_int) -> c_int; -1; d, p, flags),
            |_, p| {
                if flags & !libc::AT_REMOVEDIR != 0 {
                    return Err(libc::EINVAL);
                }
                if flags & libc::AT_REMOVEDIR != 0 {
                    // classify read this C string already (in the unsafe block above).
                    match crate::paths::last_component(CStr::from_ptr(path).to_bytes()) {
                        b"." => return Err(libc::EINVAL),
                        b".." => return Err(libc::ENOTEMPTY),
                        _ => {}
                    }
                    ops::rmdir(p).map(|_| 0)
                } else {
                    ops::unlink(p).map(|_| 0)
                }
            },
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: as unlink(2).
    unsafe { unlinkat(libc::AT_FDCWD, path, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: as rmdir(2).
    unsafe { unlinkat(libc::AT_FDCWD, path, libc::AT_REMOVEDIR) }
}
#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: Mode) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path(
            dirfd,
            path,
            |d, p| real!(mkdirat: fn(c_int, *const c_char, Mode) -> c_int; -1; d, p, mode),
            |_, p| ops::mkdir(p, mode).map(|_| 0),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: Mode) -> c_int {
    // SAFETY: as mkdir(2).
    unsafe { mkdirat(libc::AT_FDCWD, path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    d1: c_int,
    p1: *const c_char,
    d2: c_int,
    p2: *const c_char,
    flags: c_uint,
) -> c_int {
    let fwd = |a: c_int, b: *const c_char, c: c_int, d: *const c_char| real!(renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int; -1; a, b, c, d, flags);
    if in_shim() {
        return fwd(d1, p1, d2, p2);
    }
    if crate::paths::unreadable(p1) || crate::paths::unreadable(p2) {
        return ret(Err(libc::EFAULT));
    }
    // SAFETY: caller C strings.
    let (l1, l2) = match unsafe { (crate::resolve::classify(d1, p1), crate::resolve::classify(d2, p2)) } {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return ret(Err(e)),
    };
    match (l1, l2) {
        (Loc::Store(ma, a), Loc::Store(mb, b)) => {
            // SAFETY: classify read both C strings already.
            let dots = [p1, p2].iter().any(|&p| {
                matches!(
                    // SAFETY: classify read both C strings already.
                    crate::paths::last_component(unsafe { CStr::from_ptr(p) }.to_bytes()),
                    b"." | b".."
                )
            });
            if dots {
                return ret(Err(libc::EBUSY));
            }
            ret(guarded(|| match ops::rename(&a, &b, flags) {
                // Store symlinks in the directories of either path (links.rs).
                Err(libc::ENOTDIR) => crate::links::rename_followed(ma, &a, mb, &b, flags).map(|_| 0),
                r => r.map(|_| 0),
            }))
        }
        (Loc::Store(..), _) | (_, Loc::Store(..)) => ret(Err(libc::EXDEV)),
        (a, b) => {
            let (d1, p1) = match &a {
                Loc::RealAbs(c) => (libc::AT_FDCWD, c.as_ptr()),
                _ => (d1, p1),
            };
            let (d2, p2) = match &b {
                Loc::RealAbs(c) => (libc::AT_FDCWD, c.as_ptr()),
                _ => (d2, p2),
            };
            fwd(d1, p1, d2, p2)
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn renameat(d1: c_int, p1: *const c_char, d2: c_int, p2: *const c_char) -> c_int {
    // SAFETY: as renameat(2).
    unsafe { renameat2(d1, p1, d2, p2, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn rename(p1: *const c_char, p2: *const c_char) -> c_int {
    // SAFETY: as rename(2).
    unsafe { renameat2(libc::AT_FDCWD, p1, libc::AT_FDCWD, p2, 0) }
}

unsafe fn link_like(
    d1: c_int,
    p1: *const c_char,
    d2: c_int,
    p2: *const c_char,
    fwd: impl FnOnce() -> c_int,
) -> c_int {
    if in_shim() {
        return fwd();
    }
    if crate::paths::unreadable(p1) || crate::paths::unreadable(p2) {
        return ret(Err(libc::EFAULT));
    }
    // SAFETY: caller C strings.
    let (l1, l2) = match unsafe { (crate::resolve::classify(d1, p1), crate::resolve::classify(d2, p2)) } {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return ret(Err(e)),
    };
    match (l1, l2) {
        // The kernel's order: the source must exist, then the new name is checked.
        (Loc::Store(_, a), Loc::Store(_, b)) => ret(guarded(|| {
            ops::stat(&a)?;
            ops::unsupported_create(&b)
        })),
        (Loc::Store(..), _) | (_, Loc::Store(..)) => ret(Err(libc::EXDEV)),
        _ => fwd(),
    }
}
#[no_mangle]
pub unsafe extern "C" fn link(p1: *const c_char, p2: *const c_char) -> c_int {
    // SAFETY: links into the store are not supported (EPERM, like a FAT file system).
    unsafe {
        link_like(
            libc::AT_FDCWD,
            p1,
            libc::AT_FDCWD,
            p2,
            || real!(link: fn(*const c_char, *const c_char) -> c_int; -1; p1, p2),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn linkat(
    d1: c_int,
    p1: *const c_char,
    d2: c_int,
    p2: *const c_char,
    fl: c_int,
) -> c_int {
    // SAFETY: as link.
    unsafe {
        link_like(
            d1,
            p1,
            d2,
            p2,
            || real!(linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int; -1; d1, p1, d2, p2, fl),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, p: *const c_char) -> c_int {
    // SAFETY: forwarding the caller's arguments; target is checked readable before use.
    unsafe {
        on_path(
            libc::AT_FDCWD,
            p,
            |_, p| real!(symlink: fn(*const c_char, *const c_char) -> c_int; -1; target, p),
            |_, p| {
                if crate::paths::unreadable(target) {
                    return Err(libc::EFAULT);
                }
                crate::links::symlink(CStr::from_ptr(target).to_bytes(), p).map(|_| 0)
            },
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn symlinkat(target: *const c_char, dirfd: c_int, p: *const c_char) -> c_int {
    // SAFETY: as symlink.
    unsafe {
        on_path(
            dirfd,
            p,
            |d, p| real!(symlinkat: fn(*const c_char, c_int, *const c_char) -> c_int; -1; target, d, p),
            |_, p| {
                if crate::paths::unreadable(target) {
                    return Err(libc::EFAULT);
                }
                crate::links::symlink(CStr::from_ptr(target).to_bytes(), p).map(|_| 0)
            },
        )
    }
}
unsafe fn readlink_at(dirfd: c_int, p: *const c_char, b: *mut c_char, n: usize) -> isize {
    // SAFETY: forwarding the caller's arguments; b is the caller's buffer of n bytes
    // (checked readable-range plausible before it is written).
    unsafe {
        on_path(
            dirfd,
            p,
            |d, p| real!(readlinkat: fn(c_int, *const c_char, *mut c_char, usize) -> isize; -1; d, p, b, n),
            |_, p| {
                if b.is_null() || !crate::paths::plausible_user_ptr(b as usize) {
                    return Err(libc::EFAULT);
                }
                let n = n.min(isize::MAX as usize);
                crate::links::readlink(p, std::slice::from_raw_parts_mut(b.cast::<u8>(), n))
            },
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn readlink(p: *const c_char, b: *mut c_char, n: usize) -> isize {
    // SAFETY: as readlink(2).
    unsafe { readlink_at(libc::AT_FDCWD, p, b, n) }
}
#[no_mangle]
pub unsafe extern "C" fn readlinkat(dirfd: c_int, p: *const c_char, b: *mut c_char, n: usize) -> isize {
    // SAFETY: as readlinkat(2).
    unsafe { readlink_at(dirfd, p, b, n) }
}
#[no_mangle]
pub unsafe extern "C" fn mknod(p: *const c_char, mode: Mode, dev: libc::dev_t) -> c_int {
    // SAFETY: special files cannot live in the store (EPERM).
    unsafe {
        on_path(
            libc::AT_FDCWD,
            p,
            |_, p| real!(mknod: fn(*const c_char, Mode, libc::dev_t) -> c_int; -1; p, mode, dev),
            |_, p| ops::unsupported_create(p),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn mkfifo(p: *const c_char, mode: Mode) -> c_int {
    // SAFETY: as mknod.
    unsafe {
        on_path(
            libc::AT_FDCWD,
            p,
            |_, p| real!(mkfifo: fn(*const c_char, Mode) -> c_int; -1; p, mode),
            |_, p| ops::unsupported_create(p),
        )
    }
}
