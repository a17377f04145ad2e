//! Erasure sets from a client's side: the settings of a member (`ErasureConfig`), the
//! headers a store keeps, and the rebuild of a lost member's part from the survivors
//! ([`rebuild_from_set`], [`set_can_rebuild`]); as a set level, [`crate::erasure_set`].
//! A library crate's code, so `ckptfs ckpt`, the C API and Python rebuild without the
//! daemon crate; the daemon (crate `ckptfs-node`, `erasure/`) serves the survivors'
//! side and runs the encodings (docs/erasure.md).
//!
//! The rebuild client speaks over the blocking peer connection
//! ([`crate::peer::blocking`]: no runtime, the members asked one after the other as
//! before, each answer within the rebuild's timeout). The daemon's async helpers on its
//! tokio connection (`send_era`, `recv_era`, `ask`, `connect`) are behind the
//! feature `tokio`, which only the daemon enables.

#[cfg(feature = "tokio")]
mod tokio_era;
#[cfg(feature = "tokio")]
pub use tokio_era::{ask, connect, recv_era, send_era};

use crate::peer::blocking::{Conn, Within};
use crate::peer::Msg;
use crate::{NodeError, Result};
use ckptfs_cluster::Cluster;
use ckptfs_erasure::member;
use ckptfs_erasure::proto::{self, EraMsg};
use ckptfs_erasure::ring::PIECE;
use ckptfs_erasure::{Header, RedSet, Scheme};
use ckptfs_level::Mover;
use ckptfs_store::level::StoreLevel;
use ckptfs_store::Store;
use ckptfs_transport::SegKind;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The erasure settings of a daemon: its set, the scheme and the job whose datasets it
/// protects.
#[derive(Debug, Clone)]
pub struct ErasureConfig {
    /// The job whose complete datasets are encoded.
    pub job: String,
    /// The scheme (`xor`; `rs:K` sets are formed and planned, their daemon encoding is
    /// not built yet and is reported as such).
    pub scheme: Scheme,
    /// This node's set.
    pub set: RedSet,
    /// How often the leader looks for complete datasets.
    pub every: Duration,
}

impl ErasureConfig {
    /// The set of `node` in `cluster`'s erasure plan, for the datasets of `job` (None
    /// when the cluster has no erasure sets or the node is in none).
    pub fn of(cluster: &Cluster, node: &str, job: &str) -> Result<Option<ErasureConfig>> {
        let Some(plan) = ckptfs_erasure::cluster_sets(cluster) else {
            return Ok(None);
        };
        let plan = plan.map_err(|e| NodeError::Cluster(e.to_string()))?;
        let Some(set) = plan.set_of(node).cloned() else {
            return Ok(None);
        };
        let scheme = cluster
            .redundancy
            .erasure
            .map(Scheme::from)
            .unwrap_or(Scheme::Xor);
        Ok(Some(ErasureConfig {
            job: job.to_string(),
            scheme,
            set,
            every: Duration::from_millis(500),
        }))
    }

    /// The level id of the set (`erasure:set0`).
    pub fn level_id(&self) -> String {
        format!("erasure:{}", self.set.name)
    }
}

/// The dataset key of dataset `id` of `job` (`job.id`).
pub fn dataset_key(job: &str, id: u64) -> String {
    format!("{job}.{id}")
}

/// A local error about the set (EINVAL).
pub fn err(what: impl std::fmt::Display) -> NodeError {
    NodeError::Invalid(what.to_string())
}

/// A peer that broke the erasure protocol.
pub fn proto_err(peer: &str, what: impl std::fmt::Display) -> NodeError {
    NodeError::Protocol {
        peer: peer.to_string(),
        what: what.to_string(),
    }
}

/// Send one erasure message (the client's blocking connection).
fn era_send(conn: &mut Conn, m: &EraMsg) -> Result<()> {
    let body = proto::encode(m).map_err(err)?;
    conn.send(Msg::Erasure(body))
}

