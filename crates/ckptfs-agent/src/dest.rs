//! Destination I/O behind a trait, so tests can inject faults (a full disk, failing
//! fsync) and the engine never calls the file system directly.
//!
//! [`PosixDest`] is the real implementation: `pwritev` of large gathered writes, an
//! optional second descriptor opened with `O_DIRECT` used for aligned pieces (straight
//! from the 2 MiB-aligned chunks of the data region), `fsync`, `rename`, directory
//! `fsync`, and `lfs setstripe -c 1 [-i OST]` on Lustre.

pub use ckptfs_level::IoPart;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Alignment required for `O_DIRECT` writes (address, length and offset).
pub const DIRECT_ALIGN: usize = 4096;

/// How to create a destination file.
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateOpts {
    /// Also open an `O_DIRECT` descriptor for aligned writes.
    pub direct: bool,
    /// Lustre: place the file on one stripe on this OST (`lfs setstripe -c 1 -i OST`).
    pub ost: Option<u32>,
    /// Permission bits of the new file.
    pub mode: u32,
}

/// A destination file being written.
pub trait DestFile: Send + Sync {
    /// Write all of `bufs` at `off` (gathered, like `pwritev`), retrying short writes.
    /// A piece is a range of the store's data region or a caller buffer; the store
    /// crate turns them into iovecs, so no Rust reference over shared memory exists.
    fn write_at(&self, bufs: &[IoPart<'_>], off: u64) -> io::Result<()>;
    /// Make the data durable (`fsync`).
    fn sync(&self) -> io::Result<()>;
    /// Whether aligned writes really go through `O_DIRECT`.
    fn is_direct(&self) -> bool;
    /// Reserve `len` bytes of space before writing (a file system that cannot is fine).
    fn preallocate(&self, _len: u64) -> io::Result<()> {
        Ok(())
    }
}

/// One entry of a destination directory.
#[derive(Debug, Clone)]
pub struct DestEntry {
    /// File name.
    pub name: String,
    /// Is it a directory?
    pub is_dir: bool,
}

/// Operations the agent performs on the destination (the PFS).
pub trait DestIo: Send + Sync {
    /// Create a new file (it must not exist).
    fn create(&self, path: &Path, opts: &CreateOpts) -> io::Result<Box<dyn DestFile>>;
    /// Open a file for reading.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>>;
    /// Size of a file.
    fn len(&self, path: &Path) -> io::Result<u64>;
    /// Rename atomically, replacing the target.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Remove a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Create one directory (`AlreadyExists` if it exists).
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    /// Make a directory's entries durable (`fsync` on the directory).
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Entries of a directory.
    fn list(&self, path: &Path) -> io::Result<Vec<DestEntry>>;
}

/// Read a whole (small) file through a [`DestIo`].
pub fn read_all(io: &dyn DestIo, path: &Path) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    io.open_read(path)?.read_to_end(&mut v)?;
    Ok(v)
}

/// The real destination: POSIX calls on a mounted file system.
#[derive(Debug, Clone, Default)]
pub struct PosixDest {
    lfs: Option<PathBuf>,
}

/// `lfs` on PATH, if any.
pub fn find_lfs() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("lfs"))
        .find(|p| p.is_file())
}

const LUSTRE_SUPER_MAGIC: i64 = 0x0bd0_0bd0;

fn is_lustre(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into the zeroed struct we pass; the path is NUL-terminated.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type as i64 == LUSTRE_SUPER_MAGIC
    }
}

impl PosixDest {
    /// A destination that uses `lfs` (if given) to set one-stripe layouts.
    pub fn new(lfs: Option<PathBuf>) -> Self {
        PosixDest { lfs }
    }

    fn setstripe(&self, path: &Path, ost: Option<u32>) -> io::Result<bool> {
        let Some(lfs) = &self.lfs else {
            return Ok(false);
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        if ost.is_none() && !is_lustre(dir) {
            return Ok(false);
        }
        let mut cmd = Command::new(lfs);
        cmd.args(["setstripe", "-c", "1"]);
        if let Some(i) = ost {
            cmd.args(["-i", &i.to_string()]);
        }
        let out = cmd.arg(path).output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "lfs setstripe {}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(true)
    }
}

struct PosixFile {
    buffered: File,
    direct: Option<File>,
}

fn aligned(parts: &[IoPart<'_>], off: u64) -> bool {
    off.is_multiple_of(DIRECT_ALIGN as u64) && parts.iter().all(|p| p.is_aligned(DIRECT_ALIGN))
}

/// `pwritev` until everything is written (the iovecs are built in the store crate).
fn pwritev_all(f: &File, parts: &[IoPart<'_>], off: u64) -> io::Result<()> {
    ckptfs_store::region_io::pwritev_all(f.as_fd(), parts, off)
}

impl DestFile for PosixFile {
    fn write_at(&self, bufs: &[IoPart<'_>], off: u64) -> io::Result<()> {
        match &self.direct {
            Some(d) if aligned(bufs, off) => match pwritev_all(d, bufs, off) {
                // Some file systems accept O_DIRECT at open and refuse it at write time.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => pwritev_all(&self.buffered, bufs, off),
                r => r,
            },
            _ => pwritev_all(&self.buffered, bufs, off),
        }
    }

    fn sync(&self) -> io::Result<()> {
        self.buffered.sync_all()
    }

    fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// `fallocate` the whole file: a full destination fails here, before any data is
    /// written, and on ext4 and XFS O_DIRECT writes into allocated blocks no longer
    /// extend the file, so the IO threads' writes run in parallel instead of one after
    /// another under the inode lock (docs/agent.md, "Performance").
    fn preallocate(&self, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: fallocate on an open descriptor we own; no memory is passed.
        let r = unsafe { libc::fallocate(self.buffered.as_raw_fd(), 0, 0, len as libc::off_t) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => Ok(()),
            _ => Err(e),
        }
    }
}

impl DestIo for PosixDest {
    fn create(&self, path: &Path, opts: &CreateOpts) -> io::Result<Box<dyn DestFile>> {
        let striped = self.setstripe(path, opts.ost)?;
        let buffered = OpenOptions::new()
            .write(true)
            .create_new(!striped)
            .mode(opts.mode)
            .open(path)?;
        let direct = if opts.direct {
            OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
                .map_err(|e| tracing::warn!(path = %path.display(), error = %e, "O_DIRECT not available"))
                .ok()
        } else {
            None
        };
        Ok(Box::new(PosixFile { buffered, direct }))
    }

    /// Only the agent's own manifests are read through this: a symbolic link is not
    /// followed (ELOOP) and a FIFO or device is refused without blocking (EINVAL).
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)?;
        if !f.metadata()?.is_file() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(Box::new(f))
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn list(&self, path: &Path) -> io::Result<Vec<DestEntry>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(path)? {
            let e = e?;
            out.push(DestEntry {
                name: e.file_name().to_string_lossy().into_owned(),
                is_dir: e.file_type()?.is_dir(),
            });
        }
        Ok(out)
    }
}
