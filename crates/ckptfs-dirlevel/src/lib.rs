//! # ckptfs-dirlevel: a local directory as a level
//!
//! The smallest implementation of [`ckptfs_level::Level`]: each copy is one file under
//! the directory, at the copy's store path, holding a header and the content:
//!
//! ```text
//! "CKDL" | u32 LE header length | header (JSON: size, mtime_ns, mode, serial,
//! chunk_size, chunk_crc32c, crc32c) | content
//! ```
//!
//! A copy is written as `.ckdl-tmp.PID.N` in its directory and renamed to its name on
//! commit (a dropped writer removes it), so a listing never shows a half-written copy.
//! Reads check every chunk against the header's CRC32C. The level exists to show what
//! adding a level takes — this crate, the conformance suite in its tests, and one
//! [`DirFactory`] entry where a registry is assembled — and for tests of the mover.

use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, IoPart, Level, LevelError, LevelFactory, LevelId, LevelKind, Stored,
    Version,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const MAGIC: &[u8; 4] = b"CKDL";
const TMP: &str = ".ckdl-tmp.";
/// Largest header accepted (a copy's chunk CRCs: 1 MiB holds ~100 k chunks).
const MAX_HEADER: u32 = 16 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Header {
    size: u64,
    mtime_ns: u64,
    mode: u32,
    serial: u64,
    chunk_size: u64,
    chunk_crc32c: Vec<u32>,
    crc32c: u32,
}

/// A directory as a level (`dir:/path`).
#[derive(Debug)]
pub struct DirLevel {
    root: PathBuf,
    meter: CostMeter,
    seq: AtomicU64,
}

fn einval(msg: String) -> LevelError {
    LevelError::backend(libc::EINVAL, std::io::Error::other(msg))
}

impl DirLevel {
    /// The level over `root` (created if missing).
    pub fn new(root: impl Into<PathBuf>) -> Result<DirLevel, LevelError> {
        let root = root.into();
        fs::create_dir_all(&root)
            .map_err(|e| LevelError::io("create level directory", root.display().to_string(), e))?;
        Ok(DirLevel {
            root,
            meter: CostMeter::new(),
            seq: AtomicU64::new(0),
        })
    }

    /// Where the copy of store path `path` lives (None for a path that would leave the
    /// directory: `..`, empty components, not absolute).
    pub fn file_of(&self, path: &str) -> Option<PathBuf> {
        let rel = path.strip_prefix('/')?;
        if rel.is_empty()
            || rel
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == ".." || c.starts_with(TMP))
        {
            return None;
        }
        Some(self.root.join(rel))
    }

    fn path_of(&self, path: &str) -> Result<PathBuf, LevelError> {
        self.file_of(path)
            .ok_or_else(|| einval(format!("{}: not a store path: {path:?}", self.name())))
    }

    fn read_header(&self, path: &str, f: &File) -> Result<(Header, u64), LevelError> {
        let bad = |why: &str| LevelError::Corrupt {
            level: self.name(),
            path: format!("{path} ({why})"),
            chunk: 0,
        };
        let mut head = [0u8; 8];
        f.read_exact_at(&mut head, 0).map_err(|_| bad("short header"))?;
        if &head[..4] != MAGIC {
            return Err(bad("not a copy file"));
        }
        let n = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        if n > MAX_HEADER {
            return Err(bad("header too long"));
        }
        let mut h = vec![0u8; n as usize];
        f.read_exact_at(&mut h, 8).map_err(|_| bad("short header"))?;
        let h: Header = serde_json::from_slice(&h).map_err(|_| bad("unreadable header"))?;
        let data_at = 8 + n as u64;
        let len = f.metadata().map_err(|e| LevelError::io("stat", path, e))?.len();
        let cs = h.chunk_size.max(1);
        if len != data_at + h.size || h.chunk_crc32c.len() as u64 != h.size.div_ceil(cs) {
            return Err(bad("size does not match its header"));
        }
        Ok((h, data_at))
    }

    fn stored(path: &str, h: &Header, ino: u64) -> Stored {
        Stored {
            path: path.to_string(),
            version: Version {
                ino,
                generation: 0,
                size: h.size,
                mtime_ns: h.mtime_ns,
                crc32c: Some(h.crc32c),
                serial: h.serial,
            },
            mode: h.mode,
            chunk_size: h.chunk_size,
            chunk_crc32c: h.chunk_crc32c.clone(),
        }
    }

    fn open(&self, path: &str) -> Result<Option<(File, Header, u64, u64)>, LevelError> {
        let p = self.path_of(path)?;
        let f = match File::open(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => return Ok(None),
            Err(e) => return Err(LevelError::io("open", path, e)),
        };
        let md = f.metadata().map_err(|e| LevelError::io("stat", path, e))?;
        if !md.is_file() {
            return Ok(None);
        }
        let (h, at) = self.read_header(path, &f)?;
        Ok(Some((f, h, at, std::os::unix::fs::MetadataExt::ino(&md))))
    }

    fn walk(&self, dir: &Path, store_dir: &str, out: &mut Vec<Stored>) -> Result<(), LevelError> {
        let rd = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(LevelError::io("list", dir.display().to_string(), e)),
        };
        for ent in rd {
            let ent = ent.map_err(|e| LevelError::io("list", dir.display().to_string(), e))?;
            let name = ent.file_name().to_string_lossy().into_owned();
            if name.starts_with(TMP) {
                continue;
            }
            let sp = format!("{}/{name}", store_dir.trim_end_matches('/'));
            let ft = ent
                .file_type()
                .map_err(|e| LevelError::io("list", sp.clone(), e))?;
            if ft.is_dir() {
                self.walk(&ent.path(), &sp, out)?;
            } else if ft.is_file() {
                // A file that is not a good copy is not listed (and not an error).
                if let Ok(Some((_, h, _, ino))) = self.open(&sp) {
                    out.push(Self::stored(&sp, &h, ino));
                }
            }
        }
        Ok(())
    }
}

