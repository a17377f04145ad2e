//! The daemon: attach the store, listen on the node's address, heartbeat the peers,
//! send partner copies, serve the peers' requests, host the drain to the PFS, publish
//! the status; stop when the shutdown future completes.
//!
//! Tasks (one tokio runtime):
//! ```text
//! listener   accept -> authenticate -> one handler task per connection (handler.rs)
//! heartbeat  one task per peer: Heartbeat every heartbeat_ms, up/down (soft state)
//! replicate  scan the store, send copies to the partners (replicate.rs)
//! status     write the status file twice a second
//! drain      the agent engine on a thread of its own, when a PFS dir is configured
//! ```
//! At shutdown every task is aborted: a copy in flight is abandoned (the partner drops
//! its half copy when the connection closes) and redone by the next daemon; the drain
//! abandons its file in flight the same way.

use crate::error::{NodeError, Result};
use crate::node_status::{self, CopyInFlight, NodeStatus, PeerState};
use crate::partner_store;
use crate::peer::{Conn, Msg};
use ckptfs_agent::sys::Priority;
use ckptfs_agent::{Agent, AgentConfig};
use ckptfs_cluster::{Cluster, NodeKeys, Plan};
use ckptfs_store::{Store, StoreOptions};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// Settings of one node daemon.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The cluster map.
    pub cluster: Cluster,
    /// This node's id in it.
    pub node_id: String,
    /// The node store (its name from the cluster map; sizes used if it must be created).
    pub store: StoreOptions,
    /// Drain to the PFS in this daemon (the agent engine), if configured.
    pub drain: Option<AgentConfig>,
    /// Bandwidth cap of partner copies out, bytes per second.
    pub max_bw: Option<f64>,
    /// Most bytes of other nodes' copies this node holds (ENOSPC past it); None:
    /// `partner_share` of the store's memory.
    pub partner_limit: Option<u64>,
    /// Share of the store's memory other nodes' copies may hold when `partner_limit`
    /// is not set (0.5 by default: the application keeps at least the other half).
    pub partner_share: f64,
    /// Time between scans of the store for files to copy.
    pub scan_interval: Duration,
    /// CPU and IO priority of the partner-copy threads (copies out, copies in, Gets):
    /// setting `partner_priority`, `low` (nice 10) by default like the drain.
    pub partner_priority: Priority,
    /// Copies out step back while an application writes into this node's store (its
    /// write count moves): at most this long at a stretch, then they take at least
    /// half the time (docs/cluster.md). Zero: never step back.
    pub writer_yield: Duration,
    /// With datasets: which complete files are copied to partners follows each
    /// dataset's level decision (`ckptfs_datasets::PartnerPolicy`); None: every one.
    pub datasets: Option<std::sync::Arc<ckptfs_datasets::PartnerPolicy>>,
    /// Serve Prometheus metrics (`--metrics`; docs/metrics.md); None: off.
    pub metrics: Option<crate::metrics::MetricsConfig>,
    /// This node's erasure set and the job whose complete datasets it protects (the
    /// cluster file's `[redundancy] erasure`); None: no erasure sets.
    pub erasure: Option<crate::erasure::ErasureConfig>,
}

/// Share of the store's memory that other nodes' copies may hold by default.
pub const DEFAULT_PARTNER_SHARE: f64 = 0.5;

/// Parse a `partner_priority` value: `idle` (nice 19, idle IO class), `low` (nice 10,
/// lowest best-effort IO level) or `normal` (left alone).
pub fn parse_priority(v: &str) -> Result<Priority> {
    match v.trim().to_ascii_lowercase().as_str() {
        "idle" => Ok(Priority::Idle),
        "low" => Ok(Priority::Low),
        "normal" => Ok(Priority::Normal),
        other => Err(NodeError::Invalid(format!(
            "partner priority {other:?}: want idle, low or normal"
        ))),
    }
}

/// The name of a priority as `parse_priority` takes it.
pub fn priority_name(p: Priority) -> &'static str {
    match p {
        Priority::Idle => "idle",
        Priority::Low => "low",
        Priority::Normal => "normal",
    }
}

