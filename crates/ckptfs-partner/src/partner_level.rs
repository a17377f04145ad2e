//! A partner's memory as a level ([`ckptfs_level::Level`]): this node's files as held
//! by one peer daemon under its `/.ckptfs/partners/<this node>/`, reached over the
//! authenticated peer protocol ([`crate::peer`]).
//!
//! - `list` = `List{after}` pages (each entry with the copy's size, mtime and whole-file
//!   CRC32C, which the holder combines from its chunk records without reading data), so
//!   [`ckptfs_level::Version::same_content`] works across nodes; the pages are bounded
//!   ([`ListBounds`]: entries, bytes, pages, paths in order), so a holder that always
//!   answers "more follow" is refused, not kept in memory; `stat` answers from the
//!   last listing, kept up to date by this level's own puts and deletes (only this node
//!   writes its partner namespace on that peer: the source of a copy is always the
//!   authenticated id);
//! - `get` = `Get{path}`: the holder streams the copy straight from its store (`writev` /
//!   `sendfile`, `ckptfs_node::source`); the reader checks every chunk's CRC32C as it comes
//!   off the socket (a damaged copy fails with [`LevelError::Corrupt`], EIO) and
//!   `finish` checks the end of the copy and the whole-file CRC against the listing;
//! - `put` = `PutBegin` (acknowledged: the partner has room, else its errno, e.g.
//!   ENOSPC), one `Chunk` per write with its CRC32C, `PutEnd` + Ack on `commit`; a write
//!   of at most 1 MiB goes out as the pieces it is made of (the store's shared ranges
//!   handed to `writev`, `parts_send.rs`: the zero-copy send of the node daemon's
//!   partner copies, with the CRC32C the source recorded for a whole chunk), a larger one
//!   is copied and cut into pieces of 1 MiB; a writer dropped uncommitted drops the
//!   connection, and the partner removes its `incoming` file (nothing is listed);
//! - `delete` = `Delete{path}` after a fresh listing showed the copy still has the
//!   content given; `verify` = a `get` read to the end.
//!
//! The trait is synchronous, and so is the level: it speaks over the blocking peer
//! connection ([`crate::peer::blocking`], a `std::net::TcpStream` of the calling
//! thread; no runtime, so the C library links no tokio). The node daemon calls it from
//! its blocking threads (`spawn_blocking`: the partner copies, restores), never from an
//! async task. One request at a time per level (a mutex over its one connection); a
//! reader or writer holds the connection until it is finished or dropped. A connection
//! that fell out of step (an error in the middle of a copy) is dropped and the next call
//! reconnects.

use crate::copies::{check_rel_path, HeldFile};
use crate::error::NodeError;
pub use crate::list_bounds::ListBounds;
use crate::list_bounds::PageCheck;
use crate::peer::blocking::{request, Conn};
use crate::peer::Msg;
use ckptfs_cluster::{Cluster, NodeKeys};
use ckptfs_level::crc::crc_combine;
use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, IoPart, Level, LevelError, LevelKind, Stored, Version,
};
use ckptfs_store::checksum::crc32c;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Largest chunk a writer sends (the wire allows more; 1 MiB keeps the receiver's
/// landing small and matches the default store chunk).
pub const PIECE_MAX: usize = 1 << 20;

/// Mode of a restored file (partner copies are held 0600; the source's bits do not
/// travel, as before the level existed).
const RESTORED_MODE: u32 = 0o644;

/// Connection slot of a level: None when not connected (or dropped after an error).
type Slot = Option<Conn>;

/// One peer's memory as a level for this node's files.
pub struct PartnerLevel {
    me: String,
    peer: String,
    addr: String,
    cluster: Cluster,
    keys: NodeKeys,
    conn: Mutex<Slot>,
    known: Mutex<Option<BTreeMap<String, Stored>>>,
    connect_timeout: Duration,
    bounds: ListBounds,
    meter: CostMeter,
}

impl std::fmt::Debug for PartnerLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartnerLevel")
            .field("me", &self.me)
            .field("peer", &self.peer)
            .field("addr", &self.addr)
            .finish()
    }
}

