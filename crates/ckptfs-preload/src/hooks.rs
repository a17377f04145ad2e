//! The exported libc entry points. Each one decides in a few instructions whether its
//! descriptor or path belongs to the store; if not, it calls the next definition (libc)
//! with the arguments unchanged. Store calls run inside [`sys::guarded`].
//!
//! Variadic functions (open, openat, fcntl) are defined with their optional argument as
//! a fixed one: on x86_64 and aarch64 Linux a variadic caller passes it in the same
//! register a fixed parameter uses.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

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
#[inline]
pub(crate) unsafe fn on_path<T: From<i8>>(
    dirfd: c_int,
    path: *const c_char,
    real: impl FnOnce(c_int, *const c_char) -> T,
    store: impl FnOnce(usize, &str) -> R<T>,
) -> T {
    // SAFETY: path is the caller's C string (or null, which classify passes through).
    // The re-entrancy test (a TLS access) comes after the cheap prefix test, so that
    // pass-through calls never pay for it.
    match unsafe { crate::resolve::classify(dirfd, path) } {
        Ok(Loc::Real) => real(dirfd, path),
        _ if in_shim() => real(dirfd, path),
        Ok(Loc::RealAbs(p)) => real(libc::AT_FDCWD, p.as_ptr()),
        Ok(Loc::Store(m, p)) => ret(guarded(|| store(m, &p))),
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

// ------------------------------------------------------------------ open family

unsafe fn open_at(dirfd: c_int, path: *const c_char, flags: c_int, mode: Mode) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path(
            dirfd,
            path,
            |d, p| {
                let fd = fresh_fd(
                    real!(openat: fn(c_int, *const c_char, c_int, Mode) -> c_int; -1; d, p, flags, mode),
                );
                if flags & (libc::O_DIRECTORY | libc::O_PATH) != 0 {
                    // SAFETY (covered by the enclosing block): p is the C string just opened.
                    crate::dirfds::note_open_c(state::mounts(), d, p, fd);
                } else {
                    crate::dirfds::forget(fd);
                }
                fd
            },
            |m, p| ops::open(m, p, flags, mode),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: Mode) -> c_int {
    // SAFETY: same contract as open(2).
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: Mode) -> c_int {
    // SAFETY: same contract as open(2).
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}
#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: Mode) -> c_int {
    // SAFETY: same contract as openat(2).
    unsafe { open_at(dirfd, path, flags, mode) }
}
#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: Mode) -> c_int {
    // SAFETY: same contract as openat(2).
    unsafe { open_at(dirfd, path, flags, mode) }
}
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: Mode) -> c_int {
    // SAFETY: same contract as creat(2).
    unsafe {
        open_at(
            libc::AT_FDCWD,
            path,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            mode,
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: Mode) -> c_int {
    // SAFETY: same contract as creat(2).
    unsafe {
        open_at(
            libc::AT_FDCWD,
            path,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            mode,
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: fortified open without a mode (no O_CREAT).
    unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as above.
    unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as above.
    unsafe { open_at(dirfd, path, flags, 0) }
}
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as above.
    unsafe { open_at(dirfd, path, flags, 0) }
}

// ------------------------------------------------------------------ read / write

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, b: *mut c_void, n: usize) -> isize {
    // SAFETY: b has n writable bytes per read(2).
    on_fd(fd, |d| ops::read(d, unsafe { buf_mut(b, n) }).map(|n| n as isize))
        .unwrap_or_else(|| real!(read: fn(c_int, *mut c_void, usize) -> isize; -1; fd, b, n))
}
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, b: *mut c_void, n: usize, buflen: usize) -> isize {
    if n > buflen {
        // SAFETY: abort as the fortified libc function does.
        unsafe { libc::abort() };
    }
    // SAFETY: as read.
    unsafe { read(fd, b, n) }
}
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, b: *const c_void, n: usize) -> isize {
    // SAFETY: b has n readable bytes per write(2).
    on_fd(fd, |d| {
        // SAFETY: b has n readable bytes per write(2).
        ops::writev(d, &[unsafe { buf(b, n) }]).map(|n| n as isize)
    })
    .unwrap_or_else(|| real!(write: fn(c_int, *const c_void, usize) -> isize; -1; fd, b, n))
}
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, b: *mut c_void, n: usize, off: Off) -> isize {
    // SAFETY: as read.
    on_fd(fd, |d| {
        // SAFETY: as read.
        ops::preadv(d, &mut [unsafe { buf_mut(b, n) }], off).map(|n| n as isize)
    })
    .unwrap_or_else(|| real!(pread64: fn(c_int, *mut c_void, usize, Off) -> isize; -1; fd, b, n, off))
}
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, b: *mut c_void, n: usize, off: Off) -> isize {
    // SAFETY: as read.
    unsafe { pread(fd, b, n, off) }
}
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(fd: c_int, b: *mut c_void, n: usize, off: Off, buflen: usize) -> isize {
    if n > buflen {
        // SAFETY: abort as the fortified libc function does.
        unsafe { libc::abort() };
    }
    // SAFETY: as read.
    unsafe { pread(fd, b, n, off) }
}
#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    b: *mut c_void,
    n: usize,
    off: Off,
    buflen: usize,
) -> isize {
    // SAFETY: as above.
    unsafe { __pread_chk(fd, b, n, off, buflen) }
}
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, b: *const c_void, n: usize, off: Off) -> isize {
    // SAFETY: as write.
    on_fd(fd, |d| {
        // SAFETY: as write.
        ops::pwritev(d, &[unsafe { buf(b, n) }], off).map(|n| n as isize)
    })
    .unwrap_or_else(|| real!(pwrite64: fn(c_int, *const c_void, usize, Off) -> isize; -1; fd, b, n, off))
}
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, b: *const c_void, n: usize, off: Off) -> isize {
    // SAFETY: as write.
    unsafe { pwrite(fd, b, n, off) }
}
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, v: *const libc::iovec, cnt: c_int) -> isize {
    on_fd(fd, |d| {
        // SAFETY: cnt iovecs per readv(2).
        let mut bufs = unsafe { iov(v, cnt) }?;
        ops::readv(d, &mut bufs).map(|n| n as isize)
    })
    .unwrap_or_else(|| real!(readv: fn(c_int, *const libc::iovec, c_int) -> isize; -1; fd, v, cnt))
}
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, v: *const libc::iovec, cnt: c_int) -> isize {
    on_fd(fd, |d| {
        // SAFETY: cnt iovecs per writev(2).
        let bufs = unsafe { iov(v, cnt) }?;
        let b: Vec<&[u8]> = bufs.iter().map(|b| &**b).collect();
        ops::writev(d, &b).map(|n| n as isize)
    })
    .unwrap_or_else(|| real!(writev: fn(c_int, *const libc::iovec, c_int) -> isize; -1; fd, v, cnt))
}
fn preadv_store(d: &Desc, v: *const libc::iovec, cnt: c_int, off: Off) -> R<isize> {
    // SAFETY: cnt iovecs per preadv(2).
    let mut bufs = unsafe { iov(v, cnt) }?;
    if off == -1 {
        return ops::readv(d, &mut bufs).map(|n| n as isize);
    }
    ops::preadv(d, &mut bufs, off).map(|n| n as isize)
}
fn pwritev_store(d: &Desc, v: *const libc::iovec, cnt: c_int, off: Off) -> R<isize> {
    // SAFETY: cnt iovecs per pwritev(2).
    let bufs = unsafe { iov(v, cnt) }?;
    let b: Vec<&[u8]> = bufs.iter().map(|b| &**b).collect();
    if off == -1 {
        return ops::writev(d, &b).map(|n| n as isize);
    }
    ops::pwritev(d, &b, off).map(|n| n as isize)
}
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, v: *const libc::iovec, cnt: c_int, off: Off) -> isize {
    on_fd(fd, |d| {
        if off < 0 {
            Err(libc::EINVAL)
        } else {
            preadv_store(d, v, cnt, off)
        }
    })
    .unwrap_or_else(
        || real!(preadv64: fn(c_int, *const libc::iovec, c_int, Off) -> isize; -1; fd, v, cnt, off),
    )
}
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, v: *const libc::iovec, cnt: c_int, off: Off) -> isize {
    // SAFETY: as preadv.
    unsafe { preadv(fd, v, cnt, off) }
}
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, v: *const libc::iovec, cnt: c_int, off: Off) -> isize {
    on_fd(fd, |d| {
        if off < 0 {
            Err(libc::EINVAL)
        } else {
            pwritev_store(d, v, cnt, off)
        }
    })
    .unwrap_or_else(
        || real!(pwritev64: fn(c_int, *const libc::iovec, c_int, Off) -> isize; -1; fd, v, cnt, off),
    )
}
#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, v: *const libc::iovec, cnt: c_int, off: Off) -> isize {
    // SAFETY: as pwritev.
    unsafe { pwritev(fd, v, cnt, off) }
}
#[no_mangle]
pub unsafe extern "C" fn preadv2(fd: c_int, v: *const libc::iovec, cnt: c_int, off: Off, fl: c_int) -> isize {
    on_fd(fd, |d| preadv_store(d, v, cnt, off)).unwrap_or_else(
        || real!(preadv64v2: fn(c_int, *const libc::iovec, c_int, Off, c_int) -> isize; -1; fd, v, cnt, off, fl),
    )
}
#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    v: *const libc::iovec,
    cnt: c_int,
    off: Off,
    fl: c_int,
) -> isize {
    // SAFETY: as preadv2.
    unsafe { preadv2(fd, v, cnt, off, fl) }
}
#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    v: *const libc::iovec,
    cnt: c_int,
    off: Off,
    fl: c_int,
) -> isize {
    on_fd(fd, |d| pwritev_store(d, v, cnt, off)).unwrap_or_else(
        || real!(pwritev64v2: fn(c_int, *const libc::iovec, c_int, Off, c_int) -> isize; -1; fd, v, cnt, off, fl),
    )
}
#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    v: *const libc::iovec,
    cnt: c_int,
    off: Off,
    fl: c_int,
) -> isize {
    // SAFETY: as pwritev2.
    unsafe { pwritev2(fd, v, cnt, off, fl) }
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: Off, whence: c_int) -> Off {
    on_fd(fd, |d| ops::lseek(d, off, whence))
        .unwrap_or_else(|| real!(lseek64: fn(c_int, Off, c_int) -> Off; -1; fd, off, whence))
}
#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: Off, whence: c_int) -> Off {
    // SAFETY: as lseek.
    unsafe { lseek(fd, off, whence) }
}

