//! `mkstemp` and relatives on store paths. glibc creates the file with its internal open,
//! which the hooks do not see, so for a template under a mount prefix the shim picks the
//! name and creates it in the store (`O_CREAT | O_EXCL`, retried on EEXIST), writing the
//! name back into the caller's template as glibc does. `sed -i`, Python's
//! `tempfile.mkstemp(dir=...)` and editors' save-by-rename use these.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use crate::ops;
use crate::resolve::Loc;
use crate::sys::{guarded, in_shim, real, ret, set_errno};
use std::ffi::{c_char, c_int, CStr};

const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const ATTEMPTS: u32 = 62 * 62 * 62;

/// Six random name characters (getrandom, falling back to time and pid bits).
fn six() -> [u8; 6] {
    let mut r = [0u8; 8];
    // SAFETY: raw getrandom into a local buffer of its length.
    let n = unsafe { libc::syscall(libc::SYS_getrandom, r.as_mut_ptr(), r.len(), 0) };
    let mut v = if n == 8 {
        u64::from_ne_bytes(r)
    } else {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: raw clock_gettime into a local struct.
        unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts) };
        // SAFETY: getpid has no preconditions.
        (ts.tv_nsec as u64) ^ ((ts.tv_sec as u64) << 20) ^ ((unsafe { libc::getpid() } as u64) << 40)
    };
    let mut out = [0u8; 6];
    for c in &mut out {
        *c = LETTERS[(v % 62) as usize];
        v /= 62;
    }
    out
}

/// Where the six `X` of a template of `len` bytes with a `suffix`-byte suffix start.
fn x_start(t: &[u8], suffix: usize) -> R<usize> {
    let end = t.len().checked_sub(suffix).ok_or(libc::EINVAL)?;
    let start = end.checked_sub(6).ok_or(libc::EINVAL)?;
    if &t[start..end] != b"XXXXXX" {
        return Err(libc::EINVAL);
    }
    Ok(start)
}

type R<T> = Result<T, i32>;

