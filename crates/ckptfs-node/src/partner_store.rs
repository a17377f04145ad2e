//! Partner copies held by this node: other nodes' files in this node's own store, in
//! the system namespace the applications do not see.
//!
//! ```text
//! /.ckptfs/partners/<source node>/<source path>   complete, verified copies (listed)
//! /.ckptfs/incoming/<source node>.<n>.<pid>       copies being received (never listed)
//! ```
//!
//! A copy is received into `incoming` chunk by chunk, each chunk's CRC32C checked
//! before its bytes are written, strictly in order (a chunk that fails is refused and
//! must be sent again at the same offset), and renamed into `partners` only when every
//! byte up to the announced size has arrived and the store's own checksums verify. A
//! receiver killed in the middle leaves only an `incoming` file, removed by the next
//! daemon at start ([`clear_incoming`]).

use crate::error::{NodeError, Result};
use ckptfs_store::checksum::crc32c;
use ckptfs_store::{FileHandle, FileKind, OpenFlags, Store, StoreError, WriteState};
use std::sync::atomic::{AtomicU64, Ordering};

/// Directory of the complete partner copies, one subdirectory per source node.
pub const PARTNERS_DIR: &str = "/.ckptfs/partners";
/// Directory of copies being received.
pub const INCOMING_DIR: &str = "/.ckptfs/incoming";

/// Longest node id accepted from a peer.
const NODE_ID_MAX: usize = 64;

/// Check a node id received from a peer or read from a cluster file: one path
/// component of `[A-Za-z0-9._-]`, not `.` or `..`, at most 64 bytes.
pub fn check_node_id(id: &str) -> std::result::Result<(), String> {
    if id.is_empty() || id.len() > NODE_ID_MAX {
        return Err(format!("node id must be 1-{NODE_ID_MAX} bytes"));
    }
    if id == "." || id == ".." {
        return Err(format!("node id {id:?} is not allowed"));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err("node id may only hold letters, digits, '.', '_' and '-'".into());
    }
    Ok(())
}

/// Check a file path received from a peer and return it normalized (`/a/b`). Refused:
/// empty, a `.` or `..` component, a NUL byte, the root itself, anything under
/// `/.ckptfs`, over 4095 bytes. Nothing is resolved: a path that would leave the
/// partner namespace is refused, not clamped.
pub fn check_rel_path(path: &str) -> std::result::Result<String, String> {
    if path.len() > 4095 {
        return Err("path too long".into());
    }
    if path.contains('\0') {
        return Err("path holds a NUL byte".into());
    }
    let mut out = String::with_capacity(path.len() + 1);
    for c in path.split('/').filter(|c| !c.is_empty()) {
        if c == "." || c == ".." {
            return Err(format!("path component {c:?} refused"));
        }
        if c.len() > 255 {
            return Err("path component too long".into());
        }
        out.push('/');
        out.push_str(c);
    }
    if out.is_empty() {
        return Err("empty path".into());
    }
    if ckptfs_store::is_system_path(&out) {
        return Err("path inside /.ckptfs refused".into());
    }
    Ok(out)
}

/// Store path of the partner copy of `path` from node `src`.
pub fn copy_path(src: &str, path: &str) -> String {
    format!("{PARTNERS_DIR}/{src}{path}")
}

