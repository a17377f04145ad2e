//! Manifests: the record of a drained set of files (docs/object.md, "Layout").
//!
//! A manifest is a JSON object `PREFIX/manifests/<20-digit ns>-<node>-<pid>-<seq>.json`
//! written after every data object it names is complete. The level lists only what
//! manifests name, so a set whose upload was interrupted is invisible. A later manifest
//! (by key order) overrides an earlier one for the same path; a `deleted` entry removes
//! the path.
//!
//! A manifest is never trusted: [`Manifest::parse`] checks every path, size, chunk
//! count and frame table before anything is allocated from them or read with them.

use crate::error::ObjectError;
use serde::{Deserialize, Serialize};

/// The manifest's `format` field.
pub const FORMAT: &str = "ckptfs-object-manifest";
/// The manifest's `version` field.
pub const VERSION: u32 = 1;
/// Largest file size a manifest may claim (1 PiB).
pub const MAX_SIZE: u64 = 1 << 50;
/// Largest manifest object read (64 MiB).
pub const MAX_MANIFEST: u64 = 64 << 20;

/// zstd compression of one file: the file's bytes in groups of `group`, each one zstd
/// frame, the frames back to back in the data object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zstd {
    /// Compression level used.
    pub level: i32,
    /// Uncompressed bytes per frame (the last frame may hold fewer).
    pub group: u64,
    /// Compressed length of each frame, in order.
    pub frames: Vec<u64>,
}

/// One file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Store path (`/a/b`).
    pub path: String,
    /// This entry removes the path (no data object).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// Size in bytes (uncompressed).
    #[serde(default)]
    pub size: u64,
    /// Permission bits.
    #[serde(default)]
    pub mode: u32,
    /// Modification time, ns since the epoch.
    #[serde(default)]
    pub mtime_ns: u64,
    /// Chunk size of `chunk_crc32c`.
    #[serde(default)]
    pub chunk_size: u64,
    /// CRC32C of the whole file.
    #[serde(default)]
    pub crc32c: u32,
    /// CRC32C of each chunk (uncompressed).
    #[serde(default)]
    pub chunk_crc32c: Vec<u32>,
    /// Size of the data object (compressed size when compressed).
    #[serde(default)]
    pub object_size: u64,
    /// The data object's ETag as the service returned it on completion.
    #[serde(default)]
    pub e_tag: Option<String>,
    /// Parts of its multipart upload (0: one PUT).
    #[serde(default)]
    pub parts: u32,
    /// Compression, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zstd: Option<Zstd>,
}

/// A drained set of files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The drainer that wrote it.
    pub node: String,
    /// When, ns since the epoch.
    pub created_ns: u64,
    /// The files.
    pub files: Vec<Entry>,
}

/// Is `p` a store path we accept from a manifest (absolute, no empty, `.` or `..`
/// component, no NUL or control character, bounded)?
pub fn valid_path(p: &str) -> bool {
    p.len() > 1
        && p.len() <= 4096
        && p.starts_with('/')
        && !p.chars().any(|c| c.is_control())
        && p[1..].split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

impl Entry {
    /// Check the entry's numbers against each other.
    pub fn check(&self) -> Result<(), String> {
        if !valid_path(&self.path) {
            return Err(format!("bad path {:?}", self.path.escape_debug().to_string()));
        }
        if self.deleted {
            return Ok(());
        }
        if self.size > MAX_SIZE {
            return Err(format!("{}: size {} too large", self.path, self.size));
        }
        if !(512..=(1 << 30)).contains(&self.chunk_size) {
            return Err(format!(
                "{}: chunk size {} out of range",
                self.path, self.chunk_size
            ));
        }
        if self.chunk_crc32c.len() as u64 != self.size.div_ceil(self.chunk_size) {
            return Err(format!(
                "{}: {} chunk CRCs for {} bytes of {}-byte chunks",
                self.path,
                self.chunk_crc32c.len(),
                self.size,
                self.chunk_size
            ));
        }
        match &self.zstd {
            None => {
                if self.object_size != self.size {
                    return Err(format!(
                        "{}: object size {} != size {}",
                        self.path, self.object_size, self.size
                    ));
                }
            }
            Some(z) => {
                if z.group == 0 || z.group > (256 << 20) || z.group % self.chunk_size != 0 {
                    return Err(format!("{}: compression group {} invalid", self.path, z.group));
                }
                if z.frames.len() as u64 != self.size.div_ceil(z.group) {
                    return Err(format!(
                        "{}: {} frames for {} bytes",
                        self.path,
                        z.frames.len(),
                        self.size
                    ));
                }
                let total = z.frames.iter().try_fold(0u64, |a, f| a.checked_add(*f));
                if total != Some(self.object_size) || z.frames.contains(&0) {
                    return Err(format!(
                        "{}: frame lengths do not add up to the object size",
                        self.path
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Manifest {
    /// Parse and check a manifest read from `key`.
    pub fn parse(key: &str, bytes: &[u8]) -> Result<Manifest, ObjectError> {
        let bad = |reason: String| ObjectError::Manifest {
            key: key.to_string(),
            reason,
        };
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| bad(format!("not JSON of the manifest format: {e}")))?;
        if m.format != FORMAT || m.version != VERSION {
            return Err(bad(format!(
                "format {:?} version {} not understood",
                m.format, m.version
            )));
        }
        for e in &m.files {
            e.check().map_err(bad)?;
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            path: "/a/b".into(),
            deleted: false,
            size: 10,
            mode: 0o644,
            mtime_ns: 1,
            chunk_size: 4096,
            crc32c: 7,
            chunk_crc32c: vec![7],
            object_size: 10,
            e_tag: None,
            parts: 0,
            zstd: None,
        }
    }

    #[test]
    fn hostile_entries_are_refused() {
        assert!(entry().check().is_ok());
        for p in ["a/b", "/a/../b", "/a//b", "/", "/a/\u{1b}[2J", "/a/."] {
            let mut e = entry();
            e.path = p.into();
            assert!(e.check().is_err(), "{p}");
        }
        let mut e = entry();
        e.chunk_crc32c = vec![1; 1 << 20];
        assert!(e.check().is_err());
        let mut e = entry();
        e.size = u64::MAX;
        assert!(e.check().is_err());
        let mut e = entry();
        e.zstd = Some(Zstd {
            level: 3,
            group: 4096,
            frames: vec![u64::MAX, 11],
        });
        assert!(e.check().is_err());
        let mut e = entry();
        e.object_size = 11;
        assert!(e.check().is_err());
        assert!(Manifest::parse("k", b"{\"format\":\"x\"}").is_err());
    }
}
