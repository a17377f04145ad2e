//! `SO_RCVLOWAT` on a connection while chunk data arrives: the only unsafe of this crate
//! (one `setsockopt`, one `poll`; no crate of the workspace wraps this option).
//!
//! A socket becomes readable for epoll (and so for tokio) as soon as one byte is queued.
//! While a 1 MiB chunk streams in, the receiving task was then woken for every few dozen
//! KiB, and on a VM each wake-up of a halted vCPU is expensive. With the low-water mark
//! at the rest of the chunk (at most [`LOWAT_MAX`]) it wakes for large pieces. The
//! kernel grows the receive buffer to twice the mark (up to `tcp_rmem[2]`), so the
//! sender is never blocked below it, and the mark never exceeds the bytes still due for
//! this chunk, which the sender sends in one piece: readiness always comes. The
//! blocking connection sets the same marks and reads the same way: it waits for
//! readiness ([`wait_readable`], `poll`), then reads what is there without blocking.
//! A blocking read under a mark would not do: a read that finds part of the mark queued
//! copies it and sleeps, and the kernel wakes it only once a whole mark more is queued
//! beyond what it copied, which the end of a chunk followed by nothing (the last of an
//! answer) never brings: the read sleeps until its timeout.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

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

/// Wait until `fd` is readable, at most `timeout` (None: no limit): for a TCP socket,
/// until its queue holds the `SO_RCVLOWAT` mark, or the peer closed, or an error is
/// pending (the next read reports those). False when the time ran out.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> std::io::Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                // Rounded up: never give up before the deadline.
                left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
            }
        };
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own, for a descriptor we borrow (open for the
        // call); nfds is 1, the length of what we pass.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        match r {
            0 => return Ok(false),
            r if r > 0 => return Ok(true),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}
