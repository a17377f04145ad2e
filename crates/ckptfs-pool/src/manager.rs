//! The manager: benefactors' soft state, the namespace of pool files (chunk maps,
//! versions, chunk reference counts) persisted in redb, striping plans, longevity.
//!
//! Metadata tables (one redb file, `pool-meta.redb` under the meta directory):
//!
//! * `files`: store path → its committed versions (JSON: version, size, chunk size,
//!   CRCs, chunk map, commit time);
//! * `chunks`: `<hash>@<node>` → references from committed versions, length, drained;
//! * `keep`: path prefix → longevity rule (versions, seconds).
//!
//! A commit is one redb write transaction (the version, every chunk's reference count,
//! the expiry it causes) made durable before the client is told; a crash before that
//! leaves the previous state whole (redb's copy-on-write pages and its two commit
//! slots), so a restarted manager shows exactly the acknowledged commits. Benefactors,
//! open writes and the benefactors' work queues are soft state, rebuilt after a restart
//! from the refreshes and from the tables (chunks not yet drained are named again).

use crate::msg::{
    BenefactorInfo, ChunkHash, ChunkInfo, ChunkName, ChunkRef, FileInfo, Peer, Reply, Request, MAX_LIST,
};
use crate::net::{next_request, reply};
use crate::{now_ms, PoolError, PoolNet, Result};
use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FILES: TableDefinition<&str, &str> = TableDefinition::new("files");
const CHUNKS: TableDefinition<&str, &str> = TableDefinition::new("chunks");
const KEEP: TableDefinition<&str, &str> = TableDefinition::new("keep");

#[derive(Debug, Clone, Serialize, Deserialize)]
struct VersionRec {
    version: u64,
    size: u64,
    chunk_size: u64,
    mtime_ns: u64,
    mode: u32,
    crc32c: u32,
    chunk_crc32c: Vec<u32>,
    chunks: Vec<ChunkRef>,
    committed_ms: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct FileRec {
    versions: Vec<VersionRec>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChunkRec {
    refs: u64,
    len: u32,
    drained: bool,
    /// When the first version referencing it was committed (ms since the epoch).
    #[serde(default)]
    at_ms: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct KeepRule {
    versions: Option<u32>,
    seconds: Option<u64>,
}

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
}

fn meta(e: impl std::fmt::Display) -> PoolError {
    PoolError::Meta(e.to_string())
}

fn key(h: &ChunkHash, node: &str) -> String {
    format!("{h}@{node}")
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
        };
        m.requeue()?;
        Ok(Arc::new(m))
    }

