//! The backend system calls of CRFS mode that std does not offer as they are needed:
//! open with the caller's exact flags, times, and extended attributes. Each returns the
//! backend's errno unchanged, so the mount answers what its backend answers.

use crate::io_errno;
use fuser::{Errno, FileType, ReplyXattr, TimeOrNow};
use std::ffi::{CStr, CString, OsStr};
use std::fs::{File, Metadata};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

pub(super) fn errno_io(e: io::Error) -> Errno {
    io_errno(&e)
}

pub(super) fn check(r: libc::c_int) -> Result<(), Errno> {
    if r < 0 {
        Err(errno_io(io::Error::last_os_error()))
    } else {
        Ok(())
    }
}

pub(super) fn file_type(m: &Metadata) -> FileType {
    FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile)
}

/// A backend time (seconds, nanoseconds; before 1970 too) as a SystemTime.
pub(super) fn ts(sec: i64, nsec: i64) -> SystemTime {
    let base = SystemTime::UNIX_EPOCH;
    if sec >= 0 {
        base + Duration::new(sec as u64, nsec as u32)
    } else {
        base - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

fn cvt(fd: RawFd) -> Result<OwnedFd, Errno> {
    if fd < 0 {
        return Err(errno_io(io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh descriptor owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `/proc/self/fd/N`: reopens the inode an O_PATH descriptor holds, with new flags
/// and the checks of the current (caller's) credentials.
fn proc_path(fd: BorrowedFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL in a number")
}

/// An O_PATH descriptor of the directory `path` (the backend root).
pub(super) fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let c =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    cvt(fd).map_err(|e| io::Error::from_raw_os_error(e.code()))
}

/// An O_PATH descriptor of `name` in directory `dir`, not following a symbolic link.
pub(super) fn open_node(dir: BorrowedFd, name: &CStr) -> Result<OwnedFd, Errno> {
    // SAFETY: a valid directory descriptor and NUL-terminated name.
    cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })
}

/// fstat of any descriptor (O_PATH included).
pub(super) fn fstat(fd: BorrowedFd) -> Result<Metadata, Errno> {
    // SAFETY: the File borrows fd only for this call and is never dropped (ManuallyDrop),
    // so the descriptor is not closed.
    let f = ManuallyDrop::new(unsafe { File::from_raw_fd(fd.as_raw_fd()) });
    f.metadata().map_err(errno_io)
}

/// Flags of a FUSE open/create passed on to the backend. O_APPEND is not among them (the
/// aggregation engine places appends at the logical end itself), nor O_DIRECT/O_SYNC
/// (the chunks are written by the IO threads).
const PASS: i32 =
    libc::O_TRUNC | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_DIRECTORY | libc::O_NOATIME | libc::O_NOCTTY;

fn into_file(fd: OwnedFd) -> File {
    File::from(fd)
}

/// Open the inode of `node` with the access mode and flags of a FUSE open (the kernel
/// has resolved the name already, so O_NOFOLLOW does not apply to the reopen).
pub(super) fn reopen(node: BorrowedFd, flags: i32) -> Result<File, Errno> {
    let p = proc_path(node);
    let f = (flags & (libc::O_ACCMODE | PASS) & !libc::O_NOFOLLOW) | libc::O_CLOEXEC;
    // SAFETY: valid NUL-terminated path.
    cvt(unsafe { libc::open(p.as_ptr(), f) }).map(into_file)
}

/// Create `name` in `dir` with the access mode and flags of a FUSE create: any access
/// mode may create, as on the backend (open(O_RDONLY | O_CREAT) creates the file).
pub(super) fn create_at(dir: BorrowedFd, name: &CStr, flags: i32, mode: u32) -> Result<File, Errno> {
    let f = (flags & (libc::O_ACCMODE | PASS)) | libc::O_CREAT | libc::O_CLOEXEC;
    // SAFETY: valid directory descriptor and NUL-terminated name.
    cvt(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), f, mode as libc::c_uint) }).map(into_file)
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

/// utimensat on the inode itself (AT_EMPTY_PATH: symbolic links included).
pub(super) fn set_times(
    node: BorrowedFd,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
) -> Result<(), Errno> {
    let times = [timespec(atime), timespec(mtime)];
    // SAFETY: a valid descriptor, an empty NUL-terminated name and two timespecs.
    check(unsafe {
        libc::utimensat(
            node.as_raw_fd(),
            c"".as_ptr(),
            times.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// chmod of the inode (never a symbolic link: chmod follows them in the kernel).
pub(super) fn chmod(node: BorrowedFd, mode: u32) -> Result<(), Errno> {
    let p = proc_path(node);
    // SAFETY: valid NUL-terminated path.
    check(unsafe { libc::chmod(p.as_ptr(), (mode & 0o7777) as libc::mode_t) })
}

/// Clear set-user-ID/set-group-ID of an open file if a write by a user must.
pub(super) fn kill_suid(f: &File) -> Result<(), Errno> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = f.metadata().map_err(errno_io)?;
    if let Some(mode) = crate::killed_mode(m.mode()) {
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(errno_io)?;
    }
    Ok(())
}

/// chown of the inode itself (-1 keeps an id).
pub(super) fn chown(node: BorrowedFd, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
    let (u, g) = (uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX));
    // SAFETY: a valid descriptor and an empty NUL-terminated name.
    check(unsafe {
        libc::fchownat(
            node.as_raw_fd(),
            c"".as_ptr(),
            u,
            g,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// truncate of a regular file (opened for writing with the caller's rights).
pub(super) fn truncate(node: BorrowedFd, len: u64) -> Result<(), Errno> {
    let f = reopen(node, libc::O_WRONLY)?;
    f.set_len(len).map_err(errno_io)
}

/// readlink of a symbolic link.
pub(super) fn readlink(node: BorrowedFd) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: valid descriptor, empty name, and a buffer of buf.len() bytes.
    let n = unsafe { libc::readlinkat(node.as_raw_fd(), c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(errno_io(io::Error::last_os_error()));
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// mknodat.
pub(super) fn mknod_at(dir: BorrowedFd, name: &CStr, mode: u32, rdev: u32) -> Result<(), Errno> {
    // SAFETY: valid directory descriptor and NUL-terminated name.
    check(unsafe {
        libc::mknodat(
            dir.as_raw_fd(),
            name.as_ptr(),
            mode as libc::mode_t,
            rdev as libc::dev_t,
        )
    })
}

/// mkdirat.
pub(super) fn mkdir_at(dir: BorrowedFd, name: &CStr, mode: u32) -> Result<(), Errno> {
    // SAFETY: valid directory descriptor and NUL-terminated name.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), (mode & 0o7777) as libc::mode_t) })
}

/// symlinkat.
pub(super) fn symlink_at(target: &Path, dir: BorrowedFd, name: &CStr) -> Result<(), Errno> {
    let t = CString::new(target.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: valid strings and directory descriptor.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
}

/// unlinkat (`AT_REMOVEDIR` for rmdir).
pub(super) fn unlink_at(dir: BorrowedFd, name: &CStr, flags: i32) -> Result<(), Errno> {
    // SAFETY: valid directory descriptor and NUL-terminated name.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

/// renameat2 with the caller's flags.
pub(super) fn rename_at(
    from: BorrowedFd,
    name: &CStr,
    to: BorrowedFd,
    newname: &CStr,
    flags: u32,
) -> Result<(), Errno> {
    // SAFETY: valid directory descriptors and NUL-terminated names.
    check(unsafe {
        libc::renameat2(
            from.as_raw_fd(),
            name.as_ptr(),
            to.as_raw_fd(),
            newname.as_ptr(),
            flags,
        )
    })
}

/// A new name for the inode (through /proc/self/fd, which needs no CAP_DAC_READ_SEARCH
/// unlike AT_EMPTY_PATH).
pub(super) fn link(node: BorrowedFd, dir: BorrowedFd, name: &CStr) -> Result<(), Errno> {
    let p = proc_path(node);
    // SAFETY: valid strings and directory descriptor.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            p.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
}

/// The directory `node` opened for listing or fsync.
pub(super) fn open_dir(node: BorrowedFd) -> Result<File, Errno> {
    reopen(node, libc::O_RDONLY | libc::O_DIRECTORY)
}

/// The path that lists an open directory with std::fs::read_dir.
pub(super) fn dir_path(dir: &File) -> String {
    format!("/proc/self/fd/{}", dir.as_raw_fd())
}

/// fstatvfs of the backend.
pub(super) fn statvfs(node: BorrowedFd) -> Result<libc::statvfs, Errno> {
    // SAFETY: statvfs is plain data.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and out pointer.
    check(unsafe { libc::fstatvfs(node.as_raw_fd(), &mut s) })?;
    Ok(s)
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

// Extended attributes go through /proc/self/fd/N, which reaches the inode itself. A
// symbolic link cannot be reached that way without following it: its list is empty,
// get answers ENODATA and set/remove EPERM (Linux refuses user.* xattrs on symbolic
// links anyway; trusted.* and security.* on links are not passed through).

/// getxattr.
pub(super) fn getxattr(node: BorrowedFd, symlink: bool, name: &OsStr, size: u32, reply: ReplyXattr) {
    let r = (|| {
        if symlink {
            return Err(Errno::from_i32(libc::ENODATA));
        }
        let (c, n) = (proc_path(node), cname(name)?);
        // SAFETY: valid NUL-terminated strings; buf/len describe a valid buffer or null/0.
        read_sized(|buf, len| unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf, len) })
    })();
    reply_sized(reply, size, r);
}

/// listxattr.
pub(super) fn listxattr(node: BorrowedFd, symlink: bool, size: u32, reply: ReplyXattr) {
    if symlink {
        return reply_sized(reply, size, Ok(Vec::new()));
    }
    let c = proc_path(node);
    // SAFETY: valid NUL-terminated path; buf/len describe a valid buffer or null/0.
    let r = read_sized(|buf, len| unsafe { libc::listxattr(c.as_ptr(), buf.cast(), len) });
    reply_sized(reply, size, r);
}

/// setxattr.
pub(super) fn setxattr(
    node: BorrowedFd,
    symlink: bool,
    name: &OsStr,
    value: &[u8],
    flags: i32,
) -> Result<(), Errno> {
    if symlink {
        return Err(Errno::EPERM);
    }
    let (c, n) = (proc_path(node), cname(name)?);
    // SAFETY: valid strings and a value slice that outlives the call.
    check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) })
}

/// removexattr.
pub(super) fn removexattr(node: BorrowedFd, symlink: bool, name: &OsStr) -> Result<(), Errno> {
    if symlink {
        return Err(Errno::EPERM);
    }
    let (c, n) = (proc_path(node), cname(name)?);
    // SAFETY: valid NUL-terminated strings.
    check(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) })
}
