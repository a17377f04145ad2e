//! The working directory (`chdir`, `fchdir`, `getcwd`) and directory streams (`opendir` ... `closedir`).
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use super::*;

// ------------------------------------------------------------------ working directory

#[no_mangle]
pub unsafe extern "C" fn chdir(p: *const c_char) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path_f(
            libc::AT_FDCWD,
            p,
            true,
            |_, p| {
                let r = real!(chdir: fn(*const c_char) -> c_int; -1; p);
                if r == 0 {
                    crate::cwd::set_vcwd(None);
                }
                r
            },
            |m, p| {
                let (st, _) = ops::stat(p)?;
                if st.kind == ckptfs_store::FileKind::Symlink {
                    return Err(libc::ELOOP); // followed by on_path_f
                }
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
        Ok(Loc::Store(m, sp)) => {
            let open_store = |m: usize, sp: &str| {
                guarded(|| {
                    let fd = ops::open(m, sp, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)?;
                    dir::open(fd).inspect_err(|_| {
                        let _ = close_store(fd);
                    })
                })
            };
            // A store symlink on the way (or last) is followed, as in `on_path_f`.
            let r = match open_store(m, &sp) {
                Err(e) if e == libc::ENOTDIR || e == libc::ELOOP => {
                    match guarded(|| crate::links::follow(m, &sp, true)) {
                        Ok(Some(crate::links::Followed::Store(m2, p2))) => open_store(m2, &p2),
                        Ok(Some(crate::links::Followed::Host(c))) => return real_open(0, c.as_ptr()),
                        Ok(None) => Err(e),
                        Err(e2) => Err(e2),
                    }
                }
                r => r,
            };
            match r {
                Ok(d) => d,
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