    fn requeue(&self) -> Result<()> {
        let tx = self.db.begin_read().map_err(meta)?;
        let files = tx.open_table(FILES).map_err(meta)?;
        let chunks = tx.open_table(CHUNKS).map_err(meta)?;
        let mut st = self.st.lock().unwrap();
        for row in files.iter().map_err(meta)? {
            let (p, f) = row.map_err(meta)?;
            let f: FileRec = serde_json::from_str(f.value()).map_err(meta)?;
            for v in &f.versions {
                for (i, c) in v.chunks.iter().enumerate() {
                    let drained = chunks
                        .get(key(&c.hash, &c.node).as_str())
                        .map_err(meta)?
                        .and_then(|r| serde_json::from_str::<ChunkRec>(r.value()).ok())
                        .is_some_and(|r| r.drained);
                    if !drained {
                        st.outbox
                            .entry(c.node.clone())
                            .or_default()
                            .commit
                            .push(ChunkName {
                                path: p.value().to_string(),
                                version: v.version,
                                index: i as u64,
                                count: v.chunks.len() as u64,
                                hash: c.hash.clone(),
                            });
                    }
                }
            }
        }
        Ok(())
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
            Request::Open { path, .. } => self.plan(peer, conn, None, &path, &[]),
            Request::Extend { write_id, exclude } => self.plan(peer, conn, Some(write_id), "", &exclude),
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
            } => {
                let tx = self.db.begin_write().map_err(meta)?;
                {
                    let mut t = tx.open_table(KEEP).map_err(meta)?;
                    let rule = serde_json::to_string(&KeepRule { versions, seconds }).map_err(meta)?;
                    t.insert(prefix.trim_end_matches('/'), rule.as_str())
                        .map_err(meta)?;
                }
                tx.commit().map_err(meta)?;
                self.expire_all()?;
                Ok(Reply::Ok)
            }
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
                let rec = t
                    .get(k.as_str())
                    .map_err(meta)?
                    .and_then(|r| serde_json::from_str::<ChunkRec>(r.value()).ok());
                if let Some(mut r) = rec {
                    r.drained = true;
                    let s = serde_json::to_string(&r).map_err(meta)?;
                    t.insert(k.as_str(), s.as_str()).map_err(meta)?;
                }
            }
            let st = self.st.lock().unwrap();
            for (w, h) in uncommitted {
                if !st.open.contains_key(&w) && t.get(key(&h, peer).as_str()).map_err(meta)?.is_none() {
                    drop.push(h);
                }
            }
        }
        tx.commit().map_err(meta)?;
        let mut st = self.st.lock().unwrap();
        let ob = st.outbox.entry(peer.to_string()).or_default();
        let n = ob.commit.len().min(MAX_LIST);
        let commit: Vec<ChunkName> = ob.commit.drain(..n).collect();
        let room = MAX_LIST.saturating_sub(drop.len());
        let m = ob.drop.len().min(room);
        drop.extend(ob.drop.drain(..m));
        Ok(Reply::Refreshed {
            known: true,
            commit,
            drop,
        })
    }

    fn plan(
        &self,
        _peer: &str,
        conn: u64,
        extend: Option<u64>,
        path: &str,
        exclude: &[String],
    ) -> Result<Reply> {
        let mut st = self.st.lock().unwrap();
        let mut alive: Vec<(&String, &Ben)> = st
            .bens
            .iter()
            .filter(|(n, b)| b.last.elapsed() < self.death() && b.suspect.is_none() && !exclude.contains(n))
            .collect();
        alive.sort_by_key(|(n, b)| (std::cmp::Reverse(b.mem.saturating_sub(b.used)), (*n).clone()));
        let stripe: Vec<Peer> = alive
            .iter()
            .take(self.net.pool.stripe_width as usize)
            .map(|(n, b)| Peer {
                node: (*n).clone(),
                addr: b.addr.clone(),
            })
            .collect();
        if stripe.is_empty() {
            return Ok(refused(libc::ENOSPC, "no benefactor alive with memory to lend"));
        }
        let write_id = match extend {
            Some(w) => {
                if st.open.get(&w).is_none_or(|o| o.conn != conn) {
                    return Ok(refused(libc::EBADF, "no such open write"));
                }
                w
            }
            None => {
                let w = rand_u64();
                st.open.insert(
                    w,
                    OpenWrite {
                        conn,
                        path: path.to_string(),
                    },
                );
                w
            }
        };
        drop(st);
        let prev = if extend.is_none() {
            self.file(path)?
                .and_then(|f| f.versions.last().cloned())
                .map(|v| {
                    v.chunks
                        .into_iter()
                        .map(|mut c| {
                            c.sent = false;
                            c
                        })
                        .collect()
                })
                .unwrap_or_default()
        } else {
            vec![]
        };
        Ok(Reply::Opened {
            write_id,
            chunk_size: self.net.pool.chunk_size as u64,
            stripe,
            prev,
        })
    }

    fn file(&self, path: &str) -> Result<Option<FileRec>> {
        let tx = self.db.begin_read().map_err(meta)?;
        let t = tx.open_table(FILES).map_err(meta)?;
        let r = t.get(path).map_err(meta)?;
        r.map(|v| serde_json::from_str(v.value()).map_err(meta))
            .transpose()
    }

    fn commit(&self, conn: u64, write_id: u64, mut v: VersionRec) -> Result<Reply> {
        let path = {
            let st = self.st.lock().unwrap();
            let Some(w) = st.open.get(&write_id).filter(|w| w.conn == conn) else {
                return Ok(refused(
                    libc::EBADF,
                    "no such open write (aborted, or the manager restarted)",
                ));
            };
            for c in v.chunks.iter().filter(|c| c.sent) {
                if !st.bens.contains_key(&c.node) {
                    return Ok(refused(
                        libc::EINVAL,
                        format!("chunk map names {}, not a benefactor", c.node),
                    ));
                }
            }
            w.path.clone()
        };
        let rules = self.rules()?;
        let tx = self.db.begin_write().map_err(meta)?;
        let mut drops = Vec::new();
        {
            let mut files = tx.open_table(FILES).map_err(meta)?;
            let mut chunks = tx.open_table(CHUNKS).map_err(meta)?;
            let mut f: FileRec = files
                .get(path.as_str())
                .map_err(meta)?
                .map(|r| serde_json::from_str(r.value()))
                .transpose()
                .map_err(meta)?
                .unwrap_or_default();
            for c in &v.chunks {
                let k = key(&c.hash, &c.node);
                let rec = chunks
                    .get(k.as_str())
                    .map_err(meta)?
                    .and_then(|r| serde_json::from_str::<ChunkRec>(r.value()).ok());
                let rec = match rec {
                    Some(mut r) => {
                        r.refs += 1;
                        r
                    }
                    None if c.sent => ChunkRec {
                        refs: 1,
                        len: c.len,
                        drained: false,
                        at_ms: now_ms(),
                    },
                    None => {
                        // A reference to a chunk no longer held (its version expired
                        // meanwhile): the transaction is dropped, nothing changes.
                        return Ok(refused(
                            libc::EAGAIN,
                            format!("chunk {} is no longer in the pool; write it again", c.hash),
                        ));
                    }
                };
                let s = serde_json::to_string(&rec).map_err(meta)?;
                chunks.insert(k.as_str(), s.as_str()).map_err(meta)?;
            }
            v.version = f.versions.last().map(|l| l.version).unwrap_or(0) + 1;
            f.versions.push(v.clone());
            if let Some(rule) = rule_for(&rules, &path) {
                for old in expire(&mut f, rule) {
                    deref(&mut chunks, &old, &mut drops)?;
                }
            }
            if f.versions.is_empty() {
                files.remove(path.as_str()).map_err(meta)?;
            } else {
                let s = serde_json::to_string(&f).map_err(meta)?;
                files.insert(path.as_str(), s.as_str()).map_err(meta)?;
            }
        }
        // Durable before the client hears of it (redb's default durability).
        tx.commit().map_err(meta)?;
        self.queue_drops(drops);
        let mut st = self.st.lock().unwrap();
        st.open.remove(&write_id);
        let count = v.chunks.len() as u64;
        for (i, c) in v.chunks.iter().enumerate() {
            st.outbox
                .entry(c.node.clone())
                .or_default()
                .commit
                .push(ChunkName {
                    path: path.clone(),
                    version: v.version,
                    index: i as u64,
                    count,
                    hash: c.hash.clone(),
                });
        }
        Ok(Reply::Committed { version: v.version })
    }

    fn list_where(&self, want: impl Fn(&str) -> bool) -> Result<Vec<FileInfo>> {
        let tx = self.db.begin_read().map_err(meta)?;
        let files = tx.open_table(FILES).map_err(meta)?;
        let chunks = tx.open_table(CHUNKS).map_err(meta)?;
        let st = self.st.lock().unwrap();
        let mut out = Vec::new();
        for row in files.iter().map_err(meta)? {
            let (p, f) = row.map_err(meta)?;
            if !want(p.value()) {
                continue;
            }
            let f: FileRec = serde_json::from_str(f.value()).map_err(meta)?;
            let Some(v) = f.versions.last() else { continue };
            let mut state = "ok";
            let mut infos = Vec::with_capacity(v.chunks.len());
            for c in &v.chunks {
                let drained = chunks
                    .get(key(&c.hash, &c.node).as_str())
                    .map_err(meta)?
                    .and_then(|r| serde_json::from_str::<ChunkRec>(r.value()).ok())
                    .is_some_and(|r| r.drained);
                let alive = self.alive(&st, &c.node);
                if !alive {
                    state = if drained && state != "lost" {
                        "degraded"
                    } else {
                        "lost"
                    };
                }
                infos.push(ChunkInfo {
                    hash: c.hash.clone(),
                    node: c.node.clone(),
                    len: c.len,
                    drained,
                    alive,
                });
            }
            out.push(FileInfo {
                path: p.value().to_string(),
                version: v.version,
                size: v.size,
                chunk_size: v.chunk_size,
                mtime_ns: v.mtime_ns,
                mode: v.mode,
                crc32c: v.crc32c,
                chunk_crc32c: v.chunk_crc32c.clone(),
                chunks: infos,
                committed_ms: v.committed_ms,
                state: state.into(),
                older: f.versions[..f.versions.len() - 1]
                    .iter()
                    .map(|o| o.version)
                    .collect(),
            });
        }
        Ok(out)
    }

    fn delete(&self, path: &str, version: Option<u64>, crc32c: Option<u32>) -> Result<Reply> {
        let tx = self.db.begin_write().map_err(meta)?;
        let mut drops = Vec::new();
        let n;
        {
            let mut files = tx.open_table(FILES).map_err(meta)?;
            let mut chunks = tx.open_table(CHUNKS).map_err(meta)?;
            let Some(mut f) = files
                .get(path)
                .map_err(meta)?
                .map(|r| serde_json::from_str::<FileRec>(r.value()))
                .transpose()
                .map_err(meta)?
            else {
                return Ok(Reply::Deleted(0));
            };
            let (gone, kept): (Vec<VersionRec>, Vec<VersionRec>) = f.versions.into_iter().partition(|v| {
                version.is_none_or(|w| w == v.version) && crc32c.is_none_or(|c| c == v.crc32c)
            });
            n = gone.len() as u64;
            for v in &gone {
                deref(&mut chunks, v, &mut drops)?;
            }
            f.versions = kept;
            if f.versions.is_empty() {
                files.remove(path).map_err(meta)?;
            } else {
                let s = serde_json::to_string(&f).map_err(meta)?;
                files.insert(path, s.as_str()).map_err(meta)?;
            }
        }
        tx.commit().map_err(meta)?;
        self.queue_drops(drops);
        Ok(Reply::Deleted(n))
    }

    fn queue_drops(&self, drops: Vec<(String, ChunkHash)>) {
        let mut st = self.st.lock().unwrap();
        for (node, h) in drops {
            st.outbox.entry(node).or_default().drop.push(h);
        }
    }

    /// Apply the longevity rules to every file.
    pub fn expire_all(&self) -> Result<()> {
        let rules = self.rules()?;
        if rules.is_empty() {
            return Ok(());
        }
        let tx = self.db.begin_write().map_err(meta)?;
        let mut drops = Vec::new();
        {
            let mut files = tx.open_table(FILES).map_err(meta)?;
            let mut chunks = tx.open_table(CHUNKS).map_err(meta)?;
            let mut all = Vec::new();
            for row in files.iter().map_err(meta)? {
                let (p, f) = row.map_err(meta)?;
                all.push((p.value().to_string(), f.value().to_string()));
            }
            for (p, f) in all {
                let Some(rule) = rule_for(&rules, &p) else {
                    continue;
                };
                let mut f: FileRec = serde_json::from_str(&f).map_err(meta)?;
                let before = f.versions.len();
                let gone = expire(&mut f, rule);
                if gone.is_empty() {
                    continue;
                }
                for v in &gone {
                    deref(&mut chunks, v, &mut drops)?;
                }
                if f.versions.is_empty() {
                    files.remove(p.as_str()).map_err(meta)?;
                } else if f.versions.len() != before {
                    let s = serde_json::to_string(&f).map_err(meta)?;
                    files.insert(p.as_str(), s.as_str()).map_err(meta)?;
                }
            }
        }
        tx.commit().map_err(meta)?;
        self.queue_drops(drops);
        Ok(())
    }

    fn rules(&self) -> Result<Vec<(String, KeepRule)>> {
        let tx = self.db.begin_read().map_err(meta)?;
        let t = tx.open_table(KEEP).map_err(meta)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(meta)? {
            let (k, v) = row.map_err(meta)?;
            out.push((
                k.value().to_string(),
                serde_json::from_str(v.value()).map_err(meta)?,
            ));
        }
        Ok(out)
    }
}