/// Create a unique name from template `t` in the store with `make(store path)`, which
/// returns EEXIST to ask for another name.
unsafe fn make_unique<T>(t: *mut c_char, suffix: c_int, make: impl Fn(usize, &str) -> R<T>) -> Option<R<T>> {
    if t.is_null() || in_shim() {
        return None;
    }
    // SAFETY: the caller's NUL-terminated template.
    let tb = unsafe { CStr::from_ptr(t) }.to_bytes();
    // SAFETY: as above.
    let (m, sp) = match unsafe { crate::resolve::classify(libc::AT_FDCWD, t) } {
        Ok(Loc::Store(m, sp)) => (m, sp),
        Ok(_) => return None,
        Err(e) => return Some(Err(e)),
    };
    let start = match usize::try_from(suffix)
        .map_err(|_| libc::EINVAL)
        .and_then(|s| x_start(tb, s))
    {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    // The template's last component ends the store path unchanged (it ends with the X's
    // and the suffix, so normalisation cannot have altered it).
    let Some(sp_start) = sp.len().checked_sub(tb.len() - start) else {
        return Some(Err(libc::EINVAL));
    };
    if sp.as_bytes().get(sp_start..sp_start + 6) != Some(b"XXXXXX".as_slice()) {
        return Some(Err(libc::EINVAL));
    }
    Some(guarded(|| {
        let mut sp = sp.into_bytes();
        for _ in 0..ATTEMPTS {
            let name = six();
            sp[sp_start..sp_start + 6].copy_from_slice(&name);
            let p = std::str::from_utf8(&sp).map_err(|_| libc::EILSEQ)?;
            match make(m, p) {
                Err(libc::EEXIST) => continue,
                r => {
                    if r.is_ok() {
                        // SAFETY: the template has these 6 bytes at `start` (checked above).
                        unsafe {
                            std::ptr::copy_nonoverlapping(name.as_ptr() as *const c_char, t.add(start), 6)
                        };
                    }
                    return r;
                }
            }
        }
        Err(libc::EEXIST)
    }))
}

unsafe fn mkostemps_impl(t: *mut c_char, suffix: c_int, flags: c_int, real: impl FnOnce() -> c_int) -> c_int {
    // The flags glibc allows: O_APPEND, O_CLOEXEC, O_SYNC, O_DSYNC (others EINVAL).
    let allowed = libc::O_APPEND | libc::O_CLOEXEC | libc::O_SYNC | libc::O_DSYNC | libc::O_LARGEFILE;
    // SAFETY: forwarding the caller's template.
    match unsafe {
        make_unique(t, suffix, |m, p| {
            if flags & !allowed != 0 {
                return Err(libc::EINVAL);
            }
            ops::open(
                m,
                p,
                (flags & allowed) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
                0o600,
            )
        })
    } {
        None => real(),
        Some(r) => ret(r),
    }
}

#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkstemp(t: *mut c_char) -> c_int {
    // SAFETY: as mkstemp(3).
    unsafe { mkostemps_impl(t, 0, 0, || real!(mkstemp: fn(*mut c_char) -> c_int; -1; t)) }
}
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkstemp64(t: *mut c_char) -> c_int {
    // SAFETY: as mkstemp(3).
    unsafe { mkostemps_impl(t, 0, 0, || real!(mkstemp64: fn(*mut c_char) -> c_int; -1; t)) }
}
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkostemp(t: *mut c_char, fl: c_int) -> c_int {
    // SAFETY: as mkostemp(3).
    unsafe {
        mkostemps_impl(
            t,
            0,
            fl,
            || real!(mkostemp: fn(*mut c_char, c_int) -> c_int; -1; t, fl),
        )
    }
}
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkostemp64(t: *mut c_char, fl: c_int) -> c_int {
    // SAFETY: as mkostemp(3).
    unsafe {
        mkostemps_impl(
            t,
            0,
            fl,
            || real!(mkostemp64: fn(*mut c_char, c_int) -> c_int; -1; t, fl),
        )
    }
}
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkstemps(t: *mut c_char, sl: c_int) -> c_int {
    // SAFETY: as mkstemps(3).
    unsafe {
        mkostemps_impl(
            t,
            sl,
            0,
            || real!(mkstemps: fn(*mut c_char, c_int) -> c_int; -1; t, sl),
        )
    }
}
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkstemps64(t: *mut c_char, sl: c_int) -> c_int {
    // SAFETY: as mkstemps(3).
    unsafe {
        mkostemps_impl(
            t,
            sl,
            0,
            || real!(mkstemps64: fn(*mut c_char, c_int) -> c_int; -1; t, sl),
        )
    }
}
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkostemps(t: *mut c_char, sl: c_int, fl: c_int) -> c_int {
    // SAFETY: as mkostemps(3).
    unsafe {
        mkostemps_impl(
            t,
            sl,
            fl,
            || real!(mkostemps: fn(*mut c_char, c_int, c_int) -> c_int; -1; t, sl, fl),
        )
    }
}
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkostemps64(t: *mut c_char, sl: c_int, fl: c_int) -> c_int {
    // SAFETY: as mkostemps(3).
    unsafe {
        mkostemps_impl(
            t,
            sl,
            fl,
            || real!(mkostemps64: fn(*mut c_char, c_int, c_int) -> c_int; -1; t, sl, fl),
        )
    }
}
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn mkdtemp(t: *mut c_char) -> *mut c_char {
    // SAFETY: as mkdtemp(3).
    match unsafe { make_unique(t, 0, |_, p| ops::mkdir(p, 0o700)) } {
        None => real!(mkdtemp: fn(*mut c_char) -> *mut c_char; std::ptr::null_mut(); t),
        Some(Ok(())) => t,
        Some(Err(e)) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_needs_six_x_before_the_suffix() {
        assert_eq!(x_start(b"/ckpt/aXXXXXX", 0), Ok(7));
        assert_eq!(x_start(b"/ckpt/aXXXXXX.txt", 4), Ok(7));
        assert_eq!(x_start(b"/ckpt/aXXXXX", 0), Err(libc::EINVAL));
        assert_eq!(x_start(b"XXXXX", 0), Err(libc::EINVAL));
        assert_eq!(x_start(b"/ckpt/aXXXXXX.txt", 5), Err(libc::EINVAL));
        let a = six();
        assert!(a.iter().all(|c| LETTERS.contains(c)));
    }
}
