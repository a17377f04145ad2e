//! Frames and messages: the byte layout, encoding and the checked decoder.
//!
//! Pure code (no I/O), so the decoder can be fuzzed on arbitrary bytes. Every length is
//! checked against its bound before anything is allocated, and every path is checked
//! ([`check_path`]) as it is decoded. See the crate documentation for the layouts.

use crate::FrameError;

mod codec;
pub use codec::{
    check_chunk, decode_chunk_fixed, decode_frame, decode_payload, encode_frame, encode_head, encode_payload,
    DecodedFrame,
};

/// Frame magic, the first 4 bytes of every frame.
pub const MAGIC: [u8; 4] = *b"CKPN";
/// Protocol version carried in every header.
pub const VERSION: u8 = 2;
/// Length of the fixed frame header.
pub const HEADER_LEN: usize = 16;
/// Largest payload of any frame but a chunk (1 MiB).
pub const MAX_CONTROL: u32 = 1 << 20;
/// Largest chunk data a peer may send unless configured otherwise (64 MiB, the store's
/// largest chunk).
pub const DEFAULT_MAX_CHUNK: u32 = 64 << 20;
/// Length of the fixed part of a chunk frame's payload (before the data).
pub const CHUNK_FIXED: usize = 24;
/// Longest path (bytes).
pub const MAX_PATH: usize = 4096;
/// Longest path component (bytes).
pub const MAX_COMPONENT: usize = 255;
/// Longest node id or job name (bytes).
pub const MAX_NAME: usize = 64;
/// Longest reason text in Nack/Error (bytes); longer ones are cut when encoding.
pub const MAX_REASON: usize = 1024;
/// Longest dataset key in a [`SegPiece`] (bytes; letters, digits, `.`, `_`, `-`).
pub const MAX_KEY: usize = 255;
/// Length of a nonce and of an HMAC-SHA256 tag.
pub const NONCE_LEN: usize = 32;
/// Length of an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// Most entries in one ListReply.
pub const MAX_LIST_ENTRIES: usize = 4096;

/// Message type codes (header byte 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MsgType {
    /// Client's opening: its id, the server it dialled, job, nonce, frame protection.
    Hello = 1,
    /// Server's id and nonce.
    Challenge = 2,
    /// Client's proof.
    Response = 3,
    /// Server accepted the client: the server's proof.
    AuthOk = 4,
    /// Liveness.
    Heartbeat = 5,
    /// Start of a file copy.
    PutBegin = 6,
    /// One chunk of the file, data follows.
    Chunk = 7,
    /// End of a file copy.
    PutEnd = 8,
    /// Positive answer.
    Ack = 9,
    /// Refusal of one request.
    Nack = 10,
    /// Drop a partner copy.
    Delete = 11,
    /// List partner copies.
    List = 12,
    /// Answer to List.
    ListReply = 13,
    /// Send a partner copy back (restore).
    Get = 14,
    /// Fatal error; the sender closes the connection.
    Error = 15,
    /// Orderly close.
    Bye = 16,
    /// A dataset request (JSON), answered by one QueryReply.
    Query = 17,
    /// Answer to Query (JSON).
    QueryReply = 18,
    /// One piece of an erasure segment or parity shard; its data follows in a Chunk.
    SegPiece = 19,
    /// An erasure-set request or answer (JSON, `ckptfs-erasure`'s `proto`).
    Erasure = 20,
}

impl MsgType {
    /// The type for a code, if any.
    pub fn from_u8(b: u8) -> Option<MsgType> {
        use MsgType::*;
        Some(match b {
            1 => Hello,
            2 => Challenge,
            3 => Response,
            4 => AuthOk,
            5 => Heartbeat,
            6 => PutBegin,
            7 => Chunk,
            8 => PutEnd,
            9 => Ack,
            10 => Nack,
            11 => Delete,
            12 => List,
            13 => ListReply,
            14 => Get,
            15 => Error,
            16 => Bye,
            17 => Query,
            18 => QueryReply,
            19 => SegPiece,
            20 => Erasure,
            _ => return None,
        })
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Message type.
    pub kind: MsgType,
    /// Flags (none defined in version 1; must be 0).
    pub flags: u16,
    /// Payload length after the header.
    pub len: u32,
}

/// Client's opening message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The client's node id.
    pub node_id: String,
    /// The node the client dialled (a server refuses a Hello meant for another node).
    pub server_id: String,
    /// Job name (both sides must agree).
    pub job: String,
    /// Client nonce (fresh random bytes).
    pub nonce: [u8; NONCE_LEN],
    /// Frame protection asked for (`crate::Protection::code`; both sides must agree).
    pub mode: u8,
}