/// An erasure message out of what a receive brought (None: the connection ended); a
/// refusal or another kind of message is an error. Both connections' receives.
fn era_of(peer: String, got: Option<Msg>) -> Result<EraMsg> {
    match got {
        Some(Msg::Erasure(body)) => proto::parse(&body).map_err(|e| proto_err(&peer, e)),
        Some(Msg::Nack { errno, message }) => Err(NodeError::Refused {
            peer,
            what: message,
            errno,
        }),
        Some(other) => Err(proto_err(
            &peer,
            format!("expected an erasure message, got {}", other.name()),
        )),
        None => Err(NodeError::Transport(format!("{peer} closed the connection"))),
    }
}

/// An answer that says Fail as the peer's refusal (both connections' requests).
fn refused_on_fail(peer: String, answer: EraMsg) -> Result<EraMsg> {
    match answer {
        EraMsg::Fail { errno, message } => Err(NodeError::Refused {
            peer,
            what: message,
            errno,
        }),
        ok => Ok(ok),
    }
}

/// Receive one erasure message within `timeout` (a refusal, another kind of message or
/// nothing in time is an error).
fn era_recv(conn: &mut Conn, timeout: Duration) -> Result<EraMsg> {
    let peer = conn.peer().to_string();
    match conn.recv_within(timeout)? {
        Within::Msg(m) => era_of(peer, Some(m)),
        Within::Closed => era_of(peer, None),
        Within::Late => Err(NodeError::Transport(format!("{peer}: no answer in {timeout:?}"))),
    }
}

/// The answer to a request, or the peer's refusal as an error (the client's blocking
/// connection; the daemon's is [`ask`]).
fn era_ask(conn: &mut Conn, m: &EraMsg, timeout: Duration) -> Result<EraMsg> {
    let peer = conn.peer().to_string();
    era_send(conn, m)?;
    refused_on_fail(peer, era_recv(conn, timeout)?)
}

/// The client's blocking connection to member `node` of the set, within `timeout`.
fn member_conn(cluster: &Cluster, me: &str, node: &str, timeout: Duration) -> Result<Conn> {
    let (addr, keys) = crate::peer::dial_target(cluster, me, node)?;
    Conn::connect(&addr, me, node, &keys, cluster, timeout)
}

/// The store as a level.
pub fn level_of(store: &Store) -> Result<StoreLevel> {
    StoreLevel::new(store).map_err(|e| NodeError::Invalid(format!("the store as a level: {e}")))
}

/// Every header this store keeps of `set`'s encodings: (dataset key, header).
pub fn local_headers(store: &Store, set: &str) -> Vec<Header> {
    let Ok(level) = level_of(store) else {
        return Vec::new();
    };
    let prefix = format!("{}/", ckptfs_erasure::NAMESPACE);
    let suffix = format!("/{}/header", ckptfs_erasure::component(set));
    let mut out = Vec::new();
    for (p, _) in store.list_all_system() {
        let Some(mid) = p.strip_prefix(&prefix).and_then(|r| r.strip_suffix(&suffix)) else {
            continue;
        };
        if mid.contains('/') || !proto::plain(mid) {
            continue;
        }
        if let Some(h) = member::header(&level, mid, set) {
            out.push(h);
        }
    }
    out
}

/// Record in the levels record which of this node's files the set protects (the
/// `erasure:SET` level id of `ls -l`, `status --json`, the C API and Python).
pub fn record_levels(store: &Store, cfg: &ErasureConfig, me: &str) {
    let level = match level_of(store) {
        Ok(l) => l,
        Err(_) => return,
    };
    let mut held = Vec::new();
    for h in local_headers(store, &cfg.set.name) {
        let Some(i) = h.index_of(me) else { continue };
        if !member::holds_share(&level, &h, i) {
            continue;
        }
        for f in &h.parts[i].files {
            held.push((f.path.clone(), f.size, f.mtime_ns));
        }
    }
    let mut rec = ckptfs_datasets::levels_record::ObjectLevels::load(store);
    rec.set(&cfg.level_id(), held);
    if let Err(e) = rec.save(store) {
        tracing::warn!("erasure: cannot record the files the set protects: {e}");
    }
}

