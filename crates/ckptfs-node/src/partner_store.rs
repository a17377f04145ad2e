//! Partner copies held by this node: other nodes' files in this node's own store, in
//! the system namespace the applications do not see.
//!
//! ```text
//! /.ckptfs/partners/<source node>/<source path>   complete, verified copies (listed)
//! /.ckptfs/incoming/<source node>.<n>.<pid>       copies being received (never listed)
//! ```
//!
//! A copy is received into `incoming` chunk by chunk, each chunk's CRC32C checked
//! before its bytes are written, strictly in order (a chunk that fails is refused with a
//! Resend; what follows it is dropped until it is sent again), and renamed into
//! `partners` only when every byte up to the announced size has arrived and the store
//! recorded for every chunk the CRC32C the sender announced. A
//! receiver killed in the middle leaves only an `incoming` file, removed by the next
//! daemon at start ([`clear_incoming`]).

pub use ckptfs_partner::copies::{
    check_node_id, check_rel_path, copy_path, files_under, generation_of, list, sources, HeldFile, Sink,
    GENERATION_XATTR, INCOMING_DIR, PARTNERS_DIR,
};
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::checksum::crc32c_append_zeros;
use ckptfs_store::netin::Landing;
use ckptfs_store::{FileHandle, OpenFlags, Store, StoreError, WriteState};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The partner quota: most bytes of other nodes' copies this node holds. A copy
/// counts from the moment it begins (its announced size is reserved at once, under one
/// lock, so concurrent copies cannot pass the limit together) until it is dropped; its
/// memory is taken only as its bytes arrive.
#[derive(Clone, Debug)]
pub struct Quota {
    limit: u64,
    reserved: std::sync::Arc<std::sync::Mutex<u64>>,
}

/// Bytes of a copy being received, counted against the [`Quota`] until dropped.
#[derive(Debug)]
pub struct Reservation {
    quota: Quota,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut r = self.quota.reserved.lock().unwrap_or_else(|e| e.into_inner());
        *r = r.saturating_sub(self.bytes);
    }
}