// ------------------------------------------------------------------ descriptors

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fd >= 0 && (fd == state::slots_fd() || crate::locks::is_shim_fd(fd)) {
        // The shim's own descriptor (a program closing every descriptor it did not open).
        return 0;
    }
    if maybe_store_fd(fd) && !in_shim() {
        if let Ok(Some(r)) = guarded(|| Ok(close_store(fd))) {
            return ret(r);
        }
    }
    crate::dirfds::forget(fd);
    real!(close: fn(c_int) -> c_int; -1; fd)
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if in_shim() || flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 || first > last {
        return real!(close_range: fn(c_uint, c_uint, c_int) -> c_int; -1; first, last, flags);
    }
    // The description region's memfd and the lock stand-ins are the shim's, not the
    // program's: keep them open, closing the ranges between them.
    let mut keep = crate::locks::shim_fds_in(first, last);
    let sfd = state::slots_fd();
    if sfd >= 0 && (first..=last).contains(&(sfd as c_uint)) {
        keep.push(sfd);
    }
    keep.sort_unstable();
    let mut r = 0;
    let mut lo = first;
    for k in keep
        .iter()
        .map(|k| *k as c_uint)
        .chain(std::iter::once(last.saturating_add(1)))
    {
        if k > lo && r == 0 {
            let hi = (k - 1).min(last);
            r = real!(close_range: fn(c_uint, c_uint, c_int) -> c_int; -1; lo, hi, flags);
        }
        if k >= last {
            break;
        }
        lo = k + 1;
    }
    if r == 0 {
        let e = sys::errno();
        crate::dirfds::forget_range(first, last);
        let _ = guarded(|| {
            for (_, d) in state::remove_range(first, last) {
                let _ = crate::ops::release(d);
            }
            Ok(())
        });
        set_errno(e);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    // As close_range (which keeps the shim's own descriptors open); glibc's closefrom
    // would call its internal close_range.
    // SAFETY: close_range has no memory arguments.
    if in_shim() || low < 0 || unsafe { close_range(low as c_uint, c_uint::MAX, 0) } != 0 {
        real!(closefrom: fn(c_int) -> (); (); low)
    }
}

