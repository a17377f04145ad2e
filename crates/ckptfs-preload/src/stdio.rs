//! `FILE*` streams on store files: `fopencookie` streams whose callbacks call the store,
//! plus a table so that `fileno()` returns the store descriptor (libstdc++ fstreams call
//! `fileno()` and then `write()`/`read()`/`lseek()` on it).

use crate::lock::RwSpin;
use crate::ops;
use crate::state::{self, R};
use crate::sys::{self, real};
use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// Lock of the stream table (also taken by the fork handlers).
pub static LOCK: RwSpin = RwSpin::new();

struct Streams(UnsafeCell<BTreeMap<usize, usize>>);
// SAFETY: only touched with LOCK held.
unsafe impl Sync for Streams {}
/// FILE* -> cookie (a leaked `Box<AtomicI32>` holding the descriptor).
static STREAMS: Streams = Streams(UnsafeCell::new(BTreeMap::new()));
static NSTREAMS: AtomicUsize = AtomicUsize::new(0);

type ReadFn = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize;
type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize;
type SeekFn = unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int;
type CloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<ReadFn>,
    write: Option<WriteFn>,
    seek: Option<SeekFn>,
    close: Option<CloseFn>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

fn cookie_fd(c: *mut c_void) -> i32 {
    // SAFETY: every cookie is a leaked Box<AtomicI32> alive until ck_close.
    unsafe { &*(c as *const AtomicI32) }.load(Ordering::Relaxed)
}

/// Run `f` if the cookie's descriptor is a store descriptor; otherwise None (the
/// descriptor was re-pointed at a kernel file, e.g. stdout after a shell's dup2).
fn on_cookie<T>(c: *mut c_void, f: impl FnOnce(&state::Desc) -> R<T>) -> Option<R<T>> {
    let fd = cookie_fd(c);
    match sys::guarded(|| Ok(state::with_fd(fd, |d| f(d)))) {
        Ok(r) => r,
        Err(e) => Some(Err(e)),
    }
}

unsafe extern "C" fn ck_read(c: *mut c_void, buf: *mut c_char, n: usize) -> isize {
    // SAFETY: glibc passes a writable buffer of n bytes.
    let b = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) };
    match on_cookie(c, |d| ops::read(d, b).map(|n| n as isize)) {
        Some(r) => sys::ret(r),
        None => real!(read: fn(c_int, *mut c_void, usize) -> isize; -1; cookie_fd(c), buf as *mut c_void, n),
    }
}

unsafe extern "C" fn ck_write(c: *mut c_void, buf: *const c_char, n: usize) -> isize {
    // SAFETY: glibc passes a readable buffer of n bytes.
    let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n) };
    match on_cookie(c, |d| ops::writev(d, &[b]).map(|n| n as isize)) {
        Some(r) => sys::ret(r),
        None => {
            real!(write: fn(c_int, *const c_void, usize) -> isize; -1; cookie_fd(c), buf as *const c_void, n)
        }
    }
}

unsafe extern "C" fn ck_seek(c: *mut c_void, pos: *mut i64, whence: c_int) -> c_int {
    // SAFETY: glibc passes a valid in/out offset.
    let p = unsafe { &mut *pos };
    let r = match on_cookie(c, |d| ops::lseek(d, *p, whence)) {
        Some(r) => r,
        None => {
            let n = real!(lseek64: fn(c_int, i64, c_int) -> i64; -1; cookie_fd(c), *p, whence);
            if n < 0 {
                Err(sys::errno())
            } else {
                Ok(n)
            }
        }
    };
    match r {
        Ok(n) => {
            *p = n;
            0
        }
        Err(e) => {
            sys::set_errno(e);
            -1
        }
    }
}

unsafe extern "C" fn ck_close(c: *mut c_void) -> c_int {
    let fd = cookie_fd(c);
    // SAFETY: the cookie was created by Box::into_raw in open_stream and is freed once here.
    drop(unsafe { Box::from_raw(c as *mut AtomicI32) });
    sys::ret(sys::guarded(|| {
        crate::ops::close_store(fd).unwrap_or(Err(libc::EBADF))
    }))
}

/// open(2) flags for an fopen mode string, or None if it is invalid.
pub fn mode_flags(mode: &[u8]) -> Option<i32> {
    let (mut fl, rest) = match mode.first()? {
        b'r' => (libc::O_RDONLY, &mode[1..]),
        b'w' => (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, &mode[1..]),
        b'a' => (libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND, &mode[1..]),
        _ => return None,
    };
    for &c in rest {
        match c {
            b'+' => fl = (fl & !libc::O_ACCMODE) | libc::O_RDWR,
            b'x' => fl |= libc::O_EXCL,
            b'e' => fl |= libc::O_CLOEXEC,
            b',' => break,
            _ => {}
        }
    }
    Some(fl)
}