impl NodeConfig {
    /// Settings for `node_id` of `cluster`, its store named by the cluster map.
    pub fn new(cluster: Cluster, node_id: &str) -> Result<NodeConfig> {
        let node = cluster
            .node(node_id)
            .map_err(|e| NodeError::Cluster(e.to_string()))?;
        Ok(NodeConfig {
            store: StoreOptions::named(node.store.clone()),
            node_id: node_id.to_string(),
            cluster,
            drain: None,
            max_bw: None,
            partner_limit: None,
            partner_share: DEFAULT_PARTNER_SHARE,
            scan_interval: Duration::from_millis(200),
            partner_priority: Priority::Low,
            writer_yield: Duration::from_secs(1),
            datasets: None,
            metrics: None,
            erasure: None,
        })
    }
}

/// Counters published in the status.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub copies_sent: u64,
    pub bytes_sent: u64,
    pub copies_refused: u64,
    pub changed_during_copy: u64,
    pub chunks_resent: u64,
    pub copies_received: u64,
    /// Copies refused because this node is not the sender's partner in the plan.
    pub copies_refused_in: u64,
    /// Copies a holder no longer had when asked (struck from the record, sent again).
    pub copies_lost: u64,
    /// Files whose current version has fewer partner copies than the plan asks.
    pub unprotected_files: u64,
    /// Their bytes.
    pub unprotected_bytes: u64,
    /// Copies of deleted or superseded versions still to be dropped on their holders.
    pub pending_drops: u64,
    /// Every node is still to be asked for older copies of files that just got their
    /// first record (counted in the status's `pending_drops`).
    pub verify_owed: bool,
    /// The store's change sequence number the last finished pass of the copy loop
    /// started from.
    pub changes_seen: u64,
    pub chunks_refused: u64,
    /// Time copies out stepped back for the application's writes.
    pub yielded: Duration,
}

/// State shared by the daemon's tasks.
pub(crate) struct Shared {
    pub cfg: NodeConfig,
    pub store: Store,
    /// This node's credentials (its key with each other node).
    pub keys: NodeKeys,
    /// The partner quota (copies held and being received for other nodes).
    pub quota: partner_store::Quota,
    pub plan: Plan,
    pub listen: String,
    /// Last heartbeat answer per peer.
    pub seen: Mutex<BTreeMap<String, Instant>>,
    /// Heartbeat connections made per peer. A new one (the old connection broke) may be
    /// a new incarnation of the peer, a replacement that lost the copies it held, even
    /// when it came back before it was noticed down: the copies it holds are verified
    /// again before they count (protect.rs).
    pub connects: Mutex<BTreeMap<String, u64>>,
    /// Per peer, the `connects` count its copies were last verified at.
    pub verified: Mutex<BTreeMap<String, u64>>,
    pub counters: Mutex<Counters>,
    pub in_flight: Mutex<Option<CopyInFlight>>,
    /// When the daemon started.
    pub started: Instant,
    /// The caller's runtime directory (status file).
    pub rundir: ckptfs_runtime::RuntimeDir,
    /// The runtime of the partner-copy threads (at `partner_priority`): copies out, and
    /// every connection that is not a heartbeat connection.
    pub copies: tokio::runtime::Handle,
    /// Per-peer counters of the metrics (heartbeats missed, transfer errors).
    pub peer_metrics: crate::metrics::PeerCounters,
    /// Erasure encodings running here and their states (erasure.rs).
    pub erasure: crate::erasure::EraState,
}

impl Shared {
    fn down_after(&self) -> Duration {
        let c = &self.cfg.cluster;
        Duration::from_millis(c.heartbeat_ms.max(1) * c.heartbeat_misses.max(1) as u64)
    }

    /// This node's partners now: the plan's, a dead one replaced by the next eligible
    /// node. A peer counts as up while its heartbeats are answered; one never heard from
    /// counts as up only during the first heartbeat period after start (so files do not
    /// wait for the first heartbeat, and a node that never came up is replaced).
    pub fn partners(&self) -> Vec<String> {
        let seen = self.seen.lock().expect("seen");
        let down_after = self.down_after();
        self.plan
            .effective_partners(&self.cfg.node_id, |n| match seen.get(n) {
                Some(t) => t.elapsed() <= down_after,
                None => self.started.elapsed() <= down_after,
            })
    }