/// Server's answer to Hello: its id and its nonce (no proof before the client's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The server's node id.
    pub node_id: String,
    /// Server nonce (fresh random bytes).
    pub nonce: [u8; NONCE_LEN],
}

/// Header of a chunk frame; `len` data bytes follow it on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Chunk index in the file.
    pub index: u64,
    /// Byte offset of the chunk in the file.
    pub offset: u64,
    /// Data bytes that follow.
    pub len: u32,
    /// CRC32C of the data bytes.
    pub crc32c: u32,
}

impl ChunkHeader {
    /// The header for `data` at `index`/`offset`, its CRC32C computed.
    pub fn for_data(index: u64, offset: u64, data: &[u8]) -> ChunkHeader {
        ChunkHeader {
            index,
            offset,
            len: data.len() as u32,
            crc32c: crate::crc32c(data),
        }
    }
}

/// Start of a file copy into the partner namespace of `src_node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutBegin {
    /// The node whose file this is (the sender, or the requester on a Get).
    pub src_node: String,
    /// Path within the partner namespace of `src_node` (relative, checked).
    pub path: String,
    /// File size in bytes.
    pub size: u64,
    /// Chunk size of the source store.
    pub chunk_size: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Generation of the file on the source (increases on each rewrite).
    pub generation: u64,
}

/// End of a file copy: the receiver checks it got every chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutEnd {
    /// Generation (as in PutBegin).
    pub generation: u64,
    /// Number of chunks sent.
    pub chunks: u64,
    /// File size (as in PutBegin).
    pub size: u64,
}

/// Refusal of one request; the connection stays usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nack {
    /// What is refused (chunk index, generation...).
    pub tag: u64,
    /// POSIX errno (for example ENOSPC when the partner is full).
    pub errno: i32,
    /// Human-readable reason.
    pub reason: String,
}

/// One partner copy held by the answering node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    /// Path within the requester's partner namespace.
    pub path: String,
    /// File size.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Generation of the copy.
    pub generation: u64,
    /// Complete and verified (only those may be restored).
    pub complete: bool,
    /// CRC32C of the whole copy, computed by the holder from its chunk records (no
    /// data read); None where unknown. On the wire: u8 known | u32 crc32c.
    pub crc32c: Option<u32>,
}

/// What a [`SegPiece`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SegKind {
    /// A running XOR sum of a stripe's data segments, passed along the set's ring.
    Partial = 0,
    /// A member's own data segment of a stripe (a rebuild reads it).
    Data = 1,
    /// A parity shard (a rebuild reads it).
    Parity = 2,
}

impl SegKind {
    /// The kind for a code, if any.
    pub fn from_u8(b: u8) -> Option<SegKind> {
        Some(match b {
            0 => SegKind::Partial,
            1 => SegKind::Data,
            2 => SegKind::Parity,
            _ => return None,
        })
    }
}

/// One piece of an erasure segment: `len` bytes at `offset` of the segment (or shard)
/// of `seg_size` bytes of stripe `stripe` (parity row `row`), for `dataset`'s encoding
/// `epoch` by set `set`. The data follows in one Chunk frame whose offset and length
/// are the same. `src_node` is the sender (the receiver refuses any other name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegPiece {
    /// The sending node (must be the authenticated peer).
    pub src_node: String,
    /// Erasure set name.
    pub set: String,
    /// Dataset key (a name of at most [`MAX_KEY`] bytes).
    pub dataset: String,
    /// Encoding generation.
    pub epoch: u64,
    /// Stripe.
    pub stripe: u32,
    /// Parity row (0 unless a parity shard of a Reed-Solomon set).
    pub row: u16,
    /// What the bytes are.
    pub kind: SegKind,
    /// Byte offset in the segment.
    pub offset: u64,
    /// Bytes of data in the Chunk that follows.
    pub len: u32,
    /// The whole segment's length.
    pub seg_size: u64,
}

