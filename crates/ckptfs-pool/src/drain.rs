//! The lazy drain's chunk files on the PFS, and the reassembly of files from them.
//!
//! Each benefactor drains the chunks of committed versions independently, first in first
//! out, one file per chunk, named with everything reassembly needs:
//!
//! ```text
//! DRAIN/<store path>.pool/v<version>/<index>-of-<count>-<blake3 hash>
//! ```
//!
//! (`/run1/big.dat` version 2, chunk 3 of 10: `run1/big.dat.pool/v2/3-of-10-<hash>`).
//! A chunk that an incremental version shares with an earlier one is a hard link to
//! the earlier chunk file, so the PFS holds its bytes once. A chunk file is written
//! under a temporary name and renamed, so a listed name always has its whole content.

use crate::msg::{check_path, ChunkHash, ChunkName};
use crate::{PoolError, Result};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Suffix of the directory holding a file's drained versions.
pub const SUFFIX: &str = ".pool";

/// Where the chunk `n` is drained under `dir`.
pub fn chunk_file(dir: &Path, n: &ChunkName) -> PathBuf {
    dir.join(format!("{}{SUFFIX}", n.path.trim_start_matches('/')))
        .join(format!("v{}", n.version))
        .join(format!("{}-of-{}-{}", n.index, n.count, n.hash))
}

/// Write (or hard-link from `link`) the chunk file of `n` under `dir`; Ok(path).
pub fn write_chunk(dir: &Path, n: &ChunkName, data: &[u8], link: Option<&Path>) -> Result<PathBuf> {
    check_path(&n.path).map_err(PoolError::Config)?;
    let p = chunk_file(dir, n);
    if p.exists() {
        return Ok(p);
    }
    let parent = p.parent().expect("has a parent");
    fs::create_dir_all(parent).map_err(|e| PoolError::io(format!("drain mkdir {}", parent.display()), e))?;
    if let Some(l) = link {
        if fs::hard_link(l, &p).is_ok() {
            return Ok(p);
        }
    }
    let tmp = parent.join(format!(".tmp.{}.{}", std::process::id(), n.index));
    let mut f = fs::File::create(&tmp).map_err(|e| PoolError::io(format!("drain {}", tmp.display()), e))?;
    f.write_all(data)
        .and_then(|_| f.sync_data())
        .map_err(|e| PoolError::io(format!("drain {}", tmp.display()), e))?;
    fs::rename(&tmp, &p).map_err(|e| PoolError::io(format!("drain {}", p.display()), e))?;
    Ok(p)
}

/// Read a drained chunk and check its hash.
pub fn read_chunk(dir: &Path, n: &ChunkName) -> Result<Vec<u8>> {
    let p = chunk_file(dir, n);
    let data = fs::read(&p).map_err(|e| PoolError::io(format!("drained chunk {}", p.display()), e))?;
    if ChunkHash::of(&data) != n.hash {
        return Err(PoolError::Corrupt {
            what: p.display().to_string(),
            chunk: n.index,
        });
    }
    Ok(data)
}

/// One file rebuilt by [`reassemble`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rebuilt {
    /// Store path.
    pub path: String,
    /// Version rebuilt (the newest complete one).
    pub version: u64,
    /// Bytes.
    pub size: u64,
    /// Where it was written.
    pub dest: PathBuf,
}