    /// Whether `peer` answers heartbeats now (one never heard from counts as up during
    /// the first heartbeat period after start, as in [`Shared::partners`]).
    pub fn is_up(&self, peer: &str) -> bool {
        let seen = self.seen.lock().expect("seen");
        match seen.get(peer) {
            Some(t) => t.elapsed() <= self.down_after(),
            None => self.started.elapsed() <= self.down_after(),
        }
    }

    /// Whether this node may hold copies of `peer`'s files: it is one of `peer`'s
    /// partners in the plan, or one of the replacements that stand in for them.
    pub fn may_hold_for(&self, peer: &str) -> bool {
        self.plan.node(peer).is_some_and(|n| {
            n.partners
                .iter()
                .chain(n.replacements.iter())
                .any(|p| *p == self.cfg.node_id)
        })
    }

    /// An authenticated connection to `peer`.
    pub async fn connect(&self, peer: &str) -> Result<Conn> {
        let node = self
            .cfg
            .cluster
            .node(peer)
            .map_err(|e| NodeError::Cluster(e.to_string()))?;
        let c = tokio::time::timeout(
            Duration::from_secs(5),
            Conn::connect(&node.addr, &self.cfg.node_id, peer, &self.keys, &self.cfg.cluster),
        )
        .await
        .map_err(|_| NodeError::Transport(format!("connect to {peer} ({}): timed out", node.addr)))??;
        Ok(c)
    }

    /// Whether `peer` answered a heartbeat within the heartbeat period times the misses
    /// allowed (unlike [`Shared::is_up`], a peer never heard from is not).
    pub fn heard(&self, peer: &str) -> bool {
        let seen = self.seen.lock().expect("seen");
        seen.get(peer).is_some_and(|t| t.elapsed() <= self.down_after())
    }

    /// Peers connected again since their copies were last verified (their copies do not
    /// count until they are).
    pub fn unverified(&self) -> Vec<String> {
        let c = self.connects.lock().expect("connects").clone();
        let v = self.verified.lock().expect("verified");
        c.into_iter()
            .filter(|(n, k)| v.get(n).copied().unwrap_or(0) != *k)
            .map(|(n, _)| n)
            .collect()
    }

    pub fn set_in_flight(&self, f: Option<CopyInFlight>) {
        *self.in_flight.lock().expect("in flight") = f;
    }

    pub(crate) fn status(&self) -> NodeStatus {
        let partners = self.partners();
        let seen = self.seen.lock().expect("seen").clone();
        let peers = self
            .cfg
            .cluster
            .nodes
            .iter()
            .filter(|n| n.id != self.cfg.node_id)
            .map(|n| {
                let last = seen.get(&n.id);
                (
                    n.id.clone(),
                    PeerState {
                        addr: n.addr.clone(),
                        up: last.is_some_and(|t| t.elapsed() <= self.down_after()),
                        last_seen_ms: last.map(|t| t.elapsed().as_millis() as u64),
                        partner: partners.contains(&n.id),
                    },
                )
            })
            .collect();
        let c = self.counters.lock().expect("counters");
        let holding = partner_store::sources(&self.store)
            .into_iter()
            .map(|s| {
                let n = partner_store::list(&self.store, &s).len() as u64;
                (s, n)
            })
            .collect();
        NodeStatus {
            node: self.cfg.node_id.clone(),
            store: self.store.name().to_string(),
            pid: std::process::id(),
            running: true,
            listen: self.listen.clone(),
            partners,
            peers,
            drain: self.cfg.drain.is_some(),
            copies_sent: c.copies_sent,
            bytes_sent: c.bytes_sent,
            copies_refused: c.copies_refused,
            changed_during_copy: c.changed_during_copy,
            chunks_resent: c.chunks_resent,
            copies_received: c.copies_received,
            chunks_refused: c.chunks_refused,
            copies_lost: c.copies_lost,
            unprotected_files: c.unprotected_files,
            unprotected_bytes: c.unprotected_bytes,
            pending_drops: c.pending_drops + c.verify_owed as u64,
            changes_seen: c.changes_seen,
            changes_now: self.store.change_seq(),
            yielded_s: c.yielded.as_secs_f64(),
            partner_priority: priority_name(self.cfg.partner_priority).to_string(),
            in_flight: self
                .in_flight
                .lock()
                .expect("in flight")
                .iter()
                .cloned()
                .collect(),
            holding,
            erasure: self.cfg.erasure.as_ref().map(|e| {
                let mut st = self.erasure.status();
                st.level = e.level_id();
                st.scheme = e.scheme.to_string();
                st.members = e.set.members.clone();
                // What this member keeps, as its store says (an encode led elsewhere, a
                // rebuild, an earlier daemon's).
                // The store has the last word on what this member keeps: a header
                // replaces what memory says of a protected encoding (another process, a
                // rebuild, may have written it since).
                for (key, epoch) in self.erasure.kept(&self.store, &e.set.name) {
                    let d = st.datasets.entry(key).or_default();
                    if d.state.is_empty() || d.state == "protected" {
                        if d.epoch != epoch {
                            d.seconds = None;
                        }
                        d.state = "protected".into();
                        d.epoch = epoch;
                    }
                }
                st
            }),
        }
    }
}