fn backend(e: NodeError) -> LevelError {
    LevelError::backend(e.errno(), e)
}

fn under(path: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || path == p || path.starts_with(&format!("{p}/"))
}

fn stored_of(f: &HeldFile) -> Stored {
    Stored {
        path: f.path.clone(),
        version: Version {
            ino: 0,
            generation: 0,
            size: f.size,
            mtime_ns: f.mtime_ns,
            crc32c: f.crc32c,
            serial: f.generation,
        },
        mode: RESTORED_MODE,
        // Not in the listing: a reader's copy has the holder's chunk size.
        chunk_size: 0,
        chunk_crc32c: Vec::new(),
    }
}

impl PartnerLevel {
    /// The copies node `me` of `cluster` keeps on node `peer` (connects on first use).
    pub fn new(cluster: &Cluster, me: &str, peer: &str) -> Result<PartnerLevel, LevelError> {
        let keys = cluster
            .node_keys(me)
            .map_err(|e| backend(NodeError::Cluster(e.to_string())))?;
        let addr = cluster
            .node(peer)
            .map_err(|e| backend(NodeError::Cluster(e.to_string())))?
            .addr
            .clone();
        cluster
            .node(me)
            .map_err(|e| backend(NodeError::Cluster(e.to_string())))?;
        Ok(PartnerLevel {
            me: me.to_string(),
            peer: peer.to_string(),
            addr,
            cluster: cluster.clone(),
            keys,
            conn: Mutex::new(None),
            known: Mutex::new(None),
            connect_timeout: Duration::from_secs(15),
            bounds: ListBounds::DEFAULT,
            meter: CostMeter::new(),
        })
    }

    /// How long a connection attempt may take (default 15 s).
    pub fn with_connect_timeout(mut self, t: Duration) -> PartnerLevel {
        self.connect_timeout = t;
        self
    }

    /// The most a listing of the holder may announce (default [`ListBounds::DEFAULT`];
    /// a restore gives [`ListBounds::for_store`] of the store it fills).
    pub fn with_list_bounds(mut self, b: ListBounds) -> PartnerLevel {
        self.bounds = b;
        self
    }

    /// The node holding the copies.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Connect now (an unreachable peer fails here instead of at the first request).
    pub fn connect(&self) -> Result<(), LevelError> {
        self.slot().map(drop)
    }

