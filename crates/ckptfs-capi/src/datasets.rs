//! The dataset calls of the C ABI (`ckptfs_ckpt_begin`, `ckptfs_ckpt_complete`,
//! `ckptfs_have_restart`, `ckptfs_start_restart`, `ckptfs_need_checkpoint`), over
//! `ckptfs-datasets`. They act on the store `ckptfs_mount(prefix, NULL)` would use (the
//! `CKPTFS_*` environment), for this process's rank (`CKPTFS_RANK` or the MPI
//! launcher's), job (`CKPTFS_JOB`) and drain destinations (`CKPTFS_DEST`).
//!
//! With a cluster configured (`CKPTFS_CLUSTER` naming the cluster file and
//! `CKPTFS_NODE_ID` this node, as `ckptfs --cluster/--node-id` and `ckptfs run` pass them
//! on), the calls act for that node, on its store from the cluster file, and
//! completeness, ids and restart are job-wide: the other nodes' daemons are asked, as
//! for `ckptfs ckpt` (`ckptfs_partner::ClusterNodes`; docs/datasets.md, "Across
//! nodes"). Without them, this node's records alone decide.

use crate::env;
use crate::error::{CapiError, Result};
use crate::ffi::{call, copy_str_out, cstr};
use ckptfs_datasets::{Config, DatasetError, Datasets};
use std::ffi::{c_char, c_int};

fn derr(e: DatasetError) -> CapiError {
    CapiError::new(e.errno(), e.to_string())
}

pub(crate) fn datasets() -> Result<Datasets> {
    datasets_from(&|k: &str| std::env::var(k).ok())
}

/// The cluster file and this node's id, when both are set (non-empty).
fn cluster_of(get: &dyn Fn(&str) -> Option<String>) -> Option<(String, String)> {
    let v = |k: &str| get(k).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    Some((v("CKPTFS_CLUSTER")?, v("CKPTFS_NODE_ID")?))
}

fn datasets_from(get: &dyn Fn(&str) -> Option<String>) -> Result<Datasets> {
    let s = env::settings_from(get)?;
    if s.store.private {
        return Err(CapiError::new(
            libc::EINVAL,
            "datasets need a shared node store (CKPTFS_PRIVATE is set)",
        ));
    }
    let mut cfg = Config::from_settings(&s, get).map_err(derr)?;
    let mut opts = env::options_from(get)?;
    let Some((file, node)) = cluster_of(get) else {
        let store = ckptfs_store::Store::open_or_create(&opts)?;
        return Ok(Datasets::single_node(store, cfg));
    };
    let cluster = ckptfs_cluster::Cluster::load(std::path::Path::new(&file))
        .map_err(|e| CapiError::new(libc::EINVAL, format!("cluster file {file}: {e}")))?;
    let store_name = cluster
        .node(&node)
        .map_err(|e| CapiError::new(libc::EINVAL, format!("node {node} in {file}: {e}")))?
        .store
        .clone();
    if !opts.name.is_empty() && opts.name != store_name {
        return Err(CapiError::new(
            libc::EINVAL,
            format!(
                "CKPTFS_STORE {} conflicts with node {node}'s store {store_name} in {file}",
                opts.name
            ),
        ));
    }
    opts.name = store_name;
    cfg.node = node.clone();
    let timeout = get("CKPTFS_NODE_TIMEOUT_MS")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(std::time::Duration::from_millis)
        .unwrap_or(std::time::Duration::from_secs(3));
    let store = ckptfs_store::Store::open_or_create(&opts)?;
    let nodes = ckptfs_partner::ClusterNodes::new(cluster, &node, store.clone(), timeout)
        .map_err(|e| CapiError::new(libc::EINVAL, format!("cluster: {e}")))?;
    Ok(Datasets::new(store, cfg, Box::new(nodes)))
}

/// Begin a dataset named `name` for this rank; its id in `*id`. 0 or -errno.
///
/// # Safety
/// `name` is a C string; `id` is NULL or valid for writing a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_ckpt_begin(name: *const c_char, id: *mut u64) -> c_int {
    call(|| {
        // SAFETY: forwarded contract.
        let name = unsafe { cstr(name, "name") }?;
        let n = datasets()?
            .begin(name, Some(ckptfs_store::process::me()))
            .map_err(derr)?;
        if !id.is_null() {
            // SAFETY: non-NULL and writable per the contract.
            unsafe { id.write(n) };
        }
        Ok(0)
    }) as c_int
}

/// Complete this rank's part of dataset `id` (valid != 0: usable). 0 or -errno:
/// -ENOENT never begun (by this rank), -EALREADY completed already or given up
/// (incomplete) meanwhile.
#[no_mangle]
pub extern "C" fn ckptfs_ckpt_complete(id: u64, valid: c_int) -> c_int {
    call(|| {
        datasets()?.complete(Some(id), valid != 0).map_err(derr)?;
        Ok(0)
    }) as c_int
}

/// Is there a wholly recoverable dataset? 1 (its name copied into `buf` with a NUL),
/// 0 (none; `buf` gets ""), or -errno (-ERANGE: `len` too small).
///
/// # Safety
/// `buf` is NULL (with `len == 0`) or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_have_restart(buf: *mut c_char, len: usize) -> c_int {
    call(|| {
        let found = datasets()?.have_restart().map_err(derr)?;
        let name = found.as_ref().map(|d| d.1.as_str()).unwrap_or("");
        if !(buf.is_null() && len == 0) {
            // SAFETY: forwarded contract.
            unsafe { copy_str_out(name, buf, len, "dataset name") }?;
        }
        Ok(i64::from(found.is_some()))
    }) as c_int
}

