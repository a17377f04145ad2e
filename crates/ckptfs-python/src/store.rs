//! `ckptfs._native.Store`: open or create a node store and work on its namespace.

use crate::buffer::Buf;
use crate::file::PyFile;
use crate::{einval, os_err};
use ckptfs_settings::{FileText, Inputs};
use ckptfs_store::{ChunkLocation, FileKind, OpenFlags, Stat, Store, StoreOptions, WriteState};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};
use std::collections::HashMap;

/// A node store attached to this process (the native half of `ckptfs.Store`).
#[pyclass(module = "ckptfs._native", name = "Store", frozen)]
pub struct PyStore {
    pub(crate) store: Store,
}

/// Attributes of a store file or directory.
#[pyclass(module = "ckptfs._native", name = "Stat", frozen, get_all)]
pub struct PyStat {
    /// Inode number.
    pub ino: u64,
    /// "file" or "dir".
    pub kind: &'static str,
    /// Permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Chunks allocated.
    pub chunks: u32,
    /// Modification time, ns since the epoch.
    pub mtime_ns: u64,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// "complete", "writing", "incomplete" or "failed".
    pub state: &'static str,
}

#[pymethods]
impl PyStat {
    /// Whether it is a directory.
    fn is_dir(&self) -> bool {
        self.kind == "dir"
    }

    fn __repr__(&self) -> String {
        format!(
            "Stat(ino={}, kind={:?}, size={}, mode={:o}, state={:?})",
            self.ino, self.kind, self.size, self.mode, self.state
        )
    }
}

fn state_name(s: WriteState) -> &'static str {
    match s {
        WriteState::Complete => "complete",
        WriteState::Writing => "writing",
        WriteState::Incomplete => "incomplete",
        WriteState::Failed => "failed",
    }
}

impl From<Stat> for PyStat {
    fn from(s: Stat) -> PyStat {
        PyStat {
            ino: s.ino,
            kind: match s.kind {
                FileKind::Dir => "dir",
                FileKind::Symlink => "symlink",
                FileKind::Fifo => "fifo",
                FileKind::Socket => "socket",
                FileKind::CharDevice => "chardevice",
                FileKind::BlockDevice => "blockdevice",
                FileKind::File => "file",
            },
            mode: s.mode,
            size: s.size,
            chunks: s.chunks,
            mtime_ns: s.mtime_ns,
            uid: s.uid,
            gid: s.gid,
            state: state_name(s.state),
        }
    }
}

/// A keyword argument as the settings table's text: booleans as true/false, paths and
/// numbers through `str()` (so sizes may be given as 268435456 or "256M").
fn setting_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(b) = v.downcast::<PyBool>() {
        return Ok(if b.is_true() { "true" } else { "false" }.into());
    }
    let os = v.py().import("os")?;
    if let Ok(p) = os.call_method1("fspath", (v,)) {
        return p.str().map(|s| s.to_string());
    }
    Ok(v.str()?.to_string())
}

/// Resolve the settings like the CLI does: `flags` (keyword arguments) over the
/// variables `env` gives over the settings file (`config`, or `$CKPTFS_CONFIG`).
pub(crate) fn resolve_settings(
    flags: &HashMap<&'static str, String>,
    config: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> PyResult<ckptfs_settings::Settings> {
    let path = config.or_else(|| env(ckptfs_settings::CONFIG_ENV).filter(|s| !s.is_empty()));
    let text = match &path {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| {
            pyo3::exceptions::PyOSError::new_err((
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("reading settings file {p}: {e}"),
            ))
        })?),
        None => None,
    };
    let file = match (&path, &text) {
        (Some(name), Some(text)) => Some(FileText { name, text }),
        _ => None,
    };
    ckptfs_settings::resolve(&Inputs {
        flags: &|k| flags.get(k).cloned(),
        env,
        file,
    })
    .map_err(|e| einval(e.to_string()))
}

/// Resolve the store options like the CLI does: keyword arguments (as flags) over
/// `CKPTFS_*` variables over the settings file (`config`, or `$CKPTFS_CONFIG`).
fn resolve_options(flags: &HashMap<&'static str, String>, config: Option<String>) -> PyResult<StoreOptions> {
    let env = |k: &str| std::env::var(k).ok();
    Ok(resolve_settings(flags, config, &env)?.store.into())
}