/// What a daemon did, returned when it stops.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NodeSummary {
    /// Partner copies sent and acknowledged.
    pub copies_sent: u64,
    /// Partner copies received.
    pub copies_received: u64,
    /// Copies refused by partners.
    pub copies_refused: u64,
}

/// Run the daemon until `shutdown` completes, listening on the node's address from the
/// cluster map. The caller decides what stops it (the binary: SIGTERM/SIGINT; tests: a
/// channel). [`serve`] with the address bound here.
pub async fn run(cfg: NodeConfig, shutdown: impl Future<Output = ()>) -> Result<NodeSummary> {
    run_on(cfg, None, shutdown).await
}

/// Run the daemon until `shutdown` completes, accepting peers on `listener`, already
/// bound (and listening) by the caller: tests bind port 0 and write the port into the
/// cluster map, so no port is found free, released and bound again. The listener should
/// be on the node's address in the cluster map (peers connect there).
pub async fn serve(
    cfg: NodeConfig,
    listener: std::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<NodeSummary> {
    run_on(cfg, Some(listener), shutdown).await
}

async fn run_on(
    cfg: NodeConfig,
    bound: Option<std::net::TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<NodeSummary> {
    let me = cfg
        .cluster
        .node(&cfg.node_id)
        .map_err(|e| NodeError::Cluster(e.to_string()))?
        .clone();
    let plan = cfg
        .cluster
        .plan()
        .map_err(|e| NodeError::Cluster(e.to_string()))?;
    for w in &plan.warnings {
        tracing::warn!("cluster plan: {w}");
    }
    let keys = cfg
        .cluster
        .node_keys(&cfg.node_id)
        .map_err(|e| NodeError::Cluster(e.to_string()))?;
    let name = cfg
        .store
        .effective_name()
        .map_err(|e| NodeError::store("store name", e))?;
    let shm_dir = cfg.store.shm_dir.clone();
    let (rundir, _lock) = node_status::lock(&name)?;
    let store =
        Store::open_or_create(&cfg.store).map_err(|e| NodeError::store(format!("open store {name}"), e))?;
    let quota = partner_store::Quota::new(cfg.partner_limit.unwrap_or_else(|| {
        let info = store.info();
        ((info.mem_chunks as u64 * store.chunk_size()) as f64 * cfg.partner_share.clamp(0.0, 1.0)) as u64
    }));
    tracing::info!("partner quota: {} bytes", quota.limit());
    match ckptfs_runtime::raise_nofile_limit() {
        Ok(n) => tracing::debug!("open descriptors: up to {n}"),
        Err(e) => tracing::warn!("cannot raise the limit of open descriptors: {e}"),
    }
    let cleared = partner_store::clear_incoming(&store)?;
    if cleared > 0 {
        tracing::info!("removed {cleared} half-received copies left by a previous daemon");
    }
    // Page tables for the whole store, once, in the background at the partner priority:
    // received copies land in any free chunk, and would otherwise pay the first touch of
    // each (docs/benchmarks.md, "Figures behind design choices").
    {
        let store = store.clone();
        let prio = cfg.partner_priority;
        let _ = std::thread::Builder::new()
            .name("ckptfs-populate".into())
            .spawn(move || {
                let _ = ckptfs_agent::sys::set_priority(prio);
                let t = std::time::Instant::now();
                let n = store.populate_all();
                tracing::info!(
                    "populated page tables of {n} chunks in {:.3} s",
                    t.elapsed().as_secs_f64()
                );
            });
    }
    // Listen only on the configured address (or on the caller's listener).
    let listener = match bound {
        Some(l) => l
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(l))
            .map_err(|e| NodeError::io(format!("listen on the listener given for {}", me.addr), e))?,
        None => TcpListener::bind(&me.addr)
            .await
            .map_err(|e| NodeError::io(format!("listen on {}", me.addr), e))?,
    };
    let listen = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| me.addr.clone());
    tracing::info!("node {} (store {name}) listening on {listen}", cfg.node_id);
    // Partner copies run on threads of their own at the partner priority, so that they
    // step back for the application while heartbeats and status stay on time.
    let prio = cfg.partner_priority;
    let copy_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(2)
        .thread_name("partner-copy")
        .on_thread_start(move || {
            if let Err(e) = ckptfs_agent::sys::set_priority(prio) {
                tracing::warn!(
                    "cannot set the partner-copy priority {}: {e}",
                    priority_name(prio)
                );
            }
        })
        .enable_all()
        .build()
        .map_err(|e| NodeError::io("start the partner-copy runtime", e))?;
    let shared = Arc::new(Shared {
        copies: copy_rt.handle().clone(),
        store: store.clone(),
        keys,
        quota,
        plan,
        listen,
        seen: Mutex::new(BTreeMap::new()),
        connects: Mutex::new(BTreeMap::new()),
        verified: Mutex::new(BTreeMap::new()),
        counters: Mutex::new(Counters::default()),
        in_flight: Mutex::new(None),
        started: Instant::now(),
        rundir,
        peer_metrics: Default::default(),
        erasure: Default::default(),
        cfg,
    });
    let metrics = crate::metrics::start(&shared)?;

    // The drain to the PFS: the agent engine, on its own thread.
    let drain = match &shared.cfg.drain {
        Some(c) => {
            let agent = Agent::new(&store, c.clone())?;
            let stop = ckptfs_runtime::Shutdown::new();
            let stop2 = stop.clone();
            let t = std::thread::Builder::new()
                .name("drain".into())
                .spawn(move || agent.run(&stop2))
                .map_err(|e| NodeError::io("start the drain thread", e))?;
            Some((stop, t))
        }
        None => None,
    };

    let mut tasks = JoinSet::new();
    tasks.spawn(accept_loop(shared.clone(), listener));
    for n in &shared.cfg.cluster.nodes {
        if n.id != shared.cfg.node_id {
            tasks.spawn(heartbeat(shared.clone(), n.id.clone()));
        }
    }
    copy_rt.spawn(crate::replicate::run(shared.clone()));
    // Erasure encodes (the set's leader): on the partner-copy threads too, at their
    // priority, never in the application's way.
    copy_rt.spawn(crate::erasure::leader_loop(shared.clone()));
    tasks.spawn(status_loop(shared.clone()));
    tasks.spawn(crate::datasets::floor_loop(
        shared.clone(),
        Duration::from_secs(2),
    ));

    shutdown.await;
    tracing::info!("node {}: stopping", shared.cfg.node_id);
    tasks.shutdown().await;
    drop(metrics);
    // Every copy in flight is abandoned (the partner drops its half copy).
    copy_rt.shutdown_background();
    let mut result = Ok(());
    if let Some((stop, t)) = drain {
        stop.trigger();
        match t.join() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => result = Err(NodeError::Agent(e)),
            Err(_) => result = Err(NodeError::Transport("the drain thread panicked".into())),
        }
    }
    let mut st = shared.status();
    st.in_flight.clear();
    // Not for a store destroyed meanwhile (its status file went with it).
    if ckptfs_store::segment_path_in(shm_dir.as_deref(), &name).exists() {
        let _ = node_status::write_status(&shared.rundir, &st);
    }
    result?;
    Ok(NodeSummary {
        copies_sent: st.copies_sent,
        copies_received: st.copies_received,
        copies_refused: st.copies_refused,
    })
}

