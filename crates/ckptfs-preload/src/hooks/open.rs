//! The open family: `open`, `openat`, `creat` and their 64-bit and fortified forms.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use super::*;

// ------------------------------------------------------------------ open family

unsafe fn open_at(dirfd: c_int, path: *const c_char, flags: c_int, mode: Mode) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        on_path_f(
            dirfd,
            path,
            flags & libc::O_NOFOLLOW == 0,
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