/// The encodings of `set` this member holds its whole share of: (dataset, epoch).
pub fn whole_shares(store: &Store, set: &str, me: &str) -> Vec<(String, u64)> {
    let Ok(level) = level_of(store) else {
        return Vec::new();
    };
    local_headers(store, set)
        .into_iter()
        .filter(|h| h.index_of(me).is_some_and(|i| member::holds_share(&level, h, i)))
        .map(|h| (h.dataset, h.epoch))
        .take(proto::MAX_LISTED)
        .collect()
}

// ---------------------------------------------------------------------------------
// Rebuild on a replacement.

/// One dataset's part rebuilt from the set.
#[derive(Debug, Clone, Serialize)]
pub struct RebuiltPart {
    /// Dataset key.
    pub dataset: String,
    /// Level id of the set.
    pub level: String,
    /// The encoding's epoch.
    pub epoch: u64,
    /// Files written (path, size).
    pub files: Vec<(String, u64)>,
    /// Parity shards computed again and kept.
    pub parity_shards: usize,
    /// Seconds taken.
    pub seconds: f64,
}

/// What a rebuild from the set did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SetRebuildReport {
    /// Level id of the set (empty: the node is in no set).
    pub level: String,
    /// Parts rebuilt.
    pub rebuilt: Vec<RebuiltPart>,
    /// Datasets whose share this node still holds whole.
    pub present: Vec<String>,
    /// Datasets that could not be rebuilt, and why (lost members named).
    pub failed: Vec<(String, String)>,
    /// Members that did not answer.
    pub unreachable: BTreeMap<String, String>,
}

/// The survivors' segments and shards, read over the network during a rebuild.
pub struct NetShards<'a> {
    cluster: &'a Cluster,
    me: &'a str,
    timeout: Duration,
}

impl NetShards<'_> {
    fn read(
        &self,
        h: &Header,
        i: usize,
        s: usize,
        j: usize,
        parity: bool,
    ) -> std::result::Result<Vec<u8>, String> {
        self.segment(h, i, s, j, parity).map_err(|e| e.to_string())
    }

    /// Segment `j` of stripe `s` (a parity shard or a data segment) from member `i`,
    /// piece by piece, each checked against its CRC32C.
    fn segment(&self, h: &Header, i: usize, s: usize, j: usize, parity: bool) -> Result<Vec<u8>> {
        let node = &h.members[i];
        let req = EraMsg::Read {
            set: h.set.clone(),
            dataset: h.dataset.clone(),
            epoch: h.epoch,
            stripe: s as u32,
            row: j as u16,
            parity,
        };
        let mut c = member_conn(self.cluster, self.me, node, self.timeout)?;
        era_send(&mut c, &req)?;
        let mut out = vec![0u8; h.segment as usize];
        let mut next = 0u64;
        loop {
            let m = match c.recv_within(self.timeout)? {
                Within::Msg(m) => Some(m),
                Within::Closed => None,
                Within::Late => return Err(err(format!("{node}: no answer in {:?}", self.timeout))),
            };
            match m {
                Some(Msg::Piece(p)) => {
                    let kind = if parity { SegKind::Parity } else { SegKind::Data };
                    if p.kind != kind
                        || p.stripe as usize != s
                        || p.row as usize != j
                        || p.epoch != h.epoch
                        || p.seg_size != h.segment
                        || p.offset != next
                        || p.len as u64 > PIECE
                    {
                        return Err(proto_err(node, "sent a piece that was not asked for"));
                    }
                    match c.recv()? {
                        Some(Msg::Chunk { offset, len, .. }) if offset == p.offset && len == p.len => {}
                        _ => return Err(proto_err(node, "announced a piece and sent something else")),
                    }
                    let end = (p.offset + p.len as u64) as usize;
                    if !c.chunk_data(&mut out[p.offset as usize..end])? {
                        return Err(proto_err(
                            node,
                            format!("a piece at {} failed its CRC32C check", p.offset),
                        ));
                    }
                    next = end as u64;
                }
                Some(Msg::Erasure(b)) => match proto::parse(&b).map_err(|e| proto_err(node, e))? {
                    EraMsg::Done if next == h.segment => return Ok(out),
                    EraMsg::Done => return Err(proto_err(node, "ended before the whole segment")),
                    EraMsg::Fail { errno, message } => {
                        return Err(NodeError::Refused {
                            peer: node.clone(),
                            what: message,
                            errno,
                        })
                    }
                    other => return Err(proto_err(node, format!("answered {other:?}"))),
                },
                Some(other) => return Err(proto_err(node, format!("answered {}", other.name()))),
                None => return Err(NodeError::Transport(format!("{node} closed the connection"))),
            }
        }
    }
}

