//! # ckptfs-transport: the authenticated peer protocol between node daemons
//!
//! Node daemons (`ckptfs node`) send partner copies, heartbeats, deletions and restore
//! requests to each other over this protocol. It is framed and length-checked, every
//! header and every chunk of data carries a CRC32C, a connection carries nothing but the
//! handshake until both sides have proved they hold the key of their pair of nodes
//! (HMAC-SHA256 challenge-response, [`auth`]; per-node credentials,
//! [`ckptfs_cluster::NodeKeys`]), and after it every frame carries a 16-byte tag under
//! a per-connection key ([`seal`]: keyed BLAKE3, or AES-256-GCM when the cluster asks
//! for encryption), so a relay can neither read (with encryption) nor change a frame. TCP now ([`TcpTransport`]); the
//! [`Transport`] and [`PeerConn`] traits leave room for an RDMA transport.
//!
//! * [`frame`]: the byte layout, the encoder and the checked decoder (pure, fuzzed);
//! * [`auth`]: the handshake's proofs;
//! * [`connect`], [`accept`], `Conn`: the tokio connection (feature `tokio`, on by
//!   default; timeouts, one `writev` per chunk, chunk data read straight into the
//!   caller's buffer);
//! * [`blocking`]: the client side of the same connection over `std::net::TcpStream`,
//!   for libraries that must not start a runtime (the C library's pool client); both
//!   drive one implementation of the protocol (a private module `proto`: the frame
//!   checks and sealing, the client's handshake as a state machine), so they differ only
//!   in how bytes are read and written;
//! * [`ChunkData`] and [`ChunkSink`]: chunk data that writes itself to the socket and a
//!   destination it lands in straight from the socket (the store's zero-copy paths),
//!   so no chunk byte passes through a buffer of the transport.
//!
//! ## Frame layout (all integers little-endian)
//!
//! ```text
//! offset size field
//!  0     4    magic "CKPN"
//!  4     1    version (2)
//!  5     1    type (below)
//!  6     2    flags (0; anything else is refused)
//!  8     4    length of the payload that follows the header
//! 12     4    CRC32C of bytes 0..12
//! 16     len  payload
//! ```
//! After the handshake every frame is followed by a 16-byte tag ([`seal`]); the header's
//! length does not count it.
//!
//! The length is checked against the type's bound before any byte of the payload is
//! read or any memory is allocated: Chunk 24 + max_chunk (64 MiB by default),
//! ListReply/Nack/Error 1 MiB, other types 12 KiB, and during the handshake 512 bytes
//! (an Error 1030, for its reason; no Chunk at all).
//!
//! Payloads. `str` is a u16 length and UTF-8 bytes; `name` is a `str` of 1-64 letters,
//! digits, `.`, `_`, `-`; `path` is a `str` checked by [`frame::check_path`]
//! (relative, at most 4096 bytes, components 1-255 bytes, no `.`/`..`, no NUL).
//!
//! ```text
//! type payload
//!  1 Hello      name node_id | name server_id | name job | nonce[32] | u8 mode
//!  2 Challenge  name node_id | nonce[32]
//!  3 Response   mac[32]            (the client's proof)
//!  4 AuthOk     mac[32]            (the server's proof)
//!  5 Heartbeat  u64 seq | u64 unix_ms
//!  6 PutBegin   u64 generation | u64 size | i64 mtime_ns | u32 chunk_size
//!               | name src_node | path
//!  7 Chunk      u64 index | u64 offset | u32 len | u32 crc32c | data[len]
//!               (frame length = 24 + len exactly; CRC32C of data checked on arrival)
//!  8 PutEnd     u64 generation | u64 chunks | u64 size
//!  9 Ack        u64 tag
//! 10 Nack       u64 tag | i32 errno | str reason (<= 1024 bytes)
//! 11 Delete     u64 generation | path
//! 12 List       name src_node | str after (empty or a path)
//! 13 ListReply  u8 more | u32 count (<= 4096) | count x
//!               (u64 size | i64 mtime_ns | u64 generation | u8 complete
//!                | u8 crc_known | u32 crc32c (0 when unknown) | path)
//! 14 Get        name src_node | path
//! 15 Error      i32 errno | str reason (<= 1024 bytes); the sender then closes
//! 16 Bye        (empty)
//! 17 Query      u32 len | UTF-8 JSON[len]   (a dataset request, ckptfs-node::datasets)
//! 18 QueryReply u32 len | UTF-8 JSON[len]   (its answer); both at most 1 MiB
//! 19 SegPiece   u64 epoch | u32 stripe | u16 row | u8 kind (0 partial XOR sum, 1 data
//!               segment, 2 parity shard) | u64 offset | u32 len | u64 seg_size
//!               | name src_node | name set | key dataset (a name of 1-255 bytes)
//!               (1 <= len, offset + len <= seg_size; one Chunk frame with the
//!               piece's data, at the same offset and length, follows)
//! 20 Erasure    u32 len | UTF-8 JSON[len]   (an erasure-set request or answer,
//!               ckptfs-erasure::proto; at most 1 MiB)
//! ```
//! A payload must be used up exactly; flag bytes must be 0 or 1.
//!
//! ```
//! use ckptfs_transport::frame::{decode_frame, encode_frame, Msg, DEFAULT_MAX_CHUNK};
//! let bytes = encode_frame(&Msg::Heartbeat { seq: 7, unix_ms: 1 }, &[]).unwrap();
//! let (msg, data, used) = decode_frame(&bytes, DEFAULT_MAX_CHUNK).unwrap().unwrap();
//! assert_eq!(msg, Msg::Heartbeat { seq: 7, unix_ms: 1 });
//! assert!(data.is_empty() && used == bytes.len());
//! ```
#![deny(missing_docs)]

