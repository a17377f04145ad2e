//! A peer connection between node daemons (and their clients): the few requests the
//! node protocol uses, on top of the authenticated transport ([`ckptfs_transport`]). Store paths are absolute
//! here (`/ckpt/a`) and relative on the wire (`ckpt/a`, checked by the transport's
//! decoder); the source node of a copy is always this side's authenticated id.
//!
//! The messages and their translation to and from the transport's frames are written
//! once (this module); two connections carry them with the same bytes on the wire:
//!
//! - [`blocking::Conn`]: the client's, on the transport's blocking connection (a
//!   `std::net::TcpStream`, no runtime): [`crate::PartnerLevel`], [`crate::ClusterNodes`]
//!   and the erasure rebuild client, so the C library, Python and the CLI's dataset
//!   commands link no tokio;
//! - `Conn` (feature `tokio`, which only the node daemon enables): the daemon's, on the
//!   transport's tokio connection (its server side, heartbeats, the erasure encodings).

use crate::copies::HeldFile;
use crate::error::{NodeError, Result};
use ckptfs_cluster::{Cluster, NodeKeys};
use ckptfs_transport::{self as tp, ChunkHeader, ConnConfig, Identity, Protection, TransportError};
use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

pub mod blocking;
#[cfg(feature = "tokio")]
mod tokio_conn;
#[cfg(feature = "tokio")]
pub use tokio_conn::{request, Conn};

/// A request or answer between node daemons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Liveness (and its answer).
    Heartbeat,
    /// Start of a copy of the sender's file `path` (or of a Get's answer).
    PutBegin {
        /// Absolute store path on the source node.
        path: String,
        /// Size in bytes.
        size: u64,
        /// Chunk size of the sender's store: every Chunk that follows but the last is
        /// this long (0: not said).
        chunk_size: u32,
        /// Modification time of the copy, ns since the epoch (0: not said).
        mtime_ns: u64,
        /// The version's copy generation (the source's count of versions, kept by the
        /// holder and compared across holders at a restore; 0: not said).
        generation: u64,
    },
    /// Bytes of the file at `offset`, with their CRC32C. Received: the data is still
    /// pending on the connection; read it with [`blocking::Conn::chunk_data`] (or drop it with
    /// [`blocking::Conn::skip_chunk`]) before the next message. Sent with [`blocking::Conn::send_chunk`].
    Chunk {
        /// Byte offset.
        offset: u64,
        /// CRC32C the sender announced.
        crc: u32,
        /// Bytes of data.
        len: u32,
    },
    /// End of the copy.
    PutEnd,
    /// Yes.
    Ack,
    /// No, with a POSIX errno.
    Nack {
        /// POSIX errno.
        errno: i32,
        /// Why.
        message: String,
    },
    /// The chunk at `offset` failed its CRC check on arrival: send the copy again from
    /// there (on the wire a Nack with errno EIO and tag = offset + 1).
    Resend {
        /// Byte offset of the refused chunk.
        offset: u64,
    },
    /// Drop the copy of the sender's file `path` if its copy generation is `generation`
    /// or older (a newer version made since under the same name stays).
    Delete {
        /// Absolute store path on the source node.
        path: String,
        /// Newest generation to drop (`u64::MAX`: whatever is held).
        generation: u64,
    },
    /// List the copies held for the sender, paths after `after` ("" from the start).
    List {
        /// Resume after this path.
        after: String,
    },
    /// Answer to List.
    Listing {
        /// Complete copies, in path order.
        files: Vec<HeldFile>,
        /// More follow: ask again after the last one.
        more: bool,
    },
    /// Send back the copy of the sender's file `path` (PutBegin, Chunk..., PutEnd).
    Get {
        /// Absolute store path on the source node.
        path: String,
    },
    /// A dataset question (JSON, [`crate::cluster::Request`]).
    Query(String),
    /// Its answer (JSON, [`crate::cluster::Reply`]).
    QueryReply(String),
    /// An erasure-set request or answer (JSON, `ckptfs_erasure::proto`).
    Erasure(String),
    /// One piece of an erasure segment, sent by this side (received: by the
    /// authenticated peer, any other name refused); its data follows in a Chunk.
    Piece(Piece),
}

/// One piece of an erasure segment (the transport's `SegPiece` without the sender, which
/// is always the connection's own side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Set name.
    pub set: String,
    /// Dataset key.
    pub dataset: String,
    /// Encoding generation.
    pub epoch: u64,
    /// Stripe.
    pub stripe: u32,
    /// Parity row.
    pub row: u16,
    /// What the bytes are.
    pub kind: tp::SegKind,
    /// Offset in the segment.
    pub offset: u64,
    /// Bytes in the Chunk that follows.
    pub len: u32,
    /// The segment's length.
    pub seg_size: u64,
}