/// [`run`] on a multi-threaded runtime of its own (for the binary).
pub fn run_blocking(cfg: NodeConfig, shutdown: impl Future<Output = ()>) -> Result<NodeSummary> {
    runtime()?.block_on(run(cfg, shutdown))
}

/// [`serve`] on a multi-threaded runtime of its own.
pub fn serve_blocking(
    cfg: NodeConfig,
    listener: std::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<NodeSummary> {
    runtime()?.block_on(serve(cfg, listener, shutdown))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| NodeError::io("start the runtime", e))
}

/// Most connections still in their handshake at once. Past it the oldest is closed to
/// make room (an idle stranger's connection is old; an honest peer's handshake takes
/// milliseconds), so idle unauthenticated connections can neither exhaust the
/// descriptors nor keep honest peers out.
pub const MAX_PENDING_HANDSHAKES: usize = 128;

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut handlers = JoinSet::new();
    let pending: Arc<Mutex<BTreeMap<u64, tokio::task::AbortHandle>>> = Default::default();
    let mut next = 0u64;
    loop {
        let (sock, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let id = next;
        next += 1;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let shared2 = shared.clone();
        let pending2 = pending.clone();
        let h = handlers.spawn(async move {
            // Registered as pending before the handshake starts.
            let _ = rx.await;
            let r = Conn::accept(sock, &shared2.cfg.node_id, &shared2.keys, &shared2.cfg.cluster).await;
            pending2.lock().expect("pending").remove(&id);
            match r {
                Ok(conn) => crate::handler::serve(shared2, conn).await,
                // Logged once per connection, not per packet.
                Err(e) => crate::ratelimit::refused_connection(&shared2.cfg.node_id, addr, &e),
            }
        });
        {
            let mut p = pending.lock().expect("pending");
            while p.len() >= MAX_PENDING_HANDSHAKES {
                if let Some((_, oldest)) = p.pop_first() {
                    oldest.abort();
                }
            }
            p.insert(id, h);
        }
        let _ = tx.send(());
        // Reap finished handlers.
        while handlers.try_join_next().is_some() {}
    }
}

