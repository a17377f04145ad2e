//! Reading restore input strictly beneath a destination directory.
//!
//! Restore reads manifests and data files that anyone with write access to the
//! destination may have planted. Every file is reached from the destination root's
//! descriptor, one path component at a time, with `openat(O_NOFOLLOW)`: no symbolic link
//! is ever followed below the root, and a name is always one component (no `/`, no
//! `..`). Files are opened with `O_NONBLOCK` (a FIFO or a device never blocks the open)
//! and must be regular files by `fstat` on the opened descriptor before anything is read.
//! The root itself (the `--dest` directory the user named) may be reached through
//! symbolic links. See docs/design.md, "Threat model: restore input".

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Is `name` a single path component that can name an entry of a directory?
pub fn valid_component(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']) && name.len() <= 255
}

/// Kind of a directory entry (symbolic links are never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// Anything else: FIFO, socket, device.
    Other,
}

/// Identity and owner of an opened file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ident {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Owner.
    pub uid: u32,
    /// Size in bytes.
    pub size: u64,
}

fn cstr(name: &str) -> io::Result<CString> {
    if !valid_component(name) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a single file name"),
        ));
    }
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn fstat(fd: i32) -> io::Result<libc::stat> {
    // SAFETY: fstat writes into the zeroed struct we own; an invalid fd is an error.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    }
}

fn ident(st: &libc::stat) -> Ident {
    Ident {
        dev: st.st_dev,
        ino: st.st_ino,
        uid: st.st_uid,
        size: st.st_size as u64,
    }
}

fn kind_of(mode: libc::mode_t) -> Kind {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

fn openat(dir: i32, name: &CStr, flags: i32) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: `name` is NUL-terminated; openat returns a new descriptor or -1.
        let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd >= 0 {
            // SAFETY: fd was just returned by openat and is owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// An open directory beneath (or at) a destination root.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

impl Dir {
    /// Open the destination root (symbolic links in `path` itself are followed: the
    /// user named it).
    pub fn open_root(path: &Path) -> io::Result<Dir> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let fd = openat(libc::AT_FDCWD, &c, libc::O_RDONLY | libc::O_DIRECTORY)?;
        Ok(Dir { fd })
    }

    /// Open the subdirectory `name` (one component; a symbolic link fails with ELOOP or
    /// ENOTDIR).
    pub fn open_dir(&self, name: &str) -> io::Result<Dir> {
        let c = cstr(name)?;
        let fd = openat(
            self.fd.as_raw_fd(),
            &c,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        )?;
        Ok(Dir { fd })
    }

    /// Device, inode and owner of this directory.
    pub fn ident(&self) -> io::Result<Ident> {
        fstat(self.fd.as_raw_fd()).map(|st| ident(&st))
    }

    /// Kind of entry `name`, without following a symbolic link.
    pub fn kind(&self, name: &str) -> io::Result<Kind> {
        let c = cstr(name)?;
        // SAFETY: fstatat writes into the zeroed struct we own; `c` is NUL-terminated.
        let st = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            st
        };
        Ok(kind_of(st.st_mode))
    }

    /// Open the regular file `name` for reading. Refused (never blocking): a symbolic
    /// link (ELOOP), anything that is not a regular file (EINVAL, checked on the opened
    /// descriptor). Returns the file and its identity.
    pub fn open_file(&self, name: &str) -> io::Result<(File, Ident)> {
        let c = cstr(name)?;
        // Check the type first, so a device is not even opened; the check on the
        // opened descriptor below is the one that counts (the entry may be replaced).
        match self.kind(name)? {
            Kind::File => {}
            Kind::Dir => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
            Kind::Symlink => return Err(io::Error::from_raw_os_error(libc::ELOOP)),
            Kind::Other => return Err(not_regular()),
        }
        let fd = openat(
            self.fd.as_raw_fd(),
            &c,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        )?;
        let st = fstat(fd.as_raw_fd())?;
        if kind_of(st.st_mode) != Kind::File {
            return Err(not_regular());
        }
        // Back to blocking reads (no effect on regular files, but no surprises either).
        // SAFETY: fcntl on a descriptor we own; no memory is passed.
        unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl >= 0 {
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
        }
        Ok((File::from(fd), ident(&st)))
    }

    /// The entries of this directory (`.` and `..` left out; names that are not UTF-8
    /// cannot be store names and are left out too), with their kinds.
    pub fn entries(&self) -> io::Result<Vec<(String, Kind)>> {
        // fdopendir takes ownership of the descriptor it is given: hand it a duplicate.
        // SAFETY: dup of a descriptor we own.
        let dup = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `dup` is a directory descriptor we own; on success the DIR owns it.
        let dirp = unsafe { libc::fdopendir(dup) };
        if dirp.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `dup` is still ours to close.
            unsafe { libc::close(dup) };
            return Err(e);
        }
        // SAFETY: the DIR stream is fresh; rewind in case the offset was shared.
        unsafe { libc::rewinddir(dirp) };
        let mut out = Vec::new();
        let mut unknown = Vec::new();
        let res = loop {
            // SAFETY: errno is thread-local; reset it to tell end of stream from error.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `dirp` is a valid open DIR stream until closedir below.
            let ent = unsafe { libc::readdir64(dirp) };
            if ent.is_null() {
                let e = io::Error::last_os_error();
                break if e.raw_os_error().unwrap_or(0) == 0 {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated; it
            // stays valid until the next readdir call, and we copy it out now.
            let (name, dtype) = unsafe {
                (
                    CStr::from_ptr((*ent).d_name.as_ptr()).to_bytes().to_vec(),
                    (*ent).d_type,
                )
            };
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(name) = String::from_utf8(name) else {
                continue;
            };
            match dtype {
                libc::DT_DIR => out.push((name, Kind::Dir)),
                libc::DT_REG => out.push((name, Kind::File)),
                libc::DT_LNK => out.push((name, Kind::Symlink)),
                libc::DT_UNKNOWN => unknown.push(name),
                _ => out.push((name, Kind::Other)),
            }
        };
        // SAFETY: closes the stream and the duplicate descriptor it owns.
        unsafe { libc::closedir(dirp) };
        res?;
        for name in unknown {
            // Vanished since the listing: leave it out.
            if let Ok(k) = self.kind(&name) {
                out.push((name, k));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

fn not_regular() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a regular file (FIFO, device or socket): refused",
    )
}
