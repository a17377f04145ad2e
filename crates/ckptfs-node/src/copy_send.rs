//! Sending partner copies: the connection to a partner for requests answered by an
//! acknowledgement, waiting until a partner counts as down, and the copy of one file,
//! for the partner-copy loop ([`crate::replicate`]) and the protection of datasets
//! ([`crate::protect`]).
//!
//! A copy is a job of the level crate's mover, node store to partner
//! ([`ckptfs_level::Mover`], [`StoreLevel`] → [`PartnerLevel`]): one chunk at a time
//! straight from reader to writer (a window of 1), so the store's shared ranges
//! ([`ckptfs_level::IoPart::Shared`]) are handed to the partner writer's vectored send
//! and never copied in this process; the daemon's pacing ([`CopyPace`]: stepping back for
//! the application's writes, the bandwidth cap) is the mover's rate limit, its progress
//! the daemon's copy in flight. The mover runs on a blocking thread of the partner-copy
//! runtime (at the partner priority).

use crate::levels::Identity;
use crate::shared::{CopyInFlight, Shared};
use crate::throttle::CopyPace;
use ckptfs_level::{Level, LevelError, MoveOptions, Mover};
use ckptfs_partner::peer::Conn;
use ckptfs_partner::{NodeError, PartnerLevel};
use ckptfs_store::level::StoreLevel;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a copy refused on arrival for a chunk's CRC is sent again before it is
/// given up.
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

/// The partner copies' two ends and pacing: the node store as a level, one
/// [`PartnerLevel`] per partner (its own connection), the [`CopyPace`] shared by every
/// copy.
pub(crate) struct Copier {
    local: Arc<StoreLevel>,
    partners: HashMap<String, Arc<PartnerLevel>>,
    pace: Arc<CopyPace>,
}

impl Copier {
    pub(crate) fn new(shared: &Arc<Shared>) -> Result<Copier, NodeError> {
        let local = StoreLevel::new(&shared.store)
            .map_err(|e| NodeError::Invalid(format!("the store as a level: {e}")))?;
        let on_wait = {
            let shared = Arc::downgrade(shared);
            Box::new(move |w: Duration| {
                if let Some(s) = shared.upgrade() {
                    s.counters.lock().expect("counters").yielded += w;
                }
            })
        };
        Ok(Copier {
            local: Arc::new(local),
            partners: HashMap::new(),
            pace: Arc::new(CopyPace::new(
                shared.cfg.max_bw,
                &shared.store,
                shared.cfg.writer_yield,
                on_wait,
            )),
        })
    }

    /// The daemon wrote into the store itself (its levels record): not an
    /// application's write to step back for.
    pub(crate) fn absorb(&self) {
        self.pace.absorb();
    }

    /// Drop the connection to `peer` (the next copy connects afresh). A level's
    /// connection is a blocking socket (no runtime of its own): closing it does not
    /// block the replicator's task.
    pub(crate) fn forget(&mut self, peer: &str) {
        self.partners.remove(peer);
    }

    /// Drop every connection.
    pub(crate) fn clear(&mut self) {
        self.partners.clear();
    }

    /// The level of `peer`, connected.
    pub(crate) async fn level(
        &mut self,
        shared: &Shared,
        peer: &str,
    ) -> Result<Arc<PartnerLevel>, NodeError> {
        if let Some(l) = self.partners.get(peer) {
            return Ok(l.clone());
        }
        let (cluster, me, p) = (
            shared.cfg.cluster.clone(),
            shared.cfg.node_id.clone(),
            peer.to_string(),
        );
        let l = tokio::task::spawn_blocking(move || -> Result<PartnerLevel, LevelError> {
            let l = PartnerLevel::new(&cluster, &me, &p)?.with_connect_timeout(Duration::from_secs(5));
            l.connect()?;
            Ok(l)
        })
        .await
        .map_err(|e| NodeError::Transport(format!("connect to {peer}: {e}")))?
        .map_err(|e| node_error(&e))?;
        let l = Arc::new(l);
        self.partners.insert(peer.to_string(), l.clone());
        Ok(l)
    }

    /// Copy version `id` of `path` to `peer` (the level of [`Copier::level`]) as its
    /// copy generation `generation`, through the mover on a blocking thread.
    pub(crate) async fn send(
        &self,
        shared: &Arc<Shared>,
        to: Arc<PartnerLevel>,
        path: &str,
        id: Identity,
        generation: u64,
    ) -> Result<Sent, NodeError> {
        let (local, pace, shared2) = (self.local.clone(), self.pace.clone(), shared.clone());
        let path = path.to_string();
        tokio::task::spawn_blocking(move || copy_one(&shared2, &local, &to, &pace, &path, id, generation))
            .await
            .map_err(|e| NodeError::Transport(format!("the copy's thread: {e}")))?
    }
}

