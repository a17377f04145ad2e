//! The exported `extern "C"` functions. Each body runs inside `call`, which catches
//! panics (-EIO), records the message of a failure for `ckptfs_last_error()` and returns
//! `-errno`. All pointer handling of the crate is in this module.

mod files;
mod namespace;
mod pool;
mod region;
#[cfg(test)]
mod tests;

pub use files::*;
pub use namespace::*;
pub use pool::*;
pub use region::*;

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

pub(crate) fn efault(what: &str) -> CapiError {
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

/// Write `v` through an output pointer argument (EFAULT when NULL).
///
/// # Safety
/// `p` is NULL or valid for writing a `T` (no alignment needed).
pub(crate) unsafe fn write_out<T>(p: *mut T, v: T, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(efault(what));
    }
    // SAFETY: non-NULL and writable per the caller's contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Copy `items` into `buf` as consecutive NUL-terminated strings, as `listxattr(2)`
/// does: returns the bytes of the whole list; with `buf` NULL and `len` 0 only the
/// length; ERANGE when `len` is smaller; EFAULT for `buf` NULL with `len` > 0.
///
/// # Safety
/// `buf` is NULL or valid for writing `len` bytes.
pub(crate) unsafe fn copy_list_out(
    items: &[String],
    buf: *mut c_char,
    len: usize,
    what: &str,
) -> Result<i64> {
    let total: usize = items.iter().map(|s| s.len() + 1).sum();
    if buf.is_null() {
        return if len == 0 {
            Ok(total as i64)
        } else {
            Err(efault("buffer"))
        };
    }
    if total > len {
        return Err(CapiError::new(
            libc::ERANGE,
            format!("{what} needs {total} bytes, the buffer holds {len}"),
        ));
    }
    let mut at = 0;
    for s in items {
        // SAFETY: at + s.len() + 1 <= total <= len bytes are writable per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.add(at).cast::<u8>(), s.len());
            buf.add(at + s.len()).write(0);
        }
        at += s.len() + 1;
    }
    Ok(total as i64)
}

/// Resolve `path` and run `f` on it; failures name the operation and the caller's path.
pub(crate) fn at<T>(path: &str, op: &str, f: impl FnOnce(state::Resolved) -> Result<T>) -> Result<T> {
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
        FileKind::Symlink => (KIND_SYMLINK, libc::S_IFLNK),
        k => (KIND_SPECIAL, k.mode_bits()),
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
            // The segment's directory is a node setting, not in the struct (its layout
            // is fixed): CKPTFS_SHM_DIR, as for `opts == NULL`.
            shm_dir: shm_dir_from_env()?,
            ..Default::default()
        },
        how,
    ))
}

/// `CKPTFS_SHM_DIR` resolved by the settings layer alone (the other variables are not
/// looked at: explicit options replace them).
fn shm_dir_from_env() -> Result<Option<PathBuf>, CapiError> {
    let only = |k: &str| {
        (k == "CKPTFS_SHM_DIR")
            .then(|| std::env::var("CKPTFS_SHM_DIR").ok())
            .flatten()
    };
    let s = ckptfs_settings::from_env(&only).map_err(|e| CapiError::new(libc::EINVAL, e.to_string()))?;
    Ok(s.store.shm_dir)
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

/// Remove the store `name` (its segment and spill file). -EBUSY while another process
/// uses it (a FUSE mount, a node daemon, a program under the shim; the message names
/// them), as `ckptfs destroy` without `--force`.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_destroy_store(name: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let name = unsafe { cstr(name, "name") }?;
        // The segment's directory comes from the environment (CKPTFS_SHM_DIR), as for
        // every other store call of this process.
        let dir = crate::env::options_from_env().ok().and_then(|o| o.shm_dir);
        Store::destroy_in(dir.as_deref(), name)?;
        // The state and lock files of the store's agent, node daemon and datasets, in
        // the caller's runtime directory.
        ckptfs_partner::runtime_files::remove_store_files(name);
        Ok(0)
    }) as c_int
}