impl ckptfs_erasure::Shards for NetShards<'_> {
    fn data(&self, h: &Header, i: usize, s: usize, out: &mut [u8]) -> std::result::Result<(), String> {
        let b = self.read(h, i, s, 0, false)?;
        out.copy_from_slice(&b);
        Ok(())
    }

    fn parity(&self, h: &Header, i: usize, s: usize, j: usize) -> std::result::Result<Vec<u8>, String> {
        self.read(h, i, s, j, true)
    }
}

/// Ask every other member of `set` which encodings it holds its whole share of.
/// Per member, the encodings it listed; per member not reached, why.
/// Per member, the encodings it holds (dataset, epoch); and the members that did not answer.
pub type Survey = (BTreeMap<String, Vec<(String, u64)>>, BTreeMap<String, String>);

/// Ask every survivor which encodings it holds its whole share of.
pub fn survey(cluster: &Cluster, me: &str, set: &RedSet, timeout: Duration) -> Survey {
    let mut listed = BTreeMap::new();
    let mut unreachable = BTreeMap::new();
    for m in set.members.iter().filter(|m| *m != me) {
        let r = member_conn(cluster, me, m, timeout).and_then(|mut c| {
            era_ask(
                &mut c,
                &EraMsg::Headers {
                    set: set.name.clone(),
                },
                timeout,
            )
        });
        match r {
            Ok(EraMsg::Listed { datasets }) => {
                listed.insert(m.clone(), datasets);
            }
            Ok(other) => {
                unreachable.insert(m.clone(), format!("answered {other:?}"));
            }
            Err(e) => {
                unreachable.insert(m.clone(), e.to_string());
            }
        }
    }
    (listed, unreachable)
}

/// What the set can say about `key` (newest epoch): its header and the members holding
/// their whole share of it (this node's own share judged by `store`).
/// Whether one dataset can be rebuilt from what the survivors hold, and from which header.
pub fn judge_key(
    cluster: &Cluster,
    me: &str,
    set: &RedSet,
    key: &str,
    listed: &BTreeMap<String, Vec<(String, u64)>>,
    timeout: Duration,
) -> std::result::Result<(Header, Vec<usize>), String> {
    let epoch = listed
        .values()
        .flatten()
        .filter(|(d, _)| d == key)
        .map(|(_, e)| *e)
        .max()
        .ok_or_else(|| format!("no member of {} holds an encoding of {key}", set.name))?;
    let holders: Vec<&String> = listed
        .iter()
        .filter(|(_, v)| v.iter().any(|(d, e)| d == key && *e == epoch))
        .map(|(m, _)| m)
        .collect();
    let mut header = None;
    let mut why = Vec::new();
    // The others first: this node's own header is asked of its own daemon last.
    let mut ask_order = holders.clone();
    ask_order.sort_by_key(|m| m.as_str() == me);
    for m in &ask_order {
        let r = member_conn(cluster, me, m, timeout).and_then(|mut c| {
            era_ask(
                &mut c,
                &EraMsg::HeaderOf {
                    set: set.name.clone(),
                    dataset: key.to_string(),
                },
                timeout,
            )
        });
        match r {
            Ok(EraMsg::Head { header: h })
                if h.epoch == epoch && h.members == set.members && h.dataset == key && h.set == set.name =>
            {
                header = Some(h);
                break;
            }
            Ok(other) => why.push(format!("{m}: answered {other:?}")),
            Err(e) => why.push(format!("{m}: {e}")),
        }
    }
    let h = header.ok_or_else(|| format!("no header of {key} could be read: {}", why.join("; ")))?;
    let lost: Vec<usize> = (0..h.members.len())
        .filter(|&i| !holders.iter().any(|m| **m == h.members[i]))
        .collect();
    Ok((h, lost))
}

