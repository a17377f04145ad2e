//! The runtime directory: choosing it, creating or validating it, and opening files
//! inside it relative to its descriptor.

use crate::error::{Result, RuntimeError};
use crate::sys::{self, euid, kind_of};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Mode of the runtime directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of files created in it.
pub const FILE_MODE: u32 = 0o600;

/// A caller-owned, mode-0700 directory holding runtime files, open as a descriptor:
/// every file operation is relative to that descriptor, so renaming or replacing the
/// path afterwards does not redirect them.
#[derive(Debug)]
pub struct RuntimeDir {
    path: PathBuf,
    dir: File,
}

/// Is `p` a directory owned by the caller that neither group nor others may write
/// (a trustworthy base such as `$XDG_RUNTIME_DIR`)?
fn trusted_base(p: &Path) -> bool {
    p.is_absolute()
        && std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.is_dir() && m.uid() == euid() && m.mode() & 0o022 == 0)
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(RuntimeError::InvalidName(name.to_string()));
    }
    Ok(())
}

/// Check an opened descriptor: a regular file owned by the caller.
fn check_file(f: &File, path: &Path) -> Result<()> {
    let m = f
        .metadata()
        .map_err(|e| RuntimeError::io(format!("fstat {}", path.display()), e))?;
    if !m.is_file() {
        return Err(RuntimeError::NotRegular {
            path: path.to_path_buf(),
            found: kind_of(m.file_type()),
        });
    }
    if m.uid() != euid() {
        return Err(RuntimeError::WrongOwner {
            path: path.to_path_buf(),
            owner: m.uid(),
            expected: euid(),
        });
    }
    Ok(())
}

fn open_error(path: &Path, what: &str, e: io::Error) -> RuntimeError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        // O_NOFOLLOW on a symbolic link.
        RuntimeError::Symlink {
            path: path.to_path_buf(),
        }
    } else {
        RuntimeError::io(format!("{what} {}", path.display()), e)
    }
}

/// Serialises [`RuntimeDir::write_atomic`] within this process (threads share the
/// temporary name `NAME.PID.tmp`).
static WRITE_LOCK: Mutex<()> = Mutex::new(());

