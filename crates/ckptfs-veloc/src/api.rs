//! The C entry points of `veloc.h`. Each converts its arguments, runs under the panic
//! guard and returns `VELOC_SUCCESS` (0) or `VELOC_FAILURE` (-1), printing the reason.

use crate::state::{self, MAX_NAME};
use ckptfs_compat::ffi::{guard, report, str_in, str_out};
use ckptfs_compat::mpi::{Comm, RawComm};
use ckptfs_compat::{CompatError, Result};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::Path;

/// VELOC_SUCCESS.
pub const SUCCESS: c_int = 0;
/// VELOC_FAILURE.
pub const FAILURE: c_int = -1;

fn code(call: &str, r: Result<()>) -> c_int {
    match r {
        Ok(()) => SUCCESS,
        Err(e) => {
            report("ckptfs-veloc", call, &e);
            FAILURE
        }
    }
}

/// VELOC_Init: collective over `comm` (duplicated).
///
/// # Safety
/// `comm` is a valid communicator; `cfg` a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Init(comm: RawComm, cfg: *const c_char) -> c_int {
    code(
        "VELOC_Init",
        guard(|| {
            // SAFETY: forwarded contract.
            let f = unsafe { str_in(cfg, "cfg_file") }?;
            state::init(Comm::Given(comm), None, Path::new(f))
        }),
    )
}

/// VELOC_Init_single: this process checkpoints alone, as `id` (no MPI needed).
///
/// # Safety
/// `cfg` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Init_single(id: c_uint, cfg: *const c_char) -> c_int {
    code(
        "VELOC_Init_single",
        guard(|| {
            // SAFETY: forwarded contract.
            let f = unsafe { str_in(cfg, "cfg_file") }?;
            state::init(Comm::SelfOnly, Some(id), Path::new(f))
        }),
    )
}

/// VELOC_Finalize (checkpoints are stored synchronously: nothing is pending).
#[no_mangle]
pub extern "C" fn VELOC_Finalize(_cleanup: c_int) -> c_int {
    code("VELOC_Finalize", guard(state::finalize))
}

/// VELOC_Mem_protect: register `count` elements of `base_size` bytes at `ptr` as region
/// `id`.
#[no_mangle]
pub extern "C" fn VELOC_Mem_protect(id: c_int, ptr: *mut c_void, count: usize, base_size: usize) -> c_int {
    code(
        "VELOC_Mem_protect",
        guard(|| {
            state::with("VELOC_Mem_protect", |s| {
                s.protect("", id, ptr as usize, count, base_size)
            })
        }),
    )
}

/// VELOC_Region_protect: as VELOC_Mem_protect, in the named region set `name`.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Region_protect(
    id: c_int,
    ptr: *mut c_void,
    count: usize,
    base_size: usize,
    name: *const c_char,
) -> c_int {
    code(
        "VELOC_Region_protect",
        guard(|| {
            // SAFETY: forwarded contract.
            let n = unsafe { str_in(name, "name") }?;
            state::with("VELOC_Region_protect", |s| {
                s.protect(n, id, ptr as usize, count, base_size)
            })
        }),
    )
}

/// VELOC_Mem_unprotect.
#[no_mangle]
pub extern "C" fn VELOC_Mem_unprotect(id: c_int) -> c_int {
    code(
        "VELOC_Mem_unprotect",
        guard(|| state::with("VELOC_Mem_unprotect", |s| s.unprotect("", id))),
    )
}

/// VELOC_Region_unprotect.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Region_unprotect(id: c_int, name: *const c_char) -> c_int {
    code(
        "VELOC_Region_unprotect",
        guard(|| {
            // SAFETY: forwarded contract.
            let n = unsafe { str_in(name, "name") }?;
            state::with("VELOC_Region_unprotect", |s| s.unprotect(n, id))
        }),
    )
}

/// VELOC_Mem_clear: unregister every region.
#[no_mangle]
pub extern "C" fn VELOC_Mem_clear() -> c_int {
    code(
        "VELOC_Mem_clear",
        guard(|| {
            state::with("VELOC_Mem_clear", |s| {
                s.clear(None);
                Ok(())
            })
        }),
    )
}