impl Quota {
    /// At most `limit` bytes of other nodes' copies.
    pub fn new(limit: u64) -> Quota {
        Quota {
            limit,
            reserved: Default::default(),
        }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes reserved by copies being received now.
    pub fn reserved(&self) -> u64 {
        *self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserve `size` bytes for a copy of `src`'s `path` (ENOSPC past the limit, or
    /// when the store has not that much free memory and spill left, counting the copy
    /// this one replaces as free): the limit bounds what complete copies hold (less the
    /// copy this one replaces) plus what copies in flight reserved.
    pub fn reserve(&self, store: &Store, src: &str, path: &str, size: u64) -> Result<Reservation> {
        let mut r = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        let replaced = store
            .stat(&copy_path(src, path))
            .map(|st| st.allocated)
            .unwrap_or(0);
        let held = files_under(store, PARTNERS_DIR)
            .iter()
            .map(|(_, st)| st.allocated)
            .sum::<u64>()
            .saturating_sub(replaced);
        let info = store.info();
        let free = (info.mem_free_chunks as u64 + info.spill_free_chunks as u64) * store.chunk_size();
        let want = held.saturating_add(*r).saturating_add(size);
        // The free memory check is rough (copies in flight have taken part of theirs
        // already): the quota is what bounds them.
        if want > self.limit || size > free.saturating_add(replaced) {
            return Err(NodeError::store(
                format!(
                    "partner copy of {path} from {src} ({size} bytes): {held} bytes held and {} reserved \
                     for other nodes, limit {}, {free} bytes free",
                    *r, self.limit
                ),
                StoreError::NoSpace,
            ));
        }
        *r += size;
        Ok(Reservation {
            quota: self.clone(),
            bytes: size,
        })
    }
}

/// Bytes held in complete partner copies and copies being received.
pub fn held_bytes(store: &Store) -> u64 {
    [PARTNERS_DIR, INCOMING_DIR]
        .into_iter()
        .flat_map(|d| files_under(store, d))
        .map(|(_, st)| st.allocated)
        .sum()
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

/// Drop the partner copy of `path` from `src` if its copy generation is `generation` or
/// older (a Delete of an older version never removes a newer copy made since under the
/// same name). A missing or newer copy is not an error.
pub fn remove_up_to(store: &Store, src: &str, path: &str, generation: u64) -> Result<()> {
    let p = copy_path(src, path);
    if generation != u64::MAX && generation_of(store, &p) > generation {
        return Ok(());
    }
    remove(store, src, path)
}

/// Open the complete partner copy of `path` from `src` for reading (a restore).
pub fn open_copy(store: &Store, src: &str, path: &str) -> Result<FileHandle> {
    let p = copy_path(src, path);
    store
        .open(&p, OpenFlags::READ, 0)
        .map_err(|e| NodeError::store(format!("open partner copy {p}"), e))
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Where a copy being received stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InState {
    /// Taking chunks in order.
    Receiving,
    /// The chunk at this offset failed its CRC: chunks until it comes again are dropped
    /// unread, and so is an end of copy (the sender answers the Resend by sending again
    /// from there).
    WaitResend(u64),
    /// Refused (an errno was sent back): everything until the end of the copy is dropped.
    Failed,
}

/// What to do with an arriving chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Land it ([`Incoming::land`]) and publish it ([`Incoming::commit`]).
    Store,
    /// Read and drop it.
    Skip,
}

/// A partner copy being received.
pub struct Incoming {
    store: Store,
    tmp: String,
    dest: String,
    file: Option<FileHandle>,
    size: u64,
    /// The source file's modification time: the copy keeps it (a restore then gives
    /// back the file's own mtime, which readers use to order checkpoints).
    mtime_ns: u64,
    received: u64,
    peer: String,
    path: String,
    state: InState,
    /// Offset, length and CRC32C of every stored wire chunk (checked against the
    /// store's own chunk records at the end).
    wire: Vec<(u64, usize, u32)>,
    /// The copy's bytes counted against the partner quota while it is received.
    _quota: Reservation,
    /// The copy generation the source gave this version (kept as an xattr).
    generation: u64,
}

impl Incoming {
    /// Start receiving `path` (already checked) of `size` bytes from node `src`, whose
    /// modification time there is `mtime_ns` (0: unknown, the copy keeps its own).
    /// `quota`: most bytes of partner copies this node holds (ENOSPC past it), the
    /// size reserved now.
    pub fn begin(
        store: &Store,
        src: &str,
        path: &str,
        size: u64,
        mtime_ns: u64,
        quota: &Quota,
    ) -> Result<Incoming> {
        let reservation = quota.reserve(store, src, path, size)?;
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
            mtime_ns,
            received: 0,
            peer: src.to_string(),
            path: path.to_string(),
            state: InState::Receiving,
            wire: Vec::new(),
            _quota: reservation,
            generation: 0,
        })
    }

    /// The copy generation the source gave this version (kept with the copy).
    pub fn with_generation(mut self, g: u64) -> Incoming {
        self.generation = g;
        self
    }

    /// The path being received (on the source node).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Bytes received and stored so far (the offset the next chunk must have).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Where the copy stands.
    pub fn state(&self) -> InState {
        self.state
    }

    /// A chunk of `len` bytes at `offset` arrives: store it, drop it (after a refused
    /// chunk, until it is sent again; after a failure), or a protocol error (out of
    /// order, past the announced size).
    pub fn accept(&mut self, offset: u64, len: u32) -> Result<Take> {
        match self.state {
            InState::Failed => return Ok(Take::Skip),
            InState::WaitResend(at) if offset != at => return Ok(Take::Skip),
            InState::WaitResend(_) => self.state = InState::Receiving,
            InState::Receiving => {}
        }
        if offset != self.received || offset.saturating_add(len as u64) > self.size {
            return Err(NodeError::Protocol {
                peer: self.peer.clone(),
                what: format!(
                    "chunk at {offset} (+{len}) out of order or past the size {} (expected offset {})",
                    self.size, self.received
                ),
            });
        }
        Ok(Take::Store)
    }

    /// The place in the copy's chunks where the accepted chunk's `len` bytes land
    /// straight from the socket (nothing is published before [`Incoming::commit`]).
    pub fn land(&mut self, offset: u64, len: u32) -> Result<Landing> {
        let f = self.file.as_ref().expect("file open until finish");
        Landing::begin(f, offset, len as usize)
            .map_err(|e| NodeError::store(format!("receive into {}", self.tmp), e))
    }

    /// Publish a landed chunk (its CRC32C `crc` checked on arrival).
    pub fn commit(&mut self, landing: Landing, crc: u32) -> Result<()> {
        let (offset, len) = (self.received, landing.len());
        let f = self.file.as_mut().expect("file open until finish");
        landing
            .commit(f)
            .map_err(|e| NodeError::store(format!("write {}", self.tmp), e))?;
        self.wire.push((offset, len, crc));
        self.received += len as u64;
        Ok(())
    }

    /// The landed chunk did not match its CRC: nothing of it is published; wait for it
    /// to be sent again.
    pub fn refused(&mut self, offset: u64) {
        self.state = InState::WaitResend(offset);
    }

    /// Give up on this copy (an errno was sent back): drop what follows.
    pub fn fail(&mut self) {
        self.state = InState::Failed;
    }

    /// All bytes arrived: close, check that the store recorded for every chunk the
    /// CRC32C the sender announced (or verify every chunk when the two stores' chunk
    /// sizes differ), and rename into place (replacing an older copy).
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
        let st = self
            .store
            .stat(&self.tmp)
            .map_err(|e| NodeError::store(format!("stat {}", self.tmp), e))?;
        if st.size != self.size || st.state != WriteState::Complete {
            return Err(NodeError::Protocol {
                peer: self.peer.clone(),
                what: format!("{} has {} bytes, {} announced", self.path, st.size, self.size),
            });
        }
        self.verify()?;
        if self.generation > 0 {
            self.store
                .setxattr(
                    &self.tmp,
                    GENERATION_XATTR,
                    &self.generation.to_le_bytes(),
                    ckptfs_store::XattrFlags::default(),
                )
                .map_err(|e| NodeError::store(format!("keep the generation of {}", self.tmp), e))?;
        }
        if self.mtime_ns > 0 {
            self.store
                .set_times(&self.tmp, self.mtime_ns, self.mtime_ns)
                .map_err(|e| NodeError::store(format!("set the times of {}", self.tmp), e))?;
        }
        mkdir_p(&self.store, parent(&self.dest))?;
        self.store
            .rename(&self.tmp, &self.dest)
            .map_err(|e| NodeError::store(format!("rename {} to {}", self.tmp, self.dest), e))?;
        self.tmp.clear();
        Ok(())
    }

