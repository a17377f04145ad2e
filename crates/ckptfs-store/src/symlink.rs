//! Symbolic links: an inode of kind [`kind::SYMLINK`] whose target is its data, kept in
//! a small-file run (see `small.rs`) under the run's CRC32C, with the size the target's
//! length. The target is written before the `kind` store that commits the inode, under
//! the namespace lock: a creator killed at any point leaves no symlink (the namespace
//! rebuild gives a dead creator's run back) or a complete one, never a half-written
//! target. The store's own path resolution never follows a symlink: opening one is
//! ELOOP (as with `O_NOFOLLOW`), a path through one is ENOTDIR; the front-ends follow
//! them (the kernel for the FUSE mount, the preload shim for store paths).

use crate::checksum::crc32c;
use crate::error::{Result, StoreError};
use crate::layout::*;
use crate::store::{components, Ns, Stat, Store};
use std::sync::atomic::Ordering::Acquire;

/// Longest symlink target, in bytes (PATH_MAX less the terminating NUL).
pub const SYMLINK_MAX: usize = PATH_MAX;

impl Store {
    /// Create a symbolic link at `path` pointing to `target` (any bytes but NUL, 1 to
    /// [`SYMLINK_MAX`] of them; not checked to exist). Its permission bits are 0777.
    pub fn symlink(&self, target: &[u8], path: &str) -> Result<Stat> {
        if target.is_empty() {
            return Err(StoreError::NotFound(format!("{path}: empty symlink target")));
        }
        if target.len() > SYMLINK_MAX {
            return Err(StoreError::NameTooLong(format!(
                "{path}: symlink target of {} bytes (at most {SYMLINK_MAX})",
                target.len()
            )));
        }
        if target.contains(&0) {
            return Err(StoreError::Invalid(format!(
                "{path}: symlink target contains NUL"
            )));
        }
        let comps = components(path)?;
        let ns = self.ns();
        let (parent, name) = self.resolve_new(&ns, &comps, path)?;
        let fill = |fid: u32| -> Result<()> {
            let _g = self.file_lock(fid);
            if !self.small_write(fid, path, target, 0)? {
                return Err(StoreError::NoSpace);
            }
            crate::fault::crash_point("symlink-before-kind");
            Ok(())
        };
        let fid = self.alloc_inode_with(&ns, kind::SYMLINK, parent, name.as_bytes(), 0o777, false, &fill)?;
        let st = self.stat_fid(fid);
        drop(ns);
        Ok(st)
    }

    /// The target of the symbolic link at `path` (not followed). EINVAL when it is not
    /// a symlink; EIO when its target record fails its checksum.
    pub fn readlink(&self, path: &str) -> Result<Vec<u8>> {
        let comps = components(path)?;
        let ns = self.ns();
        let fid = self.resolve(&ns, &comps, path)?;
        self.readlink_fid(&ns, fid, path)
    }

    /// [`Store::readlink`] by inode number.
    pub fn readlink_ino(&self, ino: u64) -> Result<Vec<u8>> {
        let ns = self.ns();
        let fid = self.fid_of_ino(&ns, ino)?;
        self.readlink_fid(&ns, fid, "")
    }

    fn readlink_fid(&self, _ns: &Ns, fid: u32, path: &str) -> Result<Vec<u8>> {
        let seg = &*self.seg;
        let ino = seg.inode(fid);
        if ino.kind.load(Acquire) != kind::SYMLINK {
            return Err(StoreError::Invalid(format!(
                "{}: not a symbolic link",
                if path.is_empty() {
                    format!("inode {}", fid as u64 + 1)
                } else {
                    path.into()
                }
            )));
        }
        self.check_inode(fid, path)?;
        let _g = self.file_lock(fid);
        let size = ino.size.load(Acquire) as usize;
        let run = self
            .run_of(fid, path)?
            .ok_or_else(|| self.damaged(fid, path, "symbolic link has no target record"))?;
        let (hwm, crc, stale) = unpack_sum(ino.ssum.load(Acquire));
        if stale || hwm as usize != size || size == 0 || size as u64 > run.bytes() || size > SYMLINK_MAX {
            return Err(self.damaged(fid, path, "symbolic link target record does not match its size"));
        }
        let mut v = vec![0u8; size];
        self.run_read(run, 0, &mut v);
        let computed = crc32c(&v);
        if computed != crc {
            tracing::error!(path, "checksum mismatch in a symbolic link's target");
            return Err(StoreError::Corrupt {
                path: if path.is_empty() {
                    format!("inode {}", fid as u64 + 1)
                } else {
                    path.into()
                },
                logical: 0,
                stored: crc,
                computed,
            });
        }
        if v.contains(&0) {
            return Err(self.damaged(fid, path, "symbolic link target contains NUL"));
        }
        Ok(v)
    }
}
