//! `SO_RCVLOWAT` on a connection while chunk data arrives: the only unsafe of this crate
//! (one `setsockopt`; no crate of the workspace wraps this option).
//!
//! A socket becomes readable for epoll (and so for tokio) as soon as one byte is queued.
//! While a 1 MiB chunk streams in, the receiving task was then woken for every few dozen
//! KiB, and on a VM each wake-up of a halted vCPU is expensive. With the low-water mark
//! at the rest of the chunk (at most [`LOWAT_MAX`]) it wakes for large pieces. The
//! kernel grows the receive buffer to twice the mark (up to `tcp_rmem[2]`), so the
//! sender is never blocked below it, and the mark never exceeds the bytes still due for
//! this chunk, which the sender sends in one piece: readiness always comes. The
//! blocking connection sets the same marks: a blocking read then returns once the mark
//! is reached (or its timeout passed), not for every few dozen KiB.

use std::os::fd::{AsRawFd, BorrowedFd};

/// `CKPTFS_NO_RCVLOWAT=1` leaves `SO_RCVLOWAT` at 1 (for A/B measurements).
pub(crate) fn on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| ckptfs_settings::job::rcvlowat(&|k| std::env::var(k).ok()))
}

/// Largest low-water mark set (a quarter of a default chunk).
pub(crate) const LOWAT_MAX: usize = 1 << 20;

/// Set the socket's `SO_RCVLOWAT` to `bytes` (at least 1). Errors are ignored: the mark
/// only saves wake-ups.
pub(crate) fn set(fd: BorrowedFd<'_>, bytes: usize) {
    let v = bytes.clamp(1, i32::MAX as usize) as libc::c_int;
    // SAFETY: setsockopt on a descriptor we borrow, reading the c_int we pass by pointer
    // with its exact size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}
