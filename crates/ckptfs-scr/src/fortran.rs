//! The Fortran subroutines of `scrf.h` (`CALL SCR_INIT(IERROR)`, ...), as gfortran
//! names and passes them: lower case with one trailing underscore, every argument by
//! reference, and the length of each `CHARACTER*(*)` argument appended as a hidden
//! `size_t`. Strings come in blank-padded and go out blank-padded.

use crate::api::{self, FAILURE, SUCCESS};
use crate::state;
use ckptfs_compat::ffi::{fortran_in, fortran_out, guard, report};
use ckptfs_compat::{CompatError, Result};
use std::ffi::{c_char, c_int};

fn set(ierr: *mut c_int, call: &str, r: Result<()>) {
    let c = match r {
        Ok(()) => SUCCESS,
        Err(e) => {
            report("ckptfs-scr", call, &e);
            FAILURE
        }
    };
    if !ierr.is_null() {
        // SAFETY: a Fortran INTEGER argument passed by reference.
        unsafe { ierr.write(c) };
    }
}

fn int_in(p: *const c_int) -> Result<c_int> {
    if p.is_null() {
        return Err(CompatError::Invalid("missing INTEGER argument".into()));
    }
    // SAFETY: a Fortran INTEGER argument passed by reference.
    Ok(unsafe { p.read() })
}

fn int_out(p: *mut c_int, v: c_int) -> Result<()> {
    if p.is_null() {
        return Err(CompatError::Invalid("missing INTEGER argument".into()));
    }
    // SAFETY: a Fortran INTEGER argument passed by reference.
    unsafe { p.write(v) };
    Ok(())
}

/// SCR_INIT(IERROR)
#[no_mangle]
pub extern "C" fn scr_init_(ierr: *mut c_int) {
    set(ierr, "SCR_INIT", guard(state::init));
}

/// SCR_FINALIZE(IERROR)
#[no_mangle]
pub extern "C" fn scr_finalize_(ierr: *mut c_int) {
    set(ierr, "SCR_FINALIZE", guard(state::finalize));
}

/// SCR_START_OUTPUT(NAME, FLAGS, IERROR)
///
/// # Safety
/// Fortran arguments: `name` valid for `nlen` bytes, the integers valid.
#[no_mangle]
pub unsafe extern "C" fn scr_start_output_(
    name: *const c_char,
    flags: *const c_int,
    ierr: *mut c_int,
    nlen: usize,
) {
    let r = guard(|| {
        // SAFETY: forwarded contract.
        let n = unsafe { fortran_in(name, nlen, "NAME") }?;
        let f = int_in(flags)?;
        state::with("SCR_START_OUTPUT", |s| {
            s.start_output(Some(&n).filter(|n| !n.is_empty()).map(|n| n.as_str()), f)
        })
    });
    set(ierr, "SCR_START_OUTPUT", r);
}

/// SCR_START_CHECKPOINT(IERROR)
#[no_mangle]
pub extern "C" fn scr_start_checkpoint_(ierr: *mut c_int) {
    let r = guard(|| {
        state::with("SCR_START_CHECKPOINT", |s| {
            s.start_output(None, state::FLAG_CHECKPOINT)
        })
    });
    set(ierr, "SCR_START_CHECKPOINT", r);
}

/// SCR_ROUTE_FILE(NAME, FILE, IERROR)
///
/// # Safety
/// Fortran arguments: `name` valid for `nlen` bytes, `file` for `flen`.
#[no_mangle]
pub unsafe extern "C" fn scr_route_file_(
    name: *const c_char,
    file: *mut c_char,
    ierr: *mut c_int,
    nlen: usize,
    flen: usize,
) {
    let r = guard(|| {
        // SAFETY: forwarded contract.
        let n = unsafe { fortran_in(name, nlen, "NAME") }?;
        let out = state::with("SCR_ROUTE_FILE", |s| s.route(&n))?;
        // SAFETY: forwarded contract.
        unsafe { fortran_out(&out, file, flen, "FILE") }
    });
    set(ierr, "SCR_ROUTE_FILE", r);
}

/// SCR_COMPLETE_OUTPUT(VALID, IERROR)
#[no_mangle]
pub extern "C" fn scr_complete_output_(valid: *const c_int, ierr: *mut c_int) {
    let r = guard(|| {
        let v = int_in(valid)?;
        state::with("SCR_COMPLETE_OUTPUT", |s| s.complete_output(v != 0))
    });
    set(ierr, "SCR_COMPLETE_OUTPUT", r);
}

/// SCR_COMPLETE_CHECKPOINT(VALID, IERROR)
#[no_mangle]
pub extern "C" fn scr_complete_checkpoint_(valid: *const c_int, ierr: *mut c_int) {
    scr_complete_output_(valid, ierr);
}

/// SCR_HAVE_RESTART(FLAG, NAME, IERROR)
///
/// # Safety
/// Fortran arguments: `name` valid for `nlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn scr_have_restart_(
    flag: *mut c_int,
    name: *mut c_char,
    ierr: *mut c_int,
    nlen: usize,
) {
    let r = guard(|| {
        let h = state::with("SCR_HAVE_RESTART", |s| s.have_restart())?;
        int_out(flag, c_int::from(h.is_some()))?;
        // SAFETY: forwarded contract.
        unsafe { fortran_out(h.as_deref().unwrap_or(""), name, nlen, "NAME") }
    });
    set(ierr, "SCR_HAVE_RESTART", r);
}