/// Create a directory and its parents (mode 0700), existing ones accepted.
pub(crate) fn mkdir_p(store: &Store, path: &str) -> Result<()> {
    let mut cur = String::new();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        cur.push('/');
        cur.push_str(c);
        match store.mkdir(&cur, 0o700) {
            Ok(_) | Err(StoreError::Exists(_)) => {}
            Err(e) => return Err(NodeError::store(format!("mkdir {cur}"), e)),
        }
    }
    Ok(())
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Remove every half-received copy (at daemon start: a killed receiver's leftovers).
pub fn clear_incoming(store: &Store) -> Result<usize> {
    let entries = match store.read_dir(INCOMING_DIR) {
        Ok(e) => e,
        Err(StoreError::NotFound(_)) => return Ok(0),
        Err(e) => return Err(NodeError::store("list incoming copies", e)),
    };
    let mut n = 0;
    for e in entries {
        if store.unlink(&format!("{INCOMING_DIR}/{}", e.name)).is_ok() {
            n += 1;
        }
    }
    Ok(n)
}

/// Bytes held in complete partner copies and copies being received.
pub fn held_bytes(store: &Store) -> u64 {
    store
        .list_all_system()
        .into_iter()
        .filter(|(p, st)| {
            st.kind == FileKind::File
                && (p.starts_with(&format!("{PARTNERS_DIR}/")) || p.starts_with(&format!("{INCOMING_DIR}/")))
        })
        .map(|(_, st)| st.allocated)
        .sum()
}

/// One complete partner copy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldFile {
    /// Path on the source node.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

/// The complete partner copies of node `src` held here, sorted by path.
pub fn list(store: &Store, src: &str) -> Vec<HeldFile> {
    let prefix = format!("{PARTNERS_DIR}/{src}/");
    store
        .list_all_system()
        .into_iter()
        .filter(|(p, st)| {
            st.kind == FileKind::File && st.state == WriteState::Complete && p.starts_with(&prefix)
        })
        .map(|(p, st)| HeldFile {
            path: p[prefix.len() - 1..].to_string(),
            size: st.size,
        })
        .collect()
}

/// Source nodes whose copies are held here.
pub fn sources(store: &Store) -> Vec<String> {
    match store.read_dir(PARTNERS_DIR) {
        Ok(v) => {
            let mut s: Vec<String> = v
                .into_iter()
                .filter(|e| e.kind == FileKind::Dir)
                .map(|e| e.name)
                .collect();
            s.sort();
            s
        }
        Err(_) => Vec::new(),
    }
}

/// Drop the partner copy of `path` from `src` (a delete or rewrite on the source).
/// A missing copy is not an error.
pub fn remove(store: &Store, src: &str, path: &str) -> Result<()> {
    let p = copy_path(src, path);
    match store.unlink(&p) {
        Ok(()) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(NodeError::store(format!("remove {p}"), e)),
    }
}

/// Open the complete partner copy of `path` from `src` for reading (a restore).
pub fn open_copy(store: &Store, src: &str, path: &str) -> Result<FileHandle> {
    let p = copy_path(src, path);
    store
        .open(&p, OpenFlags::READ, 0)
        .map_err(|e| NodeError::store(format!("open partner copy {p}"), e))
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A partner copy being received.
pub struct Incoming {
    store: Store,
    tmp: String,
    dest: String,
    file: Option<FileHandle>,
    size: u64,
    received: u64,
    peer: String,
    path: String,
}

impl Incoming {
    /// Start receiving `path` (already checked) of `size` bytes from node `src`.
    /// `limit`: most bytes of partner copies this node holds (ENOSPC past it).
    pub fn begin(store: &Store, src: &str, path: &str, size: u64, limit: Option<u64>) -> Result<Incoming> {
        if let Some(limit) = limit {
            if held_bytes(store).saturating_add(size) > limit {
                return Err(NodeError::store(
                    format!("partner copy of {path} from {src} ({size} bytes, limit {limit})"),
                    StoreError::NoSpace,
                ));
            }
        }
        mkdir_p(store, INCOMING_DIR)?;
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = format!("{INCOMING_DIR}/{src}.{n}.{}", std::process::id());
        let file = store
            .open(&tmp, OpenFlags::CREATE, 0o600)
            .map_err(|e| NodeError::store(format!("create {tmp}"), e))?;
        Ok(Incoming {
            store: store.clone(),
            tmp,
            dest: copy_path(src, path),
            file: Some(file),
            size,
            received: 0,
            peer: src.to_string(),
            path: path.to_string(),
        })
    }

    /// Bytes received and stored so far (the offset the next chunk must have).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Store one chunk: `data` at `offset` with CRC32C `crc`. Chunks come in order; a
    /// chunk whose CRC does not match is refused ([`NodeError::BadChunk`]) and nothing
    /// of it is written.
    pub fn chunk(&mut self, offset: u64, data: &[u8], crc: u32) -> Result<()> {
        if offset != self.received || offset.saturating_add(data.len() as u64) > self.size {
            return Err(NodeError::Protocol {
                peer: self.peer.clone(),
                what: format!(
                    "chunk at {offset} (+{}) out of order or past the size {} (expected offset {})",
                    data.len(),
                    self.size,
                    self.received
                ),
            });
        }
        if crc32c(data) != crc {
            return Err(NodeError::BadChunk {
                peer: self.peer.clone(),
                path: self.path.clone(),
                offset,
            });
        }
        let f = self.file.as_mut().expect("file open until finish");
        let mut done = 0;
        while done < data.len() {
            let n = f
                .pwrite(&data[done..], offset + done as u64)
                .map_err(|e| NodeError::store(format!("write {}", self.tmp), e))?;
            done += n;
        }
        self.received += data.len() as u64;
        Ok(())
    }

    /// All bytes arrived: close, verify the store's checksums, and rename into place
    /// (replacing an older copy).
    pub fn finish(mut self) -> Result<()> {
        if self.received != self.size {
            return Err(NodeError::Protocol {
                peer: self.peer.clone(),
                what: format!(
                    "end of {} after {} of {} bytes",
                    self.path, self.received, self.size
                ),
            });
        }
        let f = self.file.take().expect("file open until finish");
        f.close()
            .map_err(|e| NodeError::store(format!("close {}", self.tmp), e))?;
        let mut r = self
            .store
            .open(&self.tmp, OpenFlags::READ, 0)
            .map_err(|e| NodeError::store(format!("reopen {}", self.tmp), e))?;
        r.verify_all()
            .map_err(|e| NodeError::store(format!("verify {}", self.tmp), e))?;
        if r.size() != self.size {
            return Err(NodeError::Protocol {
                peer: self.peer.clone(),
                what: format!("{} has {} bytes, {} announced", self.path, r.size(), self.size),
            });
        }
        drop(r);
        mkdir_p(&self.store, parent(&self.dest))?;
        self.store
            .rename(&self.tmp, &self.dest)
            .map_err(|e| NodeError::store(format!("rename {} to {}", self.tmp, self.dest), e))?;
        self.tmp.clear();
        Ok(())
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // Not finished: the half copy goes away, it is never listed.
        drop(self.file.take());
        if !self.tmp.is_empty() {
            let _ = self.store.unlink(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_escapes_are_refused() {
        for bad in [
            "",
            "/",
            "..",
            "/a/../../etc",
            "/a/./b",
            "a\0b",
            "/.ckptfs/levels.json",
        ] {
            assert!(check_rel_path(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(check_rel_path("ckpt//a/b").unwrap(), "/ckpt/a/b");
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_node_id(bad).is_err(), "{bad:?} accepted");
        }
        check_node_id("node-1.r2_x").unwrap();
    }
}
