//! The client side of a connection over `std::net::TcpStream`, without a runtime: for
//! libraries linked into applications (the C library's pool client) that must not start
//! threads of their own for I/O.
//!
//! The same connection as the tokio one: the same handshake (the client's state machine
//! of the private `proto` module, which the tokio connection drives too), the same
//! frames, tags or encryption, bounds (a handshake frame over
//! [`HANDSHAKE_MAX`](crate::HANDSHAKE_MAX), a chunk
//! over `max_chunk`, refused before its payload is read) and errors. Timeouts: connect
//! and the whole handshake within `handshake_timeout`; after it every read waits at most
//! `read_timeout` for each part of a frame and every write at most `write_timeout`
//! (socket timeouts); a timeout is [`TransportError::Timeout`] (errno `ETIMEDOUT`). A
//! connection whose read or write timed out or failed is out of step: drop it.
//!
//! ```no_run
//! use ckptfs_transport::{blocking, ConnConfig, Identity, Msg};
//! # fn f(keys: &ckptfs_cluster::NodeKeys) -> ckptfs_transport::Result<()> {
//! let me = Identity { node_id: "node1.client".into(), job: "job".into() };
//! let mut c = blocking::Conn::connect("10.0.0.2:7000", &me, "node2", keys, &ConnConfig::default())?;
//! c.send(&Msg::Query { body: "{}".into() })?;
//! let reply = c.recv()?;
//! # Ok(()) }
//! ```

use crate::config::{ConnConfig, Identity};
use crate::frame::{encode_head, ChunkHeader, Msg, MsgType, CHUNK_FIXED, HEADER_LEN};
use crate::proto::{self, ClientHandshake, Opener, Refused};
use crate::seal::{Dir, TAG_LEN};
use crate::{ChunkData, ChunkSink, FrameError, Result, TransportError};
use ckptfs_cluster::NodeKeys;
use std::io::{BufRead, BufReader, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// An authenticated connection to a peer, read and written by the calling thread.
#[derive(Debug)]
pub struct Conn {
    rd: BufReader<TcpStream>,
    wr: TcpStream,
    opener: Opener,
    seal: Option<Dir>,
    pending: Option<ChunkHeader>,
    pending_head: [u8; HEADER_LEN + CHUNK_FIXED],
    peer_id: String,
    peer_addr: Option<SocketAddr>,
    /// The read timeout in force (the socket's).
    read_timeout: Option<Duration>,
}

/// The socket while chunk data lands in a sink ([`Conn::land_rest`]): non-blocking,
/// its `SO_RCVLOWAT` mark raised; both undone when dropped, on every return (errors
/// included), so that the frames after the chunk are read with blocking reads under a
/// mark of 1 (a mark left above a small answer would hold its read until the timeout).
struct ChunkReads<'a> {
    sock: &'a TcpStream,
    mark: usize,
}

impl<'a> ChunkReads<'a> {
    fn start(sock: &'a TcpStream) -> Result<ChunkReads<'a>> {
        sock.set_nonblocking(true)?;
        Ok(ChunkReads { sock, mark: 1 })
    }

    fn fd(&self) -> std::os::fd::BorrowedFd<'a> {
        self.sock.as_fd()
    }

    /// Raise (or lower) the mark to `want` bytes, unless `CKPTFS_NO_RCVLOWAT` says not to.
    fn mark(&mut self, want: usize) {
        if want != self.mark && crate::lowat::on() {
            crate::lowat::set(self.fd(), want);
            self.mark = want;
        }
    }
}

impl Drop for ChunkReads<'_> {
    fn drop(&mut self) {
        if self.mark != 1 {
            crate::lowat::set(self.fd(), 1);
        }
        // Failing, the next blocking read answers WouldBlock: a timeout, and the
        // connection is dropped.
        let _ = self.sock.set_nonblocking(false);
    }
}

/// An I/O error as the transport reports it: a socket timeout is a [`TransportError::Timeout`].
fn io_err(what: &'static str) -> impl Fn(std::io::Error) -> TransportError {
    move |e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => TransportError::Timeout { what },
        _ => TransportError::Io(e),
    }
}

/// A timeout the socket accepts (zero means "none" to it).
fn at_least_1ms(d: Duration) -> Duration {
    d.max(Duration::from_millis(1))
}

/// Connects to the first address of `addr` that answers within the deadline.
fn dial(addr: &str, deadline: Instant) -> Result<TcpStream> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => io_err("connect")(e),
        None if Instant::now() >= deadline => TransportError::Timeout { what: "connect" },
        None => TransportError::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{addr}: no address"),
        )),
    })
}

