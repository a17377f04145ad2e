//! The few `*at` calls and `flock` that std does not offer, on descriptors this crate owns.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileTypeExt;

/// The caller's effective uid (the owner its new files get).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn cname(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
pub fn openat(dir: &File, name: &str, flags: i32, mode: u32) -> io::Result<File> {
    let c = cname(name)?;
    // SAFETY: dir is an open descriptor, c a NUL-terminated string that outlives the call.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `renameat(dir, from, dir, to)`.
pub fn renameat(dir: &File, from: &str, to: &str) -> io::Result<()> {
    let (f, t) = (cname(from)?, cname(to)?);
    // SAFETY: dir is an open descriptor; both names are NUL-terminated and outlive the call.
    let rc = unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `unlinkat(dir, name, 0)` (never follows a link: the entry itself goes).
pub fn unlinkat(dir: &File, name: &str) -> io::Result<()> {
    let c = cname(name)?;
    // SAFETY: dir is an open descriptor; c is NUL-terminated and outlives the call.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: owner uid and `st_mode` of the entry itself.
pub fn fstatat_nofollow(dir: &File, name: &str) -> io::Result<(u32, u32)> {
    let c = cname(name)?;
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: dir is an open descriptor, c NUL-terminated, st a valid out-pointer.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_uid, st.st_mode))
}

/// `flock(fd, op)`.
pub fn flock(f: &File, op: i32) -> io::Result<()> {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), op) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Is process `pid` alive (EPERM: alive, owned by someone else)?
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    let rc = unsafe { libc::kill(pid as i32, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A word for the kind of file `ft` is, for error messages.
pub fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_file() {
        "regular file"
    } else if ft.is_symlink() {
        "symbolic link"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

/// Create a close-on-exec pipe, make `handler` the action of `signals` (with
/// `SA_RESTART`) writing to its write end, and return the read end. The write end of an
/// earlier call is closed.
pub fn signal_pipe(signals: &[libc::c_int], handler: extern "C" fn(libc::c_int)) -> io::Result<File> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid two-element array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let old = swap_signal_pipe(fds[1]);
    for &s in signals {
        // SAFETY: the sigaction struct is plain data, fully initialised (zeroed, then
        // handler, flags and an empty mask); the handler only calls write(2).
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(s, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if old >= 0 {
        // SAFETY: `old` is the write end of an earlier pipe of this function, which the
        // handler no longer uses (the swap above replaced it) and nothing else owns.
        unsafe { libc::close(old) };
    }
    // SAFETY: fds[0] is a fresh descriptor owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fds[0]) })
}

static SIGNAL_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The handler of `Shutdown::on_signals`: writes the signal's number to the pipe.
pub(crate) extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(std::sync::atomic::Ordering::Relaxed);
    let b = sig as u8;
    // SAFETY: write(2) is async-signal-safe; `b` lives for the call; a closed or invalid
    // descriptor only makes the call fail.
    unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
}

/// The write end the handler uses (swapped by [`signal_pipe`]).
fn swap_signal_pipe(fd: i32) -> i32 {
    SIGNAL_PIPE.swap(fd, std::sync::atomic::Ordering::Relaxed)
}

/// Raise this process's soft limit of open descriptors to its hard limit (a daemon
/// that accepts connections from the network must not run out at the usual 1024).
/// Returns the soft limit in force afterwards.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid, writable rlimit for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if r.rlim_cur < r.rlim_max {
        let want = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        // SAFETY: want is a valid rlimit read for the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
            return Err(io::Error::last_os_error());
        }
        r.rlim_cur = r.rlim_max;
    }
    Ok(r.rlim_cur)
}
