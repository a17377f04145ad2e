//! Hooks for C library calls that resolve or remove names with glibc-internal calls the
//! syscall-level hooks cannot see: `remove` (also behind libstdc++'s
//! `std::filesystem::remove(_all)` and libgfortran's `close(status='delete')`) and
//! `realpath`/`canonicalize_file_name`/`__realpath_chk` (behind `std::filesystem::
//! canonical`/`relative`, Python's `os.path.realpath`, `readlink -f`); `bind` of a unix
//! socket to a store path (EPERM: the store has no sockets, as on the store mount).
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use crate::hooks::on_path;
use crate::ops;
use crate::paths;
use crate::resolve::Loc;
use crate::state;
use crate::sys::{guarded, in_shim, real, set_errno};
use std::ffi::{c_char, c_int};

#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path(
            libc::AT_FDCWD,
            path,
            |_, p| real!(remove: fn(*const c_char) -> c_int; -1; p),
            |_, p| match ops::unlink(p) {
                // As glibc: unlink, and rmdir if that says it is a directory.
                Err(libc::EISDIR) => ops::rmdir(p).map(|_| 0),
                r => r.map(|_| 0),
            },
        )
    }
}

/// The canonical name of a store path: every component exists (no store object is a
/// symbolic link, so the lexical normalisation is the resolution).
fn store_realpath(m: usize, p: &str) -> Result<Vec<u8>, i32> {
    ops::stat(p)?;
    let full = paths::full_path(&state::mounts()[m], p);
    if full.len() >= libc::PATH_MAX as usize {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(full.into_bytes())
}

/// Copy `s` into `out` (a PATH_MAX buffer; `cap` bytes for `__realpath_chk`) or into a
/// malloc'd buffer when `out` is null.
unsafe fn give(s: &[u8], out: *mut c_char, cap: usize) -> *mut c_char {
    let dst = if out.is_null() {
        // SAFETY: plain allocation; the caller frees it, as with glibc.
        let p = unsafe { libc::malloc(s.len() + 1) } as *mut c_char;
        if p.is_null() {
            set_errno(libc::ENOMEM);
            return p;
        }
        p
    } else {
        if s.len() + 1 > cap {
            set_errno(libc::ENAMETOOLONG);
            return std::ptr::null_mut();
        }
        out
    };
    // SAFETY: dst has room for len + 1 bytes (checked or allocated above).
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr() as *const c_char, dst, s.len());
        *dst.add(s.len()) = 0;
    }
    dst
}

unsafe fn realpath_impl(
    path: *const c_char,
    out: *mut c_char,
    cap: usize,
    real: impl FnOnce(*const c_char) -> *mut c_char,
) -> *mut c_char {
    if in_shim() {
        return real(path);
    }
    // SAFETY: caller C string (or null, classified as Real and left to libc).
    match unsafe { crate::resolve::classify(libc::AT_FDCWD, path) } {
        Ok(Loc::Real) => real(path),
        Ok(Loc::RealAbs(c)) => real(c.as_ptr()),
        Ok(Loc::Store(m, p)) => match guarded(|| store_realpath(m, &p)) {
            // SAFETY: out is null or the caller's buffer of cap bytes.
            Ok(s) => unsafe { give(&s, out, cap) },
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        },
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char {
    // SAFETY: as realpath(3): out is null or PATH_MAX bytes.
    unsafe {
        realpath_impl(
            path,
            out,
            libc::PATH_MAX as usize,
            |p| real!(realpath: fn(*const c_char, *mut c_char) -> *mut c_char; std::ptr::null_mut(); p, out),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(path: *const c_char, out: *mut c_char, cap: usize) -> *mut c_char {
    // SAFETY: as realpath, with the buffer's size given.
    unsafe {
        realpath_impl(
            path,
            out,
            cap,
            |p| real!(__realpath_chk: fn(*const c_char, *mut c_char, usize) -> *mut c_char; std::ptr::null_mut(); p, out, cap),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: as realpath(path, NULL).
    unsafe {
        realpath_impl(
            path,
            std::ptr::null_mut(),
            0,
            |p| real!(canonicalize_file_name: fn(*const c_char) -> *mut c_char; std::ptr::null_mut(); p),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int {
    let fwd = || real!(bind: fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int; -1; fd, addr, len);
    let path_off = std::mem::offset_of!(libc::sockaddr_un, sun_path);
    if addr.is_null() || (len as usize) <= path_off || in_shim() {
        return fwd();
    }
    // SAFETY: the caller's address of `len` bytes, at least its family field.
    if unsafe { (*addr).sa_family } != libc::AF_UNIX as libc::sa_family_t {
        return fwd();
    }
    // SAFETY: a sockaddr_un of `len` bytes; sun_path starts at path_off.
    let raw =
        unsafe { std::slice::from_raw_parts((addr as *const u8).add(path_off), len as usize - path_off) };
    // Abstract names (leading NUL) are not paths.
    if raw.first().is_none_or(|&c| c == 0) {
        return fwd();
    }
    let name: Vec<u8> = raw.iter().copied().take_while(|&c| c != 0).chain([0]).collect();
    // SAFETY: `name` is NUL-terminated.
    match unsafe { crate::resolve::classify(libc::AT_FDCWD, name.as_ptr().cast()) } {
        Ok(Loc::Store(..)) => {
            set_errno(libc::EPERM);
            -1
        }
        _ => fwd(),
    }
}