/// VELOC_Region_clear: unregister the regions of set `name`.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Region_clear(name: *const c_char) -> c_int {
    code(
        "VELOC_Region_clear",
        guard(|| {
            // SAFETY: forwarded contract.
            let n = unsafe { str_in(name, "name") }?;
            state::with("VELOC_Region_clear", |s| {
                s.clear(Some(n));
                Ok(())
            })
        }),
    )
}

/// VELOC_Route_file: the path of this rank's file of the current checkpoint or restart,
/// into `routed` (VELOC_MAX_NAME bytes).
///
/// # Safety
/// `original` is a C string; `routed` is valid for VELOC_MAX_NAME bytes.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Route_file(original: *const c_char, routed: *mut c_char) -> c_int {
    code(
        "VELOC_Route_file",
        guard(|| {
            // SAFETY: forwarded contract.
            let o = unsafe { str_in(original, "original") }?;
            if routed.is_null() {
                return Err(CompatError::Invalid("routed is NULL".into()));
            }
            let p = state::with("VELOC_Route_file", |s| s.route(o))?;
            // SAFETY: routed holds VELOC_MAX_NAME bytes per the contract.
            unsafe { str_out(&p, routed, MAX_NAME, "routed path") }
        }),
    )
}

/// VELOC_Cleanup: delete every checkpoint labelled `name`.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Cleanup(name: *const c_char) -> c_int {
    code(
        "VELOC_Cleanup",
        guard(|| {
            // SAFETY: forwarded contract.
            let n = unsafe { str_in(name, "name") }?;
            state::with("VELOC_Cleanup", |s| s.cleanup(n))
        }),
    )
}

/// VELOC_Checkpoint_begin.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Checkpoint_begin(name: *const c_char, version: c_int) -> c_int {
    code(
        "VELOC_Checkpoint_begin",
        guard(|| {
            // SAFETY: forwarded contract.
            let n = unsafe { str_in(name, "name") }?;
            state::with("VELOC_Checkpoint_begin", |s| s.checkpoint_begin(n, version))
        }),
    )
}

/// # Safety
/// `ids` is NULL (with `count` 0) or valid for `count` ints.
unsafe fn id_list<'a>(ids: *const c_int, count: c_int) -> Result<&'a [c_int]> {
    if count < 0 {
        return Err(CompatError::Invalid(format!("id count {count}")));
    }
    if count == 0 {
        return Ok(&[]);
    }
    if ids.is_null() {
        return Err(CompatError::Invalid("ids is NULL".into()));
    }
    // SAFETY: ids holds count ints per the contract.
    Ok(unsafe { std::slice::from_raw_parts(ids, count as usize) })
}

/// VELOC_Checkpoint_selective: write the selected regions into the checkpoint.
///
/// # Safety
/// `ids` is NULL (with `count` 0) or valid for `count` ints.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Checkpoint_selective(mode: c_int, ids: *mut c_int, count: c_int) -> c_int {
    code(
        "VELOC_Checkpoint_selective",
        guard(|| {
            // SAFETY: forwarded contract.
            let ids = unsafe { id_list(ids, count) }?;
            state::with("VELOC_Checkpoint_selective", |s| s.checkpoint_mem(mode, ids))
        }),
    )
}

/// VELOC_Checkpoint_mem: every region into the checkpoint.
#[no_mangle]
pub extern "C" fn VELOC_Checkpoint_mem() -> c_int {
    code(
        "VELOC_Checkpoint_mem",
        guard(|| state::with("VELOC_Checkpoint_mem", |s| s.checkpoint_mem(state::ALL, &[]))),
    )
}

/// VELOC_Checkpoint_end: collective; VELOC_SUCCESS only if every rank stored its part.
#[no_mangle]
pub extern "C" fn VELOC_Checkpoint_end(success: c_int) -> c_int {
    code(
        "VELOC_Checkpoint_end",
        guard(|| state::with("VELOC_Checkpoint_end", |s| s.checkpoint_end(success != 0))),
    )
}

/// VELOC_Checkpoint_wait: checkpoints complete synchronously; VELOC_SUCCESS once
/// initialised.
#[no_mangle]
pub extern "C" fn VELOC_Checkpoint_wait() -> c_int {
    code(
        "VELOC_Checkpoint_wait",
        guard(|| state::with("VELOC_Checkpoint_wait", |_| Ok(()))),
    )
}

