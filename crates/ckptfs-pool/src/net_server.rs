//! The servers' (manager, benefactor) side of the pool's connections, on the tokio
//! transport: the same messages as the client's ([`crate::net`]), sent and read
//! asynchronously.

use crate::msg::{parse_request, ChunkHash, Reply, Request};
use crate::net::{
    answer, get_msg, got_begin, got_chunk, got_end, peer_down, put_answer, put_msgs, query, terr,
};
use crate::{PoolError, PoolNet, Result};
use ckptfs_transport::{self as tp, Msg};

impl PoolNet {
    /// Connect to node `peer` at `addr`.
    pub async fn connect(&self, addr: &str, peer: &str) -> Result<tp::Conn> {
        tp::connect(addr, &self.identity(), peer, &self.keys, &self.config())
            .await
            .map_err(|e| peer_down(peer, addr, e))
    }

    /// Connect to the manager.
    pub async fn connect_manager(&self) -> Result<tp::Conn> {
        tp::connect(
            &self.pool.addr,
            &self.identity(),
            &self.pool.manager,
            &self.keys,
            &self.config(),
        )
        .await
        .map_err(|e| self.manager_down(e))
    }

    /// Authenticate an accepted stream.
    pub async fn accept(&self, s: tokio::net::TcpStream) -> Result<tp::Conn> {
        tp::accept(s, &self.identity(), &self.keys, &self.config())
            .await
            .map_err(|e| PoolError::Peer {
                peer: "incoming".into(),
                why: e.to_string(),
                errno: e.errno(),
            })
    }
}

/// Send a request, read its reply.
pub(crate) async fn ask(conn: &mut tp::Conn, req: &Request) -> Result<Reply> {
    let peer = conn.peer_id().to_string();
    conn.send(&query(req)?).await.map_err(terr(&peer))?;
    let m = conn.recv().await.map_err(terr(&peer))?;
    answer(&peer, m)
}

/// Read the next request on a server connection: None at its end.
pub(crate) async fn next_request(conn: &mut tp::Conn) -> Option<Result<Request, String>> {
    match conn.recv().await {
        Ok(Msg::Query { body }) => Some(parse_request(&body)),
        Ok(Msg::Bye) => None,
        Err(e) => {
            tracing::debug!("pool: {}: {e}", conn.peer_id());
            None
        }
        Ok(m) => Some(Err(format!("unexpected {:?}", m.kind()))),
    }
}

/// Answer a request.
pub(crate) async fn reply(conn: &mut tp::Conn, r: &Reply) -> bool {
    let Ok(body) = serde_json::to_string(r) else {
        return false;
    };
    conn.send(&Msg::QueryReply { body }).await.is_ok()
}

/// Fetch chunk `hash` from a benefactor (as [`crate::net::get_chunk`]).
pub(crate) async fn get_chunk(conn: &mut tp::Conn, me: &str, hash: &ChunkHash) -> Result<Vec<u8>> {
    let peer = conn.peer_id().to_string();
    let e = terr(&peer);
    conn.send(&get_msg(me, hash)).await.map_err(&e)?;
    let size = got_begin(&peer, conn.recv().await.map_err(&e)?)?;
    let mut data = vec![0u8; size as usize];
    got_chunk(&peer, &conn.recv().await.map_err(&e)?, size)?;
    conn.recv_chunk_data(&mut data).await.map_err(&e)?;
    got_end(&peer, conn.recv().await.map_err(&e)?, size)?;
    Ok(data)
}

/// Store chunk `hash` on a benefactor (as [`crate::net::put_chunk`]); waits for its Ack.
pub(crate) async fn put_chunk(
    conn: &mut tp::Conn,
    me: &str,
    write_id: u64,
    index: u64,
    hash: &ChunkHash,
    data: &[u8],
) -> Result<()> {
    let peer = conn.peer_id().to_string();
    let e = terr(&peer);
    let (begin, hdr, end) = put_msgs(me, write_id, index, hash, data);
    conn.send(&begin).await.map_err(&e)?;
    conn.send_chunk(&hdr, data).await.map_err(&e)?;
    conn.send(&end).await.map_err(&e)?;
    put_answer(&peer, conn.recv().await.map_err(&e)?)
}
