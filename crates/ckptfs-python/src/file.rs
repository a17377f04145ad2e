//! An open store file: cursor and positional I/O into caller-owned buffers.

use crate::buffer::Buf;
use crate::{einval, os_err};
use ckptfs_store::{FileHandle, StoreError};
use pyo3::prelude::*;
use std::io::SeekFrom;
use std::sync::{Mutex, MutexGuard};

/// An open file of a store (the native half of `ckptfs.File`). Closed files raise
/// `ValueError` like Python's own; store errors raise `OSError` with the store's errno.
#[pyclass(module = "ckptfs._native", name = "File")]
pub struct PyFile {
    fh: Mutex<Option<FileHandle>>,
    path: String,
    readable: bool,
    writable: bool,
}

fn closed_err() -> PyErr {
    pyo3::exceptions::PyValueError::new_err("I/O operation on closed file")
}

impl PyFile {
    pub(crate) fn new(fh: FileHandle, path: String) -> PyFile {
        let flags = fh.flags();
        PyFile {
            readable: flags.read,
            writable: flags.write,
            fh: Mutex::new(Some(fh)),
            path,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<FileHandle>> {
        // A panic while holding the lock cannot leave the handle inconsistent in a way
        // that matters more than the error already raised: keep using it.
        self.fh.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `f` on the open handle with the GIL released.
    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut FileHandle) -> Result<R, StoreError> + Send,
    ) -> PyResult<R> {
        let r = py.allow_threads(|| {
            let mut g = self.lock();
            g.as_mut().map(f)
        });
        match r {
            None => Err(closed_err()),
            Some(r) => r.map_err(os_err),
        }
    }
}

fn pread_full(fh: &mut FileHandle, mut buf: &mut [u8], mut off: u64) -> Result<usize, StoreError> {
    let mut total = 0;
    while !buf.is_empty() {
        let n = fh.pread(buf, off)?;
        if n == 0 {
            break;
        }
        total += n;
        off += n as u64;
        buf = &mut buf[n..];
    }
    Ok(total)
}

fn pwrite_all(fh: &mut FileHandle, mut buf: &[u8], mut off: u64) -> Result<usize, StoreError> {
    let total = buf.len();
    while !buf.is_empty() {
        let n = fh.pwrite(buf, off)?;
        off += n as u64;
        buf = &buf[n..];
    }
    Ok(total)
}

#[pymethods]
impl PyFile {
    /// Store path of the file.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Whether the file was opened for reading.
    fn readable(&self) -> bool {
        self.readable
    }

    /// Whether the file was opened for writing.
    fn writable(&self) -> bool {
        self.writable
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.lock().is_none()
    }

    /// Read at the position into `buf` (any writable buffer-protocol object, filled in
    /// place without a copy) until it is full or the file ends. Returns the byte count.
    fn readinto(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<usize> {
        let mut b = Buf::get(buf, true)?;
        let s = b.as_mut_slice();
        self.with(py, |fh| fh.read_full(s))
    }

    /// Read at byte `offset` into `buf` without moving the position. Returns the count.
    fn pread_into(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        let mut b = Buf::get(buf, true)?;
        let s = b.as_mut_slice();
        self.with(py, |fh| pread_full(fh, s, offset))
    }

    /// Write all of `buf` (any buffer-protocol object, read in place) at the position
    /// (the end in append mode). Returns its length.
    fn write(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<usize> {
        let b = Buf::get(buf, false)?;
        let s = b.as_slice();
        self.with(py, |fh| fh.write_all(s).map(|()| s.len()))
    }

    /// Write all of `buf` at byte `offset` without moving the position.
    fn pwrite(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        let b = Buf::get(buf, false)?;
        let s = b.as_slice();
        self.with(py, |fh| pwrite_all(fh, s, offset))
    }

    /// Move the position like `os.lseek` (whence 0, 1, 2) and return it.
    #[pyo3(signature = (offset, whence = 0))]
    fn seek(&self, py: Python<'_>, offset: i64, whence: i32) -> PyResult<u64> {
        let pos = match whence {
            0 => {
                let o =
                    u64::try_from(offset).map_err(|_| einval(format!("negative seek position {offset}")))?;
                SeekFrom::Start(o)
            }
            1 => SeekFrom::Current(offset),
            2 => SeekFrom::End(offset),
            w => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "invalid whence ({w})"
                )))
            }
        };
        self.with(py, |fh| fh.seek(pos))
    }

    /// The position.
    fn tell(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |fh| Ok(fh.position()))
    }

    /// The file's size now.
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |fh| Ok(fh.size()))
    }

    /// Set the size to `size` (zero-filled when growing); the position is unchanged.
    fn truncate(&self, py: Python<'_>, size: u64) -> PyResult<u64> {
        self.with(py, |fh| fh.set_len(size).map(|()| size))
    }

    /// Recompute pending checksums (fsync). Data is in the store as soon as written.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |fh| fh.sync())
    }

    /// Close: a writer's close marks the file complete. Closing twice is allowed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let fh = py.allow_threads(|| self.lock().take());
        match fh {
            None => Ok(()),
            Some(fh) => py.allow_threads(|| fh.close()).map_err(os_err),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<ckptfs._native.File {:?}{}>",
            self.path,
            if self.closed() { " closed" } else { "" }
        )
    }
}