/// Wrap store descriptor `fd` in a stream. On failure the descriptor stays open.
pub fn open_stream(fd: i32, mode: &std::ffi::CStr) -> R<*mut libc::FILE> {
    let cookie = Box::into_raw(Box::new(AtomicI32::new(fd))) as *mut c_void;
    let io = CookieIo {
        read: Some(ck_read),
        write: Some(ck_write),
        seek: Some(ck_seek),
        close: Some(ck_close),
    };
    // SAFETY: valid mode string from the caller, callbacks of the right types.
    let f = unsafe { fopencookie(cookie, mode.as_ptr(), io) };
    if f.is_null() {
        // SAFETY: not handed to glibc.
        drop(unsafe { Box::from_raw(cookie as *mut AtomicI32) });
        return Err(sys::errno());
    }
    LOCK.write();
    // SAFETY: LOCK held exclusively.
    unsafe { &mut *STREAMS.0.get() }.insert(f as usize, cookie as usize);
    NSTREAMS.fetch_add(1, Ordering::Relaxed);
    LOCK.write_unlock();
    Ok(f)
}

fn cookie_of(f: *mut libc::FILE) -> Option<usize> {
    if NSTREAMS.load(Ordering::Relaxed) == 0 {
        return None;
    }
    LOCK.read();
    // SAFETY: LOCK held shared.
    let c = unsafe { &*STREAMS.0.get() }.get(&(f as usize)).copied();
    LOCK.read_unlock();
    c
}

/// The store descriptor behind stream `f`, if it is a store stream.
pub fn fd_of(f: *mut libc::FILE) -> Option<i32> {
    cookie_of(f).map(|c| cookie_fd(c as *mut c_void))
}

/// Point stream `f` at another store descriptor (freopen); returns the old one.
pub fn swap_fd(f: *mut libc::FILE, fd: i32) -> Option<i32> {
    let c = cookie_of(f)?;
    // SAFETY: the cookie is alive while the stream is in the table.
    Some(unsafe { &*(c as *const AtomicI32) }.swap(fd, Ordering::Relaxed))
}

/// Forget stream `f` (it is being closed).
pub fn forget(f: *mut libc::FILE) -> bool {
    if NSTREAMS.load(Ordering::Relaxed) == 0 {
        return false;
    }
    LOCK.write();
    // SAFETY: LOCK held exclusively.
    let had = unsafe { &mut *STREAMS.0.get() }.remove(&(f as usize)).is_some();
    if had {
        NSTREAMS.fetch_sub(1, Ordering::Relaxed);
    }
    LOCK.write_unlock();
    had
}

/// Flush every store stream (at exit, before the store descriptors are released).
pub fn flush_all() {
    if NSTREAMS.load(Ordering::Relaxed) == 0 {
        return;
    }
    LOCK.read();
    // SAFETY: LOCK held shared.
    let all: Vec<usize> = unsafe { &*STREAMS.0.get() }.keys().copied().collect();
    LOCK.read_unlock();
    for f in all {
        // SAFETY: a live stream created by fopencookie (fflush is not intercepted).
        unsafe { libc::fflush(f as *mut libc::FILE) };
    }
}

extern "C" {
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

static STD_DONE: [std::sync::atomic::AtomicBool; 3] =
    [const { std::sync::atomic::AtomicBool::new(false) }; 3];

/// Store descriptor `fd` became 0, 1 or 2 (inherited across exec, or dup2): glibc's
/// stdin/stdout/stderr would write with internal calls the shim cannot see, so replace
/// the stream by a cookie stream on the same descriptor (which falls back to the kernel
/// if the descriptor is later pointed at a kernel file again).
pub fn install_std(fd: i32) {
    if !(0..=2).contains(&fd) || STD_DONE[fd as usize].swap(true, Ordering::AcqRel) {
        return;
    }
    let mode = if fd == 0 { c"r" } else { c"w" };
    let Ok(f) = open_stream(fd, mode) else {
        return;
    };
    // SAFETY: replacing the C library's standard stream pointers, as freopen-style code
    // does; the old stream is flushed first and left open (it owns no other resource).
    unsafe {
        let slot = match fd {
            0 => &raw mut stdin,
            1 => &raw mut stdout,
            _ => &raw mut stderr,
        };
        if fd != 0 {
            libc::fflush(*slot);
        }
        if fd == 2 {
            libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
        }
        *slot = f;
    }
}

#[cfg(test)]
mod tests {
    use super::mode_flags;

    #[test]
    fn fopen_modes_map_to_open_flags() {
        assert_eq!(mode_flags(b"r"), Some(libc::O_RDONLY));
        assert_eq!(
            mode_flags(b"wb"),
            Some(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)
        );
        assert_eq!(
            mode_flags(b"a+"),
            Some(libc::O_RDWR | libc::O_CREAT | libc::O_APPEND)
        );
        assert_eq!(mode_flags(b"r+e"), Some(libc::O_RDWR | libc::O_CLOEXEC));
        assert_eq!(
            mode_flags(b"wx"),
            Some(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL)
        );
        assert_eq!(mode_flags(b"z"), None);
    }
}