impl Level for DirLevel {
    fn kind(&self) -> LevelKind {
        // Not one of the settings' kinds: its id says `dir`; it reads after the PFS.
        LevelKind::Pfs
    }

    fn name(&self) -> String {
        format!("dir:{}", self.root.display())
    }

    fn id(&self) -> LevelId {
        LevelId::new("dir", self.root.display().to_string())
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError> {
        let mut out = Vec::new();
        let p = prefix.trim_end_matches('/');
        if p.is_empty() {
            self.walk(&self.root, "/", &mut out)?;
        } else {
            let d = self.path_of(p)?;
            if d.is_dir() {
                self.walk(&d, p, &mut out)?;
            } else if let Some(s) = self.stat(p)? {
                out.push(s);
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError> {
        Ok(self.open(path)?.map(|(_, h, _, ino)| Self::stored(path, &h, ino)))
    }

    fn get<'a>(&'a self, path: &str) -> Result<Box<dyn ChunkReader + 'a>, LevelError> {
        let (f, h, at, ino) = self.open(path)?.ok_or_else(|| LevelError::NotFound {
            level: self.name(),
            path: path.to_string(),
        })?;
        Ok(Box::new(DirReader {
            lvl: self,
            stored: Self::stored(path, &h, ino),
            f,
            at,
            buf: Vec::new(),
        }))
    }

    fn put<'a>(&'a self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'a>, LevelError> {
        let dest = self.path_of(&src.path)?;
        let dir = dest.parent().expect("under the root").to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| LevelError::io("create directory for", src.path.clone(), e))?;
        let tmp = dir.join(format!(
            "{TMP}{}.{}",
            std::process::id(),
            self.seq.fetch_add(1, Ordering::Relaxed)
        ));
        let crc32c = src
            .version
            .crc32c
            .ok_or_else(|| LevelError::Changed(src.path.clone()))?;
        let h = Header {
            size: src.version.size,
            mtime_ns: src.version.mtime_ns,
            mode: src.mode,
            serial: src.version.serial,
            chunk_size: src.chunk_size.max(1),
            chunk_crc32c: src.chunk_crc32c.clone(),
            crc32c,
        };
        let json = serde_json::to_vec(&h).map_err(|e| einval(e.to_string()))?;
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| LevelError::io("create", tmp.display().to_string(), e))?;
        let mut head = Vec::with_capacity(8 + json.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&(json.len() as u32).to_le_bytes());
        head.extend_from_slice(&json);
        // From here on, a failure removes the temporary file (the writer's drop).
        let mut w = DirWriter {
            lvl: self,
            src: src.clone(),
            dest,
            tmp: Some(tmp),
            at: head.len() as u64,
            f: None,
            buf: Vec::new(),
        };
        f.write_all(&head)
            .map_err(|e| LevelError::io("write", src.path.clone(), e))?;
        w.f = Some(f);
        Ok(Box::new(w))
    }

    fn delete(&self, path: &str, want: &Version) -> Result<bool, LevelError> {
        match self.stat(path)? {
            Some(s) if s.version.same_content(want) => {
                fs::remove_file(self.path_of(path)?).map_err(|e| LevelError::io("remove", path, e))?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn meter(&self) -> &CostMeter {
        &self.meter
    }
}

struct DirReader<'a> {
    lvl: &'a DirLevel,
    stored: Stored,
    f: File,
    at: u64,
    buf: Vec<u8>,
}

impl ChunkReader for DirReader<'_> {
    fn rereadable(&self) -> bool {
        true
    }

    fn stored(&self) -> &Stored {
        &self.stored
    }

    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let cs = self.stored.chunk_size.max(1);
        let len = self.stored.version.size.saturating_sub(i * cs).min(cs) as usize;
        self.buf.resize(len, 0);
        self.f
            .read_exact_at(&mut self.buf, self.at + i * cs)
            .map_err(|e| LevelError::io("read", self.stored.path.clone(), e))?;
        self.stored.check_chunk(&self.lvl.name(), i, &self.buf)?;
        sink(&[IoPart::Buf(&self.buf)])
    }

    fn finish(self: Box<Self>) -> Result<(), LevelError> {
        Ok(())
    }
}