impl Conn {
    /// Connects to the daemon of node `peer` at `addr` as `identity` and authenticates
    /// both ways with the key of the pair (as [`crate::connect`] does), all within
    /// `cfg.handshake_timeout`.
    pub fn connect(
        addr: &str,
        identity: &Identity,
        peer: &str,
        keys: &NodeKeys,
        cfg: &ConnConfig,
    ) -> Result<Conn> {
        let deadline = Instant::now() + cfg.handshake_timeout;
        let (mut hs, hello) = ClientHandshake::start(identity, peer, keys, cfg)?;
        let stream = dial(addr, deadline)?;
        let _ = stream.set_nodelay(true);
        let peer_addr = stream.peer_addr().ok();
        let wr = stream.try_clone()?;
        let mut c = Conn {
            // Small: it holds headers and control messages; chunk data is read from
            // the socket straight into its destination.
            rd: BufReader::with_capacity(16 << 10, stream),
            wr,
            opener: Opener::new(cfg),
            seal: None,
            pending: None,
            pending_head: [0; HEADER_LEN + CHUNK_FIXED],
            peer_id: "?".into(),
            peer_addr,
            read_timeout: None,
        };
        let r: std::result::Result<(Dir, Dir), Refused> = (|| {
            c.until(deadline)?;
            c.send(&hello)?;
            c.until(deadline)?;
            let got = c.recv();
            let response = hs.challenge(got)?;
            c.until(deadline)?;
            c.send(&response)?;
            c.until(deadline)?;
            let got = c.recv();
            hs.auth_ok(got, cfg)
        })();
        let (open, seal) = match r {
            Ok(dirs) => dirs,
            Err(Refused {
                tell: Some(errno),
                err,
            }) => {
                let reason = match &err {
                    TransportError::Auth(w) => w.clone(),
                    e => e.to_string(),
                };
                let _ = c.send(&Msg::Error { errno, reason });
                return Err(err);
            }
            Err(Refused { tell: None, err }) => {
                return Err(match err {
                    // A timeout inside the handshake is the handshake's.
                    TransportError::Timeout { .. } => TransportError::Timeout {
                        what: "connect and handshake",
                    },
                    e => e,
                });
            }
        };
        c.peer_id = peer.to_string();
        c.opener.limit = None;
        c.opener.open = Some(open);
        c.seal = Some(seal);
        c.set_read_timeout(cfg.read_timeout)?;
        c.wr.set_write_timeout(Some(at_least_1ms(cfg.write_timeout)))?;
        Ok(c)
    }

    /// The longest wait of every read from now on (None: wait forever); a read that
    /// waited longer fails with [`TransportError::Timeout`].
    pub fn set_read_timeout(&mut self, t: Option<Duration>) -> Result<()> {
        let t = t.map(at_least_1ms);
        if t != self.read_timeout {
            self.rd.get_ref().set_read_timeout(t)?;
            self.read_timeout = t;
        }
        Ok(())
    }

