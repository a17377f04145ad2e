//! A tmpfs mounted with `huge=within_size` for the benchmarks' huge-page rows: a store
//! whose segment directory (`shm_dir`) is on it gets 2 MiB pages for its data region
//! (docs/design.md, "Huge pages"). Mounting needs root; without it the rows are skipped
//! with a note.

use std::path::Path;
use std::process::Command;

/// The mounted tmpfs, unmounted when dropped; or a directory given (not unmounted).
pub struct HugeTmpfs {
    dir: Option<tempfile::TempDir>,
    given: std::path::PathBuf,
}

impl HugeTmpfs {
    /// Mount one of `size` bytes on a fresh temporary directory, or say why not.
    pub fn mount(size: u64) -> Result<HugeTmpfs, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("mounting a huge-page tmpfs needs root".into());
        }
        let dir = tempfile::Builder::new()
            .prefix("ckptfs-bench-huge-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("huge=within_size,size={size},mode=1777"))
            .arg("ckptfs-bench-huge")
            .arg(dir.path())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs -o huge=within_size failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(HugeTmpfs {
            given: dir.path().to_path_buf(),
            dir: Some(dir),
        })
    }

    /// An existing directory on a tmpfs mounted with `huge=within_size` (the Slurm
    /// prolog's `/dev/shm-ckptfs`): no root needed; checked in /proc/mounts.
    pub fn existing(dir: &Path) -> Result<HugeTmpfs, String> {
        let dir = dir
            .canonicalize()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let mounts = std::fs::read_to_string("/proc/mounts").map_err(|e| format!("/proc/mounts: {e}"))?;
        // The mount whose point is the longest prefix of dir must be a huge tmpfs.
        let best = mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 4 && dir.starts_with(f[1]))
                    .then(|| (f[1].len(), f[2] == "tmpfs", f[3].contains("huge=")))
            })
            .max_by_key(|m| m.0);
        match best {
            Some((_, true, true)) => Ok(HugeTmpfs {
                dir: None,
                given: dir,
            }),
            _ => Err(format!("{} is not on a tmpfs mounted with huge=", dir.display())),
        }
    }

    /// Its mount point (or the directory given).
    pub fn path(&self) -> &Path {
        &self.given
    }
}

impl Drop for HugeTmpfs {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = Command::new("umount").arg("-l").arg(d.path()).status();
        }
    }
}
