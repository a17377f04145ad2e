//! The backend system calls of CRFS mode that std does not offer as they are needed:
//! open with the caller's exact flags, times, and extended attributes. Each returns the
//! backend's errno unchanged, so the mount answers what its backend answers.

use super::{check, cpath, errno_io};
use fuser::{Errno, ReplyXattr, TimeOrNow};
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;

/// Flags of a FUSE open/create passed on to the backend. O_APPEND is not among them (the
/// aggregation engine places appends at the logical end itself), nor O_DIRECT/O_SYNC
/// (the chunks are written by the IO threads).
const PASS: i32 =
    libc::O_TRUNC | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_DIRECTORY | libc::O_NOATIME | libc::O_NOCTTY;

/// Open `path` with the access mode and flags of a FUSE open (`create_mode`: O_CREAT
/// with that mode). Any access mode may create, as on the backend: open(O_RDONLY |
/// O_CREAT) creates the file.
pub(super) fn open(path: &Path, flags: i32, create_mode: Option<u32>) -> Result<File, Errno> {
    let c = cpath(path)?;
    let mut f = (flags & (libc::O_ACCMODE | PASS)) | libc::O_CLOEXEC;
    let mode = create_mode.unwrap_or(0);
    if create_mode.is_some() {
        f |= libc::O_CREAT;
    }
    // SAFETY: c is a valid NUL-terminated path; open reads only its arguments.
    let fd = unsafe { libc::open(c.as_ptr(), f, mode as libc::c_uint) };
    if fd < 0 {
        return Err(errno_io(io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh descriptor owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let (sec, nsec) = match t.duration_since(SystemTime::UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    // Before 1970: negative seconds, non-negative nanoseconds.
                    let d = e.duration();
                    let (s, n) = (d.as_secs() as i64, d.subsec_nanos() as i64);
                    if n == 0 {
                        (-s, 0)
                    } else {
                        (-s - 1, 1_000_000_000 - n)
                    }
                }
            };
            libc::timespec {
                tv_sec: sec as libc::time_t,
                tv_nsec: nsec as libc::c_long,
            }
        }
    }
}

/// utimensat on `path` (not following a symbolic link).
pub(super) fn set_times(
    path: &Path,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
) -> Result<(), Errno> {
    let c = cpath(path)?;
    let times = [timespec(atime), timespec(mtime)];
    // SAFETY: valid path and a two-element timespec array.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

fn cname(name: &OsStr) -> Result<CString, Errno> {
    CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)
}

/// Answer a getxattr/listxattr: the size when `size` is 0, else the bytes (ERANGE when
/// they do not fit), exactly like the system call.
fn reply_sized(reply: ReplyXattr, size: u32, r: Result<Vec<u8>, Errno>) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() <= size as usize => reply.data(&v),
        Ok(_) => reply.error(Errno::ERANGE),
        Err(e) => reply.error(e),
    }
}

/// Read a value or list with the two-call protocol of the xattr system calls.
fn read_sized(mut call: impl FnMut(*mut libc::c_void, usize) -> isize) -> Result<Vec<u8>, Errno> {
    loop {
        let n = call(std::ptr::null_mut(), 0);
        if n < 0 {
            return Err(errno_io(io::Error::last_os_error()));
        }
        let mut buf = vec![0u8; n as usize];
        let m = call(buf.as_mut_ptr().cast(), buf.len());
        if m < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue; // grew between the two calls
            }
            return Err(errno_io(e));
        }
        buf.truncate(m as usize);
        return Ok(buf);
    }
}

/// lgetxattr.
pub(super) fn getxattr(path: &Path, name: &OsStr, size: u32, reply: ReplyXattr) {
    let r = (|| {
        let (c, n) = (cpath(path)?, cname(name)?);
        // SAFETY: valid NUL-terminated strings; buf/len describe a valid buffer or null/0.
        read_sized(|buf, len| unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf, len) })
    })();
    reply_sized(reply, size, r);
}

/// llistxattr.
pub(super) fn listxattr(path: &Path, size: u32, reply: ReplyXattr) {
    let r = (|| {
        let c = cpath(path)?;
        // SAFETY: valid NUL-terminated path; buf/len describe a valid buffer or null/0.
        read_sized(|buf, len| unsafe { libc::llistxattr(c.as_ptr(), buf.cast(), len) })
    })();
    reply_sized(reply, size, r);
}

/// lsetxattr.
pub(super) fn setxattr(path: &Path, name: &OsStr, value: &[u8], flags: i32) -> Result<(), Errno> {
    let (c, n) = (cpath(path)?, cname(name)?);
    // SAFETY: valid strings and a value slice that outlives the call.
    check(unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) })
}

/// lremovexattr.
pub(super) fn removexattr(path: &Path, name: &OsStr) -> Result<(), Errno> {
    let (c, n) = (cpath(path)?, cname(name)?);
    // SAFETY: valid NUL-terminated strings.
    check(unsafe { libc::lremovexattr(c.as_ptr(), n.as_ptr()) })
}
