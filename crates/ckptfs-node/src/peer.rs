//! The daemon's view of a peer connection: the few requests the node protocol uses, on
//! top of the authenticated transport ([`ckptfs_transport`]). Store paths are absolute
//! here (`/ckpt/a`) and relative on the wire (`ckpt/a`, checked by the transport's
//! decoder); the source node of a copy is always this side's authenticated id.

use crate::error::{NodeError, Result};
use crate::partner_store::HeldFile;
use ckptfs_cluster::{Cluster, Secret};
use ckptfs_transport::{self as tp, ChunkHeader, ConnConfig, Identity, TransportError};
use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

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
    },
    /// Bytes of the file at `offset`, with their CRC32C.
    Chunk {
        /// Byte offset.
        offset: u64,
        /// CRC32C the sender computed.
        crc: u32,
        /// The bytes as received (a CRC mismatch is for the receiver to see).
        data: Vec<u8>,
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
    /// Drop the copy of the sender's file `path`.
    Delete {
        /// Absolute store path on the source node.
        path: String,
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
    /// A dataset question (JSON, [`crate::datasets::Request`]).
    Query(String),
    /// Its answer (JSON, [`crate::datasets::Reply`]).
    QueryReply(String),
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
            Msg::Delete { .. } => "Delete",
            Msg::List { .. } => "List",
            Msg::Listing { .. } => "Listing",
            Msg::Get { .. } => "Get",
            Msg::Query(_) => "Query",
            Msg::QueryReply(_) => "QueryReply",
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

fn wire(path: &str) -> String {
    path.trim_start_matches('/').to_string()
}

fn store_path(path: &str) -> String {
    format!("/{path}")
}

/// Connection settings for a daemon of `cluster`: only its nodes are accepted.
pub fn conn_config(cluster: &Cluster) -> ConnConfig {
    ConnConfig {
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

/// An authenticated connection to another node daemon.
pub struct Conn {
    inner: tp::Conn,
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

impl Conn {
    fn wrap(inner: tp::Conn, me: &str, server: bool) -> Conn {
        Conn {
            peer: inner.peer_id().to_string(),
            inner,
            me: me.to_string(),
            server,
            chunks: 0,
            size: 0,
            seq: 0,
        }
    }

    /// Connect to the daemon at `addr` as node `me` of `cluster`.
    pub async fn connect(addr: &str, me: &str, secret: &Secret, cluster: &Cluster) -> Result<Conn> {
        let id = Identity {
            node_id: me.to_string(),
            job: cluster.job.clone(),
        };
        let inner = tp::connect(addr, &id, secret, &ConnConfig::default())
            .await
            .map_err(|e| terr(addr, e))?;
        Ok(Conn::wrap(inner, me, false))
    }

    /// Authenticate an accepted stream (the server side).
    pub async fn accept(
        stream: tokio::net::TcpStream,
        me: &str,
        secret: &Secret,
        cluster: &Cluster,
    ) -> Result<Conn> {
        let id = Identity {
            node_id: me.to_string(),
            job: cluster.job.clone(),
        };
        let addr = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let inner = tp::accept(stream, &id, secret, &conn_config(cluster))
            .await
            .map_err(|e| terr(&addr, e))?;
        Ok(Conn::wrap(inner, me, true))
    }

    /// The peer's authenticated node id.
    pub fn peer(&self) -> &str {
        &self.peer
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

    /// Send one message.
    pub async fn send(&mut self, m: Msg) -> Result<()> {
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
            Msg::PutBegin { path, size } => {
                self.chunks = 0;
                self.size = size;
                tp::Msg::PutBegin(tp::PutBegin {
                    src_node: self.file_owner().to_string(),
                    path: wire(&path),
                    size,
                    chunk_size: crate::source::PIECE as u32,
                    mtime_ns: 0,
                    generation: 0,
                })
            }
            Msg::Chunk { offset, crc, data } => {
                let hdr = ChunkHeader {
                    index: self.chunks,
                    offset,
                    len: data.len() as u32,
                    crc32c: crc,
                };
                self.chunks += 1;
                return self
                    .inner
                    .send_chunk(&hdr, &data)
                    .await
                    .map_err(|e| terr(&peer, e));
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
            Msg::Delete { path } => tp::Msg::Delete {
                path: wire(&path),
                generation: u64::MAX,
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
                        mtime_ns: 0,
                        generation: 0,
                        complete: true,
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
        };
        self.inner.send(&t).await.map_err(|e| terr(&peer, e))
    }

    /// Receive one message; None when the peer closed the connection (or said Bye).
    /// Messages naming another source node than the authenticated peer are refused.
    pub async fn recv(&mut self) -> Result<Option<Msg>> {
        let peer = self.peer.clone();
        let m = match self.inner.recv().await {
            Ok(m) => m,
            // Closed, or silent for the read timeout (an idle connection): its end.
            Err(TransportError::Closed) | Err(TransportError::Timeout { .. }) => return Ok(None),
            Err(e) => return Err(terr(&peer, e)),
        };
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
                }
            }
            tp::Msg::Chunk(h) => {
                let mut data = vec![0u8; h.len as usize];
                match self.inner.recv_chunk_data(&mut data).await {
                    // The data was consumed: the receiver sees the mismatch and Nacks.
                    Ok(()) | Err(TransportError::Frame(tp::FrameError::ChunkCrc { .. })) => {}
                    Err(e) => return Err(terr(&peer, e)),
                }
                self.chunks += 1;
                Msg::Chunk {
                    offset: h.offset,
                    crc: h.crc32c,
                    data,
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
            tp::Msg::Nack(n) => Msg::Nack {
                errno: n.errno,
                message: n.reason,
            },
            tp::Msg::Delete { path, .. } => Msg::Delete {
                path: store_path(&path),
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
            other => {
                return Err(NodeError::Protocol {
                    peer,
                    what: format!("unexpected {:?}", other.kind()),
                })
            }
        }))
    }
}