/// The daemon's error for a level's (its own when the partner level sent one).
fn node_error(e: &LevelError) -> NodeError {
    match e.backend_ref::<NodeError>() {
        Some(NodeError::Refused { peer, what, errno }) => NodeError::Refused {
            peer: peer.clone(),
            what: what.clone(),
            errno: *errno,
        },
        _ => NodeError::Transport(e.to_string()),
    }
}

/// One copy: StoreLevel → PartnerLevel through a mover (window 1, the daemon's pacing
/// as its limit, its progress as the copy in flight); a copy refused on arrival for a
/// chunk's CRC (damaged on the wire) is sent again, at most [`RESEND_MAX`] times.
fn copy_one(
    shared: &Arc<Shared>,
    local: &StoreLevel,
    to: &PartnerLevel,
    pace: &Arc<CopyPace>,
    path: &str,
    id: Identity,
    generation: u64,
) -> Result<Sent, NodeError> {
    let peer = to.peer().to_string();
    let mut resends = 0u32;
    loop {
        pace.copy_starts();
        shared.set_in_flight(Some(CopyInFlight {
            path: path.to_string(),
            to: peer.clone(),
            size: id.size,
            done: 0,
        }));
        let reader = match local.get(path) {
            Ok(r) => r,
            Err(e) => return classify(e, &peer, path),
        };
        let v = &reader.stored().version;
        if (v.ino, v.generation, v.size, v.mtime_ns) != (id.ino, id.generation, id.size, id.mtime_ns) {
            return Ok(Sent::Changed);
        }
        let mut src = reader.stored().clone();
        src.version.serial = generation;
        let writer = match to.put(&src) {
            Ok(w) => w,
            Err(e) => return classify(e, &peer, path),
        };
        let mover = Mover::new(MoveOptions {
            window: 1,
            streams: 1,
            retries: 0,
            limiter: Some(pace.clone()),
            progress: Some(in_flight(shared, path, &peer, id.size)),
            ..MoveOptions::default()
        });
        match mover.copy_open(reader, writer, (local.meter(), to.meter())) {
            Ok(t) => return Ok(Sent::Done(t.bytes)),
            Err(e) if matches!(e.backend_ref::<NodeError>(), Some(NodeError::BadChunk { .. })) => {
                resends += 1;
                if resends > RESEND_MAX {
                    return Err(NodeError::Transport(format!(
                        "{peer}: a chunk of {path} failed its CRC on arrival {resends} times"
                    )));
                }
                shared.counters.lock().expect("counters").chunks_resent += 1;
                shared.peer_metrics.error(&peer, crate::metrics::ErrorKind::Crc);
                tracing::warn!("{peer} refused a chunk of {path} (CRC): sending the copy again ({e})");
            }
            Err(e) => return classify(e, &peer, path),
        }
    }
}

/// The mover's progress as the daemon's copy in flight (status, and the down-detection
/// of [`until_down`]).
fn in_flight(shared: &Arc<Shared>, path: &str, to: &str, size: u64) -> ckptfs_level::mover::ProgressFn {
    let (shared, path, to) = (shared.clone(), path.to_string(), to.to_string());
    Arc::new(move |p: &ckptfs_level::Progress| {
        shared.set_in_flight(Some(CopyInFlight {
            path: path.clone(),
            to: to.clone(),
            size,
            done: p.file_bytes,
        }))
    })
}

/// What a failed copy means to the loop: the file changed or went away (copy it at the
/// next scan), refused (by the partner: its errno and message; by this store: a chunk
/// damaged here is never sent as valid), or an error of the transfer.
fn classify(e: LevelError, peer: &str, path: &str) -> Result<Sent, NodeError> {
    match &e {
        LevelError::Changed(_) | LevelError::NotFound { .. } => Ok(Sent::Changed),
        _ if e.errno() == libc::ENOENT => Ok(Sent::Changed),
        LevelError::Corrupt { chunk, .. } => {
            Ok(Sent::Refused(libc::EIO, format!("chunk {chunk} corrupt here")))
        }
        _ => match e.backend_ref::<NodeError>() {
            Some(NodeError::Refused { errno, what, .. }) => Ok(Sent::Refused(*errno, what.clone())),
            _ => Err(NodeError::Transport(format!("copy of {path} to {peer}: {e}"))),
        },
    }
}