async fn heartbeat(shared: Arc<Shared>, peer: String) {
    let every = Duration::from_millis(shared.cfg.cluster.heartbeat_ms.max(10));
    let mut conn: Option<Conn> = None;
    loop {
        if conn.is_none() {
            conn = shared.connect(&peer).await.ok();
            if conn.is_none() {
                shared.peer_metrics.missed(&peer);
            } else {
                *shared
                    .connects
                    .lock()
                    .expect("connects")
                    .entry(peer.clone())
                    .or_default() += 1;
            }
        }
        if let Some(c) = conn.as_mut() {
            let ok = tokio::time::timeout(every * 2, async {
                c.send(Msg::Heartbeat).await?;
                match c.recv().await? {
                    Some(Msg::Heartbeat) => Ok(()),
                    _ => Err(NodeError::Transport("no heartbeat answer".into())),
                }
            })
            .await;
            match ok {
                Ok(Ok(())) => {
                    shared
                        .seen
                        .lock()
                        .expect("seen")
                        .insert(peer.clone(), Instant::now());
                }
                _ => {
                    conn = None;
                    shared.peer_metrics.missed(&peer);
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

async fn status_loop(shared: Arc<Shared>) {
    loop {
        let st = shared.status();
        if let Err(e) = node_status::write_status(&shared.rundir, &st) {
            tracing::debug!("status file: {e}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A shutdown future for [`run`] that completes once `stop` returns true (checked every
/// 100 ms), e.g. after a signal handler set a flag.
pub async fn when(stop: impl Fn() -> bool) {
    while !stop() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
