//! Recovery from partners: a replacement node (empty store, same node id) asks every
//! peer daemon for the copies it holds of this node's files (List), fetches each file
//! this store lacks (Get), checks every chunk's CRC32C on arrival, and writes it into
//! the store under a temporary name, renamed into place only when complete. Each peer
//! is a [`PartnerLevel`] and the store a [`StoreLevel`]: the move is the level crate's
//! `copy`/`transfer`, the same mover the PFS restore uses. The server side of Get
//! (`send_held`) streams the held copy straight from the store.
//!
//! Order of levels (`ckptfs run --restore`, `ckptfs restore --from-peers`): a file
//! already complete in the node's own store is kept; otherwise it comes from the first
//! peer that has it (the plan's partners first); what no peer has comes from the PFS
//! (the drain's restore, run after this one by the caller).

use crate::partner_store;
use crate::source::{FileReader, ReadProblem};
use ckptfs_cluster::Cluster;
use ckptfs_level::{copy, Level};
use ckptfs_partner::partner_level::{ListBounds, PartnerLevel};
use ckptfs_partner::peer::{Conn, Msg};
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::level::StoreLevel;
use ckptfs_store::{FileKind, Store, WriteState};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Server side of Get: stream the copy of `path` held for `peer` (PutBegin, Chunk...,
/// PutEnd) straight from the store, each chunk with the CRC32C the store recorded when
/// the copy was received (the requester checks it), or a Nack if there is none.
pub(crate) async fn send_held(store: &Store, peer: &str, path: &str, conn: &mut Conn) -> Result<()> {
    let copy = partner_store::copy_path(peer, path);
    // Only a regular file is a copy: a directory of the partner namespace (`ckpt` when
    // `ckpt/a` is held) is EISDIR, never streamed as an empty file; anything else is no
    // copy.
    if let Ok(st) = store.stat(&copy) {
        let refused = match st.kind {
            FileKind::File => None,
            FileKind::Dir => Some((libc::EISDIR, "a directory, not a copy")),
            _ => Some((libc::ENOENT, "no copy")),
        };
        if let Some((errno, what)) = refused {
            return conn
                .send(Msg::Nack {
                    errno,
                    message: format!("{path}: {what}"),
                })
                .await;
        }
    }
    let reader = match FileReader::open(store, &copy) {
        Ok(r) => r,
        Err(p) => {
            let (errno, what) = match p {
                ReadProblem::Gone => (libc::ENOENT, "no copy".to_string()),
                ReadProblem::Changed => (libc::ENOENT, "no complete copy".to_string()),
                ReadProblem::Corrupt(c) => (libc::EIO, format!("chunk {c} of the copy is damaged")),
                ReadProblem::Failed(e) => (e.errno(), e.to_string()),
            };
            return conn
                .send(Msg::Nack {
                    errno,
                    message: format!("{what} of {path}"),
                })
                .await;
        }
    };
    conn.send(Msg::PutBegin {
        path: path.to_string(),
        size: reader.identity().size,
        chunk_size: u32::try_from(store.chunk_size()).unwrap_or(0),
        mtime_ns: reader.identity().mtime_ns,
        generation: crate::partner_store::generation_of(store, path),
    })
    .await?;
    for (i, c) in reader.chunks().iter().enumerate() {
        conn.send_chunk(c.offset, c.crc, &reader.piece(i)).await?;
    }
    conn.send(Msg::PutEnd).await
}

/// One file brought back.
#[derive(Debug, Clone, Serialize)]
pub struct PeerRestored {
    /// Store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// The node whose memory it came from.
    pub from: String,
    /// Seconds taken.
    pub seconds: f64,
}

/// One file that could not be brought back from any peer.
#[derive(Debug, Clone, Serialize)]
pub struct PeerFailure {
    /// Store path.
    pub path: String,
    /// What went wrong (last peer tried).
    pub error: String,
}

/// What a restore from peers did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerRestoreReport {
    /// Files brought back from a partner's memory.
    pub restored: Vec<PeerRestored>,
    /// Files already complete in this store (kept: the fastest level).
    pub present: Vec<String>,
    /// Files no peer could deliver intact.
    pub failed: Vec<PeerFailure>,
    /// Peers that could not be reached, or whose listing passed a bound and was not used
    /// (node: error, the bound named).
    pub unreachable: BTreeMap<String, String>,
    /// Older copies left alone because another holder had a newer version of the file
    /// (a stand-in or a replaced partner that missed a rewrite).
    pub superseded: Vec<PeerSuperseded>,
}

/// An older copy a restore did not take.
#[derive(Debug, Clone, Serialize)]
pub struct PeerSuperseded {
    /// Store path.
    pub path: String,
    /// The holder of the older copy.
    pub holder: String,
    /// Its copy generation.
    pub generation: u64,
    /// The generation taken (from another holder).
    pub newest: u64,
}