    /// The read timeout in force.
    pub fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// Socket timeouts for what is left until `deadline` (the handshake's). The read
    /// timeout goes through [`Conn::set_read_timeout`], so that the value it caches is
    /// the socket's: the handshake's deadline never stays on the socket when the
    /// connection's own read timeout is None.
    fn until(&mut self, deadline: Instant) -> Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(TransportError::Timeout {
                what: "connect and handshake",
            });
        }
        self.set_read_timeout(Some(left))?;
        self.wr.set_write_timeout(Some(at_least_1ms(left)))?;
        Ok(())
    }

    /// The authenticated peer's node id.
    pub fn peer_id(&self) -> &str {
        &self.peer_id
    }

    /// The peer's socket address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }

    /// Sends a message (not a Chunk: use [`Conn::send_chunk`]).
    pub fn send(&mut self, msg: &Msg) -> Result<()> {
        let bytes = proto::seal_control(self.seal.as_mut(), msg)?;
        self.wr.write_all(&bytes).map_err(io_err("a frame write"))
    }

    /// Sends a chunk frame: header and fixed part, then `data` from the caller's memory
    /// in one vectored write where the socket takes it all, then its tag (an encrypted
    /// connection encrypts a copy of the data).
    pub fn send_chunk(&mut self, hdr: &ChunkHeader, data: &[u8]) -> Result<()> {
        let proto::SealedChunk { head, sealed, tag } = proto::seal_chunk(self.seal.as_mut(), hdr, data)?;
        let data = sealed.as_deref().unwrap_or(data);
        let tag = tag.as_ref().map(|t| &t[..]).unwrap_or(&[]);
        let parts = [&head[..], data, tag];
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut off = 0;
        while off < total {
            let mut bufs = Vec::with_capacity(3);
            let mut at = 0;
            for p in parts {
                if off < at + p.len() {
                    bufs.push(IoSlice::new(&p[off.saturating_sub(at)..]));
                }
                at += p.len();
            }
            match self.wr.write_vectored(&bufs) {
                Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()),
                Ok(n) => off += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("a chunk write")(e)),
            }
        }
        Ok(())
    }

    /// Sends a chunk frame whose data writes itself to the socket ([`ChunkData`]: the
    /// store's `writev` from its mapping), as the tokio connection's `send_chunk_from`:
    /// the tag computed first over the data where it lies ([`ChunkData::visit`]), the
    /// header in the same system call as the first data bytes, so the data never passes
    /// through a buffer of this process. An encrypted connection copies the data into a
    /// buffer and sends that ([`Conn::send_chunk`]).
    pub fn send_chunk_from(&mut self, hdr: &ChunkHeader, data: &dyn ChunkData) -> Result<()> {
        proto::check_len(hdr, data.len())?;
        if self.seal.as_ref().is_some_and(Dir::encrypted) {
            let mut buf = Vec::with_capacity(data.len());
            data.visit(&mut |b| buf.extend_from_slice(b))?;
            return self.send_chunk(hdr, &buf);
        }
        let head = encode_head(&Msg::Chunk(*hdr))?;
        let tag = match self.seal.as_mut() {
            Some(seal) => {
                let mut m = seal.mac();
                m.update(&head);
                data.visit(&mut |b| m.update(b))?;
                Some(m.tag())
            }
            None => None,
        };
        let total = head.len() + data.len();
        let mut at = 0;
        while at < total {
            match data.write_to(self.wr.as_fd(), &head, at) {
                Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("a chunk write")(e)),
            }
        }
        if let Some(tag) = tag {
            self.wr.write_all(&tag).map_err(io_err("a frame tag"))?;
        }
        Ok(())
    }

    fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<()> {
        self.rd.read_exact(buf).map_err(io_err(what))
    }

    fn read_tag(&mut self) -> Result<Option<[u8; TAG_LEN]>> {
        if !self.opener.tagged() {
            return Ok(None);
        }
        let mut t = [0u8; TAG_LEN];
        self.read_exact(&mut t, "a frame tag")?;
        Ok(Some(t))
    }

    /// Receives the next message (as [`crate::ConnReader::recv`]): a Chunk leaves its
    /// data unread for [`Conn::recv_chunk_data`] or [`Conn::skip_chunk_data`]; a peer's
    /// Error is [`TransportError::Peer`]; every frame's tag is checked before its payload
    /// is decoded.
    pub fn recv(&mut self) -> Result<Msg> {
        if let Some(c) = self.pending {
            return Err(TransportError::Protocol(format!(
                "the data of chunk {} was not read before the next message",
                c.index
            )));
        }
        let mut hb = [0u8; HEADER_LEN];
        // The first byte tells a clean close (EOF between frames) from a cut frame.
        let n = loop {
            match self.rd.read(&mut hb[..1]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => break r.map_err(io_err("the next frame"))?,
            }
        };
        if n == 0 {
            return Err(TransportError::Closed);
        }
        self.read_exact(&mut hb[1..], "a frame header")?;
        let hdr = self.opener.header(&hb)?;
        if hdr.kind == MsgType::Chunk {
            let mut fixed = [0u8; CHUNK_FIXED];
            self.read_exact(&mut fixed, "a chunk header")?;
            let (c, head) = self.opener.chunk(&hb, &hdr, &fixed)?;
            self.pending_head = head;
            self.pending = Some(c);
            return Ok(Msg::Chunk(c));
        }
        // hdr.len is bounded by the header checks (at most MAX_CONTROL for control frames).
        let mut payload = vec![0u8; hdr.len as usize];
        self.read_exact(&mut payload, "a frame payload")?;
        let tag = self.read_tag()?;
        self.opener.control(&hb, hdr.kind, &mut payload, tag.as_ref())
    }

    /// The header of the chunk whose data is still unread, if any.
    pub fn pending_chunk(&self) -> Option<ChunkHeader> {
        self.pending
    }

    /// Reads the pending chunk's data into `buf` (exactly its length; what the read-ahead
    /// holds by a copy, the rest straight from the socket), checks its tag and its
    /// CRC32C. On [`crate::FrameError::ChunkCrc`] or [`crate::FrameError::ChunkAuth`]
    /// the connection is still in step.
    pub fn recv_chunk_data(&mut self, buf: &mut [u8]) -> Result<()> {
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
        // BufReader hands a read larger than its buffer straight to the socket.
        self.read_exact(buf, "chunk data")?;
        let tag = self.read_tag()?;
        self.pending = None;
        self.opener.chunk_data(&c, &self.pending_head, buf, tag.as_ref())
    }

    /// Reads the pending chunk's data straight into `sink` (what the read-ahead holds by
    /// a copy, the rest by reads from the socket into the sink, `Conn::land_rest`),
    /// checks its tag over the landed bytes and the CRC32C the sink computed as they
    /// landed, as the tokio connection's `recv_chunk_into` (the same `SO_RCVLOWAT` marks
    /// while the chunk arrives). An encrypted connection lands the data in a buffer
    /// first, decrypts it there and hands it to the sink. On [`FrameError::ChunkCrc`] or
    /// [`FrameError::ChunkAuth`] the connection is still in step (the data was consumed)
    /// and the sink must not be published.
    pub fn recv_chunk_into(&mut self, sink: &mut dyn ChunkSink) -> Result<()> {
        let c = self
            .pending
            .ok_or_else(|| TransportError::Protocol("no chunk data is pending".into()))?;
        let len = c.len as usize;
        if self.opener.encrypted() {
            let mut buf = vec![0u8; len];
            self.recv_chunk_data(&mut buf)?;
            sink.put(&buf);
            return Ok(());
        }
        let buffered = self.rd.buffer();
        let k = buffered.len().min(len);
        sink.put(&buffered[..k]);
        self.rd.consume(k);
        self.land_rest(k, len, sink)?;
        if let Some(tag) = self.read_tag()? {
            let head = self.pending_head;
            let mut m = self.opener.open.as_mut().expect("tagged").mac();
            m.update(&head);
            sink.visit(&mut |b| m.update(b));
            if !m.matches(&tag) {
                self.pending = None;
                return Err(FrameError::ChunkAuth { index: c.index }.into());
            }
        }
        self.pending = None;
        if sink.crc() != c.crc32c {
            return Err(FrameError::ChunkCrc { index: c.index }.into());
        }
        Ok(())
    }

    /// Lands a chunk's bytes `at..len` from the socket into `sink` as the tokio
    /// connection does: wait until the socket is readable (`poll`, which honours the
    /// `SO_RCVLOWAT` mark, the rest of the chunk but at most `LOWAT_MAX`), then one
    /// non-blocking read of what is there. Never a blocking read under a mark: such a
    /// read copies what is queued and then sleeps until a whole mark more has arrived
    /// (the kernel wakes a sleeping reader only once the mark is queued beyond what it
    /// already copied), which the last chunk of an answer never brings, its sender
    /// waiting for the next request: the read waited for its timeout. Each wait is at
    /// most the read timeout. The socket is non-blocking and its mark raised only
    /// within this call ([`ChunkReads`], undone on every return).
    fn land_rest(&mut self, mut at: usize, len: usize, sink: &mut dyn ChunkSink) -> Result<()> {
        if at >= len {
            return Ok(());
        }
        let timeout = self.read_timeout;
        let mut socket = ChunkReads::start(self.rd.get_ref())?;
        while at < len {
            socket.mark((len - at).min(crate::lowat::LOWAT_MAX));
            if !crate::lowat::wait_readable(socket.fd(), timeout).map_err(io_err("chunk data"))? {
                return Err(TransportError::Timeout { what: "chunk data" });
            }
            match sink.read_from(socket.fd()) {
                Ok(0) => return Err(TransportError::Io(std::io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => at += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(io_err("chunk data")(e)),
            }
        }
        Ok(())
    }

    /// Reads and drops the pending chunk's data (its tag still checked).
    pub fn skip_chunk_data(&mut self) -> Result<()> {
        let Some(c) = self.pending else {
            return Ok(());
        };
        let mut buf = vec![0u8; c.len as usize];
        match self.recv_chunk_data(&mut buf) {
            Err(TransportError::Frame(crate::FrameError::ChunkCrc { .. })) => Ok(()),
            r => r,
        }
    }

    /// Receives a message and, for a Chunk, its data in a new buffer (CRC verified).
    pub fn recv_owned(&mut self) -> Result<(Msg, Vec<u8>)> {
        let m = self.recv()?;
        let mut data = Vec::new();
        if let Msg::Chunk(c) = &m {
            data = vec![0u8; c.len as usize];
            self.recv_chunk_data(&mut data)?;
        }
        Ok((m, data))
    }

    /// Sends Bye and shuts the sending direction down.
    pub fn close(&mut self) -> Result<()> {
        self.send(&Msg::Bye)?;
        self.wr.shutdown(std::net::Shutdown::Write)?;
        Ok(())
    }
}