impl RuntimeDir {
    /// Where [`RuntimeDir::for_caller`] puts the runtime directory (without creating it):
    /// `$XDG_RUNTIME_DIR/ckptfs` if that variable names a directory owned by the caller
    /// and not writable by group or others, else `/run/user/UID/ckptfs` under the same
    /// rule, else `/dev/shm/ckptfs-UID`, else `$TMPDIR/ckptfs-UID`.
    pub fn default_path() -> PathBuf {
        let uid = euid();
        if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
            if trusted_base(&x) {
                return x.join("ckptfs");
            }
        }
        let run = PathBuf::from(format!("/run/user/{uid}"));
        if trusted_base(&run) {
            return run.join("ckptfs");
        }
        if Path::new("/dev/shm").is_dir() {
            return PathBuf::from(format!("/dev/shm/ckptfs-{uid}"));
        }
        std::env::temp_dir().join(format!("ckptfs-{uid}"))
    }

    /// The caller's runtime directory ([`RuntimeDir::default_path`]), created if needed.
    pub fn for_caller() -> Result<RuntimeDir> {
        Self::open(Self::default_path())
    }

    /// The runtime directory at `path`: created with mode 0700 if missing; an existing
    /// one must be a directory (not a symbolic link) owned by the caller with mode 0700.
    pub fn open(path: impl Into<PathBuf>) -> Result<RuntimeDir> {
        let path = path.into();
        let created = match std::fs::DirBuilder::new().mode(DIR_MODE).create(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(RuntimeError::io(format!("create {}", path.display()), e)),
        };
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => RuntimeError::Symlink { path: path.clone() },
                // O_NOFOLLOW|O_DIRECTORY on a link gives ENOTDIR: say which it is.
                Some(libc::ENOTDIR) => match std::fs::symlink_metadata(&path).map(|m| m.file_type()) {
                    Ok(ft) if ft.is_symlink() => RuntimeError::Symlink { path: path.clone() },
                    Ok(ft) => RuntimeError::NotDirectory {
                        path: path.clone(),
                        found: kind_of(ft),
                    },
                    Err(_) => RuntimeError::io(format!("open {}", path.display()), e),
                },
                _ => RuntimeError::io(format!("open {}", path.display()), e),
            })?;
        let m = dir
            .metadata()
            .map_err(|e| RuntimeError::io(format!("fstat {}", path.display()), e))?;
        if !m.is_dir() {
            return Err(RuntimeError::NotDirectory {
                path,
                found: kind_of(m.file_type()),
            });
        }
        if m.uid() != euid() {
            return Err(RuntimeError::WrongOwner {
                path,
                owner: m.uid(),
                expected: euid(),
            });
        }
        if created && m.mode() & 0o7777 != DIR_MODE {
            // The umask narrowed it: set it exactly, on the descriptor.
            dir.set_permissions(std::fs::Permissions::from_mode(DIR_MODE))
                .map_err(|e| RuntimeError::io(format!("chmod {}", path.display()), e))?;
        } else if m.mode() & 0o777 != DIR_MODE {
            return Err(RuntimeError::BadMode {
                path,
                mode: m.mode() & 0o7777,
                expected: DIR_MODE,
            });
        }
        Ok(RuntimeDir { path, dir })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` inside the directory (for messages and other processes).
    pub fn file_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Open `name` inside the directory with `flags` (`O_NOFOLLOW|O_CLOEXEC` added,
    /// mode 0600 when created) and check it is a regular file owned by the caller.
    pub fn open_file(&self, name: &str, flags: i32) -> Result<File> {
        check_name(name)?;
        let path = self.file_path(name);
        let f = sys::openat(&self.dir, name, flags, FILE_MODE).map_err(|e| open_error(&path, "open", e))?;
        check_file(&f, &path)?;
        Ok(f)
    }

    /// Open `name` for reading; `Ok(None)` if it does not exist.
    pub fn open_read(&self, name: &str) -> Result<Option<File>> {
        match self.open_file(name, libc::O_RDONLY | libc::O_NONBLOCK) {
            Ok(f) => Ok(Some(f)),
            Err(RuntimeError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The content of `name`; `Ok(None)` if it does not exist.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let Some(mut f) = self.open_read(name)? else {
            return Ok(None);
        };
        let mut v = Vec::new();
        f.read_to_end(&mut v)
            .map_err(|e| RuntimeError::io(format!("read {}", self.file_path(name).display()), e))?;
        Ok(Some(v))
    }

    /// Create `name` exclusively (`O_CREAT|O_EXCL`, mode 0600) for reading and writing.
    pub fn create_new(&self, name: &str) -> Result<File> {
        self.open_file(name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL)
    }

    /// Open (creating if needed) the log file `name` for appending (and reading back).
    pub fn open_log(&self, name: &str) -> Result<File> {
        self.open_file(name, libc::O_RDWR | libc::O_CREAT | libc::O_APPEND)
    }

    /// Replace `name` atomically with `bytes`: written to `NAME.PID.tmp` in the directory,
    /// then renamed over `name`; readers see the old or the new content, never a part.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<()> {
        check_name(name)?;
        let tmp = format!("{name}.{}.tmp", std::process::id());
        let _g = WRITE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let mut f = self.open_file(&tmp, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)?;
        let tmp_path = self.file_path(&tmp);
        if let Err(e) = f.write_all(bytes) {
            let _ = sys::unlinkat(&self.dir, &tmp);
            return Err(RuntimeError::io(format!("write {}", tmp_path.display()), e));
        }
        drop(f);
        sys::renameat(&self.dir, &tmp, name).map_err(|e| {
            let _ = sys::unlinkat(&self.dir, &tmp);
            RuntimeError::io(
                format!(
                    "rename {} to {}",
                    tmp_path.display(),
                    self.file_path(name).display()
                ),
                e,
            )
        })
    }

    /// Remove `name` (the entry itself, never a link's target); `Ok(false)` if it was
    /// not there.
    pub fn remove(&self, name: &str) -> Result<bool> {
        check_name(name)?;
        match sys::unlinkat(&self.dir, name) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(RuntimeError::io(
                format!("remove {}", self.file_path(name).display()),
                e,
            )),
        }
    }

    /// Names of the entries in the directory.
    pub fn names(&self) -> Result<Vec<String>> {
        // Read through /proc/self/fd so the listing is of the directory we validated.
        let via = PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&self.dir)
        ));
        let rd = std::fs::read_dir(&via)
            .or_else(|_| std::fs::read_dir(&self.path))
            .map_err(|e| RuntimeError::io(format!("list {}", self.path.display()), e))?;
        Ok(rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect())
    }

    /// Whether `name` exists as a directory entry (a link counts; it is not followed).
    pub fn exists(&self, name: &str) -> bool {
        check_name(name).is_ok() && sys::fstatat_nofollow(&self.dir, name).is_ok()
    }
}

/// Open a log file the user named (`--log-file FILE`) for appending (and reading back):
/// created with mode 0600 if missing, never through a symbolic link (`O_NOFOLLOW`), and
/// only if it is a regular file owned by the caller.
pub fn open_log_file(path: &Path) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| open_error(path, "open log file", e))?;
    check_file(&f, path)?;
    Ok(f)
}
