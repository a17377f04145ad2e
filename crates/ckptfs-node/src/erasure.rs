//! Erasure sets across the node daemons (issue 32; docs/erasure.md, "Across daemons").
//!
//! Each daemon whose cluster file names an erasure scheme is a member of one set
//! ([`ckptfs_erasure::cluster_sets`]). The set's first member leads: when a dataset of
//! the job is complete job-wide (its record carries every node's part), it asks every
//! member for its part (`PartOf` -> `Part`: the files the agreed record lists, with the
//! chunk CRCs its store recorded), sends them all the plan (`Encode`: the header without
//! parity), and every member takes its place in the XOR ring ([`ckptfs_erasure::ring`]):
//! pieces of running sums go from each member to the next (`Ring`, then `SegPiece` +
//! Chunk frames), each holder stores its parity shard and reads it back checked, and
//! answers `Stored` with its records. Only when every member has answered does the
//! leader send the whole header to every member (`Commit`): a header is the proof that
//! its epoch's parity was whole when it was written. A member lost or killed before that
//! leaves no header of the epoch anywhere; the next encode removes its parity (the
//! `encoding` marker names it).
//!
//! Who may say what (the peer security of issue 29: a node acts only as itself): the
//! plan, the part questions and the commit are taken only from the set's leader;
//! running sums only from the member before this one in the ring, for the encoding
//! this member is running, piece after piece in the ring's order (any other stripe,
//! offset, length, kind or size is refused and the encoding fails); a member's part
//! only from that member (a `Part` naming another is refused); reads of segments and
//! shards only by members of the set. Every piece carries its CRC32C (checked on
//! arrival by the transport); a piece that fails it ends the encoding.
//!
//! Rebuild ([`rebuild_from_set`]): a replacement asks the survivors which encodings
//! they hold their share of (`Headers`), takes the header (`HeaderOf`), reads the
//! stripes' surviving data segments and parity shards (`Read`, answered by pieces),
//! decodes its part, checks the whole-part CRC32C, writes its files through the mover
//! (every chunk checked against the header), computes its parity shards again (each
//! must match the header's CRCs) and keeps the header: the set is whole again at the
//! same epoch.

use crate::daemon::Shared;
use crate::error::{NodeError, Result};
use crate::peer::{Conn, Msg, Piece};
use ckptfs_cluster::Cluster;
use ckptfs_erasure::layout::{ParityRecord, PartRecord, FORMAT};
use ckptfs_erasure::member;
use ckptfs_erasure::proto::{self, EraMsg, WantFile};
use ckptfs_erasure::ring::{self, Step, PIECE};
use ckptfs_erasure::{Header, Layout, RedSet, Scheme, PARITY_CHUNK};
use ckptfs_level::Mover;
use ckptfs_store::level::StoreLevel;
use ckptfs_store::Store;
use ckptfs_transport::SegKind;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};

/// How long a member waits for the next piece of a running sum (or for the encoding a
/// predecessor's ring connection names to start here).
pub const PIECE_TIMEOUT: Duration = Duration::from_secs(60);
/// After a failed encode, the leader tries the same dataset again after this long.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

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

/// One dataset's encoding as this node sees it (`ckptfs node status --json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DatasetErasure {
    /// `protected` (this member keeps the header and its share), `encoding`, `failed`.
    pub state: String,
    /// The epoch of the encoding.
    pub epoch: u64,
    /// What went wrong, or whom it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Seconds the encode took (the leader's view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// The erasure part of the node status.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ErasureStatus {
    /// Level id (`erasure:set0`).
    pub level: String,
    /// Scheme.
    pub scheme: String,
    /// Members in set order (the first leads).
    pub members: Vec<String>,
    /// Per dataset key.
    pub datasets: BTreeMap<String, DatasetErasure>,
    /// Bytes of running sums this node sent.
    pub bytes_sent: u64,
    /// Pieces refused (wrong sender, place, size or CRC).
    pub pieces_refused: u64,
}

/// A piece from a neighbour (its sender, the piece, its bytes), or why the stream broke.
type PieceIn = std::result::Result<(String, Piece, Vec<u8>), String>;

/// The daemon's erasure state.
#[derive(Default)]
pub(crate) struct EraState {
    /// Encodings running here, by (dataset, epoch): where the predecessor's pieces go.
    jobs: Mutex<HashMap<(String, u64), mpsc::UnboundedSender<PieceIn>>>,
    registered: Notify,
    status: Mutex<ErasureStatus>,
    /// The headers this store keeps (dataset key, epoch), read again at most every
    /// [`HEADERS_FRESH`] for the status (a rebuild by another process adds some).
    kept: Mutex<Option<Kept>>,
    /// One member role at a time on this node.
    running: tokio::sync::Mutex<()>,
}

/// When the kept headers were read, and they: (dataset key, epoch).
type Kept = (Instant, Vec<(String, u64)>);

/// How long the status's list of kept headers is used before it is read again.
pub const HEADERS_FRESH: Duration = Duration::from_secs(5);

impl EraState {
    pub(crate) fn status(&self) -> ErasureStatus {
        self.status.lock().expect("erasure status").clone()
    }

    /// The headers `store` keeps of `set`: (dataset key, epoch), at most
    /// [`HEADERS_FRESH`] old.
    pub(crate) fn kept(&self, store: &Store, set: &str) -> Vec<(String, u64)> {
        let mut g = self.kept.lock().expect("erasure kept");
        if let Some((t, v)) = &*g {
            if t.elapsed() < HEADERS_FRESH {
                return v.clone();
            }
        }
        let v: Vec<(String, u64)> = local_headers(store, set)
            .into_iter()
            .map(|h| (h.dataset, h.epoch))
            .collect();
        *g = Some((Instant::now(), v.clone()));
        v
    }

    fn set_state(&self, key: &str, st: DatasetErasure) {
        *self.kept.lock().expect("erasure kept") = None;
        self.status
            .lock()
            .expect("erasure status")
            .datasets
            .insert(key.to_string(), st);
    }
}

fn err(what: impl std::fmt::Display) -> NodeError {
    NodeError::Invalid(what.to_string())
}

fn proto_err(peer: &str, what: impl std::fmt::Display) -> NodeError {
    NodeError::Protocol {
        peer: peer.to_string(),
        what: what.to_string(),
    }
}

fn fail(errno: i32, message: impl std::fmt::Display) -> EraMsg {
    EraMsg::Fail {
        errno,
        message: message.to_string(),
    }
}

fn bfail(errno: i32, message: impl std::fmt::Display) -> Box<EraMsg> {
    Box::new(fail(errno, message))
}

async fn send_era(conn: &mut Conn, m: &EraMsg) -> Result<()> {
    let body = proto::encode(m).map_err(err)?;
    conn.send(Msg::Erasure(body)).await
}

