//! # ckptfs-python: the node store for Python
//!
//! The native module `ckptfs._native`: [`store::PyStore`] (a store opened or created by
//! name, the settings table's options) and [`file::PyFile`] (an open file whose
//! `readinto`/`write` take any buffer-protocol object without a copy). The pure-Python
//! package `ckptfs` (python/ckptfs) wraps these in `io.RawIOBase` objects, the fsspec
//! file system and the torch.distributed.checkpoint classes.
//!
//! Errors: every [`ckptfs_store::StoreError`] becomes `OSError(errno, message)`, which
//! Python maps to its subclass (`FileNotFoundError` for ENOENT, ...). The GIL is
//! released around every copy and every store call that takes a lock.

mod buffer;
mod cluster;
mod datasets;
mod file;
mod store;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// `OSError(errno, message)` for a store error; Python picks the subclass from the errno.
pub(crate) fn os_err(e: ckptfs_store::StoreError) -> PyErr {
    PyOSError::new_err((e.errno(), e.to_string()))
}

/// `OSError(EINVAL, message)`.
pub(crate) fn einval(msg: impl Into<String>) -> PyErr {
    PyOSError::new_err((libc::EINVAL, msg.into()))
}

/// The native module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<store::PyStore>()?;
    m.add_class::<store::PyStat>()?;
    m.add_class::<file::PyFile>()?;
    m.add_class::<datasets::PyDatasets>()?;
    m.add_function(wrap_pyfunction!(store::destroy, m)?)?;
    m.add_function(wrap_pyfunction!(store::default_store_name, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::cluster_store_name, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::cluster_store, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::cluster_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::read_job_file, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::unrecorded_checkpoints, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