/// Point `newfd` at the description of store descriptor `oldfd` (after the kernel dup).
fn install_dup(oldfd: c_int, newfd: c_int) -> R<c_int> {
    let d = state::desc_of(oldfd).ok_or(libc::EBADF)?;
    state::install(newfd, d);
    Ok(newfd)
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let n = real!(dup: fn(c_int) -> c_int; -1; fd);
    if n < 0 || in_shim() {
        return n;
    }
    if maybe_store_fd(fd) {
        return ret(guarded(|| {
            if state::desc_of(fd).is_some() {
                install_dup(fd, n)
            } else {
                crate::ops::forget_stale(n);
                Ok(n)
            }
        }));
    }
    fresh_fd(n)
}

unsafe fn dup_to(old: c_int, new: c_int, flags: c_int, three: bool) -> c_int {
    state::protect_fd(new);
    let r = if three {
        real!(dup3: fn(c_int, c_int, c_int) -> c_int; -1; old, new, flags)
    } else {
        real!(dup2: fn(c_int, c_int) -> c_int; -1; old, new)
    };
    if r < 0 || in_shim() || old == new || !(maybe_store_fd(old) || maybe_store_fd(new)) {
        return r;
    }
    ret(guarded(|| {
        if let Some(d) = state::remove(new) {
            let _ = crate::ops::release(d);
        }
        if state::desc_of(old).is_some() {
            let r = install_dup(old, new);
            crate::stdio::install_std(new);
            r
        } else {
            Ok(new)
        }
    }))
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: descriptor numbers only.
    unsafe { dup_to(old, new, 0, false) }
}
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: descriptor numbers only.
    unsafe { dup_to(old, new, flags, true) }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    if maybe_store_fd(fd) && !in_shim() && state::desc_of(fd).is_some() {
        match cmd {
            libc::F_GETFD | libc::F_SETFD => {}
            libc::F_GETLK
            | libc::F_SETLK
            | libc::F_SETLKW
            | libc::F_OFD_GETLK
            | libc::F_OFD_SETLK
            | libc::F_OFD_SETLKW => {
                // Not under the table lock: F_SETLKW may block for long.
                if let Some(d) = state::desc_of(fd) {
                    // SAFETY: for lock commands arg points to the caller's struct flock.
                    let Some(fl) = (unsafe { (arg as *mut libc::flock).as_mut() }) else {
                        return ret(Err(libc::EFAULT));
                    };
                    return ret(crate::locks::fcntl_lock(&d, cmd, fl));
                }
            }
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
                let n = real!(fcntl: fn(c_int, c_int, libc::c_ulong) -> c_int; -1; fd, cmd, arg);
                if n < 0 {
                    return n;
                }
                return ret(guarded(|| install_dup(fd, n)));
            }
            _ => {
                if let Some(r) = on_fd(fd, |d| ops::fcntl(d, cmd, arg)) {
                    return r;
                }
            }
        }
    }
    let r = real!(fcntl: fn(c_int, c_int, libc::c_ulong) -> c_int; -1; fd, cmd, arg);
    if (cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC) && r >= 0 {
        return fresh_fd(r);
    }
    r
}
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    // SAFETY: as fcntl.
    unsafe { fcntl(fd, cmd, arg) }
}

