//! The protocol of a connection without its I/O: how a frame is sealed before it is
//! written and checked after it is read, and the client's side of the handshake as a
//! state machine. The tokio connection ([`crate::Conn`], feature `tokio`) and the
//! blocking one ([`crate::blocking::Conn`]) are two drivers of these functions: they
//! read and write the bytes these produce and ask for, and nothing else.

use crate::auth::{self, Role, Transcript};
use crate::config::{ConnConfig, Identity, HANDSHAKE_MAX};
use crate::frame::{
    self, decode_chunk_fixed, decode_header, decode_payload, encode_head, ChunkHeader, FrameHeader, Hello,
    Msg, MsgType, CHUNK_FIXED, HEADER_LEN, NONCE_LEN,
};
use crate::seal::{Dir, TAG_LEN};
use crate::{ChunkData, ChunkSink, FrameError, Result, TransportError};
use ckptfs_cluster::{NodeKeys, PairKey};
use std::io::IoSlice;

/// The state of one direction's reading that the frame checks need.
#[derive(Debug)]
pub(crate) struct Opener {
    /// Checks the tag of every frame once authenticated.
    pub open: Option<Dir>,
    /// Largest chunk data accepted.
    pub max_chunk: u32,
    /// Largest payload before authentication (None once authenticated).
    pub limit: Option<u32>,
}

impl Opener {
    pub fn new(cfg: &ConnConfig) -> Opener {
        Opener {
            open: None,
            max_chunk: cfg.max_chunk,
            limit: Some(HANDSHAKE_MAX),
        }
    }

    /// The header just read: decoded and checked against its type's bound and, before
    /// authentication, the handshake's (no Chunk at all then).
    pub fn header(&self, hb: &[u8; HEADER_LEN]) -> Result<FrameHeader> {
        let hdr = decode_header(hb, self.max_chunk)?;
        if let Some(limit) = self.limit {
            // A refusal's reason may be longer than a handshake message.
            let limit = match hdr.kind {
                MsgType::Error => (6 + frame::MAX_REASON) as u32,
                _ => limit,
            };
            if hdr.kind == MsgType::Chunk || hdr.len > limit {
                return Err(FrameError::TooLong {
                    kind: hdr.kind,
                    len: hdr.len,
                    max: limit,
                }
                .into());
            }
        }
        Ok(hdr)
    }

    /// Whether a tag follows every frame.
    pub fn tagged(&self) -> bool {
        self.open.is_some()
    }

    /// Whether chunk data is encrypted (it must land in a buffer to be decrypted).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub fn encrypted(&self) -> bool {
        self.open.as_ref().is_some_and(Dir::encrypted)
    }

    /// A control frame read whole (`tag` once authenticated): its tag checked (the
    /// payload decrypted in place when encrypted), then decoded. A peer's `Error` comes
    /// back as [`TransportError::Peer`].
    pub fn control(
        &mut self,
        hb: &[u8; HEADER_LEN],
        kind: MsgType,
        payload: &mut [u8],
        tag: Option<&[u8; TAG_LEN]>,
    ) -> Result<Msg> {
        if let Some(open) = self.open.as_mut() {
            let tag = tag.ok_or_else(|| TransportError::Protocol("a frame without its tag".into()))?;
            if !opened(open, hb, payload, tag) {
                return Err(FrameError::BadTag { kind }.into());
            }
        }
        match decode_payload(kind, payload)? {
            Msg::Error { errno, reason } => Err(TransportError::Peer { errno, reason }),
            m => Ok(m),
        }
    }

    /// A chunk's fixed part read after its header: decoded and checked against the
    /// frame's length; returns the header and the bytes its tag starts with.
    pub fn chunk(
        &self,
        hb: &[u8; HEADER_LEN],
        hdr: &FrameHeader,
        fixed: &[u8; CHUNK_FIXED],
    ) -> Result<(ChunkHeader, [u8; HEADER_LEN + CHUNK_FIXED])> {
        let c = decode_chunk_fixed(fixed)?;
        frame::check_chunk(&c, hdr.len)?;
        let mut head = [0u8; HEADER_LEN + CHUNK_FIXED];
        head[..HEADER_LEN].copy_from_slice(hb);
        head[HEADER_LEN..].copy_from_slice(fixed);
        Ok((c, head))
    }

    /// A chunk's data read whole into `buf`: its tag checked (decrypted in place when
    /// encrypted), then its CRC32C. Either failure leaves the connection in step.
    pub fn chunk_data(
        &mut self,
        c: &ChunkHeader,
        head: &[u8; HEADER_LEN + CHUNK_FIXED],
        buf: &mut [u8],
        tag: Option<&[u8; TAG_LEN]>,
    ) -> Result<()> {
        if let Some(open) = self.open.as_mut() {
            let tag = tag.ok_or_else(|| TransportError::Protocol("a chunk without its tag".into()))?;
            if !opened(open, head, buf, tag) {
                return Err(FrameError::ChunkAuth { index: c.index }.into());
            }
        }
        crc_checked(c, crate::crc32c(buf))
    }

    /// A chunk's data landed in `sink` (never encrypted: an encrypted chunk lands in a
    /// buffer, [`Opener::chunk_data`]): its tag checked over the landed bytes
    /// ([`ChunkSink::visit`]), then the CRC32C the sink computed as they landed. Either
    /// failure leaves the connection in step; the sink must not be published then.
    pub fn landed(
        &mut self,
        c: &ChunkHeader,
        head: &[u8; HEADER_LEN + CHUNK_FIXED],
        sink: &dyn ChunkSink,
        tag: Option<&[u8; TAG_LEN]>,
    ) -> Result<()> {
        if let Some(open) = self.open.as_mut() {
            let tag = tag.ok_or_else(|| TransportError::Protocol("a chunk without its tag".into()))?;
            let mut m = open.mac();
            m.update(head);
            sink.visit(&mut |b| m.update(b));
            if !m.matches(tag) {
                return Err(FrameError::ChunkAuth { index: c.index }.into());
            }
        }
        crc_checked(c, sink.crc())
    }
}

