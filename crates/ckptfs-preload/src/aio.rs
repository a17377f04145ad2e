//! POSIX AIO (`aio_read`, `aio_write`, `aio_fsync`, `aio_error`, `aio_return`,
//! `aio_suspend`, `aio_cancel`, `lio_listio` and their `*64` names) on store descriptors,
//! performed synchronously at submission: the request is complete when the submitting
//! call returns, its status and result are kept (keyed by the control block's address)
//! for `aio_error`/`aio_return`, and its notification (SIGEV_SIGNAL with the control
//! block's value and `SI_ASYNCIO`, or SIGEV_THREAD on a new thread) is delivered at once.
//! glibc's own implementation would run the request on a helper thread with its internal
//! pread, which the hooks do not see (EBADF on the reserved descriptor). Requests on
//! kernel descriptors go to glibc unchanged.
//!
//! Native Linux AIO (`io_setup`/`io_submit`, libaio) and io_uring are system calls made
//! without libc: on a store descriptor they fail with EBADF (the reserved `O_PATH`
//! descriptor); see docs/preload.md.
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use crate::ops;
use crate::state::{self, maybe_store_fd};
use crate::sys::{guarded, in_shim, real, set_errno};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::Mutex;

/// Completed store requests: control block address -> (error, return value).
static DONE: Mutex<Option<HashMap<usize, (c_int, isize)>>> = Mutex::new(None);

fn done() -> std::sync::MutexGuard<'static, Option<HashMap<usize, (c_int, isize)>>> {
    DONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn is_ours(cb: *const libc::aiocb) -> bool {
    done().as_ref().is_some_and(|m| m.contains_key(&(cb as usize)))
}

/// Is this control block's descriptor a store descriptor?
unsafe fn store_cb(cb: *const libc::aiocb) -> bool {
    // SAFETY: the caller's control block (null checked).
    !cb.is_null()
        && !in_shim()
        && maybe_store_fd(unsafe { (*cb).aio_fildes })
        && state::desc_of(unsafe { (*cb).aio_fildes }).is_some()
}

/// Deliver the completion notification of `ev`.
unsafe fn notify(ev: *const libc::sigevent) {
    // SAFETY: the caller's sigevent inside its control block.
    let e = unsafe { &*ev };
    match e.sigev_notify {
        libc::SIGEV_SIGNAL => {
            // siginfo_t as the kernel lays it out: signo, errno, code, pad, pid, uid, value.
            let mut si = [0u8; 128];
            si[0..4].copy_from_slice(&e.sigev_signo.to_ne_bytes());
            si[8..12].copy_from_slice(&libc::SI_ASYNCIO.to_ne_bytes());
            // SAFETY: getpid/getuid have no preconditions.
            let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
            si[16..20].copy_from_slice(&pid.to_ne_bytes());
            si[20..24].copy_from_slice(&uid.to_ne_bytes());
            si[24..32].copy_from_slice(&(e.sigev_value.sival_ptr as usize).to_ne_bytes());
            // SAFETY: raw rt_sigqueueinfo to ourselves with a full siginfo buffer.
            unsafe { libc::syscall(libc::SYS_rt_sigqueueinfo, pid, e.sigev_signo, si.as_ptr()) };
        }
        libc::SIGEV_THREAD => {
            // glibc's sigevent: value (8), signo (4), notify (4), then the function and
            // its pthread attributes.
            // SAFETY: reading the function pointer glibc's layout puts at offset 16.
            let f = unsafe { *((ev as *const u8).add(16) as *const usize) };
            if f != 0 {
                let v = e.sigev_value.sival_ptr as usize;
                // SAFETY: f is the caller's `void (*)(union sigval)`.
                let func: extern "C" fn(usize) = unsafe { std::mem::transmute(f) };
                let _ = std::thread::Builder::new().spawn(move || func(v));
            }
        }
        _ => {}
    }
}

/// Run a store request now; record its outcome. `op`: LIO_READ, LIO_WRITE, or
/// -1 - O_SYNC/O_DSYNC for aio_fsync.
unsafe fn run(cb: *mut libc::aiocb, op: c_int) -> c_int {
    // SAFETY: the caller's control block.
    let c = unsafe { &*cb };
    let fd = c.aio_fildes;
    let r: Result<isize, i32> = guarded(|| {
        state::with_fd(fd, |d| {
            if op == libc::LIO_READ || op == libc::LIO_WRITE {
                if c.aio_offset < 0 {
                    return Err(libc::EINVAL);
                }
                if c.aio_nbytes == 0 {
                    return Ok(0);
                }
                let p = c.aio_buf as *mut u8;
                if op == libc::LIO_READ {
                    // SAFETY: the request's buffer of aio_nbytes bytes.
                    let b = unsafe { std::slice::from_raw_parts_mut(p, c.aio_nbytes) };
                    ops::preadv(d, &mut [b], c.aio_offset).map(|n| n as isize)
                } else {
                    // SAFETY: as above.
                    let b = unsafe { std::slice::from_raw_parts(p as *const u8, c.aio_nbytes) };
                    ops::pwritev(d, &[b], c.aio_offset).map(|n| n as isize)
                }
            } else {
                ops::fsync(d).map(|_| 0)
            }
        })
        .unwrap_or(Err(libc::EBADF))
    });
    let rec = match r {
        Ok(n) => (0, n),
        Err(e) => (e, -1),
    };
    done().get_or_insert_with(HashMap::new).insert(cb as usize, rec);
    // SAFETY: the control block's sigevent.
    unsafe { notify(&c.aio_sigevent) };
    0
}

