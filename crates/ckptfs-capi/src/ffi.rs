//! The exported `extern "C"` functions. Each body runs inside `call`, which catches
//! panics (-EIO), records the message of a failure for `ckptfs_last_error()` and returns
//! `-errno`. All pointer handling of the crate is in this module.

use crate::env;
use crate::error::{last_error_ptr, set_last_error, CapiError, Result};
use crate::state::{self, Attach};
use crate::types::*;
use ckptfs_store::{ChunkLocation, FileKind, OpenFlags, Stat, Store, StoreOptions, WriteState};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::SeekFrom;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;

/// Largest byte count moved by one read or write, as Linux (`MAX_RW_COUNT`): larger
/// requests are short.
const MAX_IO: usize = 0x7fff_f000;

/// Run an ABI body: value on success, `-errno` on failure, `-EIO` on panic.
pub(crate) fn call(f: impl FnOnce() -> Result<i64>) -> i64 {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_last_error(&e.msg);
            -(e.errno as i64)
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            // Dropping a payload can itself panic; leak it rather than unwind into C.
            std::mem::forget(payload);
            set_last_error(&format!(
                "internal error (panic caught at the C boundary): {what}"
            ));
            -(libc::EIO as i64)
        }
    }
}

fn efault(what: &str) -> CapiError {
    CapiError::new(libc::EFAULT, format!("{what} is NULL"))
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn cstr<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(efault(what));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| CapiError::new(libc::EINVAL, format!("{what} is not valid UTF-8")))
}

/// An optional C string argument: NULL or "" is None.
///
/// # Safety
/// As [`cstr`].
unsafe fn opt_cstr(p: *const c_char, what: &str) -> Result<Option<String>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    let s = unsafe { cstr(p, what) }?;
    Ok((!s.is_empty()).then(|| s.to_string()))
}

/// A writable buffer argument, capped at [`MAX_IO`].
///
/// # Safety
/// `p` is NULL or valid for writes of `n` bytes.
unsafe fn buf_mut<'a>(p: *mut c_void, n: usize) -> Result<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(efault("buffer"));
    }
    // SAFETY: valid for n >= min(n, MAX_IO) bytes per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n.min(MAX_IO)) })
}

/// A readable buffer argument, capped at [`MAX_IO`].
///
/// # Safety
/// `p` is NULL or valid for reads of `n` bytes.
unsafe fn buf<'a>(p: *const c_void, n: usize) -> Result<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(efault("buffer"));
    }
    // SAFETY: valid for n >= min(n, MAX_IO) bytes per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n.min(MAX_IO)) })
}

/// Resolve `path` and run `f` on it; failures name the operation and the caller's path.
fn at<T>(path: &str, op: &str, f: impl FnOnce(state::Resolved) -> Result<T>) -> Result<T> {
    state::resolve(path)
        .and_then(f)
        .map_err(|e| e.context(format_args!("{op} {path}")))
}

fn offset(o: i64) -> Result<u64> {
    u64::try_from(o).map_err(|_| CapiError::new(libc::EINVAL, format!("negative offset {o}")))
}

fn to_c_stat(s: &Stat) -> CkptfsStat {
    let (kind, ifmt) = match s.kind {
        FileKind::File => (KIND_FILE, libc::S_IFREG),
        FileKind::Dir => (KIND_DIR, libc::S_IFDIR),
    };
    CkptfsStat {
        ino: s.ino,
        size: s.size,
        allocated: s.allocated,
        mtime_ns: s.mtime_ns,
        ctime_ns: s.ctime_ns,
        mode: ifmt | (s.mode & 0o7777),
        kind,
        state: match s.state {
            WriteState::Complete => STATE_COMPLETE,
            WriteState::Writing => STATE_WRITING,
            WriteState::Incomplete => STATE_INCOMPLETE,
            WriteState::Failed => STATE_FAILED,
        },
        chunks: s.chunks,
        spill_chunks: s.spill_chunks,
        generation: s.generation,
    }
}

