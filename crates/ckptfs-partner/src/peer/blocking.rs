//! The client's peer connection without a runtime: the messages of [`super`] on the
//! transport's blocking connection ([`ckptfs_transport::blocking::Conn`], a
//! `std::net::TcpStream` read and written by the calling thread). What
//! [`crate::PartnerLevel`], [`crate::ClusterNodes`] and the erasure rebuild client
//! ([`crate::set_rebuild`]) speak, in the C library, Python, the CLI and the daemon's
//! own blocking threads (its partner copies and restores); the bytes on the wire are
//! those of the daemon's tokio connection.
//!
//! Timeouts: the connection and its handshake within the time given to
//! [`Conn::connect`] (at most the cluster connection's handshake timeout), then every
//! read at most the connection's read timeout (a peer silent for it has ended the
//! connection: [`Conn::recv`] answers None, as the tokio connection does), every write
//! at most its write timeout; [`Conn::recv_within`] waits less for one answer.

use super::{acked, conn_config, identity, terr, Msg, Wire};
use crate::error::{NodeError, Result};
use ckptfs_cluster::{Cluster, NodeKeys};
use ckptfs_transport::{self as tp, TransportError};
use std::time::Duration;

/// An authenticated connection to another node daemon, used by the calling thread.
#[derive(Debug)]
pub struct Conn {
    inner: tp::blocking::Conn,
    wire: Wire,
}

/// What one receive within a wait brought ([`Conn::recv_within`]).
#[derive(Debug)]
pub enum Within {
    /// A message.
    Msg(Msg),
    /// The peer closed the connection, said Bye or was silent for the connection's read
    /// timeout.
    Closed,
    /// Nothing within the wait (shorter than the read timeout); the connection is out
    /// of step.
    Late,
}

impl Conn {
    /// Connect to the daemon of node `peer` at `addr` as node `me` of `cluster` (with
    /// `me`'s credentials `keys`) and authenticate both ways, within `timeout` (at most
    /// the cluster connection's handshake timeout); a server that cannot prove it is
    /// `peer` is refused. Not done in time: "connect to PEER (ADDR): timed out".
    pub fn connect(
        addr: &str,
        me: &str,
        peer: &str,
        keys: &NodeKeys,
        cluster: &Cluster,
        timeout: Duration,
    ) -> Result<Conn> {
        let shake = conn_config(cluster).handshake_timeout;
        match Conn::dial(addr, me, peer, keys, cluster, timeout) {
            Ok(c) => Ok(c),
            Err(TransportError::Timeout { .. }) if timeout <= shake => Err(NodeError::Transport(format!(
                "connect to {peer} ({addr}): timed out"
            ))),
            Err(e) => Err(super::dial_error(peer, addr, e)),
        }
    }

    /// [`Conn::connect`] with the transport's error (a timeout told apart).
    pub(crate) fn dial(
        addr: &str,
        me: &str,
        peer: &str,
        keys: &NodeKeys,
        cluster: &Cluster,
        timeout: Duration,
    ) -> tp::Result<Conn> {
        let mut cfg = conn_config(cluster);
        cfg.handshake_timeout = cfg.handshake_timeout.min(timeout);
        let inner = tp::blocking::Conn::connect(addr, &identity(me, cluster), peer, keys, &cfg)?;
        Ok(Conn {
            wire: Wire::new(inner.peer_id(), me, false),
            inner,
        })
    }

    /// The peer's authenticated node id.
    pub fn peer(&self) -> &str {
        &self.wire.peer
    }

    /// Send one message.
    pub fn send(&mut self, m: Msg) -> Result<()> {
        let t = self.wire.encode(m)?;
        self.inner.send(&t).map_err(|e| terr(&self.wire.peer, e))
    }

    /// Send the chunk at `offset` whose data writes itself to the socket (pieces of the
    /// store's memory handed to `writev`), with its CRC32C.
    pub fn send_chunk(&mut self, offset: u64, crc: u32, data: &dyn tp::ChunkData) -> Result<()> {
        let hdr = self.wire.next_chunk(offset, data.len(), crc);
        self.inner
            .send_chunk_from(&hdr, data)
            .map_err(|e| terr(&self.wire.peer, e))
    }

    /// Send the chunk at `offset` from a buffer (its CRC32C computed by the caller).
    pub fn send_chunk_buf(&mut self, offset: u64, crc: u32, data: &[u8]) -> Result<()> {
        let hdr = self.wire.next_chunk(offset, data.len(), crc);
        self.inner
            .send_chunk(&hdr, data)
            .map_err(|e| terr(&self.wire.peer, e))
    }

    /// Read the pending chunk's data into `buf` (exactly its length); true when it
    /// matches its CRC32C, false when it does not (the data was consumed: the connection
    /// is still in step).
    pub fn chunk_data(&mut self, buf: &mut [u8]) -> Result<bool> {
        let r = self.inner.recv_chunk_data(buf);
        self.wire.landed(r)
    }

    /// Read the pending chunk's data straight into `sink` (a store landing in a file's
    /// chunks); true when it matches its CRC32C, false when it does not (consumed: the
    /// connection is still in step).
    pub fn chunk_into(&mut self, sink: &mut dyn tp::ChunkSink) -> Result<bool> {
        let r = self.inner.recv_chunk_into(sink);
        self.wire.landed(r)
    }

    /// Read and drop the pending chunk's data.
    pub fn skip_chunk(&mut self) -> Result<()> {
        self.inner.skip_chunk_data().map_err(|e| terr(&self.wire.peer, e))
    }

    /// Receive one message; None when the peer closed the connection, said Bye or was
    /// silent for the read timeout. Messages naming another source node than the
    /// authenticated peer are refused.
    pub fn recv(&mut self) -> Result<Option<Msg>> {
        match self.inner.recv() {
            Ok(m) => self.wire.decode(m),
            Err(e) => self.wire.ended(e),
        }
    }

    /// Receive one message, waiting at most `wait` for it (or the read timeout when
    /// that is shorter: then the silence is the connection's end, as in [`Conn::recv`]).
    pub fn recv_within(&mut self, wait: Duration) -> Result<Within> {
        let usual = self.inner.read_timeout();
        let shorter = usual.is_none_or(|u| wait < u);
        let peer = self.wire.peer.clone();
        if shorter {
            self.inner
                .set_read_timeout(Some(wait))
                .map_err(|e| terr(&peer, e))?;
        }
        let r = self.inner.recv();
        if shorter {
            self.inner.set_read_timeout(usual).map_err(|e| terr(&peer, e))?;
        }
        let got = match r {
            Ok(m) => self.wire.decode(m)?,
            Err(TransportError::Timeout { .. }) if shorter => return Ok(Within::Late),
            Err(e) => self.wire.ended(e)?,
        };
        Ok(got.map(Within::Msg).unwrap_or(Within::Closed))
    }
}

/// Send a request and wait for its Ack; a Nack is an error.
pub fn request(conn: &mut Conn, m: Msg) -> Result<(), NodeError> {
    conn.send(m)?;
    let got = conn.recv()?;
    acked(conn.peer(), got)
}
