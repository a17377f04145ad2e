//! Partner copies as they sit in a holder's store: other nodes' files in the holder's
//! own store, in the system namespace the applications do not see.
//!
//! ```text
//! /.ckptfs/partners/<source node>/<source path>   complete, verified copies (listed)
//! /.ckptfs/incoming/<source node>.<n>.<pid>       copies being received (never listed)
//! ```
//!
//! The paths, the checks of what a peer names, the listing of complete copies: what the
//! client side (a restore, a `holds` answer for this node's own copies) and the daemon's
//! receiving side (`ckptfs_node::partner_store`) share.

use ckptfs_store::level::crcs_from_chunks;
use ckptfs_store::{FileKind, Store, WriteState};

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

/// Every file under directory `dir` (at any depth) with its attributes, sorted by path;
/// nothing if `dir` does not exist. Walks the directories rather than the store's whole
/// inode table ([`Store::list_all_system`]), whose scan grows with the store's file
/// slots (about 8 ms per million, a million per 8 GiB of memory by default) and not with
/// the copies held: this runs for every copy offered and every restore asked for. A
/// file or directory removed during the walk is left out.
pub fn files_under(store: &Store, dir: &str) -> Vec<(String, ckptfs_store::Stat)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_string()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = store.read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = format!("{d}/{}", e.name);
            match e.kind {
                // (A path past PATH_MAX is not followed: a directory cycle in a damaged
                // store ends the walk there.)
                FileKind::Dir if p.len() <= libc::PATH_MAX as usize => dirs.push(p),
                FileKind::File => {
                    if let Ok(st) = store.stat(&p) {
                        if st.kind == FileKind::File {
                            out.push((p, st));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// One complete partner copy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldFile {
    /// Path on the source node.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Modification time of the copy here, ns since the epoch (when it was received).
    #[serde(default)]
    pub mtime_ns: u64,
    /// CRC32C of the whole copy, from its chunk records (no data read); None if a
    /// record is stale.
    #[serde(default)]
    pub crc32c: Option<u32>,
    /// The copy generation the source gave this version (0: not known, a copy made
    /// before generations were kept).
    #[serde(default)]
    pub generation: u64,
}

/// Extended attribute of a partner copy holding its copy generation (u64 LE).
pub const GENERATION_XATTR: &[u8] = b"trusted.ckptfs.generation";

/// The copy generation kept with the file at `path` of `store` (0 when none is kept).
pub fn generation_of(store: &Store, path: &str) -> u64 {
    match store.getxattr(path, GENERATION_XATTR) {
        Ok(v) if v.len() == 8 => u64::from_le_bytes(v.try_into().unwrap_or([0; 8])),
        _ => 0,
    }
}

/// The complete partner copies of node `src` held here, sorted by path, each with its
/// whole-file CRC32C combined from the store's chunk CRCs
/// ([`ckptfs_store::level::crcs_from_chunks`]).
pub fn list(store: &Store, src: &str) -> Vec<HeldFile> {
    let prefix = format!("{PARTNERS_DIR}/{src}/");
    let cs = store.chunk_size();
    files_under(store, &prefix[..prefix.len() - 1])
        .into_iter()
        .filter(|(_, st)| st.state == WriteState::Complete)
        .map(|(p, st)| {
            let crc32c = store
                .chunk_list(&p)
                .ok()
                .and_then(|c| crcs_from_chunks(st.size, cs, &c))
                .map(|c| c.0);
            HeldFile {
                generation: generation_of(store, &p),
                path: p[prefix.len() - 1..].to_string(),
                size: st.size,
                mtime_ns: st.mtime_ns,
                crc32c,
            }
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

/// A landing (a store [`Landing`](ckptfs_store::netin::Landing), or any level writer's
/// [`ckptfs_level::Landing`]) as the transport's chunk sink: chunk data read from the
/// socket straight into a file's chunks.
pub struct Sink<'a>(pub &'a mut dyn ckptfs_level::Landing);

impl ckptfs_transport::ChunkSink for Sink<'_> {
    fn put(&mut self, data: &[u8]) {
        self.0.put(data)
    }

    fn read_from(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<usize> {
        self.0.read_from(fd)
    }

    fn crc(&self) -> u32 {
        self.0.crc()
    }

    fn visit(&self, f: &mut dyn FnMut(&[u8])) {
        self.0.visit(f)
    }
}
