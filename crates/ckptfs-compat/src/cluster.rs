//! Across nodes: the job-wide dataset calls of ckptfs's C API, loaded at run time.
//!
//! With `CKPTFS_CLUSTER` (the cluster file) and `CKPTFS_NODE_ID` set, as for the C API
//! and `ckptfs run --cluster`, beginning, completing and restarting a dataset must be
//! judged job-wide by asking the other nodes' daemons. That client lives with the node
//! daemon (crate ckptfs-node), which these libraries must not link; `libckptfs.so`
//! (crate ckptfs-capi) exports it as `ckptfs_ckpt_begin`, `ckptfs_ckpt_complete`,
//! `ckptfs_have_restart` and `ckptfs_start_restart`. So in cluster mode only, the
//! library loads `libckptfs.so` with `dlopen` (from `CKPTFS_CAPI_LIB`, else next to
//! this library, else the loader's search path) and calls those four functions: a
//! single-node program never loads it. This module holds the `dlopen`/`dlsym` unsafe.

use crate::error::{CompatError, Result};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;

type BeginFn = unsafe extern "C" fn(*const c_char, *mut u64) -> c_int;
type CompleteFn = unsafe extern "C" fn(u64, c_int) -> c_int;
type NameFn = unsafe extern "C" fn(*mut c_char, usize) -> c_int;
type ErrFn = unsafe extern "C" fn() -> *const c_char;

/// The cluster file and this node's id, when both are set.
pub fn from_env() -> Option<(PathBuf, String)> {
    let v = |k: &str| {
        std::env::var(k)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    Some((PathBuf::from(v("CKPTFS_CLUSTER")?), v("CKPTFS_NODE_ID")?))
}

/// The store of `node` in the cluster file, and the node's index there.
pub fn node_store(file: &std::path::Path, node: &str) -> Result<(String, u32)> {
    let c = ckptfs_cluster::Cluster::load(file)
        .map_err(|e| CompatError::Invalid(format!("cluster file {}: {e}", file.display())))?;
    let store = c
        .node(node)
        .map_err(|e| CompatError::Invalid(format!("node {node} in {}: {e}", file.display())))?
        .store
        .clone();
    let index = c.nodes.iter().position(|n| n.id == node).unwrap_or(0) as u32;
    Ok((store, index))
}

/// The C API's job-wide dataset calls.
pub struct JobWide {
    begin: BeginFn,
    complete: CompleteFn,
    have: NameFn,
    start: NameFn,
    last_error: ErrFn,
}

/// The directory of the object holding this function (libscr.so / libveloc-client.so).
fn own_dir() -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the address and fills `info`.
    let ok = unsafe { libc::dladdr(own_dir as *const c_void, info.as_mut_ptr()) };
    if ok == 0 {
        return None;
    }
    // SAFETY: dladdr succeeded and initialised `info`.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let p = unsafe { CStr::from_ptr(info.dli_fname) };
    PathBuf::from(p.to_string_lossy().into_owned())
        .parent()
        .map(PathBuf::from)
}

