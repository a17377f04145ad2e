//! `statfs`/`statvfs` and their descriptor and 64-bit forms on store paths and
//! descriptors: the store's capacity and free space (memory plus spill chunks), its file
//! table, so `df`, Python's `shutil.disk_usage` and IOR's free-space check see the store.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use crate::hooks::{on_fd, on_path};
use crate::state;
use ckptfs_store::StoreInfo;
use std::ffi::{c_char, c_int};

/// Longest name component in the store (its `NAME_MAX`).
const NAME_MAX: u64 = 255;

/// `f_type` reported for the store: "ckpt" in ASCII.
pub const CKPTFS_MAGIC: i64 = 0x636b_7074;

/// Block size, total, free blocks, total and free inodes of the store.
fn figures(i: &StoreInfo) -> (u64, u64, u64, u64, u64) {
    let blocks = i.mem_chunks as u64 + i.spill_chunks as u64;
    let free = i.mem_free_chunks as u64 + i.spill_free_chunks as u64;
    let files = i.max_files as u64;
    let used = i.files as u64 + i.dirs as u64;
    (i.chunk_size, blocks, free, files, files.saturating_sub(used))
}

fn info() -> Result<StoreInfo, i32> {
    Ok(state::store()?.info())
}

/// Fill a `struct statfs` (same layout as `statfs64` on 64-bit Linux).
fn fill_statfs(out: *mut libc::statfs) -> Result<c_int, i32> {
    let (bs, blocks, free, files, ffree) = figures(&info()?);
    // SAFETY: all-zero is a valid statfs.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    s.f_type = CKPTFS_MAGIC as _;
    s.f_bsize = bs as _;
    s.f_frsize = bs as _;
    s.f_blocks = blocks;
    s.f_bfree = free;
    s.f_bavail = free;
    s.f_files = files;
    s.f_ffree = ffree;
    s.f_namelen = NAME_MAX as _;
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's struct statfs.
    unsafe { out.write(s) };
    Ok(0)
}

/// Fill a `struct statvfs` (same layout as `statvfs64` on 64-bit Linux).
fn fill_statvfs(out: *mut libc::statvfs) -> Result<c_int, i32> {
    let (bs, blocks, free, files, ffree) = figures(&info()?);
    // SAFETY: all-zero is a valid statvfs.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    s.f_bsize = bs as _;
    s.f_frsize = bs as _;
    s.f_blocks = blocks;
    s.f_bfree = free;
    s.f_bavail = free;
    s.f_files = files;
    s.f_ffree = ffree;
    s.f_favail = ffree;
    s.f_fsid = CKPTFS_MAGIC as _;
    s.f_namemax = NAME_MAX as _;
    s.f_flag = (libc::ST_NOSUID | libc::ST_NODEV) as _;
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's struct statvfs.
    unsafe { out.write(s) };
    Ok(0)
}

/// The path exists in the store (statfs of a missing path is ENOENT).
fn exists(p: &str) -> Result<(), i32> {
    crate::ops::stat(p).map(|_| ())
}

macro_rules! statfs_path {
    ($name:ident, $ty:ty, $fill:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: *const c_char, out: *mut $ty) -> c_int {
            // SAFETY: forwarding the caller's arguments.
            unsafe {
                on_path(
                    libc::AT_FDCWD,
                    p,
                    |_, p| crate::sys::real!($name: fn(*const c_char, *mut $ty) -> c_int; -1; p, out),
                    |_, sp| {
                        exists(sp)?;
                        $fill(out as *mut _)
                    },
                )
            }
        }
    };
}

macro_rules! statfs_fd {
    ($name:ident, $ty:ty, $fill:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, out: *mut $ty) -> c_int {
            on_fd(fd, |_| $fill(out as *mut _)).unwrap_or_else(|| crate::sys::real!($name: fn(c_int, *mut $ty) -> c_int; -1; fd, out))
        }
    };
}

statfs_path!(statfs, libc::statfs, fill_statfs);
statfs_path!(statfs64, libc::statfs64, fill_statfs);
statfs_path!(statvfs, libc::statvfs, fill_statvfs);
statfs_path!(statvfs64, libc::statvfs64, fill_statvfs);
statfs_fd!(fstatfs, libc::statfs, fill_statfs);
statfs_fd!(fstatfs64, libc::statfs64, fill_statfs);
statfs_fd!(fstatvfs, libc::statvfs, fill_statvfs);
statfs_fd!(fstatvfs64, libc::statvfs64, fill_statvfs);