/// Restart: bring the newest wholly recoverable dataset's missing files back into the
/// store (CRC checked) and copy its name into `buf`. 1, 0 (none), or -errno.
///
/// # Safety
/// As [`ckptfs_have_restart`].
#[no_mangle]
pub unsafe extern "C" fn ckptfs_start_restart(buf: *mut c_char, len: usize) -> c_int {
    call(|| {
        let r = datasets()?.restart().map_err(derr)?;
        let name = r.chosen.as_ref().map(|d| d.name.as_str()).unwrap_or("");
        if !(buf.is_null() && len == 0) {
            // SAFETY: forwarded contract.
            unsafe { copy_str_out(name, buf, len, "dataset name") }?;
        }
        Ok(i64::from(r.chosen.is_some()))
    }) as c_int
}

/// Is a checkpoint due now (Young/Daly on the measured cost, or an alarm)? `*flag` = 1
/// or 0. 0 or -errno.
///
/// # Safety
/// `flag` is valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_need_checkpoint(flag: *mut c_int) -> c_int {
    call(|| {
        if flag.is_null() {
            return Err(CapiError::new(libc::EFAULT, "flag is NULL"));
        }
        let n = ckptfs_datasets::policy::need(&datasets()?).map_err(derr)?;
        // SAFETY: non-NULL and writable per the contract.
        unsafe { flag.write(c_int::from(n.due)) };
        Ok(0)
    }) as c_int
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::ffi::CString;

    // The tests of this module run one at a time under this lock: they set the process
    // environment the calls read.
    pub(crate) static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn with_env<T>(store: &str, f: impl FnOnce() -> T) -> T {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: serialised by LOCK; no other test of this crate reads these variables.
        unsafe {
            std::env::set_var("CKPTFS_STORE", store);
            std::env::set_var("CKPTFS_MEM_SIZE", "16M");
            std::env::set_var("CKPTFS_CHUNK_SIZE", "64K");
            std::env::set_var("CKPTFS_JOB", "capi");
        }
        let r = f();
        let _ = ckptfs_store::Store::destroy(store);
        ckptfs_datasets::remove_lock(store);
        // SAFETY: as above.
        unsafe {
            for k in [
                "CKPTFS_STORE",
                "CKPTFS_MEM_SIZE",
                "CKPTFS_CHUNK_SIZE",
                "CKPTFS_JOB",
            ] {
                std::env::remove_var(k);
            }
        }
        r
    }

    fn put(store: &str, path: &str, bytes: &[u8]) {
        let s = ckptfs_store::Store::attach(&ckptfs_store::StoreOptions::named(store)).unwrap();
        let mut f = s.open(path, ckptfs_store::OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(bytes).unwrap();
        f.close().unwrap();
    }

    #[test]
    fn begin_complete_have_and_start_restart_return_zero_or_errno() {
        let store = format!("hd-capi-{}", std::process::id());
        with_env(&store, || {
            let mut buf = [0 as c_char; 64];
            // SAFETY: buf is valid for 64 bytes.
            assert_eq!(unsafe { ckptfs_have_restart(buf.as_mut_ptr(), buf.len()) }, 0);
            let mut flag = -1;
            // SAFETY: flag is a valid int.
            assert_eq!(unsafe { ckptfs_need_checkpoint(&mut flag) }, 0);
            assert_eq!(flag, 1, "no checkpoint yet: due");
            let name = CString::new("step1").unwrap();
            let mut id = 0u64;
            // SAFETY: valid C string and out pointer.
            assert_eq!(unsafe { ckptfs_ckpt_begin(name.as_ptr(), &mut id) }, 0);
            assert_eq!(id, 1);
            put(&store, "/rank0", b"state one");
            assert_eq!(ckptfs_ckpt_complete(id, 1), 0);
            assert_eq!(ckptfs_ckpt_complete(id, 1), -libc::EALREADY);
            assert_eq!(ckptfs_ckpt_complete(77, 1), -libc::ENOENT);
            // SAFETY: buf is valid for 64 bytes.
            assert_eq!(unsafe { ckptfs_have_restart(buf.as_mut_ptr(), buf.len()) }, 1);
            // SAFETY: copy_str_out wrote a NUL-terminated string.
            let got = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
            assert_eq!(got.to_str().unwrap(), "step1");
            let mut small = [0 as c_char; 3];
            // SAFETY: small is valid for 3 bytes.
            let r = unsafe { ckptfs_start_restart(small.as_mut_ptr(), small.len()) };
            assert_eq!(r, -libc::ERANGE);
            // SAFETY: buf is valid for 64 bytes.
            assert_eq!(unsafe { ckptfs_start_restart(buf.as_mut_ptr(), buf.len()) }, 1);
            // SAFETY: NULL name is refused before it is read.
            let r = unsafe { ckptfs_ckpt_begin(std::ptr::null(), &mut id) };
            assert_eq!(r, -libc::EFAULT);
            // SAFETY: NULL flag is refused.
            let r = unsafe { ckptfs_need_checkpoint(std::ptr::null_mut()) };
            assert_eq!(r, -libc::EFAULT);
        });
    }
}
