//! Namespace calls: stat, unlink, rename, mkdir, rmdir, symlinks and directory listing.

use super::*;

// ------------------------------------------------------------------------ namespace
/// Attributes of `path`.
///
/// # Safety
/// `path` is a C string; `st` is valid for writing one `struct ckptfs_stat`.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_stat(path: *const c_char, st: *mut CkptfsStat) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        if st.is_null() {
            return Err(efault("stat buffer"));
        }
        let s = at(path, "stat", |r| Ok(to_c_stat(&r.store.stat(&r.path)?)))?;
        // SAFETY: non-NULL and writable per the contract.
        unsafe { st.write_unaligned(s) };
        Ok(0)
    }) as c_int
}

/// Remove a file (open descriptors keep it readable until closed).
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_unlink(path: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        at(path, "unlink", |r| Ok(r.store.unlink(&r.path)?))?;
        Ok(0)
    }) as c_int
}

/// Rename atomically, replacing the target.
///
/// # Safety
/// `from` and `to` are C strings.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_rename(from: *const c_char, to: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let (from, to) = unsafe { (cstr(from, "from")?, cstr(to, "to")?) };
        (|| {
            let (store, f, t) = state::resolve_pair(from, to)?;
            Ok(store.rename(&f, &t)?)
        })()
        .map_err(|e: CapiError| e.context(format_args!("rename {from} -> {to}")))?;
        Ok(0)
    }) as c_int
}

/// Give the file `from` (not followed if a symlink) the additional name `to` (a hard
/// link, store format 5).
///
/// # Safety
/// `from` and `to` are C strings.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_link(from: *const c_char, to: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let (from, to) = unsafe { (cstr(from, "from")?, cstr(to, "to")?) };
        (|| {
            let (store, f, t) = state::resolve_pair(from, to)?;
            Ok(store.link(&f, &t).map(|_| ())?)
        })()
        .map_err(|e: CapiError| e.context(format_args!("link {from} -> {to}")))?;
        Ok(0)
    }) as c_int
}

/// Create a directory.
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_mkdir(path: *const c_char, mode: libc::mode_t) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        at(path, "mkdir", |r| {
            Ok(r.store.mkdir(&r.path, mode & 0o7777).map(|_| ())?)
        })?;
        Ok(0)
    }) as c_int
}

/// Create a symbolic link `path` whose target is `target` (kept as given). The C API,
/// like the store, never follows symlinks: `ckptfs_open` of one is -ELOOP.
///
/// # Safety
/// `target` and `path` are C strings.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_symlink(target: *const c_char, path: *const c_char) -> c_int {
    call(|| {
        if target.is_null() {
            return Err(efault("target"));
        }
        // SAFETY: non-NULL and NUL-terminated per the contract.
        let t = unsafe { std::ffi::CStr::from_ptr(target) }.to_bytes();
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        at(path, "symlink", |r| {
            Ok(r.store.symlink(t, &r.path).map(|_| ())?)
        })?;
        Ok(0)
    }) as c_int
}

/// Copy the target of the symbolic link `path` into `buf` (at most `size` bytes, no
/// NUL added, as readlink(2)); returns the bytes copied. -EINVAL if `path` is not a
/// symlink or `size` is 0.
///
/// # Safety
/// `path` is a C string; `buf` is valid for writing `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_readlink(path: *const c_char, buf: *mut c_char, size: usize) -> isize {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        if buf.is_null() {
            return Err(efault("buffer"));
        }
        if size == 0 {
            return Err(CapiError::new(
                libc::EINVAL,
                format!("readlink {path}: buffer size 0"),
            ));
        }
        let t = at(path, "readlink", |r| Ok(r.store.readlink(&r.path)?))?;
        let n = t.len().min(size);
        // SAFETY: buf is valid for size >= n bytes per the contract; t is our own vector.
        unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), buf.cast::<u8>(), n) };
        Ok(n as i64)
    }) as isize
}

/// Remove an empty directory.
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_rmdir(path: *const c_char) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        at(path, "rmdir", |r| Ok(r.store.rmdir(&r.path)?))?;
        Ok(0)
    }) as c_int
}

/// Open a directory for [`ckptfs_readdir`]; returns a descriptor (close it with
/// `ckptfs_close`).
///
/// # Safety
/// `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_opendir(path: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { ckptfs_open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0) }
}

/// Next entry of a directory descriptor: 1 with `*ent` filled, 0 at the end.
///
/// # Safety
/// `ent` is valid for writing one `ckptfs_dirent`.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_readdir(fd: c_int, ent: *mut CkptfsDirent) -> c_int {
    call(|| {
        if ent.is_null() {
            return Err(efault("dirent buffer"));
        }
        let next = state::with_desc(fd, |d| {
            if !d.fh.is_dir() {
                return Err(CapiError::new(
                    libc::ENOTDIR,
                    format!("descriptor {fd} is not a directory"),
                ));
            }
            if d.dir.is_none() {
                d.dir = Some((d.fh.read_dir()?, 0));
            }
            let (entries, pos) = d.dir.as_mut().expect("just set");
            let e = entries.get(*pos).cloned();
            *pos += e.is_some() as usize;
            Ok(e)
        })?;
        let Some(e) = next else { return Ok(0) };
        let mut out = CkptfsDirent {
            ino: e.ino,
            kind: match e.kind {
                FileKind::File => KIND_FILE,
                FileKind::Dir => KIND_DIR,
                FileKind::Symlink => KIND_SYMLINK,
                _ => KIND_SPECIAL,
            },
            namelen: 0,
            name: [0; 256],
        };
        // Names are at most 255 bytes; truncate defensively, keeping the NUL.
        let n = e.name.len().min(255);
        for (dst, src) in out.name.iter_mut().zip(&e.name.as_bytes()[..n]) {
            *dst = *src as c_char;
        }
        out.namelen = n as u32;
        // SAFETY: non-NULL and writable per the contract.
        unsafe { ent.write_unaligned(out) };
        Ok(1)
    }) as c_int
}
