//! Partner copies out: the daemon's loop that sends every complete file of the node
//! store to the node's partners, drops the copies of deleted files and re-sends
//! rewritten ones, and records what the partners acknowledged ([`Levels`]).
//!
//! One file is sent at a time, newest first, each copy a job of the level crate's mover
//! from the node store to the partner's level ([`crate::copy_send::Copier`]): its chunks
//! back to back straight from the store (no per-chunk round trip, no buffer: the
//! daemon's memory does not grow with the file).
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
//!
//! The sending of one copy (and the connections, requests and down-detection the
//! protection of datasets shares) is in [`crate::copy_send`]; the pacing of copies
//! behind the application's writes ([`crate::throttle::CopyPace`], the mover's rate
//! limit) in [`crate::throttle`].

use crate::copy_send::{until_down, Copier, Sent};
use crate::levels::{FileLevels, Identity, Levels};
use crate::shared::Shared;
use crate::source::scan;
use ckptfs_partner::peer::Conn;
use ckptfs_partner::NodeError;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

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

/// Connections unused for this long are reopened (the peer's read timeout is 30 s).
const IDLE_MAX: Duration = Duration::from_secs(10);
/// A scan at least this often even when nothing seems to have changed (a safety net
/// for changes the gate does not see).
const FULL_PASS_MAX: Duration = Duration::from_secs(1);

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
    let mut copier = match Copier::new(&shared) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("no partner copies: {e}");
            return;
        }
    };
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
            save(&shared, &levels, &copier);
            settled = None;
        }
        // The partner closes a connection idle for its read timeout (30 s): start afresh
        // after a quiet period instead of failing a copy on a dead connection.
        if last_used.elapsed() > IDLE_MAX {
            conns.clear();
            copier.clear();
        }
        // Read before the scan: a change made during the pass moves it again.
        let seq = shared.store.change_seq();
        let partners = shared.partners();
        let quiet = settled
            .as_ref()
            .is_some_and(|s| s.seq == seq && s.partners == partners && s.at.elapsed() < FULL_PASS_MAX);
        if !quiet {
            settled = None;
            match pass(&shared, &partners, &mut conns, &mut levels, &mut copier).await {
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
    copier: &mut Copier,
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
        save(shared, levels, copier);
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
            let to = match copier.level(shared, p).await {
                Ok(l) => l,
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
                r = copier.send(shared, to, path, *id, generation) => r,
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
                    save(shared, levels, copier);
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
                    save(shared, levels, copier);
                    shared.counters.lock().expect("counters").copies_refused += 1;
                    shared.peer_metrics.error(p, crate::metrics::ErrorKind::Refused);
                    tracing::warn!("no partner copy of {path} on {p}: {msg} (errno {errno})");
                }
                Ok(Sent::Changed) => {
                    // The half copy was dropped by the partner with the writer's connection.
                    pending = true;
                    shared.counters.lock().expect("counters").changed_during_copy += 1;
                }
                Err(e) => {
                    // A copy cut by a hung partner may still hold its level: a new one.
                    copier.forget(p);
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

fn save(shared: &Shared, levels: &Levels, copier: &Copier) {
    if let Err(e) = levels.save(&shared.store) {
        tracing::warn!("{e}");
    }
    // The record is written through a file handle: not an application's write.
    copier.absorb();
}