    /// The connection, connecting if needed.
    fn slot(&self) -> Result<MutexGuard<'_, Slot>, LevelError> {
        let mut g = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            let c = Conn::connect(
                &self.addr,
                &self.me,
                &self.peer,
                &self.keys,
                &self.cluster,
                self.connect_timeout,
            );
            *g = Some(c.map_err(backend)?);
        }
        Ok(g)
    }

    /// Run one exchange on the connection; on an error other than a refusal (after which
    /// the peer is still in step) the connection is dropped.
    fn exchange<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T, NodeError>) -> Result<T, LevelError> {
        let mut g = self.slot()?;
        let c = g.as_mut().expect("connected");
        let r = f(c);
        if let Err(e) = &r {
            if !matches!(e, NodeError::Refused { .. }) {
                *g = None;
            }
        }
        r.map_err(backend)
    }

    /// Every copy the peer holds for this node, by path (a fresh listing; remembered for
    /// `stat`). The holder's answer is bounded ([`ListBounds`]): a listing past a bound
    /// is refused whole (EOVERFLOW or EPROTO, the holder and the bound named) and the
    /// connection dropped.
    fn listing(&self) -> Result<BTreeMap<String, Stored>, LevelError> {
        let bounds = self.bounds;
        let files = self.exchange(move |c| {
            let mut pages = PageCheck::new(c.peer(), bounds);
            loop {
                c.send(Msg::List {
                    after: pages.after().to_string(),
                })?;
                match c.recv()? {
                    Some(Msg::Listing { files, more }) => {
                        if pages.take(files, more)? {
                            return Ok(pages.into_files());
                        }
                    }
                    Some(other) => {
                        return Err(NodeError::Protocol {
                            peer: c.peer().to_string(),
                            what: format!("expected a listing, got {}", other.name()),
                        })
                    }
                    None => {
                        return Err(NodeError::Transport(format!(
                            "{} closed the connection",
                            c.peer()
                        )))
                    }
                }
            }
        })?;
        // A path that would leave the store's application namespace is never offered.
        let map: BTreeMap<String, Stored> = files
            .iter()
            .filter(|f| check_rel_path(&f.path).is_ok_and(|p| p == f.path))
            .map(|f| (f.path.clone(), stored_of(f)))
            .collect();
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Some(map.clone());
        Ok(map)
    }

    fn remember(&self, path: &str, s: Option<Stored>) {
        if let Some(k) = self.known.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            match s {
                Some(s) => k.insert(path.to_string(), s),
                None => k.remove(path),
            };
        }
    }

    /// `get` as the concrete reader (verify needs its CRC at the end).
    fn reader(&self, path: &str) -> Result<PartnerReader<'_>, LevelError> {
        let listed = self.stat(path)?;
        let mut g = self.slot()?;
        let c = g.as_mut().expect("connected");
        let r = c
            .send(Msg::Get {
                path: path.to_string(),
            })
            .and_then(|()| c.recv());
        let begin = match r {
            Ok(Some(Msg::PutBegin {
                path: got,
                size,
                chunk_size,
                mtime_ns,
                generation,
            })) if got == path && chunk_size > 0 => (size, chunk_size, mtime_ns, generation),
            Ok(Some(Msg::Nack { errno, message })) => {
                // Still in step: the holder answered and sends nothing more.
                return Err(if errno == libc::ENOENT {
                    LevelError::NotFound {
                        level: self.name(),
                        path: path.to_string(),
                    }
                } else {
                    backend(NodeError::Refused {
                        peer: self.peer.clone(),
                        what: message,
                        errno,
                    })
                });
            }
            Ok(other) => {
                *g = None;
                return Err(backend(NodeError::Protocol {
                    peer: self.peer.clone(),
                    what: format!(
                        "expected the copy of {path} with its chunk size, got {}",
                        other
                            .as_ref()
                            .map(|m| m.name())
                            .unwrap_or("the end of the connection")
                    ),
                }));
            }
            Err(e) => {
                *g = None;
                return Err(backend(e));
            }
        };
        let (size, cs, mtime_ns, serial) = begin;
        // The listing's CRC holds only if it describes this copy.
        let crc = listed
            .filter(|s| s.version.size == size)
            .and_then(|s| s.version.crc32c);
        Ok(PartnerReader {
            lvl: self,
            g,
            stored: Stored {
                path: path.to_string(),
                version: Version {
                    ino: 0,
                    generation: 0,
                    size,
                    mtime_ns,
                    crc32c: crc,
                    serial,
                },
                mode: RESTORED_MODE,
                chunk_size: cs as u64,
                chunk_crc32c: Vec::new(),
            },
            buf: Vec::new(),
            next: 0,
            crc: 0,
            done: false,
        })
    }
}

impl Level for PartnerLevel {
    fn kind(&self) -> LevelKind {
        LevelKind::Partner
    }

    fn name(&self) -> String {
        format!("partner:{}", self.peer)
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError> {
        Ok(self
            .listing()?
            .into_values()
            .filter(|s| under(&s.path, prefix))
            .collect())
    }

    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError> {
        let cached = self
            .known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|k| k.get(path).cloned());
        match cached {
            Some(s) => Ok(s),
            None => Ok(self.listing()?.remove(path)),
        }
    }

