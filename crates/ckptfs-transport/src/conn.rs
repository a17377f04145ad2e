//! The TCP connection: handshake, framed send and receive with timeouts, chunk data
//! written with one `writev` and read straight into the caller's buffer.

use crate::config::ConnConfig;
use crate::frame::{ChunkHeader, Msg, MsgType, CHUNK_FIXED, HEADER_LEN};
use crate::proto::{self, ChunkFrom, Opener, Pending};
use crate::seal::{Dir, TAG_LEN};
use crate::{ChunkData, ChunkSink, FrameError, Result, TransportError};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncReadExt, AsyncWriteExt, BufReader, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

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
            if want != mark && crate::lowat::on() {
                crate::lowat::set(stream.as_fd(), want);
                mark = want;
            }
            stream.readable().await?;
            proto::advance(read(at), &mut at, ErrorKind::UnexpectedEof, true)?;
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
    /// The chunk whose data is unread.
    pending: Pending,
    /// The frame checks (tags once authenticated, bounds).
    opener: Opener,
    read_timeout: Option<Duration>,
    peer_id: Arc<str>,
}

/// The sending half of a connection.
#[derive(Debug)]
pub struct ConnWriter {
    wr: OwnedWriteHalf,
    /// Tags (and with encryption, encrypts) every frame once authenticated.
    seal: Option<Dir>,
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

    pub(crate) fn into_parts(self) -> (BufReader<OwnedReadHalf>, Option<Dir>) {
        (self.rd, self.opener.open)
    }

    /// The frame's tag, once the connection tags its frames.
    async fn read_tag(&mut self) -> Result<Option<[u8; TAG_LEN]>> {
        if !self.opener.tagged() {
            return Ok(None);
        }
        let mut t = [0u8; TAG_LEN];
        timed(self.read_timeout, "a frame tag", self.rd.read_exact(&mut t)).await?;
        Ok(Some(t))
    }

    /// Receives the next message. A `Msg::Chunk` leaves its data unread: call
    /// [`ConnReader::recv_chunk_data`] (or [`ConnReader::skip_chunk_data`]) next. A peer's
    /// `Error` message is returned as [`TransportError::Peer`]. Once authenticated,
    /// every frame's tag is checked before its payload is decoded; a frame whose tag
    /// fails ends the connection ([`FrameError::BadTag`]).
    pub async fn recv(&mut self) -> Result<Msg> {
        self.pending.none()?;
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
        let hdr = self.opener.header(&hb)?;
        if hdr.kind == MsgType::Chunk {
            let mut fixed = [0u8; CHUNK_FIXED];
            timed(
                self.read_timeout,
                "a chunk header",
                self.rd.read_exact(&mut fixed),
            )
            .await?;
            return Ok(self.pending.arrived(self.opener.chunk(&hb, &hdr, &fixed)?));
        }
        // hdr.len is bounded by the header checks (at most MAX_CONTROL for control frames).
        let mut payload = vec![0u8; hdr.len as usize];
        timed(
            self.read_timeout,
            "a frame payload",
            self.rd.read_exact(&mut payload),
        )
        .await?;
        let tag = self.read_tag().await?;
        self.opener.control(&hb, hdr.kind, &mut payload, tag.as_ref())
    }

    /// The header of the chunk whose data is still unread, if any.
    pub fn pending_chunk(&self) -> Option<ChunkHeader> {
        self.pending.chunk
    }

    /// Checks the tag of the pending chunk whose data is in `buf` (decrypting it in
    /// place when the connection is encrypted), then its CRC32C.
    async fn finish_chunk(&mut self, c: ChunkHeader, buf: &mut [u8]) -> Result<()> {
        let tag = self.read_tag().await?;
        self.pending.chunk = None;
        self.opener.chunk_data(&c, &self.pending.head, buf, tag.as_ref())
    }

