//! The node daemon's peer connection (feature `tokio`): the messages of [`super`] on the
//! transport's tokio connection, for the daemon's server side, its heartbeats and
//! partner-copy bookkeeping and the erasure sets' encodings.

use super::{acked, conn_config, identity, terr, Msg, Wire};
use crate::error::{NodeError, Result};
use ckptfs_cluster::{Cluster, NodeKeys};
use ckptfs_transport as tp;

/// An authenticated connection to another node daemon (async).
pub struct Conn {
    inner: tp::Conn,
    wire: Wire,
}

impl Conn {
    fn wrap(inner: tp::Conn, me: &str, server: bool) -> Conn {
        Conn {
            wire: Wire::new(inner.peer_id(), me, server),
            inner,
        }
    }

    /// Connect to the daemon of node `peer` at `addr` as node `me` of `cluster` (with
    /// `me`'s credentials `keys`); a server that cannot prove it is `peer` is refused.
    pub async fn connect(
        addr: &str,
        me: &str,
        peer: &str,
        keys: &NodeKeys,
        cluster: &Cluster,
    ) -> Result<Conn> {
        let inner = tp::connect(addr, &identity(me, cluster), peer, keys, &conn_config(cluster))
            .await
            .map_err(|e| super::dial_error(peer, addr, e))?;
        Ok(Conn::wrap(inner, me, false))
    }

    /// Authenticate an accepted stream (the server side).
    pub async fn accept(
        stream: tokio::net::TcpStream,
        me: &str,
        keys: &NodeKeys,
        cluster: &Cluster,
    ) -> Result<Conn> {
        let addr = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let inner = tp::accept(stream, &identity(me, cluster), keys, &conn_config(cluster))
            .await
            .map_err(|e| terr(&addr, e))?;
        Ok(Conn::wrap(inner, me, true))
    }

    /// The peer's authenticated node id.
    pub fn peer(&self) -> &str {
        &self.wire.peer
    }

    /// Send one message.
    pub async fn send(&mut self, m: Msg) -> Result<()> {
        let t = self.wire.encode(m)?;
        self.inner.send(&t).await.map_err(|e| terr(&self.wire.peer, e))
    }

    /// Send the chunk at `offset` whose data writes itself to the socket (the store's
    /// zero-copy [`ckptfs_store::netio::WireSource`]), with the CRC32C the store recorded.
    pub async fn send_chunk(&mut self, offset: u64, crc: u32, data: &dyn tp::ChunkData) -> Result<()> {
        let hdr = self.wire.next_chunk(offset, data.len(), crc);
        self.inner
            .send_chunk_from(&hdr, data)
            .await
            .map_err(|e| terr(&self.wire.peer, e))
    }

    /// Send the chunk at `offset` from a buffer (its CRC32C computed by the caller).
    pub async fn send_chunk_buf(&mut self, offset: u64, crc: u32, data: &[u8]) -> Result<()> {
        let hdr = self.wire.next_chunk(offset, data.len(), crc);
        self.inner
            .send_chunk(&hdr, data)
            .await
            .map_err(|e| terr(&self.wire.peer, e))
    }

    /// Read the pending chunk's data into `buf` (exactly its length); true when it
    /// matches its CRC32C, false when it does not (the data was consumed: the connection
    /// is still in step, the receiver asks for it again).
    pub async fn chunk_data(&mut self, buf: &mut [u8]) -> Result<bool> {
        let r = self.inner.recv_chunk_data(buf).await;
        self.wire.landed(r)
    }

    /// Read the pending chunk's data straight into `sink` (a store [`Landing`] in a
    /// file's chunks); true when it matches its CRC32C, false when it does not (consumed:
    /// the connection is still in step).
    ///
    /// [`Landing`]: ckptfs_store::netin::Landing
    pub async fn chunk_into(&mut self, sink: &mut (dyn tp::ChunkSink + Send)) -> Result<bool> {
        let r = self.inner.recv_chunk_into(sink).await;
        self.wire.landed(r)
    }

    /// Read and drop the pending chunk's data.
    pub async fn skip_chunk(&mut self) -> Result<()> {
        self.inner
            .skip_chunk_data()
            .await
            .map_err(|e| terr(&self.wire.peer, e))
    }

    /// Receive one message; None when the peer closed the connection (or said Bye).
    /// Messages naming another source node than the authenticated peer are refused.
    pub async fn recv(&mut self) -> Result<Option<Msg>> {
        match self.inner.recv().await {
            Ok(m) => self.wire.decode(m),
            Err(e) => self.wire.ended(e),
        }
    }
}

/// Send a request and wait for its Ack; a Nack is an error.
pub async fn request(conn: &mut Conn, m: Msg) -> Result<(), NodeError> {
    conn.send(m).await?;
    let got = conn.recv().await?;
    acked(conn.peer(), got)
}