/// Open store `opts`, creating it when it does not exist, with one creator per store
/// among the caller's processes on this node: every rank of a job opening the store at
/// once would otherwise each build a whole new segment until one won. The creator holds
/// an `flock` on `create.<store>.lock` in the caller's 0700 runtime directory while it
/// builds the store; the others wait for it, then attach.
fn open_or_create_once(opts: &StoreOptions) -> ckptfs_store::Result<Store> {
    match Store::attach(opts) {
        Err(ckptfs_store::StoreError::NoStore(_)) => {}
        r => return r,
    }
    let name = opts.effective_name()?;
    // Without a runtime directory (or lock) the old way: each creates, one wins.
    let _lock = ckptfs_runtime::RuntimeDir::for_caller().ok().and_then(|rt| {
        let f = rt
            .open_file(&format!("create.{name}.lock"), libc::O_CREAT | libc::O_RDWR)
            .ok()?;
        f.lock().ok()?;
        Some(f)
    });
    Store::open_or_create(opts)
}

#[pymethods]
impl PyStore {
    /// Open the store `name` (default: the settings' store, `u<UID>`), creating it if
    /// `create` and it does not exist. The other arguments are the settings table's
    /// store options; they override `CKPTFS_*` variables and the settings file.
    #[new]
    #[pyo3(signature = (name=None, create=true, *, mem_size=None, chunk_size=None, max_files=None,
                        shm_dir=None, spill_dir=None, spill_size=None, private=None, allow_foreign_owner=None, config=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: Option<String>,
        create: bool,
        mem_size: Option<Bound<'_, PyAny>>,
        chunk_size: Option<Bound<'_, PyAny>>,
        max_files: Option<Bound<'_, PyAny>>,
        shm_dir: Option<Bound<'_, PyAny>>,
        spill_dir: Option<Bound<'_, PyAny>>,
        spill_size: Option<Bound<'_, PyAny>>,
        private: Option<Bound<'_, PyAny>>,
        allow_foreign_owner: Option<Bound<'_, PyAny>>,
        config: Option<Bound<'_, PyAny>>,
    ) -> PyResult<PyStore> {
        let mut flags: HashMap<&'static str, String> = HashMap::new();
        if let Some(n) = name {
            flags.insert("store", n);
        }
        for (key, v) in [
            ("mem_size", &mem_size),
            ("chunk_size", &chunk_size),
            ("max_files", &max_files),
            ("shm_dir", &shm_dir),
            ("spill_dir", &spill_dir),
            ("spill_size", &spill_size),
            ("private", &private),
            ("allow_foreign_owner", &allow_foreign_owner),
        ] {
            if let Some(v) = v {
                flags.insert(key, setting_text(v)?);
            }
        }
        let config = config.map(|c| setting_text(&c)).transpose()?;
        let opts = resolve_options(&flags, config)?;
        let store = py
            .allow_threads(|| {
                if create {
                    open_or_create_once(&opts)
                } else {
                    Store::attach(&opts)
                }
            })
            .map_err(os_err)?;
        Ok(PyStore { store })
    }

    /// The store's name.
    #[getter]
    fn name(&self) -> &str {
        self.store.name()
    }

    /// The chunk size in bytes.
    #[getter]
    fn chunk_size(&self) -> u64 {
        self.store.chunk_size()
    }

    /// Open `path` with POSIX `open(2)` flags (`os.O_RDONLY`, `os.O_WRONLY|os.O_CREAT|
    /// os.O_TRUNC`, ...); new files get `mode`.
    #[pyo3(signature = (path, flags, mode=0o644))]
    fn open(&self, py: Python<'_>, path: String, flags: i32, mode: u32) -> PyResult<PyFile> {
        let fl = OpenFlags::from_posix(flags).map_err(os_err)?;
        let fh = py
            .allow_threads(|| self.store.open(&path, fl, mode))
            .map_err(os_err)?;
        Ok(PyFile::new(fh, path))
    }

    /// Attributes of `path`.
    fn stat(&self, py: Python<'_>, path: String) -> PyResult<PyStat> {
        py.allow_threads(|| self.store.stat(&path))
            .map(PyStat::from)
            .map_err(os_err)
    }

    /// Names in directory `path` (sorted).
    #[pyo3(signature = (path="/".to_string()))]
    fn listdir(&self, py: Python<'_>, path: String) -> PyResult<Vec<String>> {
        let mut v: Vec<String> = py
            .allow_threads(|| self.store.read_dir(&path))
            .map_err(os_err)?
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n != "." && n != "..")
            .collect();
        v.sort();
        Ok(v)
    }

    /// Create directory `path`.
    #[pyo3(signature = (path, mode=0o755))]
    fn mkdir(&self, py: Python<'_>, path: String, mode: u32) -> PyResult<()> {
        py.allow_threads(|| self.store.mkdir(&path, mode))
            .map(|_| ())
            .map_err(os_err)
    }

    /// Remove the empty directory `path`.
    fn rmdir(&self, py: Python<'_>, path: String) -> PyResult<()> {
        py.allow_threads(|| self.store.rmdir(&path)).map_err(os_err)
    }

    /// Remove the file `path`.
    fn remove(&self, py: Python<'_>, path: String) -> PyResult<()> {
        py.allow_threads(|| self.store.unlink(&path)).map_err(os_err)
    }

    /// Rename `src` to `dst` (replacing a file there), atomically.
    fn rename(&self, py: Python<'_>, src: String, dst: String) -> PyResult<()> {
        py.allow_threads(|| self.store.rename(&src, &dst)).map_err(os_err)
    }

    /// Set the size of `path`.
    fn truncate(&self, py: Python<'_>, path: String, size: u64) -> PyResult<()> {
        py.allow_threads(|| self.store.truncate(&path, size))
            .map_err(os_err)
    }

    /// Read `path` from byte `offset` into `buf` (any writable buffer-protocol object,
    /// filled in place) until it is full or the file ends. Returns the byte count.
    #[pyo3(signature = (path, buf, offset=0))]
    fn read_into(
        &self,
        py: Python<'_>,
        path: String,
        buf: &Bound<'_, PyAny>,
        offset: u64,
    ) -> PyResult<usize> {
        let mut b = Buf::get(buf, true)?;
        let s = b.as_mut_slice();
        py.allow_threads(|| {
            let mut fh = self.store.open(&path, OpenFlags::READ, 0)?;
            let mut total = 0;
            let mut rest = &mut s[..];
            let mut off = offset;
            while !rest.is_empty() {
                let n = fh.pread(rest, off)?;
                if n == 0 {
                    break;
                }
                total += n;
                off += n as u64;
                rest = &mut rest[n..];
            }
            fh.close()?;
            Ok(total)
        })
        .map_err(os_err)
    }

    /// The chunks of file `path` in logical order, for zero-copy readers: a list of
    /// dicts with `logical`, `chunk_id`, `location` ("memory" or "spill"), `offset`
    /// (from the data region's base or in the spill file), `len`, `written`, `crc`.
    fn chunk_list<'py>(&self, py: Python<'py>, path: String) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let chunks = py
            .allow_threads(|| self.store.chunk_list(&path))
            .map_err(os_err)?;
        chunks
            .into_iter()
            .map(|c| {
                let d = PyDict::new(py);
                d.set_item("logical", c.logical)?;
                d.set_item("chunk_id", c.chunk_id)?;
                let (loc, off) = match c.location {
                    ChunkLocation::Memory(o) => ("memory", o),
                    ChunkLocation::Spill(o) => ("spill", o),
                };
                d.set_item("location", loc)?;
                d.set_item("offset", off)?;
                d.set_item("len", c.len)?;
                d.set_item("written", c.written)?;
                d.set_item("crc", c.crc)?;
                Ok(d)
            })
            .collect()
    }

    /// The memory data region as mapped in this process: (address, length, chunk size).
    /// Bytes of a chunk at `offset` are at `address + offset`.
    fn data_region(&self) -> (usize, u64, u64) {
        let r = self.store.data_region();
        (r.base as usize, r.len, r.chunk_size)
    }

    /// Settings and usage of the store (`ckptfs status`) as a dict.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = self.store.info();
        let d = PyDict::new(py);
        d.set_item("name", i.name)?;
        d.set_item("segment", i.segment.display().to_string())?;
        d.set_item("chunk_size", i.chunk_size)?;
        d.set_item("mem_size", i.mem_size)?;
        d.set_item("mem_chunks", i.mem_chunks)?;
        d.set_item("mem_free_chunks", i.mem_free_chunks)?;
        d.set_item("spill_size", i.spill_size)?;
        d.set_item("spill_free_chunks", i.spill_free_chunks)?;
        d.set_item("max_files", i.max_files)?;
        d.set_item("files", i.files)?;
        d.set_item("dirs", i.dirs)?;
        d.set_item("state", i.state)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("<ckptfs._native.Store {:?}>", self.store.name())
    }
}

/// Remove the store `name` (its segment and spill file). Raises OSError(EBUSY), naming
/// them, while another process uses it (a FUSE mount, a node daemon, a program under the
/// shim), as `ckptfs destroy` without `--force`.
#[pyfunction]
pub fn destroy(py: Python<'_>, name: String) -> PyResult<()> {
    // The segment's directory comes from the environment (CKPTFS_SHM_DIR), as for
    // every other store of this process.
    let dir = std::env::var_os("CKPTFS_SHM_DIR")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from);
    py.allow_threads(|| {
        Store::destroy_in(dir.as_deref(), &name)?;
        // The state and lock files of the store's drain agent and datasets, in the
        // caller's runtime directory.
        ckptfs_agent::status::remove_status(&name);
        ckptfs_datasets::remove_lock(&name);
        Ok(())
    })
    .map_err(os_err)
}

/// The default store name, `u<UID>`.
#[pyfunction]
pub fn default_store_name() -> String {
    ckptfs_store::default_store_name()
}
