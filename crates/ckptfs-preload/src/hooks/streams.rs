//! `FILE*` streams on store files: `fopen`, `freopen`, `fdopen`, `fileno`, `fclose`.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use super::*;

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