async fn recv_era(conn: &mut Conn) -> Result<EraMsg> {
    let peer = conn.peer().to_string();
    match conn.recv().await? {
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

/// The answer to a request, or the peer's refusal as an error.
async fn ask(conn: &mut Conn, m: &EraMsg, timeout: Duration) -> Result<EraMsg> {
    let peer = conn.peer().to_string();
    send_era(conn, m).await?;
    match tokio::time::timeout(timeout, recv_era(conn)).await {
        Ok(Ok(EraMsg::Fail { errno, message })) => Err(NodeError::Refused {
            peer,
            what: message,
            errno,
        }),
        Ok(r) => r,
        Err(_) => Err(NodeError::Transport(format!("{peer}: no answer in {timeout:?}"))),
    }
}

fn level_of(store: &Store) -> Result<StoreLevel> {
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
fn record_levels(store: &Store, cfg: &ErasureConfig, me: &str) {
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

/// This member's part of `dataset` as the plan must list it.
fn my_part(store: &Store, me: &str, want: &[WantFile]) -> Result<PartRecord> {
    let level = level_of(store)?;
    member::part_record(&level, me, want).map_err(|e| err(format!("part of {me}: {e}")))
}

// ---------------------------------------------------------------------------------
// The leader.

/// A dataset key and every member's files of it as the agreed record lists them.
type Wants = (String, BTreeMap<String, Vec<WantFile>>);

/// Complete datasets of the job newer than the newest one this set already protects
/// (key, every member's files as the agreed record lists them), newest first; and that
/// newest protected one with its epoch (the leader checks that every member still holds
/// its share of it, and encodes it again when one does not: a member rebuilt without
/// its parity, after more than one loss).
fn to_encode(store: &Store, cfg: &ErasureConfig, me: &str) -> (Vec<Wants>, Option<(Wants, u64)>) {
    let Ok((all, _)) = ckptfs_datasets::record::load_all(store, &cfg.job) else {
        return (Vec::new(), None);
    };
    let all =
        ckptfs_datasets::record::with_verdicts(all, ckptfs_datasets::record::load_verdicts(store, &cfg.job));
    let level = match level_of(store) {
        Ok(l) => l,
        Err(_) => return (Vec::new(), None),
    };
    let mut out = Vec::new();
    let mut protected = None;
    for d in all.iter().rev() {
        if d.state != ckptfs_datasets::State::Complete || d.nodes.is_empty() {
            continue;
        }
        let key = dataset_key(&cfg.job, d.id);
        let wants: BTreeMap<String, Vec<WantFile>> = cfg
            .set
            .members
            .iter()
            .map(|m| {
                let files = d
                    .nodes
                    .get(m)
                    .map(|p| {
                        p.files
                            .iter()
                            .map(|(path, f)| WantFile {
                                path: path.clone(),
                                size: f.size,
                                crc32c: f.crc32c,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (m.clone(), files)
            })
            .collect();
        if let Some(h) = member::header(&level, &key, &cfg.set.name) {
            if h.members == cfg.set.members
                && h.index_of(me).is_some_and(|i| member::holds_share(&level, &h, i))
            {
                protected = Some(((key, wants), h.epoch));
                break;
            }
        }
        out.push((key, wants));
    }
    (out, protected)
}

/// The leader's loop: encode every complete dataset not yet protected (newest first),
/// when every member answers heartbeats. Runs on the partner-copy threads (low
/// priority): the application never waits for it.
pub(crate) async fn leader_loop(shared: Arc<Shared>) {
    let Some(cfg) = shared.cfg.erasure.clone() else {
        return;
    };
    let me = shared.cfg.node_id.clone();
    if cfg.set.members.first() != Some(&me) {
        return;
    }
    let mut failed: HashMap<String, Instant> = HashMap::new();
    let mut checked: Option<Instant> = None;
    // Protected datasets found short of a member's share, being encoded again.
    let mut degraded: std::collections::HashSet<String> = Default::default();
    loop {
        tokio::time::sleep(cfg.every).await;
        let (mut todo, protected) = {
            let (store, cfg, me) = (shared.store.clone(), cfg.clone(), me.clone());
            tokio::task::spawn_blocking(move || to_encode(&store, &cfg, &me))
                .await
                .unwrap_or_default()
        };
        // Every few seconds: does every member still hold its share of the newest
        // protected dataset? One that does not (rebuilt without its parity) and answers
        // again gets a new encoding of the set.
        if let Some(((key, wants), epoch)) = protected {
            if checked.is_none_or(|t| t.elapsed() >= RECHECK_EVERY)
                && cfg.set.members.iter().all(|m| *m == me || shared.is_up(m))
            {
                checked = Some(Instant::now());
                let short = members_without_share(&shared, &cfg, &key, epoch).await;
                if !short.is_empty() {
                    tracing::info!(
                        "erasure: {} no longer hold their share of {key}: encoding the set again",
                        short.join(", ")
                    );
                    shared.erasure.set_state(
                        &key,
                        DatasetErasure {
                            state: "degraded".into(),
                            epoch,
                            detail: Some(format!("no share on {}", short.join(", "))),
                            ..Default::default()
                        },
                    );
                    degraded.insert(key.clone());
                    todo.push((key, wants));
                }
            }
        }
        for (key, wants) in todo {
            if failed.get(&key).is_some_and(|t| t.elapsed() < RETRY_AFTER) {
                continue;
            }
            let down: Vec<&String> = cfg
                .set
                .members
                .iter()
                .filter(|m| **m != me && !shared.is_up(m))
                .collect();
            if !down.is_empty() {
                shared.erasure.set_state(
                    &key,
                    DatasetErasure {
                        state: "waiting".into(),
                        detail: Some(format!(
                            "member(s) not answering: {}",
                            down.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                        )),
                        ..Default::default()
                    },
                );
                continue;
            }
            let t0 = Instant::now();
            match encode_dataset(&shared, &cfg, &key, &wants).await {
                Ok(epoch) => {
                    tracing::info!(
                        "erasure: dataset {key} protected by {} (epoch {epoch:016x}) in {:.3} s",
                        cfg.level_id(),
                        t0.elapsed().as_secs_f64()
                    );
                    shared.erasure.set_state(
                        &key,
                        DatasetErasure {
                            state: "protected".into(),
                            epoch,
                            detail: None,
                            seconds: Some(t0.elapsed().as_secs_f64()),
                        },
                    );
                    failed.remove(&key);
                    degraded.remove(&key);
                }
                Err(e) if degraded.contains(&key) => {
                    // The older encoding still protects what it can: degraded, not failed.
                    tracing::debug!("erasure: dataset {key} not encoded again yet: {e}");
                    failed.insert(key, Instant::now());
                }
                Err(e) => {
                    tracing::warn!("erasure: dataset {key} not encoded: {e}");
                    shared.erasure.set_state(
                        &key,
                        DatasetErasure {
                            state: "failed".into(),
                            detail: Some(e.to_string()),
                            ..Default::default()
                        },
                    );
                    failed.insert(key, Instant::now());
                }
            }
        }
    }
}

/// How often the leader checks that every member still holds its share.
pub const RECHECK_EVERY: Duration = Duration::from_secs(3);

/// The members (other than this one) that do not list `key`'s encoding `epoch` as a
/// share they hold whole; a member that cannot be asked is not counted (it is down).
async fn members_without_share(
    shared: &Arc<Shared>,
    cfg: &ErasureConfig,
    key: &str,
    epoch: u64,
) -> Vec<String> {
    let mut short = Vec::new();
    for m in cfg.set.members.iter().filter(|m| **m != shared.cfg.node_id) {
        let Ok(mut c) = shared.connect(m).await else {
            continue;
        };
        match ask(
            &mut c,
            &EraMsg::Headers {
                set: cfg.set.name.clone(),
            },
            Duration::from_secs(10),
        )
        .await
        {
            Ok(EraMsg::Listed { datasets }) if !datasets.iter().any(|(d, e)| d == key && *e == epoch) => {
                short.push(m.clone())
            }
            _ => {}
        }
    }
    short
}

/// The time an encode of parts of up to `largest` bytes may take before it is given up.
fn encode_timeout(largest: u64) -> Duration {
    Duration::from_secs(60) + Duration::from_secs(largest / (4 << 20))
}

/// Encode `key` across the set; the epoch, once every member keeps the header.
async fn encode_dataset(
    shared: &Arc<Shared>,
    cfg: &ErasureConfig,
    key: &str,
    wants: &BTreeMap<String, Vec<WantFile>>,
) -> Result<u64> {
    let me = shared.cfg.node_id.clone();
    // 1. Every member's part (its files as the agreed record lists them, chunk CRCs).
    let mut parts = Vec::with_capacity(cfg.set.members.len());
    let mut conns: BTreeMap<String, Conn> = BTreeMap::new();
    for m in &cfg.set.members {
        let want = wants.get(m).cloned().unwrap_or_default();
        let part = if *m == me {
            let (store, me2) = (shared.store.clone(), me.clone());
            tokio::task::spawn_blocking(move || my_part(&store, &me2, &want))
                .await
                .map_err(|e| err(e.to_string()))??
        } else {
            let mut c = shared.connect(m).await?;
            let ans = ask(
                &mut c,
                &EraMsg::PartOf {
                    set: cfg.set.name.clone(),
                    dataset: key.to_string(),
                    files: want,
                },
                Duration::from_secs(60),
            )
            .await?;
            conns.insert(m.clone(), c);
            match ans {
                EraMsg::Part { part } if part.member == *m => part,
                EraMsg::Part { part } => {
                    return Err(proto_err(m, format!("answered the part of {:?}", part.member)));
                }
                other => return Err(proto_err(m, format!("answered {other:?} to a part question"))),
            }
        };
        parts.push(part);
    }
    // 2. The plan.
    let largest = parts.iter().map(|p| p.size).max().unwrap_or(0);
    let lay = Layout::new(cfg.scheme, cfg.set.members.len(), largest).map_err(err)?;
    let plan = Header {
        format: FORMAT,
        dataset: key.to_string(),
        set: cfg.set.name.clone(),
        epoch: (ckptfs_settings::now_ns()).max(1),
        scheme: cfg.scheme,
        members: cfg.set.members.clone(),
        parts,
        segment: lay.segment,
        chunk_size: PARITY_CHUNK,
        parity: Vec::new(),
    };
    plan.check_plan().map_err(err)?;
    shared.erasure.set_state(
        key,
        DatasetErasure {
            state: "encoding".into(),
            epoch: plan.epoch,
            ..Default::default()
        },
    );
    // 3. Every member takes its place in the ring at once; each answers with its
    // parity records once stored and verified.
    let timeout = encode_timeout(largest);
    let mut tasks = tokio::task::JoinSet::new();
    for (m, mut c) in std::mem::take(&mut conns) {
        let plan = plan.clone();
        tasks.spawn(async move {
            let r = ask(&mut c, &EraMsg::Encode { plan }, timeout).await;
            (m, r, c)
        });
    }
    let mine = member_role(shared.clone(), plan.clone(), me.clone());
    let mine = tokio::time::timeout(timeout, mine).await;
    let mut parity: Vec<ParityRecord> = Vec::new();
    let mut problems = Vec::new();
    match mine {
        Ok(Ok(v)) => parity.extend(v),
        Ok(Err(e)) => problems.push(format!("{me}: {e}")),
        Err(_) => problems.push(format!("{me}: no parity in {timeout:?}")),
    }
    while let Some(r) = tasks.join_next().await {
        let Ok((m, r, c)) = r else { continue };
        match r {
            Ok(EraMsg::Stored { parity: v }) => {
                let i = plan.index_of(&m).expect("member");
                let held = plan.layout().held_by(i);
                if v.len() != held.len()
                    || v.iter()
                        .any(|p| p.holder != m || !held.contains(&(p.stripe, p.row)))
                {
                    problems.push(format!("{m}: answered parity records that are not its own"));
                } else {
                    parity.extend(v);
                }
                conns.insert(m, c);
            }
            Ok(other) => problems.push(format!("{m}: answered {other:?}")),
            Err(e) => problems.push(format!("{m}: {e}")),
        }
    }
    if !problems.is_empty() {
        return Err(err(format!(
            "encoding {key} by {} stopped, nothing committed: {}",
            cfg.level_id(),
            problems.join("; ")
        )));
    }
    parity.sort_by_key(|p| (p.stripe, p.row));
    let header = Header { parity, ..plan };
    header.check().map_err(err)?;
    // 4. Commit: the header on every member (then this one).
    for m in &cfg.set.members {
        if *m == me {
            continue;
        }
        let c = match conns.get_mut(m) {
            Some(c) => c,
            None => return Err(err(format!("{m}: no connection for the commit"))),
        };
        match ask(
            c,
            &EraMsg::Commit {
                header: header.clone(),
            },
            Duration::from_secs(60),
        )
        .await?
        {
            EraMsg::Done => {}
            other => return Err(proto_err(m, format!("answered {other:?} to the commit"))),
        }
    }
    commit_local(shared, &header).await?;
    Ok(header.epoch)
}

// ---------------------------------------------------------------------------------
// A member's place in the ring.

fn expect_piece(
    plan: &Header,
    pred: &str,
    got: &PieceIn,
    stripe: usize,
    offset: u64,
    len: u32,
) -> std::result::Result<(), String> {
    let (_, p, data) = got.as_ref().map_err(|e| e.clone())?;
    let ok = p.kind == SegKind::Partial
        && p.stripe as usize == stripe
        && p.row == 0
        && p.offset == offset
        && p.len == len
        && p.seg_size == plan.segment
        && data.len() == len as usize;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{pred} sent a piece out of place (stripe {} at {} of {} bytes, segment {}; expected stripe {stripe} at {offset} of {len}, segment {})",
            p.stripe, p.offset, p.len, p.seg_size, plan.segment
        ))
    }
}

/// Run this member's steps of `plan`'s ring; its parity records, stored and verified.
async fn member_role(shared: Arc<Shared>, plan: Header, me: String) -> Result<Vec<ParityRecord>> {
    let cfg = shared
        .cfg
        .erasure
        .clone()
        .ok_or_else(|| err("this node has no erasure set"))?;
    if plan.set != cfg.set.name || plan.members != cfg.set.members || plan.scheme != cfg.scheme {
        return Err(err(format!(
            "the plan of {} is for set {} {:?} ({}), this node is in {} {:?} ({})",
            plan.dataset, plan.set, plan.members, plan.scheme, cfg.set.name, cfg.set.members, cfg.scheme
        )));
    }
    let i = plan
        .index_of(&me)
        .ok_or_else(|| err("not a member of the plan"))?;
    let _one = shared.erasure.running.lock().await;
    let n = plan.members.len();
    // My part in the plan must be exactly what this store holds.
    {
        let want: Vec<WantFile> = plan.parts[i]
            .files
            .iter()
            .map(|f| WantFile {
                path: f.path.clone(),
                size: f.size,
                crc32c: f.crc32c,
            })
            .collect();
        let (store, me2) = (shared.store.clone(), me.clone());
        let mine = tokio::task::spawn_blocking(move || my_part(&store, &me2, &want))
            .await
            .map_err(|e| err(e.to_string()))??;
        if mine != plan.parts[i] {
            return Err(err(format!(
                "the plan's part of {me} is not what its store holds"
            )));
        }
        let level = level_of(&shared.store)?;
        member::mark_encoding(&Mover::default(), &level, &plan.dataset, &plan.set, plan.epoch)
            .map_err(err)?;
    }
    let key = (plan.dataset.clone(), plan.epoch);
    // Unbounded, yet bounded in practice: a neighbour is at most a round of pieces ahead
    // (ring.rs), and the handler must always drain its connection (no cycle of full
    // buffers between members sending to each other).
    let (tx, mut rx) = mpsc::unbounded_channel::<PieceIn>();
    shared.erasure.jobs.lock().expect("jobs").insert(key.clone(), tx);
    shared.erasure.registered.notify_waiters();
    let r = match plan.scheme {
        Scheme::Xor => ring_steps(&shared, &plan, i, n, &mut rx).await,
        Scheme::Rs(_) => gather_steps(&shared, &plan, i, &mut rx).await,
    };
    shared.erasure.jobs.lock().expect("jobs").remove(&key);
    let shards = r?;
    let level = level_of(&shared.store)?;
    let lay = plan.layout();
    let mut recs = Vec::new();
    for ((s, j), b) in lay.held_by(i).into_iter().zip(shards) {
        recs.push(member::store_parity(&Mover::default(), &level, &plan, &me, s, j, &b).map_err(err)?);
    }
    Ok(recs)
}

async fn ring_steps(
    shared: &Arc<Shared>,
    plan: &Header,
    i: usize,
    n: usize,
    rx: &mut mpsc::UnboundedReceiver<PieceIn>,
) -> Result<Vec<Vec<u8>>> {
    let succ = plan.members[ring::successor(n, i)].clone();
    let pred = plan.members[ring::predecessor(n, i)].clone();
    let mut conn = shared.connect(&succ).await?;
    send_era(
        &mut conn,
        &EraMsg::Ring {
            set: plan.set.clone(),
            dataset: plan.dataset.clone(),
            epoch: plan.epoch,
        },
    )
    .await?;
    // The sender: pieces go out in order, two in flight at most (ring.rs: no deadlock).
    let (out_tx, mut out_rx) = mpsc::channel::<(Piece, Vec<u8>)>(2);
    let mut throttle = crate::throttle::Throttle::new(shared.cfg.max_bw, &shared.store, Duration::ZERO);
    let sh = shared.clone();
    let sender = tokio::spawn(async move {
        while let Some((p, data)) = out_rx.recv().await {
            let (off, crc) = (p.offset, ckptfs_transport::crc32c(&data));
            conn.send(Msg::Piece(p)).await?;
            conn.send_chunk_buf(off, crc, &data).await?;
            throttle.sent(data.len()).await;
            sh.erasure.status.lock().expect("erasure status").bytes_sent += data.len() as u64;
        }
        send_era(&mut conn, &EraMsg::Done).await
    });
    let level = level_of(&shared.store)?;
    let steps = ring::steps(n, i);
    let mut parity = vec![0u8; plan.segment as usize];
    let piece = |s: usize, offset: u64, len: u32| Piece {
        set: plan.set.clone(),
        dataset: plan.dataset.clone(),
        epoch: plan.epoch,
        stripe: s as u32,
        row: 0,
        kind: SegKind::Partial,
        offset,
        len,
        seg_size: plan.segment,
    };
    let run = async {
        for (off, len) in ring::pieces(plan.segment) {
            for st in &steps {
                match *st {
                    Step::Send(s) => {
                        let mut b = vec![0u8; len as usize];
                        member::read_segment(&level, plan, i, s, off, &mut b).map_err(err)?;
                        out_tx
                            .send((piece(s, off, len), b))
                            .await
                            .map_err(|_| err(format!("the connection to {succ} ended")))?;
                    }
                    Step::Pass(s) | Step::Keep(s) => {
                        let got = tokio::time::timeout(PIECE_TIMEOUT, rx.recv())
                            .await
                            .map_err(|_| {
                                err(format!("no piece of stripe {s} from {pred} in {PIECE_TIMEOUT:?}"))
                            })?
                            .ok_or_else(|| err(format!("the ring connection from {pred} ended")))?;
                        if let Err(e) = expect_piece(plan, &pred, &got, s, off, len) {
                            shared
                                .erasure
                                .status
                                .lock()
                                .expect("erasure status")
                                .pieces_refused += 1;
                            return Err(err(e));
                        }
                        let (_, _, mut b) = got.expect("checked");
                        if let Step::Pass(_) = st {
                            let mut own = vec![0u8; len as usize];
                            member::read_segment(&level, plan, i, s, off, &mut own).map_err(err)?;
                            ckptfs_erasure::codec::xor_into(&mut b, &own);
                            out_tx
                                .send((piece(s, off, len), b))
                                .await
                                .map_err(|_| err(format!("the connection to {succ} ended")))?;
                        } else {
                            parity[off as usize..off as usize + len as usize].copy_from_slice(&b);
                        }
                    }
                }
            }
        }
        Ok::<(), NodeError>(())
    };
    let r = run.await;
    drop(out_tx);
    let sent = sender.await.map_err(|e| err(e.to_string()))?;
    r?;
    sent?;
    Ok(vec![parity])
}

/// Who sends pieces to member `me` during an encode: its predecessor in the XOR ring;
/// with Reed-Solomon, the data members of its stripe (their segments) and the members
/// `me - j` (row `j` of their stripe, `0 < j < k`).
fn senders_to(cfg: &ErasureConfig, me: &str) -> Vec<String> {
    let m = &cfg.set.members;
    let n = m.len();
    let Some(i) = m.iter().position(|x| x == me) else {
        return Vec::new();
    };
    match cfg.scheme {
        Scheme::Xor => vec![m[ring::predecessor(n, i)].clone()],
        Scheme::Rs(k) => {
            let lay = Layout {
                n,
                scheme: cfg.scheme,
                segment: 0,
            };
            let mut v: Vec<String> = lay.data_members(i).into_iter().map(|d| m[d].clone()).collect();
            for j in 1..(k as usize).min(n) {
                v.push(m[(i + n - j) % n].clone());
            }
            v
        }
    }
}

/// Outgoing pieces to one member, in order, on a connection of their own.
struct Outgoing {
    tx: mpsc::Sender<(Piece, Vec<u8>)>,
    task: tokio::task::JoinHandle<Result<()>>,
}

async fn open_outgoing(shared: &Arc<Shared>, plan: &Header, to: &str) -> Result<Outgoing> {
    let mut conn = shared.connect(to).await?;
    send_era(
        &mut conn,
        &EraMsg::Ring {
            set: plan.set.clone(),
            dataset: plan.dataset.clone(),
            epoch: plan.epoch,
        },
    )
    .await?;
    let (tx, mut rx) = mpsc::channel::<(Piece, Vec<u8>)>(2);
    let mut throttle = crate::throttle::Throttle::new(shared.cfg.max_bw, &shared.store, Duration::ZERO);
    let sh = shared.clone();
    let task = tokio::spawn(async move {
        while let Some((p, data)) = rx.recv().await {
            let (off, crc) = (p.offset, ckptfs_transport::crc32c(&data));
            conn.send(Msg::Piece(p)).await?;
            conn.send_chunk_buf(off, crc, &data).await?;
            throttle.sent(data.len()).await;
            sh.erasure.status.lock().expect("erasure status").bytes_sent += data.len() as u64;
        }
        send_era(&mut conn, &EraMsg::Done).await
    });
    Ok(Outgoing { tx, task })
}

/// A piece's place: (sender, kind, stripe, row, offset).
type PieceKey = (String, u8, u32, u16, u64);

/// Reed-Solomon across daemons: each data member sends its segment of stripe `s` to the
/// stripe's row-0 holder (member `s`), which encodes each piece once its data pieces are
/// in and forwards rows `1..k` to their holders (members `s + j`). Piece by piece: in
/// round `r` a member first sends its pieces `r` (no waiting), then waits for the pieces
/// `r` of its own stripe, encodes and forwards, then waits for the rows it holds of the
/// stripes before it: no member waits for one that waits for it. Returns the member's
/// shards in `held_by` order.
async fn gather_steps(
    shared: &Arc<Shared>,
    plan: &Header,
    i: usize,
    rx: &mut mpsc::UnboundedReceiver<PieceIn>,
) -> Result<Vec<Vec<u8>>> {
    let lay = plan.layout();
    let (n, p) = (lay.n, plan.scheme.parity());
    let members = &plan.members;
    let mut dests: Vec<usize> = (0..n).filter(|&s| lay.segment_of(i, s).is_some()).collect();
    dests.extend((1..p).map(|j| (i + j) % n));
    dests.sort_unstable();
    dests.dedup();
    let mut out: BTreeMap<usize, Outgoing> = BTreeMap::new();
    for d in dests {
        out.insert(d, open_outgoing(shared, plan, &members[d]).await?);
    }
    let level = level_of(&shared.store)?;
    let held = lay.held_by(i);
    let mut shards: Vec<Vec<u8>> = held.iter().map(|_| vec![0u8; plan.segment as usize]).collect();
    let data_of_mine = lay.data_members(i);
    let mut enc: Option<(u32, ckptfs_erasure::codec::Encoder)> = None;
    // Pieces that arrived before their round.
    let mut early: HashMap<PieceKey, Vec<u8>> = HashMap::new();
    let piece = |s: usize, j: usize, kind: SegKind, offset: u64, len: u32| Piece {
        set: plan.set.clone(),
        dataset: plan.dataset.clone(),
        epoch: plan.epoch,
        stripe: s as u32,
        row: j as u16,
        kind,
        offset,
        len,
        seg_size: plan.segment,
    };
    let pieces = ring::pieces(plan.segment);
    let run = async {
        for &(off, len) in &pieces {
            // 1. This member's data pieces of the round, to their stripes' holders.
            for s in 0..n {
                if lay.segment_of(i, s).is_none() {
                    continue;
                }
                let mut b = vec![0u8; len as usize];
                member::read_segment(&level, plan, i, s, off, &mut b).map_err(err)?;
                out[&s]
                    .tx
                    .send((piece(s, 0, SegKind::Data, off, len), b))
                    .await
                    .map_err(|_| err(format!("the connection to {} ended", members[s])))?;
            }
            // 2. What this member waits for in the round: the data of its stripe, and
            // the rows it holds of the stripes before it.
            let data_keys: Vec<PieceKey> = data_of_mine
                .iter()
                .map(|&d| (members[d].clone(), SegKind::Data as u8, i as u32, 0u16, off))
                .collect();
            let row_keys: Vec<PieceKey> = (1..p)
                .map(|j| {
                    let s = (i + n - j) % n;
                    (members[s].clone(), SegKind::Parity as u8, s as u32, j as u16, off)
                })
                .collect();
            let mut got: HashMap<PieceKey, Vec<u8>> = HashMap::new();
            for k in data_keys.iter().chain(&row_keys) {
                if let Some(b) = early.remove(k) {
                    got.insert(k.clone(), b);
                }
            }
            let mut encoded = false;
            loop {
                if !encoded && data_keys.iter().all(|k| got.contains_key(k)) {
                    // 3. Encode this piece of the stripe, keep row 0, forward the others.
                    let refs: Vec<&[u8]> = data_keys.iter().map(|k| got[k].as_slice()).collect();
                    if enc.as_ref().is_none_or(|(l, _)| *l != len) {
                        let e = ckptfs_erasure::codec::Encoder::new(plan.scheme, lay.data(), len as usize)
                            .map_err(err)?;
                        enc = Some((len, e));
                    }
                    let mut par = vec![Vec::new(); p];
                    enc.as_mut()
                        .expect("set")
                        .1
                        .encode(&refs, &mut par)
                        .map_err(err)?;
                    for (j, row) in par.into_iter().enumerate() {
                        if j == 0 {
                            let k = held.iter().position(|&h| h == (i, 0)).expect("row 0");
                            shards[k][off as usize..(off + len as u64) as usize].copy_from_slice(&row);
                        } else {
                            let to = (i + j) % n;
                            out[&to]
                                .tx
                                .send((piece(i, j, SegKind::Parity, off, len), row))
                                .await
                                .map_err(|_| err(format!("the connection to {} ended", members[to])))?;
                        }
                    }
                    encoded = true;
                }
                if encoded && row_keys.iter().all(|k| got.contains_key(k)) {
                    break;
                }
                // 4. The next piece from any sender: it must be one this member waits
                // for, in this round or a later one, and not seen before.
                let next = tokio::time::timeout(PIECE_TIMEOUT, rx.recv())
                    .await
                    .map_err(|_| err(format!("no piece at {off} in {PIECE_TIMEOUT:?}")))?
                    .ok_or_else(|| err("the encoding's connections ended"))?;
                let (from, pc, b) = next.map_err(err)?;
                let k: PieceKey = (from.clone(), pc.kind as u8, pc.stripe, pc.row, pc.offset);
                let expected_len = pieces.iter().find(|(o, _)| *o == pc.offset).map(|(_, l)| *l);
                let same_place = |w: &PieceKey| (&w.0, w.1, w.2, w.3) == (&k.0, k.1, k.2, k.3);
                let ok = pc.seg_size == plan.segment
                    && expected_len == Some(pc.len)
                    && b.len() == pc.len as usize
                    && pc.offset >= off
                    && data_keys.iter().chain(&row_keys).any(same_place)
                    && !got.contains_key(&k)
                    && !early.contains_key(&k);
                if !ok {
                    shared
                        .erasure
                        .status
                        .lock()
                        .expect("erasure status")
                        .pieces_refused += 1;
                    return Err(err(format!(
                        "{from} sent a piece out of place (stripe {} row {} at {} of {} bytes, segment {})",
                        pc.stripe, pc.row, pc.offset, pc.len, pc.seg_size
                    )));
                }
                if pc.offset == off {
                    got.insert(k, b);
                } else {
                    early.insert(k, b);
                }
            }
            // 5. The rows of the stripes before it that this member holds.
            for (jm1, k) in row_keys.iter().enumerate() {
                let s = (i + n - (jm1 + 1)) % n;
                let at = held.iter().position(|&h| h == (s, jm1 + 1)).expect("held row");
                shards[at][off as usize..(off + len as u64) as usize].copy_from_slice(&got[k]);
            }
        }
        Ok::<(), NodeError>(())
    };
    let r = run.await;
    let mut sent = Ok(());
    for (_, o) in out {
        drop(o.tx);
        match o.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => sent = Err(e),
            Err(e) => sent = Err(err(e.to_string())),
        }
    }
    r?;
    sent?;
    Ok(shards)
}

// ---------------------------------------------------------------------------------
// The server side.

fn set_of_shared(shared: &Shared) -> std::result::Result<ErasureConfig, Box<EraMsg>> {
    shared.cfg.erasure.clone().ok_or_else(|| {
        Box::new(fail(
            libc::ENOENT,
            format!("{} has no erasure set", shared.cfg.node_id),
        ))
    })
}

/// Serve one erasure message (the first `Erasure` frame of a request) on `conn`.
pub(crate) async fn serve(shared: &Arc<Shared>, conn: &mut Conn, body: String) -> Result<()> {
    let peer = conn.peer().to_string();
    let msg = match proto::parse(&body) {
        Ok(m) => m,
        Err(e) => {
            shared
                .erasure
                .status
                .lock()
                .expect("erasure status")
                .pieces_refused += 1;
            return Err(proto_err(&peer, e));
        }
    };
    let cfg = match set_of_shared(shared) {
        Ok(c) => c,
        Err(f) => return send_era(conn, &f).await,
    };
    let me = shared.cfg.node_id.clone();
    let leader = cfg.set.members.first().cloned().unwrap_or_default();
    let member_of = |n: &str| cfg.set.members.iter().any(|m| m == n);
    let refuse = |what: &str| {
        fail(
            libc::EACCES,
            format!("{peer} may not {what} (set {})", cfg.set.name),
        )
    };
    match msg {
        EraMsg::PartOf { set, dataset, files } => {
            if set != cfg.set.name || peer != leader {
                return send_era(conn, &refuse("ask for parts")).await;
            }
            let (store, me2) = (shared.store.clone(), me.clone());
            let ans = match tokio::task::spawn_blocking(move || my_part(&store, &me2, &files)).await {
                Ok(Ok(part)) => EraMsg::Part { part },
                Ok(Err(e)) => fail(e.errno(), format!("{dataset}: {e}")),
                Err(e) => fail(libc::EIO, e),
            };
            send_era(conn, &ans).await?;
            // The plan and the commit follow on the same connection.
            loop {
                let next = match tokio::time::timeout(Duration::from_secs(120), conn.recv()).await {
                    Ok(r) => r?,
                    Err(_) => return Ok(()),
                };
                match next {
                    Some(Msg::Erasure(b)) => match proto::parse(&b).map_err(|e| proto_err(&peer, e))? {
                        EraMsg::Encode { plan } => {
                            let ans = match member_role(shared.clone(), plan, me.clone()).await {
                                Ok(parity) => EraMsg::Stored { parity },
                                Err(e) => fail(e.errno(), e),
                            };
                            send_era(conn, &ans).await?;
                        }
                        EraMsg::Commit { header } => {
                            let ans = match commit_local(shared, &header).await {
                                Ok(()) => EraMsg::Done,
                                Err(e) => fail(e.errno(), e),
                            };
                            send_era(conn, &ans).await?;
                            return Ok(());
                        }
                        other => return Err(proto_err(&peer, format!("unexpected {other:?}"))),
                    },
                    Some(other) => return Err(proto_err(&peer, format!("unexpected {}", other.name()))),
                    None => return Ok(()),
                }
            }
        }
        EraMsg::Ring { set, dataset, epoch } => {
            if set != cfg.set.name || !senders_to(&cfg, &me).contains(&peer) {
                shared
                    .erasure
                    .status
                    .lock()
                    .expect("erasure status")
                    .pieces_refused += 1;
                return Err(proto_err(
                    &peer,
                    "sends pieces of an encoding but is not a member that sends to this one",
                ));
            }
            serve_ring(shared, conn, &dataset, epoch).await
        }
        EraMsg::Headers { set } => {
            if set != cfg.set.name || !member_of(&peer) {
                return send_era(conn, &refuse("list the set's encodings")).await;
            }
            let (store, me2, set2) = (shared.store.clone(), me.clone(), set.clone());
            let datasets = tokio::task::spawn_blocking(move || whole_shares(&store, &set2, &me2))
                .await
                .unwrap_or_default();
            send_era(conn, &EraMsg::Listed { datasets }).await
        }
        EraMsg::HeaderOf { set, dataset } => {
            if set != cfg.set.name || !member_of(&peer) {
                return send_era(conn, &refuse("read the set's headers")).await;
            }
            let level = level_of(&shared.store)?;
            match member::header(&level, &dataset, &set) {
                Some(header) => send_era(conn, &EraMsg::Head { header }).await,
                None => {
                    send_era(
                        conn,
                        &fail(libc::ENOENT, format!("no header of {dataset} on {me}")),
                    )
                    .await
                }
            }
        }
        EraMsg::Read {
            set,
            dataset,
            epoch,
            stripe,
            row,
            parity,
        } => {
            if set != cfg.set.name || !member_of(&peer) {
                return send_era(conn, &refuse("read the set's segments")).await;
            }
            serve_read(
                shared,
                conn,
                &set,
                &dataset,
                epoch,
                stripe as usize,
                row as usize,
                parity,
            )
            .await
        }
        EraMsg::Encode { .. } | EraMsg::Commit { .. } => {
            // Only after the part question, from the leader, on the same connection.
            send_era(conn, &refuse("send a plan or a commit here")).await
        }
        other => Err(proto_err(&peer, format!("unexpected {other:?}"))),
    }
}

/// Pieces of running sums from the predecessor, handed to the encoding they belong to.
async fn serve_ring(shared: &Arc<Shared>, conn: &mut Conn, dataset: &str, epoch: u64) -> Result<()> {
    let peer = conn.peer().to_string();
    let key = (dataset.to_string(), epoch);
    // The predecessor may have got the plan first: wait for this member's encoding.
    let deadline = Instant::now() + PIECE_TIMEOUT;
    let tx: mpsc::UnboundedSender<PieceIn> = loop {
        let registered = shared.erasure.registered.notified();
        if let Some(tx) = shared.erasure.jobs.lock().expect("jobs").get(&key).cloned() {
            break tx;
        }
        if Instant::now() >= deadline {
            return Err(proto_err(
                &peer,
                format!(
                    "sends running sums of {dataset} epoch {epoch:016x}, which is not being encoded here"
                ),
            ));
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), registered).await;
    };
    loop {
        let m = match conn.recv().await? {
            Some(m) => m,
            None => {
                // Closed before its `done`: the sender is gone (lost, killed, or it gave
                // up); the encoding here stops at once instead of waiting for pieces.
                let _ = tx.send(Err(format!(
                    "{peer} closed its connection in the middle of the encoding"
                )));
                return Ok(());
            }
        };
        let p = match m {
            Msg::Piece(p) => p,
            Msg::Erasure(b) if matches!(proto::parse(&b), Ok(EraMsg::Done)) => return Ok(()),
            other => {
                let e = format!("{peer} sent {} inside the ring", other.name());
                let _ = tx.send(Err(e.clone()));
                return Err(proto_err(&peer, e));
            }
        };
        if p.dataset != dataset || p.epoch != epoch || p.len as u64 > PIECE {
            let e = format!(
                "{peer} sent a piece of another encoding or too long ({} bytes)",
                p.len
            );
            shared
                .erasure
                .status
                .lock()
                .expect("erasure status")
                .pieces_refused += 1;
            let _ = tx.send(Err(e.clone()));
            return Err(proto_err(&peer, e));
        }
        let (offset, len) = match conn.recv().await? {
            Some(Msg::Chunk { offset, len, .. }) => (offset, len),
            other => {
                let e = format!(
                    "{peer} announced a piece and sent {}",
                    other.as_ref().map(|m| m.name()).unwrap_or("nothing")
                );
                let _ = tx.send(Err(e.clone()));
                return Err(proto_err(&peer, e));
            }
        };
        if offset != p.offset || len != p.len {
            let e = format!("{peer}'s chunk (at {offset}, {len} bytes) is not the piece it announced");
            shared
                .erasure
                .status
                .lock()
                .expect("erasure status")
                .pieces_refused += 1;
            let _ = tx.send(Err(e.clone()));
            return Err(proto_err(&peer, e));
        }
        let mut b = vec![0u8; len as usize];
        if !conn.chunk_data(&mut b).await? {
            let e = format!(
                "{peer}'s piece of stripe {} at {offset} failed its CRC32C check: the encoding stops",
                p.stripe
            );
            shared
                .erasure
                .status
                .lock()
                .expect("erasure status")
                .pieces_refused += 1;
            let _ = tx.send(Err(e.clone()));
            return Err(proto_err(&peer, e));
        }
        if tx.send(Ok((peer.clone(), p, b))).is_err() {
            return Ok(());
        }
    }
}

/// Keep `header` (the leader's commit, or a rebuild's): it must be this set's, and this
/// member's files and parity shards must be exactly what it records. Older epochs'
/// parity is removed.
async fn commit_local(shared: &Arc<Shared>, header: &Header) -> Result<()> {
    let cfg = shared.cfg.erasure.clone().ok_or_else(|| err("no erasure set"))?;
    let me = shared.cfg.node_id.clone();
    if header.set != cfg.set.name || header.members != cfg.set.members {
        return Err(err(format!(
            "a header of set {} {:?}, this node is in {}",
            header.set, header.members, cfg.set.name
        )));
    }
    let (store, header2) = (shared.store.clone(), header.clone());
    let r = tokio::task::spawn_blocking(move || -> Result<()> {
        let level = level_of(&store)?;
        let i = header2.index_of(&me).ok_or_else(|| err("not a member"))?;
        if !member::holds_share(&level, &header2, i) {
            return Err(err(format!(
                "{me} does not hold what the header of {} records for it",
                header2.dataset
            )));
        }
        let mut old: Vec<u64> = Vec::new();
        if let Some(h) = member::header(&level, &header2.dataset, &header2.set) {
            old.push(h.epoch);
        }
        if let Some(e) = member::marked(&level, &header2.dataset, &header2.set) {
            old.push(e);
        }
        member::store_header(&Mover::default(), &level, &header2).map_err(err)?;
        for e in old.into_iter().filter(|e| *e != header2.epoch) {
            member::drop_epoch(&level, &header2, i, e);
        }
        record_levels(&store, &cfg, &me);
        Ok(())
    })
    .await
    .map_err(|e| err(e.to_string()))?;
    if r.is_ok() {
        shared.erasure.set_state(
            &header.dataset,
            DatasetErasure {
                state: "protected".into(),
                epoch: header.epoch,
                ..Default::default()
            },
        );
    }
    r
}

/// The encodings of `set` this member holds its whole share of: (dataset, epoch).
fn whole_shares(store: &Store, set: &str, me: &str) -> Vec<(String, u64)> {
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

#[allow(clippy::too_many_arguments)]
async fn serve_read(
    shared: &Arc<Shared>,
    conn: &mut Conn,
    set: &str,
    dataset: &str,
    epoch: u64,
    s: usize,
    j: usize,
    parity: bool,
) -> Result<()> {
    let me = shared.cfg.node_id.clone();
    let (store, set2, ds2, me2) = (
        shared.store.clone(),
        set.to_string(),
        dataset.to_string(),
        me.clone(),
    );
    // Read the whole segment or shard (checked as it is read) on a blocking thread.
    let got = tokio::task::spawn_blocking(move || -> std::result::Result<(Header, Vec<u8>), Box<EraMsg>> {
        let level = level_of(&store).map_err(|e| bfail(e.errno(), e))?;
        let h = member::header(&level, &ds2, &set2)
            .filter(|h| h.epoch == epoch)
            .ok_or_else(|| {
                bfail(
                    libc::ENOENT,
                    format!("{me2} holds no encoding {epoch:016x} of {ds2}"),
                )
            })?;
        let i = h
            .index_of(&me2)
            .ok_or_else(|| bfail(libc::ENOENT, "not a member"))?;
        let lay = h.layout();
        if s >= lay.n {
            return Err(bfail(libc::EINVAL, format!("no stripe {s}")));
        }
        let b = if parity {
            if !lay.held_by(i).contains(&(s, j)) {
                return Err(bfail(
                    libc::ENOENT,
                    format!("{me2} holds no parity shard {s}.{j}"),
                ));
            }
            let b = member::read_parity(&level, &h, s, j).map_err(|e| bfail(e.errno(), e))?;
            if !ckptfs_erasure::parity_matches(&h, s, j, &b) {
                return Err(bfail(
                    libc::EIO,
                    format!("parity shard {s}.{j} on {me2} fails its CRC32C check"),
                ));
            }
            b
        } else {
            let mut b = vec![0u8; h.segment as usize];
            member::read_segment(&level, &h, i, s, 0, &mut b).map_err(|e| bfail(e.errno(), e))?;
            b
        };
        Ok((h, b))
    })
    .await
    .map_err(|e| err(e.to_string()))?;
    let (h, b) = match got {
        Ok(x) => x,
        Err(f) => return send_era(conn, &f).await,
    };
    for (off, len) in ring::pieces(h.segment) {
        let data = &b[off as usize..off as usize + len as usize];
        conn.send(Msg::Piece(Piece {
            set: set.to_string(),
            dataset: dataset.to_string(),
            epoch,
            stripe: s as u32,
            row: j as u16,
            kind: if parity { SegKind::Parity } else { SegKind::Data },
            offset: off,
            len,
            seg_size: h.segment,
        }))
        .await?;
        conn.send_chunk_buf(off, ckptfs_transport::crc32c(data), data)
            .await?;
    }
    send_era(conn, &EraMsg::Done).await
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

struct NetShards<'a> {
    rt: &'a tokio::runtime::Runtime,
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
        let node = &h.members[i];
        let req = EraMsg::Read {
            set: h.set.clone(),
            dataset: h.dataset.clone(),
            epoch: h.epoch,
            stripe: s as u32,
            row: j as u16,
            parity,
        };
        self.rt
            .block_on(async {
                let mut c = connect(self.cluster, self.me, node, self.timeout).await?;
                send_era(&mut c, &req).await?;
                let mut out = vec![0u8; h.segment as usize];
                let mut next = 0u64;
                loop {
                    let m = tokio::time::timeout(self.timeout, c.recv())
                        .await
                        .map_err(|_| err(format!("{node}: no answer in {:?}", self.timeout)))??;
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
                            match c.recv().await? {
                                Some(Msg::Chunk { offset, len, .. })
                                    if offset == p.offset && len == p.len => {}
                                _ => {
                                    return Err(proto_err(node, "announced a piece and sent something else"))
                                }
                            }
                            let end = (p.offset + p.len as u64) as usize;
                            if !c.chunk_data(&mut out[p.offset as usize..end]).await? {
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
            })
            .map_err(|e| e.to_string())
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

async fn connect(cluster: &Cluster, me: &str, node: &str, timeout: Duration) -> Result<Conn> {
    let addr = cluster
        .node(node)
        .map_err(|e| NodeError::Cluster(e.to_string()))?
        .addr
        .clone();
    let keys = cluster
        .node_keys(me)
        .map_err(|e| NodeError::Cluster(e.to_string()))?;
    tokio::time::timeout(timeout, Conn::connect(&addr, me, node, &keys, cluster))
        .await
        .map_err(|_| NodeError::Transport(format!("connect to {node} ({addr}): timed out")))?
}

/// Ask every other member of `set` which encodings it holds its whole share of.
/// Per member, the encodings it listed; per member not reached, why.
type Survey = (BTreeMap<String, Vec<(String, u64)>>, BTreeMap<String, String>);

fn survey(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    me: &str,
    set: &RedSet,
    timeout: Duration,
) -> Survey {
    let mut listed = BTreeMap::new();
    let mut unreachable = BTreeMap::new();
    for m in set.members.iter().filter(|m| *m != me) {
        let r = rt.block_on(async {
            let mut c = connect(cluster, me, m, timeout).await?;
            ask(
                &mut c,
                &EraMsg::Headers {
                    set: set.name.clone(),
                },
                timeout,
            )
            .await
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
fn judge_key(
    rt: &tokio::runtime::Runtime,
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
        let r = rt.block_on(async {
            let mut c = connect(cluster, me, m, timeout).await?;
            ask(
                &mut c,
                &EraMsg::HeaderOf {
                    set: set.name.clone(),
                    dataset: key.to_string(),
                },
                timeout,
            )
            .await
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
/// a dataset key), from the survivors: see the module documentation. Call from a plain
/// thread (it runs its own runtime).
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| NodeError::io("start the runtime", e))?;
    let level = level_of(store)?;
    let mut rep = SetRebuildReport {
        level: format!("erasure:{}", set.name),
        ..Default::default()
    };
    let (listed, unreachable) = survey(&rt, cluster, me, &set, timeout);
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
        let (h, mut lost) = match judge_key(&rt, cluster, me, &set, &key, &listed, timeout) {
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
        let shards = NetShards {
            rt: &rt,
            cluster,
            me,
            timeout,
        };
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // Ask every member; this node's own share (when it is one) is judged here, from its
    // store.
    let mut listed = BTreeMap::new();
    for m in &set.members {
        if m == me {
            listed.insert(m.clone(), whole_shares(store, &set.name, me));
            continue;
        }
        let r = rt.block_on(async {
            let mut c = connect(cluster, me, m, timeout).await?;
            ask(
                &mut c,
                &EraMsg::Headers {
                    set: set.name.clone(),
                },
                timeout,
            )
            .await
        });
        if let Ok(EraMsg::Listed { datasets }) = r {
            listed.insert(m.clone(), datasets);
        }
    }
    let (h, lost) = judge_key(&rt, cluster, me, &set, key, &listed, timeout)?;
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