macro_rules! submit {
    ($name:ident, $op:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *mut libc::aiocb) -> c_int {
            // SAFETY: the caller's control block.
            if unsafe { store_cb(cb) } {
                // SAFETY: as above.
                return unsafe { run(cb, $op) };
            }
            real!($name: fn(*mut libc::aiocb) -> c_int; -1; cb)
        }
    };
}
submit!(aio_read, libc::LIO_READ);
submit!(aio_read64, libc::LIO_READ);
submit!(aio_write, libc::LIO_WRITE);
submit!(aio_write64, libc::LIO_WRITE);

macro_rules! fsync_hook {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(op: c_int, cb: *mut libc::aiocb) -> c_int {
            // SAFETY: the caller's control block.
            if unsafe { store_cb(cb) } {
                if op != libc::O_SYNC && op != libc::O_DSYNC {
                    set_errno(libc::EINVAL);
                    return -1;
                }
                // SAFETY: as above.
                return unsafe { run(cb, -1) };
            }
            real!($name: fn(c_int, *mut libc::aiocb) -> c_int; -1; op, cb)
        }
    };
}
fsync_hook!(aio_fsync);
fsync_hook!(aio_fsync64);

macro_rules! error_hook {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *const libc::aiocb) -> c_int {
            if let Some((e, _)) = done().as_ref().and_then(|m| m.get(&(cb as usize)).copied()) {
                return e;
            }
            real!($name: fn(*const libc::aiocb) -> c_int; libc::ENOSYS; cb)
        }
    };
}
error_hook!(aio_error);
error_hook!(aio_error64);

macro_rules! return_hook {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *mut libc::aiocb) -> isize {
            if let Some((_, r)) = done().as_mut().and_then(|m| m.remove(&(cb as usize))) {
                return r;
            }
            real!($name: fn(*mut libc::aiocb) -> isize; -1; cb)
        }
    };
}
return_hook!(aio_return);
return_hook!(aio_return64);

macro_rules! suspend_hook {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            list: *const *const libc::aiocb,
            n: c_int,
            t: *const libc::timespec,
        ) -> c_int {
            if !list.is_null() && n > 0 {
                // SAFETY: the caller's array of n control block pointers.
                let l = unsafe { std::slice::from_raw_parts(list, n as usize) };
                if l.iter().any(|cb| !cb.is_null() && is_ours(*cb)) {
                    return 0; // a store request in the list is complete
                }
            }
            real!($name: fn(*const *const libc::aiocb, c_int, *const libc::timespec) -> c_int; -1; list, n, t)
        }
    };
}
suspend_hook!(aio_suspend);
suspend_hook!(aio_suspend64);

macro_rules! cancel_hook {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cb: *mut libc::aiocb) -> c_int {
            if !in_shim() && maybe_store_fd(fd) && state::desc_of(fd).is_some() {
                return libc::AIO_ALLDONE; // store requests complete at submission
            }
            real!($name: fn(c_int, *mut libc::aiocb) -> c_int; -1; fd, cb)
        }
    };
}
cancel_hook!(aio_cancel);
cancel_hook!(aio_cancel64);

macro_rules! lio_hook {
    ($name:ident, $read:ident, $write:ident, $suspend:ident, $error:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            mode: c_int,
            list: *const *mut libc::aiocb,
            n: c_int,
            sig: *mut libc::sigevent,
        ) -> c_int {
            let l: &[*mut libc::aiocb] = if list.is_null() || n <= 0 {
                &[]
            } else {
                // SAFETY: the caller's array of n control block pointers.
                unsafe { std::slice::from_raw_parts(list, n as usize) }
            };
            // SAFETY: each non-null entry is a control block.
            if !l.iter().any(|cb| unsafe { store_cb(*cb) }) {
                real!($name: fn(c_int, *const *mut libc::aiocb, c_int, *mut libc::sigevent) -> c_int; -1; mode, list, n, sig)
            } else {
                if mode != libc::LIO_WAIT && mode != libc::LIO_NOWAIT {
                    set_errno(libc::EINVAL);
                    return -1;
                }
                // Any store request: run the whole list to completion now (kernel
                // requests through glibc, then waited for).
                let mut failed = false;
                for &cb in l {
                    if cb.is_null() {
                        continue;
                    }
                    // SAFETY: a control block.
                    let op = unsafe { (*cb).aio_lio_opcode };
                    // SAFETY: the request's own control block; its notification is not
                    // sent for lio_listio entries by glibc either unless set per entry.
                    let r = unsafe {
                        match op {
                            libc::LIO_READ => $read(cb),
                            libc::LIO_WRITE => $write(cb),
                            _ => 0,
                        }
                    };
                    failed |= r != 0;
                }
                for &cb in l {
                    // SAFETY: a control block.
                    if cb.is_null() || unsafe { (*cb).aio_lio_opcode } == libc::LIO_NOP {
                        continue;
                    }
                    let one = [cb as *const libc::aiocb];
                    // SAFETY: waiting for a kernel request glibc is running.
                    while unsafe { $error(cb) } == libc::EINPROGRESS {
                        // SAFETY: `one` holds one valid control block; no timeout.
                        unsafe { $suspend(one.as_ptr(), 1, std::ptr::null()) };
                    }
                    // SAFETY: as above.
                    failed |= unsafe { $error(cb) } != 0;
                }
                if mode == libc::LIO_NOWAIT && !sig.is_null() {
                    // SAFETY: the caller's sigevent.
                    unsafe { notify(sig) };
                }
                if failed && mode == libc::LIO_WAIT {
                    set_errno(libc::EIO);
                    return -1;
                }
                0
            }
        }
    };
}
lio_hook!(lio_listio, aio_read, aio_write, aio_suspend, aio_error);
lio_hook!(lio_listio64, aio_read64, aio_write64, aio_suspend64, aio_error64);
