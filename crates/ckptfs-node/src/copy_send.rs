//! Sending one partner copy: the connection to a partner, a request answered by an
//! acknowledgement, waiting until a partner counts as down, and the copy of one file
//! (PutBegin, the chunks straight from the store, PutEnd), for the partner-copy loop
//! ([`crate::replicate`]) and the protection of datasets ([`crate::protect`]).

use crate::levels::Identity;
use crate::shared::CopyInFlight;
use crate::shared::Shared;
use crate::source::{FileReader, ReadProblem};
use crate::throttle::Throttle;
use ckptfs_partner::peer::{request, Conn, Msg};
use ckptfs_partner::NodeError;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often a chunk refused for its CRC is sent again before the copy is given up.
const RESEND_MAX: u32 = 3;
/// Outcome of one copy to one partner.
pub(crate) enum Sent {
    /// Acknowledged: the partner lists a complete, verified copy.
    Done(u64),
    /// The partner refused it (errno, message): e.g. ENOSPC, "no partner copy".
    Refused(i32, String),
    /// The file changed or went away meanwhile: try again at the next scan.
    Changed,
}

/// The open connection to `peer`, connecting if needed.
pub(crate) async fn connection<'a>(
    shared: &Shared,
    conns: &'a mut HashMap<String, Conn>,
    peer: &str,
) -> Result<&'a mut Conn, NodeError> {
    if !conns.contains_key(peer) {
        let c = shared.connect(peer).await?;
        conns.insert(peer.to_string(), c);
    }
    Ok(conns.get_mut(peer).expect("inserted"))
}

/// Returns once `peer` counts as down (no heartbeat answer for the heartbeat period
/// times the misses allowed) and the copy in flight to it, if any, has made no progress
/// for a second: a stopped or hung peer. Never while it answers heartbeats, nor while a
/// copy to it still moves (heartbeats late on a loaded machine do not cut a working
/// transfer).
pub(crate) async fn until_down(shared: &Shared, peer: &str) {
    let progress = || {
        shared
            .in_flight
            .lock()
            .expect("in flight")
            .as_ref()
            .filter(|f| f.to == peer)
            .map(|f| f.done)
    };
    let mut last = (progress(), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = progress();
        if now != last.0 {
            last = (now, Instant::now());
        }
        if !shared.is_up(peer) && last.1.elapsed() >= Duration::from_secs(1) {
            return;
        }
    }
}

/// Copy one file to one partner: PutBegin (acknowledged: the partner has room), then
/// every chunk back to back with no per-chunk round trip (the data written to the
/// socket straight from the store), then PutEnd, answered by Ack (a complete, verified
/// copy), Resend (a chunk failed its CRC on arrival: everything from it again) or Nack.
pub(crate) async fn send_copy(
    shared: &Shared,
    conn: &mut Conn,
    to: &str,
    path: &str,
    id: Identity,
    generation: u64,
    throttle: &mut Throttle,
) -> Result<Sent, NodeError> {
    let reader = match FileReader::open(&shared.store, path) {
        Ok(r) if r.identity() == id => r,
        Ok(_) | Err(ReadProblem::Changed) | Err(ReadProblem::Gone) => return Ok(Sent::Changed),
        Err(ReadProblem::Corrupt(c)) => {
            return Ok(Sent::Refused(libc::EIO, format!("chunk {c} corrupt here")))
        }
        Err(ReadProblem::Failed(e)) => return Err(e),
    };
    let size = id.size;
    let progress = |done: u64| {
        shared.set_in_flight(Some(CopyInFlight {
            path: path.to_string(),
            to: to.to_string(),
            size,
            done,
        }))
    };
    progress(0);
    match request(
        conn,
        Msg::PutBegin {
            path: path.to_string(),
            size,
            chunk_size: 0,
            mtime_ns: id.mtime_ns,
            generation,
        },
    )
    .await
    {
        Ok(()) => {}
        Err(NodeError::Refused { errno, what, .. }) => return Ok(Sent::Refused(errno, what)),
        Err(e) => return Err(e),
    }
    let n = reader.chunks().len();
    let mut from = 0;
    let mut resends = 0u32;
    throttle.copy_starts();
    loop {
        for i in from..n {
            let w = throttle.before_chunk(&shared.store).await;
            if !w.is_zero() {
                shared.counters.lock().expect("counters").yielded += w;
            }
            let c = reader.chunks()[i];
            conn.send_chunk(c.offset, c.crc, &reader.piece(i)).await?;
            progress(c.offset + c.len as u64);
            throttle.sent(c.len).await;
        }
        // The file must not have changed while it was sent (no lock is taken).
        if !reader.unchanged() {
            return Ok(Sent::Changed);
        }
        conn.send(Msg::PutEnd).await?;
        match conn.recv().await? {
            Some(Msg::Ack) => return Ok(Sent::Done(size)),
            Some(Msg::Nack { errno, message }) => return Ok(Sent::Refused(errno, message)),
            Some(Msg::Resend { offset }) => {
                let Some(i) = reader.chunks().iter().position(|c| c.offset == offset) else {
                    return Err(NodeError::Protocol {
                        peer: to.to_string(),
                        what: format!("asks again for a chunk at {offset}, which was never sent"),
                    });
                };
                if !reader.local_chunk_ok(i) {
                    // Damaged here, or rewritten meanwhile: never sent as valid.
                    return Ok(if reader.unchanged() {
                        Sent::Refused(libc::EIO, format!("chunk {i} corrupt here"))
                    } else {
                        Sent::Changed
                    });
                }
                resends += 1;
                if resends > RESEND_MAX {
                    return Err(NodeError::Transport(format!(
                        "{to}: the chunk at {offset} of {path} failed its CRC on arrival {resends} times"
                    )));
                }
                shared.counters.lock().expect("counters").chunks_resent += 1;
                shared.peer_metrics.error(to, crate::metrics::ErrorKind::Crc);
                tracing::warn!(
                    "{to} refused the chunk at {offset} of {path} (CRC): sending from there again"
                );
                from = i;
            }
            Some(other) => {
                return Err(NodeError::Protocol {
                    peer: to.to_string(),
                    what: format!("expected the end of the copy acknowledged, got {}", other.name()),
                })
            }
            None => return Err(NodeError::Transport(format!("{to} closed the connection"))),
        }
    }
}
