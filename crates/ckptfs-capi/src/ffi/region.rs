//! The data-region calls (CRUISE section 4.6): the memory chunks of the store and a file's chunk list, and the spill path.

use super::*;

// ------------------------------------------------------------------------ data region
/// The memory data region of the store holding `path`, as mapped in this process.
/// Each output pointer may be NULL if that value is not wanted.
///
/// # Safety
/// `path` is a C string; each output pointer is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_get_data_region(
    path: *const c_char,
    base: *mut *mut c_void,
    size: *mut usize,
    chunk_size: *mut usize,
) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        let d = at(path, "data region", |r| Ok(r.store.data_region()))?;
        // SAFETY: each pointer is NULL or writable per the contract.
        unsafe {
            if !base.is_null() {
                base.write_unaligned(d.base as *mut c_void);
            }
            if !size.is_null() {
                size.write_unaligned(d.len as usize);
            }
            if !chunk_size.is_null() {
                chunk_size.write_unaligned(d.chunk_size as usize);
            }
        }
        Ok(0)
    }) as c_int
}

/// The chunks of file `path` in logical order. Returns the number of chunks; with
/// `out == NULL && max == 0` only counts them; ERANGE if there are more than `max`.
///
/// # Safety
/// `path` is a C string; `out` is NULL or valid for writing `max` entries.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_get_chunk_list(
    path: *const c_char,
    out: *mut CkptfsChunkMeta,
    max: usize,
) -> isize {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        let list = at(path, "chunk list", |r| Ok(r.store.chunk_list(&r.path)?))?;
        if out.is_null() {
            return if max == 0 {
                Ok(list.len() as i64)
            } else {
                Err(efault("chunk list buffer"))
            };
        }
        if list.len() > max {
            return Err(CapiError::new(
                libc::ERANGE,
                format!("chunk list {path}: {} chunks, the buffer holds {max}", list.len()),
            ));
        }
        for (i, c) in list.iter().enumerate() {
            let (location, offset) = match c.location {
                ChunkLocation::Memory(o) => (CHUNK_MEMORY, o),
                ChunkLocation::Spill(o) => (CHUNK_SPILL, o),
            };
            let m = CkptfsChunkMeta {
                logical: c.logical,
                location,
                offset,
                length: c.len,
                written: c.written,
                crc32c: c.crc.unwrap_or(0),
                crc_valid: c.crc.is_some() as u32,
                chunk_id: c.chunk_id,
            };
            // SAFETY: i < list.len() <= max entries are writable per the contract.
            unsafe { out.add(i).write_unaligned(m) };
        }
        Ok(list.len() as i64)
    }) as isize
}

/// The spill file of the store holding `path`: copies its path (NUL-terminated) into
/// `buf` and returns its length, 0 if the store has no spill file. With
/// `buf == NULL && len == 0` only returns the length; ERANGE if `len` is too small.
///
/// # Safety
/// `path` is a C string; `buf` is NULL or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_get_spill_path(path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    call(|| {
        // SAFETY: forwarded contract.
        let path = unsafe { cstr(path, "path") }?;
        let sp = at(path, "spill path", |r| Ok(r.store.info().spill_path))?;
        let s = sp.as_ref().and_then(|p| p.to_str()).unwrap_or("");
        // SAFETY: forwarded contract.
        unsafe { copy_str_out(s, buf, len, "spill path") }
    }) as isize
}

/// Copy `s` with a NUL into `buf` and return its length; with `buf == NULL && len == 0`
/// only the length. ERANGE if `len` is too small, EFAULT for NULL with `len > 0`.
///
/// # Safety
/// `buf` is NULL or valid for writing `len` bytes.
pub(crate) unsafe fn copy_str_out(s: &str, buf: *mut c_char, len: usize, what: &str) -> Result<i64> {
    if buf.is_null() {
        return if len == 0 {
            Ok(s.len() as i64)
        } else {
            Err(efault("buffer"))
        };
    }
    if s.len() >= len {
        return Err(CapiError::new(
            libc::ERANGE,
            format!("{what} needs {} bytes, the buffer holds {len}", s.len() + 1),
        ));
    }
    // SAFETY: s.len() + 1 <= len bytes are writable per the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        buf.add(s.len()).write(0);
    }
    Ok(s.len() as i64)
}
