//! Where a store's segment lives, and whether it gets huge pages.
//!
//! A fresh process has no page tables for the segment: its first touch of every 4 KiB
//! page of a chunk costs a minor fault (or a share of `MADV_POPULATE_READ`). With the
//! segment on a tmpfs mounted with `huge=always` or `huge=within_size`, the kernel backs
//! it with 2 MiB pages and a fresh process maps 512 times fewer entries (docs/design.md,
//! "Huge pages"). `/dev/shm` is usually mounted without `huge=`, and the system-wide
//! `shmem_enabled` knob does not apply to tmpfs mounts (only its `deny` and `force`
//! override them), so the store offers a directory setting (`shm_dir`,
//! `CKPTFS_SHM_DIR`): a site mounts a huge-page tmpfs once per node and points it there.
//! Normal pages remain the fallback: any tmpfs works.
//!
//! The directory is shared with other users like `/dev/shm`, so it is checked as
//! `/dev/shm` is trusted: a directory on a tmpfs, owned by root or the caller, and
//! either not writable by others or sticky (no one can then remove or rename another
//! user's segment). The segment file itself gets the checks of `trust.rs`.

use crate::error::{Result, StoreError};
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// `statfs` magic of tmpfs.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// What backs a segment directory's pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HugePages {
    /// The tmpfs mount the directory is on.
    pub mount: PathBuf,
    /// Its `huge=` option (`never` when absent).
    pub mode: String,
    /// The system's `shmem_enabled` setting when it overrides mounts (`deny`, `force`).
    pub system_override: Option<String>,
    /// Does the data region get huge pages (the mount's mode is `always` or
    /// `within_size`, or the system forces them, and nothing denies them)?
    pub enabled: bool,
}

impl HugePages {
    /// One line for `ckptfs status`.
    pub fn describe(&self) -> String {
        let why = match &self.system_override {
            Some(o) => format!(
                "tmpfs huge={} at {}, system shmem_enabled={o}",
                self.mode,
                self.mount.display()
            ),
            None => format!("tmpfs huge={} at {}", self.mode, self.mount.display()),
        };
        if self.enabled {
            format!("yes, 2 MiB ({why})")
        } else {
            format!("no, 4 KiB pages ({why})")
        }
    }
}

/// The mount options of the mount holding `dir` (the longest mount point that is a
/// prefix of its canonical path), from `/proc/self/mountinfo`: (mount point, fs type,
/// super options).
fn mount_of(dir: &Path) -> Option<(PathBuf, String, String)> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(PathBuf, String, String)> = None;
    for line in info.lines() {
        // id parent major:minor root mountpoint options [optional...] - fstype source superopts
        let mut halves = line.splitn(2, " - ");
        let (Some(a), Some(b)) = (halves.next(), halves.next()) else {
            continue;
        };
        let Some(mp) = a.split(' ').nth(4) else { continue };
        let mp = PathBuf::from(unescape(mp));
        let mut f = b.split(' ');
        let (Some(fstype), Some(_src), Some(opts)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if dir.starts_with(&mp)
            && best
                .as_ref()
                .is_none_or(|(m, _, _)| mp.as_os_str().len() >= m.as_os_str().len())
        {
            best = Some((mp, fstype.to_string(), opts.to_string()));
        }
    }
    best
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the segment directory `dir` gives huge pages.
pub fn for_dir(dir: &Path) -> HugePages {
    let (mount, fstype, opts) =
        mount_of(dir).unwrap_or_else(|| (dir.to_path_buf(), String::new(), String::new()));
    let mode = opts
        .split(',')
        .find_map(|o| o.strip_prefix("huge="))
        .unwrap_or("never")
        .to_string();
    let system = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(['[', ']']).to_string())
        });
    let system_override = system.filter(|s| s == "deny" || s == "force");
    let enabled = fstype == "tmpfs"
        && match system_override.as_deref() {
            Some("deny") => false,
            Some("force") => true,
            _ => mode == "always" || mode == "within_size",
        };
    HugePages {
        mount,
        mode,
        system_override,
        enabled,
    }
}

/// Check a segment directory other than `/dev/shm` before a segment is created or
/// attached in it: a directory on a tmpfs, owned by root or the caller, not writable by
/// others unless sticky.
pub(crate) fn check_dir(dir: &Path) -> Result<()> {
    let bad = |owner: u32, mode: u32, reason: String| StoreError::Untrusted {
        path: dir.display().to_string(),
        owner,
        mode: mode & 0o7777,
        reason,
    };
    let m = std::fs::metadata(dir)
        .map_err(|e| StoreError::io(format!("segment directory {}", dir.display()), e))?;
    if !m.is_dir() {
        return Err(bad(m.uid(), m.mode(), "is not a directory (shm_dir)".into()));
    }
    let me = crate::trust::euid();
    if m.uid() != 0 && m.uid() != me {
        return Err(bad(
            m.uid(),
            m.mode(),
            format!(
                "is owned by uid {}, neither root nor the caller (uid {me})",
                m.uid()
            ),
        ));
    }
    if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
        return Err(bad(
            m.uid(),
            m.mode(),
            "is writable by other users and not sticky: they could replace the segment".into(),
        ));
    }
    let c =
        std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str())).map_err(|_| {
            StoreError::Invalid(format!(
                "segment directory {}: contains a NUL byte",
                dir.display()
            ))
        })?;
    // SAFETY: an all-zero statfs is a valid value for the kernel to overwrite.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and st a valid out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(StoreError::io(format!("statfs {}", dir.display()), e));
    }
    if st.f_type as i64 != TMPFS_MAGIC {
        return Err(StoreError::Invalid(format!(
            "segment directory {} is not on a tmpfs (filesystem magic {:#x}): the store must live in memory",
            dir.display(),
            st.f_type
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_shm_is_found_as_a_tmpfs_mount() {
        let h = for_dir(Path::new("/dev/shm"));
        assert_eq!(h.mount, PathBuf::from("/dev/shm"));
        assert!(!h.mode.is_empty());
        assert!(check_dir(Path::new("/dev/shm")).is_ok());
    }

    #[test]
    fn a_directory_not_on_tmpfs_is_refused_by_name() {
        let d = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        match check_dir(d.path()) {
            Err(StoreError::Invalid(m)) => assert!(m.contains("not on a tmpfs"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/end\\"), "/end\\");
    }
}
