//! Calls on descriptors: open, close, read/write (positional too), seek, truncate, fsync, fstat.

use super::*;

// ------------------------------------------------------------------------ files
/// Open or create a file, or open a directory; returns a ckptfs descriptor.
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_open(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        // O_TMPFILE includes the O_DIRECTORY bit: refuse it before it reads as a directory.
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Err(CapiError::new(
                libc::EOPNOTSUPP,
                format!("open {path}: O_TMPFILE is not supported"),
            ));
        }
        let fd = OpenFlags::from_posix(flags)
            .map_err(CapiError::from)
            .and_then(|fl| state::open(path, fl, mode & 0o7777))
            .map_err(|e| e.context(format_args!("open {path}")))?;
        Ok(fd as i64)
    }) as c_int
}

/// Close a descriptor. The descriptor is released even when an error is reported.
#[no_mangle]
pub extern "C" fn ckptfs_close(fd: c_int) -> c_int {
    call(|| {
        state::close(fd)?;
        Ok(0)
    }) as c_int
}

/// Read at the file position and advance it.
///
/// # Safety
/// `buf` is valid for writes of `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_read(fd: c_int, buf: *mut c_void, count: usize) -> isize {
    call(|| {
        state::with_desc(fd, |d| {
            // SAFETY: forwarded contract.
            let b = unsafe { buf_mut(buf, count) }?;
            Ok(d.fh.read(b)? as i64)
        })
    }) as isize
}

/// Write at the file position (the end with O_APPEND) and advance it.
///
/// # Safety
/// `buf` is valid for reads of `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    call(|| {
        state::with_desc(fd, |d| {
            // SAFETY: forwarded contract.
            let b = unsafe { self::buf(buf, count) }?;
            Ok(d.fh.write(b)? as i64)
        })
    }) as isize
}

/// Read at `offset` without moving the position.
///
/// # Safety
/// `buf` is valid for writes of `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_pread(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
    call(|| {
        state::with_desc(fd, |d| {
            let off = self::offset(offset)?;
            // SAFETY: forwarded contract.
            let b = unsafe { buf_mut(buf, count) }?;
            Ok(d.fh.pread(b, off)? as i64)
        })
    }) as isize
}

/// Write at `offset` without moving the position.
///
/// # Safety
/// `buf` is valid for reads of `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_pwrite(fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
    call(|| {
        state::with_desc(fd, |d| {
            let off = self::offset(offset)?;
            // SAFETY: forwarded contract.
            let b = unsafe { self::buf(buf, count) }?;
            Ok(d.fh.pwrite(b, off)? as i64)
        })
    }) as isize
}

/// Move the file position (SEEK_SET, SEEK_CUR, SEEK_END); returns the new position.
/// On a directory descriptor only `lseek(fd, 0, SEEK_SET)` (rewind) is allowed.
#[no_mangle]
pub extern "C" fn ckptfs_lseek(fd: c_int, offset: i64, whence: c_int) -> i64 {
    call(|| {
        let pos = match whence {
            libc::SEEK_SET => SeekFrom::Start(self::offset(offset)?),
            libc::SEEK_CUR => SeekFrom::Current(offset),
            libc::SEEK_END => SeekFrom::End(offset),
            _ => {
                return Err(CapiError::new(
                    libc::EINVAL,
                    format!("unsupported whence {whence}"),
                ))
            }
        };
        state::with_desc(fd, |d| {
            if d.fh.is_dir() {
                if pos != SeekFrom::Start(0) {
                    return Err(CapiError::new(
                        libc::EINVAL,
                        "a directory descriptor can only be rewound (offset 0, SEEK_SET)",
                    ));
                }
                d.dir = None;
                return Ok(0);
            }
            Ok(d.fh.seek(pos)? as i64)
        })
    })
}

/// Set the size of a file open for writing (grow with zeros or shrink).
#[no_mangle]
pub extern "C" fn ckptfs_ftruncate(fd: c_int, length: i64) -> c_int {
    call(|| {
        let len = self::offset(length)?;
        state::with_desc(fd, |d| Ok(d.fh.set_len(len).map(|_| 0)?))
    }) as c_int
}

/// Finish checksums and flush spilled data of a file.
#[no_mangle]
pub extern "C" fn ckptfs_fsync(fd: c_int) -> c_int {
    call(|| state::with_desc(fd, |d| Ok(d.fh.sync().map(|_| 0)?))) as c_int
}

/// Attributes of an open file or directory.
///
/// # Safety
/// `st` is valid for writing one `struct ckptfs_stat`.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_fstat(fd: c_int, st: *mut CkptfsStat) -> c_int {
    call(|| {
        if st.is_null() {
            return Err(efault("stat buffer"));
        }
        let s = state::with_desc(fd, |d| Ok(to_c_stat(&d.fh.stat())))?;
        // SAFETY: non-NULL and writable per the contract.
        unsafe { st.write_unaligned(s) };
        Ok(0)
    }) as c_int
}