/// A protocol message. A `Chunk`'s data travels beside it (see `Conn::send_chunk`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Client's opening.
    Hello(Hello),
    /// Server's nonce and proof.
    Challenge(Challenge),
    /// Client's proof.
    Response {
        /// HMAC-SHA256 over the transcript with role "client".
        mac: [u8; MAC_LEN],
    },
    /// The server accepted the client; data frames may follow.
    AuthOk {
        /// HMAC-SHA256 over the transcript with role "server": the server's proof.
        mac: [u8; MAC_LEN],
    },
    /// Liveness (soft state).
    Heartbeat {
        /// Sender's counter.
        seq: u64,
        /// Sender's clock, milliseconds since the epoch.
        unix_ms: u64,
    },
    /// Start of a file copy.
    PutBegin(PutBegin),
    /// A chunk header; its data follows on the wire.
    Chunk(ChunkHeader),
    /// End of a file copy.
    PutEnd(PutEnd),
    /// Positive answer.
    Ack {
        /// What is acknowledged (chunk index, generation...).
        tag: u64,
    },
    /// Refusal of one request.
    Nack(Nack),
    /// Drop the partner copy of `path` if its generation is <= `generation`.
    Delete {
        /// Path within the sender's partner namespace.
        path: String,
        /// Generation deleted on the source.
        generation: u64,
    },
    /// List the copies held for `src_node`, paths after `after` (empty: from the start).
    List {
        /// Whose copies.
        src_node: String,
        /// Resume after this path (pagination).
        after: String,
    },
    /// Answer to List.
    ListReply {
        /// Entries in path order.
        entries: Vec<ListEntry>,
        /// More entries follow (ask again with `after` = last path).
        more: bool,
    },
    /// Send back the copy of `path` held for `src_node` (PutBegin, Chunks, PutEnd).
    Get {
        /// Whose copy.
        src_node: String,
        /// Path within that partner namespace.
        path: String,
    },
    /// Fatal error; the sender closes the connection.
    Error {
        /// POSIX errno.
        errno: i32,
        /// Human-readable reason.
        reason: String,
    },
    /// Orderly close.
    Bye,
    /// A dataset request between node daemons: JSON text (`ckptfs-node`'s datasets
    /// module defines it), at most [`MAX_CONTROL`] bytes.
    Query {
        /// UTF-8 JSON.
        body: String,
    },
    /// The answer to a Query: JSON text, at most [`MAX_CONTROL`] bytes.
    QueryReply {
        /// UTF-8 JSON.
        body: String,
    },
    /// One piece of an erasure segment; its data follows in a Chunk frame.
    SegPiece(SegPiece),
    /// An erasure-set request or answer: JSON text (`ckptfs-erasure`'s `proto`), at
    /// most [`MAX_CONTROL`] bytes.
    Erasure {
        /// UTF-8 JSON.
        body: String,
    },
}

impl Msg {
    /// The message's type code.
    pub fn kind(&self) -> MsgType {
        match self {
            Msg::Hello(_) => MsgType::Hello,
            Msg::Challenge(_) => MsgType::Challenge,
            Msg::Response { .. } => MsgType::Response,
            Msg::AuthOk { .. } => MsgType::AuthOk,
            Msg::Heartbeat { .. } => MsgType::Heartbeat,
            Msg::PutBegin(_) => MsgType::PutBegin,
            Msg::Chunk(_) => MsgType::Chunk,
            Msg::PutEnd(_) => MsgType::PutEnd,
            Msg::Ack { .. } => MsgType::Ack,
            Msg::Nack(_) => MsgType::Nack,
            Msg::Delete { .. } => MsgType::Delete,
            Msg::List { .. } => MsgType::List,
            Msg::ListReply { .. } => MsgType::ListReply,
            Msg::Get { .. } => MsgType::Get,
            Msg::Error { .. } => MsgType::Error,
            Msg::Bye => MsgType::Bye,
            Msg::Query { .. } => MsgType::Query,
            Msg::QueryReply { .. } => MsgType::QueryReply,
            Msg::SegPiece(_) => MsgType::SegPiece,
            Msg::Erasure { .. } => MsgType::Erasure,
        }
    }
}