/// Rebuild this node's part of every encoding of its set it lacks (or only of `only`,
/// a dataset key), from the survivors: see the module documentation. Blocking (the
/// client's connections, no runtime): call it from a plain thread or `spawn_blocking`.
pub fn rebuild_from_set(
    cluster: &Cluster,
    me: &str,
    store: &Store,
    only: Option<&str>,
) -> Result<SetRebuildReport> {
    let Some(plan) = ckptfs_erasure::cluster_sets(cluster) else {
        return Ok(SetRebuildReport::default());
    };
    let plan = plan.map_err(|e| NodeError::Cluster(e.to_string()))?;
    let Some(set) = plan.set_of(me).cloned() else {
        return Ok(SetRebuildReport::default());
    };
    let timeout = Duration::from_secs(30);
    let level = level_of(store)?;
    let mut rep = SetRebuildReport {
        level: format!("erasure:{}", set.name),
        ..Default::default()
    };
    let (listed, unreachable) = survey(cluster, me, &set, timeout);
    rep.unreachable = unreachable;
    let mut keys: Vec<String> = listed.values().flatten().map(|(d, _)| d.clone()).collect();
    keys.sort();
    keys.dedup();
    if let Some(o) = only {
        keys.retain(|k| k == o);
        if keys.is_empty() {
            rep.failed.push((
                o.to_string(),
                format!(
                    "no member of {} that answered holds an encoding of it{}",
                    set.name,
                    if rep.unreachable.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (not answering: {})",
                            rep.unreachable.keys().cloned().collect::<Vec<_>>().join(", ")
                        )
                    }
                ),
            ));
        }
    }
    let mover = Mover::default();
    for key in keys {
        let t0 = Instant::now();
        let (h, mut lost) = match judge_key(cluster, me, &set, &key, &listed, timeout) {
            Ok(x) => x,
            Err(e) => {
                rep.failed.push((key, e));
                continue;
            }
        };
        let x = h.index_of(me).expect("member");
        if member::holds_share(&level, &h, x) {
            // Already whole here; keep the header if it was missing.
            if member::header(&level, &key, &set.name).is_none_or(|l| l.epoch != h.epoch) {
                let _ = member::store_header(&mover, &level, &h);
            }
            rep.present.push(key);
            continue;
        }
        if !lost.contains(&x) {
            lost.push(x);
        }
        let p = h.scheme.parity();
        if lost.len() > p {
            let names: Vec<String> = lost.iter().map(|&i| h.members[i].clone()).collect();
            rep.failed.push((
                key,
                ckptfs_erasure::ErasureError::TooManyLost {
                    set: set.name.clone(),
                    lost: names,
                    unreadable: Vec::new(),
                    tolerates: p,
                }
                .to_string(),
            ));
            continue;
        }
        let shards = NetShards { cluster, me, timeout };
        let part = match ckptfs_erasure::rebuild_part(&h, x, &lost, &shards) {
            Ok(b) => b,
            Err(e) => {
                rep.failed.push((key, e.to_string()));
                continue;
            }
        };
        let written = match member::write_part(&mover, &h.parts[x], &part, &level) {
            Ok(w) => w,
            Err(e) => {
                rep.failed.push((key, format!("writing the rebuilt files: {e}")));
                continue;
            }
        };
        // This member's parity shards, computed again from the stripes' data (each must
        // match the header's CRCs), so the set is whole again at the same epoch.
        let lay = h.layout();
        let mut shards_kept = 0;
        let mut parity_err = None;
        for (s, j) in lay.held_by(x) {
            let mut data = Vec::new();
            for &d in &lay.data_members(s) {
                if lost.contains(&d) && d != x {
                    parity_err = Some(format!("stripe {s}: member {} is lost too", h.members[d]));
                    break;
                }
                let mut b = vec![0u8; h.segment as usize];
                if let Err(e) = ckptfs_erasure::Shards::data(&shards, &h, d, s, &mut b) {
                    parity_err = Some(format!("stripe {s}: {}: {e}", h.members[d]));
                    break;
                }
                data.push(b);
            }
            if parity_err.is_some() {
                break;
            }
            match ckptfs_erasure::parity_again(&h, s, &data)
                .and_then(|rows| member::store_parity(&mover, &level, &h, me, s, j, &rows[j]))
            {
                Ok(_) => shards_kept += 1,
                Err(e) => {
                    parity_err = Some(e.to_string());
                    break;
                }
            }
        }
        match parity_err {
            // A newer encoding committed here meanwhile (the leader encoded the set again
            // once this member's files were back): it stays.
            None if member::header(&level, &key, &set.name).is_some_and(|l| l.epoch > h.epoch) => {}
            None => {
                if let Err(e) = member::store_header(&mover, &level, &h) {
                    rep.failed.push((key.clone(), format!("keeping the header: {e}")));
                }
            }
            Some(e) => tracing::warn!("erasure: the part of {key} is back, its parity shards not: {e}"),
        }
        rep.rebuilt.push(RebuiltPart {
            dataset: key,
            level: rep.level.clone(),
            epoch: h.epoch,
            files: written
                .files
                .iter()
                .map(|f| (f.path.clone(), f.version.size))
                .collect(),
            parity_shards: shards_kept,
            seconds: t0.elapsed().as_secs_f64(),
        });
    }
    if !rep.rebuilt.is_empty() {
        if let Some(cfg) = ErasureConfig::of(cluster, me, "")? {
            record_levels(store, &cfg, me);
        }
    }
    Ok(rep)
}

