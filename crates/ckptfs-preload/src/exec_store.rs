//! Executing a program or script stored in the store. The kernel cannot open
//! `/ckpt/run.sh`, so before an exec hook calls the real exec, a store path is resolved
//! the way the kernel's binfmt handlers would:
//!
//! * a script (`#!interp [arg]`) becomes `interp [arg] PATH args...` with PATH as the
//!   caller gave it, so the interpreter (which has the shim) reads the script from the
//!   store and `$0` is unchanged; an interpreter in the store is resolved again (at most
//!   4 levels, as the kernel; then ELOOP);
//! * anything else (an ELF program) is copied into a private close-on-exec `memfd` and
//!   executed as `/proc/self/fd/N`: `/proc/self/exe` then names the memfd, and
//!   `$ORIGIN`-relative libraries are not found.
//!
//! Permission checks as the kernel: a directory or a file without an execute bit is
//! EACCES; a missing file ENOENT.

use crate::ops;
use crate::resolve::Loc;
use crate::state;
use std::ffi::{c_char, CStr, CString};

/// An exec target rewritten to something the kernel can run.
pub struct Resolved {
    /// Path for the real exec.
    pub path: CString,
    /// Strings the new argv points into.
    _strings: Vec<CString>,
    /// NULL-terminated argv.
    pub argv: Vec<*const c_char>,
    /// memfd holding a program copied out of the store (closed if exec fails).
    pub memfd: Option<i32>,
}

impl Drop for Resolved {
    fn drop(&mut self) {
        if let Some(fd) = self.memfd.take() {
            crate::sys::raw_close(fd);
        }
    }
}

/// Read a whole store file (the program image or script).
fn read_all(sp: &str) -> Result<Vec<u8>, i32> {
    let store = state::store()?;
    let st = store.stat(sp).map_err(state::se)?;
    if st.kind != ckptfs_store::FileKind::File || st.mode & 0o111 == 0 {
        return Err(libc::EACCES);
    }
    let mut h = store
        .open(sp, ckptfs_store::OpenFlags::READ, 0)
        .map_err(state::se)?;
    let mut data = vec![0u8; st.size as usize];
    let n = h.read_full(&mut data).map_err(state::se)?;
    data.truncate(n);
    h.close().map_err(state::se)?;
    Ok(data)
}

/// The interpreter and optional argument of a `#!` line, as the kernel splits it.
pub fn shebang(data: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let rest = data.strip_prefix(b"#!")?;
    let line = &rest[..rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())];
    let line = &line[..line.len().min(255)];
    let ws = |c: &u8| *c == b' ' || *c == b'\t';
    let start = line.iter().position(|c| !ws(c))?;
    let line = &line[start..];
    let end = line.iter().position(ws).unwrap_or(line.len());
    let interp = line[..end].to_vec();
    let arg = line[end..]
        .iter()
        .position(|c| !ws(c))
        .map(|s| &line[end + s..])
        .map(|a| a[..a.iter().rposition(|c| !ws(c)).map_or(0, |e| e + 1)].to_vec())
        .filter(|a| !a.is_empty());
    Some((interp, arg))
}

fn memfd_with(data: &[u8]) -> Result<i32, i32> {
    // SAFETY: raw memfd_create with a static name.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_create, c"ckptfs-exec".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::sys::errno());
    }
    let fd = fd as i32;
    let mut off = 0usize;
    while off < data.len() {
        // SAFETY: writing from our buffer.
        let n = unsafe { libc::syscall(libc::SYS_write, fd, data[off..].as_ptr(), data.len() - off) };
        if n <= 0 {
            let e = crate::sys::errno();
            crate::sys::raw_close(fd);
            return Err(if n == 0 { libc::EIO } else { e });
        }
        off += n as usize;
    }
    Ok(fd)
}