    fn get<'a>(&'a self, path: &str) -> Result<Box<dyn ChunkReader + 'a>, LevelError> {
        Ok(Box::new(self.reader(path)?))
    }

    fn put<'a>(&'a self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'a>, LevelError> {
        let path = check_rel_path(&src.path)
            .map_err(|what| backend(NodeError::Invalid(format!("{}: {what}", src.path))))?;
        let (size, mtime_ns) = (src.version.size, src.version.mtime_ns);
        let mut g = self.slot()?;
        let c = g.as_mut().expect("connected");
        let begin = Msg::PutBegin {
            path: path.clone(),
            size,
            chunk_size: 0,
            mtime_ns,
            generation: src.version.serial,
        };
        if let Err(e) = request(c, begin) {
            // A refusal (ENOSPC: the partner is full) leaves the connection in step.
            if !matches!(e, NodeError::Refused { .. }) {
                *g = None;
            }
            return Err(backend(e));
        }
        // The copy is being replaced: not listed as held until committed.
        self.remember(&path, None);
        Ok(Box::new(PartnerWriter {
            lvl: self,
            g,
            path,
            size,
            mtime_ns,
            want_crc: src.version.crc32c,
            src: src.clone(),
            sent: 0,
            crc: 0,
            buf: Vec::new(),
            done: false,
        }))
    }

    fn verify(&self, path: &str, want: &Version) -> Result<Stored, LevelError> {
        let mut r = self.reader(path)?;
        for i in 0..r.stored.chunks() {
            r.read_chunk(i, &mut |_| Ok(()))?;
        }
        let mut stored = r.stored.clone();
        stored.version.crc32c = Some(r.end()?);
        if !stored.version.same_content(want) {
            return Err(LevelError::Changed(path.to_string()));
        }
        Ok(stored)
    }

    fn delete(&self, path: &str, want: &Version) -> Result<bool, LevelError> {
        match self.listing()?.get(path) {
            Some(s) if s.version.same_content(want) => {}
            _ => return Ok(false),
        }
        self.exchange(|c| {
            request(
                c,
                Msg::Delete {
                    path: path.to_string(),
                    generation: u64::MAX,
                },
            )
        })?;
        self.remember(path, None);
        Ok(true)
    }

    fn meter(&self) -> &CostMeter {
        &self.meter
    }
}

/// A copy coming back from the peer (a Get's answer), chunk by chunk.
struct PartnerReader<'a> {
    lvl: &'a PartnerLevel,
    g: MutexGuard<'a, Slot>,
    stored: Stored,
    buf: Vec<u8>,
    /// Offset of the next byte.
    next: u64,
    /// CRC32C of the bytes so far.
    crc: u32,
    /// The whole answer was read (the connection is in step).
    done: bool,
}

impl PartnerReader<'_> {
    fn protocol(&self, what: String) -> LevelError {
        backend(NodeError::Protocol {
            peer: self.lvl.peer.clone(),
            what,
        })
    }

    /// The Chunk message of chunk `i` (its CRC32C and length), checked to be the one
    /// expected next; None past the end of the copy.
    fn chunk_header(&mut self, i: u64) -> Result<Option<(u32, u32)>, LevelError> {
        let (size, cs) = (self.stored.version.size, self.stored.chunk_size);
        if i * cs >= size {
            return Ok(None);
        }
        let want = (size - i * cs).min(cs);
        let c = self.g.as_mut().expect("connected while reading");
        let (offset, crc, len) = match c.recv() {
            Ok(Some(Msg::Chunk { offset, crc, len })) => (offset, crc, len),
            Ok(other) => {
                let got = other
                    .as_ref()
                    .map(|m| m.name())
                    .unwrap_or("the end of the connection");
                return Err(self.protocol(format!("expected chunk {i} of {}, got {got}", self.stored.path)));
            }
            Err(e) => return Err(backend(e)),
        };
        if offset != i * cs || offset != self.next || len as u64 != want {
            return Err(self.protocol(format!(
                "chunk at {offset} (+{len}) of {}, expected chunk {i} at {} (+{want})",
                self.stored.path, self.next
            )));
        }
        Ok(Some((crc, len)))
    }

    /// The data of chunk `i` (announced with `crc`, `len`) into the reader's buffer.
    fn chunk_to_buf(&mut self, i: u64, crc: u32, len: u32) -> Result<(), LevelError> {
        self.buf.resize(len as usize, 0);
        let c = self.g.as_mut().expect("connected while reading");
        match c.chunk_data(&mut self.buf) {
            Ok(true) => {}
            // The holder's bytes do not match the CRC it recorded when it received the
            // copy (or they were damaged on the wire): never handed on.
            Ok(false) => return Err(self.corrupt(i)),
            Err(e) => return Err(backend(e)),
        }
        self.took(crc, len);
        Ok(())
    }

    fn corrupt(&self, i: u64) -> LevelError {
        LevelError::Corrupt {
            level: self.lvl.name(),
            path: self.stored.path.clone(),
            chunk: i,
        }
    }

    /// A chunk of `len` bytes with CRC32C `crc` was read whole and good.
    fn took(&mut self, crc: u32, len: u32) {
        self.crc = crc_combine(self.crc, crc, len as u64);
        self.next += len as u64;
    }

    /// After the last chunk: the end of the copy; returns the whole-file CRC32C.
    fn end(&mut self) -> Result<u32, LevelError> {
        let size = self.stored.version.size;
        if self.next != size {
            return Err(self.protocol(format!("end of the copy read at {} of {size} bytes", self.next)));
        }
        let c = self.g.as_mut().expect("connected while reading");
        match c.recv() {
            Ok(Some(Msg::PutEnd)) => self.done = true,
            Ok(other) => {
                let got = other
                    .as_ref()
                    .map(|m| m.name())
                    .unwrap_or("the end of the connection");
                return Err(self.protocol(format!("expected the end of the copy, got {got}")));
            }
            Err(e) => return Err(backend(e)),
        }
        match self.stored.version.crc32c {
            // Every chunk matched its CRC but the whole is not what was listed: the copy
            // was replaced between the listing and the read.
            Some(listed) if listed != self.crc => Err(LevelError::Changed(self.stored.path.clone())),
            _ => Ok(self.crc),
        }
    }
}