    /// Reads the pending chunk's data into `buf` (exactly its length), checks its tag
    /// and verifies its CRC32C. On [`FrameError::ChunkCrc`] or
    /// [`FrameError::ChunkAuth`] the connection is still in step (the data was
    /// consumed): the receiver may Nack and ask for the chunk again.
    pub async fn recv_chunk_data(&mut self, buf: &mut [u8]) -> Result<()> {
        let c = self.pending.due_into(buf.len())?;
        self.read_data(buf).await?;
        self.finish_chunk(c, buf).await
    }

    /// Reads the pending chunk's data into `buf`: what the read-ahead holds by a copy,
    /// the rest straight from the socket.
    async fn read_data(&mut self, buf: &mut [u8]) -> Result<()> {
        let buffered = self.rd.buffer();
        let k = buffered.len().min(buf.len());
        buf[..k].copy_from_slice(&buffered[..k]);
        std::pin::Pin::new(&mut self.rd).consume(k);
        let stream: &TcpStream = self.rd.get_ref().as_ref();
        let len = buf.len();
        read_rest(stream, self.read_timeout, k, len, &mut |at| {
            stream.try_read(&mut buf[at..])
        })
        .await
    }

    /// Reads the pending chunk's data straight into `sink` (what the read-ahead buffer
    /// already holds by a copy, the rest by reads from the socket into the sink), checks
    /// its tag over the landed bytes ([`ChunkSink::visit`]) and the CRC32C the sink
    /// computed as it landed. An encrypted connection lands the data in a buffer first,
    /// decrypts it there and hands it to the sink ([`ChunkSink::put`]). On
    /// [`FrameError::ChunkCrc`] or [`FrameError::ChunkAuth`] the connection is still in
    /// step (the data was consumed) and the sink must not be published.
    pub async fn recv_chunk_into(&mut self, sink: &mut (dyn ChunkSink + Send)) -> Result<()> {
        let c = self.pending.due()?;
        let len = c.len as usize;
        if self.opener.encrypted() {
            let mut buf = vec![0u8; len];
            self.read_data(&mut buf).await?;
            self.finish_chunk(c, &mut buf).await?;
            sink.put(&buf);
            return Ok(());
        }
        let buffered = self.rd.buffer();
        let k = buffered.len().min(len);
        sink.put(&buffered[..k]);
        std::pin::Pin::new(&mut self.rd).consume(k);
        let stream: &TcpStream = self.rd.get_ref().as_ref();
        read_rest(stream, self.read_timeout, k, len, &mut |_| {
            stream.try_io(Interest::READABLE, || sink.read_from(stream.as_fd()))
        })
        .await?;
        let tag = self.read_tag().await?;
        self.pending.chunk = None;
        self.opener.landed(&c, &self.pending.head, sink, tag.as_ref())
    }

