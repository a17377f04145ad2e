//! Process identity for leases: (pid, start time) so that a reused pid is never mistaken
//! for the process that took the lease.

use std::sync::atomic::{AtomicU64, Ordering};

/// A process as seen by leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcId {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks after boot (field 22 of /proc/PID/stat).
    pub start: u64,
}

/// Cached identity of this process; `pid << 32` guards against use after fork.
static CACHE: AtomicU64 = AtomicU64::new(0);
static CACHE_START: AtomicU64 = AtomicU64::new(0);

/// Identity of the calling process.
pub fn me() -> ProcId {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    if CACHE.load(Ordering::Acquire) == pid as u64 {
        return ProcId {
            pid,
            start: CACHE_START.load(Ordering::Acquire),
        };
    }
    let start = read_stat(pid).map(|s| s.1).unwrap_or(0);
    CACHE_START.store(start, Ordering::Release);
    CACHE.store(pid as u64, Ordering::Release);
    ProcId { pid, start }
}

/// Is the process still running? Zombies count as dead: they can never write again.
pub fn alive(p: ProcId) -> bool {
    if p == me() {
        // The caller is running (no /proc read: a stat of a file this process writes
        // asks this at every call).
        return true;
    }
    match read_stat(p.pid) {
        Some((state, start)) => start == p.start && state != b'Z' && state != b'X',
        None => false,
    }
}

/// (state letter, start time) from /proc/PID/stat.
fn read_stat(pid: u32) -> Option<(u8, u64)> {
    let s = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: parse after the last ')'.
    let close = s.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&s[close + 2..]).ok()?;
    let mut fields = rest.split(' ');
    let state = fields.next()?.as_bytes().first().copied()?;
    // Fields after ')' start at field 3 (state); starttime is field 22.
    let start = fields.nth(22 - 4)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_is_alive_and_stable() {
        let a = me();
        assert!(a.start > 0);
        assert_eq!(a, me());
        assert!(alive(a));
        assert!(!alive(ProcId {
            pid: a.pid,
            start: a.start + 1
        }));
    }

    #[test]
    fn dead_and_zombie_are_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = read_stat(pid).map(|s| s.1);
        // Wait until it is a zombie (exited, not reaped).
        for _ in 0..200 {
            if matches!(read_stat(pid), Some((b'Z', _))) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if let Some(start) = start {
            assert!(!alive(ProcId { pid, start }));
        }
        child.wait().unwrap();
        assert!(!alive(ProcId {
            pid,
            start: start.unwrap_or(0)
        }));
    }
}
