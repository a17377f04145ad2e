//! The exported libc entry points. Each one decides in a few instructions whether its
//! descriptor or path belongs to the store; if not, it calls the next definition (libc)
//! with the arguments unchanged. Store calls run inside [`sys::guarded`].
//!
//! Variadic functions (open, openat, fcntl) are defined with their optional argument as
//! a fixed one: on x86_64 and aarch64 Linux a variadic caller passes it in the same
//! register a fixed parameter uses.
//!
//! One submodule per family of calls; this module holds the dispatch helpers they share
//! (see docs/preload.md for the module order).
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

mod attrs;
mod dirs;
mod fds;
mod mem;
mod namespace;
mod open;
mod rw;
mod stat;
mod streams;

pub use attrs::*;
pub use dirs::*;
pub use fds::*;
pub use mem::*;
pub use namespace::*;
pub use open::*;
pub use rw::*;
pub use stat::*;
pub use streams::*;

use crate::dir;
use crate::ops;
use crate::ops::close_store;
use crate::resolve::Loc;
use crate::state::{self, maybe_store_fd, Desc, R};
use crate::stdio;
use crate::sys::{self, guarded, in_shim, real, ret, set_errno};
use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr};
use std::sync::Arc;

type Mode = c_uint;
type Off = i64;

// ------------------------------------------------------------------ helpers

/// Run a store operation on `fd` if it is a store descriptor.
#[inline]
pub(crate) fn on_fd<T: From<i8>>(fd: c_int, f: impl FnOnce(&Arc<Desc>) -> R<T>) -> Option<T> {
    if !maybe_store_fd(fd) || in_shim() {
        return None;
    }
    match guarded(|| Ok(state::with_fd(fd, f))) {
        Ok(None) => None,
        Ok(Some(r)) => Some(ret(r)),
        Err(e) => Some(ret(Err(e))),
    }
}

/// Dispatch a path call: to the store, or to libc with the (possibly rewritten) path.
/// Symlinks inside the store are followed in every component but the last (see
/// [`on_path_f`]).
#[inline]
pub(crate) unsafe fn on_path<T: From<i8>>(
    dirfd: c_int,
    path: *const c_char,
    real: impl FnOnce(c_int, *const c_char) -> T,
    store: impl FnMut(usize, &str) -> R<T>,
) -> T {
    // SAFETY: forwarding the caller's arguments.
    unsafe { on_path_f(dirfd, path, false, real, store) }
}

/// [`on_path`], following a symlink in the last component too when `follow_last` (the
/// store call answers ELOOP for one: `open` of a symlink does; `stat` closures do when
/// they find one). A store call failing with ENOTDIR (or ELOOP) is retried once on the
/// path with its store symlinks followed (`links::follow`), or given to the kernel when
/// a link leads out of the store; paths without symlinks never pay for it.
#[inline]
pub(crate) unsafe fn on_path_f<T: From<i8>>(
    dirfd: c_int,
    path: *const c_char,
    follow_last: bool,
    real: impl FnOnce(c_int, *const c_char) -> T,
    mut store: impl FnMut(usize, &str) -> R<T>,
) -> T {
    // SAFETY: path is the caller's C string (or null, which classify passes through).
    // The re-entrancy test (a TLS access) comes after the cheap prefix test, so that
    // pass-through calls never pay for it.
    match unsafe { crate::resolve::classify(dirfd, path) } {
        Ok(Loc::Real) => real(dirfd, path),
        _ if in_shim() => real(dirfd, path),
        Ok(Loc::RealAbs(p)) => real(libc::AT_FDCWD, p.as_ptr()),
        Ok(Loc::Store(m, p)) => match guarded(|| store(m, &p)) {
            Err(e) if e == libc::ENOTDIR || (follow_last && e == libc::ELOOP) => {
                match guarded(|| crate::links::follow(m, &p, follow_last)) {
                    Ok(Some(crate::links::Followed::Store(m2, p2))) => ret(guarded(|| store(m2, &p2))),
                    Ok(Some(crate::links::Followed::Host(c))) => real(libc::AT_FDCWD, c.as_ptr()),
                    Ok(None) => ret(Err(e)),
                    Err(e2) => ret(Err(e2)),
                }
            }
            r => ret(r),
        },
        Err(e) => ret(Err(e)),
    }
}

/// A pass-through call returned a kernel descriptor: drop any stale store entry for it.
#[inline]
fn fresh_fd(fd: c_int) -> c_int {
    if fd >= 0 && maybe_store_fd(fd) {
        let _ = guarded(|| {
            crate::ops::forget_stale(fd);
            Ok(())
        });
    }
    fd
}

unsafe fn iov<'a>(iov: *const libc::iovec, cnt: c_int) -> R<Vec<&'a mut [u8]>> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if cnt == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the caller passes cnt iovecs.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    Ok(v.iter()
        .map(|e| {
            if e.iov_len == 0 {
                &mut [][..]
            } else {
                // SAFETY: each iovec describes caller memory.
                unsafe { std::slice::from_raw_parts_mut(e.iov_base as *mut u8, e.iov_len) }
            }
        })
        .collect())
}

unsafe fn buf<'a>(p: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 {
        &[]
    } else {
        // SAFETY: caller memory of n bytes.
        unsafe { std::slice::from_raw_parts(p as *const u8, n) }
    }
}

unsafe fn buf_mut<'a>(p: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 {
        &mut []
    } else {
        // SAFETY: caller memory of n bytes.
        unsafe { std::slice::from_raw_parts_mut(p as *mut u8, n) }
    }
}

// ------------------------------------------------------------------ exit

#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    crate::lifecycle::before_exit();
    // SAFETY: the raw exit_group syscall never returns.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!()
}
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    // SAFETY: as _exit.
    unsafe { _exit(status) }
}