/// Whether a frame's `body` read after `head` carries `tag` (an encrypted body decrypted
/// in place).
fn opened(open: &mut Dir, head: &[u8], body: &mut [u8], tag: &[u8; TAG_LEN]) -> bool {
    if open.encrypted() {
        open.decrypt(head, body, tag)
    } else {
        let mut m = open.mac();
        m.update(head);
        m.update(body);
        m.matches(tag)
    }
}

/// Refuses chunk data whose CRC32C (`crc`) is not the one its header announced.
fn crc_checked(c: &ChunkHeader, crc: u32) -> Result<()> {
    if crc != c.crc32c {
        return Err(FrameError::ChunkCrc { index: c.index }.into());
    }
    Ok(())
}

/// The chunk whose data is still unread on a connection (its data follows its header
/// and is read by a separate call), and the bytes its tag starts with.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The chunk's header, while its data is unread.
    pub chunk: Option<ChunkHeader>,
    /// Its frame header and fixed part (the start of what its tag covers).
    pub head: [u8; HEADER_LEN + CHUNK_FIXED],
}

impl Pending {
    pub fn new() -> Pending {
        Pending {
            chunk: None,
            head: [0; HEADER_LEN + CHUNK_FIXED],
        }
    }

    /// Refuses the next message while a chunk's data is unread.
    pub fn none(&self) -> Result<()> {
        match self.chunk {
            Some(c) => Err(TransportError::Protocol(format!(
                "the data of chunk {} was not read before the next message",
                c.index
            ))),
            None => Ok(()),
        }
    }

    /// A chunk's header read ([`Opener::chunk`]): its data is due next.
    pub fn arrived(&mut self, (c, head): (ChunkHeader, [u8; HEADER_LEN + CHUNK_FIXED])) -> Msg {
        self.head = head;
        self.chunk = Some(c);
        Msg::Chunk(c)
    }

    /// The chunk whose data is due (an error when none is).
    pub fn due(&self) -> Result<ChunkHeader> {
        self.chunk
            .ok_or_else(|| TransportError::Protocol("no chunk data is pending".into()))
    }

    /// The chunk whose data is due, into a buffer of `len` bytes (exactly its length).
    pub fn due_into(&self, len: usize) -> Result<ChunkHeader> {
        let c = self.due()?;
        if len != c.len as usize {
            return Err(TransportError::Protocol(format!(
                "buffer of {} bytes for chunk {} of {} bytes",
                len, c.index, c.len
            )));
        }
        Ok(c)
    }
}

/// What is left to write of `parts` after the first `off` bytes, as slices for one
/// vectored write.
pub(crate) fn unwritten<'a>(parts: &[&'a [u8]], off: usize) -> Vec<IoSlice<'a>> {
    let mut bufs = Vec::with_capacity(parts.len());
    let mut at = 0;
    for p in parts {
        if off < at + p.len() {
            bufs.push(IoSlice::new(&p[off.saturating_sub(at)..]));
        }
        at += p.len();
    }
    bufs
}

