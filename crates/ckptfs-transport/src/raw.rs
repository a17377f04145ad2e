//! A connection spoken frame by frame after a real handshake: for tests of hostile and
//! malformed peers and for protocol tools. The caller builds frames (header and payload
//! bytes, even ones no encoder of ours would produce); this module adds the tag each
//! needs after the handshake (and encrypts, on an encrypted connection), so the
//! receiver's checks behind the tag are what is exercised.

use crate::conn::Conn;
use crate::frame::{decode_header, decode_payload, Msg, MsgType, CHUNK_FIXED, HEADER_LEN, MAX_CONTROL};
use crate::seal::{Dir, TAG_LEN};
use crate::{FrameError, Result, TransportError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An authenticated connection whose frames the caller writes byte by byte.
#[derive(Debug)]
pub struct RawConn {
    stream: TcpStream,
    seal: Dir,
    open: Dir,
}

impl RawConn {
    pub(crate) fn new(stream: TcpStream, seal: Dir, open: Dir) -> RawConn {
        RawConn { stream, seal, open }
    }

    /// The socket (to read what the peer sends until it closes, or to write bytes
    /// with no tag at all).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends `frame` (a 16-byte header and what follows it, as given) and the tag the
    /// peer expects for it (the bytes after the header, or after a Chunk's fixed part,
    /// encrypted first on an encrypted connection).
    pub async fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
        let out = self.seal(frame);
        self.stream.write_all(&out).await
    }

    /// `frame` as it goes on the wire: with its tag (and encrypted on an encrypted
    /// connection); the frame counter moves on, so these bytes must be sent next (the
    /// caller may write them piece by piece through [`RawConn::stream`]).
    pub fn seal(&mut self, frame: &[u8]) -> Vec<u8> {
        let mut out = frame.to_vec();
        let tag = if self.seal.encrypted() {
            let at = if frame.len() > 5 && frame[5] == MsgType::Chunk as u8 {
                (HEADER_LEN + CHUNK_FIXED).min(frame.len())
            } else {
                HEADER_LEN.min(frame.len())
            };
            let (aad, body) = out.split_at_mut(at);
            self.seal.encrypt(aad, body)
        } else {
            let mut m = self.seal.mac();
            m.update(frame);
            m.tag()
        };
        out.extend_from_slice(&tag);
        out
    }

    /// Receives the next control frame and checks its tag.
    pub async fn recv(&mut self) -> Result<Msg> {
        let mut h = [0u8; HEADER_LEN];
        self.stream.read_exact(&mut h).await?;
        let hdr = decode_header(&h, MAX_CONTROL)?;
        if hdr.kind == MsgType::Chunk {
            return Err(TransportError::Protocol(
                "RawConn::recv takes control frames only".into(),
            ));
        }
        let mut payload = vec![0u8; hdr.len as usize];
        self.stream.read_exact(&mut payload).await?;
        let mut tag = [0u8; TAG_LEN];
        self.stream.read_exact(&mut tag).await?;
        let ok = if self.open.encrypted() {
            self.open.decrypt(&h, &mut payload, &tag)
        } else {
            let mut m = self.open.mac();
            m.update(&h);
            m.update(&payload);
            m.matches(&tag)
        };
        if !ok {
            return Err(FrameError::BadTag { kind: hdr.kind }.into());
        }
        match decode_payload(hdr.kind, &payload)? {
            Msg::Error { errno, reason } => Err(TransportError::Peer { errno, reason }),
            m => Ok(m),
        }
    }
}

impl Conn {
    /// This connection, authenticated, as a [`RawConn`] (frames built by the caller).
    /// Fails if the peer already sent bytes past the handshake.
    pub fn into_raw(self) -> Result<RawConn> {
        let (r, w) = self.into_split();
        let (rd, open) = r.into_parts();
        let (wr, seal) = w.into_parts();
        if !rd.buffer().is_empty() {
            return Err(TransportError::Protocol(
                "bytes already read past the handshake".into(),
            ));
        }
        let stream = rd
            .into_inner()
            .reunite(wr)
            .map_err(|_| TransportError::Protocol("the halves of another connection".into()))?;
        match (open, seal) {
            (Some(open), Some(seal)) => Ok(RawConn::new(stream, seal, open)),
            _ => Err(TransportError::Protocol("not authenticated".into())),
        }
    }
}