/// If `path` (as passed to exec) names a store file, what to exec instead. None: not a
/// store path (exec it unchanged).
///
/// # Safety
/// `path` is a C string, `argv` a NULL-terminated array of C strings.
pub unsafe fn resolve(path: *const c_char, argv: *const *const c_char) -> Option<Result<Resolved, i32>> {
    // SAFETY: caller's C string.
    let (m, sp) = match unsafe { crate::resolve::classify(libc::AT_FDCWD, path) } {
        Ok(Loc::Store(m, sp)) => (m, sp),
        Ok(_) => return None,
        Err(e) => return Some(Err(e)),
    };
    let mut args: Vec<CString> = Vec::new();
    let mut p = argv;
    // SAFETY: argv is NULL-terminated (or null).
    unsafe {
        while !p.is_null() && !(*p).is_null() {
            args.push(CStr::from_ptr(*p).to_owned());
            p = p.add(1);
        }
    }
    // SAFETY: caller's C string.
    let given = unsafe { CStr::from_ptr(path) }.to_owned();
    Some(crate::sys::guarded(|| resolve_store(m, sp, given, args)))
}

fn resolve_store(
    mut m: usize,
    mut sp: String,
    mut given: CString,
    mut args: Vec<CString>,
) -> Result<Resolved, i32> {
    for _ in 0..5 {
        // A store symlink (the program or an interpreter) is followed (links.rs).
        match crate::links::follow(m, &sp, true)? {
            Some(crate::links::Followed::Store(_, p)) => sp = p,
            Some(crate::links::Followed::Host(h)) => return Ok(finish(h, args, None)),
            None => {}
        }
        let data = read_all(&sp)?;
        let Some((interp, arg)) = shebang(&data) else {
            let fd = memfd_with(&data)?;
            let path = CString::new(format!("/proc/self/fd/{fd}")).map_err(|_| libc::EINVAL)?;
            return Ok(finish(path, args, Some(fd)));
        };
        // interp [arg] script args[1..]
        let interp = CString::new(interp).map_err(|_| libc::ENOEXEC)?;
        let mut new = vec![interp.clone()];
        new.extend(arg.map(CString::new).transpose().map_err(|_| libc::ENOEXEC)?);
        new.push(given);
        new.extend(args.into_iter().skip(1));
        args = new;
        // SAFETY: interp is a C string.
        match unsafe { crate::resolve::classify(libc::AT_FDCWD, interp.as_ptr()) }? {
            Loc::Store(im, isp) => {
                m = im;
                sp = isp;
                given = interp;
            }
            Loc::Real => return Ok(finish(interp, args, None)),
            Loc::RealAbs(p) => return Ok(finish(p, args, None)),
        }
    }
    Err(libc::ELOOP)
}

fn finish(path: CString, args: Vec<CString>, memfd: Option<i32>) -> Resolved {
    let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    Resolved {
        path,
        _strings: args,
        argv,
        memfd,
    }
}

/// `execvp`'s PATH search for a bare name when a PATH entry is a store directory: the
/// first directory (in PATH order) holding an executable `name`; None when a kernel
/// directory comes first or nothing matches (the real execvp then searches itself).
pub fn search_path(name: &CStr) -> Option<CString> {
    let n = name.to_str().ok()?;
    if n.is_empty() || n.contains('/') {
        return None;
    }
    let path = std::env::var("PATH").ok()?;
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let cand = CString::new(format!("{dir}/{n}")).ok()?;
        // SAFETY: a C string.
        match unsafe { crate::resolve::classify(libc::AT_FDCWD, cand.as_ptr()) } {
            Ok(Loc::Store(_, sp)) => {
                if ops::stat(&sp)
                    .is_ok_and(|(st, _)| st.kind == ckptfs_store::FileKind::File && st.mode & 0o111 != 0)
                {
                    return Some(cand);
                }
            }
            _ => {
                // SAFETY: raw faccessat on a C string.
                let ok = unsafe {
                    libc::syscall(libc::SYS_faccessat, libc::AT_FDCWD, cand.as_ptr(), libc::X_OK, 0)
                } == 0;
                if ok {
                    return None;
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_splits_like_the_kernel() {
        assert_eq!(shebang(b"#!/bin/sh\necho"), Some((b"/bin/sh".to_vec(), None)));
        assert_eq!(
            shebang(b"#! /usr/bin/env  python3 -u \nx"),
            Some((b"/usr/bin/env".to_vec(), Some(b"python3 -u".to_vec())))
        );
        assert_eq!(shebang(b"\x7fELF"), None);
        assert_eq!(shebang(b"#!\n"), None);
    }
}