#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    if maybe_store_fd(fd) && !in_shim() {
        // Not under the table lock: LOCK_EX may block for long.
        if let Some(d) = state::desc_of(fd) {
            return ret(crate::locks::flock(&d, op));
        }
    }
    real!(flock: fn(c_int, c_int) -> c_int; -1; fd, op)
}
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: Off) -> c_int {
    if maybe_store_fd(fd) && !in_shim() {
        if let Some(d) = state::desc_of(fd) {
            return ret(crate::locks::lockf(&d, cmd, len));
        }
    }
    real!(lockf: fn(c_int, c_int, Off) -> c_int; -1; fd, cmd, len)
}
#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, cmd: c_int, len: Off) -> c_int {
    if maybe_store_fd(fd) && !in_shim() {
        if let Some(d) = state::desc_of(fd) {
            return ret(crate::locks::lockf(&d, cmd, len));
        }
    }
    real!(lockf64: fn(c_int, c_int, Off) -> c_int; -1; fd, cmd, len)
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    on_fd(fd, |d| ops::fsync(d).map(|_| 0)).unwrap_or_else(|| real!(fsync: fn(c_int) -> c_int; -1; fd))
}
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    on_fd(fd, |d| ops::fsync(d).map(|_| 0)).unwrap_or_else(|| real!(fdatasync: fn(c_int) -> c_int; -1; fd))
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: Off) -> c_int {
    on_fd(fd, |d| ops::ftruncate(d, len).map(|_| 0))
        .unwrap_or_else(|| real!(ftruncate64: fn(c_int, Off) -> c_int; -1; fd, len))
}
#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: Off) -> c_int {
    // SAFETY: as ftruncate.
    unsafe { ftruncate(fd, len) }
}
#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: Off) -> c_int {
    // SAFETY: path per truncate(2).
    unsafe {
        on_path(
            libc::AT_FDCWD,
            path,
            |_, p| real!(truncate64: fn(*const c_char, Off) -> c_int; -1; p, len),
            |_, p| ops::truncate(p, len).map(|_| 0),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: Off) -> c_int {
    // SAFETY: as truncate.
    unsafe { truncate(path, len) }
}
#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: Off, len: Off) -> c_int {
    on_fd(fd, |d| ops::fallocate(d, mode, off, len).map(|_| 0))
        .unwrap_or_else(|| real!(fallocate64: fn(c_int, c_int, Off, Off) -> c_int; -1; fd, mode, off, len))
}
#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: Off, len: Off) -> c_int {
    // SAFETY: as fallocate.
    unsafe { fallocate(fd, mode, off, len) }
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: Off, len: Off) -> c_int {
    if maybe_store_fd(fd) && !in_shim() {
        if let Ok(Some(r)) = guarded(|| Ok(state::with_fd(fd, |d| ops::fallocate(d, 0, off, len)))) {
            return r.err().unwrap_or(0);
        }
    }
    real!(posix_fallocate64: fn(c_int, Off, Off) -> c_int; libc::ENOSYS; fd, off, len)
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: Off, len: Off) -> c_int {
    // SAFETY: as posix_fallocate.
    unsafe { posix_fallocate(fd, off, len) }
}
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, off: Off, len: Off, adv: c_int) -> c_int {
    if maybe_store_fd(fd) && !in_shim() && state::desc_of(fd).is_some() {
        // Advice is a hint; the store has no page cache to steer.
        return if (0..=5).contains(&adv) { 0 } else { libc::EINVAL };
    }
    real!(posix_fadvise64: fn(c_int, Off, Off, c_int) -> c_int; libc::ENOSYS; fd, off, len, adv)
}
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(fd: c_int, off: Off, len: Off, adv: c_int) -> c_int {
    // SAFETY: as posix_fadvise.
    unsafe { posix_fadvise(fd, off, len, adv) }
}

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
        on_path(
            dirfd,
            path,
            |d, p| real!(fstatat64: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int; -1; d, p, out, flags),
            |_, p| {
                let (st, nl) = ops::stat(p)?;
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
        on_path(
            dirfd,
            path,
            |d, p| real!(statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int; -1; d, p, flags, mask, out),
            |_, p| {
                let (st, nl) = ops::stat(p)?;
                ops::fill_statx(&st, nl, &mut *out);
                Ok(0)
            },
        )
    }
}

// ------------------------------------------------------------------ namespace

