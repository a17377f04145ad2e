//! The server side of one authenticated peer connection: partner copies in (PutBegin,
//! Chunk, PutEnd), Delete, List and Get of the copies this node holds for the peer, and
//! heartbeats.
//!
//! The source node of every copy is the peer's authenticated node id, never a name in
//! a message: a peer can only write, list, read or delete its own copies, under
//! `/.ckptfs/partners/<its id>/`. Paths are checked ([`check_rel_path`]) before
//! anything is created; a path that would leave that directory ends the connection.

use crate::partner_store::{self, check_rel_path, InState, Incoming, Sink, Take};
use crate::ratelimit;
use crate::shared::Shared;
use ckptfs_partner::peer::{Conn, Msg};
use ckptfs_partner::NodeError;
use std::sync::Arc;

/// Serve one authenticated connection until the peer closes it or breaks the protocol.
/// A heartbeat connection stays on the daemon's runtime; any other (copies, Gets) moves
/// to the partner-copy threads at their priority.
pub(crate) async fn serve(shared: Arc<Shared>, mut conn: Conn) {
    let peer = conn.peer().to_string();
    let first = match conn.recv().await {
        Ok(Some(m)) => m,
        Ok(None) => return,
        Err(e) => return finish(&shared, &peer, Err(e)),
    };
    if matches!(first, Msg::Heartbeat) {
        let r = serve_inner(&shared, &mut conn, Some(first)).await;
        return finish(&shared, &peer, r);
    }
    let copies = shared.copies.clone();
    copies.spawn(async move {
        let r = serve_inner(&shared, &mut conn, Some(first)).await;
        finish(&shared, &peer, r)
    });
}

/// The end of a connection: a peer disconnected for breaking the protocol is logged at
/// most once per peer per 10 s (the rest counted, [`ratelimit`]).
fn finish(shared: &Shared, peer: &str, r: Result<(), NodeError>) {
    match r {
        Ok(()) => tracing::debug!("peer {peer}: connection closed"),
        Err(e) => warn(
            shared,
            peer,
            "disconnections",
            format!("peer {peer}: disconnected: {e}"),
        ),
    }
}

/// A warning about `peer`, at most one line of this kind per peer per 10 s.
fn warn(shared: &Shared, peer: &str, kind: &'static str, line: String) {
    ratelimit::peer_warn(&shared.cfg.node_id, peer, kind, &line);
}