/// Rebuild, under `dest`, the newest completely drained version of every file drained
/// under `dir`, checking every chunk against the hash in its name. Returns the files
/// rebuilt and the versions that could not be (incomplete or damaged), by name.
pub fn reassemble(dir: &Path, dest: &Path) -> Result<(Vec<Rebuilt>, Vec<String>)> {
    let mut found: Found = BTreeMap::new();
    walk(dir, dir, &mut found)?;
    let mut done = Vec::new();
    let mut bad = Vec::new();
    for (path, versions) in found {
        let mut rebuilt = false;
        for (v, chunks) in versions.into_iter().rev() {
            if rebuilt {
                break;
            }
            let count = chunks.first().map(|c| c.1).unwrap_or(0);
            let mut by: BTreeMap<u64, (ChunkHash, PathBuf)> = BTreeMap::new();
            for (i, c, h, p) in chunks {
                if c == count {
                    by.insert(i, (h, p));
                }
            }
            if by.len() as u64 != count || by.keys().copied().ne(0..count) {
                bad.push(format!("{path} v{v}: {} of {count} chunks drained", by.len()));
                continue;
            }
            let out = dest.join(path.trim_start_matches('/'));
            if let Some(parent) = out.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| PoolError::io(format!("mkdir {}", parent.display()), e))?;
            }
            let tmp = out.with_extension("reassembling");
            let mut f =
                fs::File::create(&tmp).map_err(|e| PoolError::io(format!("create {}", tmp.display()), e))?;
            let mut size = 0u64;
            let mut ok = true;
            for (i, (h, p)) in &by {
                let data = fs::read(p).map_err(|e| PoolError::io(format!("read {}", p.display()), e))?;
                if ChunkHash::of(&data) != *h {
                    bad.push(format!("{path} v{v}: chunk {i} does not match its hash"));
                    ok = false;
                    break;
                }
                f.write_all(&data)
                    .map_err(|e| PoolError::io(format!("write {}", tmp.display()), e))?;
                size += data.len() as u64;
            }
            if !ok {
                let _ = fs::remove_file(&tmp);
                continue;
            }
            f.sync_all()
                .map_err(|e| PoolError::io(format!("sync {}", tmp.display()), e))?;
            fs::rename(&tmp, &out).map_err(|e| PoolError::io(format!("rename {}", out.display()), e))?;
            done.push(Rebuilt {
                path: path.clone(),
                version: v,
                size,
                dest: out,
            });
            rebuilt = true;
        }
    }
    Ok((done, bad))
}

type Found = BTreeMap<String, BTreeMap<u64, Vec<(u64, u64, ChunkHash, PathBuf)>>>;

fn walk(root: &Path, d: &Path, found: &mut Found) -> Result<()> {
    let rd = fs::read_dir(d).map_err(|e| PoolError::io(format!("list {}", d.display()), e))?;
    for ent in rd {
        let ent = ent.map_err(|e| PoolError::io(format!("list {}", d.display()), e))?;
        let ft = ent.file_type().map_err(|e| PoolError::io("stat", e))?;
        if !ft.is_dir() {
            continue;
        }
        let name = ent.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(SUFFIX) {
            let rel = ent
                .path()
                .parent()
                .unwrap_or(root)
                .strip_prefix(root)
                .unwrap_or(Path::new(""))
                .join(stem);
            let path = format!("/{}", rel.to_string_lossy());
            if check_path(&path).is_err() {
                continue;
            }
            for v in fs::read_dir(ent.path())
                .map_err(|e| PoolError::io("list", e))?
                .flatten()
            {
                let vn = v.file_name().to_string_lossy().into_owned();
                let Some(ver) = vn.strip_prefix('v').and_then(|s| s.parse::<u64>().ok()) else {
                    continue;
                };
                let list = found.entry(path.clone()).or_default().entry(ver).or_default();
                for c in fs::read_dir(v.path())
                    .map_err(|e| PoolError::io("list", e))?
                    .flatten()
                {
                    if let Some(parsed) = parse_name(&c.file_name().to_string_lossy()) {
                        list.push((parsed.0, parsed.1, parsed.2, c.path()));
                    }
                }
            }
        } else {
            walk(root, &ent.path(), found)?;
        }
    }
    Ok(())
}

/// `<index>-of-<count>-<hash>`.
fn parse_name(s: &str) -> Option<(u64, u64, ChunkHash)> {
    let (i, rest) = s.split_once("-of-")?;
    let (c, h) = rest.split_once('-')?;
    let (i, c) = (i.parse().ok()?, c.parse().ok()?);
    (i < c).then_some(())?;
    Some((i, c, ChunkHash::parse(h)?))
}