unsafe fn access_at(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path(
            dirfd,
            path,
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
        (Loc::Store(_, a), Loc::Store(_, b)) => {
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
            ret(guarded(|| ops::rename(&a, &b, flags).map(|_| 0)))
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
    // SAFETY: symbolic links in the store are not supported (EPERM).
    unsafe {
        on_path(
            libc::AT_FDCWD,
            p,
            |_, p| real!(symlink: fn(*const c_char, *const c_char) -> c_int; -1; target, p),
            |_, p| {
                if crate::paths::unreadable(target) {
                    return Err(libc::EFAULT);
                }
                if CStr::from_ptr(target).to_bytes().len() >= crate::paths::PATH_MAX {
                    return Err(libc::ENAMETOOLONG);
                }
                ops::unsupported_create(p)
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
                if CStr::from_ptr(target).to_bytes().len() >= crate::paths::PATH_MAX {
                    return Err(libc::ENAMETOOLONG);
                }
                ops::unsupported_create(p)
            },
        )
    }
}
unsafe fn readlink_at(dirfd: c_int, p: *const c_char, b: *mut c_char, n: usize) -> isize {
    // SAFETY: store objects are never symbolic links: EINVAL if it exists.
    unsafe {
        on_path(
            dirfd,
            p,
            |d, p| real!(readlinkat: fn(c_int, *const c_char, *mut c_char, usize) -> isize; -1; d, p, b, n),
            |_, p| ops::stat(p).and(Err(libc::EINVAL)),
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

// ------------------------------------------------------------------ attributes

unsafe fn chmod_at(dirfd: c_int, p: *const c_char, mode: Mode, fl: c_int) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path(
            dirfd,
            p,
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
        on_path(
            dirfd,
            p,
            |d, p| real!(fchownat: fn(c_int, *const c_char, libc::uid_t, libc::gid_t, c_int) -> c_int; -1; d, p, u, g, fl),
            |_, p| ops::chown(p, u, g).map(|_| 0),
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
    on_fd(fd, |d| ops::chown(&d.path, u, g).map(|_| 0))
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
        on_path(
            dirfd,
            p,
            |d, p| real!(utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int; -1; d, p, t, fl),
            |_, p| ops::utimens(p, times_of(t)).map(|_| 0),
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, t: *const libc::timespec) -> c_int {
    // SAFETY: t is null or two timespecs.
    on_fd(fd, |d| ops::utimens(&d.path, unsafe { times_of(t) }).map(|_| 0))
        .unwrap_or_else(|| real!(futimens: fn(c_int, *const libc::timespec) -> c_int; -1; fd, t))
}
#[no_mangle]
pub unsafe extern "C" fn utimes(p: *const c_char, tv: *const libc::timeval) -> c_int {
    // SAFETY: forwarding the caller's arguments; tv is null or two timevals.
    unsafe {
        on_path(
            libc::AT_FDCWD,
            p,
            |_, p| real!(utimes: fn(*const c_char, *const libc::timeval) -> c_int; -1; p, tv),
            |_, p| {
                let t = (!tv.is_null()).then(|| {
                    let c = |v: libc::timeval| libc::timespec {
                        tv_sec: v.tv_sec,
                        tv_nsec: v.tv_usec * 1000,
                    };
                    [c(*tv), c(*tv.add(1))]
                });
                ops::utimens(p, t).map(|_| 0)
            },
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn utime(p: *const c_char, ut: *const libc::utimbuf) -> c_int {
    // SAFETY: forwarding the caller's arguments; ut is null or one utimbuf.
    unsafe {
        on_path(
            libc::AT_FDCWD,
            p,
            |_, p| real!(utime: fn(*const c_char, *const libc::utimbuf) -> c_int; -1; p, ut),
            |_, p| {
                let t = (!ut.is_null()).then(|| {
                    let s = |sec| libc::timespec {
                        tv_sec: sec,
                        tv_nsec: 0,
                    };
                    [s((*ut).actime), s((*ut).modtime)]
                });
                ops::utimens(p, t).map(|_| 0)
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

// ------------------------------------------------------------------ working directory

#[no_mangle]
pub unsafe extern "C" fn chdir(p: *const c_char) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path(
            libc::AT_FDCWD,
            p,
            |_, p| {
                let r = real!(chdir: fn(*const c_char) -> c_int; -1; p);
                if r == 0 {
                    crate::cwd::set_vcwd(None);
                }
                r
            },
            |m, p| {
                let (st, _) = ops::stat(p)?;
                if st.kind != ckptfs_store::FileKind::Dir {
                    return Err(libc::ENOTDIR);
                }
                crate::cwd::set_vcwd(Some(crate::paths::full_path(&state::mounts()[m], p)));
                Ok(0)
            },
        )
    }
}
#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    on_fd(fd, |d| {
        if !d.is_dir {
            return Err(libc::ENOTDIR);
        }
        crate::cwd::set_vcwd(Some(d.full_path()));
        Ok(0)
    })
    .unwrap_or_else(|| {
        let r = real!(fchdir: fn(c_int) -> c_int; -1; fd);
        if r == 0 {
            crate::cwd::set_vcwd(None);
        }
        r
    })
}
#[no_mangle]
pub unsafe extern "C" fn getcwd(b: *mut c_char, size: usize) -> *mut c_char {
    if !in_shim() {
        if let Some(v) = crate::cwd::vcwd() {
            let bytes = v.as_bytes();
            if b.is_null() {
                let n = if size == 0 { bytes.len() + 1 } else { size };
                if n < bytes.len() + 1 {
                    set_errno(libc::ERANGE);
                    return std::ptr::null_mut();
                }
                // SAFETY: malloc'd buffer of n bytes (the caller frees it, as with glibc).
                let p = unsafe { libc::malloc(n) } as *mut c_char;
                if p.is_null() {
                    set_errno(libc::ENOMEM);
                    return p;
                }
                // SAFETY: n >= len + 1.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, p, bytes.len());
                    *p.add(bytes.len()) = 0;
                }
                return p;
            }
            if size < bytes.len() + 1 {
                set_errno(if size == 0 { libc::EINVAL } else { libc::ERANGE });
                return std::ptr::null_mut();
            }
            // SAFETY: the caller's buffer has size >= len + 1 bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, b, bytes.len());
                *b.add(bytes.len()) = 0;
            }
            return b;
        }
    }
    real!(getcwd: fn(*mut c_char, usize) -> *mut c_char; std::ptr::null_mut(); b, size)
}

// ------------------------------------------------------------------ directory streams

#[no_mangle]
pub unsafe extern "C" fn opendir(p: *const c_char) -> *mut libc::DIR {
    let real_open = |_: c_int, p: *const c_char| real!(opendir: fn(*const c_char) -> *mut libc::DIR; std::ptr::null_mut(); p);
    if in_shim() {
        return real_open(0, p);
    }
    // SAFETY: caller C string.
    match unsafe { crate::resolve::classify(libc::AT_FDCWD, p) } {
        Ok(Loc::Real) => real_open(0, p),
        Ok(Loc::RealAbs(c)) => real_open(0, c.as_ptr()),
        Ok(Loc::Store(m, sp)) => match guarded(|| {
            let fd = ops::open(m, &sp, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)?;
            dir::open(fd).inspect_err(|_| {
                let _ = close_store(fd);
            })
        }) {
            Ok(d) => d,
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
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    if maybe_store_fd(fd) && !in_shim() && state::desc_of(fd).is_some() {
        return match guarded(|| dir::open(fd)) {
            Ok(d) => d,
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        };
    }
    real!(fdopendir: fn(c_int) -> *mut libc::DIR; std::ptr::null_mut(); fd)
}
#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut libc::DIR) -> *mut libc::dirent64 {
    if dir::is_ours(d) {
        // SAFETY: ours, and DIR streams are not shared between threads without locking.
        return unsafe { dir::get(d) }
            .next_entry()
            .unwrap_or(std::ptr::null_mut());
    }
    real!(readdir64: fn(*mut libc::DIR) -> *mut libc::dirent64; std::ptr::null_mut(); d)
}
#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut libc::DIR) -> *mut libc::dirent64 {
    if dir::is_ours(d) {
        // SAFETY: as readdir64; struct dirent and dirent64 are the same on 64-bit Linux.
        return unsafe { dir::get(d) }
            .next_entry()
            .unwrap_or(std::ptr::null_mut());
    }
    real!(readdir: fn(*mut libc::DIR) -> *mut libc::dirent64; std::ptr::null_mut(); d)
}
#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut libc::DIR) {
    if dir::is_ours(d) {
        // SAFETY: ours.
        let _ = guarded(|| {
            // SAFETY: ours.
            unsafe { dir::get(d) }.rewind();
            Ok(())
        });
        return;
    }
    real!(rewinddir: fn(*mut libc::DIR) -> (); (); d)
}
#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut libc::DIR) -> c_long {
    if dir::is_ours(d) {
        // SAFETY: ours.
        return unsafe { dir::get(d) }.tell();
    }
    real!(telldir: fn(*mut libc::DIR) -> c_long; -1; d)
}
#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut libc::DIR, pos: c_long) {
    if dir::is_ours(d) {
        // SAFETY: ours.
        unsafe { dir::get(d) }.seek(pos);
        return;
    }
    real!(seekdir: fn(*mut libc::DIR, c_long) -> (); (); d, pos)
}
#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut libc::DIR) -> c_int {
    if dir::is_ours(d) {
        // SAFETY: ours.
        return unsafe { dir::get(d) }.fd;
    }
    real!(dirfd: fn(*mut libc::DIR) -> c_int; -1; d)
}
#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut libc::DIR) -> c_int {
    if dir::is_ours(d) {
        // SAFETY: ours; removed from the table before it is freed.
        let fd = unsafe { dir::close(d) };
        return ret(guarded(|| close_store(fd).unwrap_or(Err(libc::EBADF))));
    }
    real!(closedir: fn(*mut libc::DIR) -> c_int; -1; d)
}

// ------------------------------------------------------------------ stdio

unsafe fn fopen_impl(p: *const c_char, mode: *const c_char, sixty_four: bool) -> *mut libc::FILE {
    let fwd = |p: *const c_char| {
        if sixty_four {
            real!(fopen64: fn(*const c_char, *const c_char) -> *mut libc::FILE; std::ptr::null_mut(); p, mode)
        } else {
            real!(fopen: fn(*const c_char, *const c_char) -> *mut libc::FILE; std::ptr::null_mut(); p, mode)
        }
    };
    if in_shim() || mode.is_null() {
        return fwd(p);
    }
    // SAFETY: caller C string.
    match unsafe { crate::resolve::classify(libc::AT_FDCWD, p) } {
        Ok(Loc::Real) => fwd(p),
        Ok(Loc::RealAbs(c)) => fwd(c.as_ptr()),
        Ok(Loc::Store(m, sp)) => {
            // SAFETY: caller C string.
            let mc = unsafe { CStr::from_ptr(mode) };
            let r = guarded(|| {
                let fl = stdio::mode_flags(mc.to_bytes()).ok_or(libc::EINVAL)?;
                let fd = ops::open(m, &sp, fl, 0o666)?;
                stdio::open_stream(fd, mc).inspect_err(|_| {
                    let _ = close_store(fd);
                })
            });
            match r {
                Ok(f) => f,
                Err(e) => {
                    set_errno(e);
                    std::ptr::null_mut()
                }
            }
        }
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn fopen(p: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: as fopen(3).
    unsafe { fopen_impl(p, mode, false) }
}
#[no_mangle]
pub unsafe extern "C" fn fopen64(p: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: as fopen(3).
    unsafe { fopen_impl(p, mode, true) }
}

unsafe fn freopen_impl(p: *const c_char, mode: *const c_char, f: *mut libc::FILE) -> *mut libc::FILE {
    let fwd = |p: *const c_char| real!(freopen64: fn(*const c_char, *const c_char, *mut libc::FILE) -> *mut libc::FILE; std::ptr::null_mut(); p, mode, f);
    if in_shim() {
        return fwd(p);
    }
    let ours = stdio::fd_of(f).is_some();
    // SAFETY: caller C string or null.
    let loc = if p.is_null() {
        Ok(Loc::Real)
    } else {
        // SAFETY: caller C string or null (checked above).
        unsafe { crate::resolve::classify(libc::AT_FDCWD, p) }
    };
    let fail = |e| {
        set_errno(e);
        std::ptr::null_mut()
    };
    match loc {
        Err(e) => fail(e),
        Ok(Loc::Store(m, sp)) if ours && !mode.is_null() => {
            // SAFETY: the stream is alive; fflush is not intercepted.
            unsafe { libc::fflush(f) };
            // SAFETY: caller C string.
            let mb = unsafe { CStr::from_ptr(mode) }.to_bytes();
            let r = guarded(|| {
                let fl = stdio::mode_flags(mb).ok_or(libc::EINVAL)?;
                let fd = ops::open(m, &sp, fl, 0o666)?;
                if let Some(old) = stdio::swap_fd(f, fd) {
                    let _ = close_store(old);
                }
                Ok(f)
            });
            r.unwrap_or_else(fail)
        }
        // Re-pointing a kernel stream at a store file, or a store stream at a kernel file,
        // would need glibc's internal FILE layout: not supported.
        Ok(Loc::Store(..)) => fail(libc::EOPNOTSUPP),
        Ok(_) if ours => fail(libc::EOPNOTSUPP),
        Ok(Loc::RealAbs(c)) => fwd(c.as_ptr()),
        Ok(Loc::Real) => fwd(p),
    }
}
#[no_mangle]
pub unsafe extern "C" fn freopen(
    p: *const c_char,
    mode: *const c_char,
    f: *mut libc::FILE,
) -> *mut libc::FILE {
    // SAFETY: as freopen(3).
    unsafe { freopen_impl(p, mode, f) }
}
#[no_mangle]
pub unsafe extern "C" fn freopen64(
    p: *const c_char,
    mode: *const c_char,
    f: *mut libc::FILE,
) -> *mut libc::FILE {
    // SAFETY: as freopen(3).
    unsafe { freopen_impl(p, mode, f) }
}
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    if maybe_store_fd(fd) && !in_shim() && !mode.is_null() {
        if let Some(d) = state::desc_of(fd) {
            // SAFETY: caller C string.
            let mb = unsafe { CStr::from_ptr(mode) }.to_bytes();
            let r = guarded(|| {
                let fl = stdio::mode_flags(mb).ok_or(libc::EINVAL)?;
                let want_w = fl & libc::O_ACCMODE != libc::O_RDONLY;
                let want_r = fl & libc::O_ACCMODE != libc::O_WRONLY;
                if want_w && d.acc == libc::O_RDONLY || want_r && d.acc == libc::O_WRONLY {
                    return Err(libc::EINVAL);
                }
                // SAFETY: checked non-null above; the caller's C string.
                stdio::open_stream(fd, unsafe { CStr::from_ptr(mode) })
            });
            return match r {
                Ok(f) => f,
                Err(e) => {
                    set_errno(e);
                    std::ptr::null_mut()
                }
            };
        }
    }
    real!(fdopen: fn(c_int, *const c_char) -> *mut libc::FILE; std::ptr::null_mut(); fd, mode)
}
#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut libc::FILE) -> c_int {
    if let Some(fd) = stdio::fd_of(f) {
        return fd;
    }
    real!(fileno: fn(*mut libc::FILE) -> c_int; -1; f)
}
#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut libc::FILE) -> c_int {
    if let Some(fd) = stdio::fd_of(f) {
        return fd;
    }
    real!(fileno_unlocked: fn(*mut libc::FILE) -> c_int; -1; f)
}
#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut libc::FILE) -> c_int {
    stdio::forget(f);
    real!(fclose: fn(*mut libc::FILE) -> c_int; libc::EOF; f)
}