impl JobWide {
    /// Load `libckptfs.so` and its dataset calls.
    pub fn load() -> Result<JobWide> {
        let mut tried = Vec::new();
        let mut cands: Vec<String> = Vec::new();
        if let Ok(p) = std::env::var("CKPTFS_CAPI_LIB") {
            cands.push(p);
        }
        if let Some(d) = own_dir() {
            cands.push(d.join("libckptfs.so").to_string_lossy().into_owned());
        }
        cands.push("libckptfs.so".into());
        for c in cands {
            let Ok(cs) = CString::new(c.clone()) else { continue };
            // SAFETY: dlopen of a library path; RTLD_LOCAL keeps its symbols out of the
            // global scope, so they never interpose on the application's.
            let h = unsafe { libc::dlopen(cs.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if h.is_null() {
                tried.push(c);
                continue;
            }
            let sym = |n: &str| -> Result<*mut c_void> {
                let cn = CString::new(n).map_err(|_| CompatError::Invalid(n.into()))?;
                // SAFETY: h is a live handle from dlopen; cn is a C string.
                let p = unsafe { libc::dlsym(h, cn.as_ptr()) };
                if p.is_null() {
                    Err(CompatError::Invalid(format!("{c} has no {n}")))
                } else {
                    Ok(p)
                }
            };
            // SAFETY: the symbols are the C API's functions with exactly these
            // signatures (include/ckptfs.h); the handle is never closed, so they stay
            // valid for the life of the process.
            return Ok(unsafe {
                JobWide {
                    begin: std::mem::transmute::<*mut c_void, BeginFn>(sym("ckptfs_ckpt_begin")?),
                    complete: std::mem::transmute::<*mut c_void, CompleteFn>(sym("ckptfs_ckpt_complete")?),
                    have: std::mem::transmute::<*mut c_void, NameFn>(sym("ckptfs_have_restart")?),
                    start: std::mem::transmute::<*mut c_void, NameFn>(sym("ckptfs_start_restart")?),
                    last_error: std::mem::transmute::<*mut c_void, ErrFn>(sym("ckptfs_last_error")?),
                }
            });
        }
        Err(CompatError::Invalid(format!(
            "CKPTFS_CLUSTER is set but libckptfs.so (the C API, which judges datasets across nodes) cannot be loaded (tried {}); build it with cargo build --release -p ckptfs-capi",
            tried.join(", ")
        )))
    }

    fn err(&self, what: &str, rc: c_int) -> CompatError {
        // SAFETY: ckptfs_last_error never returns NULL and its text stays valid for the
        // thread; it is copied at once.
        let msg = unsafe { CStr::from_ptr((self.last_error)()) }
            .to_string_lossy()
            .into_owned();
        CompatError::State(format!("{what}: {msg} (errno {})", -rc))
    }

    /// `ckptfs_ckpt_begin`: begin or join `name` job-wide; its id.
    pub fn begin(&self, name: &str) -> Result<u64> {
        let n = CString::new(name).map_err(|_| CompatError::Invalid("name contains NUL".into()))?;
        let mut id = 0u64;
        // SAFETY: valid C string and out pointer.
        let rc = unsafe { (self.begin)(n.as_ptr(), &mut id) };
        if rc < 0 {
            return Err(self.err("ckptfs_ckpt_begin", rc));
        }
        Ok(id)
    }

    /// `ckptfs_ckpt_complete`.
    pub fn complete(&self, id: u64, valid: bool) -> Result<()> {
        // SAFETY: plain values.
        let rc = unsafe { (self.complete)(id, c_int::from(valid)) };
        if rc < 0 {
            return Err(self.err("ckptfs_ckpt_complete", rc));
        }
        Ok(())
    }

    fn name_call(&self, f: NameFn, what: &str) -> Result<Option<String>> {
        let mut buf = vec![0 as c_char; 4096];
        // SAFETY: buf holds buf.len() bytes.
        let rc = unsafe { f(buf.as_mut_ptr(), buf.len()) };
        if rc < 0 {
            return Err(self.err(what, rc));
        }
        if rc == 0 {
            return Ok(None);
        }
        // SAFETY: the callee wrote a NUL-terminated name into buf.
        Ok(Some(
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned(),
        ))
    }

    /// `ckptfs_have_restart`: the name of the dataset a restart would choose, job-wide.
    pub fn have_restart(&self) -> Result<Option<String>> {
        self.name_call(self.have, "ckptfs_have_restart")
    }

    /// `ckptfs_start_restart`: choose it (every rank of the restart gets the same) and
    /// bring this node's missing files back (partners, PFS; CRC checked).
    pub fn start_restart(&self) -> Result<Option<String>> {
        self.name_call(self.start, "ckptfs_start_restart")
    }
}
