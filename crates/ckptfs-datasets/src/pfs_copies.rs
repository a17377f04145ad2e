//! A file's copies in the drain destinations, as their manifests list them (store
//! path, size and CRC32C): is it held there, and removing it (`dataset_keep_pfs`).

use ckptfs_agent::dest::{DestIo, PosixDest};
use ckptfs_agent::manifest;
use std::path::{Path, PathBuf};

/// Whether a drain destination's manifest lists `path` with exactly this size and CRC32C.
pub fn pfs_has(dests: &[std::path::PathBuf], path: &str, size: u64, crc: u32) -> bool {
    let io = PosixDest::new(None);
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    for d in dests {
        let here = d.join(dir.trim_start_matches('/'));
        if let Ok(ms) = manifest::load_all(&io, Path::new(&here)) {
            if ms.iter().any(|m| {
                m.files
                    .get(name)
                    .is_some_and(|e| e.store_path == path && e.size == size && e.crc32c == crc)
            }) {
                return true;
            }
        }
    }
    false
}

/// Remove `path`'s PFS copies (size and CRC32C as given) from every destination; how many.
pub(crate) fn remove_copies(dests: &[PathBuf], path: &str, size: u64, crc: u32) -> usize {
    let io = PosixDest::new(None);
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let mut n = 0;
    for d in dests {
        let here = d.join(dir.trim_start_matches('/'));
        let Ok(ms) = manifest::load_all(&io, Path::new(&here)) else {
            continue;
        };
        for mut m in ms {
            let ours = m
                .files
                .get(name)
                .is_some_and(|e| e.store_path == path && e.size == size && e.crc32c == crc);
            if !ours {
                continue;
            }
            m.files.remove(name);
            if m.save(&io, &here).is_ok() {
                let _ = io.remove(&here.join(name));
                n += 1;
            }
        }
    }
    n
}