    /// Reads and drops the pending chunk's data (its tag still checked: a frame is never
    /// taken unchecked, even to be dropped).
    pub async fn skip_chunk_data(&mut self) -> Result<()> {
        let Some(c) = self.pending.chunk else {
            return Ok(());
        };
        if self.opener.encrypted() {
            let mut buf = vec![0u8; c.len as usize];
            self.read_data(&mut buf).await?;
            return match self.finish_chunk(c, &mut buf).await {
                Err(TransportError::Frame(FrameError::ChunkCrc { .. })) => Ok(()),
                r => r,
            };
        }
        let mut mac = match (&mut self.opener.open, c) {
            (Some(o), _) => {
                let mut m = o.mac();
                m.update(&self.pending.head);
                Some(m)
            }
            (None, _) => None,
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
            if let Some(m) = mac.as_mut() {
                m.update(&scratch[..k]);
            }
            left -= k as u64;
        }
        self.pending.chunk = None;
        if let (Some(m), Some(tag)) = (mac, self.read_tag().await?) {
            if !m.matches(&tag) {
                return Err(FrameError::ChunkAuth { index: c.index }.into());
            }
        }
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

    pub(crate) fn into_parts(self) -> (OwnedWriteHalf, Option<Dir>) {
        (self.wr, self.seal)
    }

    /// Sends a message (not a Chunk: use [`ConnWriter::send_chunk`]).
    pub async fn send(&mut self, msg: &Msg) -> Result<()> {
        let bytes = proto::seal_control(self.seal.as_mut(), msg)?;
        timed(
            Some(self.write_timeout),
            "a frame write",
            self.wr.write_all(&bytes),
        )
        .await
    }

    /// Sends a chunk frame: header and fixed part, then `data` straight from the
    /// caller's memory, in one vectored write where the socket takes it all, then its
    /// tag. An encrypted connection encrypts a copy of the data.
    pub async fn send_chunk(&mut self, hdr: &ChunkHeader, data: &[u8]) -> Result<()> {
        let proto::SealedChunk { head, sealed, tag } = proto::seal_chunk(self.seal.as_mut(), hdr, data)?;
        let data = sealed.as_deref().unwrap_or(data);
        let tag = tag.as_ref().map(|t| &t[..]).unwrap_or(&[]);
        let wr = &mut self.wr;
        timed(Some(self.write_timeout), "a chunk write", async move {
            let parts = [&head[..], data, tag];
            let total: usize = parts.iter().map(|p| p.len()).sum();
            let mut off = 0;
            while off < total {
                let r = wr.write_vectored(&proto::unwritten(&parts, off)).await;
                proto::advance(r, &mut off, ErrorKind::WriteZero, false)?;
            }
            Ok(())
        })
        .await
    }

    /// Sends a chunk frame whose data writes itself to the socket ([`ChunkData`]: the
    /// store's `writev` from its mapping or `sendfile` from its spill file), so the data
    /// never passes through a buffer of this process; its tag is computed first over the
    /// data where it lies ([`ChunkData::visit`]). The header goes out in the same system
    /// call as the first data bytes where the source allows. An encrypted connection
    /// copies the data into a buffer and sends that ([`ConnWriter::send_chunk`]).
    pub async fn send_chunk_from(&mut self, hdr: &ChunkHeader, data: &dyn ChunkData) -> Result<()> {
        let (head, tag) = match proto::chunk_from(self.seal.as_mut(), hdr, data)? {
            ChunkFrom::Copied(buf) => return self.send_chunk(hdr, &buf).await,
            ChunkFrom::InPlace { head, tag } => (head, tag),
        };
        let stream: &TcpStream = self.wr.as_ref();
        timed(Some(self.write_timeout), "a chunk write", async move {
            let total = head.len() + data.len();
            let mut at = 0;
            while at < total {
                stream.writable().await?;
                let r = stream.try_io(Interest::WRITABLE, || data.write_to(stream.as_fd(), &head, at));
                proto::advance(r, &mut at, ErrorKind::WriteZero, true)?;
            }
            Ok(())
        })
        .await?;
        if let Some(tag) = tag {
            timed(Some(self.write_timeout), "a frame tag", self.wr.write_all(&tag)).await?;
        }
        Ok(())
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

    pub(crate) fn raw(stream: TcpStream, cfg: &ConnConfig) -> Conn {
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
                pending: Pending::new(),
                opener: Opener::new(cfg),
                read_timeout: Some(cfg.handshake_timeout),
                peer_id: unknown.clone(),
            },
            writer: ConnWriter {
                wr: w,
                seal: None,
                write_timeout: cfg.handshake_timeout,
                peer_id: unknown,
            },
            peer_addr,
        }
    }

    pub(crate) fn authenticated(mut self, peer: &str, cfg: &ConnConfig, open: Dir, seal: Dir) -> Conn {
        let id: Arc<str> = Arc::from(peer);
        self.reader.peer_id = id.clone();
        self.writer.peer_id = id;
        self.reader.opener.limit = None;
        self.reader.read_timeout = cfg.read_timeout;
        self.reader.opener.open = Some(open);
        self.writer.seal = Some(seal);
        self.writer.write_timeout = cfg.write_timeout;
        self
    }

    /// Tells the peer why it is refused (best effort) and returns the error.
    pub(crate) async fn refuse(&mut self, errno: i32, why: String) -> TransportError {
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