/// Store options and attach mode from a `ckptfs_options` (NULL: the environment).
///
/// # Safety
/// `opts` is NULL or points to a `ckptfs_options` whose `size` field tells its size.
unsafe fn mount_options(opts: *const CkptfsOptions) -> Result<(StoreOptions, Attach)> {
    if opts.is_null() {
        return Ok((env::options_from_env()?, Attach::OpenOrCreate));
    }
    // Read the size field alone first: a caller built against another version of the
    // header may have passed a smaller structure.
    // SAFETY: every version of the structure starts with the u32 size field.
    let size = unsafe { opts.cast::<u32>().read_unaligned() };
    if size as usize != std::mem::size_of::<CkptfsOptions>() {
        return Err(CapiError::new(
            libc::EINVAL,
            format!(
                "ckptfs_options.size is {size}, this library expects {} (initialize with CKPTFS_OPTIONS_INIT)",
                std::mem::size_of::<CkptfsOptions>()
            ),
        ));
    }
    // SAFETY: the caller's structure has our full size.
    let o = unsafe { &*opts };
    if o.flags & !(MOUNT_ATTACH | MOUNT_EXCL | MOUNT_PRIVATE) != 0 {
        return Err(CapiError::new(
            libc::EINVAL,
            format!("unknown mount flags {:#x}", o.flags),
        ));
    }
    let how = match (o.flags & MOUNT_ATTACH != 0, o.flags & MOUNT_EXCL != 0) {
        (false, false) => Attach::OpenOrCreate,
        (true, false) => Attach::Existing,
        (false, true) => Attach::New,
        (true, true) => {
            return Err(CapiError::new(
                libc::EINVAL,
                "CKPTFS_MOUNT_ATTACH and CKPTFS_MOUNT_EXCL exclude each other",
            ))
        }
    };
    let nz = |v: u64| (v != 0).then_some(v);
    Ok((
        StoreOptions {
            // SAFETY: NULL or a C string, per this function's contract.
            name: unsafe { opt_cstr(o.store, "ckptfs_options.store") }?.unwrap_or_default(),
            mem_size: nz(o.mem_size),
            chunk_size: nz(o.chunk_size),
            max_files: (o.max_files != 0).then_some(o.max_files),
            // SAFETY: as above.
            spill_dir: unsafe { opt_cstr(o.spill_dir, "ckptfs_options.spill_dir") }?.map(PathBuf::from),
            spill_size: nz(o.spill_size),
            private: o.flags & MOUNT_PRIVATE != 0,
            ..Default::default()
        },
        how,
    ))
}

// ------------------------------------------------------------------------ library

/// The library version, e.g. `"0.1.0"` (compare with `CKPTFS_VERSION`).
#[no_mangle]
pub extern "C" fn ckptfs_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The message of this thread's last failed call ("" if none). The pointer stays valid
/// for the thread's lifetime; the next failing call replaces the text.
#[no_mangle]
pub extern "C" fn ckptfs_last_error() -> *const c_char {
    last_error_ptr()
}

/// Attach (or create) a store and make it visible under `prefix`.
///
/// # Safety
/// `prefix` is a C string; `opts` is NULL or a `ckptfs_options` set up with
/// `CKPTFS_OPTIONS_INIT`.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_mount(prefix: *const c_char, opts: *const CkptfsOptions) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let prefix = unsafe { cstr(prefix, "prefix") }?;
        let r = (|| {
            // SAFETY: forwarded contract.
            let (o, how) = unsafe { mount_options(opts) }?;
            state::mount(prefix, &o, how)
        })();
        r.map_err(|e| e.context(format_args!("mount {prefix}")))?;
        Ok(0)
    }) as c_int
}

/// The settings `ckptfs_mount(prefix, NULL)` would use, resolved from the environment,
/// as one JSON object (the text `ckptfs config --json` shows as `resolved`): copies it
/// with a NUL into `buf` and returns its length. With `buf == NULL && len == 0` only
/// returns the length. -EINVAL (message in `ckptfs_last_error`) when a `CKPTFS_*`
/// variable is invalid; -ERANGE when `len` is too small.
///
/// # Safety
/// `buf` is NULL or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_settings(buf: *mut c_char, len: usize) -> isize {
    call(|| {
        let json = env::settings_from(&|k| std::env::var(k).ok())?.to_json();
        // SAFETY: forwarded contract.
        unsafe { copy_str_out(&json, buf, len, "settings") }
    }) as isize
}