pub mod auth;
pub mod blocking;
mod config;
#[cfg(feature = "tokio")]
mod conn;
pub mod frame;
#[cfg(feature = "tokio")]
mod handshake;
mod lowat;
mod proto;
#[cfg(feature = "tokio")]
pub mod raw;
pub mod seal;

pub use config::{ConnConfig, Identity, HANDSHAKE_MAX};
#[cfg(feature = "tokio")]
pub use conn::{Conn, ConnReader, ConnWriter};
pub use frame::{ChunkHeader, ListEntry, Msg, MsgType, Nack, PutBegin, PutEnd, SegKind, SegPiece};
#[cfg(feature = "tokio")]
pub use handshake::{accept, connect};
#[cfg(feature = "tokio")]
pub use raw::RawConn;
pub use seal::{Protection, TAG_LEN};

#[cfg(feature = "tokio")]
use ckptfs_cluster::NodeKeys;
#[cfg(feature = "tokio")]
use std::future::Future;
#[cfg(feature = "tokio")]
use std::sync::Arc;

/// The one refusal a server sends, whatever failed (see [`auth`]).
pub const REFUSAL: &str = "authentication refused";

/// CRC32C (Castagnoli), as the store uses for its chunks.
pub fn crc32c(data: &[u8]) -> u32 {
    ckptfs_crc::crc32c(data)
}

/// A frame that cannot be decoded (or encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The first 4 bytes are not "CKPN".
    #[error("not a ckptfs frame (bad magic)")]
    BadMagic,
    /// The header's CRC32C does not match.
    #[error("frame header checksum mismatch")]
    HeaderCrc,
    /// Another protocol version.
    #[error("protocol version {0}, this side speaks 2")]
    BadVersion(u8),
    /// An unknown message type.
    #[error("unknown message type {0}")]
    UnknownType(u8),
    /// A payload longer than its type allows (refused before reading or allocating it).
    #[error("{kind:?} frame of {len} bytes, at most {max}")]
    TooLong {
        /// Message type.
        kind: MsgType,
        /// Announced length.
        len: u32,
        /// Bound.
        max: u32,
    },
    /// A payload that does not parse.
    #[error("malformed {kind}: {why}")]
    Malformed {
        /// Message (or field) concerned.
        kind: &'static str,
        /// What is wrong.
        why: String,
    },
    /// A path that would leave the partner namespace or is otherwise invalid.
    #[error("refused path: {why}")]
    BadPath {
        /// What is wrong with it (the path itself is not echoed).
        why: String,
    },
    /// A chunk's data does not match its CRC32C.
    #[error("chunk {index}: data checksum mismatch")]
    ChunkCrc {
        /// Chunk index.
        index: u64,
    },
    /// A chunk's tag does not match its header and data: changed on the way (or, with
    /// integrity only, rewritten at the source while it was sent). Consumed: the
    /// connection is still in step and the chunk may be asked for again.
    #[error("chunk {index}: frame tag mismatch (changed on the way)")]
    ChunkAuth {
        /// Chunk index.
        index: u64,
    },
    /// A control frame's tag does not match: it was changed, dropped, replayed or
    /// reordered on the way, or comes from someone without the pair key. The
    /// connection ends.
    #[error("{kind:?} frame: tag mismatch (changed on the way, or not from the peer)")]
    BadTag {
        /// Message type.
        kind: MsgType,
    },
}

