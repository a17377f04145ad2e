//! Running a closure on a thread that has joined a node's network namespace: sockets it
//! creates (listeners and connections) live in that namespace for their whole life, so
//! a test or bench can talk between nodes in-process. Only the network namespace of the
//! new thread changes (`setns(CLONE_NEWNET)` is per thread); the caller is untouched.

use crate::{NetsimError, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Join the network namespace at `path` on this thread.
fn join(path: &Path) -> Result<()> {
    let f = File::open(path).map_err(|e| NetsimError::Io {
        what: format!("open {}", path.display()),
        source: e,
    })?;
    // SAFETY: setns on a descriptor we own and keep open for the call; it changes only
    // this thread's network namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(NetsimError::Io {
            what: format!("setns {}", path.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Run `f` on a new thread inside the network namespace at `path` and return its value.
pub(crate) fn in_netns<T, F>(path: &Path, f: F) -> Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let path = path.to_path_buf();
    let h = std::thread::Builder::new()
        .name("netsim-netns".into())
        .spawn(move || -> Result<T> {
            join(&path)?;
            Ok(f())
        })
        .map_err(|e| NetsimError::Io {
            what: "spawn a thread".into(),
            source: e,
        })?;
    match h.join() {
        Ok(r) => r,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Spawn `f` on a new thread inside the network namespace at `path` (for servers that
/// run while the caller does something else).
pub(crate) fn spawn_in_netns<T, F>(path: &Path, f: F) -> Result<std::thread::JoinHandle<Result<T>>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("netsim-netns".into())
        .spawn(move || -> Result<T> {
            join(&path)?;
            Ok(f())
        })
        .map_err(|e| NetsimError::Io {
            what: "spawn a thread".into(),
            source: e,
        })
}

/// Restrict the calling thread to the CPUs in `cpus` (ids below `CPU_SETSIZE`).
pub fn pin_current_thread(cpus: &[usize]) -> Result<()> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; CPU_SET writes inside it for
    // ids below CPU_SETSIZE (checked); sched_setaffinity reads it for this thread (0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(NetsimError::Io {
            what: format!("sched_setaffinity {cpus:?}"),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}