/// Whether `owner`'s files `want` of dataset `key` can be had from its set: a header
/// of the newest encoding lists them with this content, and at most `p` members (the
/// owner counted when it does not hold its share) are lost. The set's level id.
pub fn set_can_rebuild(
    cluster: &Cluster,
    me: &str,
    store: &Store,
    owner: &str,
    key: &str,
    want: &[(String, u64, u32)],
) -> std::result::Result<String, String> {
    let plan = ckptfs_erasure::cluster_sets(cluster)
        .ok_or("no erasure sets")?
        .map_err(|e| e.to_string())?;
    let set = plan.set_of(owner).ok_or("the owner is in no set")?.clone();
    let timeout = Duration::from_secs(10);
    // Ask every member; this node's own share (when it is one) is judged here, from its
    // store.
    let mut listed = BTreeMap::new();
    for m in &set.members {
        if m == me {
            listed.insert(m.clone(), whole_shares(store, &set.name, me));
            continue;
        }
        let r = member_conn(cluster, me, m, timeout).and_then(|mut c| {
            era_ask(
                &mut c,
                &EraMsg::Headers {
                    set: set.name.clone(),
                },
                timeout,
            )
        });
        if let Ok(EraMsg::Listed { datasets }) = r {
            listed.insert(m.clone(), datasets);
        }
    }
    let (h, lost) = judge_key(cluster, me, &set, key, &listed, timeout)?;
    let i = h.index_of(owner).ok_or("the owner is not in the header")?;
    let recorded: BTreeMap<&str, (u64, u32)> = h.parts[i]
        .files
        .iter()
        .map(|f| (f.path.as_str(), (f.size, f.crc32c)))
        .collect();
    if !want
        .iter()
        .all(|(p, s, c)| recorded.get(p.as_str()) == Some(&(*s, *c)))
    {
        return Err(format!(
            "the encoding of {key} by {} does not record these files of {owner}",
            set.name
        ));
    }
    if lost.len() > h.scheme.parity() {
        return Err(ckptfs_erasure::ErasureError::TooManyLost {
            set: set.name.clone(),
            lost: lost.iter().map(|&i| h.members[i].clone()).collect(),
            unreadable: Vec::new(),
            tolerates: h.scheme.parity(),
        }
        .to_string());
    }
    Ok(format!("erasure:{}", set.name))
}
