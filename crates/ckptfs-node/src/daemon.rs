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

use crate::node_status;
use crate::partner_store;
use crate::shared::{priority_name, Counters, NodeConfig, Shared};
use ckptfs_agent::Agent;
use ckptfs_partner::peer::{Conn, Msg};
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::Store;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

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
    let metrics = crate::metrics_export::start(&shared)?;

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
