//! The single-instance lock of a daemon: an exclusive `flock` on a file in the runtime
//! directory, held for the daemon's life and released by the kernel when it dies. The
//! file records the holder's pid for messages only: whether a daemon runs is decided by
//! the lock, never by the pid (which may be stale or reused).

use crate::dir::RuntimeDir;
use crate::error::{Result, RuntimeError};
use crate::sys;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A held single-instance lock; released (and its pid cleared) when dropped.
#[derive(Debug)]
pub struct InstanceLock {
    file: File,
    path: PathBuf,
}

impl InstanceLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        // Clear the pid first so that nobody reads ours after we are gone.
        let _ = self.file.set_len(0);
        let _ = sys::flock(&self.file, libc::LOCK_UN);
    }
}

/// The pid recorded in a lock file, if it is a live process.
fn recorded_pid(f: &File) -> Option<u32> {
    let mut buf = [0u8; 32];
    let n = f.read_at(&mut buf, 0).ok()?;
    let pid = std::str::from_utf8(&buf[..n]).ok()?.trim().parse::<u32>().ok()?;
    sys::pid_alive(pid).then_some(pid)
}

fn would_block(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EWOULDBLOCK)
}

impl RuntimeDir {
    /// Take the single-instance lock `name` without waiting. When another process holds
    /// it, the error ([`RuntimeError::Held`]) names that process's pid.
    pub fn lock(&self, name: &str) -> Result<InstanceLock> {
        let path = self.file_path(name);
        let mut file = self.open_file(name, libc::O_RDWR | libc::O_CREAT)?;
        match sys::flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => {}
            Err(e) if would_block(&e) => {
                return Err(RuntimeError::Held {
                    pid: recorded_pid(&file),
                    path,
                })
            }
            Err(e) => return Err(RuntimeError::io(format!("flock {}", path.display()), e)),
        }
        // A holder that died left its pid: replace it with ours.
        let record = file
            .set_len(0)
            .and_then(|()| file.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0))
            .and_then(|()| file.flush());
        record.map_err(|e| RuntimeError::io(format!("write {}", path.display()), e))?;
        Ok(InstanceLock { file, path })
    }

    /// Is the lock `name` held by a live process? `Some(pid)` with the holder's pid
    /// (0 if not recorded yet); `None` if free (a stale pid in the file is ignored).
    pub fn lock_holder(&self, name: &str) -> Result<Option<u32>> {
        let Some(f) = self.open_read(name)? else {
            return Ok(None);
        };
        match sys::flock(&f, libc::LOCK_SH | libc::LOCK_NB) {
            // Free: the shared lock is released when `f` closes.
            Ok(()) => Ok(None),
            Err(e) if would_block(&e) => Ok(Some(recorded_pid(&f).unwrap_or(0))),
            Err(e) => Err(RuntimeError::io(
                format!("flock {}", self.file_path(name).display()),
                e,
            )),
        }
    }

    /// Is the lock `name` held by a live process?
    pub fn is_locked(&self, name: &str) -> bool {
        matches!(self.lock_holder(name), Ok(Some(_)))
    }
}
