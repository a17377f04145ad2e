//! Frames and messages: the byte layout, encoding and the checked decoder.
//!
//! Pure code (no I/O), so the decoder can be fuzzed on arbitrary bytes. Every length is
//! checked against its bound before anything is allocated, and every path is checked
//! ([`check_path`]) as it is decoded. See the crate documentation for the layouts.

use crate::FrameError;

/// Frame magic, the first 4 bytes of every frame.
pub const MAGIC: [u8; 4] = *b"CKPN";
/// Protocol version carried in every header.
pub const VERSION: u8 = 1;
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
    /// Client's opening: id, job, nonce.
    Hello = 1,
    /// Server's nonce and proof.
    Challenge = 2,
    /// Client's proof.
    Response = 3,
    /// Server accepted the client.
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
    /// Job name (both sides must agree).
    pub job: String,
    /// Client nonce (fresh random bytes).
    pub nonce: [u8; NONCE_LEN],
}

/// Server's answer to Hello: its id, its nonce and its proof of the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The server's node id.
    pub node_id: String,
    /// Server nonce (fresh random bytes).
    pub nonce: [u8; NONCE_LEN],
    /// HMAC-SHA256 over the transcript with role "server".
    pub mac: [u8; MAC_LEN],
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
    AuthOk,
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
}

impl Msg {
    /// The message's type code.
    pub fn kind(&self) -> MsgType {
        match self {
            Msg::Hello(_) => MsgType::Hello,
            Msg::Challenge(_) => MsgType::Challenge,
            Msg::Response { .. } => MsgType::Response,
            Msg::AuthOk => MsgType::AuthOk,
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

fn check_name(what: &'static str, s: &str) -> Result<(), FrameError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_NAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(FrameError::Malformed {
            kind: what,
            why: "not a valid name (1-64 letters, digits, '.', '_', '-')".into(),
        })
    }
}

