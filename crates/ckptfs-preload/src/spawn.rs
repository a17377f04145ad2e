//! The exec and spawn hooks: store descriptors and the virtual working directory passed
//! on to the new program in the environment (`CKPTFS_INHERIT`, `CKPTFS_CWD`), and store
//! files executed by resolving them first (`exec_store`). See docs/preload.md, "exec".
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use crate::state;
use crate::sys::{self, guarded, in_shim, real, set_errno};
use std::ffi::{c_char, c_int, c_void, CStr};

extern "C" {
    static environ: *const *const c_char;
}

/// Does `envp` hold an entry starting with `prefix`?
unsafe fn env_has(envp: *const *const c_char, prefix: &[u8]) -> bool {
    let mut p = envp;
    // SAFETY: envp is a NULL-terminated array of C strings (or null).
    unsafe {
        while !p.is_null() && !(*p).is_null() {
            if CStr::from_ptr(*p).to_bytes().starts_with(prefix) {
                return true;
            }
            p = p.add(1);
        }
    }
    false
}

/// `envp` without any shim entry (`CKPTFS_INHERIT`, `CKPTFS_CWD`), then `entries`.
unsafe fn env_with(envp: *const *const c_char, entries: &[&std::ffi::CString]) -> Vec<*const c_char> {
    let mut v = Vec::new();
    let mut p = envp;
    // SAFETY: envp is a NULL-terminated array of C strings (or null).
    unsafe {
        while !p.is_null() && !(*p).is_null() {
            let e = CStr::from_ptr(*p).to_bytes();
            if !e.starts_with(b"CKPTFS_INHERIT=") && !e.starts_with(b"CKPTFS_CWD=") {
                v.push(*p);
            }
            p = p.add(1);
        }
    }
    v.extend(entries.iter().map(|e| e.as_ptr()));
    v.push(std::ptr::null());
    v
}

/// The child's virtual cwd entry (None when there is no virtual cwd).
fn cwd_entry() -> Option<std::ffi::CString> {
    guarded(|| Ok(crate::cwd::entry())).ok().flatten()
}

/// Run an exec: release store files, pass inherited descriptors and the virtual cwd on
/// in the environment, and take the descriptors back if exec fails.
unsafe fn exec_with(envp: *const *const c_char, f: impl FnOnce(*const *const c_char) -> c_int) -> c_int {
    if in_shim() {
        return f(envp);
    }
    let cwd = cwd_entry();
    let prep = guarded(|| Ok(crate::lifecycle::prepare_exec())).ok().flatten();
    // SAFETY: envp per the exec contract.
    if prep.is_none() && cwd.is_none() && !unsafe { env_has(envp, b"CKPTFS_CWD=") } {
        return f(envp);
    }
    let mut entries = Vec::new();
    entries.extend(cwd.as_ref());
    entries.extend(prep.as_ref().map(|p| &p.1));
    // SAFETY: envp per the exec contract.
    let env = unsafe { env_with(envp, &entries) };
    let r = f(env.as_ptr());
    let e = sys::errno();
    if let Some((inh, _)) = prep {
        let _ = guarded(|| {
            crate::lifecycle::exec_failed(inh);
            Ok(())
        });
    }
    set_errno(e);
    r
}

/// posix_spawn(p) with the virtual cwd in the child's environment (glibc's posix_spawn
/// execs with an internal call the exec hooks do not see).
unsafe fn spawn_with(envp: *const *const c_char, f: impl FnOnce(*const *const c_char) -> c_int) -> c_int {
    if in_shim() {
        return f(envp);
    }
    let cwd = cwd_entry();
    // SAFETY: envp per the posix_spawn contract.
    if cwd.is_none() && !unsafe { env_has(envp, b"CKPTFS_CWD=") } {
        return f(envp);
    }
    // SAFETY: as above.
    let env = unsafe { env_with(envp, &cwd.iter().collect::<Vec<_>>()) };
    f(env.as_ptr())
}

