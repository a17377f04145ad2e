//! Descriptor calls: `close`, `close_range`, `dup*`, `fcntl`, locks, `fsync`, `ftruncate`, `fallocate`, `posix_fadvise`.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use super::*;

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
        on_path_f(
            libc::AT_FDCWD,
            path,
            true,
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
