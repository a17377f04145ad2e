//! `ckptfs_pool_*`: the aggregate memory pool ([`crate::pool`]). 0, a count or a handle
//! on success; -errno on failure.

use super::{buf, buf_mut, call, cstr, opt_cstr};
use crate::pool;
use std::ffi::{c_char, c_int, c_void};

/// Connect to the pool of `cluster_file` (NULL: `CKPTFS_CLUSTER`) as the client of node
/// `node_id` (NULL: `CKPTFS_NODE_ID`, else the manager's node), with a write buffer of
/// `buffer` bytes (0: 64 MiB). Returns a client handle (>= 0) or -errno.
///
/// # Safety
/// `cluster_file` and `node_id` are NULL or C strings.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_pool_connect(
    cluster_file: *const c_char,
    node_id: *const c_char,
    buffer: u64,
) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let file = unsafe { opt_cstr(cluster_file, "cluster file") }?;
        // SAFETY: forwarded contract.
        let node = unsafe { opt_cstr(node_id, "node id") }?;
        pool::connect(file.as_deref(), node.as_deref(), buffer).map(i64::from)
    }) as c_int
}

/// Forget a client handle. 0 or -errno.
#[no_mangle]
pub extern "C" fn ckptfs_pool_disconnect(pool: c_int) -> c_int {
    call(|| pool::disconnect(pool).map(|_| 0)) as c_int
}

/// Start writing a new version of the pool file `path`: a descriptor or -errno.
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_pool_create(pool: c_int, path: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        pool::create(pool, path).map(i64::from)
    }) as c_int
}

/// Open the newest version of the pool file `path` for reading: a descriptor or -errno.
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_pool_open(pool: c_int, path: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        pool::open(pool, path).map(i64::from)
    }) as c_int
}

/// Append `count` bytes to a file being written: `count` or -errno.
///
/// # Safety
/// `data` is valid for reads of `count` bytes (may be NULL when `count` is 0).
#[no_mangle]
pub unsafe extern "C" fn ckptfs_pool_write(fd: c_int, data: *const c_void, count: usize) -> isize {
    call(|| {
        // SAFETY: forwarded contract.
        let b = unsafe { buf(data, count) }?;
        pool::write(fd, b).map(|n| n as i64)
    }) as isize
}

/// Read up to `count` bytes at `offset` of a file open for reading: the bytes read (0 at
/// the end) or -errno.
///
/// # Safety
/// `out` is valid for writes of `count` bytes (may be NULL when `count` is 0).
#[no_mangle]
pub unsafe extern "C" fn ckptfs_pool_pread(fd: c_int, out: *mut c_void, count: usize, offset: u64) -> isize {
    call(|| {
        // SAFETY: forwarded contract.
        let b = unsafe { buf_mut(out, count) }?;
        pool::pread(fd, b, offset).map(|n| n as i64)
    }) as isize
}

/// The size of an open pool file (for a write: the bytes taken so far), or -errno.
#[no_mangle]
pub extern "C" fn ckptfs_pool_size(fd: c_int) -> i64 {
    call(|| pool::size(fd).map(|n| n as i64))
}

/// Close a pool file. A write is committed: the version is visible, and its bytes are
/// held by the benefactors, only when this returns 0; -errno otherwise (nothing
/// published). The descriptor is gone either way.
#[no_mangle]
pub extern "C" fn ckptfs_pool_close(fd: c_int) -> c_int {
    call(|| pool::close(fd).map(|_| 0)) as c_int
}

/// Remove every version of the pool file `path`. 0 or -errno (-ENOENT: no such file).
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_pool_unlink(pool: c_int, path: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        pool::unlink(pool, path).map(|_| 0)
    }) as c_int
}