/// The most specific rule whose prefix covers `path`.
fn rule_for(rules: &[(String, KeepRule)], path: &str) -> Option<KeepRule> {
    rules
        .iter()
        .filter(|(pre, _)| pre.is_empty() || path == pre || path.starts_with(&format!("{pre}/")))
        .max_by_key(|(pre, _)| pre.len())
        .map(|(_, r)| *r)
}

/// Remove the versions `rule` no longer keeps; returns them.
fn expire(f: &mut FileRec, rule: KeepRule) -> Vec<VersionRec> {
    let now = now_ms();
    let mut gone = Vec::new();
    if let Some(s) = rule.seconds {
        let cut = now.saturating_sub(s.saturating_mul(1000));
        let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut f.versions)
            .into_iter()
            .partition(|v| v.committed_ms < cut);
        gone.extend(old);
        f.versions = keep;
    }
    if let Some(n) = rule.versions {
        let n = n.max(1) as usize;
        if f.versions.len() > n {
            let k = f.versions.len() - n;
            gone.extend(f.versions.drain(..k));
        }
    }
    gone
}

fn deref(
    chunks: &mut redb::Table<'_, &'static str, &'static str>,
    v: &VersionRec,
    drops: &mut Vec<(String, ChunkHash)>,
) -> Result<()> {
    for c in &v.chunks {
        let k = key(&c.hash, &c.node);
        let rec = chunks
            .get(k.as_str())
            .map_err(meta)?
            .and_then(|r| serde_json::from_str::<ChunkRec>(r.value()).ok());
        if let Some(mut r) = rec {
            r.refs = r.refs.saturating_sub(1);
            if r.refs == 0 {
                chunks.remove(k.as_str()).map_err(meta)?;
                drops.push((c.node.clone(), c.hash.clone()));
            } else {
                let s = serde_json::to_string(&r).map_err(meta)?;
                chunks.insert(k.as_str(), s.as_str()).map_err(meta)?;
            }
        }
    }
    Ok(())
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