struct DirWriter<'a> {
    lvl: &'a DirLevel,
    src: Stored,
    dest: PathBuf,
    tmp: Option<PathBuf>,
    at: u64,
    f: Option<File>,
    buf: Vec<u8>,
}

impl ChunkWriter for DirWriter<'_> {
    fn write_at(&mut self, parts: &[IoPart<'_>], mut off: u64) -> Result<(), LevelError> {
        let f = self.f.as_ref().expect("writer used after commit");
        for p in parts {
            if off + p.len() as u64 > self.src.version.size {
                return Err(einval(format!(
                    "{}: write past the size of {}",
                    self.lvl.name(),
                    self.src.path
                )));
            }
            self.buf.clear();
            p.extend_vec(&mut self.buf);
            f.write_all_at(&self.buf, self.at + off)
                .map_err(|e| LevelError::io("write", self.src.path.clone(), e))?;
            off += p.len() as u64;
        }
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> Result<Stored, LevelError> {
        let f = self.f.take().expect("commit once");
        f.set_len(self.at + self.src.version.size)
            .and_then(|_| f.sync_all())
            .map_err(|e| LevelError::io("sync", self.src.path.clone(), e))?;
        let tmp = self.tmp.take().expect("commit once");
        if self.dest.is_dir() {
            let _ = fs::remove_file(&tmp);
            return Err(LevelError::io(
                "publish",
                self.src.path.clone(),
                std::io::Error::from_raw_os_error(libc::EISDIR),
            ));
        }
        fs::rename(&tmp, &self.dest).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            LevelError::io("publish", self.src.path.clone(), e)
        })?;
        self.lvl
            .stat(&self.src.path)?
            .ok_or_else(|| LevelError::Changed(self.src.path.clone()))
    }
}

impl Drop for DirWriter<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.tmp.take() {
            let _ = fs::remove_file(t);
        }
    }
}

/// The registry entry of the directory level: `dir:/path`.
#[derive(Debug, Default, Clone, Copy)]
pub struct DirFactory;

impl LevelFactory for DirFactory {
    fn kind(&self) -> &'static str {
        "dir"
    }

    fn open(&self, id: &LevelId, _options: &BTreeMap<String, String>) -> Result<Arc<dyn Level>, LevelError> {
        if !id.instance.starts_with('/') {
            return Err(einval(format!(
                "level {id}: a dir level needs an absolute directory (dir:/path)"
            )));
        }
        Ok(Arc::new(DirLevel::new(&id.instance)?))
    }
}
