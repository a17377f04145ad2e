//! Memory maps (`mmap`, `munmap`, `msync`) and in-kernel copies (`copy_file_range`, `sendfile`).
// Each exported function has the contract of the libc function of the same name.
#![allow(clippy::missing_safety_doc, missing_docs)]

use super::*;

// ------------------------------------------------------------------ mmap, copies

unsafe fn mmap_impl(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: Off,
) -> *mut c_void {
    let fwd = || real!(mmap64: fn(*mut c_void, usize, c_int, c_int, c_int, Off) -> *mut c_void; libc::MAP_FAILED; addr, len, prot, flags, fd, off);
    if flags & libc::MAP_ANONYMOUS != 0 || !maybe_store_fd(fd) || in_shim() {
        return fwd();
    }
    let r = guarded(|| {
        let Some(d) = state::desc_of(fd) else {
            return Ok(None);
        };
        // Shared and writable: the store's own pages (module shmap).
        // (MAP_PRIVATE is 2 and MAP_SHARED_VALIDATE 3: compare the mapping type, not bits.)
        let kind = flags & 0x0f;
        if (kind == libc::MAP_SHARED || kind == libc::MAP_SHARED_VALIDATE) && prot & libc::PROT_WRITE != 0 {
            // SAFETY: the caller's mmap arguments, passed on.
            return unsafe { crate::shmap::map(&d, addr, len, prot, flags, off) }.map(Some);
        }
        // Otherwise a snapshot copy in anonymous memory.
        if d.is_dir {
            return Err(libc::ENODEV);
        }
        if d.acc == libc::O_WRONLY {
            return Err(libc::EACCES);
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64;
        if len == 0 || off < 0 || off % page != 0 {
            return Err(libc::EINVAL);
        }
        let keep =
            flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_POPULATE | libc::MAP_NORESERVE);
        let p = real!(mmap64: fn(*mut c_void, usize, c_int, c_int, c_int, Off) -> *mut c_void; libc::MAP_FAILED;
            addr, len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | keep, -1, 0);
        if p == libc::MAP_FAILED {
            return Err(sys::errno());
        }
        // SAFETY: p is a fresh writable mapping of len bytes.
        let dst = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) };
        let mut done = 0;
        while done < len {
            let n = ops::preadv(&d, &mut [&mut dst[done..]], off + done as i64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        // SAFETY: changing the protection of our own mapping.
        unsafe { libc::mprotect(p, len, prot) };
        Ok(Some(p))
    });
    match r {
        Ok(Some(p)) => p,
        Ok(None) => fwd(),
        Err(e) => {
            set_errno(e);
            libc::MAP_FAILED
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    if crate::shmap::any() && !in_shim() {
        let _ = guarded(|| {
            crate::shmap::unmap(addr as usize, len);
            Ok(())
        });
    }
    real!(munmap: fn(*mut c_void, usize) -> c_int; -1; addr, len)
}
#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: usize, flags: c_int) -> c_int {
    if crate::shmap::any() && !in_shim() {
        match guarded(|| crate::shmap::sync(addr as usize, len)) {
            Ok(true) => return 0,
            Err(e) => return ret(Err(e)),
            Ok(false) => {}
        }
    }
    real!(msync: fn(*mut c_void, usize, c_int) -> c_int; -1; addr, len, flags)
}
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: Off,
) -> *mut c_void {
    // SAFETY: as mmap(2).
    unsafe { mmap_impl(addr, len, prot, flags, fd, off) }
}
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: Off,
) -> *mut c_void {
    // SAFETY: as mmap(2).
    unsafe { mmap_impl(addr, len, prot, flags, fd, off) }
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fin: c_int,
    oin: *mut Off,
    fout: c_int,
    oout: *mut Off,
    len: usize,
    flags: c_uint,
) -> isize {
    if !in_shim() && (state::desc_of(fin).is_some() || state::desc_of(fout).is_some()) {
        // Callers (coreutils cp) fall back to read/write on EXDEV.
        return ret(Err(libc::EXDEV));
    }
    real!(copy_file_range: fn(c_int, *mut Off, c_int, *mut Off, usize, c_uint) -> isize; -1; fin, oin, fout, oout, len, flags)
}

/// sendfile between any two descriptors when one is a store file: a read/write loop.
unsafe fn sendfile_impl(out: c_int, fin: c_int, off: *mut Off, count: usize) -> isize {
    let store_in = state::desc_of(fin);
    let store_out = state::desc_of(out);
    if in_shim() || (store_in.is_none() && store_out.is_none()) {
        return real!(sendfile64: fn(c_int, c_int, *mut Off, usize) -> isize; -1; out, fin, off, count);
    }
    let r = guarded(|| {
        let mut buf = vec![0u8; count.min(1 << 20)];
        let mut total = 0usize;
        // SAFETY: off is null or a valid offset per sendfile(2).
        let mut pos = if off.is_null() {
            None
        } else {
            // SAFETY: off is non-null here and valid per sendfile(2).
            Some(unsafe { *off })
        };
        while total < count {
            let want = (count - total).min(buf.len());
            let b = &mut buf[..want];
            let n = match (&store_in, pos) {
                (Some(d), Some(p)) => ops::preadv(d, &mut [b], p)?,
                (Some(d), None) => ops::read(d, b)?,
                (None, Some(p)) => {
                    let n = real!(pread64: fn(c_int, *mut c_void, usize, Off) -> isize; -1; fin, b.as_mut_ptr() as *mut c_void, want, p);
                    if n < 0 {
                        return Err(sys::errno());
                    } else {
                        n as usize
                    }
                }
                (None, None) => {
                    let n = real!(read: fn(c_int, *mut c_void, usize) -> isize; -1; fin, b.as_mut_ptr() as *mut c_void, want);
                    if n < 0 {
                        return Err(sys::errno());
                    } else {
                        n as usize
                    }
                }
            };
            if n == 0 {
                break;
            }
            let mut w = 0;
            while w < n {
                let k = match &store_out {
                    Some(d) => ops::writev(d, &[&buf[w..n]])?,
                    None => {
                        let k = real!(write: fn(c_int, *const c_void, usize) -> isize; -1; out, buf[w..].as_ptr() as *const c_void, n - w);
                        if k < 0 {
                            return Err(sys::errno());
                        } else {
                            k as usize
                        }
                    }
                };
                w += k;
            }
            total += n;
            if let Some(p) = pos.as_mut() {
                *p += n as i64;
            }
        }
        if let Some(p) = pos {
            // SAFETY: as above.
            unsafe { *off = p };
        }
        Ok(total as isize)
    });
    ret(r)
}
#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, fin: c_int, off: *mut Off, count: usize) -> isize {
    // SAFETY: as sendfile(2).
    unsafe { sendfile_impl(out, fin, off, count) }
}
#[no_mangle]
pub unsafe extern "C" fn sendfile64(out: c_int, fin: c_int, off: *mut Off, count: usize) -> isize {
    // SAFETY: as sendfile(2).
    unsafe { sendfile_impl(out, fin, off, count) }
}