/// The largest payload allowed for a frame of type `kind`.
pub fn max_payload(kind: MsgType, max_chunk: u32) -> u32 {
    match kind {
        MsgType::Chunk => (CHUNK_FIXED as u32).saturating_add(max_chunk),
        MsgType::ListReply | MsgType::Nack | MsgType::Error => MAX_CONTROL,
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

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    /// u16 length + UTF-8 bytes.
    fn str(&mut self, s: &str) {
        self.0.extend_from_slice(&(s.len() as u16).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
    }
}

/// Cuts a reason to [`MAX_REASON`] bytes at a character boundary.
fn cut(s: &str) -> &str {
    if s.len() <= MAX_REASON {
        return s;
    }
    let mut end = MAX_REASON;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Checks the fields an encoder would otherwise send malformed (names, paths, sizes).
fn check_outgoing(msg: &Msg) -> Result<(), FrameError> {
    match msg {
        Msg::Hello(h) => {
            check_name("Hello.node_id", &h.node_id)?;
            check_name("Hello.job", &h.job)
        }
        Msg::Challenge(c) => check_name("Challenge.node_id", &c.node_id),
        Msg::PutBegin(p) => {
            check_name("PutBegin.src_node", &p.src_node)?;
            check_path(&p.path)
        }
        Msg::Delete { path, .. } => check_path(path),
        Msg::List { src_node, after } => {
            check_name("List.src_node", src_node)?;
            if after.is_empty() {
                Ok(())
            } else {
                check_path(after)
            }
        }
        Msg::ListReply { entries, .. } => {
            if entries.len() > MAX_LIST_ENTRIES {
                return Err(FrameError::Malformed {
                    kind: "ListReply",
                    why: format!("{} entries, at most {MAX_LIST_ENTRIES}", entries.len()),
                });
            }
            entries.iter().try_for_each(|e| check_path(&e.path))
        }
        Msg::Get { src_node, path } => {
            check_name("Get.src_node", src_node)?;
            check_path(path)
        }
        _ => Ok(()),
    }
}

/// Encodes a message's payload (for a Chunk: only the fixed part, without data).
pub fn encode_payload(msg: &Msg) -> Result<Vec<u8>, FrameError> {
    check_outgoing(msg)?;
    let mut w = W(Vec::with_capacity(64));
    match msg {
        Msg::Hello(h) => {
            w.str(&h.node_id);
            w.str(&h.job);
            w.bytes(&h.nonce);
        }
        Msg::Challenge(c) => {
            w.str(&c.node_id);
            w.bytes(&c.nonce);
            w.bytes(&c.mac);
        }
        Msg::Response { mac } => w.bytes(mac),
        Msg::AuthOk | Msg::Bye => {}
        Msg::Heartbeat { seq, unix_ms } => {
            w.u64(*seq);
            w.u64(*unix_ms);
        }
        Msg::PutBegin(p) => {
            w.u64(p.generation);
            w.u64(p.size);
            w.i64(p.mtime_ns);
            w.u32(p.chunk_size);
            w.str(&p.src_node);
            w.str(&p.path);
        }
        Msg::Chunk(c) => {
            w.u64(c.index);
            w.u64(c.offset);
            w.u32(c.len);
            w.u32(c.crc32c);
        }
        Msg::PutEnd(e) => {
            w.u64(e.generation);
            w.u64(e.chunks);
            w.u64(e.size);
        }
        Msg::Ack { tag } => w.u64(*tag),
        Msg::Nack(n) => {
            w.u64(n.tag);
            w.i32(n.errno);
            w.str(cut(&n.reason));
        }
        Msg::Delete { path, generation } => {
            w.u64(*generation);
            w.str(path);
        }
        Msg::List { src_node, after } => {
            w.str(src_node);
            w.str(after);
        }
        Msg::ListReply { entries, more } => {
            w.u8(*more as u8);
            w.u32(entries.len() as u32);
            for e in entries {
                w.u64(e.size);
                w.i64(e.mtime_ns);
                w.u64(e.generation);
                w.u8(e.complete as u8);
                w.str(&e.path);
            }
        }
        Msg::Get { src_node, path } => {
            w.str(src_node);
            w.str(path);
        }
        Msg::Error { errno, reason } => {
            w.i32(*errno);
            w.str(cut(reason));
        }
    }
    let max = max_payload(msg.kind(), u32::MAX);
    if w.0.len() > max as usize {
        return Err(FrameError::TooLong {
            kind: msg.kind(),
            len: w.0.len().min(u32::MAX as usize) as u32,
            max,
        });
    }
    Ok(w.0)
}

/// Header plus payload of a message; for a Chunk the header's length includes the
/// `data_len` data bytes the caller sends right after (one `writev`).
pub fn encode_head(msg: &Msg) -> Result<Vec<u8>, FrameError> {
    let payload = encode_payload(msg)?;
    let data_len = match msg {
        Msg::Chunk(c) => c.len as usize,
        _ => 0,
    };
    let len = payload.len() + data_len;
    let len = u32::try_from(len).map_err(|_| FrameError::TooLong {
        kind: msg.kind(),
        len: u32::MAX,
        max: max_payload(msg.kind(), DEFAULT_MAX_CHUNK),
    })?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&encode_header(msg.kind(), len));
    out.extend_from_slice(&payload);
    Ok(out)
}

/// A whole frame in one buffer (tests, small messages): the head plus `data` for a
/// Chunk (whose `len` must equal `data.len()`).
pub fn encode_frame(msg: &Msg, data: &[u8]) -> Result<Vec<u8>, FrameError> {
    let expect = match msg {
        Msg::Chunk(c) => c.len as usize,
        _ => 0,
    };
    if data.len() != expect {
        return Err(FrameError::Malformed {
            kind: "Chunk",
            why: format!("{} data bytes for a length of {expect}", data.len()),
        });
    }
    let mut out = encode_head(msg)?;
    out.extend_from_slice(data);
    Ok(out)
}

struct R<'a> {
    b: &'a [u8],
    kind: &'static str,
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.b.len() < n {
            return Err(FrameError::Malformed {
                kind: self.kind,
                why: "payload ends early".into(),
            });
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    fn bool(&mut self) -> Result<bool, FrameError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(FrameError::Malformed {
                kind: self.kind,
                why: format!("flag byte {v} is neither 0 nor 1"),
            }),
        }
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn i32(&mut self) -> Result<i32, FrameError> {
        Ok(i32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn i64(&mut self) -> Result<i64, FrameError> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    fn str(&mut self, max: usize) -> Result<String, FrameError> {
        let n = u16::from_le_bytes(self.arr()?) as usize;
        if n > max {
            return Err(FrameError::Malformed {
                kind: self.kind,
                why: format!("string of {n} bytes, at most {max}"),
            });
        }
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| FrameError::Malformed {
                kind: self.kind,
                why: "string is not UTF-8".into(),
            })
    }
    fn name(&mut self, what: &'static str) -> Result<String, FrameError> {
        let s = self.str(MAX_NAME)?;
        check_name(what, &s)?;
        Ok(s)
    }
    fn path(&mut self) -> Result<String, FrameError> {
        let s = self.str(MAX_PATH)?;
        check_path(&s)?;
        Ok(s)
    }
    fn end(&self) -> Result<(), FrameError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Malformed {
                kind: self.kind,
                why: format!("{} bytes after the last field", self.b.len()),
            })
        }
    }
}

