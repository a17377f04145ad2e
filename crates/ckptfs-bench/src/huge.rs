//! A tmpfs mounted with `huge=within_size` for the benchmarks' huge-page rows: a store
//! whose segment directory (`shm_dir`) is on it gets 2 MiB pages for its data region
//! (docs/design.md, "Huge pages"). Mounting needs root; without it the rows are skipped
//! with a note.

use std::path::Path;
use std::process::Command;

/// The mounted tmpfs, unmounted when dropped.
pub struct HugeTmpfs {
    dir: tempfile::TempDir,
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
        Ok(HugeTmpfs { dir })
    }

    /// Its mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for HugeTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}