/// One read or write of a loop that moves a frame's bytes, folded into the count `at`
/// of bytes moved: none moved (`Ok(0)`, the stream's end) is an error of kind `zero`; an
/// interrupted call, and with `nonblocking` a socket that had nothing (`WouldBlock`),
/// moved nothing and is tried again; any other error is returned.
pub(crate) fn advance(
    r: std::io::Result<usize>,
    at: &mut usize,
    zero: std::io::ErrorKind,
    nonblocking: bool,
) -> std::io::Result<()> {
    match r {
        Ok(0) => Err(zero.into()),
        Ok(n) => {
            *at += n;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
        Err(e) if nonblocking && e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// Refuses a Chunk sent with the control path.
pub(crate) fn not_chunk(msg: &Msg) -> Result<()> {
    if matches!(msg, Msg::Chunk(_)) {
        return Err(TransportError::Protocol(
            "a Chunk is sent with send_chunk, with its data".into(),
        ));
    }
    Ok(())
}

/// Refuses chunk data whose length is not its header's.
pub(crate) fn check_len(hdr: &ChunkHeader, len: usize) -> Result<()> {
    if hdr.len as usize != len {
        return Err(TransportError::Protocol(format!(
            "chunk {} header says {} bytes, data has {}",
            hdr.index, hdr.len, len
        )));
    }
    Ok(())
}

/// A control frame as it goes on the wire: header, payload (encrypted when the
/// connection is) and, once authenticated, its tag.
pub(crate) fn seal_control(seal: Option<&mut Dir>, msg: &Msg) -> Result<Vec<u8>> {
    not_chunk(msg)?;
    let mut head = encode_head(msg)?;
    if let Some(seal) = seal {
        let tag = if seal.encrypted() {
            let (h, payload) = head.split_at_mut(HEADER_LEN);
            seal.encrypt(h, payload)
        } else {
            let mut m = seal.mac();
            m.update(&head);
            m.tag()
        };
        head.extend_from_slice(&tag);
    }
    Ok(head)
}

/// A chunk frame ready to write: its head, the data to send in place of the caller's
/// (an encrypted copy, when the connection encrypts), and the tag that follows.
pub(crate) struct SealedChunk {
    pub head: Vec<u8>,
    pub sealed: Option<Vec<u8>>,
    pub tag: Option<[u8; TAG_LEN]>,
}

/// Seals a chunk frame over `data` where it lies (integrity) or over an encrypted copy.
pub(crate) fn seal_chunk(seal: Option<&mut Dir>, hdr: &ChunkHeader, data: &[u8]) -> Result<SealedChunk> {
    check_len(hdr, data.len())?;
    let head = encode_head(&Msg::Chunk(*hdr))?;
    let (tag, sealed) = match seal {
        None => (None, None),
        Some(seal) if seal.encrypted() => {
            let mut buf = data.to_vec();
            let tag = seal.encrypt(&head, &mut buf);
            (Some(tag), Some(buf))
        }
        Some(seal) => {
            let mut m = seal.mac();
            m.update(&head);
            m.update(data);
            (Some(m.tag()), None)
        }
    };
    Ok(SealedChunk { head, sealed, tag })
}

/// A chunk frame whose data writes itself to the socket ([`ChunkData`]), ready to go.
pub(crate) enum ChunkFrom {
    /// An encrypted connection: the data copied out (to send as a buffer, sealed there).
    Copied(Vec<u8>),
    /// The frame's head, then the data from where it lies, then the tag (computed
    /// over the data where it lies, [`ChunkData::visit`]) if the connection tags.
    InPlace {
        head: Vec<u8>,
        tag: Option<[u8; TAG_LEN]>,
    },
}

/// Prepares a chunk frame over `data` that writes itself to the socket.
pub(crate) fn chunk_from(
    seal: Option<&mut Dir>,
    hdr: &ChunkHeader,
    data: &dyn ChunkData,
) -> Result<ChunkFrom> {
    check_len(hdr, data.len())?;
    if seal.as_ref().is_some_and(|s| s.encrypted()) {
        let mut buf = Vec::with_capacity(data.len());
        data.visit(&mut |b| buf.extend_from_slice(b))?;
        return Ok(ChunkFrom::Copied(buf));
    }
    let head = encode_head(&Msg::Chunk(*hdr))?;
    let tag = match seal {
        Some(seal) => {
            let mut m = seal.mac();
            m.update(&head);
            data.visit(&mut |b| m.update(b))?;
            Some(m.tag())
        }
        None => None,
    };
    Ok(ChunkFrom::InPlace { head, tag })
}

/// A handshake step that failed: the error, and what to tell the peer first (an Error
/// frame with this errno and the error's text), if anything.
#[derive(Debug)]
pub(crate) struct Refused {
    pub tell: Option<i32>,
    pub err: TransportError,
}

impl From<TransportError> for Refused {
    fn from(err: TransportError) -> Self {
        Refused { tell: None, err }
    }
}

fn refuse(errno: i32, why: String) -> Refused {
    Refused {
        tell: Some(errno),
        err: TransportError::Auth(why),
    }
}

fn unexpected(m: &Msg, wanted: &str) -> String {
    format!("expected {wanted}, got {:?}", m.kind())
}

/// The client's side of the handshake ([`crate::auth`]): `hello` to send, then
/// [`ClientHandshake::challenge`] with what came back gives the Response to send, then
/// [`ClientHandshake::auth_ok`] with the server's answer gives the two directions' seals.
pub(crate) struct ClientHandshake<'a> {
    me: &'a Identity,
    peer: &'a str,
    key: &'a PairKey,
    mode: u8,
    client_nonce: [u8; NONCE_LEN],
    server_nonce: [u8; NONCE_LEN],
}

impl<'a> ClientHandshake<'a> {
    /// Looks the pair key up and makes the Hello.
    pub fn start(
        me: &'a Identity,
        peer: &'a str,
        keys: &'a NodeKeys,
        cfg: &ConnConfig,
    ) -> Result<(ClientHandshake<'a>, Msg)> {
        let key = keys.pair(peer).ok_or_else(|| {
            TransportError::Auth(format!(
                "node {:?} holds no key for node {peer:?} (not in its key file or cluster map)",
                me.node_id
            ))
        })?;
        let nc = auth::nonce()?;
        let mode = cfg.protection.code();
        let hello = Msg::Hello(Hello {
            node_id: me.node_id.clone(),
            server_id: peer.to_string(),
            job: me.job.clone(),
            nonce: nc,
            mode,
        });
        let hs = ClientHandshake {
            me,
            peer,
            key,
            mode,
            client_nonce: nc,
            server_nonce: [0; NONCE_LEN],
        };
        Ok((hs, hello))
    }

    fn transcript(&self) -> Transcript<'_> {
        Transcript {
            job: &self.me.job,
            client_nonce: &self.client_nonce,
            server_nonce: &self.server_nonce,
            client_id: &self.me.node_id,
            server_id: self.peer,
            mode: self.mode,
        }
    }

    fn answer(&self, got: Result<Msg>) -> Result<Msg, Refused> {
        match got {
            Ok(m) => Ok(m),
            Err(TransportError::Peer { reason, .. }) => {
                Err(TransportError::Auth(format!("refused by {}: {reason}", self.peer)).into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The server's first answer: a Challenge from the node dialled gives the Response.
    pub fn challenge(&mut self, got: Result<Msg>) -> Result<Msg, Refused> {
        let ch = match self.answer(got)? {
            Msg::Challenge(ch) => ch,
            m => return Err(refuse(libc::EPROTO, unexpected(&m, "Challenge"))),
        };
        if ch.node_id != self.peer {
            let why = format!(
                "the server says it is {:?}, not {:?}, the node dialled",
                ch.node_id, self.peer
            );
            return Err(refuse(libc::EACCES, why));
        }
        self.server_nonce = ch.nonce;
        let mac = auth::prove(self.key.expose(), Role::Client, &self.transcript());
        Ok(Msg::Response { mac })
    }

    /// The server's proof: checked, it gives the (receiving, sending) directions' seals.
    pub fn auth_ok(self, got: Result<Msg>, cfg: &ConnConfig) -> Result<(Dir, Dir), Refused> {
        let mac = match self.answer(got)? {
            Msg::AuthOk { mac } => mac,
            m => return Err(refuse(libc::EPROTO, unexpected(&m, "AuthOk"))),
        };
        let t = self.transcript();
        if !auth::verify(self.key.expose(), Role::Server, &t, &mac) {
            let why = format!(
                "the server at {:?}'s address did not prove the key of node {:?}",
                self.peer, self.peer
            );
            return Err(refuse(libc::EACCES, why));
        }
        let (c2s, s2c) = auth::session_keys(self.key.expose(), &t);
        let p = cfg.protection;
        Ok((Dir::new(s2c, p), Dir::new(c2s, p)))
    }
}
