//! The manager: benefactors' soft state, the namespace of pool files (chunk maps,
//! versions, chunk reference counts) persisted in redb, striping plans, longevity,
//! re-replication.
//!
//! * `meta`: the redb tables and records;
//! * `files`: commits, listings, removals, longevity;
//! * `plan`: striping plans and replica placement over failure domains;
//! * [`repair`]: re-replication of a lost benefactor's copies.
//!
//! A commit is one redb write transaction (the version, every chunk copy's reference
//! count, the expiry it causes) made durable before the client is told; a crash before
//! that leaves the previous state whole (redb's copy-on-write pages and its two commit
//! slots), so a restarted manager shows exactly the acknowledged commits. Benefactors,
//! open writes and the benefactors' work queues are soft state, rebuilt after a restart
//! from the refreshes and from the tables (chunks not yet drained are named again).

mod files;
mod meta;
mod plan;
pub mod repair;

use crate::msg::{BenefactorInfo, ChunkHash, ChunkName, Reply, Request, MAX_LIST};
use crate::net_server::{next_request, reply};
use crate::{now_ms, PoolError, PoolNet, Result};
use meta::{get_json, key, meta, put_json, ChunkRec, KeepRule, VersionRec, CHUNKS, FILES, KEEP};
use redb::{Database, ReadableTable};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Ben {
    addr: String,
    mem: u64,
    used: u64,
    last: Instant,
    /// Caught lying about its memory (uses more than it lends, or less than the
    /// undrained chunks the manager placed there): left out of plans.
    suspect: Option<String>,
    /// Wall time of its last refresh (ms since the epoch).
    last_ms: u64,
    /// Audits in a row that found it holding less than it must.
    strikes: u32,
}

#[derive(Debug, Default)]
struct Outbox {
    commit: Vec<ChunkName>,
    drop: Vec<ChunkHash>,
}

#[derive(Debug)]
struct OpenWrite {
    conn: u64,
    path: String,
}

#[derive(Default)]
struct State {
    bens: BTreeMap<String, Ben>,
    open: HashMap<u64, OpenWrite>,
    outbox: BTreeMap<String, Outbox>,
}

/// The pool manager.
pub struct Manager {
    net: PoolNet,
    db: Database,
    st: Mutex<State>,
    conns: std::sync::atomic::AtomicU64,
    started: Instant,
}

fn refused(errno: i32, reason: impl Into<String>) -> Reply {
    Reply::Err {
        errno,
        reason: reason.into(),
    }
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    u64::from_le_bytes(b) | 1
}

impl Manager {
    /// Open (or create) the metadata under `meta_dir` and re-queue the drain of every
    /// committed chunk not yet drained.
    pub fn open(net: PoolNet, meta_dir: &Path) -> Result<Arc<Manager>> {
        std::fs::create_dir_all(meta_dir)
            .map_err(|e| PoolError::io(format!("mkdir {}", meta_dir.display()), e))?;
        let db = Database::create(meta_dir.join("pool-meta.redb")).map_err(meta)?;
        {
            let tx = db.begin_write().map_err(meta)?;
            tx.open_table(FILES).map_err(meta)?;
            tx.open_table(CHUNKS).map_err(meta)?;
            tx.open_table(KEEP).map_err(meta)?;
            tx.commit().map_err(meta)?;
        }
        let m = Manager {
            net,
            db,
            st: Mutex::new(State::default()),
            conns: Default::default(),
            started: Instant::now(),
        };
        m.requeue()?;
        Ok(Arc::new(m))
    }

    fn death(&self) -> Duration {
        Duration::from_millis(self.net.pool.death_ms)
    }

    fn alive(&self, st: &State, node: &str) -> bool {
        st.bens.get(node).is_some_and(|b| b.last.elapsed() < self.death())
    }

