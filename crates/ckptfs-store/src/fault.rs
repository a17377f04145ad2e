//! Crash points for tests: with `CKPTFS_CRASH_AT=<name>` in the environment, the process
//! SIGKILLs itself when it reaches the named point, so tests can stop a writer at the
//! exact instruction where a naive design would corrupt the store.

use std::sync::OnceLock;

static TARGET: OnceLock<Option<String>> = OnceLock::new();

/// SIGKILL this process if `CKPTFS_CRASH_AT` names this point.
#[inline]
pub fn crash_point(name: &str) {
    let t = TARGET.get_or_init(|| std::env::var("CKPTFS_CRASH_AT").ok().filter(|s| !s.is_empty()));
    if let Some(t) = t {
        if t == name {
            // SAFETY: raising a signal on ourselves has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGKILL) };
        }
    }
}
