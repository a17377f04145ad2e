//! The C entry points of `scr.h`. Each converts its arguments, runs the call under the
//! panic guard and returns `SCR_SUCCESS` (0) or `SCR_FAILURE` (1), printing the reason
//! on standard error.

use crate::state::{self, MAX_FILENAME};
use ckptfs_compat::ffi::{guard, report, str_in, str_out};
use ckptfs_compat::Result;
use std::ffi::{c_char, c_int, CString};

/// SCR_SUCCESS.
pub const SUCCESS: c_int = 0;
/// SCR_FAILURE (SCR's internal failure code; scr.h compares against SCR_SUCCESS only).
pub const FAILURE: c_int = 1;

/// The code for `r`, reporting a failure.
pub fn code(call: &str, r: Result<()>) -> c_int {
    match r {
        Ok(()) => SUCCESS,
        Err(e) => {
            report("ckptfs-scr", call, &e);
            FAILURE
        }
    }
}

/// SCR_Init: collective over MPI_COMM_WORLD; after MPI_Init.
#[no_mangle]
pub extern "C" fn SCR_Init() -> c_int {
    code("SCR_Init", guard(state::init))
}

/// SCR_Finalize: collective; before MPI_Finalize.
#[no_mangle]
pub extern "C" fn SCR_Finalize() -> c_int {
    code("SCR_Finalize", guard(state::finalize))
}

/// SCR_Config: set `KEY=VALUE`, unset `KEY=`, or query `KEY` (a malloc'ed copy of the
/// value, which the caller frees; NULL when unset or on a set/unset).
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn SCR_Config(config: *const c_char) -> *const c_char {
    let r = guard(|| {
        // SAFETY: forwarded contract.
        let s = unsafe { str_in(config, "config") }?;
        let init = state::STATE.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        crate::config::config_call(s, init)
    });
    match r {
        Ok(Some(v)) => match CString::new(v) {
            // SAFETY: strdup copies a valid C string into malloc'ed memory.
            Ok(c) => unsafe { libc::strdup(c.as_ptr()) },
            Err(_) => std::ptr::null(),
        },
        Ok(None) => std::ptr::null(),
        Err(e) => {
            report("ckptfs-scr", "SCR_Config", &e);
            std::ptr::null()
        }
    }
}

/// SCR_Route_file: the path to use for `name` (a buffer of SCR_MAX_FILENAME bytes).
///
/// # Safety
/// `name` is a C string; `file` is valid for SCR_MAX_FILENAME bytes.
#[no_mangle]
pub unsafe extern "C" fn SCR_Route_file(name: *const c_char, file: *mut c_char) -> c_int {
    code(
        "SCR_Route_file",
        guard(|| {
            // SAFETY: forwarded contract.
            let n = unsafe { str_in(name, "name") }?;
            if file.is_null() {
                return Err(ckptfs_compat::CompatError::Invalid("file is NULL".into()));
            }
            let out = state::with("SCR_Route_file", |s| s.route(n))?;
            // SAFETY: file holds SCR_MAX_FILENAME bytes per the contract.
            unsafe { str_out(&out, file, MAX_FILENAME, "routed path") }
        }),
    )
}

/// SCR_Start_output: begin a dataset (`name` may be NULL: a generated name).
///
/// # Safety
/// `name` is NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn SCR_Start_output(name: *const c_char, flags: c_int) -> c_int {
    code(
        "SCR_Start_output",
        guard(|| {
            let n = if name.is_null() {
                None
            } else {
                // SAFETY: forwarded contract (non-NULL: a C string).
                Some(unsafe { str_in(name, "name") }?)
            };
            state::with("SCR_Start_output", |s| s.start_output(n, flags))
        }),
    )
}

/// SCR_Start_checkpoint: SCR_Start_output(NULL, SCR_FLAG_CHECKPOINT).
#[no_mangle]
pub extern "C" fn SCR_Start_checkpoint() -> c_int {
    code(
        "SCR_Start_checkpoint",
        guard(|| {
            state::with("SCR_Start_checkpoint", |s| {
                s.start_output(None, state::FLAG_CHECKPOINT)
            })
        }),
    )
}

/// SCR_Complete_output: collective; SCR_SUCCESS only if every rank was valid.
#[no_mangle]
pub extern "C" fn SCR_Complete_output(valid: c_int) -> c_int {
    code(
        "SCR_Complete_output",
        guard(|| state::with("SCR_Complete_output", |s| s.complete_output(valid != 0))),
    )
}

/// SCR_Complete_checkpoint: SCR_Complete_output.
#[no_mangle]
pub extern "C" fn SCR_Complete_checkpoint(valid: c_int) -> c_int {
    code(
        "SCR_Complete_checkpoint",
        guard(|| state::with("SCR_Complete_checkpoint", |s| s.complete_output(valid != 0))),
    )
}