/// A [`Piece`] and the transport's `SegPiece` hold the same fields but the sender: moved
/// across, named once for both directions (`$extra`: the target's other fields).
macro_rules! piece_fields {
    ($from:expr, $To:path { $($extra:ident: $val:expr),* }) => {{
        let p = $from;
        $To {
            $($extra: $val,)*
            set: p.set,
            dataset: p.dataset,
            epoch: p.epoch,
            stripe: p.stripe,
            row: p.row,
            kind: p.kind,
            offset: p.offset,
            len: p.len,
            seg_size: p.seg_size,
        }
    }};
}

impl Piece {
    /// The transport's frame of this piece, sent by node `src_node`.
    fn on_wire(self, src_node: String) -> tp::SegPiece {
        piece_fields!(self, tp::SegPiece { src_node: src_node })
    }

    /// A received piece without its sender (checked by the caller).
    fn from_wire(p: tp::SegPiece) -> Piece {
        piece_fields!(p, Piece {})
    }
}

impl Msg {
    /// Name for log lines.
    pub fn name(&self) -> &'static str {
        match self {
            Msg::Heartbeat => "Heartbeat",
            Msg::PutBegin { .. } => "PutBegin",
            Msg::Chunk { .. } => "Chunk",
            Msg::PutEnd => "PutEnd",
            Msg::Ack => "Ack",
            Msg::Nack { .. } => "Nack",
            Msg::Resend { .. } => "Resend",
            Msg::Delete { .. } => "Delete",
            Msg::List { .. } => "List",
            Msg::Listing { .. } => "Listing",
            Msg::Get { .. } => "Get",
            Msg::Query(_) => "Query",
            Msg::QueryReply(_) => "QueryReply",
            Msg::Erasure(_) => "Erasure",
            Msg::Piece(_) => "SegPiece",
        }
    }
}

fn terr(peer: &str, e: TransportError) -> NodeError {
    match e {
        TransportError::Frame(f) => NodeError::Protocol {
            peer: peer.to_string(),
            what: f.to_string(),
        },
        TransportError::Peer { errno, reason } => NodeError::Refused {
            peer: peer.to_string(),
            what: reason,
            errno,
        },
        e => NodeError::Transport(format!("{peer}: {e}")),
    }
}

/// The error of a connection to node `peer` at `addr` that failed (as the connections
/// report it).
pub(crate) fn dial_error(peer: &str, addr: &str, e: TransportError) -> NodeError {
    terr(&format!("{peer} ({addr})"), e)
}

fn wire(path: &str) -> String {
    path.trim_start_matches('/').to_string()
}

fn store_path(path: &str) -> String {
    format!("/{path}")
}

/// Where node `node` of `cluster` listens, and the credentials node `me` dials it with.
pub fn dial_target(cluster: &Cluster, me: &str, node: &str) -> Result<(String, NodeKeys)> {
    let addr = cluster
        .node(node)
        .map_err(|e| NodeError::Cluster(e.to_string()))?
        .addr
        .clone();
    let keys = cluster
        .node_keys(me)
        .map_err(|e| NodeError::Cluster(e.to_string()))?;
    Ok((addr, keys))
}

/// Node `me` of `cluster` as it introduces itself on a connection.
fn identity(me: &str, cluster: &Cluster) -> Identity {
    Identity {
        node_id: me.to_string(),
        job: cluster.job.clone(),
    }
}

/// Connection settings for a daemon of `cluster`: only its nodes are accepted, frames
/// protected as the map says (`encrypt`).
pub fn conn_config(cluster: &Cluster) -> ConnConfig {
    ConnConfig {
        protection: if cluster.encrypt {
            Protection::Encrypted
        } else {
            Protection::Integrity
        },
        allowed_peers: Some(
            cluster
                .nodes
                .iter()
                .map(|n| n.id.clone())
                .collect::<BTreeSet<_>>(),
        ),
        ..ConnConfig::default()
    }
}

/// A connection's side of the message translation: who the two ends are and the copy
/// in progress (the chunks sent or received since its PutBegin, and its size), shared
/// by both connections so their frames are the same.
#[derive(Debug)]
struct Wire {
    peer: String,
    me: String,
    /// The accepting side (a copy's source node is the peer) or the connecting side (a
    /// copy coming back by Get is this node's own file).
    server: bool,
    /// Chunks sent or received since the last PutBegin, and its size.
    chunks: u64,
    size: u64,
    seq: u64,
}

