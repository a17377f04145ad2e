//! The shim's own kernel descriptors (the lock stand-ins of [`crate::locks`]): their
//! registry, which `close`/`close_range` consult to keep them open, and the
//! per-description stand-in ([`DescLocks`]) that a [`crate::state::Desc`] carries.
//!
//! This module sits below the descriptor table (`state`): it calls only `sys`.

use crate::sys;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Per-description lock state: the OFD/flock stand-in descriptor (-1 until first use).
#[derive(Debug, Default)]
pub struct DescLocks {
    /// The stand-in descriptor (if opened) and its inode, to recognise it after a
    /// program's dup2 onto the number.
    pub(crate) ofd: Mutex<Option<(i32, u64)>>,
}

impl Drop for DescLocks {
    fn drop(&mut self) {
        let cur = self.ofd.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((fd, ino)) = cur {
            forget_shim_fd(fd);
            // Never close a program's descriptor that took the number (dup2 onto it).
            if still_ours(fd, ino) {
                sys::raw_close(fd);
            }
        }
    }
}

/// The inode of kernel descriptor `fd`, or 0.
pub(crate) fn ino_of(fd: i32) -> u64 {
    // SAFETY: all-zero is a valid stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    match raw(libc::SYS_fstat, fd as _, &mut st as *mut _ as _, 0) {
        Ok(_) => st.st_ino,
        Err(_) => 0,
    }
}

/// Is `fd` still the stand-in of inode `ino` (not replaced by the program's dup2)?
pub(crate) fn still_ours(fd: i32, ino: u64) -> bool {
    ino != 0 && ino_of(fd) == ino
}

/// Every stand-in descriptor of this process (close/close_range leave them alone).
static SHIM_FDS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
static SHIM_N: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Is `fd` one of the shim's stand-in descriptors?
#[inline(always)]
pub fn is_shim_fd(fd: i32) -> bool {
    SHIM_N.load(Ordering::Relaxed) > 0 && is_shim_fd_slow(fd)
}

#[cold]
#[inline(never)]
fn is_shim_fd_slow(fd: i32) -> bool {
    lock(&SHIM_FDS).contains(&fd)
}

/// The stand-in descriptors inside `[lo, hi]`, sorted.
pub fn shim_fds_in(lo: u32, hi: u32) -> Vec<i32> {
    if SHIM_N.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    lock(&SHIM_FDS)
        .iter()
        .copied()
        .filter(|f| (lo..=hi).contains(&(*f as u32)))
        .collect()
}

pub(crate) fn forget_shim_fd(fd: i32) {
    if lock(&SHIM_FDS).remove(&fd) {
        SHIM_N.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) fn raw(nr: libc::c_long, a: libc::c_long, b: libc::c_long, c: libc::c_long) -> Result<i64, i32> {
    // SAFETY: raw syscalls on descriptor numbers and caller-validated pointers.
    let r = unsafe { libc::syscall(nr, a, b, c) };
    if r < 0 {
        Err(sys::errno())
    } else {
        Ok(r)
    }
}

/// Register `fd` as one of the shim's descriptors.
pub(crate) fn add_shim_fd(fd: i32) {
    if lock(&SHIM_FDS).insert(fd) {
        SHIM_N.fetch_add(1, Ordering::Relaxed);
    }
}