impl ChunkReader for PartnerReader<'_> {
    fn stored(&self) -> &Stored {
        &self.stored
    }

    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let Some((crc, len)) = self.chunk_header(i)? else {
            return Ok(());
        };
        self.chunk_to_buf(i, crc, len)?;
        sink(&[IoPart::Buf(&self.buf)])
    }

    fn read_chunk_to(&mut self, i: u64, off: u64, writer: &mut dyn ChunkWriter) -> Result<(), LevelError> {
        let Some((crc, len)) = self.chunk_header(i)? else {
            return Ok(());
        };
        // Straight from the socket into the writer's memory (a store: the file's own
        // chunks), the CRC32C taken as the bytes land; no buffer in between.
        let g = &mut self.g;
        let landed = writer.land(off, len as usize, &mut |l| {
            let c = g.as_mut().expect("connected while reading");
            c.chunk_into(&mut crate::copies::Sink(l)).map_err(backend)
        });
        match landed {
            None => {
                self.chunk_to_buf(i, crc, len)?;
                return writer.write_at(&[IoPart::Buf(&self.buf)], off);
            }
            Some(Ok(true)) => {}
            // Landed but not matching the CRC the holder recorded: never kept.
            Some(Ok(false)) => return Err(self.corrupt(i)),
            Some(Err(e)) => return Err(e),
        }
        self.took(crc, len);
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<(), LevelError> {
        self.end().map(drop)
    }
}

impl Drop for PartnerReader<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Chunks still in flight: the connection is out of step.
            *self.g = None;
        }
    }
}

/// A copy going to the peer.
struct PartnerWriter<'a> {
    lvl: &'a PartnerLevel,
    g: MutexGuard<'a, Slot>,
    path: String,
    size: u64,
    mtime_ns: u64,
    want_crc: Option<u32>,
    /// The source's copy (its chunk size and chunk CRC32Cs).
    src: Stored,
    /// Bytes sent so far (pieces arrive in order).
    sent: u64,
    /// CRC32C of the bytes sent.
    crc: u32,
    buf: Vec<u8>,
    done: bool,
}

impl PartnerWriter<'_> {
    fn flush(&mut self) -> Result<(), LevelError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let c = self.g.as_mut().expect("connected while writing");
        let crc = crc32c(&self.buf);
        c.send_chunk_buf(self.sent, crc, &self.buf).map_err(backend)?;
        self.crc = crc_combine(self.crc, crc, self.buf.len() as u64);
        self.sent += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