// ------------------------------------------------------------------ mmap, copies

unsafe fn mmap_impl(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: Off,
) -> *mut c_void {
    let fwd = || real!(mmap64: fn(*mut c_void, usize, c_int, c_int, c_int, Off) -> *mut c_void; libc::MAP_FAILED; addr, len, prot, flags, fd, off);
    if flags & libc::MAP_ANONYMOUS != 0 || !maybe_store_fd(fd) || in_shim() {
        return fwd();
    }
    let r = guarded(|| {
        let Some(d) = state::desc_of(fd) else {
            return Ok(None);
        };
        // Shared and writable: the store's own pages (module shmap).
        // (MAP_PRIVATE is 2 and MAP_SHARED_VALIDATE 3: compare the mapping type, not bits.)
        let kind = flags & 0x0f;
        if (kind == libc::MAP_SHARED || kind == libc::MAP_SHARED_VALIDATE) && prot & libc::PROT_WRITE != 0 {
            // SAFETY: the caller's mmap arguments, passed on.
            return unsafe { crate::shmap::map(&d, addr, len, prot, flags, off) }.map(Some);
        }
        // Otherwise a snapshot copy in anonymous memory.
        if d.is_dir {
            return Err(libc::ENODEV);
        }
        if d.acc == libc::O_WRONLY {
            return Err(libc::EACCES);
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64;
        if len == 0 || off < 0 || off % page != 0 {
            return Err(libc::EINVAL);
        }
        let keep =
            flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_POPULATE | libc::MAP_NORESERVE);
        let p = real!(mmap64: fn(*mut c_void, usize, c_int, c_int, c_int, Off) -> *mut c_void; libc::MAP_FAILED;
            addr, len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep, -1, 0);
        if p == libc::MAP_FAILED {
            return Err(sys::errno());
        }
        // SAFETY: p is a fresh writable mapping of len bytes.
        let dst = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) };
        let mut done = 0;
        while done < len {
            let n = ops::preadv(&d, &mut [&mut dst[done..]], off + done as i64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        // SAFETY: changing the protection of our own mapping.
        unsafe { libc::mprotect(p, len, prot) };
        Ok(Some(p))
    });
    match r {
        Ok(Some(p)) => p,
        Ok(None) => fwd(),
        Err(e) => {
            set_errno(e);
            libc::MAP_FAILED
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    if crate::shmap::any() && !in_shim() {
        let _ = guarded(|| {
            crate::shmap::unmap(addr as usize, len);
            Ok(())
        });
    }
    real!(munmap: fn(*mut c_void, usize) -> c_int; -1; addr, len)
}
#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: usize, flags: c_int) -> c_int {
    if crate::shmap::any() && !in_shim() {
        match guarded(|| crate::shmap::sync(addr as usize, len)) {
            Ok(true) => return 0,
            Err(e) => return ret(Err(e)),
            Ok(false) => {}
        }
    }
    real!(msync: fn(*mut c_void, usize, c_int) -> c_int; -1; addr, len, flags)
}
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: Off,
) -> *mut c_void {
    // SAFETY: as mmap(2).
    unsafe { mmap_impl(addr, len, prot, flags, fd, off) }
}
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: Off,
) -> *mut c_void {
    // SAFETY: as mmap(2).
    unsafe { mmap_impl(addr, len, prot, flags, fd, off) }
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fin: c_int,
    oin: *mut Off,
    fout: c_int,
    oout: *mut Off,
    len: usize,
    flags: c_uint,
) -> isize {
    if !in_shim() && (state::desc_of(fin).is_some() || state::desc_of(fout).is_some()) {
        // Callers (coreutils cp) fall back to read/write on EXDEV.
        return ret(Err(libc::EXDEV));
    }
    real!(copy_file_range: fn(c_int, *mut Off, c_int, *mut Off, usize, c_uint) -> isize; -1; fin, oin, fout, oout, len, flags)
}

