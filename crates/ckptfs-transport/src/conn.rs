//! The TCP connection: handshake, framed send and receive with timeouts, chunk data
//! written with one `writev` and read straight into the caller's buffer.

use crate::auth::{self, Role, Transcript};
use crate::frame::{
    self, decode_chunk_fixed, decode_header, decode_payload, encode_head, ChunkHeader, Hello, Msg, MsgType,
    CHUNK_FIXED, HEADER_LEN,
};
use crate::{ChunkData, ChunkSink, FrameError, Result, TransportError};
use ckptfs_cluster::Secret;
use std::collections::BTreeSet;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncReadExt, AsyncWriteExt, BufReader, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Largest payload accepted before authentication is complete (an Error may carry its
/// full reason, 1030 bytes).
pub const HANDSHAKE_MAX: u32 = 512;

/// Who this side is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// This node's id (as in the cluster map).
    pub node_id: String,
    /// The job name (both sides must agree).
    pub job: String,
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ConnConfig {
    /// Longest wait for the next frame (and for each part of it); None: wait forever.
    /// Peers heartbeat more often than this.
    pub read_timeout: Option<Duration>,
    /// Longest wait for a frame to be written.
    pub write_timeout: Duration,
    /// Longest time for connect plus the whole handshake.
    pub handshake_timeout: Duration,
    /// Largest chunk data accepted (frames announcing more are refused unread).
    pub max_chunk: u32,
    /// When set, the accepting side refuses client ids not in it.
    pub allowed_peers: Option<BTreeSet<String>>,
    /// When set, the connecting side refuses a server with another id.
    pub expect_peer: Option<String>,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            read_timeout: Some(Duration::from_secs(30)),
            write_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            max_chunk: frame::DEFAULT_MAX_CHUNK,
            allowed_peers: None,
            expect_peer: None,
        }
    }
}

/// `CKPTFS_NO_RCVLOWAT=1` leaves `SO_RCVLOWAT` at 1 (for A/B measurements).
fn lowat_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("CKPTFS_NO_RCVLOWAT").is_none_or(|v| v != "1"))
}