impl Wire {
    fn new(peer: &str, me: &str, server: bool) -> Wire {
        Wire {
            peer: peer.to_string(),
            me: me.to_string(),
            server,
            chunks: 0,
            size: 0,
            seq: 0,
        }
    }

    /// Whose files the copies on this connection are: the peer's when it connected to
    /// us, ours when we connected (a Get's answer).
    fn file_owner(&self) -> &str {
        if self.server {
            &self.peer
        } else {
            &self.me
        }
    }

    /// The header of the next chunk sent, at `offset`, `len` bytes with CRC32C `crc`.
    fn next_chunk(&mut self, offset: u64, len: usize, crc: u32) -> ChunkHeader {
        let hdr = ChunkHeader {
            index: self.chunks,
            offset,
            len: len as u32,
            crc32c: crc,
        };
        self.chunks += 1;
        hdr
    }

    /// The transport's frame of message `m` (not a Chunk: a chunk goes with its data).
    fn encode(&mut self, m: Msg) -> Result<tp::Msg> {
        let peer = self.peer.clone();
        let t = match m {
            Msg::Heartbeat => {
                self.seq += 1;
                tp::Msg::Heartbeat {
                    seq: self.seq,
                    unix_ms: SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or(0),
                }
            }
            Msg::PutBegin {
                path,
                size,
                chunk_size,
                mtime_ns,
                generation,
            } => {
                self.chunks = 0;
                self.size = size;
                tp::Msg::PutBegin(tp::PutBegin {
                    src_node: self.file_owner().to_string(),
                    path: wire(&path),
                    size,
                    chunk_size: if chunk_size == 0 {
                        tp::frame::DEFAULT_MAX_CHUNK
                    } else {
                        chunk_size
                    },
                    mtime_ns: mtime_ns.min(i64::MAX as u64) as i64,
                    generation,
                })
            }
            Msg::Chunk { .. } => {
                return Err(NodeError::Transport(format!(
                    "{peer}: a chunk is sent with send_chunk, with its data"
                )))
            }
            Msg::PutEnd => tp::Msg::PutEnd(tp::PutEnd {
                generation: 0,
                chunks: self.chunks,
                size: self.size,
            }),
            Msg::Ack => tp::Msg::Ack { tag: 0 },
            Msg::Nack { errno, message } => tp::Msg::Nack(tp::Nack {
                tag: 0,
                errno,
                reason: message,
            }),
            Msg::Resend { offset } => tp::Msg::Nack(tp::Nack {
                tag: offset.saturating_add(1),
                errno: libc::EIO,
                reason: format!("the chunk at byte {offset} failed its CRC32C check: send it again"),
            }),
            Msg::Delete { path, generation } => tp::Msg::Delete {
                path: wire(&path),
                generation,
            },
            Msg::List { after } => tp::Msg::List {
                src_node: self.me.clone(),
                after: wire(&after),
            },
            Msg::Listing { files, more } => tp::Msg::ListReply {
                entries: files
                    .into_iter()
                    .map(|f| tp::ListEntry {
                        path: wire(&f.path),
                        size: f.size,
                        mtime_ns: f.mtime_ns.min(i64::MAX as u64) as i64,
                        generation: f.generation,
                        complete: true,
                        crc32c: f.crc32c,
                    })
                    .collect(),
                more,
            },
            Msg::Get { path } => tp::Msg::Get {
                src_node: self.me.clone(),
                path: wire(&path),
            },
            Msg::Query(body) => tp::Msg::Query { body },
            Msg::QueryReply(body) => tp::Msg::QueryReply { body },
            Msg::Erasure(body) => tp::Msg::Erasure { body },
            Msg::Piece(p) => tp::Msg::SegPiece(p.on_wire(self.me.clone())),
        };
        Ok(t)
    }

