//! The server side of one authenticated peer connection: partner copies in (PutBegin,
//! Chunk, PutEnd), Delete, List and Get of the copies this node holds for the peer, and
//! heartbeats.
//!
//! The source node of every copy is the peer's authenticated node id, never a name in
//! a message: a peer can only write, list, read or delete its own copies, under
//! `/.ckptfs/partners/<its id>/`. Paths are checked ([`check_rel_path`]) before
//! anything is created; a path that would leave that directory ends the connection.

use crate::daemon::Shared;
use crate::error::NodeError;
use crate::partner_store::{self, check_rel_path, Incoming};
use crate::peer::{Conn, Msg};
use std::sync::Arc;

/// Serve one authenticated connection until the peer closes it or breaks the protocol.
pub(crate) async fn serve(shared: Arc<Shared>, mut conn: Conn) {
    let peer = conn.peer().to_string();
    match serve_inner(&shared, &mut conn).await {
        Ok(()) => tracing::debug!("peer {peer}: connection closed"),
        Err(e) => tracing::warn!("peer {peer}: disconnected: {e}"),
    }
}

async fn serve_inner(shared: &Shared, conn: &mut Conn) -> Result<(), NodeError> {
    let peer = conn.peer().to_string();
    let store = shared.store.clone();
    let mut incoming: Option<Incoming> = None;
    while let Some(msg) = conn.recv().await? {
        match msg {
            Msg::Heartbeat => conn.send(Msg::Heartbeat).await?,
            Msg::PutBegin { path, size } => {
                let path = check_path(&peer, &path)?;
                incoming = None;
                match Incoming::begin(&store, &peer, &path, size, shared.cfg.partner_limit) {
                    Ok(inc) => {
                        incoming = Some(inc);
                        conn.send(Msg::Ack).await?;
                    }
                    Err(e) => {
                        tracing::warn!("peer {peer}: no partner copy of {path}: {e}");
                        conn.send(nack(&e)).await?;
                    }
                }
            }
            Msg::Chunk { offset, crc, data } => {
                let Some(inc) = incoming.as_mut() else {
                    return Err(protocol(&peer, "chunk outside a copy"));
                };
                match inc.chunk(offset, &data, crc) {
                    Ok(()) => conn.send(Msg::Ack).await?,
                    Err(e @ NodeError::BadChunk { .. }) => {
                        // Refused, nothing of it stored; the sender sends it again.
                        tracing::warn!("{e}: asking for it again");
                        conn.send(nack(&e)).await?;
                    }
                    Err(e @ NodeError::Protocol { .. }) => return Err(e),
                    Err(e) => {
                        incoming = None;
                        conn.send(nack(&e)).await?;
                    }
                }
            }
            Msg::PutEnd => {
                let Some(inc) = incoming.take() else {
                    return Err(protocol(&peer, "end outside a copy"));
                };
                match inc.finish() {
                    Ok(()) => {
                        shared.counters.lock().expect("counters").copies_received += 1;
                        conn.send(Msg::Ack).await?;
                    }
                    Err(e) => conn.send(nack(&e)).await?,
                }
            }
            Msg::Delete { path } => {
                let path = check_path(&peer, &path)?;
                match partner_store::remove(&store, &peer, &path) {
                    Ok(()) => conn.send(Msg::Ack).await?,
                    Err(e) => conn.send(nack(&e)).await?,
                }
            }
            Msg::List { after } => {
                let files: Vec<_> = partner_store::list(&store, &peer)
                    .into_iter()
                    .filter(|f| after.is_empty() || f.path > after)
                    .collect();
                let page = ckptfs_transport::frame::MAX_LIST_ENTRIES.min(files.len());
                let more = files.len() > page;
                let files = files.into_iter().take(page).collect();
                conn.send(Msg::Listing { files, more }).await?;
            }
            Msg::Get { path } => {
                let path = check_path(&peer, &path)?;
                crate::restore::send_held(&store, &peer, &path, conn).await?;
            }
            Msg::Query(body) => {
                let reply = crate::datasets::answer_async(shared, body).await;
                conn.send(Msg::QueryReply(reply)).await?;
            }
            other => return Err(protocol(&peer, &format!("unexpected {}", other.name()))),
        }
    }
    Ok(())
}

fn check_path(peer: &str, path: &str) -> Result<String, NodeError> {
    check_rel_path(path).map_err(|what| protocol(peer, &format!("path {path:?}: {what}")))
}

fn protocol(peer: &str, what: &str) -> NodeError {
    NodeError::Protocol {
        peer: peer.to_string(),
        what: what.to_string(),
    }
}

pub(crate) fn nack(e: &NodeError) -> Msg {
    Msg::Nack {
        errno: e.errno(),
        message: e.to_string(),
    }
}