/// Decodes a payload of type `kind`. For a Chunk, `payload` is only the fixed part
/// ([`CHUNK_FIXED`] bytes); the caller reads the data separately.
pub fn decode_payload(kind: MsgType, payload: &[u8]) -> Result<Msg, FrameError> {
    let name: &'static str = match kind {
        MsgType::Hello => "Hello",
        MsgType::Challenge => "Challenge",
        MsgType::Response => "Response",
        MsgType::AuthOk => "AuthOk",
        MsgType::Heartbeat => "Heartbeat",
        MsgType::PutBegin => "PutBegin",
        MsgType::Chunk => "Chunk",
        MsgType::PutEnd => "PutEnd",
        MsgType::Ack => "Ack",
        MsgType::Nack => "Nack",
        MsgType::Delete => "Delete",
        MsgType::List => "List",
        MsgType::ListReply => "ListReply",
        MsgType::Get => "Get",
        MsgType::Error => "Error",
        MsgType::Bye => "Bye",
    };
    let mut r = R {
        b: payload,
        kind: name,
    };
    let msg = match kind {
        MsgType::Hello => Msg::Hello(Hello {
            node_id: r.name("Hello.node_id")?,
            job: r.name("Hello.job")?,
            nonce: r.arr()?,
        }),
        MsgType::Challenge => Msg::Challenge(Challenge {
            node_id: r.name("Challenge.node_id")?,
            nonce: r.arr()?,
            mac: r.arr()?,
        }),
        MsgType::Response => Msg::Response { mac: r.arr()? },
        MsgType::AuthOk => Msg::AuthOk,
        MsgType::Bye => Msg::Bye,
        MsgType::Heartbeat => Msg::Heartbeat {
            seq: r.u64()?,
            unix_ms: r.u64()?,
        },
        MsgType::PutBegin => {
            let generation = r.u64()?;
            let size = r.u64()?;
            let mtime_ns = r.i64()?;
            let chunk_size = r.u32()?;
            Msg::PutBegin(PutBegin {
                src_node: r.name("PutBegin.src_node")?,
                path: r.path()?,
                size,
                chunk_size,
                mtime_ns,
                generation,
            })
        }
        MsgType::Chunk => Msg::Chunk(chunk_fields(&mut r)?),
        MsgType::PutEnd => Msg::PutEnd(PutEnd {
            generation: r.u64()?,
            chunks: r.u64()?,
            size: r.u64()?,
        }),
        MsgType::Ack => Msg::Ack { tag: r.u64()? },
        MsgType::Nack => Msg::Nack(Nack {
            tag: r.u64()?,
            errno: r.i32()?,
            reason: r.str(MAX_REASON)?,
        }),
        MsgType::Delete => {
            let generation = r.u64()?;
            Msg::Delete {
                path: r.path()?,
                generation,
            }
        }
        MsgType::List => {
            let src_node = r.name("List.src_node")?;
            let after = r.str(MAX_PATH)?;
            if !after.is_empty() {
                check_path(&after)?;
            }
            Msg::List { src_node, after }
        }
        MsgType::ListReply => {
            let more = r.bool()?;
            let n = r.u32()? as usize;
            // Each entry takes at least 27 bytes: bound the count by what is left
            // before allocating for it.
            if n > MAX_LIST_ENTRIES || n.saturating_mul(27) > r.b.len() {
                return Err(FrameError::Malformed {
                    kind: "ListReply",
                    why: format!("{n} entries do not fit in the payload"),
                });
            }
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let size = r.u64()?;
                let mtime_ns = r.i64()?;
                let generation = r.u64()?;
                let complete = r.bool()?;
                entries.push(ListEntry {
                    path: r.path()?,
                    size,
                    mtime_ns,
                    generation,
                    complete,
                });
            }
            Msg::ListReply { entries, more }
        }
        MsgType::Get => Msg::Get {
            src_node: r.name("Get.src_node")?,
            path: r.path()?,
        },
        MsgType::Error => Msg::Error {
            errno: r.i32()?,
            reason: r.str(MAX_REASON)?,
        },
    };
    r.end()?;
    Ok(msg)
}

