//! Thin wrappers over Linux calls the agent needs: CPU and IO priority, signals, aligned
//! buffers and page-table population. (The one-agent-per-store lock is `ckptfs_runtime`'s.)

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;

/// How much the agent steps back for the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// nice 10 and best-effort IO class at its lowest level (7): the default.
    #[default]
    Low,
    /// nice 19 and the idle IO class: IO only when the disk is otherwise idle.
    Idle,
    /// Leave the priorities alone.
    Normal,
}

const IOPRIO_CLASS_SHIFT: i32 = 13;
const IOPRIO_CLASS_BE: i32 = 2;
const IOPRIO_CLASS_IDLE: i32 = 3;
const IOPRIO_WHO_PROCESS: i32 = 1;

/// Apply `p` to the calling thread (Linux priorities are per thread; threads created
/// afterwards inherit them).
pub fn set_priority(p: Priority) -> io::Result<()> {
    let (nice, ioprio) = match p {
        Priority::Normal => return Ok(()),
        Priority::Low => (10, (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | 7),
        Priority::Idle => (19, IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT),
    };
    // SAFETY: plain syscalls on the calling thread (who = 0) with integer arguments.
    unsafe {
        if libc::setpriority(libc::PRIO_PROCESS, 0, nice) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, ioprio) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// (nice value, IO priority class, IO priority level) of the calling thread.
pub fn current_priority() -> (i32, i32, i32) {
    // SAFETY: plain syscalls with integer arguments.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        let io = libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0) as i32;
        (
            nice,
            io >> IOPRIO_CLASS_SHIFT,
            io & ((1 << IOPRIO_CLASS_SHIFT) - 1),
        )
    }
}

/// Is process `pid` alive?
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as i32, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// A zeroed heap buffer aligned for `O_DIRECT`.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is uniquely owned heap memory.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (at least one page).
    pub fn zeroed(len: usize) -> AlignedBuf {
        let len = len.max(crate::dest::DIRECT_ALIGN);
        let layout = Layout::from_size_align(len, crate::dest::DIRECT_ALIGN).expect("buffer layout");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live allocation of len bytes, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, crate::dest::DIRECT_ALIGN).expect("buffer layout");
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr, layout) };
    }
}