    /// The store's chunk records against the CRCs that arrived: a metadata check when
    /// every wire chunk is one store chunk here (the same chunk size on both nodes),
    /// else a pass over the data.
    fn verify(&self) -> Result<()> {
        let cs = self.store.chunk_size();
        let aligned = self
            .wire
            .iter()
            .all(|&(off, len, _)| off % cs == 0 && len as u64 == (self.size - off).min(cs));
        let list = self
            .store
            .chunk_list(&self.tmp)
            .map_err(|e| NodeError::store(format!("chunk list of {}", self.tmp), e))?;
        if aligned {
            let mut recorded = BTreeMap::new();
            for c in &list {
                if let Some(crc) = c.crc.filter(|_| c.written <= c.len) {
                    recorded.insert(
                        c.logical as u64 * cs,
                        crc32c_append_zeros(crc, (c.len - c.written) as usize),
                    );
                }
            }
            for &(off, len, crc) in &self.wire {
                let here = recorded
                    .get(&off)
                    .copied()
                    .unwrap_or_else(|| crc32c_append_zeros(0, len));
                if here != crc {
                    return Err(NodeError::store(
                        format!("verify {}: the chunk at {off} is not what arrived", self.tmp),
                        StoreError::Corrupt {
                            path: self.tmp.clone(),
                            logical: (off / cs) as u32,
                            stored: here,
                            computed: crc,
                        },
                    ));
                }
            }
            return Ok(());
        }
        let mut r = self
            .store
            .open(&self.tmp, OpenFlags::READ, 0)
            .map_err(|e| NodeError::store(format!("reopen {}", self.tmp), e))?;
        r.verify_all()
            .map_err(|e| NodeError::store(format!("verify {}", self.tmp), e))
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
    use ckptfs_store::FileKind;

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

    /// The directory walk finds what the whole-store listing finds: complete copies of
    /// one source at any depth for `list`, and every copy and incoming file (not the
    /// applications' files) for `held_bytes`.
    #[test]
    fn list_and_held_bytes_walk_the_partner_namespace_only() {
        /// Destroys the store when the test ends, failed or not.
        struct Gone(String);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = Store::destroy(&self.0);
            }
        }
        let name = format!("hn-pstore-walk-{}", std::process::id());
        let _gone = Gone(name.clone());
        let mut o = ckptfs_store::StoreOptions::named(&name);
        o.mem_size = Some(16 << 20);
        o.chunk_size = Some(64 << 10);
        let store = Store::create(&o).unwrap();
        let put = |p: &str, n: usize, close: bool| {
            let (dir, _) = p.rsplit_once('/').unwrap();
            let mut at = String::new();
            for c in dir.split('/').filter(|c| !c.is_empty()) {
                at = format!("{at}/{c}");
                let _ = store.mkdir(&at, 0o755);
            }
            let mut f = store.open(p, OpenFlags::CREATE, 0o644).unwrap();
            f.write_all(&vec![7u8; n]).unwrap();
            if close {
                f.close().unwrap();
                None
            } else {
                Some(f)
            }
        };
        put(&format!("{PARTNERS_DIR}/node1/ckpt/a/b/deep.dat"), 100_000, true);
        put(&format!("{PARTNERS_DIR}/node1/top.dat"), 5, true);
        let _open = put(&format!("{PARTNERS_DIR}/node1/ckpt/open.dat"), 70_000, false);
        put(&format!("{PARTNERS_DIR}/node2/other.dat"), 3000, true);
        put(&format!("{INCOMING_DIR}/node1.1.99"), 65_536, true);
        put("/ckpt/app.dat", 200_000, true);
        let paths: Vec<String> = list(&store, "node1").into_iter().map(|h| h.path).collect();
        assert_eq!(paths, ["/ckpt/a/b/deep.dat", "/top.dat"]);
        assert!(list(&store, "node3").is_empty());
        let want: u64 = store
            .list_all_system()
            .into_iter()
            .filter(|(p, st)| {
                st.kind == FileKind::File
                    && (p.starts_with(&format!("{PARTNERS_DIR}/"))
                        || p.starts_with(&format!("{INCOMING_DIR}/")))
            })
            .map(|(_, st)| st.allocated)
            .sum();
        assert_eq!(held_bytes(&store), want);
        // At least deep.dat's, open.dat's and the incoming file's bytes; not app.dat's.
        assert!(want >= 100_000 + 70_000 + 65_536, "{want}");
        assert!(want < 100_000 + 70_000 + 65_536 + 200_000, "{want}");
        drop(_open);
        drop(store);
    }
}
