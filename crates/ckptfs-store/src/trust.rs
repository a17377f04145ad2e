//! Which segment and spill files a process may trust (design.md, "Threat model").
//!
//! `/dev/shm` and a spill directory are shared with other users, who can create a
//! store's name first, or plant a symbolic link where a spill file goes. So:
//! - a segment is opened with `O_NOFOLLOW` and, before anything is read or mapped,
//!   `fstat`-checked: a regular file owned by the caller (the effective uid) with mode
//!   exactly 0600. [`StoreOptions::allow_foreign_owner`] (root attaching a user's store)
//!   waives only the owner check.
//! - a spill file is opened with `O_NOFOLLOW` and must be a regular file with mode 0600,
//!   owned by the segment's owner, named as the store derives it
//!   (`ckptfs.NAME.spill`).
//! - `destroy` removes a spill file only when the segment naming it was trusted, the
//!   name is the derived one, and `fstatat(AT_SYMLINK_NOFOLLOW)` on the spill
//!   directory's descriptor shows a regular file owned by the caller; then `unlinkat` on
//!   that descriptor removes it.
//!
//! [`StoreOptions::allow_foreign_owner`]: crate::StoreOptions::allow_foreign_owner

use crate::error::{Result, StoreError};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Mode every segment and spill file must have.
pub const STORE_FILE_MODE: u32 = 0o600;

/// The caller's effective uid (the owner its new files get).
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// File name of store `name`'s spill file inside its spill directory.
pub(crate) fn spill_file_name(name: &str) -> String {
    format!("ckptfs.{name}.spill")
}

fn untrusted(path: &Path, owner: u32, mode: u32, reason: impl Into<String>) -> StoreError {
    StoreError::Untrusted {
        path: path.display().to_string(),
        owner,
        mode: mode & 0o7777,
        reason: reason.into(),
    }
}

fn kind(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "regular file",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symbolic link",
        libc::S_IFIFO => "FIFO",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        _ => "special file",
    }
}

/// Open `path` read-write without following a final symbolic link. ELOOP (a link) is
/// reported as [`StoreError::Untrusted`] with the link's owner.
pub(crate) fn open_nofollow(path: &Path, what: &str) -> std::io::Result<File> {
    let r = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
    if let Err(e) = &r {
        if e.raw_os_error() == Some(libc::ELOOP) {
            tracing::debug!(path = %path.display(), what, "refusing a symbolic link");
        }
    }
    r
}

/// The error for an open that failed with ELOOP (`O_NOFOLLOW` met a link).
pub(crate) fn symlink_error(path: &Path) -> StoreError {
    let (owner, mode) = std::fs::symlink_metadata(path)
        .map(|m| (m.uid(), m.mode()))
        .unwrap_or((u32::MAX, 0));
    untrusted(path, owner, mode, "is a symbolic link")
}

/// Check an opened segment or spill file: regular, owned by `owner`, mode exactly 0600.
/// `whose` says whose file it must be, for the message.
pub(crate) fn check_fd(f: &File, path: &Path, owner: u32, whose: &str) -> Result<()> {
    let m = f
        .metadata()
        .map_err(|e| StoreError::io(format!("fstat {}", path.display()), e))?;
    let mode = m.mode();
    if mode & libc::S_IFMT != libc::S_IFREG {
        return Err(untrusted(
            path,
            m.uid(),
            mode,
            format!("is a {}, not a regular file", kind(mode)),
        ));
    }
    if m.uid() != owner {
        return Err(untrusted(
            path,
            m.uid(),
            mode,
            format!("is owned by uid {}, not by {whose} (uid {owner})", m.uid()),
        ));
    }
    if mode & 0o7777 != STORE_FILE_MODE {
        return Err(untrusted(
            path,
            m.uid(),
            mode,
            format!(
                "has mode {:04o}, but a store file must have mode 0600",
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Check an opened segment before it is read or mapped; returns its owner.
pub(crate) fn check_segment(f: &File, path: &Path, allow_foreign_owner: bool) -> Result<u32> {
    let owner = if allow_foreign_owner {
        f.metadata()
            .map_err(|e| StoreError::io(format!("fstat {}", path.display()), e))?
            .uid()
    } else {
        euid()
    };
    check_fd(f, path, owner, "the caller")?;
    Ok(owner)
}

/// Open the spill file `sp` of store `name` whose segment belongs to `owner`. Its creator
/// renames it into place just after publishing the segment, so a brief ENOENT is waited
/// out.
pub(crate) fn open_spill(sp: &Path, name: &str, owner: u32) -> Result<File> {
    if sp.file_name().map(|n| n.as_bytes()) != Some(spill_file_name(name).as_bytes()) {
        return Err(untrusted(
            sp,
            u32::MAX,
            0,
            format!(
                "is not the spill file store {name} would use ({})",
                spill_file_name(name)
            ),
        ));
    }
    let mut tries = 0;
    loop {
        match open_nofollow(sp, "spill") {
            Ok(f) => {
                check_fd(&f, sp, owner, "the store's owner")?;
                return Ok(f);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(symlink_error(sp)),
            Err(e) => return Err(StoreError::io(format!("open spill file {}", sp.display()), e)),
        }
    }
}

/// Remove store `name`'s spill file `sp` if it is the store's own: the derived name, a
/// regular file owned by the caller, checked with `fstatat(AT_SYMLINK_NOFOLLOW)` on the
/// spill directory's descriptor and removed with `unlinkat` on the same descriptor.
/// Anything else is left in place (with a warning).
pub(crate) fn remove_own_spill(sp: &Path, name: &str) {
    let want = spill_file_name(name);
    let (Some(dir), Some(file)) = (sp.parent(), sp.file_name()) else {
        return;
    };
    if file.as_bytes() != want.as_bytes() {
        tracing::warn!(spill = %sp.display(), "not removing a spill file the store would not have created");
        return;
    }
    let Ok(d) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
    else {
        return;
    };
    let Ok(c) = CString::new(want.as_bytes()) else {
        return;
    };
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: d is an open directory, c NUL-terminated, st a valid out-pointer.
    let rc = unsafe { libc::fstatat(d.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        return;
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != euid() {
        tracing::warn!(
            spill = %sp.display(),
            owner = st.st_uid,
            kind = kind(st.st_mode),
            "not removing a spill file that is not a regular file owned by the caller"
        );
        return;
    }
    // SAFETY: as above; unlinkat removes the entry itself and never follows a link.
    unsafe { libc::unlinkat(d.as_raw_fd(), c.as_ptr(), 0) };
}