/// sendfile between any two descriptors when one is a store file: a read/write loop.
unsafe fn sendfile_impl(out: c_int, fin: c_int, off: *mut Off, count: usize) -> isize {
    let store_in = state::desc_of(fin);
    let store_out = state::desc_of(out);
    if in_shim() || (store_in.is_none() && store_out.is_none()) {
        return real!(sendfile64: fn(c_int, c_int, *mut Off, usize) -> isize; -1; out, fin, off, count);
    }
    let r = guarded(|| {
        let mut buf = vec![0u8; count.min(1 << 20)];
        let mut total = 0usize;
        // SAFETY: off is null or a valid offset per sendfile(2).
        let mut pos = if off.is_null() {
            None
        } else {
            // SAFETY: off is non-null here and valid per sendfile(2).
            Some(unsafe { *off })
        };
        while total < count {
            let want = (count - total).min(buf.len());
            let b = &mut buf[..want];
            let n = match (&store_in, pos) {
                (Some(d), Some(p)) => ops::preadv(d, &mut [b], p)?,
                (Some(d), None) => ops::read(d, b)?,
                (None, Some(p)) => {
                    let n = real!(pread64: fn(c_int, *mut c_void, usize, Off) -> isize; -1; fin, b.as_mut_ptr() as *mut c_void, want, p);
                    if n < 0 {
                        return Err(sys::errno());
                    } else {
                        n as usize
                    }
                }
                (None, None) => {
                    let n = real!(read: fn(c_int, *mut c_void, usize) -> isize; -1; fin, b.as_mut_ptr() as *mut c_void, want);
                    if n < 0 {
                        return Err(sys::errno());
                    } else {
                        n as usize
                    }
                }
            };
            if n == 0 {
                break;
            }
            let mut w = 0;
            while w < n {
                let k = match &store_out {
                    Some(d) => ops::writev(d, &[&buf[w..n]])?,
                    None => {
                        let k = real!(write: fn(c_int, *const c_void, usize) -> isize; -1; out, buf[w..].as_ptr() as *const c_void, n - w);
                        if k < 0 {
                            return Err(sys::errno());
                        } else {
                            k as usize
                        }
                    }
                };
                w += k;
            }
            total += n;
            if let Some(p) = pos.as_mut() {
                *p += n as i64;
            }
        }
        if let Some(p) = pos {
            // SAFETY: as above.
            unsafe { *off = p };
        }
        Ok(total as isize)
    });
    ret(r)
}
#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, fin: c_int, off: *mut Off, count: usize) -> isize {
    // SAFETY: as sendfile(2).
    unsafe { sendfile_impl(out, fin, off, count) }
}
#[no_mangle]
pub unsafe extern "C" fn sendfile64(out: c_int, fin: c_int, off: *mut Off, count: usize) -> isize {
    // SAFETY: as sendfile(2).
    unsafe { sendfile_impl(out, fin, off, count) }
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
