//! Where a path argument leads: to the kernel unchanged, to the kernel with an absolute
//! path, or to the store (mount index and store path). Relative paths resolve against
//! the virtual working directory ([`crate::cwd`]), a store directory descriptor
//! ([`crate::state`]) or a kernel directory above a mount ([`crate::dirfds`]).

use crate::cwd::vcwd;
use crate::paths;
use crate::state::{desc_of, mounts, R};
use crate::sys;
use std::ffi::{CStr, CString};

/// Where a path argument leads.
pub enum Loc {
    /// To the kernel, with the caller's arguments unchanged.
    Real,
    /// To the kernel, with this absolute path instead (relative to a store directory but
    /// leaving the mount through `..`).
    RealAbs(CString),
    /// To the store: mount index and store path.
    Store(usize, String),
}

fn classify_full(full: String) -> Loc {
    match paths::match_mount(mounts(), &full) {
        Some((m, p)) => Loc::Store(m, p),
        None => CString::new(full).map(Loc::RealAbs).unwrap_or(Loc::Real),
    }
}

/// Classify `path` relative to `dirfd` (AT_FDCWD or a descriptor).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub unsafe fn classify(dirfd: i32, path: *const libc::c_char) -> R<Loc> {
    if path.is_null() {
        return Ok(Loc::Real);
    }
    // The kernel answers EFAULT for an address the program cannot read: so does the shim
    // for the addresses it can tell apart without a system call (see plausible_user_ptr).
    if !paths::plausible_user_ptr(path as usize) {
        return Err(libc::EFAULT);
    }
    // SAFETY: caller guarantees a C string; the address is in the user half.
    let b = unsafe { CStr::from_ptr(path) }.to_bytes();
    if b.is_empty() {
        return Ok(Loc::Real);
    }
    if b.len() >= paths::PATH_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    let ms = mounts();
    if b[0] == b'/' {
        if !paths::needs_normalize(b) {
            if !paths::quick_prefix(ms, b) {
                return Ok(Loc::Real);
            }
            let s = std::str::from_utf8(b).map_err(|_| libc::EILSEQ)?;
            return Ok(match paths::match_mount(ms, s) {
                Some((m, p)) => Loc::Store(m, p),
                None => Loc::Real,
            });
        }
        let Ok(s) = std::str::from_utf8(b) else {
            return Ok(Loc::Real);
        };
        let n = paths::normalize(s);
        return Ok(match paths::match_mount(ms, &n) {
            Some((m, p)) => Loc::Store(m, p),
            // `/ckpt/..`: the kernel cannot walk through the mount, which does not exist.
            None if paths::quick_prefix(ms, b) => CString::new(n).map(Loc::RealAbs).unwrap_or(Loc::Real),
            None => Loc::Real,
        });
    }
    let Ok(s) = std::str::from_utf8(b) else {
        return Ok(Loc::Real);
    };
    if dirfd == libc::AT_FDCWD {
        if let Some(v) = vcwd() {
            return Ok(classify_full(paths::join(&v, s)));
        }
        let cwd = sys::real_cwd()?;
        return Ok(match paths::match_mount(ms, &paths::join(&cwd, s)) {
            Some((m, p)) => Loc::Store(m, p),
            None => Loc::Real,
        });
    }
    if let Some(d) = desc_of(dirfd) {
        if !d.is_dir {
            return Err(libc::ENOTDIR);
        }
        return Ok(classify_full(paths::join(&d.full_path(), s)));
    }
    if let Some(base) = crate::dirfds::path_of(dirfd) {
        // A kernel directory above a mount prefix (rsync walks from "/").
        return Ok(classify_full(paths::join(&base, s)));
    }
    Ok(Loc::Real)
}
