//! Partner copies as a set level ([`PartnerCopies`], the first implementation of
//! [`SetProtection`]): each node's files are copied whole to its partners' memory by
//! the node daemons (docs/cluster.md), so a member's part of a dataset comes back file
//! by file from any node that holds a copy of exactly that content. The level instance
//! of a copy is `partner:NODE` (the holder); the set level's own id is `partner` (every
//! holder of the cluster).
//!
//! A replacement node's whole-store recovery ([`restore_from_peers`], what
//! [`PartnerCopies::recover_member`] runs): it asks every peer daemon for the copies it
//! holds of this node's files (List), fetches each file the destination lacks (Get),
//! checks every chunk's CRC32C on arrival, and publishes it under its name only when
//! complete. Each peer is a [`PartnerLevel`] and the destination a level: the move is
//! the level crate's `copy`, the same mover the PFS restore uses (the server side of
//! Get is the daemon's, crate `ckptfs-node`).

use crate::ask::{holders, Asker};
use crate::error::{NodeError, Result};
use crate::list_bounds::ListBounds;
use crate::partner_level::PartnerLevel;
use ckptfs_cluster::Cluster;
use ckptfs_datasets::Want;
use ckptfs_level::{
    copy, Level, LevelError, LevelId, MemberFile, MemberRecovery, Part, PartFile, Recovered, SetProtection,
    SetState,
};
use ckptfs_store::level::StoreLevel;
use ckptfs_store::Store;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The kind of the partner copies' level ids.
pub const KIND: &str = "partner";

/// The cluster's partner copies, as node `me` sees them (see the module documentation).
pub struct PartnerCopies {
    asker: Arc<Asker>,
    /// This node's store: the partner copies it holds of other nodes' files are
    /// looked up here, and restores into it are bounded by its size.
    store: Store,
}

impl PartnerCopies {
    pub(crate) fn new(asker: Arc<Asker>, store: Store) -> PartnerCopies {
        PartnerCopies { asker, store }
    }

    fn unsupported(&self, what: &str) -> LevelError {
        LevelError::backend(
            libc::ENOTSUP,
            std::io::Error::other(format!(
                "partner copies are made and kept per file by the node daemons: {what} is not asked of them"
            )),
        )
    }
}

impl SetProtection for PartnerCopies {
    fn id(&self) -> LevelId {
        LevelId::new(KIND, "")
    }

    fn members(&self) -> Vec<String> {
        self.asker.cluster.nodes.iter().map(|n| n.id.clone()).collect()
    }

    fn tolerates(&self) -> usize {
        self.asker.cluster.redundancy.copies
    }

    fn memory_overhead(&self) -> f64 {
        self.asker.cluster.redundancy.copies as f64
    }

    /// The node daemons copy complete files to the partners themselves: refused (ENOTSUP).
    fn protect(&self, _part: &Part) -> Result<(), LevelError> {
        Err(self.unsupported("protect"))
    }

    /// Copies are not kept per dataset: refused (ENOTSUP); `locate` answers per file.
    fn state(&self, _dataset: &str) -> Result<SetState, LevelError> {
        Err(self.unsupported("a dataset's state"))
    }

    /// Copies are not kept per dataset: refused (ENOTSUP); `recover_files` and
    /// `recover_member` bring files back.
    fn recover(&self, _dataset: &str, _member: &str, _into: &dyn Level) -> Result<Recovered, LevelError> {
        Err(self.unsupported("a dataset's whole part"))
    }