/// posix_spawn of `path`, resolved first if it is a store file.
unsafe fn spawn_any(
    pid: *mut libc::pid_t,
    path: *const c_char,
    acts: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real_spawn = |p: *const c_char, a: *const *const c_char, env: *const *const c_char| {
        real!(posix_spawn: fn(*mut libc::pid_t, *const c_char, *const c_void, *const c_void,
            *const *const c_char, *const *const c_char) -> c_int; libc::ENOSYS; pid, p, acts, attr, a, env)
    };
    if in_shim() {
        return real_spawn(path, argv, envp);
    }
    // SAFETY: posix_spawn contract: C string and NULL-terminated argv.
    match unsafe { crate::exec_store::resolve(path, argv) } {
        // SAFETY: as posix_spawn(3).
        None => unsafe { spawn_with(envp, |env| real_spawn(path, argv, env)) },
        Some(Err(e)) => e,
        // SAFETY: as posix_spawn(3) with the resolved path and argv.
        Some(Ok(r)) => unsafe { spawn_with(envp, |env| real_spawn(r.path.as_ptr(), r.argv.as_ptr(), env)) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    acts: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: as posix_spawn(3).
    unsafe { spawn_any(pid, path, acts, attr, argv, envp) }
}
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    acts: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    if !in_shim() && !file.is_null() {
        // SAFETY: the caller's C string.
        let name = unsafe { CStr::from_ptr(file) };
        let found = if name.to_bytes().contains(&b'/') {
            None
        } else {
            guarded(|| Ok(crate::exec_store::search_path(name)))
                .ok()
                .flatten()
        };
        if name.to_bytes().contains(&b'/') || found.is_some() {
            let p = found.as_deref().unwrap_or(name);
            // SAFETY: as posix_spawn(3) with the path found.
            return unsafe { spawn_any(pid, p.as_ptr(), acts, attr, argv, envp) };
        }
    }
    // SAFETY: as posix_spawnp(3).
    unsafe {
        spawn_with(envp, |env| {
            real!(posix_spawnp: fn(*mut libc::pid_t, *const c_char, *const c_void, *const c_void,
                *const *const c_char, *const *const c_char) -> c_int; libc::ENOSYS; pid, file, acts, attr, argv, env)
        })
    }
}

/// execve of `p`, or of what a store path resolves to (a script's interpreter, a memfd
/// copy of a program: see `exec_store`).
unsafe fn execve_any(p: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    let real_execve = |p: *const c_char, a: *const *const c_char, env: *const *const c_char| real!(execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int; -1; p, a, env);
    if in_shim() {
        return real_execve(p, argv, envp);
    }
    // SAFETY: exec contract: p and argv are C strings / a NULL-terminated array.
    match unsafe { crate::exec_store::resolve(p, argv) } {
        // SAFETY: as execve(2).
        None => unsafe { exec_with(envp, |env| real_execve(p, argv, env)) },
        Some(Err(e)) => {
            set_errno(e);
            -1
        }
        // SAFETY: as execve(2), with the resolved path and argv (alive until return).
        Some(Ok(r)) => unsafe { exec_with(envp, |env| real_execve(r.path.as_ptr(), r.argv.as_ptr(), env)) },
    }
}

/// execvpe: a bare name found first in a store directory of PATH, or a store path, is
/// resolved; everything else goes to the real execvpe.
unsafe fn execvpe_any(p: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    let real_execvpe = |p: *const c_char, a: *const *const c_char, env: *const *const c_char| real!(execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int; -1; p, a, env);
    if in_shim() || p.is_null() {
        return real_execvpe(p, argv, envp);
    }
    // SAFETY: the caller's C string.
    let name = unsafe { CStr::from_ptr(p) };
    if name.to_bytes().contains(&b'/') {
        // SAFETY: as execve(2).
        return unsafe { execve_any(p, argv, envp) };
    }
    if let Ok(Some(found)) = guarded(|| Ok(crate::exec_store::search_path(name))) {
        // SAFETY: as execve(2) with the path found.
        return unsafe { execve_any(found.as_ptr(), argv, envp) };
    }
    // SAFETY: as execvpe(3).
    unsafe { exec_with(envp, |env| real_execvpe(p, argv, env)) }
}

#[no_mangle]
pub unsafe extern "C" fn execve(
    p: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: as execve(2).
    unsafe { execve_any(p, argv, envp) }
}
#[no_mangle]
pub unsafe extern "C" fn execv(p: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as execv(3): execve with the current environment.
    unsafe { execve_any(p, argv, environ) }
}
#[no_mangle]
pub unsafe extern "C" fn execvp(p: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as execvp(3): execvpe with the current environment.
    unsafe { execvpe_any(p, argv, environ) }
}
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    p: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: as execvpe(3).
    unsafe { execvpe_any(p, argv, envp) }
}
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    if !in_shim() {
        if let Some(d) = state::desc_of(fd) {
            // A store descriptor: exec the file it was opened as.
            let Ok(p) = std::ffi::CString::new(d.full_path()) else {
                set_errno(libc::EINVAL);
                return -1;
            };
            drop(d);
            // SAFETY: as execve(2).
            return unsafe { execve_any(p.as_ptr(), argv, envp) };
        }
    }
    // SAFETY: as fexecve(3).
    unsafe {
        exec_with(
            envp,
            |env| real!(fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int; -1; fd, argv, env),
        )
    }
}