impl ChunkWriter for PartnerWriter<'_> {
    fn write_at(&mut self, parts: &[IoPart<'_>], off: u64) -> Result<(), LevelError> {
        if off != self.sent + self.buf.len() as u64 {
            return Err(backend(NodeError::Invalid(format!(
                "{}: the partner level takes bytes in order (at {off}, expected {})",
                self.path,
                self.sent + self.buf.len() as u64
            ))));
        }
        let total: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if off + total > self.size {
            return Err(backend(NodeError::Invalid(format!(
                "{}: {} bytes past the announced size {}",
                self.path,
                off + total - self.size,
                self.size
            ))));
        }
        if self.buf.is_empty() && total > 0 && total <= PIECE_MAX as u64 {
            // Zero copy: the pieces (the store's shared ranges) go to the socket as they
            // are, with the CRC32C the source recorded for them.
            let crc = crate::parts_send::crc_of(&self.src, off, total, parts);
            let c = self.g.as_mut().expect("connected while writing");
            c.send_chunk(off, crc, &crate::parts_send::Parts(parts))
                .map_err(backend)?;
            self.crc = crc_combine(self.crc, crc, total);
            self.sent += total;
            return Ok(());
        }
        for p in parts {
            // Region bytes are copied out through the store's region_io (never borrowed
            // as a slice), then sent with their CRC32C.
            p.extend_vec(&mut self.buf);
            while self.buf.len() >= PIECE_MAX {
                let rest = self.buf.split_off(PIECE_MAX);
                self.flush()?;
                self.buf = rest;
            }
        }
        self.flush()
    }

    fn commit(mut self: Box<Self>) -> Result<Stored, LevelError> {
        self.flush()?;
        if self.sent != self.size {
            return Err(backend(NodeError::Invalid(format!(
                "{}: {} of {} bytes written",
                self.path, self.sent, self.size
            ))));
        }
        if self.want_crc.is_some_and(|w| w != self.crc) {
            return Err(LevelError::Changed(self.path.clone()));
        }
        let c = self.g.as_mut().expect("connected while writing");
        let r = c.send(Msg::PutEnd).and_then(|()| c.recv());
        let peer = self.lvl.peer.clone();
        match r {
            Ok(Some(Msg::Ack)) => self.done = true,
            // Refused before or at the end (ENOSPC, a store error): the partner dropped
            // the copy and is in step.
            Ok(Some(Msg::Nack { errno, message })) => {
                self.done = true;
                return Err(backend(NodeError::Refused {
                    peer,
                    what: message,
                    errno,
                }));
            }
            // A piece failed its CRC on arrival: the bytes are gone from here, so the copy
            // fails (EIO) and the mover redoes it; the connection is dropped.
            Ok(Some(Msg::Resend { offset })) => {
                return Err(backend(NodeError::BadChunk {
                    peer,
                    path: self.path.clone(),
                    offset,
                }))
            }
            Ok(other) => {
                let got = other
                    .as_ref()
                    .map(|m| m.name())
                    .unwrap_or("the end of the connection");
                return Err(backend(NodeError::Protocol {
                    peer,
                    what: format!("expected the copy acknowledged, got {got}"),
                }));
            }
            Err(e) => return Err(backend(e)),
        }
        let stored = Stored {
            path: self.path.clone(),
            version: Version {
                ino: 0,
                generation: 0,
                size: self.size,
                mtime_ns: self.mtime_ns,
                crc32c: Some(self.crc),
                serial: 0,
            },
            mode: RESTORED_MODE,
            chunk_size: 0,
            chunk_crc32c: Vec::new(),
        };
        self.lvl.remember(&self.path, Some(stored.clone()));
        Ok(stored)
    }
}

impl Drop for PartnerWriter<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Uncommitted: dropping the connection makes the partner remove its
            // `incoming` file; nothing is listed.
            *self.g = None;
        }
    }
}