/// Remove the mount of `prefix` (EBUSY while descriptors are open on it).
///
/// # Safety
/// `prefix` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_unmount(prefix: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let prefix = unsafe { cstr(prefix, "prefix") }?;
        state::unmount(prefix).map_err(|e| e.context(format_args!("unmount {prefix}")))?;
        Ok(0)
    }) as c_int
}

/// Remove the store `name` (its segment and spill file).
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_destroy_store(name: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        Store::destroy(unsafe { cstr(name, "name") }?)?;
        Ok(0)
    }) as c_int
}

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

// ------------------------------------------------------------------------ namespace

/// Attributes of `path`.
///
/// # Safety
/// `path` is a C string; `st` is valid for writing one `struct ckptfs_stat`.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_stat(path: *const c_char, st: *mut CkptfsStat) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        if st.is_null() {
            return Err(efault("stat buffer"));
        }
        let s = at(path, "stat", |r| Ok(to_c_stat(&r.store.stat(&r.path)?)))?;
        // SAFETY: non-NULL and writable per the contract.
        unsafe { st.write_unaligned(s) };
        Ok(0)
    }) as c_int
}

/// Remove a file (open descriptors keep it readable until closed).
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_unlink(path: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        at(path, "unlink", |r| Ok(r.store.unlink(&r.path)?))?;
        Ok(0)
    }) as c_int
}

/// Rename atomically, replacing the target.
///
/// # Safety
/// `from` and `to` are C strings.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_rename(from: *const c_char, to: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let (from, to) = unsafe { (cstr(from, "from")?, cstr(to, "to")?) };
        (|| {
            let (store, f, t) = state::resolve_pair(from, to)?;
            Ok(store.rename(&f, &t)?)
        })()
        .map_err(|e: CapiError| e.context(format_args!("rename {from} -> {to}")))?;
        Ok(0)
    }) as c_int
}

/// Create a directory.
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_mkdir(path: *const c_char, mode: libc::mode_t) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        at(path, "mkdir", |r| {
            Ok(r.store.mkdir(&r.path, mode & 0o7777).map(|_| ())?)
        })?;
        Ok(0)
    }) as c_int
}

/// Remove an empty directory.
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_rmdir(path: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        at(path, "rmdir", |r| Ok(r.store.rmdir(&r.path)?))?;
        Ok(0)
    }) as c_int
}

/// Open a directory for [`ckptfs_readdir`]; returns a descriptor (close it with
/// `ckptfs_close`).
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_opendir(path: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { ckptfs_open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0) }
}

/// Next entry of a directory descriptor: 1 with `*ent` filled, 0 at the end.
///
/// # Safety
/// `ent` is valid for writing one `ckptfs_dirent`.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_readdir(fd: c_int, ent: *mut CkptfsDirent) -> c_int {
    call(|| {
        if ent.is_null() {
            return Err(efault("dirent buffer"));
        }
        let next = state::with_desc(fd, |d| {
            if !d.fh.is_dir() {
                return Err(CapiError::new(
                    libc::ENOTDIR,
                    format!("descriptor {fd} is not a directory"),
                ));
            }
            if d.dir.is_none() {
                d.dir = Some((d.fh.read_dir()?, 0));
            }
            let (entries, pos) = d.dir.as_mut().expect("just set");
            let e = entries.get(*pos).cloned();
            *pos += e.is_some() as usize;
            Ok(e)
        })?;
        let Some(e) = next else { return Ok(0) };
        let mut out = CkptfsDirent {
            ino: e.ino,
            kind: match e.kind {
                FileKind::File => KIND_FILE,
                FileKind::Dir => KIND_DIR,
            },
            namelen: 0,
            name: [0; 256],
        };
        // Names are at most 255 bytes; truncate defensively, keeping the NUL.
        let n = e.name.len().min(255);
        for (dst, src) in out.name.iter_mut().zip(&e.name.as_bytes()[..n]) {
            *dst = *src as c_char;
        }
        out.namelen = n as u32;
        // SAFETY: non-NULL and writable per the contract.
        unsafe { ent.write_unaligned(out) };
        Ok(1)
    }) as c_int
}

// ------------------------------------------------------------------------ data region

