//! Keeping the record of partner copies true across failures in sequence: every copy a
//! node placed is tracked until it is dropped, and a copy is listed only while its
//! holder verifiably has it.
//!
//! - **Verify** ([`verify`]): the holders of this node's copies are asked for their
//!   listing (paths, sizes, copy generations) when they come back after being down, when
//!   the heartbeat had to connect to them again (a replacement that came back before it
//!   was noticed down; its copies do not count in the backlog until verified), and
//!   every [`VERIFY_EVERY`] otherwise. A copy missing or of another version there is
//!   struck from the record, so the next pass of the copy loop sends it again (newest
//!   first): a replaced partner with an empty store is re-filled. A holder that keeps an
//!   older version of a file becomes one of the file's `stale` holders.
//! - **Stale copies** ([`drop_stale`]): after a rewrite, the holders of the older version
//!   (the planned partners, and stand-ins that took a down partner's place) are `stale`:
//!   each is sent the new version if it is a partner now, or a Delete of the older
//!   generations otherwise, and leaves the list only when it acknowledged one.
//! - **Deleted files** (`Levels::dropping`): every holder of a deleted file's copies
//!   (partners and stale ones) gets a Delete, retried while it is down, bounded by the
//!   deleted version's generation so a newer file made since under that name stays.
//!
//! Copies placed by an earlier incarnation of the node (its store and record lost) are
//! not in the record; a restore orders them by generation ([`crate::restore`]) and the
//! verify marks the older ones stale once the file is back in the store.

use crate::copy_send::connection;
use crate::levels::Levels;
use crate::partner_store::HeldFile;
use crate::shared::Shared;
use ckptfs_partner::peer::request;
use ckptfs_partner::peer::{Conn, Msg};
use ckptfs_partner::NodeError;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// How often the holders of this node's copies are asked what they hold when nothing
/// else prompts it (a holder coming back up is asked at once).
pub const VERIFY_EVERY: Duration = Duration::from_secs(10);

/// Everything `peer` holds of this node's files, by path. The listing is bounded by
/// what this node's store could hold (`ListBounds::for_store`, as a restore's): a holder
/// that never stops saying "more" is an error after that many pages.
async fn listing(
    conn: &mut Conn,
    peer: &str,
    store: &ckptfs_store::Store,
) -> Result<BTreeMap<String, HeldFile>, NodeError> {
    let mut check = ckptfs_partner::list_bounds::PageCheck::new(
        peer,
        ckptfs_partner::list_bounds::ListBounds::for_store(store),
    );
    loop {
        conn.send(Msg::List {
            after: check.after().to_string(),
        })
        .await?;
        match conn.recv().await? {
            Some(Msg::Listing { files, more }) => {
                if check.take(files, more)? {
                    return Ok(check
                        .into_files()
                        .into_iter()
                        .map(|f| (f.path.clone(), f))
                        .collect());
                }
            }
            Some(other) => {
                return Err(NodeError::Protocol {
                    peer: peer.to_string(),
                    what: format!("expected a listing, got {}", other.name()),
                })
            }
            None => return Err(NodeError::Transport(format!("{peer} closed the connection"))),
        }
    }
}

/// Ask `peer` what it holds of this node's files and correct the record: copies it
/// does not hold (or holds of another version) are struck from `partners` (the copy
/// loop sends them again); an older version it still holds makes it a stale holder.
/// Returns whether the record changed.
pub(crate) async fn verify(
    shared: &Shared,
    conns: &mut HashMap<String, Conn>,
    levels: &mut Levels,
    peer: &str,
) -> Result<bool, NodeError> {
    let conn = connection(shared, conns, peer).await?;
    let listed = tokio::select! {
        r = listing(conn, peer, &shared.store) => r,
        _ = crate::copy_send::until_down(shared, peer) => {
            Err(NodeError::Transport(format!("{peer} stopped answering heartbeats")))
        }
    };
    let held = match listed {
        Ok(h) => h,
        Err(e) => {
            conns.remove(peer);
            return Err(e);
        }
    };
    let mut changed = false;
    let mut struck = 0u64;
    for (path, rec) in levels.files.iter_mut() {
        let here = held.get(path);
        let current = here.is_some_and(|h| h.generation == rec.generation && h.size == rec.identity.size);
        if rec.partners.iter().any(|p| p == peer) && !current {
            rec.partners.retain(|p| p != peer);
            struck += 1;
            changed = true;
            tracing::warn!(
                "{peer} no longer holds the copy of {path}{}: it will be sent again",
                match here {
                    Some(h) => format!(" (it holds generation {}, not {})", h.generation, rec.generation),
                    None => String::new(),
                }
            );
        }
        if let Some(h) = here {
            if !current && h.generation < rec.generation && !rec.stale.iter().any(|p| p == peer) {
                rec.stale.push(peer.to_string());
                changed = true;
            }
        }
    }
    for h in held.values() {
        levels.saw_generation(h.generation);
    }
    if struck > 0 {
        shared.counters.lock().expect("counters").copies_lost += struck;
    }
    Ok(changed)
}