async fn serve_inner(shared: &Arc<Shared>, conn: &mut Conn, mut first: Option<Msg>) -> Result<(), NodeError> {
    let peer = conn.peer().to_string();
    let store = shared.store.clone();
    let mut incoming: Option<Incoming> = None;
    // The chunk size the copy in progress announced (its chunks are at most that long).
    let mut chunk_cap = 0u32;
    loop {
        let msg = match first.take() {
            Some(m) => m,
            None => match conn.recv().await? {
                Some(m) => m,
                None => break,
            },
        };
        match msg {
            Msg::Heartbeat => conn.send(Msg::Heartbeat).await?,
            Msg::PutBegin {
                path,
                size,
                mtime_ns,
                chunk_size,
                generation,
            } => {
                let path = check_path(&peer, &path)?;
                incoming = None;
                if !shared.may_hold_for(&peer) {
                    shared.counters.lock().expect("counters").copies_refused_in += 1;
                    let e = NodeError::Refused {
                        peer: peer.clone(),
                        what: format!(
                            "{} is not a partner of {peer} in the cluster plan (nor one of its replacements)",
                            shared.cfg.node_id
                        ),
                        errno: libc::EACCES,
                    };
                    tracing::warn!("peer {peer}: no partner copy of {path}: {e}");
                    conn.send(nack(&e)).await?;
                    continue;
                }
                chunk_cap = if chunk_size == 0 {
                    ckptfs_transport::frame::DEFAULT_MAX_CHUNK
                } else {
                    chunk_size
                };
                match Incoming::begin(&store, &peer, &path, size, mtime_ns, &shared.quota) {
                    Ok(inc) => {
                        incoming = Some(inc.with_generation(generation));
                        conn.send(Msg::Ack).await?;
                    }
                    Err(e) => {
                        warn(
                            shared,
                            &peer,
                            "copies refused",
                            format!("peer {peer}: no partner copy of {path}: {e}"),
                        );
                        conn.send(nack(&e)).await?;
                    }
                }
            }
            Msg::Chunk { offset, crc, len } => {
                let Some(inc) = incoming.as_mut() else {
                    return Err(protocol(&peer, "chunk outside a copy"));
                };
                if len > chunk_cap {
                    return Err(protocol(
                        &peer,
                        &format!("chunk of {len} bytes, the copy announced chunks of {chunk_cap}"),
                    ));
                }
                if inc.accept(offset, len)? == Take::Skip {
                    conn.skip_chunk().await?;
                    continue;
                }
                // The bytes land straight in the copy's chunks (ENOSPC: refused).
                let mut landing = match inc.land(offset, len) {
                    Ok(l) => l,
                    Err(e) => {
                        conn.skip_chunk().await?;
                        warn(
                            shared,
                            &peer,
                            "copies refused",
                            format!("peer {peer}: no partner copy: {e}"),
                        );
                        inc.fail();
                        conn.send(nack(&e)).await?;
                        continue;
                    }
                };
                // No per-chunk answer: the sender streams; only a refusal goes back.
                let good = match conn.chunk_into(&mut Sink(&mut landing)).await {
                    // A chunk could not be taken as the bytes arrived (the store filled
                    // up meanwhile): the copy is refused, as at its start.
                    Err(_) if landing.failed().is_some() => {
                        let e = NodeError::store(
                            format!("partner copy of {}", inc.path()),
                            ckptfs_store::StoreError::NoSpace,
                        );
                        tracing::warn!("peer {peer}: no partner copy: {e}");
                        drop(landing);
                        inc.fail();
                        conn.send(nack(&e)).await?;
                        // The rest of the chunk is still on the wire: the connection ends.
                        return Ok(());
                    }
                    r => r?,
                };
                if !good {
                    // Refused, nothing of it published; the sender sends it again.
                    warn(
                        shared,
                        &peer,
                        "chunks refused",
                        format!(
                            "peer {peer}: the chunk at {offset} failed its CRC32C check: asking for it again"
                        ),
                    );
                    drop(landing);
                    inc.refused(offset);
                    shared.counters.lock().expect("counters").chunks_refused += 1;
                    conn.send(Msg::Resend { offset }).await?;
                    continue;
                }
                if let Err(e) = inc.commit(landing, crc) {
                    warn(
                        shared,
                        &peer,
                        "copies refused",
                        format!("peer {peer}: no partner copy: {e}"),
                    );
                    inc.fail();
                    conn.send(nack(&e)).await?;
                }
            }
            Msg::PutEnd => {
                let Some(inc) = incoming.as_ref() else {
                    return Err(protocol(&peer, "end outside a copy"));
                };
                match inc.state() {
                    // Already answered (the Nack): the copy is dropped.
                    InState::Failed => incoming = None,
                    // Answered by the Resend: the sender sends again from there.
                    InState::WaitResend(_) => {}
                    InState::Receiving => match incoming.take().expect("checked").finish() {
                        Ok(()) => {
                            shared.counters.lock().expect("counters").copies_received += 1;
                            conn.send(Msg::Ack).await?;
                        }
                        Err(e) => conn.send(nack(&e)).await?,
                    },
                }
            }
            Msg::Delete { path, generation } => {
                let path = check_path(&peer, &path)?;
                match partner_store::remove_up_to(&store, &peer, &path, generation) {
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
                if let Some(req) = crate::job_files::parse(&body) {
                    crate::job_files::serve(&store, &shared.cfg.node_id, &req, conn).await?;
                    continue;
                }
                let reply = crate::datasets::answer_async(shared, body).await;
                conn.send(Msg::QueryReply(reply)).await?;
            }
            Msg::Erasure(body) => {
                crate::erasure::serve(shared, conn, body).await?;
                // An erasure exchange uses the connection to its end.
                return Ok(());
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