    /// A received frame as a message; None when the peer said Bye. Messages naming
    /// another source node than the authenticated peer are refused.
    fn decode(&mut self, m: tp::Msg) -> Result<Option<Msg>> {
        let peer = self.peer.clone();
        let own = |src: &str| -> Result<()> {
            if src == peer {
                Ok(())
            } else {
                Err(NodeError::Protocol {
                    peer: peer.clone(),
                    what: format!("names source node {src:?}, not itself"),
                })
            }
        };
        Ok(Some(match m {
            tp::Msg::Heartbeat { .. } => Msg::Heartbeat,
            tp::Msg::PutBegin(b) => {
                if b.src_node != self.file_owner() {
                    return Err(NodeError::Protocol {
                        peer,
                        what: format!(
                            "a copy of node {:?}'s file, expected {}",
                            b.src_node,
                            self.file_owner()
                        ),
                    });
                }
                self.chunks = 0;
                self.size = b.size;
                Msg::PutBegin {
                    path: store_path(&b.path),
                    size: b.size,
                    chunk_size: b.chunk_size,
                    mtime_ns: b.mtime_ns.max(0) as u64,
                    generation: b.generation,
                }
            }
            tp::Msg::Chunk(h) => {
                self.chunks += 1;
                Msg::Chunk {
                    offset: h.offset,
                    crc: h.crc32c,
                    len: h.len,
                }
            }
            tp::Msg::PutEnd(e) => {
                if e.chunks != self.chunks || e.size != self.size {
                    return Err(NodeError::Protocol {
                        peer,
                        what: format!(
                            "end after {} chunks of {} bytes, announced {} chunks of {}",
                            self.chunks, self.size, e.chunks, e.size
                        ),
                    });
                }
                Msg::PutEnd
            }
            tp::Msg::Ack { .. } => Msg::Ack,
            tp::Msg::Nack(n) if n.tag > 0 && n.errno == libc::EIO => Msg::Resend { offset: n.tag - 1 },
            tp::Msg::Nack(n) => Msg::Nack {
                errno: n.errno,
                message: n.reason,
            },
            tp::Msg::Delete { path, generation } => Msg::Delete {
                path: store_path(&path),
                generation,
            },
            tp::Msg::List { src_node, after } => {
                own(&src_node)?;
                Msg::List {
                    after: if after.is_empty() {
                        after
                    } else {
                        store_path(&after)
                    },
                }
            }
            tp::Msg::ListReply { entries, more } => Msg::Listing {
                files: entries
                    .into_iter()
                    .filter(|e| e.complete)
                    .map(|e| HeldFile {
                        path: store_path(&e.path),
                        size: e.size,
                        mtime_ns: e.mtime_ns.max(0) as u64,
                        crc32c: e.crc32c,
                        generation: e.generation,
                    })
                    .collect(),
                more,
            },
            tp::Msg::Get { src_node, path } => {
                own(&src_node)?;
                Msg::Get {
                    path: store_path(&path),
                }
            }
            tp::Msg::Bye => return Ok(None),
            tp::Msg::Query { body } => Msg::Query(body),
            tp::Msg::QueryReply { body } => Msg::QueryReply(body),
            tp::Msg::Erasure { body } => Msg::Erasure(body),
            // A node may only send its own pieces (issue 32: peer security of #29).
            tp::Msg::SegPiece(p) => {
                own(&p.src_node)?;
                Msg::Piece(Piece::from_wire(p))
            }
            other => {
                return Err(NodeError::Protocol {
                    peer,
                    what: format!("unexpected {:?}", other.kind()),
                })
            }
        }))
    }

    /// A receive's error: closed, or silent for the read timeout (an idle connection),
    /// is the connection's end (None); anything else an error.
    fn ended(&self, e: TransportError) -> Result<Option<Msg>> {
        match e {
            TransportError::Closed | TransportError::Timeout { .. } => Ok(None),
            e => Err(terr(&self.peer, e)),
        }
    }

    /// A chunk's data read: true when it matches its CRC32C, false when it does not (the
    /// data was consumed: the connection is still in step).
    fn landed(&self, r: tp::Result<()>) -> Result<bool> {
        match r {
            Ok(()) => Ok(true),
            Err(TransportError::Frame(
                tp::FrameError::ChunkCrc { .. } | tp::FrameError::ChunkAuth { .. },
            )) => Ok(false),
            Err(e) => Err(terr(&self.peer, e)),
        }
    }
}

/// The answer to a request: an Ack is Ok, a Nack the peer's refusal, anything else
/// (or the end of the connection) an error.
fn acked(peer: &str, got: Option<Msg>) -> Result<()> {
    match got {
        Some(Msg::Ack) => Ok(()),
        Some(Msg::Nack { errno, message }) => Err(NodeError::Refused {
            peer: peer.to_string(),
            what: message,
            errno,
        }),
        Some(other) => Err(NodeError::Protocol {
            peer: peer.to_string(),
            what: format!("expected an acknowledgement, got {}", other.name()),
        }),
        None => Err(NodeError::Transport(format!("{peer} closed the connection"))),
    }
}
