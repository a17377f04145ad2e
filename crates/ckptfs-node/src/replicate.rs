//! Partner copies out: the daemon's loop that sends every complete file of the node
//! store to the node's partners, drops the copies of deleted files and re-sends
//! rewritten ones, and records what the partners acknowledged ([`Levels`]).
//!
//! One file is sent at a time, its chunks back to back straight from the store (no
//! per-chunk round trip, no buffer: the daemon's memory does not grow with the file).
//! The loop scans the store's listing every `scan_interval`, unless the last scan left
//! nothing to do and nothing has changed since: same store change sequence
//! ([`Store::change_seq`](ckptfs_store::Store::change_seq), one atomic load), same
//! partners, no file still being written. A scan reads every inode slot of the store
//! (about 2 ms for a store of a few GiB); on the partner-copy thread, which also
//! receives the partners' copies, scans every 10 ms took a fifth of that thread.
//! At least one full scan is made every [`FULL_PASS_MAX`] all the same.
//!
//! A file's last writer closing it ends the wait at once: a thread of the daemon
//! (`close-watch`) sleeps on the store's close count (a futex in the segment,
//! [`Store::wait_for_close`](ckptfs_store::Store::wait_for_close)) and wakes this loop,
//! so a copy starts right after the close instead of up to `scan_interval` (200 ms)
//! later; `bench partner` measures copies from the close.

use crate::daemon::Shared;
use crate::error::NodeError;
use crate::levels::{FileLevels, Identity, Levels};
use crate::node_status::CopyInFlight;
use crate::peer::{Conn, Msg};
use crate::source::{scan, FileReader, ReadProblem};
use ckptfs_store::Store;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
// The throttle keeps tokio's clock (the same as std's, except in tests with paused time).
use tokio::sync::Notify;
use tokio::time::Instant as TInstant;

/// After waking the copy loop, the close watcher lets closes go unwatched this long:
/// a burst of closes (many small files) then costs the writers at most one futex wake
/// each such period, and the loop one pass.
const CLOSE_DEBOUNCE: Duration = Duration::from_millis(2);