/// Restore this node's files under `prefix` from the peers' memory into `store` (for a
/// caller on a tokio runtime: the levels block, so the work runs on a blocking thread).
pub async fn restore_from_peers(
    cluster: &Cluster,
    node_id: &str,
    store: &Store,
    prefix: &str,
) -> Result<PeerRestoreReport> {
    let (cluster, node_id, store, prefix) = (
        cluster.clone(),
        node_id.to_string(),
        store.clone(),
        prefix.to_string(),
    );
    tokio::task::spawn_blocking(move || restore_from_peers_blocking(&cluster, &node_id, &store, &prefix))
        .await
        .map_err(|e| NodeError::Transport(format!("the restore from peers failed: {e}")))?
}

/// Restore this node's files under `prefix` from the peers' memory into `store`: each
/// peer is a [`PartnerLevel`], the store a [`StoreLevel`], and every missing file is
/// moved by the mover's [`transfer`](ckptfs_level::transfer) (`copy`: the partner's
/// reader, every chunk's CRC32C checked as it comes off the socket, into the store
/// level's writer, published under its name only when complete). Call it from a plain
/// thread, not from an async task.
pub fn restore_from_peers_blocking(
    cluster: &Cluster,
    node_id: &str,
    store: &Store,
    prefix: &str,
) -> Result<PeerRestoreReport> {
    cluster
        .node_keys(node_id)
        .map_err(|e| NodeError::Cluster(e.to_string()))?;
    cluster
        .node(node_id)
        .map_err(|e| NodeError::Cluster(e.to_string()))?;
    // The plan's partners first, then every other node (a dead partner's replacement).
    let mut order: Vec<String> = match cluster.plan() {
        Ok(p) => p.partners_of(node_id).map(|v| v.to_vec()).unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    for n in &cluster.nodes {
        if n.id != node_id && !order.contains(&n.id) {
            order.push(n.id.clone());
        }
    }
    let prefix = normalize_prefix(prefix);
    let mut rep = PeerRestoreReport::default();
    let local =
        StoreLevel::new(store).map_err(|e| NodeError::Invalid(format!("the store as a level: {e}")))?;
    // Each peer's listing (the copies it holds of this node's files, complete and
    // verified, paths checked).
    // A holder's listing is bounded by what this store could hold (failure case 35): one
    // past a bound is not used, and the restore goes on with the other holders.
    let bounds = ListBounds::for_store(store);
    // Each holder's listing carries the copy generation of every file: a file is taken
    // from the holder with the newest one (never an older version silently).
    let mut peers: Vec<(PartnerLevel, BTreeMap<String, u64>)> = Vec::new();
    for peer in order {
        let listed = PartnerLevel::new(cluster, node_id, &peer).and_then(|p| {
            let p = p.with_list_bounds(bounds);
            let files = p.list(&prefix)?;
            Ok((
                p,
                files
                    .into_iter()
                    .map(|s| (s.path, s.version.serial))
                    .collect::<BTreeMap<_, _>>(),
            ))
        });
        match listed {
            Ok(x) => peers.push(x),
            Err(e) => {
                if e.errno() == libc::EOVERFLOW {
                    tracing::warn!("restore from peers: the listing of holder {peer} is not used, going on with the other holders: {e}");
                }
                rep.unreachable.insert(peer, e.to_string());
            }
        }
    }
    let wanted: BTreeSet<String> = peers.iter().flat_map(|(_, f)| f.keys().cloned()).collect();
    for path in wanted {
        // The fastest level first: a file complete in this store is kept.
        if let Ok(st) = store.stat(&path) {
            if st.state == WriteState::Complete {
                rep.present.push(path);
                continue;
            }
        }
        let mut last_err = String::from("no peer holds it");
        let mut done = false;
        // Holders of the newest generation first (the plan's order among equals); the
        // older copies are named in the report, never taken.
        let newest = peers
            .iter()
            .filter_map(|(_, f)| f.get(&path))
            .copied()
            .max()
            .unwrap_or(0);
        for (p, files) in &peers {
            match files.get(&path) {
                Some(&g) if g < newest => rep.superseded.push(PeerSuperseded {
                    path: path.clone(),
                    holder: p.peer().to_string(),
                    generation: g,
                    newest,
                }),
                _ => {}
            }
        }
        for (p, files) in &peers {
            if files.get(&path) != Some(&newest) {
                continue;
            }
            match copy(p, &local, &path) {
                Ok(t) => {
                    rep.restored.push(PeerRestored {
                        path: path.clone(),
                        size: t.bytes,
                        from: p.peer().to_string(),
                        seconds: t.seconds,
                    });
                    done = true;
                    break;
                }
                Err(e) => last_err = format!("{}: {e}", p.peer()),
            }
        }
        if !done {
            rep.failed.push(PeerFailure {
                path,
                error: last_err,
            });
        }
    }
    Ok(rep)
}

fn normalize_prefix(p: &str) -> String {
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        "/".into()
    } else if t.starts_with('/') {
        t.into()
    } else {
        format!("/{t}")
    }
}
