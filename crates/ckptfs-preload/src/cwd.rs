//! The virtual working directory across exec, `posix_spawn`, `system` and `popen`.
//!
//! A `chdir` into a store directory only changes the shim's *virtual* cwd (the kernel's
//! stays where it was). A child program is a new image whose shim starts with no state,
//! so the virtual cwd travels in the environment variable `CKPTFS_CWD`:
//! `VIRTUAL 0x1e KERNEL`, the virtual cwd and the kernel cwd it was set over.
//!
//! * While a virtual cwd is set, the entry is kept in `environ` (so `system`, `popen`,
//!   `execl*` and `posix_spawn` with `environ`, which glibc runs through internal calls
//!   the shim cannot see, pass it on); `chdir` to a real directory removes it.
//! * The exec and `posix_spawn` hooks rewrite an explicit `envp` (shells and make build
//!   their own): any stale entry is dropped and the current one added.
//! * The new image's constructor adopts it only when the kernel cwd still is `KERNEL`
//!   (a program without the shim in between that changed directory invalidates it) and
//!   `VIRTUAL` lies under a mount prefix; it stays in that image's `environ` for its own
//!   children.

use crate::paths;
use crate::state;
use crate::sys;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static VCWD_SET: AtomicBool = AtomicBool::new(false);
static VCWD: Mutex<Option<String>> = Mutex::new(None);

/// The virtual working directory (a store directory entered with chdir), if any.
pub fn vcwd() -> Option<String> {
    if !VCWD_SET.load(Ordering::Acquire) {
        return None;
    }
    VCWD.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Set or clear the virtual working directory (and its `CKPTFS_CWD` environment entry).
pub fn set_vcwd(p: Option<String>) {
    let mut g = VCWD.lock().unwrap_or_else(|e| e.into_inner());
    let was = VCWD_SET.swap(p.is_some(), Ordering::AcqRel);
    if was || p.is_some() {
        // Children (exec, posix_spawn, system, popen) inherit it through the environment.
        publish(p.as_deref());
    }
    *g = p;
}

/// Name of the environment variable carrying the virtual cwd.
pub const CWD_ENV: &str = "CKPTFS_CWD";
const CWD_ENV_C: &CStr = c"CKPTFS_CWD";

/// The variable's value for virtual cwd `v` over the current kernel cwd.
fn value(v: &str) -> Option<CString> {
    let k = sys::real_cwd().ok()?;
    CString::new(format!("{v}\x1e{k}")).ok()
}

/// Keep `environ` in step with a new virtual cwd (None: removed).
pub fn publish(v: Option<&str>) {
    match v.and_then(value) {
        // SAFETY: NUL-terminated name and value; setenv copies them.
        Some(val) => unsafe {
            libc::setenv(CWD_ENV_C.as_ptr(), val.as_ptr(), 1);
        },
        // SAFETY: NUL-terminated name.
        None => unsafe {
            libc::unsetenv(CWD_ENV_C.as_ptr());
        },
    }
}

/// The `CKPTFS_CWD=...` entry for a child's explicit environment, if a virtual cwd is set.
pub fn entry() -> Option<CString> {
    let v = vcwd()?;
    let val = value(&v)?;
    let mut e = format!("{CWD_ENV}=").into_bytes();
    e.extend_from_slice(val.as_bytes());
    CString::new(e).ok()
}

/// Parse a `CKPTFS_CWD` value: the virtual cwd if it is valid over kernel cwd `kernel`.
pub fn parse(val: &str, kernel: &str, mounts: &[String]) -> Option<String> {
    let (v, k) = val.split_once('\x1e')?;
    if k != kernel || !v.starts_with('/') {
        return None;
    }
    let n = paths::normalize(v);
    paths::match_mount(mounts, &n).map(|_| n)
}

/// At load: take the virtual cwd the parent passed, if still valid; otherwise remove
/// the stale variable.
pub fn adopt() {
    let Some(val) = std::env::var_os(CWD_ENV) else {
        return;
    };
    let v = sys::real_cwd()
        .ok()
        .and_then(|k| parse(&val.to_string_lossy(), &k, state::mounts()));
    // set_vcwd publishes the value again (or removes the stale one).
    set_vcwd(v);
    if vcwd().is_none() {
        publish(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_value_is_taken_only_over_the_same_kernel_cwd_and_under_a_mount() {
        let m = vec!["/ckpt".to_string()];
        assert_eq!(parse("/ckpt/t\x1e/home/u", "/home/u", &m), Some("/ckpt/t".into()));
        assert_eq!(parse("/ckpt/t/../u\x1e/", "/", &m), Some("/ckpt/u".into()));
        assert_eq!(parse("/ckpt/t\x1e/home/u", "/tmp", &m), None);
        assert_eq!(parse("/tmp/t\x1e/tmp", "/tmp", &m), None);
        assert_eq!(parse("/ckpt/t", "/", &m), None);
        assert_eq!(parse("ckpt\x1e/", "/", &m), None);
    }
}
