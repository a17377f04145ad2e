//! The kernel's permission rules for store objects, by the caller's effective ids and
//! the owner, group and mode the store keeps: the shim applies them to access, chown,
//! chmod, utimensat, truncate and rename (see docs/preload.md for what is not checked).

use ckptfs_store::Stat;

/// Is the caller's effective uid 0?
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Does the caller own `st`?
pub fn owns(st: &Stat) -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == st.uid }
}

/// Is `gid` the caller's effective group or one of its supplementary groups?
pub fn in_groups(gid: u32) -> bool {
    // SAFETY: getegid has no preconditions.
    if unsafe { libc::getegid() } == gid {
        return true;
    }
    let mut groups = [0 as libc::gid_t; 256];
    // SAFETY: the buffer holds 256 ids.
    let n = unsafe { libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr()) };
    n > 0 && groups[..n as usize].contains(&gid)
}

/// The permission bits (rwx, low three bits) of `st` that apply to the caller: owner,
/// group or other class by its effective ids.
pub fn class_bits(st: &Stat) -> u32 {
    let shift = if owns(st) {
        6
    } else if in_groups(st.gid) {
        3
    } else {
        0
    };
    (st.mode >> shift) & 7
}

/// May the caller write `st` (root always may)?
pub fn may_write(st: &Stat) -> bool {
    is_root() || class_bits(st) & 2 != 0
}

/// May the caller add or remove entries of directory `dir` (write and search)? EACCES.
pub fn check_dir_write(dir: &Stat) -> Result<(), i32> {
    if is_root() || class_bits(dir) & 3 == 3 {
        Ok(())
    } else {
        Err(libc::EACCES)
    }
}

/// chmod/utimensat with explicit times: only the owner or root (EPERM).
pub fn check_owner(st: &Stat) -> Result<(), i32> {
    if is_root() || owns(st) {
        Ok(())
    } else {
        Err(libc::EPERM)
    }
}
