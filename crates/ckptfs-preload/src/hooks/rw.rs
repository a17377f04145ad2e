//! Data calls: `read`/`write`, their positional, vector and v2 forms, and `lseek`.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use super::*;

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
