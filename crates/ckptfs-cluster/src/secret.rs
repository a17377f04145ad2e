//! The per-job secret: 32 random bytes, kept in a file only its owner can read.
//!
//! The file holds the secret as 64 hexadecimal digits and a newline. It is created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` and mode 0600 (never overwritten unless the caller asks
//! to replace it, which unlinks first and creates again), and read only when it is a
//! regular file owned by the caller with no group/other permission bits.

use crate::{ClusterError, Result};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Length of a generated secret in bytes.
pub const SECRET_LEN: usize = 32;
/// Shortest secret accepted (bytes).
pub const MIN_SECRET_LEN: usize = 16;
/// Longest secret accepted (bytes).
pub const MAX_SECRET_LEN: usize = 128;

/// The per-job secret. Its `Debug` never shows the bytes; they are wiped on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference into our own buffer;
            // the volatile write keeps the wipe from being optimised away.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

impl Secret {
    /// A secret from raw bytes (16-128 bytes).
    pub fn from_bytes(b: &[u8]) -> std::result::Result<Secret, String> {
        if !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&b.len()) {
            return Err(format!(
                "{} bytes; a secret has {MIN_SECRET_LEN}-{MAX_SECRET_LEN} bytes",
                b.len()
            ));
        }
        Ok(Secret(b.to_vec()))
    }

    /// A secret from hexadecimal digits (surrounding whitespace ignored).
    pub fn from_hex(s: &str) -> std::result::Result<Secret, String> {
        let s = s.trim();
        if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("not an even number of hexadecimal digits".into());
        }
        let bytes: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
            .collect();
        Secret::from_bytes(&bytes)
    }

    /// A fresh random secret of [`SECRET_LEN`] bytes from the OS.
    pub fn generate() -> Result<Secret> {
        let mut b = vec![0u8; SECRET_LEN];
        getrandom::fill(&mut b).map_err(|e| ClusterError::Secret {
            path: Default::default(),
            why: format!("no randomness from the OS: {e}"),
        })?;
        Ok(Secret(b))
    }

    /// The secret's bytes (for the HMAC key; never send them).
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads a secret file: a regular file (symlinks refused), owned by the caller,
    /// no group/other permission bits, holding hex digits.
    pub fn load(path: &Path) -> Result<Secret> {
        let text = read_private(path, (MAX_SECRET_LEN * 2 + 16) as u64)?;
        Secret::from_hex(&text).map_err(|why| ClusterError::Secret {
            path: path.to_path_buf(),
            why,
        })
    }

    /// Writes this secret to a new file (mode 0600, `O_EXCL|O_NOFOLLOW`). With `force`
    /// an existing file (or symlink) is unlinked first; the new one is still created
    /// exclusively, so a racing planter makes this fail rather than write through it.
    pub fn create(&self, path: &Path, force: bool) -> Result<()> {
        let mut text = self.to_hex();
        text.push('\n');
        write_private(path, text.as_bytes(), force)
    }
}

/// Reads a small private file: a regular file (symlinks refused), owned by the caller,
/// no group/other permission bits, at most `max` bytes. The secret and the per-node key
/// files are read only through this.
pub(crate) fn read_private(path: &Path, max: u64) -> Result<String> {
    let refuse = |why: String| ClusterError::Secret {
        path: path.to_path_buf(),
        why,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| refuse(format!("cannot open: {e}")))?;
    let meta = f.metadata().map_err(|e| refuse(format!("cannot stat: {e}")))?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() {
        return Err(refuse("not a regular file".into()));
    }
    if meta.uid() != euid {
        return Err(refuse(format!(
            "owned by uid {}, not by you (uid {euid})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(refuse(format!(
            "mode {:o} lets others read it; chmod 600",
            meta.mode() & 0o7777
        )));
    }
    if meta.len() > max {
        return Err(refuse(format!("{} bytes is too long", meta.len())));
    }
    let mut text = String::new();
    f.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| refuse(format!("cannot read: {e}")))?;
    Ok(text)
}

/// Writes `bytes` to a new private file (mode 0600, `O_EXCL|O_NOFOLLOW`, synced); with
/// `force` an existing file is unlinked first.
pub(crate) fn write_private(path: &Path, bytes: &[u8], force: bool) -> Result<()> {
    let io = |source| ClusterError::Io {
        path: path.to_path_buf(),
        source,
    };
    if force {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                ClusterError::Secret {
                    path: path.to_path_buf(),
                    why: "exists; not overwritten (use --force to replace it)".into(),
                }
            } else {
                io(e)
            }
        })?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    Ok(())
}