/// Start the thread that turns a last writer's close into a wake-up of `closed`. It
/// ends within a second of the copy loop (the other holder of `closed`) going away.
fn spawn_close_watch(shared: Weak<Shared>, closed: Arc<Notify>) {
    let run = move || {
        let Some(mut seen) = shared.upgrade().map(|s| s.store.close_seq()) else {
            return;
        };
        while Arc::strong_count(&closed) > 1 {
            let Some(store) = shared.upgrade().map(|s| s.store.clone()) else {
                return;
            };
            let now = store.wait_for_close(seen, Duration::from_secs(1));
            if now != seen {
                seen = now;
                closed.notify_one();
                std::thread::sleep(CLOSE_DEBOUNCE);
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("close-watch".into())
        .stack_size(64 << 10)
        .spawn(run)
    {
        tracing::warn!("no close watcher ({e}): partner copies start at the next scan");
    }
}

/// How often a chunk refused for its CRC is sent again before the copy is given up.
const RESEND_MAX: u32 = 3;
/// Connections unused for this long are reopened (the peer's read timeout is 30 s).
const IDLE_MAX: Duration = Duration::from_secs(10);
/// A scan at least this often even when nothing seems to have changed (a safety net
/// for changes the gate does not see).
const FULL_PASS_MAX: Duration = Duration::from_secs(1);

/// Outcome of one copy to one partner.
pub(crate) enum Sent {
    /// Acknowledged: the partner lists a complete, verified copy.
    Done(u64),
    /// The partner refused it (errno, message): e.g. ENOSPC, "no partner copy".
    Refused(i32, String),
    /// The file changed or went away meanwhile: try again at the next scan.
    Changed,
}

/// A bandwidth cap: sleeps so that the bytes sent since the start stay under the rate.
///
/// It also makes copies step back while an application writes into the store (the
/// store's write count moves, checked before every chunk sent): a copy waits until the
/// count has been still for [`STILL`], at most `yield_max` at a stretch, and after that
/// only while its time spent waiting stays below its time spent sending plus
/// `yield_max`, so a writer that never stops still leaves a copy at least half the time.
/// The count last seen is kept from one copy to the next: a copy that starts while the
/// application writes its next checkpoint waits from its first chunk. `yield_max` zero:
/// never.
pub(crate) struct Throttle {
    rate: Option<f64>,
    start: TInstant,
    bytes: u64,
    yield_max: Duration,
    seen: u64,
    /// Time waited and start of the current copy.
    waited: Duration,
    copy_start: TInstant,
}

/// How long the write count must stay still before a copy goes on.
const STILL: Duration = Duration::from_millis(2);

impl Throttle {
    pub(crate) fn new(rate: Option<f64>, store: &Store, yield_max: Duration) -> Throttle {
        Throttle {
            rate,
            start: TInstant::now(),
            bytes: 0,
            yield_max,
            seen: store.write_count(),
            waited: Duration::ZERO,
            copy_start: TInstant::now(),
        }
    }

    /// The daemon wrote into the store itself: take the count as seen.
    pub(crate) fn absorb(&mut self, store: &Store) {
        self.seen = store.write_count();
    }

    /// A copy starts (the bound on waiting is per copy).
    pub(crate) fn copy_starts(&mut self) {
        self.waited = Duration::ZERO;
        self.copy_start = TInstant::now();
    }

    /// Before a chunk is sent: wait while an application writes into `store`. Returns
    /// the time waited.
    pub(crate) async fn before_chunk(&mut self, store: &Store) -> Duration {
        if self.yield_max.is_zero() {
            return Duration::ZERO;
        }
        let t0 = TInstant::now();
        let mut now = store.write_count();
        while now != self.seen {
            self.seen = now;
            let waited = self.waited + t0.elapsed();
            let sending = self.copy_start.elapsed().saturating_sub(waited);
            if t0.elapsed() >= self.yield_max || waited >= sending + self.yield_max {
                break;
            }
            tokio::time::sleep(STILL).await;
            now = store.write_count();
        }
        let w = t0.elapsed();
        self.waited += w;
        w
    }

    pub(crate) async fn sent(&mut self, n: usize) {
        let Some(rate) = self.rate else { return };
        self.bytes += n as u64;
        let due = Duration::from_secs_f64(self.bytes as f64 / rate);
        let el = self.start.elapsed();
        if due > el {
            tokio::time::sleep(due - el).await;
        }
        // Forget old history so an idle period does not allow a burst.
        if el > Duration::from_secs(2) && due + Duration::from_millis(100) < el {
            self.start = TInstant::now();
            self.bytes = 0;
        }
    }
}

/// What a pass did.
#[derive(Debug, Default)]
struct Passed {
    /// A partner connection was used.
    used: bool,
    /// Something is left to do without the store changing: a file still being written,
    /// a partner not reached, a copy failed or abandoned (the file changed meanwhile).
    pending: bool,
    /// A file got its first record (new, or brought back by a restore): other nodes may
    /// hold older copies of it placed by an earlier incarnation of this node.
    new_records: bool,
}

/// The state in which the last pass left nothing to do.
struct Settled {
    seq: u64,
    partners: Vec<String>,
    at: Instant,
}

/// The partner-copy loop; returns when the task is aborted.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut conns: HashMap<String, Conn> = HashMap::new();
    let mut levels = Levels::load(&shared.store);
    levels.node = shared.cfg.node_id.clone();
    let mut throttle = Throttle::new(shared.cfg.max_bw, &shared.store, shared.cfg.writer_yield);
    let mut last_used = Instant::now();
    let mut settled: Option<Settled> = None;
    let closed = Arc::new(Notify::new());
    spawn_close_watch(Arc::downgrade(&shared), closed.clone());
    // Holders are asked what they hold at start, when they come back up, and every
    // VERIFY_EVERY (protect.rs).
    let mut was_up: BTreeMap<String, bool> = BTreeMap::new();
    let mut last_verify: Option<Instant> = None;
    // Every node that answers heartbeats is asked (not only the holders in the record) at
    // start, every VERIFY_EVERY, and after files got their first record: copies an
    // earlier incarnation of this node placed (its record lost with its store) are found
    // so, and become stale holders, dropped like any other (failure found by the fault
    // campaign: a file restored after a loss, then removed, came back at the next loss
    // from a stand-in copy the lost incarnation had placed). `need_ask`: the nodes still
    // to be asked since the last such event.
    let others: Vec<String> = shared
        .cfg
        .cluster
        .nodes
        .iter()
        .map(|n| n.id.clone())
        .filter(|n| *n != shared.cfg.node_id)
        .collect();
    let mut need_ask: std::collections::BTreeSet<String> = others.iter().cloned().collect();
    loop {
        let due = last_verify.is_none_or(|t| t.elapsed() >= crate::protect::VERIFY_EVERY);
        let mut ask: Vec<String> = Vec::new();
        for n in &others {
            let up = shared.is_up(n);
            // Back: noticed down before, or connected again since the last verify (a
            // replacement that came back before it was noticed down).
            let back = up && (!was_up.get(n).copied().unwrap_or(false) || shared.unverified().contains(n));
            was_up.insert(n.clone(), up);
            let holds = levels
                .files
                .values()
                .any(|r| r.partners.contains(n) || r.stale.contains(n));
            if (up && (back || due) && holds) || (shared.heard(n) && (due || need_ask.contains(n))) {
                ask.push(n.clone());
            }
        }
        if due {
            last_verify = Some(Instant::now());
        }
        let mut verified_change = false;
        // A verify may turn copies into counted ones (the backlog): a pass follows.
        if !ask.is_empty() {
            settled = None;
        }
        for n in ask {
            // Asked once per event, answered or not (a node whose listing fails is asked
            // again at the next VERIFY_EVERY, not at every scan).
            need_ask.remove(&n);
            let connects = shared
                .connects
                .lock()
                .expect("connects")
                .get(&n)
                .copied()
                .unwrap_or(0);
            match crate::protect::verify(&shared, &mut conns, &mut levels, &n).await {
                Ok(changed) => {
                    verified_change |= changed;
                    shared.verified.lock().expect("verified").insert(n, connects);
                }
                Err(e) => tracing::warn!("verify the copies held by {n}: {e}"),
            }
        }
        // Owed while a node that answers is still to be asked (one that does not is asked
        // when it is back).
        shared.counters.lock().expect("counters").verify_owed = need_ask.iter().any(|n| shared.heard(n));
        // A peer holding none of this node's copies has nothing to verify.
        for n in shared.unverified() {
            let holds = levels
                .files
                .values()
                .any(|r| r.partners.contains(&n) || r.stale.contains(&n));
            if !holds {
                let connects = shared
                    .connects
                    .lock()
                    .expect("connects")
                    .get(&n)
                    .copied()
                    .unwrap_or(0);
                shared.verified.lock().expect("verified").insert(n, connects);
            }
        }
        if verified_change {
            save(&shared, &levels, &mut throttle);
            settled = None;
        }
        // The partner closes a connection idle for its read timeout (30 s): start afresh
        // after a quiet period instead of failing a copy on a dead connection.
        if last_used.elapsed() > IDLE_MAX {
            conns.clear();
        }
        // Read before the scan: a change made during the pass moves it again.
        let seq = shared.store.change_seq();
        let partners = shared.partners();
        let quiet = settled
            .as_ref()
            .is_some_and(|s| s.seq == seq && s.partners == partners && s.at.elapsed() < FULL_PASS_MAX);
        if !quiet {
            settled = None;
            match pass(&shared, &partners, &mut conns, &mut levels, &mut throttle).await {
                Ok(p) => {
                    shared.counters.lock().expect("counters").changes_seen = seq;
                    if p.new_records {
                        need_ask.extend(others.iter().cloned());
                        shared.counters.lock().expect("counters").verify_owed = true;
                    }
                    if p.used {
                        last_used = Instant::now();
                    }
                    if !p.pending {
                        settled = Some(Settled {
                            seq,
                            partners,
                            at: Instant::now(),
                        });
                    }
                }
                Err(e) => tracing::warn!("partner copies: {e}"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(shared.cfg.scan_interval) => {}
            _ = closed.notified() => {}
        }
    }
}

/// One scan: deletions, then copies of what the partners lack.
async fn pass(
    shared: &Arc<Shared>,
    partners: &[String],
    conns: &mut HashMap<String, Conn>,
    levels: &mut Levels,
    throttle: &mut Throttle,
) -> Result<Passed, NodeError> {
    let mut used = false;
    // The dataset records are read before the store is listed (a file changed after
    // this read waits for the next scan).
    if let Some(p) = &shared.cfg.datasets {
        p.refresh();
    }
    let listing = scan(&shared.store);
    let mut pending = listing.writing;
    let files: BTreeMap<String, Identity> = listing.complete.into_iter().collect();
    let mut dirty = false;
    // Deleted files: every holder of a copy (partners and stale ones) is owed a Delete
    // of that version or older, retried until it acknowledged (protect::drop_stale).
    let gone: Vec<String> = levels
        .files
        .keys()
        .filter(|p| !files.contains_key(*p) && shared.store.stat(p).is_err())
        .cloned()
        .collect();
    for path in gone {
        let rec = levels.files.remove(&path).expect("listed");
        dirty = true;
        let mut holders = rec.partners;
        for n in rec.stale {
            if !holders.contains(&n) {
                holders.push(n);
            }
        }
        if !holders.is_empty() {
            let d = levels.dropping.entry(path).or_default();
            d.generation = d.generation.max(rec.generation);
            for n in holders {
                if !d.nodes.contains(&n) {
                    d.nodes.push(n);
                }
            }
        }
    }
    // Rewritten files: the holders of the older version are stale (each gets the new
    // version or a Delete of the older ones), the new version a new generation.
    for (path, id) in &files {
        let rewritten = levels
            .files
            .get(path)
            .is_some_and(|r| r.identity != *id || r.generation == 0);
        if rewritten {
            let generation = levels.next_generation();
            let rec = levels.files.get_mut(path).expect("checked");
            if rec.identity != *id {
                for n in std::mem::take(&mut rec.partners) {
                    if !rec.stale.contains(&n) {
                        rec.stale.push(n);
                    }
                }
                rec.refused.clear();
            }
            rec.identity = *id;
            rec.generation = generation;
            dirty = true;
        }
    }
    let dropped = crate::protect::drop_stale(shared, conns, levels, partners).await;
    used |= dropped.used;
    pending |= dropped.pending;
    shared.counters.lock().expect("counters").pending_drops = crate::protect::owed_drops(levels, partners);
    if dirty || dropped.dirty {
        save(shared, levels, throttle);
    }
    // Newest first: the latest checkpoint is the one a restart needs.
    // With datasets, only the files their level decisions send to partners (held while
    // their dataset is open; never for a decision of memory only or PFS).
    // A held file (its dataset still open, or changed after the records were read) keeps
    // the scans going: its decision may arrive without anything else to wake the loop.
    // A skipped one (decided memory only or PFS) is settled.
    let mut queue: Vec<(&String, &Identity)> = Vec::new();
    for (path, id) in &files {
        let verdict = match &shared.cfg.datasets {
            Some(p) => p.verdict(path, id.size, id.mtime_ns),
            None => ckptfs_datasets::CopyVerdict::Copy,
        };
        match verdict {
            ckptfs_datasets::CopyVerdict::Copy => queue.push((path, id)),
            ckptfs_datasets::CopyVerdict::Hold => pending = true,
            ckptfs_datasets::CopyVerdict::Skip => {}
        }
    }
    queue.sort_by(|a, b| b.1.mtime_ns.cmp(&a.1.mtime_ns).then_with(|| a.0.cmp(b.0)));
    let mut new_records = false;
    for (path, _) in &queue {
        if !levels.files.contains_key(*path) {
            new_records = true;
            let generation = levels.next_generation();
            levels.files.insert(
                (*path).clone(),
                FileLevels {
                    identity: files[*path],
                    partners: Vec::new(),
                    refused: BTreeMap::new(),
                    generation,
                    stale: Vec::new(),
                    held: Vec::new(),
                },
            );
        }
    }
    {
        let wanted: Vec<&String> = queue.iter().map(|(p, _)| *p).collect();
        let (n, b) = crate::protect::backlog(levels, shared.plan.copies, &wanted, &shared.unverified());
        let mut c = shared.counters.lock().expect("counters");
        c.unprotected_files = n;
        c.unprotected_bytes = b;
    }
    for (path, id) in queue {
        for p in partners {
            let rec = levels.files.get_mut(path).expect("inserted");
            if rec.identity != *id || rec.partners.contains(p) || rec.refused.contains_key(p) {
                continue;
            }
            used = true;
            let conn = match connection(shared, conns, p).await {
                Ok(c) => c,
                Err(e) => {
                    pending = true;
                    shared.peer_metrics.error(p, crate::metrics::ErrorKind::Connect);
                    tracing::debug!("partner {p}: {e}");
                    continue;
                }
            };
            let started = Instant::now();
            let generation = rec.generation;
            // A partner that stops answering heartbeats (stopped, hung) mid-copy is left:
            // the copy goes to a stand-in instead of waiting on its connection.
            let sent = tokio::select! {
                r = send_copy(shared, conn, p, path, *id, generation, throttle) => r,
                _ = until_down(shared, p) => Err(NodeError::Transport(format!(
                    "{p} stopped answering heartbeats during the copy"
                ))),
            };
            match sent {
                Ok(Sent::Done(bytes)) => {
                    let secs = started.elapsed().as_secs_f64();
                    let rec = levels.files.get_mut(path).expect("inserted");
                    rec.partners.push(p.clone());
                    // It holds the new version now, not an older one.
                    rec.stale.retain(|n| n != p);
                    save(shared, levels, throttle);
                    let mut c = shared.counters.lock().expect("counters");
                    c.copies_sent += 1;
                    c.bytes_sent += bytes;
                    tracing::info!(
                        "partner copy of {path} on {p} ({bytes} bytes in {secs:.3} s, {:.2} GB/s)",
                        bytes as f64 / secs.max(1e-9) / 1e9
                    );
                }
                Ok(Sent::Refused(errno, msg)) => {
                    let rec = levels.files.get_mut(path).expect("inserted");
                    rec.refused.insert(p.clone(), msg.clone());
                    save(shared, levels, throttle);
                    shared.counters.lock().expect("counters").copies_refused += 1;
                    shared.peer_metrics.error(p, crate::metrics::ErrorKind::Refused);
                    tracing::warn!("no partner copy of {path} on {p}: {msg} (errno {errno})");
                }
                Ok(Sent::Changed) => {
                    // The half copy is dropped by the partner when the connection goes.
                    conns.remove(p);
                    pending = true;
                    shared.counters.lock().expect("counters").changed_during_copy += 1;
                }
                Err(e) => {
                    conns.remove(p);
                    pending = true;
                    shared.peer_metrics.error(p, crate::metrics::ErrorKind::Transfer);
                    tracing::warn!("partner copy of {path} to {p}: {e}");
                }
            }
            shared.set_in_flight(None);
        }
    }
    // Records of files whose current version was never sent anywhere stay (they show the
    // file has no partner copy yet).
    Ok(Passed {
        used,
        pending,
        new_records,
    })
}

fn save(shared: &Shared, levels: &Levels, throttle: &mut Throttle) {
    if let Err(e) = levels.save(&shared.store) {
        tracing::warn!("{e}");
    }
    // The record is written through a file handle: not an application's write.
    throttle.absorb(&shared.store);
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

/// Send a request and wait for its Ack; a Nack is an error.
pub(crate) async fn request(conn: &mut Conn, m: Msg) -> Result<(), NodeError> {
    conn.send(m).await?;
    match conn.recv().await? {
        Some(Msg::Ack) => Ok(()),
        Some(Msg::Nack { errno, message }) => Err(NodeError::Refused {
            peer: conn.peer().to_string(),
            what: message,
            errno,
        }),
        Some(other) => Err(NodeError::Protocol {
            peer: conn.peer().to_string(),
            what: format!("expected an acknowledgement, got {}", other.name()),
        }),
        None => Err(NodeError::Transport(format!(
            "{} closed the connection",
            conn.peer()
        ))),
    }
}

/// Copy one file to one partner: PutBegin (acknowledged: the partner has room), then
/// every chunk back to back with no per-chunk round trip (the data written to the
/// socket straight from the store), then PutEnd, answered by Ack (a complete, verified
/// copy), Resend (a chunk failed its CRC on arrival: everything from it again) or Nack.
async fn send_copy(
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

#[cfg(test)]
mod tests {
    //! The throttle's stepping back, on tokio's paused clock: the "application" below
    //! writes once per virtual millisecond, so the waits are exact whatever the load.
    use super::{Throttle, STILL};
    use ckptfs_store::{OpenFlags, Store, StoreOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn store(tag: &str) -> (Store, String) {
        let name = format!("hnd-yield-{tag}-{}", std::process::id());
        let _ = Store::destroy(&name);
        let s = Store::create(&StoreOptions {
            name: name.clone(),
            mem_size: Some(2 << 20),
            chunk_size: Some(64 << 10),
            max_files: Some(16),
            ..Default::default()
        })
        .unwrap();
        (s, name)
    }

    /// Writes 4 KiB into `/w` once per millisecond (virtual), `n` times or until `stop`.
    fn app(s: Store, n: u64, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut f = s.open("/w", OpenFlags::CREATE, 0o600).unwrap();
            for i in 0..n {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                f.pwrite(&[1u8; 4096], (i % 16) * 4096).unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            f.close().unwrap();
        })
    }

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn a_copy_waits_until_the_writes_have_stopped_for_two_ms() {
        let (s, name) = store("stop");
        let mut t = Throttle::new(None, &s, Duration::from_secs(1));
        t.copy_starts();
        assert_eq!(
            t.before_chunk(&s).await,
            Duration::ZERO,
            "nothing written: no wait"
        );
        // 50 writes, 1 ms apart (the last at 49 ms).
        let w = app(s.clone(), 50, Arc::default());
        tokio::task::yield_now().await;
        let waited = t.before_chunk(&s).await;
        assert!(waited >= 49 * MS && waited <= 49 * MS + 2 * STILL, "{waited:?}");
        w.await.unwrap();
        // The writes stopped: the next chunk goes at once.
        assert_eq!(t.before_chunk(&s).await, Duration::ZERO);
        drop(s);
        let _ = Store::destroy(&name);
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_that_never_stops_holds_a_copy_back_at_most_half_the_time() {
        let (s, name) = store("never");
        let max = 20 * MS;
        let mut t = Throttle::new(None, &s, max);
        let stop = Arc::new(AtomicBool::new(false));
        let w = app(s.clone(), u64::MAX, stop.clone());
        tokio::task::yield_now().await;
        t.copy_starts();
        let first = t.before_chunk(&s).await;
        assert!(first >= max && first <= max + STILL, "{first:?}");
        // Sending a chunk takes 5 ms here; waits after the first stretch alternate with it.
        let (mut waited, mut sending) = (first, Duration::ZERO);
        for _ in 0..40 {
            tokio::time::sleep(5 * MS).await;
            sending += 5 * MS;
            let w = t.before_chunk(&s).await;
            assert!(w <= max + STILL, "{w:?}");
            waited += w;
        }
        assert!(
            waited <= sending + max + 2 * STILL,
            "waited {waited:?}, sent {sending:?}"
        );
        assert!(
            waited >= sending / 2,
            "it did step back: {waited:?} against {sending:?}"
        );
        stop.store(true, Ordering::Relaxed);
        w.await.unwrap();
        drop(s);
        let _ = Store::destroy(&name);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_never_waits_and_the_daemons_own_writes_are_absorbed() {
        let (s, name) = store("zero");
        let mut off = Throttle::new(None, &s, Duration::ZERO);
        let mut on = Throttle::new(None, &s, Duration::from_secs(1));
        on.copy_starts();
        // The daemon's own write (its levels record), absorbed: no wait.
        let mut f = s.open("/own", OpenFlags::CREATE, 0o600).unwrap();
        f.write_all(b"record").unwrap();
        f.close().unwrap();
        on.absorb(&s);
        assert_eq!(on.before_chunk(&s).await, Duration::ZERO);
        let w = app(s.clone(), 30, Arc::default());
        tokio::task::yield_now().await;
        assert_eq!(off.before_chunk(&s).await, Duration::ZERO, "0: never steps back");
        assert!(on.before_chunk(&s).await >= 29 * MS);
        w.await.unwrap();
        drop(s);
        let _ = Store::destroy(&name);
    }
}