/// The memory data region of the store holding `path`, as mapped in this process.
/// Each output pointer may be NULL if that value is not wanted.
///
/// # Safety
/// `path` is a C string; each output pointer is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_get_data_region(
    path: *const c_char,
    base: *mut *mut c_void,
    size: *mut usize,
    chunk_size: *mut usize,
) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        let d = at(path, "data region", |r| Ok(r.store.data_region()))?;
        // SAFETY: each pointer is NULL or writable per the contract.
        unsafe {
            if !base.is_null() {
                base.write_unaligned(d.base as *mut c_void);
            }
            if !size.is_null() {
                size.write_unaligned(d.len as usize);
            }
            if !chunk_size.is_null() {
                chunk_size.write_unaligned(d.chunk_size as usize);
            }
        }
        Ok(0)
    }) as c_int
}

/// The chunks of file `path` in logical order. Returns the number of chunks; with
/// `out == NULL && max == 0` only counts them; ERANGE if there are more than `max`.
///
/// # Safety
/// `path` is a C string; `out` is NULL or valid for writing `max` entries.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_get_chunk_list(
    path: *const c_char,
    out: *mut CkptfsChunkMeta,
    max: usize,
) -> isize {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        let list = at(path, "chunk list", |r| Ok(r.store.chunk_list(&r.path)?))?;
        if out.is_null() {
            return if max == 0 {
                Ok(list.len() as i64)
            } else {
                Err(efault("chunk list buffer"))
            };
        }
        if list.len() > max {
            return Err(CapiError::new(
                libc::ERANGE,
                format!("chunk list {path}: {} chunks, the buffer holds {max}", list.len()),
            ));
        }
        for (i, c) in list.iter().enumerate() {
            let (location, offset) = match c.location {
                ChunkLocation::Memory(o) => (CHUNK_MEMORY, o),
                ChunkLocation::Spill(o) => (CHUNK_SPILL, o),
            };
            let m = CkptfsChunkMeta {
                logical: c.logical,
                location,
                offset,
                length: c.len,
                written: c.written,
                crc32c: c.crc.unwrap_or(0),
                crc_valid: c.crc.is_some() as u32,
                chunk_id: c.chunk_id,
            };
            // SAFETY: i < list.len() <= max entries are writable per the contract.
            unsafe { out.add(i).write_unaligned(m) };
        }
        Ok(list.len() as i64)
    }) as isize
}

/// The spill file of the store holding `path`: copies its path (NUL-terminated) into
/// `buf` and returns its length, 0 if the store has no spill file. With
/// `buf == NULL && len == 0` only returns the length; ERANGE if `len` is too small.
///
/// # Safety
/// `path` is a C string; `buf` is NULL or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_get_spill_path(path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        let sp = at(path, "spill path", |r| Ok(r.store.info().spill_path))?;
        let s = sp.as_ref().and_then(|p| p.to_str()).unwrap_or("");
        // SAFETY: forwarded contract.
        unsafe { copy_str_out(s, buf, len, "spill path") }
    }) as isize
}