/// VELOC_Checkpoint_finished: 1 (nothing runs in the background), VELOC_FAILURE before
/// VELOC_Init.
#[no_mangle]
pub extern "C" fn VELOC_Checkpoint_finished() -> c_int {
    match guard(|| state::with("VELOC_Checkpoint_finished", |_| Ok(()))) {
        Ok(()) => 1,
        Err(e) => {
            report("ckptfs-veloc", "VELOC_Checkpoint_finished", &e);
            FAILURE
        }
    }
}

/// VELOC_Checkpoint: begin, every region, end.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Checkpoint(name: *const c_char, version: c_int) -> c_int {
    code(
        "VELOC_Checkpoint",
        guard(|| {
            // SAFETY: forwarded contract.
            let n = unsafe { str_in(name, "name") }?;
            state::with("VELOC_Checkpoint", |s| {
                s.checkpoint_begin(n, version)?;
                let m = s.checkpoint_mem(state::ALL, &[]);
                let e = s.checkpoint_end(m.is_ok());
                m.and(e)
            })
        }),
    )
}

/// VELOC_Restart_test: the newest wholly recoverable version of `name` below `version`
/// (0: any), or VELOC_FAILURE.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Restart_test(name: *const c_char, version: c_int) -> c_int {
    let r = guard(|| {
        // SAFETY: forwarded contract.
        let n = unsafe { str_in(name, "name") }?;
        state::with("VELOC_Restart_test", |s| s.restart_test(n, version))
    });
    match r {
        Ok(Some(v)) => v,
        Ok(None) => FAILURE,
        Err(e) => {
            report("ckptfs-veloc", "VELOC_Restart_test", &e);
            FAILURE
        }
    }
}

/// VELOC_Restart_begin.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Restart_begin(name: *const c_char, version: c_int) -> c_int {
    code(
        "VELOC_Restart_begin",
        guard(|| {
            // SAFETY: forwarded contract.
            let n = unsafe { str_in(name, "name") }?;
            state::with("VELOC_Restart_begin", |s| s.restart_begin(n, version))
        }),
    )
}

/// VELOC_Recover_selective: restore the selected regions from the checkpoint.
///
/// # Safety
/// `ids` is NULL (with `count` 0) or valid for `count` ints.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Recover_selective(mode: c_int, ids: *mut c_int, count: c_int) -> c_int {
    code(
        "VELOC_Recover_selective",
        guard(|| {
            // SAFETY: forwarded contract.
            let ids = unsafe { id_list(ids, count) }?;
            state::with("VELOC_Recover_selective", |s| s.recover(mode, ids))
        }),
    )
}

/// VELOC_Recover_mem: restore every region saved.
#[no_mangle]
pub extern "C" fn VELOC_Recover_mem() -> c_int {
    code(
        "VELOC_Recover_mem",
        guard(|| state::with("VELOC_Recover_mem", |s| s.recover(state::ALL, &[]))),
    )
}

/// VELOC_Recover_size: the saved size of region `id`, or -1.
#[no_mangle]
pub extern "C" fn VELOC_Recover_size(id: c_int) -> c_int {
    match guard(|| state::with("VELOC_Recover_size", |s| s.recover_size(id))) {
        Ok(Some(n)) => c_int::try_from(n).unwrap_or(c_int::MAX),
        Ok(None) => -1,
        Err(e) => {
            report("ckptfs-veloc", "VELOC_Recover_size", &e);
            -1
        }
    }
}

/// VELOC_Restart_end: collective; VELOC_SUCCESS only if every rank succeeded.
#[no_mangle]
pub extern "C" fn VELOC_Restart_end(success: c_int) -> c_int {
    code(
        "VELOC_Restart_end",
        guard(|| state::with("VELOC_Restart_end", |s| s.restart_end(success != 0))),
    )
}

/// VELOC_Restart: begin, every region, end.
///
/// # Safety
/// `name` is a C string.
#[no_mangle]
pub unsafe extern "C" fn VELOC_Restart(name: *const c_char, version: c_int) -> c_int {
    code(
        "VELOC_Restart",
        guard(|| {
            // SAFETY: forwarded contract.
            let n = unsafe { str_in(name, "name") }?;
            state::with("VELOC_Restart", |s| {
                s.restart_begin(n, version)?;
                let m = s.recover(state::ALL, &[]);
                let e = s.restart_end(m.is_ok());
                m.and(e)
            })
        }),
    )
}