/// Decodes one whole frame from the front of `buf`: the message, its chunk data (empty
/// unless a Chunk, whose CRC32C is verified), and the number of bytes used.
/// `Ok(None)` when `buf` holds only part of a frame that is valid so far.
pub fn decode_frame(buf: &[u8], max_chunk: u32) -> Result<Option<(Msg, &[u8], usize)>, FrameError> {
    let Some(h) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let mut hb = [0u8; HEADER_LEN];
    hb.copy_from_slice(h);
    let hdr = decode_header(&hb, max_chunk)?;
    let total = HEADER_LEN + hdr.len as usize;
    let Some(payload) = buf.get(HEADER_LEN..total) else {
        return Ok(None);
    };
    if hdr.kind == MsgType::Chunk {
        let (fixed, data) = payload.split_at(CHUNK_FIXED);
        let c = decode_chunk_fixed(fixed)?;
        check_chunk(&c, hdr.len)?;
        if crate::crc32c(data) != c.crc32c {
            return Err(FrameError::ChunkCrc { index: c.index });
        }
        return Ok(Some((Msg::Chunk(c), data, total)));
    }
    Ok(Some((decode_payload(hdr.kind, payload)?, &[], total)))
}

fn chunk_fields(r: &mut R<'_>) -> Result<ChunkHeader, FrameError> {
    Ok(ChunkHeader {
        index: r.u64()?,
        offset: r.u64()?,
        len: r.u32()?,
        crc32c: r.u32()?,
    })
}

/// Decodes the fixed part of a chunk frame's payload ([`CHUNK_FIXED`] bytes).
pub fn decode_chunk_fixed(b: &[u8]) -> Result<ChunkHeader, FrameError> {
    let mut r = R { b, kind: "Chunk" };
    let c = chunk_fields(&mut r)?;
    r.end()?;
    Ok(c)
}

/// Checks that a chunk header's data length agrees with its frame's payload length.
pub fn check_chunk(c: &ChunkHeader, frame_len: u32) -> Result<(), FrameError> {
    if c.len as usize + CHUNK_FIXED != frame_len as usize {
        return Err(FrameError::Malformed {
            kind: "Chunk",
            why: format!(
                "data length {} disagrees with the frame's {} payload bytes",
                c.len, frame_len
            ),
        });
    }
    Ok(())
}
