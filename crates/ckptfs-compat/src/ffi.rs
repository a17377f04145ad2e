//! C strings in and out, and the guard every exported function runs under: no panic
//! crosses the C boundary, and every error is reported once on standard error and
//! mapped to the interface's return code by the caller.

use crate::error::{CompatError, Result};
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Run `f`; a panic becomes [`CompatError::Panic`].
pub fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            Err(CompatError::Panic(msg))
        }
    }
}

/// Print `e` on standard error as `LIB: rank R: CALL: message` (what both originals do
/// with their failures). Never panics.
pub fn report(lib: &str, call: &str, e: &CompatError) {
    use std::io::Write;
    let rank = crate::mpi::cached_rank()
        .map(|r| format!("rank {r}: "))
        .unwrap_or_default();
    let _ = writeln!(std::io::stderr(), "{lib}: {rank}{call}: {e}");
}

/// The C string `p` as UTF-8; NULL or invalid is [`CompatError::Invalid`] naming `what`.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for reading.
pub unsafe fn str_in<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(CompatError::Invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| CompatError::Invalid(format!("{what} is not UTF-8")))
}

/// Copy `s` with a NUL into `buf` of `cap` bytes; [`CompatError::TooLong`] if it does
/// not fit (nothing written then). A NULL `buf` is skipped (the APIs allow NULL for
/// outputs the caller does not want).
///
/// # Safety
/// `buf` is NULL or valid for writing `cap` bytes.
pub unsafe fn str_out(s: &str, buf: *mut c_char, cap: usize, what: &str) -> Result<()> {
    if buf.is_null() {
        return Ok(());
    }
    if s.len() + 1 > cap {
        return Err(CompatError::TooLong(format!(
            "{what} of {} bytes does not fit in {cap} bytes",
            s.len()
        )));
    }
    // SAFETY: buf holds cap >= s.len() + 1 bytes per the contract; regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}

/// A Fortran `CHARACTER*(*)` argument (pointer and hidden length) as a string with the
/// trailing blanks removed, as Fortran compares strings.
///
/// # Safety
/// `p` is NULL or valid for reading `len` bytes.
pub unsafe fn fortran_in(p: *const c_char, len: usize, what: &str) -> Result<String> {
    if p.is_null() {
        return Err(CompatError::Invalid(format!("{what} is missing")));
    }
    // SAFETY: p is valid for len bytes per the contract.
    let b = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    let b = match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    };
    let s = std::str::from_utf8(b).map_err(|_| CompatError::Invalid(format!("{what} is not UTF-8")))?;
    Ok(s.trim_end_matches(' ').to_string())
}

/// Copy `s` into a Fortran `CHARACTER*(len)` argument, blank-padded;
/// [`CompatError::TooLong`] if it does not fit.
///
/// # Safety
/// `p` is NULL or valid for writing `len` bytes.
pub unsafe fn fortran_out(s: &str, p: *mut c_char, len: usize, what: &str) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    if s.len() > len {
        return Err(CompatError::TooLong(format!(
            "{what} of {} bytes does not fit in CHARACTER*{len}",
            s.len()
        )));
    }
    // SAFETY: p is valid for len >= s.len() bytes per the contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), p.cast::<u8>(), s.len());
        std::ptr::write_bytes(p.cast::<u8>().add(s.len()), b' ', len - s.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_in_and_out() {
        let mut buf = [1 as c_char; 8];
        // SAFETY: buf holds 8 bytes.
        unsafe { str_out("abc", buf.as_mut_ptr(), 8, "x") }.unwrap();
        // SAFETY: str_out wrote a NUL-terminated string.
        assert_eq!(unsafe { str_in(buf.as_ptr(), "x") }.unwrap(), "abc");
        // SAFETY: buf holds 8 bytes; too long is refused before writing.
        let r = unsafe { str_out("abcdefgh", buf.as_mut_ptr(), 8, "x") };
        assert!(matches!(r, Err(CompatError::TooLong(_))));
        // SAFETY: NULL is checked.
        assert!(unsafe { str_in(std::ptr::null(), "x") }.is_err());
        let mut f = [0 as c_char; 6];
        // SAFETY: f holds 6 bytes.
        unsafe { fortran_out("ab", f.as_mut_ptr(), 6, "x") }.unwrap();
        assert_eq!(f.map(|c| c as u8), *b"ab    ");
        // SAFETY: f holds 6 bytes.
        assert_eq!(unsafe { fortran_in(f.as_ptr(), 6, "x") }.unwrap(), "ab");
        // SAFETY: f holds 6 bytes.
        assert!(unsafe { fortran_out("abcdefg", f.as_mut_ptr(), 6, "x") }.is_err());
    }

    #[test]
    fn a_panic_becomes_an_error() {
        let r: Result<()> = guard(|| panic!("boom"));
        assert!(matches!(r, Err(CompatError::Panic(m)) if m == "boom"));
    }
}
