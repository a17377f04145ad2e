//! Borrowing a Python object's memory through the buffer protocol, without a copy.
//!
//! The only unsafe code of the bindings. A [`Buf`] holds a `Py_buffer` acquired with
//! `PyObject_GetBuffer` (so the exporter keeps the memory alive and unmoved: numpy
//! refuses to resize an array with an exported buffer, `bytearray` likewise) and
//! releases it on drop. Requesting `PyBUF_SIMPLE`/`PyBUF_WRITABLE` makes the exporter
//! refuse non-contiguous memory (BufferError), so the view is always `len` plain bytes.

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use std::mem::MaybeUninit;

/// An acquired buffer view. Released (with the GIL) on drop.
pub struct Buf {
    view: Box<ffi::Py_buffer>,
}

// SAFETY: the view's memory stays valid and in place until `PyBuffer_Release` (in drop,
// under the GIL): the exporter may not free or move it while the export is held. Other
// Python threads may touch the same bytes meanwhile, which is the same data race a
// `readinto` into a shared bytearray has in CPython itself; it cannot corrupt Rust state
// because we only copy plain bytes in and out.
unsafe impl Send for Buf {}
// SAFETY: as for Send; `&Buf` only exposes the pointer and length.
unsafe impl Sync for Buf {}

impl Buf {
    /// Borrow `obj`'s bytes; `writable` asks for a writable view (readinto).
    pub fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Buf> {
        let mut view: Box<MaybeUninit<ffi::Py_buffer>> = Box::new(MaybeUninit::uninit());
        let flags = if writable {
            ffi::PyBUF_WRITABLE
        } else {
            ffi::PyBUF_SIMPLE
        };
        // SAFETY: `obj` is a live object (we hold a Bound, hence the GIL) and `view`
        // points to writable memory the size of a Py_buffer.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), flags) };
        if rc == -1 {
            return Err(PyErr::take(obj.py())
                .unwrap_or_else(|| PyBufferError::new_err("object does not support the buffer protocol")));
        }
        // SAFETY: PyObject_GetBuffer returned 0, so it initialised the whole struct.
        let view: Box<ffi::Py_buffer> = unsafe { Box::from_raw(Box::into_raw(view).cast()) };
        let b = Buf { view };
        if writable && b.view.readonly != 0 {
            return Err(PyBufferError::new_err("buffer is read-only"));
        }
        if b.view.len < 0 || (b.view.buf.is_null() && b.view.len > 0) {
            return Err(PyBufferError::new_err("invalid buffer"));
        }
        Ok(b)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.view.len as usize
    }

    /// The bytes, read-only.
    pub fn as_slice(&self) -> &[u8] {
        if self.len() == 0 {
            return &[];
        }
        // SAFETY: buf points to `len` contiguous bytes kept alive by the export (see the
        // Send impl); len > 0 so buf is non-null (checked in `get`).
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, self.len()) }
    }

    /// The bytes, writable. Only for views acquired with `writable`.
    #[allow(clippy::mut_from_ref)]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        debug_assert_eq!(self.view.readonly, 0);
        if self.len() == 0 {
            return &mut [];
        }
        // SAFETY: as in `as_slice`; the view was acquired writable (checked in `get`),
        // and `&mut self` ensures no other Rust slice of this view exists.
        unsafe { std::slice::from_raw_parts_mut(self.view.buf as *mut u8, self.len()) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        Python::with_gil(|_| {
            // SAFETY: the view was filled by a successful PyObject_GetBuffer and is
            // released exactly once, here, with the GIL held.
            unsafe { ffi::PyBuffer_Release(&mut *self.view) };
        });
    }
}
