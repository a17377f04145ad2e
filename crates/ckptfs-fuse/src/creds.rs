//! Acting as the calling user (CRFS mode, daemon run by root for every user of a node).
//!
//! [`AsCaller::enter`] switches the *calling thread's* file-system credentials to the
//! FUSE request's uid, gid and supplementary groups (read from `/proc/PID/status`, used
//! only while that process still has the request's fsuid/fsgid) for
//! the duration of one backend call, and [`Drop`] switches back. The backend then
//! applies its own rules exactly as for the user's own process: new files and
//! directories are owned by the caller (setgid directories pass their group on),
//! permission and sticky-directory checks, chown/chmod/utimes rules, and EACCES/EPERM.
//!
//! `setfsuid`/`setfsgid` are per-thread in the kernel (glibc does not broadcast them);
//! the supplementary groups are set with the raw `setgroups` system call for the same
//! reason (glibc's wrapper would change every thread of the daemon). When the fsuid
//! leaves 0 the kernel drops the file-system capabilities (CAP_CHOWN, CAP_DAC_OVERRIDE,
//! CAP_FOWNER, CAP_FSETID, ...) from the thread, and restores them when it returns to 0.
//!
//! A daemon not run as root serves only its own user: nothing is switched.

use fuser::{Errno, Request};

/// Most supplementary groups taken from a caller (NGROUPS_MAX is 65536; sites use few).
const MAX_GROUPS: usize = 1024;

/// Are credentials switched per request? (daemon running as root)
pub(crate) fn switching() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The supplementary groups of process (or thread) `pid`, from "Groups:" in
/// /proc/PID/status, if that process still has the request's fsuid and fsgid (the
/// fourth fields of "Uid:" and "Gid:"): a pid reused by another process since the
/// request was sent must not lend its groups.
fn groups_of(pid: u32, uid: u32, gid: u32) -> Option<Vec<libc::gid_t>> {
    if pid == 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| text.lines().find_map(|l| l.strip_prefix(key));
    let fs_id = |key: &str| -> Option<u32> { field(key)?.split_whitespace().nth(3)?.parse().ok() };
    if fs_id("Uid:") != Some(uid) || fs_id("Gid:") != Some(gid) {
        return None;
    }
    let g: Vec<libc::gid_t> = field("Groups:")?
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .take(MAX_GROUPS)
        .collect();
    Some(g)
}

/// Is the caller of `req` in group `gid` (its fsgid or a supplementary group)? Root
/// counts as a member (CAP_FSETID), as the kernel's `in_group_or_capable`.
pub(crate) fn in_group(req: &Request, gid: u32) -> bool {
    req.uid() == 0
        || req.gid() == gid
        || groups_of(req.pid(), req.uid(), req.gid()).is_some_and(|g| g.contains(&gid))
}

fn set_groups(g: &[libc::gid_t]) -> Result<(), Errno> {
    // SAFETY: a raw system call reading g.len() gids from a valid slice; per-thread
    // (unlike glibc's setgroups, which changes every thread).
    let r = unsafe { libc::syscall(libc::SYS_setgroups, g.len(), g.as_ptr()) };
    if r < 0 {
        return Err(Errno::from_i32(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EPERM),
        ));
    }
    Ok(())
}

/// The calling thread runs backend calls as a FUSE caller until dropped.
pub(crate) struct AsCaller {
    active: bool,
}

impl AsCaller {
    /// Switch to the credentials of `req`'s caller (no-op when the daemon is not root).
    pub(crate) fn enter(req: &Request) -> Result<AsCaller, Errno> {
        if !switching() {
            return Ok(AsCaller { active: false });
        }
        let groups = groups_of(req.pid(), req.uid(), req.gid()).unwrap_or_else(|| vec![req.gid()]);
        let guard = AsCaller { active: true };
        set_groups(&groups)?;
        // SAFETY: setfsgid/setfsuid change only this thread's file-system ids; they
        // return the previous id and cannot fail in a way that harms memory. Called with
        // an invalid id (-1) they change nothing and return the current one, which
        // checks that the switch happened (without CAP_SETUID/CAP_SETGID, in a
        // container, it silently does not: then refuse rather than act as root).
        let ok = unsafe {
            libc::setfsgid(req.gid());
            libc::setfsuid(req.uid());
            libc::setfsgid(u32::MAX) as u32 == req.gid() && libc::setfsuid(u32::MAX) as u32 == req.uid()
        };
        if !ok {
            tracing::error!(
                uid = req.uid(),
                gid = req.gid(),
                "cannot switch to the caller's file-system ids"
            );
            return Err(Errno::EPERM);
        }
        Ok(guard)
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        // SAFETY: back to the daemon's (root) file-system ids on this thread; fsuid 0
        // first so the capabilities return before the groups are reset.
        unsafe {
            libc::setfsuid(0);
            libc::setfsgid(0);
        }
        if let Err(e) = set_groups(&[]) {
            tracing::error!(errno = e.code(), "cannot reset the daemon's groups");
        }
    }
}

/// Run `f` as the caller of `req`.
pub(crate) fn as_caller<T>(req: &Request, f: impl FnOnce() -> Result<T, Errno>) -> Result<T, Errno> {
    let _g = AsCaller::enter(req)?;
    f()
}