/// Read a chunk's bytes `at..len` from `stream` with `read(at)` (one non-blocking read
/// at that offset, `WouldBlock` when nothing is there), waking only for large pieces:
/// the socket's `SO_RCVLOWAT` is the rest of the chunk (at most `LOWAT_MAX`; never more
/// than is still due) while it lasts, and 1 again after.
async fn read_rest(
    stream: &TcpStream,
    timeout: Option<Duration>,
    mut at: usize,
    len: usize,
    read: &mut (dyn FnMut(usize) -> std::io::Result<usize> + Send),
) -> Result<()> {
    let mut mark = 1;
    let r = timed(timeout, "chunk data", async {
        while at < len {
            let want = (len - at).min(crate::lowat::LOWAT_MAX);
            if want != mark && lowat_on() {
                crate::lowat::set(stream.as_fd(), want);
                mark = want;
            }
            stream.readable().await?;
            match read(at) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })
    .await;
    if mark != 1 {
        crate::lowat::set(stream.as_fd(), 1);
    }
    r
}

/// The receiving half of a connection.
#[derive(Debug)]
pub struct ConnReader {
    rd: BufReader<OwnedReadHalf>,
    pending: Option<ChunkHeader>,
    max_chunk: u32,
    limit: Option<u32>,
    read_timeout: Option<Duration>,
    peer_id: Arc<str>,
}

/// The sending half of a connection.
#[derive(Debug)]
pub struct ConnWriter {
    wr: OwnedWriteHalf,
    write_timeout: Duration,
    peer_id: Arc<str>,
}

/// An authenticated connection to a peer daemon.
#[derive(Debug)]
pub struct Conn {
    reader: ConnReader,
    writer: ConnWriter,
    peer_addr: Option<SocketAddr>,
}

async fn timed<T>(
    d: Option<Duration>,
    what: &'static str,
    f: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T> {
    match d {
        None => f.await.map_err(TransportError::from),
        Some(d) => match tokio::time::timeout(d, f).await {
            Ok(r) => r.map_err(TransportError::from),
            Err(_) => Err(TransportError::Timeout { what }),
        },
    }
}

impl ConnReader {
    /// The authenticated peer's node id.
    pub fn peer_id(&self) -> &str {
        &self.peer_id
    }

    /// Receives the next message. A `Msg::Chunk` leaves its data unread: call
    /// [`ConnReader::recv_chunk_data`] (or [`ConnReader::skip_chunk_data`]) next. A peer's
    /// `Error` message is returned as [`TransportError::Peer`].
    pub async fn recv(&mut self) -> Result<Msg> {
        if let Some(c) = self.pending {
            return Err(TransportError::Protocol(format!(
                "the data of chunk {} was not read before the next message",
                c.index
            )));
        }
        let mut hb = [0u8; HEADER_LEN];
        // The first byte tells a clean close (EOF between frames) from a cut frame.
        let n = timed(self.read_timeout, "the next frame", self.rd.read(&mut hb[..1])).await?;
        if n == 0 {
            return Err(TransportError::Closed);
        }
        timed(
            self.read_timeout,
            "a frame header",
            self.rd.read_exact(&mut hb[1..]),
        )
        .await?;
        let hdr = decode_header(&hb, self.max_chunk)?;
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
        if hdr.kind == MsgType::Chunk {
            let mut fixed = [0u8; CHUNK_FIXED];
            timed(
                self.read_timeout,
                "a chunk header",
                self.rd.read_exact(&mut fixed),
            )
            .await?;
            let c = decode_chunk_fixed(&fixed)?;
            frame::check_chunk(&c, hdr.len)?;
            self.pending = Some(c);
            return Ok(Msg::Chunk(c));
        }
        // hdr.len is bounded by decode_header (at most MAX_CONTROL for control frames).
        let mut payload = vec![0u8; hdr.len as usize];
        timed(
            self.read_timeout,
            "a frame payload",
            self.rd.read_exact(&mut payload),
        )
        .await?;
        match decode_payload(hdr.kind, &payload)? {
            Msg::Error { errno, reason } => Err(TransportError::Peer { errno, reason }),
            m => Ok(m),
        }
    }

    /// The header of the chunk whose data is still unread, if any.
    pub fn pending_chunk(&self) -> Option<ChunkHeader> {
        self.pending
    }

    /// Reads the pending chunk's data into `buf` (exactly its length) and verifies its
    /// CRC32C. On [`FrameError::ChunkCrc`] the connection is still in step (the
    /// data was consumed): the receiver may Nack and ask for the chunk again.
    pub async fn recv_chunk_data(&mut self, buf: &mut [u8]) -> Result<()> {
        let c = self
            .pending
            .ok_or_else(|| TransportError::Protocol("no chunk data is pending".into()))?;
        if buf.len() != c.len as usize {
            return Err(TransportError::Protocol(format!(
                "buffer of {} bytes for chunk {} of {} bytes",
                buf.len(),
                c.index,
                c.len
            )));
        }
        let buffered = self.rd.buffer();
        let k = buffered.len().min(buf.len());
        buf[..k].copy_from_slice(&buffered[..k]);
        std::pin::Pin::new(&mut self.rd).consume(k);
        let stream: &TcpStream = self.rd.get_ref().as_ref();
        let len = buf.len();
        read_rest(stream, self.read_timeout, k, len, &mut |at| {
            stream.try_read(&mut buf[at..])
        })
        .await?;
        self.pending = None;
        if crate::crc32c(buf) != c.crc32c {
            return Err(FrameError::ChunkCrc { index: c.index }.into());
        }
        Ok(())
    }

    /// Reads the pending chunk's data straight into `sink` (what the read-ahead buffer
    /// already holds by a copy, the rest by reads from the socket into the sink) and
    /// checks the CRC32C the sink computed as it landed. On [`FrameError::ChunkCrc`]
    /// the connection is still in step (the data was consumed).
    pub async fn recv_chunk_into(&mut self, sink: &mut (dyn ChunkSink + Send)) -> Result<()> {
        let c = self
            .pending
            .ok_or_else(|| TransportError::Protocol("no chunk data is pending".into()))?;
        let len = c.len as usize;
        let buffered = self.rd.buffer();
        let k = buffered.len().min(len);
        sink.put(&buffered[..k]);
        std::pin::Pin::new(&mut self.rd).consume(k);
        let stream: &TcpStream = self.rd.get_ref().as_ref();
        read_rest(stream, self.read_timeout, k, len, &mut |_| {
            stream.try_io(Interest::READABLE, || sink.read_from(stream.as_fd()))
        })
        .await?;
        self.pending = None;
        if sink.crc() != c.crc32c {
            return Err(FrameError::ChunkCrc { index: c.index }.into());
        }
        Ok(())
    }

    /// Reads and drops the pending chunk's data.
    pub async fn skip_chunk_data(&mut self) -> Result<()> {
        let Some(c) = self.pending else {
            return Ok(());
        };
        let mut left = c.len as u64;
        let mut scratch = vec![0u8; (c.len as usize).min(1 << 20)];
        while left > 0 {
            let k = (left as usize).min(scratch.len());
            timed(
                self.read_timeout,
                "chunk data",
                self.rd.read_exact(&mut scratch[..k]),
            )
            .await?;
            left -= k as u64;
        }
        self.pending = None;
        Ok(())
    }

    /// Receives a message and, for a Chunk, its data in a new buffer (CRC verified).
    pub async fn recv_owned(&mut self) -> Result<(Msg, Vec<u8>)> {
        let m = self.recv().await?;
        let mut data = Vec::new();
        if let Msg::Chunk(c) = &m {
            data = vec![0u8; c.len as usize];
            self.recv_chunk_data(&mut data).await?;
        }
        Ok((m, data))
    }
}

impl ConnWriter {
    /// The authenticated peer's node id.
    pub fn peer_id(&self) -> &str {
        &self.peer_id
    }

    /// Sends a message (not a Chunk: use [`ConnWriter::send_chunk`]).
    pub async fn send(&mut self, msg: &Msg) -> Result<()> {
        if matches!(msg, Msg::Chunk(_)) {
            return Err(TransportError::Protocol(
                "a Chunk is sent with send_chunk, with its data".into(),
            ));
        }
        let head = encode_head(msg)?;
        timed(
            Some(self.write_timeout),
            "a frame write",
            self.wr.write_all(&head),
        )
        .await
    }

    /// Sends a chunk frame: header and fixed part, then `data` straight from the
    /// caller's memory, in one vectored write where the socket takes it all.
    pub async fn send_chunk(&mut self, hdr: &ChunkHeader, data: &[u8]) -> Result<()> {
        if hdr.len as usize != data.len() {
            return Err(TransportError::Protocol(format!(
                "chunk {} header says {} bytes, data has {}",
                hdr.index,
                hdr.len,
                data.len()
            )));
        }
        let head = encode_head(&Msg::Chunk(*hdr))?;
        let wr = &mut self.wr;
        timed(Some(self.write_timeout), "a chunk write", async move {
            let total = head.len() + data.len();
            let mut off = 0;
            while off < total {
                let n = if off < head.len() {
                    let bufs = [IoSlice::new(&head[off..]), IoSlice::new(data)];
                    wr.write_vectored(&bufs).await?
                } else {
                    wr.write(&data[off - head.len()..]).await?
                };
                if n == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                off += n;
            }
            Ok(())
        })
        .await
    }

    /// Sends a chunk frame whose data writes itself to the socket ([`ChunkData`]: the
    /// store's `writev` from its mapping or `sendfile` from its spill file), so the data
    /// never passes through a buffer of this process. The header goes out in the same
    /// system call as the first data bytes where the source allows.
    pub async fn send_chunk_from(&mut self, hdr: &ChunkHeader, data: &dyn ChunkData) -> Result<()> {
        if hdr.len as usize != data.len() {
            return Err(TransportError::Protocol(format!(
                "chunk {} header says {} bytes, data has {}",
                hdr.index,
                hdr.len,
                data.len()
            )));
        }
        let head = encode_head(&Msg::Chunk(*hdr))?;
        let stream: &TcpStream = self.wr.as_ref();
        timed(Some(self.write_timeout), "a chunk write", async move {
            let total = head.len() + data.len();
            let mut at = 0;
            while at < total {
                stream.writable().await?;
                match stream.try_io(Interest::WRITABLE, || data.write_to(stream.as_fd(), &head, at)) {
                    Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                    Ok(n) => at += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
        .await
    }

    /// Sends Bye and shuts the sending direction down.
    pub async fn close(&mut self) -> Result<()> {
        self.send(&Msg::Bye).await?;
        timed(Some(self.write_timeout), "shutdown", self.wr.shutdown()).await
    }
}

impl Conn {
    /// The authenticated peer's node id.
    pub fn peer_id(&self) -> &str {
        self.reader.peer_id()
    }

    /// The peer's socket address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }

    /// Sends a message (not a Chunk).
    pub async fn send(&mut self, msg: &Msg) -> Result<()> {
        self.writer.send(msg).await
    }

    /// Sends a chunk with its data (one `writev`).
    pub async fn send_chunk(&mut self, hdr: &ChunkHeader, data: &[u8]) -> Result<()> {
        self.writer.send_chunk(hdr, data).await
    }

    /// Sends a chunk whose data writes itself to the socket (see
    /// [`ConnWriter::send_chunk_from`]).
    pub async fn send_chunk_from(&mut self, hdr: &ChunkHeader, data: &dyn ChunkData) -> Result<()> {
        self.writer.send_chunk_from(hdr, data).await
    }

    /// Receives the next message (see [`ConnReader::recv`]).
    pub async fn recv(&mut self) -> Result<Msg> {
        self.reader.recv().await
    }

    /// Reads the pending chunk's data into `buf` (see [`ConnReader::recv_chunk_data`]).
    pub async fn recv_chunk_data(&mut self, buf: &mut [u8]) -> Result<()> {
        self.reader.recv_chunk_data(buf).await
    }

    /// Reads the pending chunk's data straight into `sink` (see
    /// [`ConnReader::recv_chunk_into`]).
    pub async fn recv_chunk_into(&mut self, sink: &mut (dyn ChunkSink + Send)) -> Result<()> {
        self.reader.recv_chunk_into(sink).await
    }

    /// Reads and drops the pending chunk's data.
    pub async fn skip_chunk_data(&mut self) -> Result<()> {
        self.reader.skip_chunk_data().await
    }

    /// Receives a message and a Chunk's data in a new buffer.
    pub async fn recv_owned(&mut self) -> Result<(Msg, Vec<u8>)> {
        self.reader.recv_owned().await
    }

    /// Sends Bye and shuts the sending direction down.
    pub async fn close(&mut self) -> Result<()> {
        self.writer.close().await
    }

    /// Splits into halves that can be used from two tasks.
    pub fn into_split(self) -> (ConnReader, ConnWriter) {
        (self.reader, self.writer)
    }

    fn raw(stream: TcpStream, cfg: &ConnConfig) -> Conn {
        let _ = stream.set_nodelay(true);
        let peer_addr = stream.peer_addr().ok();
        let (r, w) = stream.into_split();
        let unknown: Arc<str> = Arc::from("?");
        Conn {
            reader: ConnReader {
                // Small: it holds headers and control messages; chunk data is read
                // from the socket straight into its destination (what the buffer
                // already holds of it is copied).
                rd: BufReader::with_capacity(16 << 10, r),
                pending: None,
                max_chunk: cfg.max_chunk,
                limit: Some(HANDSHAKE_MAX),
                read_timeout: Some(cfg.handshake_timeout),
                peer_id: unknown.clone(),
            },
            writer: ConnWriter {
                wr: w,
                write_timeout: cfg.handshake_timeout,
                peer_id: unknown,
            },
            peer_addr,
        }
    }

    fn authenticated(mut self, peer: &str, cfg: &ConnConfig) -> Conn {
        let id: Arc<str> = Arc::from(peer);
        self.reader.peer_id = id.clone();
        self.writer.peer_id = id;
        self.reader.limit = None;
        self.reader.read_timeout = cfg.read_timeout;
        self.writer.write_timeout = cfg.write_timeout;
        self
    }

    /// Tells the peer why it is refused (best effort) and returns the error.
    async fn refuse(&mut self, errno: i32, why: String) -> TransportError {
        let _ = self
            .writer
            .send(&Msg::Error {
                errno,
                reason: why.clone(),
            })
            .await;
        TransportError::Auth(why)
    }
}

/// Connects to the daemon at `addr` and authenticates both ways.
pub async fn connect(addr: &str, identity: &Identity, secret: &Secret, cfg: &ConnConfig) -> Result<Conn> {
    let fut = async {
        let stream = TcpStream::connect(addr).await?;
        client_handshake(Conn::raw(stream, cfg), identity, secret, cfg).await
    };
    match tokio::time::timeout(cfg.handshake_timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(TransportError::Timeout {
            what: "connect and handshake",
        }),
    }
}

/// Authenticates an accepted stream (the server side of the handshake).
pub async fn accept(
    stream: TcpStream,
    identity: &Identity,
    secret: &Secret,
    cfg: &ConnConfig,
) -> Result<Conn> {
    let fut = server_handshake(Conn::raw(stream, cfg), identity, secret, cfg);
    match tokio::time::timeout(cfg.handshake_timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(TransportError::Timeout { what: "handshake" }),
    }
}

fn unexpected(m: &Msg, wanted: &str) -> TransportError {
    TransportError::Auth(format!("expected {wanted}, got {:?}", m.kind()))
}

async fn client_handshake(mut c: Conn, me: &Identity, secret: &Secret, cfg: &ConnConfig) -> Result<Conn> {
    let nc = auth::nonce()?;
    c.send(&Msg::Hello(Hello {
        node_id: me.node_id.clone(),
        job: me.job.clone(),
        nonce: nc,
    }))
    .await?;
    let ch = match c.recv().await {
        Ok(Msg::Challenge(ch)) => ch,
        Ok(m) => {
            return Err(c
                .refuse(libc::EPROTO, unexpected(&m, "Challenge").to_string())
                .await)
        }
        Err(TransportError::Peer { reason, .. }) => {
            return Err(TransportError::Auth(format!("refused by the server: {reason}")))
        }
        Err(e) => return Err(e),
    };
    if let Some(want) = &cfg.expect_peer {
        if &ch.node_id != want {
            let why = format!("server says it is {:?}, expected {want:?}", ch.node_id);
            return Err(c.refuse(libc::EACCES, why).await);
        }
    }
    let t = Transcript {
        job: &me.job,
        client_nonce: &nc,
        server_nonce: &ch.nonce,
        client_id: &me.node_id,
        server_id: &ch.node_id,
    };
    if !auth::verify(secret.expose(), Role::Server, &t, &ch.mac) {
        let why = format!("server {:?} did not prove the job secret", ch.node_id);
        return Err(c.refuse(libc::EACCES, why).await);
    }
    let mac = auth::prove(secret.expose(), Role::Client, &t);
    c.send(&Msg::Response { mac }).await?;
    match c.recv().await {
        Ok(Msg::AuthOk) => Ok(c.authenticated(&ch.node_id, cfg)),
        Ok(m) => Err(c.refuse(libc::EPROTO, unexpected(&m, "AuthOk").to_string()).await),
        Err(TransportError::Peer { reason, .. }) => {
            Err(TransportError::Auth(format!("refused by the server: {reason}")))
        }
        Err(e) => Err(e),
    }
}

async fn server_handshake(mut c: Conn, me: &Identity, secret: &Secret, cfg: &ConnConfig) -> Result<Conn> {
    let hello = match c.recv().await {
        Ok(Msg::Hello(h)) => h,
        Ok(m) => return Err(c.refuse(libc::EACCES, unexpected(&m, "Hello").to_string()).await),
        Err(e @ (TransportError::Frame(_) | TransportError::Protocol(_))) => {
            let why = format!("not a ckptfs peer: {e}");
            return Err(c.refuse(libc::EACCES, why).await);
        }
        Err(e) => return Err(e),
    };
    if hello.job != me.job {
        let why = format!("job {:?} is not this job", hello.job);
        return Err(c.refuse(libc::EACCES, why).await);
    }
    if let Some(allowed) = &cfg.allowed_peers {
        if !allowed.contains(&hello.node_id) {
            let why = format!("node {:?} is not in the cluster map", hello.node_id);
            return Err(c.refuse(libc::EACCES, why).await);
        }
    }
    let ns = auth::nonce()?;
    let t = Transcript {
        job: &me.job,
        client_nonce: &hello.nonce,
        server_nonce: &ns,
        client_id: &hello.node_id,
        server_id: &me.node_id,
    };
    let mac = auth::prove(secret.expose(), Role::Server, &t);
    c.send(&Msg::Challenge(frame::Challenge {
        node_id: me.node_id.clone(),
        nonce: ns,
        mac,
    }))
    .await?;
    let mac = match c.recv().await {
        Ok(Msg::Response { mac }) => mac,
        Ok(m) => {
            return Err(c
                .refuse(libc::EACCES, unexpected(&m, "Response").to_string())
                .await)
        }
        Err(TransportError::Peer { reason, .. }) => {
            return Err(TransportError::Auth(format!(
                "client {:?} gave up: {reason}",
                hello.node_id
            )))
        }
        Err(e @ (TransportError::Frame(_) | TransportError::Protocol(_))) => {
            let why = format!("bad handshake from {:?}: {e}", hello.node_id);
            return Err(c.refuse(libc::EACCES, why).await);
        }
        Err(e) => return Err(e),
    };
    if !auth::verify(secret.expose(), Role::Client, &t, &mac) {
        let why = format!("node {:?} did not prove the job secret", hello.node_id);
        return Err(c.refuse(libc::EACCES, why).await);
    }
    c.send(&Msg::AuthOk).await?;
    Ok(c.authenticated(&hello.node_id, cfg))
}