/// SCR_START_RESTART(NAME, IERROR)
///
/// # Safety
/// Fortran arguments: `name` valid for `nlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn scr_start_restart_(name: *mut c_char, ierr: *mut c_int, nlen: usize) {
    let r = guard(|| {
        let n = state::with("SCR_START_RESTART", |s| s.start_restart())?;
        // SAFETY: forwarded contract.
        unsafe { fortran_out(&n, name, nlen, "NAME") }
    });
    set(ierr, "SCR_START_RESTART", r);
}

/// SCR_COMPLETE_RESTART(VALID, IERROR)
#[no_mangle]
pub extern "C" fn scr_complete_restart_(valid: *const c_int, ierr: *mut c_int) {
    let r = guard(|| {
        let v = int_in(valid)?;
        state::with("SCR_COMPLETE_RESTART", |s| s.complete_restart(v != 0))
    });
    set(ierr, "SCR_COMPLETE_RESTART", r);
}

/// SCR_NEED_CHECKPOINT(FLAG, IERROR)
#[no_mangle]
pub extern "C" fn scr_need_checkpoint_(flag: *mut c_int, ierr: *mut c_int) {
    let r = guard(|| {
        let v = state::with("SCR_NEED_CHECKPOINT", |s| s.need_checkpoint())?;
        int_out(flag, c_int::from(v))
    });
    set(ierr, "SCR_NEED_CHECKPOINT", r);
}

/// SCR_SHOULD_EXIT(FLAG, IERROR)
#[no_mangle]
pub extern "C" fn scr_should_exit_(flag: *mut c_int, ierr: *mut c_int) {
    let r = guard(|| {
        let v = state::with("SCR_SHOULD_EXIT", |s| s.should_exit())?;
        int_out(flag, c_int::from(v))
    });
    set(ierr, "SCR_SHOULD_EXIT", r);
}

unsafe fn name_sub(
    call: &'static str,
    name: *const c_char,
    nlen: usize,
    ierr: *mut c_int,
    f: fn(&mut state::Scr, &str) -> Result<()>,
) {
    let r = guard(|| {
        // SAFETY: name is valid for nlen bytes per the callers' contract.
        let n = unsafe { fortran_in(name, nlen, "NAME") }?;
        state::with(call, |s| f(s, &n))
    });
    set(ierr, call, r);
}

/// SCR_CURRENT(NAME, IERROR)
///
/// # Safety
/// Fortran arguments.
#[no_mangle]
pub unsafe extern "C" fn scr_current_(name: *const c_char, ierr: *mut c_int, nlen: usize) {
    // SAFETY: forwarded contract.
    unsafe { name_sub("SCR_CURRENT", name, nlen, ierr, |s, n| s.current(n)) }
}

/// SCR_DROP(NAME, IERROR)
///
/// # Safety
/// Fortran arguments.
#[no_mangle]
pub unsafe extern "C" fn scr_drop_(name: *const c_char, ierr: *mut c_int, nlen: usize) {
    // SAFETY: forwarded contract.
    unsafe { name_sub("SCR_DROP", name, nlen, ierr, |s, n| s.drop_name(n)) }
}

/// SCR_DELETE(NAME, IERROR)
///
/// # Safety
/// Fortran arguments.
#[no_mangle]
pub unsafe extern "C" fn scr_delete_(name: *const c_char, ierr: *mut c_int, nlen: usize) {
    // SAFETY: forwarded contract.
    unsafe { name_sub("SCR_DELETE", name, nlen, ierr, |s, n| s.delete(n)) }
}

/// SCR_GET_VERSION(VERSION, IERROR)
///
/// # Safety
/// Fortran arguments: `v` valid for `vlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn scr_get_version_(v: *mut c_char, ierr: *mut c_int, vlen: usize) {
    let r = guard(|| {
        // SAFETY: SCR_Get_version returns a static NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(api::SCR_Get_version()) };
        // SAFETY: forwarded contract.
        unsafe { fortran_out(&s.to_string_lossy(), v, vlen, "VERSION") }
    });
    set(ierr, "SCR_GET_VERSION", r);
}

/// SCR_CONFIG(CONFIG, VAL, IERROR): set/unset (VAL untouched) or query (VAL blank-padded).
///
/// # Safety
/// Fortran arguments.
#[no_mangle]
pub unsafe extern "C" fn scr_config_(
    cfg: *const c_char,
    val: *mut c_char,
    ierr: *mut c_int,
    clen: usize,
    vlen: usize,
) {
    let r = guard(|| {
        // SAFETY: forwarded contract.
        let c = unsafe { fortran_in(cfg, clen, "CONFIG") }?;
        let init = state::STATE.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        if let Some(v) = crate::config::config_call(&c, init)? {
            // SAFETY: forwarded contract.
            unsafe { fortran_out(&v, val, vlen, "VAL") }?;
        } else if !c.contains('=') {
            // SAFETY: forwarded contract.
            unsafe { fortran_out("", val, vlen, "VAL") }?;
        }
        Ok(())
    });
    set(ierr, "SCR_CONFIG", r);
}