/// Copy `s` with a NUL into `buf` and return its length; with `buf == NULL && len == 0`
/// only the length. ERANGE if `len` is too small, EFAULT for NULL with `len > 0`.
///
/// # Safety
/// `buf` is NULL or valid for writing `len` bytes.
pub(crate) unsafe fn copy_str_out(s: &str, buf: *mut c_char, len: usize, what: &str) -> Result<i64> {
    if buf.is_null() {
        return if len == 0 {
            Ok(s.len() as i64)
        } else {
            Err(efault("buffer"))
        };
    }
    if s.len() >= len {
        return Err(CapiError::new(
            libc::ERANGE,
            format!("{what} needs {} bytes, the buffer holds {len}", s.len() + 1),
        ));
    }
    // SAFETY: s.len() + 1 <= len bytes are writable per the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        buf.add(s.len()).write(0);
    }
    Ok(s.len() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckptfs_store::StoreError;
    use std::ffi::CString;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    fn last_error() -> String {
        // SAFETY: ckptfs_last_error never returns NULL and the string is NUL-terminated.
        unsafe { CStr::from_ptr(ckptfs_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    /// A store mounted at a unique prefix, unmounted and destroyed on drop.
    struct TestMount {
        prefix: String,
        store: String,
    }

    impl TestMount {
        fn new(tag: &str, mem: u64, max_files: u32) -> Self {
            let store = format!("capi-ut-{tag}-{}", std::process::id());
            let _ = Store::destroy(&store);
            let name = c(&store);
            let opts = CkptfsOptions {
                size: std::mem::size_of::<CkptfsOptions>() as u32,
                flags: MOUNT_EXCL,
                store: name.as_ptr(),
                mem_size: mem,
                chunk_size: 64 << 10,
                spill_dir: std::ptr::null(),
                spill_size: 0,
                max_files,
            };
            let prefix = format!("/ut-{tag}");
            assert_eq!(
                // SAFETY: valid C strings and options.
                unsafe { ckptfs_mount(c(&prefix).as_ptr(), &opts) },
                0,
                "{}",
                last_error()
            );
            TestMount { prefix, store }
        }

        fn path(&self, rel: &str) -> CString {
            c(&format!("{}/{rel}", self.prefix))
        }
    }

    impl Drop for TestMount {
        fn drop(&mut self) {
            // SAFETY: valid C strings.
            unsafe {
                ckptfs_unmount(c(&self.prefix).as_ptr());
                ckptfs_destroy_store(c(&self.store).as_ptr());
            }
        }
    }

    #[test]
    fn panic_becomes_eio_with_message() {
        let r = call(|| panic!("boom in the store"));
        assert_eq!(r, -(libc::EIO as i64));
        assert!(last_error().contains("boom in the store"), "{}", last_error());
        let r = call(|| std::panic::panic_any(42u8));
        assert_eq!(r, -(libc::EIO as i64));
        assert!(last_error().contains("panic"));
    }

    #[test]
    fn store_errors_map_through_store_errno() {
        let cases = [
            StoreError::NotFound("/x".into()),
            StoreError::Exists("/x".into()),
            StoreError::NotDir("/x".into()),
            StoreError::IsDir("/x".into()),
            StoreError::NotEmpty("/x".into()),
            StoreError::NameTooLong("x".into()),
            StoreError::NoSpace,
            StoreError::TooManyFiles(8),
            StoreError::BadHandle("not open for reading"),
            StoreError::Invalid("x".into()),
            StoreError::FileTooLarge,
            StoreError::BadSegment {
                path: "/dev/shm/ckptfs.x".into(),
                reason: "bad magic".into(),
            },
            StoreError::Io {
                context: "spill".into(),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            },
        ];
        for e in cases {
            let (errno, msg) = (e.errno(), e.to_string());
            assert!(errno > 0);
            let r = call(move || Err(e.into()));
            assert_eq!(r, -(errno as i64), "{msg}");
            assert_eq!(last_error(), msg);
        }
        assert_eq!(call(|| Ok(7)), 7);
    }

    #[test]
    fn last_error_is_per_thread() {
        assert_eq!(
            call(|| Err(CapiError::new(libc::EPERM, "only here"))),
            -(libc::EPERM as i64)
        );
        let other = std::thread::spawn(last_error).join().unwrap();
        assert_eq!(other, "");
        assert_eq!(last_error(), "only here");
        set_last_error("with\0nul");
        assert_eq!(last_error(), "withnul");
    }

    #[test]
    fn null_pointers_are_efault() {
        let m = TestMount::new("null", 1 << 20, 16);
        let p = m.path("f");
        let efault = -libc::EFAULT;
        let mut st = CkptfsStat::default();
        // SAFETY: NULL is what is being tested; every other pointer is valid.
        unsafe {
            assert_eq!(ckptfs_mount(std::ptr::null(), std::ptr::null()), efault);
            assert_eq!(ckptfs_unmount(std::ptr::null()), efault);
            assert_eq!(ckptfs_destroy_store(std::ptr::null()), efault);
            assert_eq!(ckptfs_open(std::ptr::null(), libc::O_RDONLY, 0), efault);
            assert_eq!(ckptfs_stat(std::ptr::null(), &mut st), efault);
            assert_eq!(ckptfs_stat(p.as_ptr(), std::ptr::null_mut()), efault);
            assert_eq!(ckptfs_unlink(std::ptr::null()), efault);
            assert_eq!(ckptfs_rename(p.as_ptr(), std::ptr::null()), efault);
            assert_eq!(ckptfs_mkdir(std::ptr::null(), 0o755), efault);
            assert_eq!(ckptfs_rmdir(std::ptr::null()), efault);
            assert_eq!(ckptfs_opendir(std::ptr::null()), efault);
            assert_eq!(
                ckptfs_get_chunk_list(std::ptr::null(), std::ptr::null_mut(), 0),
                efault as isize
            );
            assert_eq!(
                ckptfs_get_spill_path(std::ptr::null(), std::ptr::null_mut(), 0),
                efault as isize
            );
            let fd = ckptfs_open(p.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o644);
            assert!(fd >= 0, "{}", last_error());
            assert_eq!(ckptfs_write(fd, std::ptr::null(), 3), efault as isize);
            assert_eq!(ckptfs_read(fd, std::ptr::null_mut(), 3), efault as isize);
            assert_eq!(ckptfs_pwrite(fd, std::ptr::null(), 3, 0), efault as isize);
            assert_eq!(ckptfs_pread(fd, std::ptr::null_mut(), 3, 0), efault as isize);
            assert_eq!(ckptfs_write(fd, std::ptr::null(), 0), 0);
            assert_eq!(ckptfs_read(fd, std::ptr::null_mut(), 0), 0);
            assert_eq!(ckptfs_fstat(fd, std::ptr::null_mut()), efault);
            assert_eq!(ckptfs_readdir(fd, std::ptr::null_mut()), efault);
            assert_eq!(
                ckptfs_get_chunk_list(p.as_ptr(), std::ptr::null_mut(), 4),
                efault as isize
            );
            assert_eq!(ckptfs_close(fd), 0);
        }
    }

    #[test]
    fn roundtrip_bad_descriptors_and_offsets() {
        let m = TestMount::new("rt", 1 << 20, 16);
        let p = m.path("data");
        // SAFETY: valid pointers and lengths throughout.
        unsafe {
            let fd = ckptfs_open(p.as_ptr(), libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o600);
            assert!(fd >= 0);
            assert_eq!(ckptfs_write(fd, b"abcdef".as_ptr().cast(), 6), 6);
            assert_eq!(ckptfs_pwrite(fd, b"Z".as_ptr().cast(), 1, 100_000), 1);
            assert_eq!(ckptfs_lseek(fd, 0, libc::SEEK_END), 100_001);
            let mut buf = vec![0xffu8; 100_010];
            assert_eq!(ckptfs_pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0), 100_001);
            assert_eq!(&buf[..6], b"abcdef");
            assert!(buf[6..100_000].iter().all(|&b| b == 0));
            assert_eq!(buf[100_000], b'Z');
            assert_eq!(
                ckptfs_open(p.as_ptr(), libc::O_TMPFILE | libc::O_WRONLY, 0o600),
                -libc::EOPNOTSUPP
            );
            let einval = -(libc::EINVAL as isize);
            assert_eq!(ckptfs_pread(fd, buf.as_mut_ptr().cast(), 1, -1), einval);
            assert_eq!(ckptfs_pwrite(fd, buf.as_ptr().cast(), 1, i64::MIN), einval);
            assert_eq!(ckptfs_lseek(fd, -1, libc::SEEK_SET), -(libc::EINVAL as i64));
            assert_eq!(ckptfs_lseek(fd, 0, libc::SEEK_DATA), -(libc::EINVAL as i64));
            assert_eq!(ckptfs_ftruncate(fd, -5), -libc::EINVAL);
            let mut st = CkptfsStat::default();
            assert_eq!(ckptfs_fstat(fd, &mut st), 0);
            assert_eq!((st.size, st.kind, st.state), (100_001, KIND_FILE, STATE_WRITING));
            assert_eq!(st.mode, libc::S_IFREG | 0o600);
            assert_eq!(ckptfs_close(fd), 0);
            for bad in [fd, -1, i32::MIN, i32::MAX, MAX_DESCRIPTORS as i32] {
                assert_eq!(ckptfs_close(bad), -libc::EBADF);
                assert_eq!(
                    ckptfs_read(bad, buf.as_mut_ptr().cast(), 1),
                    -(libc::EBADF as isize)
                );
                assert_eq!(ckptfs_lseek(bad, 0, libc::SEEK_SET), -(libc::EBADF as i64));
                assert_eq!(ckptfs_fsync(bad), -libc::EBADF);
            }
            assert_eq!(ckptfs_stat(p.as_ptr(), &mut st), 0);
            assert_eq!(st.state, STATE_COMPLETE);

            // The data region holds the bytes the chunk list points at.
            let (mut base, mut size, mut cs) = (std::ptr::null_mut(), 0usize, 0usize);
            assert_eq!(
                ckptfs_get_data_region(p.as_ptr(), &mut base, &mut size, &mut cs),
                0
            );
            assert_eq!((size, cs), (1 << 20, 64 << 10));
            let n = ckptfs_get_chunk_list(p.as_ptr(), std::ptr::null_mut(), 0);
            assert_eq!(n, 2);
            let mut list = vec![CkptfsChunkMeta::default(); 2];
            assert_eq!(
                ckptfs_get_chunk_list(p.as_ptr(), list.as_mut_ptr(), 1),
                -(libc::ERANGE as isize)
            );
            assert_eq!(ckptfs_get_chunk_list(p.as_ptr(), list.as_mut_ptr(), 2), 2);
            assert_eq!((list[0].logical, list[1].logical), (0, 1));
            assert_eq!(list[0].location, CHUNK_MEMORY);
            let first = std::slice::from_raw_parts(base.cast::<u8>().add(list[0].offset as usize), 6);
            assert_eq!(first, b"abcdef");
            assert_eq!(list[0].crc_valid, 1);
            assert_eq!(
                list[0].crc32c,
                ckptfs_store::checksum::crc32c(std::slice::from_raw_parts(
                    base.cast::<u8>().add(list[0].offset as usize),
                    list[0].written as usize
                ))
            );
        }
    }

    #[test]
    fn mount_options_are_checked() {
        let mut o = CkptfsOptions {
            size: 12,
            flags: 0,
            store: std::ptr::null(),
            mem_size: 0,
            chunk_size: 0,
            spill_dir: std::ptr::null(),
            spill_size: 0,
            max_files: 0,
        };
        let prefix = c("/ut-opts");
        // SAFETY: valid pointers.
        unsafe {
            assert_eq!(ckptfs_mount(prefix.as_ptr(), &o), -libc::EINVAL);
            assert!(last_error().contains("CKPTFS_OPTIONS_INIT"));
            o.size = std::mem::size_of::<CkptfsOptions>() as u32;
            o.flags = 0x80;
            assert_eq!(ckptfs_mount(prefix.as_ptr(), &o), -libc::EINVAL);
            o.flags = MOUNT_ATTACH | MOUNT_EXCL;
            assert_eq!(ckptfs_mount(prefix.as_ptr(), &o), -libc::EINVAL);
            let none = c("capi-ut-never-created");
            o.flags = MOUNT_ATTACH;
            o.store = none.as_ptr();
            assert_eq!(ckptfs_mount(prefix.as_ptr(), &o), -libc::ENOENT);
            assert!(last_error().starts_with("mount /ut-opts: "), "{}", last_error());
            assert_eq!(ckptfs_unmount(prefix.as_ptr()), -libc::EINVAL);
        }
    }

    #[test]
    fn descriptors_are_unique_across_threads() {
        let m = TestMount::new("thr", 1 << 20, 64);
        let p = m.path("shared");
        // SAFETY: valid C strings.
        let fd = unsafe { ckptfs_open(p.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644) };
        assert_eq!(ckptfs_close(fd), 0);
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || {
                    // SAFETY: valid C strings.
                    let fds: Vec<i32> = (0..50)
                        .map(|_| unsafe { ckptfs_open(p.as_ptr(), libc::O_RDONLY, 0) })
                        .collect();
                    fds
                })
            })
            .collect();
        let mut all: Vec<i32> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        assert!(all.iter().all(|&fd| fd >= 0));
        all.sort_unstable();
        let n = all.len();
        all.dedup();
        assert_eq!(all.len(), n, "a descriptor was handed out twice");
        for fd in all {
            assert_eq!(ckptfs_close(fd), 0);
        }
    }
}