/// What [`drop_stale`] did.
#[derive(Debug, Default)]
pub(crate) struct Dropped {
    /// A connection was used.
    pub used: bool,
    /// A holder that is up could not be reached or refused: try again.
    pub pending: bool,
    /// The record changed.
    pub dirty: bool,
}

/// Send the Deletes the record owes: the copies of deleted files, and the older
/// versions held by stale holders that are not partners now (a partner gets the new
/// version instead). Holders that are down are left for later.
pub(crate) async fn drop_stale(
    shared: &Shared,
    conns: &mut HashMap<String, Conn>,
    levels: &mut Levels,
    partners_now: &[String],
) -> Dropped {
    let mut d = Dropped::default();
    let up = |n: &str| shared.is_up(n);
    let mut jobs: Vec<(String, String, u64)> = Vec::new();
    for (path, drop) in &levels.dropping {
        for n in &drop.nodes {
            jobs.push((path.clone(), n.clone(), drop.generation));
        }
    }
    for (path, rec) in levels.files.iter_mut() {
        // A stale holder that holds the current version now is no longer stale.
        let before = rec.stale.len();
        rec.stale.retain(|n| !rec.partners.contains(n));
        d.dirty |= rec.stale.len() != before;
        for n in &rec.stale {
            if !partners_now.contains(n) {
                jobs.push((path.clone(), n.clone(), rec.generation.saturating_sub(1)));
            }
        }
    }
    for (path, node, generation) in jobs {
        if !up(&node) {
            continue;
        }
        d.used = true;
        let r = match connection(shared, conns, &node).await {
            Ok(c) => {
                let req = request(
                    c,
                    Msg::Delete {
                        path: path.clone(),
                        generation,
                    },
                );
                tokio::select! {
                    r = req => r,
                    _ = crate::copy_send::until_down(shared, &node) => {
                        Err(NodeError::Transport(format!("{node} stopped answering heartbeats")))
                    }
                }
            }
            Err(e) => Err(e),
        };
        match r {
            Ok(()) => {
                tracing::info!("dropped the copy of {path} (generation {generation} or older) on {node}");
                if let Some(drop) = levels.dropping.get_mut(&path) {
                    drop.nodes.retain(|n| *n != node);
                    if drop.nodes.is_empty() {
                        levels.dropping.remove(&path);
                    }
                }
                if let Some(rec) = levels.files.get_mut(&path) {
                    rec.stale.retain(|n| *n != node);
                }
                d.dirty = true;
            }
            Err(e) => {
                conns.remove(&node);
                d.pending = true;
                tracing::warn!("drop the copy of {path} on {node}: {e}");
            }
        }
    }
    d
}

/// Deletes still owed: holders of deleted files' copies, and stale holders of older
/// versions that are not partners now (`ckptfs node status`: `pending_drops`).
pub(crate) fn owed_drops(levels: &Levels, partners_now: &[String]) -> u64 {
    let dropping: usize = levels.dropping.values().map(|d| d.nodes.len()).sum();
    let stale: usize = levels
        .files
        .values()
        .map(|r| r.stale.iter().filter(|n| !partners_now.contains(n)).count())
        .sum();
    (dropping + stale) as u64
}

/// Files whose current version has fewer than `copies` partner copies, and their bytes
/// (the re-protection backlog `ckptfs node status` shows). Copies on an `unverified`
/// holder (connected again since its copies were last verified: maybe a replacement)
/// do not count.
pub(crate) fn backlog(
    levels: &Levels,
    copies: usize,
    wanted: &[&String],
    unverified: &[String],
) -> (u64, u64) {
    let mut files = 0;
    let mut bytes = 0;
    for path in wanted {
        if let Some(rec) = levels.files.get(*path) {
            if rec.partners.iter().filter(|p| !unverified.contains(p)).count() < copies {
                files += 1;
                bytes += rec.identity.size;
            }
        }
    }
    (files, bytes)
}