/// SCR_Have_restart: `*flag` 1 and the name (if `name` is not NULL) when a checkpoint
/// can be loaded.
///
/// # Safety
/// `flag` is valid for an int; `name` is NULL or valid for SCR_MAX_FILENAME bytes.
#[no_mangle]
pub unsafe extern "C" fn SCR_Have_restart(flag: *mut c_int, name: *mut c_char) -> c_int {
    code(
        "SCR_Have_restart",
        guard(|| {
            if flag.is_null() {
                return Err(ckptfs_compat::CompatError::Invalid("flag is NULL".into()));
            }
            let r = state::with("SCR_Have_restart", |s| s.have_restart())?;
            // SAFETY: flag is valid per the contract.
            unsafe { flag.write(c_int::from(r.is_some())) };
            // SAFETY: name is NULL or holds SCR_MAX_FILENAME bytes.
            unsafe { str_out(r.as_deref().unwrap_or(""), name, MAX_FILENAME, "checkpoint name") }
        }),
    )
}

/// SCR_Start_restart: load the checkpoint SCR_Have_restart named; its name into `name`.
///
/// # Safety
/// `name` is NULL or valid for SCR_MAX_FILENAME bytes.
#[no_mangle]
pub unsafe extern "C" fn SCR_Start_restart(name: *mut c_char) -> c_int {
    code(
        "SCR_Start_restart",
        guard(|| {
            let n = state::with("SCR_Start_restart", |s| s.start_restart())?;
            // SAFETY: name is NULL or holds SCR_MAX_FILENAME bytes.
            unsafe { str_out(&n, name, MAX_FILENAME, "checkpoint name") }
        }),
    )
}

/// SCR_Complete_restart: collective; a failure on any rank makes the next
/// SCR_Have_restart offer the next older checkpoint.
#[no_mangle]
pub extern "C" fn SCR_Complete_restart(valid: c_int) -> c_int {
    code(
        "SCR_Complete_restart",
        guard(|| state::with("SCR_Complete_restart", |s| s.complete_restart(valid != 0))),
    )
}

unsafe fn flag_call(call: &'static str, flag: *mut c_int, f: fn(&mut state::Scr) -> Result<bool>) -> c_int {
    code(
        call,
        guard(|| {
            if flag.is_null() {
                return Err(ckptfs_compat::CompatError::Invalid("flag is NULL".into()));
            }
            let v = state::with(call, f)?;
            // SAFETY: flag is valid for an int per the callers' contract.
            unsafe { flag.write(c_int::from(v)) };
            Ok(())
        }),
    )
}

/// SCR_Need_checkpoint: `*flag` 1 when a checkpoint is due (same on every rank).
///
/// # Safety
/// `flag` is valid for an int.
#[no_mangle]
pub unsafe extern "C" fn SCR_Need_checkpoint(flag: *mut c_int) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { flag_call("SCR_Need_checkpoint", flag, |s| s.need_checkpoint()) }
}

/// SCR_Should_exit: `*flag` 1 when the job should stop (the halt file exists).
///
/// # Safety
/// `flag` is valid for an int.
#[no_mangle]
pub unsafe extern "C" fn SCR_Should_exit(flag: *mut c_int) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { flag_call("SCR_Should_exit", flag, |s| s.should_exit()) }
}

unsafe fn name_call(
    call: &'static str,
    name: *const c_char,
    f: fn(&mut state::Scr, &str) -> Result<()>,
) -> c_int {
    code(
        call,
        guard(|| {
            // SAFETY: name is NULL or a C string per the callers' contract.
            let n = unsafe { str_in(name, "name") }?;
            state::with(call, |s| f(s, n))
        }),
    )
}

/// SCR_Current: restart from the checkpoint `name`.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn SCR_Current(name: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { name_call("SCR_Current", name, |s, n| s.current(n)) }
}

/// SCR_Drop: forget the dataset `name` for restarts (files kept).
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn SCR_Drop(name: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { name_call("SCR_Drop", name, |s, n| s.drop_name(n)) }
}

/// SCR_Delete: delete the dataset `name` (record and files).
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn SCR_Delete(name: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { name_call("SCR_Delete", name, |s, n| s.delete(n)) }
}

static VERSION: &[u8] = concat!("v3.1.0 (ckptfs ", env!("CARGO_PKG_VERSION"), ")\0").as_bytes();

/// SCR_Get_version: a static string; the caller must not free it.
#[no_mangle]
pub extern "C" fn SCR_Get_version() -> *mut c_char {
    VERSION.as_ptr() as *mut c_char
}