/// Checks a path within a partner namespace: relative, `/`-separated, at most
/// [`MAX_PATH`] bytes, components non-empty, at most [`MAX_COMPONENT`] bytes, not `.`
/// or `..`, no NUL.
pub fn check_path(p: &str) -> Result<(), FrameError> {
    let bad = |why: &str| Err(FrameError::BadPath { why: why.to_string() });
    if p.is_empty() {
        return bad("empty");
    }
    if p.len() > MAX_PATH {
        return bad("longer than 4096 bytes");
    }
    if p.starts_with('/') {
        return bad("absolute");
    }
    if p.contains('\0') {
        return bad("contains NUL");
    }
    for c in p.split('/') {
        match c {
            "" => return bad("empty component"),
            "." | ".." => return bad("'.' or '..' component"),
            c if c.len() > MAX_COMPONENT => return bad("component longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(())
}

pub(crate) fn check_name(what: &'static str, s: &str) -> Result<(), FrameError> {
    check_name_max(what, s, MAX_NAME)
}

pub(crate) fn check_name_max(what: &'static str, s: &str, max: usize) -> Result<(), FrameError> {
    let ok = !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(FrameError::Malformed {
            kind: what,
            why: format!("not a valid name (1-{max} letters, digits, '.', '_', '-')"),
        })
    }
}

/// The largest payload allowed for a frame of type `kind`.
pub fn max_payload(kind: MsgType, max_chunk: u32) -> u32 {
    match kind {
        MsgType::Chunk => (CHUNK_FIXED as u32).saturating_add(max_chunk),
        MsgType::ListReply | MsgType::Nack | MsgType::Error => MAX_CONTROL,
        MsgType::Query | MsgType::QueryReply | MsgType::Erasure => MAX_CONTROL,
        _ => 4096 + 2 * MAX_PATH as u32,
    }
}

/// Decodes and checks a header: magic, version, known type, flags 0, header CRC, and
/// payload length within [`max_payload`] for its type. Nothing is allocated.
pub fn decode_header(b: &[u8; HEADER_LEN], max_chunk: u32) -> Result<FrameHeader, FrameError> {
    if b[0..4] != MAGIC {
        return Err(FrameError::BadMagic);
    }
    let crc = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
    if crate::crc32c(&b[..12]) != crc {
        return Err(FrameError::HeaderCrc);
    }
    if b[4] != VERSION {
        return Err(FrameError::BadVersion(b[4]));
    }
    let kind = MsgType::from_u8(b[5]).ok_or(FrameError::UnknownType(b[5]))?;
    let flags = u16::from_le_bytes([b[6], b[7]]);
    if flags != 0 {
        return Err(FrameError::Malformed {
            kind: "header",
            why: format!("unknown flags {flags:#x}"),
        });
    }
    let len = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    let max = max_payload(kind, max_chunk);
    if len > max {
        return Err(FrameError::TooLong { kind, len, max });
    }
    if kind == MsgType::Chunk && (len as usize) < CHUNK_FIXED {
        return Err(FrameError::Malformed {
            kind: "Chunk",
            why: format!("payload of {len} bytes is shorter than its fixed part"),
        });
    }
    Ok(FrameHeader { kind, flags, len })
}

/// Encodes a header.
pub fn encode_header(kind: MsgType, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC);
    h[4] = VERSION;
    h[5] = kind as u8;
    h[8..12].copy_from_slice(&len.to_le_bytes());
    let crc = crate::crc32c(&h[..12]);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}