/// Everything that can go wrong on a connection.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent nothing in time.
    #[error("timed out waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
    },
    /// The peer closed the connection between frames.
    #[error("connection closed by the peer")]
    Closed,
    /// A bad frame.
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// Authentication failed (wrong or no secret, wrong job, unknown node).
    #[error("authentication refused: {0}")]
    Auth(String),
    /// A message out of order, or an API misuse.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The peer sent an Error message.
    #[error("peer error (errno {errno}): {reason}")]
    Peer {
        /// The peer's errno.
        errno: i32,
        /// The peer's reason.
        reason: String,
    },
}

impl TransportError {
    /// The POSIX errno this error maps to.
    pub fn errno(&self) -> i32 {
        match self {
            TransportError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            TransportError::Timeout { .. } => libc::ETIMEDOUT,
            TransportError::Closed => libc::ECONNRESET,
            TransportError::Frame(FrameError::ChunkCrc { .. }) => libc::EBADMSG,
            TransportError::Frame(FrameError::ChunkAuth { .. } | FrameError::BadTag { .. }) => libc::EBADMSG,
            TransportError::Frame(FrameError::BadPath { .. }) => libc::EINVAL,
            TransportError::Frame(FrameError::TooLong { .. }) => libc::EMSGSIZE,
            TransportError::Frame(_) => libc::EPROTO,
            TransportError::Auth(_) => libc::EACCES,
            TransportError::Protocol(_) => libc::EPROTO,
            TransportError::Peer { errno, .. } => *errno,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = TransportError> = std::result::Result<T, E>;

/// Chunk data that writes itself to a socket without passing through a buffer of this
/// process (the store's `writev` from its shared mapping, `sendfile` from its spill file).
/// An RDMA transport would register the same memory instead.
pub trait ChunkData: Sync {
    /// Bytes of data.
    fn len(&self) -> usize;
    /// Whether there are no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Writes `head[at..]` and then the data from `at - head.len()` to `fd` with one
    /// system call; returns the bytes written (possibly fewer), `WouldBlock` when the
    /// non-blocking socket is full.
    fn write_to(&self, fd: std::os::fd::BorrowedFd<'_>, head: &[u8], at: usize) -> std::io::Result<usize>;
    /// Hands the data to `f` in order, piece by piece, without a Rust reference to
    /// memory another process may be writing (the store reads it through its own
    /// copies); the frame's tag is computed over it.
    fn visit(&self, f: &mut dyn FnMut(&[u8])) -> std::io::Result<()>;
}

/// A destination that chunk data lands in straight from the socket (the store's
/// [`Landing`](https://docs.rs/ckptfs-store) into a file's chunks), checksummed as it
/// lands.
pub trait ChunkSink {
    /// Bytes already read from the connection (its read-ahead), landed by a copy.
    fn put(&mut self, data: &[u8]);
    /// One read from `fd` into the rest of the sink; the bytes read (0 at end of
    /// stream), `WouldBlock` when nothing is there.
    fn read_from(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<usize>;
    /// CRC32C of the bytes landed so far.
    fn crc(&self) -> u32;
    /// Hands the bytes landed so far to `f` in order (the frame's tag is checked over
    /// them before anything is published).
    fn visit(&self, f: &mut dyn FnMut(&[u8]));
}

/// One authenticated connection, whatever carries it.
#[cfg(feature = "tokio")]
pub trait PeerConn: Send {
    /// The authenticated peer's node id.
    fn peer_id(&self) -> &str;
    /// Sends a message (not a Chunk).
    fn send(&mut self, msg: &Msg) -> impl Future<Output = Result<()>> + Send;
    /// Sends a chunk and its data without copying the data.
    fn send_chunk(&mut self, hdr: &ChunkHeader, data: &[u8]) -> impl Future<Output = Result<()>> + Send;
    /// Sends a chunk whose data writes itself to the connection (zero-copy sources).
    fn send_chunk_from(
        &mut self,
        hdr: &ChunkHeader,
        data: &dyn ChunkData,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Receives the next message; a Chunk's data is then read with `recv_chunk_data`.
    fn recv(&mut self) -> impl Future<Output = Result<Msg>> + Send;
    /// Reads the pending chunk's data into `buf` and verifies its CRC32C.
    fn recv_chunk_data(&mut self, buf: &mut [u8]) -> impl Future<Output = Result<()>> + Send;
    /// Reads the pending chunk's data straight into `sink` and verifies its CRC32C.
    fn recv_chunk_into(
        &mut self,
        sink: &mut (dyn ChunkSink + Send),
    ) -> impl Future<Output = Result<()>> + Send;
}

#[cfg(feature = "tokio")]
impl PeerConn for Conn {
    fn peer_id(&self) -> &str {
        Conn::peer_id(self)
    }
    async fn send(&mut self, msg: &Msg) -> Result<()> {
        Conn::send(self, msg).await
    }
    async fn send_chunk(&mut self, hdr: &ChunkHeader, data: &[u8]) -> Result<()> {
        Conn::send_chunk(self, hdr, data).await
    }
    async fn send_chunk_from(&mut self, hdr: &ChunkHeader, data: &dyn ChunkData) -> Result<()> {
        Conn::send_chunk_from(self, hdr, data).await
    }
    async fn recv(&mut self) -> Result<Msg> {
        Conn::recv(self).await
    }
    async fn recv_chunk_data(&mut self, buf: &mut [u8]) -> Result<()> {
        Conn::recv_chunk_data(self, buf).await
    }
    async fn recv_chunk_into(&mut self, sink: &mut (dyn ChunkSink + Send)) -> Result<()> {
        Conn::recv_chunk_into(self, sink).await
    }
}

/// A way to reach peers: listen, accept and authenticate, connect.
#[cfg(feature = "tokio")]
pub trait Transport: Send + Sync {
    /// An authenticated connection.
    type Conn: PeerConn;
    /// A bound listener.
    type Listener: Send;
    /// An accepted, not yet authenticated stream.
    type Stream: Send;
    /// Listens on `addr` (only there).
    fn listen(&self, addr: &str) -> impl Future<Output = Result<Self::Listener>> + Send;
    /// Waits for the next incoming stream; authenticate it with `handshake` (in its own
    /// task, so a slow peer does not hold up the listener).
    fn accept_stream(&self, l: &Self::Listener) -> impl Future<Output = Result<Self::Stream>> + Send;
    /// The accepting side of the handshake.
    fn handshake(&self, s: Self::Stream) -> impl Future<Output = Result<Self::Conn>> + Send;
    /// Connects to node `peer` at `addr` and authenticates both ways.
    fn connect(&self, addr: &str, peer: &str) -> impl Future<Output = Result<Self::Conn>> + Send;
}

/// The TCP transport.
#[cfg(feature = "tokio")]
#[derive(Debug, Clone)]
pub struct TcpTransport {
    /// Who this node is.
    pub identity: Identity,
    /// This node's credentials (its key with each other node).
    pub keys: Arc<NodeKeys>,
    /// Timeouts, limits, allowed peers.
    pub config: ConnConfig,
}

#[cfg(feature = "tokio")]
impl Transport for TcpTransport {
    type Conn = Conn;
    type Listener = tokio::net::TcpListener;
    type Stream = tokio::net::TcpStream;

    async fn listen(&self, addr: &str) -> Result<Self::Listener> {
        Ok(tokio::net::TcpListener::bind(addr).await?)
    }

    async fn accept_stream(&self, l: &Self::Listener) -> Result<Self::Stream> {
        Ok(l.accept().await?.0)
    }

    async fn handshake(&self, s: Self::Stream) -> Result<Conn> {
        accept(s, &self.identity, &self.keys, &self.config).await
    }

    async fn connect(&self, addr: &str, peer: &str) -> Result<Conn> {
        connect(addr, &self.identity, peer, &self.keys, &self.config).await
    }
}