    /// The first other node (in the cluster's order, `member` excluded) whose daemon
    /// says it holds a copy of `member`'s file with exactly this size and CRC32C, else
    /// this node when its own store holds one; nodes that cannot be asked are left out.
    fn locate(
        &self,
        _dataset: &str,
        member: &str,
        files: &[PartFile],
    ) -> Result<Vec<Option<LevelId>>, String> {
        let me = self.asker.me.as_str();
        let wants: Vec<Want> = files.iter().map(Want::from).collect();
        let others: Vec<String> = self
            .members()
            .into_iter()
            .filter(|n| n != me && n != member)
            .collect();
        let held = holders(&self.asker, member, &wants, &others);
        Ok(wants
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let by = held
                    .iter()
                    .find(|(_, v)| v.get(k).copied() == Some(true))
                    .map(|(n, _)| n.clone());
                let mine = || member != me && crate::holds::holds_copy(&self.store, me, member, w);
                by.or_else(|| mine().then(|| me.to_string()))
                    .map(|n| LevelId::new(KIND, n))
            })
            .collect())
    }

    /// This node's own files only, from the copy on node `from.instance` (each chunk's
    /// CRC32C checked as it arrives, the whole file's size and CRC32C after).
    fn recover_files(
        &self,
        _dataset: &str,
        member: &str,
        files: &[PartFile],
        from: &LevelId,
        into: &dyn Level,
    ) -> Result<Recovered, LevelError> {
        let a = &self.asker;
        let refuse = |what: String| LevelError::backend(libc::EINVAL, std::io::Error::other(what));
        if member != a.me {
            return Err(refuse(format!(
                "node {} brings back its own files only, not {member}'s",
                a.me
            )));
        }
        if !self.covers(from) || from.instance.is_empty() {
            return Err(refuse(format!("{from} is not a partner copy")));
        }
        if from.instance == a.me {
            return Err(refuse("this node holds no partner copy of its own files".into()));
        }
        let partner = PartnerLevel::new(&a.cluster, &a.me, &from.instance)?
            .with_connect_timeout(a.connect_timeout)
            .with_list_bounds(ListBounds::for_store(&self.store));
        let mut out = Recovered::default();
        for f in files {
            let t = copy(&partner, into, &f.path)?;
            if t.stored.version.size != f.size || t.stored.version.crc32c != Some(f.crc32c) {
                return Err(LevelError::Changed(f.path.clone()));
            }
            out.bytes += t.bytes;
            out.files.push(t.stored);
        }
        Ok(out)
    }

    /// [`restore_from_peers`] into `into` (this node's own files only).
    fn recover_member(
        &self,
        member: &str,
        prefix: &str,
        into: &dyn Level,
    ) -> Result<MemberRecovery, LevelError> {
        let a = &self.asker;
        if member != a.me {
            return Err(LevelError::backend(
                libc::EINVAL,
                std::io::Error::other(format!(
                    "node {} brings back its own files only, not {member}'s",
                    a.me
                )),
            ));
        }
        let bounds = ListBounds::for_store(&self.store);
        let r = restore_from_peers(&a.cluster, &a.me, bounds, into, prefix)
            .map_err(|e| LevelError::backend(e.errno(), std::io::Error::other(e.to_string())))?;
        Ok(member_recovery(r))
    }
}

/// A restore from peers as a set level's whole-member recovery.
pub fn member_recovery(r: PeerRestoreReport) -> MemberRecovery {
    MemberRecovery {
        restored: r
            .restored
            .into_iter()
            .map(|f| MemberFile {
                level: LevelId::new(KIND, f.from.clone()),
                path: f.path,
                size: f.size,
                from: f.from,
                seconds: f.seconds,
            })
            .collect(),
        present: r.present,
        failed: r.failed.into_iter().map(|f| (f.path, f.error)).collect(),
        unreachable: r.unreachable,
        notes: r
            .superseded
            .iter()
            .map(|s| {
                format!(
                    "{} on {} is an older version (copy generation {}, the newest is {}): not taken",
                    s.path, s.holder, s.generation, s.newest
                )
            })
            .collect(),
    }
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

/// Restore node `node_id`'s files under `prefix` from the peers' memory into `store`
/// (see [`restore_from_peers`]). Call it from a plain thread, not from an async task.
pub fn restore_from_peers_blocking(
    cluster: &Cluster,
    node_id: &str,
    store: &Store,
    prefix: &str,
) -> Result<PeerRestoreReport> {
    let local =
        StoreLevel::new(store).map_err(|e| NodeError::Invalid(format!("the store as a level: {e}")))?;
    restore_from_peers(cluster, node_id, ListBounds::for_store(store), &local, prefix)
}

/// Restore node `node_id`'s files under `prefix` from the peers' memory into `local`:
/// each peer is a [`PartnerLevel`] (its listing bounded by `bounds`, failure case 35),
/// and every file `local` lacks is moved by the mover's `copy` (the partner's reader,
/// every chunk's CRC32C checked as it comes off the socket, into `local`'s writer,
/// published under its name only when complete). A file is taken from a holder of its
/// newest copy generation (the plan's partners first among equals); older copies are
/// named in the report, never taken.
pub fn restore_from_peers(
    cluster: &Cluster,
    node_id: &str,
    bounds: ListBounds,
    local: &dyn Level,
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
    // Each peer's listing (the copies it holds of this node's files, complete and
    // verified, paths checked), with the copy generation of every file.
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
        // The fastest level first: a file complete at the destination is kept.
        if matches!(local.stat(&path), Ok(Some(_))) {
            rep.present.push(path);
            continue;
        }
        let mut last_err = String::from("no peer holds it");
        let mut done = false;
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
            match copy(p, local, &path) {
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