    /// Serve on `listener` until the process ends.
    pub async fn serve(self: Arc<Self>, listener: tokio::net::TcpListener) {
        let tick = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(tick.net.pool.refresh_ms)).await;
                if let Err(e) = tick.expire_all() {
                    tracing::warn!("pool expiry: {e}");
                }
                if let Err(e) = tick.audit() {
                    tracing::warn!("pool audit: {e}");
                }
                if let Err(e) = tick.repair().await {
                    tracing::warn!("pool repair: {e}");
                }
            }
        });
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                continue;
            };
            let m = self.clone();
            tokio::spawn(async move {
                let mut conn = match m.net.accept(sock).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!("pool manager: {e}");
                        return;
                    }
                };
                let id = m.conns.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let peer = conn.peer_id().to_string();
                while let Some(req) = next_request(&mut conn).await {
                    let r = match req {
                        Ok(req) => m
                            .handle(&peer, id, req)
                            .unwrap_or_else(|e| refused(e.errno(), e.to_string())),
                        Err(why) => {
                            tracing::warn!("pool manager: bad request from {peer}: {why}");
                            let _ = reply(&mut conn, &refused(libc::EPROTO, why)).await;
                            break;
                        }
                    };
                    if !reply(&mut conn, &r).await {
                        tracing::debug!("pool manager: reply to {peer} failed");
                        break;
                    }
                }
                // Writes this connection left open die with it: their chunks are
                // reclaimed when their benefactors next refresh.
                m.st.lock().unwrap().open.retain(|_, w| w.conn != id);
            });
        }
    }

    /// Handle one request from node `peer` on connection `conn`.
    pub fn handle(&self, peer: &str, conn: u64, req: Request) -> Result<Reply> {
        match req {
            Request::Register { mem, used, addr } => {
                let mut st = self.st.lock().unwrap();
                let suspect = (used > mem).then(|| format!("reports {used} bytes used of {mem} lent"));
                st.bens.insert(
                    peer.to_string(),
                    Ben {
                        addr,
                        mem,
                        used,
                        last: Instant::now(),
                        suspect,
                        last_ms: now_ms(),
                        strikes: 0,
                    },
                );
                Ok(Reply::Ok)
            }
            Request::Refresh {
                used,
                uncommitted,
                drained,
            } => self.refresh(peer, used, uncommitted, drained),
            Request::Open { path, .. } => self.plan(conn, None, &path, &[]),
            Request::Extend { write_id, exclude } => self.plan(conn, Some(write_id), "", &exclude),
            Request::Commit {
                write_id,
                size,
                chunk_size,
                mtime_ns,
                mode,
                crc32c,
                chunk_crc32c,
                chunks,
            } => self.commit(
                conn,
                write_id,
                VersionRec {
                    version: 0,
                    size,
                    chunk_size,
                    mtime_ns,
                    mode,
                    crc32c,
                    chunk_crc32c,
                    chunks,
                    committed_ms: now_ms(),
                },
            ),
            Request::Abort { write_id } => {
                let mut st = self.st.lock().unwrap();
                if st.open.get(&write_id).is_some_and(|w| w.conn == conn) {
                    st.open.remove(&write_id);
                }
                Ok(Reply::Ok)
            }
            Request::Stat { path } => Ok(Reply::File(self.list_where(|p| p == path)?.pop())),
            Request::List { prefix } => {
                let pre = prefix.trim_end_matches('/').to_string();
                let mut v =
                    self.list_where(|p| pre.is_empty() || p == pre || p.starts_with(&format!("{pre}/")))?;
                v.truncate(MAX_LIST);
                Ok(Reply::Files(v))
            }
            Request::Delete {
                path,
                version,
                crc32c,
            } => self.delete(&path, version, crc32c),
            Request::Keep {
                prefix,
                versions,
                seconds,
            } => self.keep(&prefix, KeepRule { versions, seconds }),
            Request::Status => {
                let counts = self.chunks_per_node()?;
                let st = self.st.lock().unwrap();
                Ok(Reply::Status(
                    st.bens
                        .iter()
                        .map(|(n, b)| BenefactorInfo {
                            node: n.clone(),
                            addr: b.addr.clone(),
                            mem: b.mem,
                            used: b.used,
                            alive: b.last.elapsed() < self.death(),
                            silent_ms: b.last.elapsed().as_millis() as u64,
                            chunks: counts.get(n).copied().unwrap_or(0),
                            suspect: b.suspect.clone(),
                        })
                        .collect(),
                ))
            }
        }
    }

    /// A benefactor must hold at least the committed chunks placed there that it has not
    /// drained (it may evict only drained ones): one reporting less memory used is lying
    /// about its free memory.
    pub fn audit(&self) -> Result<()> {
        // Only chunks committed well before a benefactor's last refresh count: its
        // report was taken before it was sent.
        let margin = 2 * self.net.pool.refresh_ms;
        let tx = self.db.begin_read().map_err(meta)?;
        let t = tx.open_table(CHUNKS).map_err(meta)?;
        let mut recs: Vec<(String, u64, u64)> = Vec::new();
        for row in t.iter().map_err(meta)? {
            let (k, v) = row.map_err(meta)?;
            let Ok(r) = serde_json::from_str::<ChunkRec>(v.value()) else {
                continue;
            };
            if let Some((_, n)) = k.value().split_once('@') {
                if !r.drained {
                    recs.push((n.to_string(), r.len as u64, r.at_ms));
                }
            }
        }
        let mut st = self.st.lock().unwrap();
        for (n, b) in st.bens.iter_mut() {
            let min: u64 = recs
                .iter()
                .filter(|(rn, _, at)| rn == n && at + margin < b.last_ms)
                .map(|(_, len, _)| len)
                .sum();
            if b.used < min {
                b.strikes += 1;
            } else {
                b.strikes = 0;
            }
            if b.strikes >= 2 && b.suspect.is_none() {
                tracing::warn!(
                    "pool: benefactor {n} reports {} bytes used, holds at least {min}",
                    b.used
                );
                b.suspect = Some(format!(
                    "reports {} bytes used, holds at least {min} undrained",
                    b.used
                ));
            }
        }
        Ok(())
    }

    fn chunks_per_node(&self) -> Result<BTreeMap<String, u64>> {
        let tx = self.db.begin_read().map_err(meta)?;
        let t = tx.open_table(CHUNKS).map_err(meta)?;
        let mut out = BTreeMap::new();
        for row in t.iter().map_err(meta)? {
            let (k, _) = row.map_err(meta)?;
            if let Some((_, n)) = k.value().split_once('@') {
                *out.entry(n.to_string()).or_insert(0) += 1;
            }
        }
        Ok(out)
    }

    fn refresh(
        &self,
        peer: &str,
        used: u64,
        uncommitted: Vec<(u64, ChunkHash)>,
        drained: Vec<ChunkHash>,
    ) -> Result<Reply> {
        {
            let mut st = self.st.lock().unwrap();
            let Some(b) = st.bens.get_mut(peer) else {
                return Ok(Reply::Refreshed {
                    known: false,
                    commit: vec![],
                    drop: vec![],
                });
            };
            b.used = used;
            b.last = Instant::now();
            b.last_ms = now_ms();
            if used > b.mem {
                b.suspect = Some(format!("reports {used} bytes used of {} lent", b.mem));
            }
        }
        let mut drop = Vec::new();
        let tx = self.db.begin_write().map_err(meta)?;
        {
            let mut t = tx.open_table(CHUNKS).map_err(meta)?;
            for h in drained {
                let k = key(&h, peer);
                if let Some(mut r) = get_json::<ChunkRec>(&t, &k)? {
                    r.drained = true;
                    put_json(&mut t, &k, &r)?;
                }
            }
            let st = self.st.lock().unwrap();
            for (w, h) in &uncommitted {
                if !st.open.contains_key(w) && t.get(key(h, peer).as_str()).map_err(meta)?.is_none() {
                    drop.push(h.clone());
                }
            }
        }
        tx.commit().map_err(meta)?;
        let mut st = self.st.lock().unwrap();
        // Chunks a write still open has sent again are not dropped under it (their
        // commit will reference them).
        let resent: std::collections::HashSet<ChunkHash> = uncommitted
            .into_iter()
            .filter(|(w, _)| st.open.contains_key(w))
            .map(|(_, h)| h)
            .collect();
        let ob = st.outbox.entry(peer.to_string()).or_default();
        let n = ob.commit.len().min(MAX_LIST);
        let commit: Vec<ChunkName> = ob.commit.drain(..n).collect();
        let room = MAX_LIST.saturating_sub(drop.len());
        let m = ob.drop.len().min(room);
        drop.extend(ob.drop.drain(..m).filter(|h| !resent.contains(h)));
        Ok(Reply::Refreshed {
            known: true,
            commit,
            drop,
        })
    }
}

/// Run a manager for `net` (whose node id must be the map's manager) until the process
/// ends: metadata under `meta_dir`, listening on the map's pool address.
pub fn run(net: PoolNet, meta_dir: &Path) -> Result<()> {
    let m = Manager::open(net.clone(), meta_dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| PoolError::io("runtime", e))?;
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind(&net.pool.addr)
            .await
            .map_err(|e| PoolError::io(format!("listen on {}", net.pool.addr), e))?;
        m.serve(l).await;
        Ok(())
    })
}
