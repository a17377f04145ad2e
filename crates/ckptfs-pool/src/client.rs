//! The pool client: asks the manager for a striping plan, sends chunks straight to the
//! benefactors from a bounded write buffer, commits the chunk map, reads files back.
//!
//! **Write buffer.** A [`PoolWrite`] cuts the bytes it is given into chunks; each new
//! chunk takes a slot of the buffer (`buffer / chunk_size` slots) and is queued for the
//! stripe's senders, one task and connection per benefactor of the plan, each taking the
//! next queued chunk when its previous one is acknowledged (round-robin while the
//! members keep pace; a slow member's share goes to the others). The writer blocks only
//! while every slot is taken. A member that fails or is full hands its chunk back to the
//! queue and stops; when none is left the client asks the manager to extend the plan.
//!
//! **Incremental writes.** The plan carries the chunk map of the newest committed version
//! of the file; a chunk whose BLAKE3 hash is in it is not sent again, only referenced.
//!
//! **Bandwidths.** OAB (observed application bandwidth) is the size over the time from
//! open to the moment the application's last byte was taken (its close, with the
//! transfers still in flight); ASB (achieved storage bandwidth) is the size over the time
//! from open until every chunk was acknowledged by its benefactor.

use crate::drain;
use crate::msg::{BenefactorInfo, ChunkHash, ChunkName, ChunkRef, FileInfo, Peer, Reply, Request};
use crate::net::ask;
use crate::{PoolError, PoolNet, Result};
use ckptfs_transport::{self as tp, ChunkHeader, Msg, PutBegin, PutEnd};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// A pool client of node `net.me`.
pub struct PoolClient {
    net: PoolNet,
    rt: tokio::runtime::Runtime,
    mgr: tokio::sync::Mutex<Option<tp::Conn>>,
    /// Write buffer size in bytes.
    pub buffer: u64,
    /// Bytes of chunk data sent to benefactors by this client (every write).
    pub bytes_sent: Arc<AtomicU64>,
}

/// What one [`PoolClient::put_bytes`] or committed [`PoolWrite`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PutReport {
    /// Store path.
    pub path: String,
    /// Version committed.
    pub version: u64,
    /// Size.
    pub size: u64,
    /// Chunks in the version.
    pub chunks: u64,
    /// Chunks sent (the others were already in the pool).
    pub chunks_sent: u64,
    /// Bytes of chunk data sent.
    pub bytes_sent: u64,
    /// Seconds from open to the application's close.
    pub app_seconds: f64,
    /// Seconds from open until every chunk was stored remotely.
    pub stored_seconds: f64,
    /// Observed application bandwidth, bytes/s.
    pub oab: f64,
    /// Achieved storage bandwidth, bytes/s.
    pub asb: f64,
    /// The stripe used (node ids).
    pub stripe: Vec<String>,
}

fn proto(peer: &str, why: impl Into<String>) -> PoolError {
    PoolError::Peer {
        peer: peer.to_string(),
        why: why.into(),
        errno: libc::EPROTO,
    }
}

impl PoolClient {
    /// A client with a write buffer of `buffer` bytes.
    pub fn new(net: PoolNet, buffer: u64) -> Result<PoolClient> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("pool-client")
            .enable_all()
            .build()
            .map_err(|e| PoolError::io("runtime", e))?;
        Ok(PoolClient {
            net,
            rt,
            mgr: tokio::sync::Mutex::new(None),
            buffer: buffer.max(1),
            bytes_sent: Arc::default(),
        })
    }

    /// The roles' network view.
    pub fn net(&self) -> &PoolNet {
        &self.net
    }

    /// Ask the manager (one connection, reconnected after a failure).
    pub fn ask(&self, req: &Request) -> Result<Reply> {
        self.rt.block_on(self.ask_async(req))
    }

    async fn ask_async(&self, req: &Request) -> Result<Reply> {
        let mut g = self.mgr.lock().await;
        if g.is_none() {
            *g = Some(self.net.connect_manager().await?);
        }
        let r = ask(g.as_mut().expect("connected"), req).await;
        if let Err(e) = &r {
            if !matches!(e, PoolError::Refused { .. }) {
                *g = None;
                return Err(PoolError::ManagerDown {
                    addr: self.net.pool.addr.clone(),
                    why: e.to_string(),
                });
            }
        }
        r
    }

    /// The newest committed version of `path`.
    pub fn stat(&self, path: &str) -> Result<Option<FileInfo>> {
        match self.ask(&Request::Stat { path: path.into() })? {
            Reply::File(f) => Ok(f),
            _ => Err(proto("manager", "unexpected reply to stat")),
        }
    }

    /// Files under `prefix`.
    pub fn list(&self, prefix: &str) -> Result<Vec<FileInfo>> {
        match self.ask(&Request::List {
            prefix: prefix.into(),
        })? {
            Reply::Files(f) => Ok(f),
            _ => Err(proto("manager", "unexpected reply to list")),
        }
    }

    /// Remove versions of `path` (all, or one); the number removed.
    pub fn remove(&self, path: &str, version: Option<u64>, crc32c: Option<u32>) -> Result<u64> {
        match self.ask(&Request::Delete {
            path: path.into(),
            version,
            crc32c,
        })? {
            Reply::Deleted(n) => Ok(n),
            _ => Err(proto("manager", "unexpected reply to delete")),
        }
    }

    /// Longevity of files under `prefix`.
    pub fn keep(&self, prefix: &str, versions: Option<u32>, seconds: Option<u64>) -> Result<()> {
        self.ask(&Request::Keep {
            prefix: prefix.into(),
            versions,
            seconds,
        })
        .map(|_| ())
    }

    /// The benefactors.
    pub fn status(&self) -> Result<Vec<BenefactorInfo>> {
        match self.ask(&Request::Status)? {
            Reply::Status(v) => Ok(v),
            _ => Err(proto("manager", "unexpected reply to status")),
        }
    }

    /// Start writing `path` (chunk size: `chunk_size`, or the pool's).
    pub fn create(&self, path: &str, chunk_size: Option<u64>) -> Result<PoolWrite<'_>> {
        let t0 = Instant::now();
        let Reply::Opened {
            write_id,
            chunk_size: pool_cs,
            stripe,
            prev,
        } = self.ask(&Request::Open {
            path: path.into(),
            size: 0,
        })?
        else {
            return Err(proto("manager", "unexpected reply to open"));
        };
        let cs = chunk_size
            .filter(|c| (4096..=64 << 20).contains(c))
            .unwrap_or(pool_cs);
        let slots = (self.buffer / cs).max(1) as usize;
        let (tx, rx) = mpsc::unbounded_channel();
        let w = PoolWrite {
            c: self,
            path: path.to_string(),
            write_id,
            cs,
            t0,
            prev: prev.into_iter().map(|r| (r.hash.clone(), r)).collect(),
            cur: Vec::with_capacity(cs as usize),
            written: 0,
            crcs: Vec::new(),
            refs: Arc::new(Mutex::new(BTreeMap::new())),
            slots: Arc::new(Semaphore::new(slots)),
            shared: Arc::new(Shared {
                tx: Mutex::new(Some(tx)),
                rx: tokio::sync::Mutex::new(rx),
                alive: AtomicUsize::new(0),
                done: AtomicUsize::new(0),
                last_err: Mutex::new(None),
            }),
            queued: 0,
            members: Vec::new(),
            failed: Arc::new(Mutex::new(Vec::new())),
            sent_bytes: Arc::default(),
            committed: false,
        };
        let mut w = w;
        w.spawn(stripe);
        Ok(w)
    }

    /// Write `data` as `path`; the report of the commit.
    pub fn put_bytes(&self, path: &str, data: &[u8], mtime_ns: u64) -> Result<PutReport> {
        let mut w = self.create(path, None)?;
        let cs = w.cs as usize;
        for piece in data.chunks(cs.max(1)) {
            w.write(piece)?;
        }
        w.commit(mtime_ns, 0o644, None)
    }

    /// Read chunk `i` of version `f` (from its benefactor; from its drained file when
    /// the benefactor is dead or lost it), checked against its hash and CRC32C.
    pub fn read_chunk(&self, f: &FileInfo, i: u64, conns: &mut HashMap<String, tp::Conn>) -> Result<Vec<u8>> {
        let c = f
            .chunks
            .get(i as usize)
            .ok_or_else(|| proto("manager", "chunk index out of range"))?;
        let remote = if c.alive {
            self.rt.block_on(self.fetch(&c.node, &c.hash, conns))
        } else {
            Err(PoolError::Peer {
                peer: c.node.clone(),
                why: "dead".into(),
                errno: libc::EHOSTDOWN,
            })
        };
        let data = match remote {
            Ok(d) if ChunkHash::of(&d) == c.hash => d,
            other => {
                let why = match other {
                    Ok(_) => PoolError::Corrupt {
                        what: format!("{} from benefactor {}", f.path, c.node),
                        chunk: i,
                    },
                    Err(e) => e,
                };
                tracing::warn!("pool: {}: chunk {i}: {why}; trying its drained copy", f.path);
                match self.drained(f, i) {
                    Some(Ok(d)) => d,
                    Some(Err(e)) => return Err(e),
                    None if matches!(why, PoolError::Corrupt { .. }) => return Err(why),
                    None => {
                        return Err(PoolError::Lost {
                            path: f.path.clone(),
                            chunk: i,
                            node: c.node.clone(),
                        })
                    }
                }
            }
        };
        if f.chunk_crc32c.get(i as usize) != Some(&ckptfs_crc::crc32c(&data)) {
            return Err(PoolError::Corrupt {
                what: f.path.clone(),
                chunk: i,
            });
        }
        Ok(data)
    }

    fn drain_dir(&self) -> Option<PathBuf> {
        self.net
            .pool
            .drain_dir
            .as_ref()
            .map(|d| self.net.cluster.resolve_path(d))
    }

    fn drained(&self, f: &FileInfo, i: u64) -> Option<Result<Vec<u8>>> {
        let dir = self.drain_dir()?;
        let c = &f.chunks[i as usize];
        let n = ChunkName {
            path: f.path.clone(),
            version: f.version,
            index: i,
            count: f.chunks.len() as u64,
            hash: c.hash.clone(),
        };
        if !drain::chunk_file(&dir, &n).exists() {
            return None;
        }
        Some(drain::read_chunk(&dir, &n))
    }

    async fn fetch(
        &self,
        node: &str,
        hash: &ChunkHash,
        conns: &mut HashMap<String, tp::Conn>,
    ) -> Result<Vec<u8>> {
        if !conns.contains_key(node) {
            let addr = self.net.benefactor_addr(node)?;
            conns.insert(node.to_string(), self.net.connect(&addr, node).await?);
        }
        let conn = conns.get_mut(node).expect("connected");
        let r = get_chunk(conn, &self.net.me, hash).await;
        if r.is_err() {
            conns.remove(node);
        }
        r
    }

    /// Read the newest version of `path` whole.
    pub fn get_bytes(&self, path: &str) -> Result<(FileInfo, Vec<u8>)> {
        let f = self.stat(path)?.ok_or_else(|| PoolError::Refused {
            errno: libc::ENOENT,
            reason: format!("{path}: no such pool file"),
        })?;
        let mut out = Vec::with_capacity(f.size as usize);
        let mut conns = HashMap::new();
        for i in 0..f.chunks.len() as u64 {
            out.extend_from_slice(&self.read_chunk(&f, i, &mut conns)?);
        }
        if ckptfs_crc::crc32c(&out) != f.crc32c || out.len() as u64 != f.size {
            return Err(PoolError::Corrupt {
                what: path.to_string(),
                chunk: 0,
            });
        }
        Ok((f, out))
    }
}

async fn get_chunk(conn: &mut tp::Conn, me: &str, hash: &ChunkHash) -> Result<Vec<u8>> {
    let peer = conn.peer_id().to_string();
    let terr = |e: tp::TransportError| PoolError::Peer {
        peer: peer.clone(),
        why: e.to_string(),
        errno: e.errno(),
    };
    conn.send(&Msg::Get {
        src_node: me.to_string(),
        path: format!("c/{hash}"),
    })
    .await
    .map_err(terr)?;
    let size = match conn.recv().await.map_err(terr)? {
        Msg::PutBegin(b) if b.size <= 64 << 20 => b.size,
        Msg::Nack(n) => {
            return Err(PoolError::Peer {
                peer,
                why: n.reason,
                errno: n.errno,
            })
        }
        m => return Err(proto(&peer, format!("unexpected {:?}", m.kind()))),
    };
    let mut data = vec![0u8; size as usize];
    match conn.recv().await.map_err(terr)? {
        Msg::Chunk(c) if c.len as u64 == size => conn.recv_chunk_data(&mut data).await.map_err(terr)?,
        m => return Err(proto(&peer, format!("unexpected {:?}", m.kind()))),
    }
    match conn.recv().await.map_err(terr)? {
        Msg::PutEnd(e) if e.size == size => Ok(data),
        m => Err(proto(&peer, format!("unexpected {:?}", m.kind()))),
    }
}

struct Job {
    index: u64,
    hash: ChunkHash,
    data: Arc<Vec<u8>>,
    _slot: OwnedSemaphorePermit,
}

struct Shared {
    tx: Mutex<Option<mpsc::UnboundedSender<Job>>>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>,
    alive: AtomicUsize,
    done: AtomicUsize,
    last_err: Mutex<Option<String>>,
}

/// A file being written to the pool (see the module documentation).
pub struct PoolWrite<'c> {
    c: &'c PoolClient,
    path: String,
    write_id: u64,
    cs: u64,
    t0: Instant,
    prev: HashMap<ChunkHash, ChunkRef>,
    cur: Vec<u8>,
    written: u64,
    crcs: Vec<u32>,
    refs: Arc<Mutex<BTreeMap<u64, ChunkRef>>>,
    slots: Arc<Semaphore>,
    shared: Arc<Shared>,
    queued: usize,
    members: Vec<String>,
    failed: Arc<Mutex<Vec<String>>>,
    sent_bytes: Arc<AtomicU64>,
    committed: bool,
}

impl PoolWrite<'_> {
    /// The chunk size of this write.
    pub fn chunk_size(&self) -> u64 {
        self.cs
    }

    /// Bytes taken so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    fn spawn(&mut self, stripe: Vec<Peer>) {
        for p in stripe {
            if self.members.contains(&p.node) {
                continue;
            }
            self.members.push(p.node.clone());
            self.shared.alive.fetch_add(1, Ordering::SeqCst);
            let sh = self.shared.clone();
            let refs = self.refs.clone();
            let net = self.c.net.clone();
            let failed = self.failed.clone();
            let sent = self.sent_bytes.clone();
            let total = self.c.bytes_sent.clone();
            let write_id = self.write_id;
            self.c.rt.spawn(async move {
                let r = sender(&net, &p, write_id, &sh, &refs, &sent, &total).await;
                if let Err(e) = r {
                    tracing::warn!("pool: benefactor {}: {e}", p.node);
                    *sh.last_err.lock().unwrap() = Some(format!("{}: {e}", p.node));
                    failed.lock().unwrap().push(p.node.clone());
                }
                sh.alive.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }

    /// No sender left: ask the manager for more benefactors.
    fn extend(&mut self) -> Result<()> {
        let exclude = self.failed.lock().unwrap().clone();
        match self.c.ask(&Request::Extend {
            write_id: self.write_id,
            exclude,
        })? {
            Reply::Opened { stripe, .. } => {
                let fresh: Vec<Peer> = stripe
                    .into_iter()
                    .filter(|p| !self.failed.lock().unwrap().contains(&p.node))
                    .collect();
                if fresh.is_empty() {
                    let why = self.shared.last_err.lock().unwrap().clone().unwrap_or_default();
                    return Err(PoolError::Peer {
                        peer: "pool".into(),
                        why: format!("no benefactor left to write to ({why})"),
                        errno: libc::EIO,
                    });
                }
                // Members that failed are out of `members` so that a new plan may
                // include live ones again.
                let failed = self.failed.lock().unwrap().clone();
                self.members.retain(|m| !failed.contains(m));
                self.spawn(fresh);
                Ok(())
            }
            _ => Err(proto("manager", "unexpected reply to extend")),
        }
    }

    fn slot(&mut self) -> Result<OwnedSemaphorePermit> {
        loop {
            if self.shared.alive.load(Ordering::SeqCst) == 0 {
                self.extend()?;
            }
            let s = self.slots.clone();
            let got = self.c.rt.block_on(async {
                tokio::time::timeout(Duration::from_millis(200), s.acquire_owned()).await
            });
            if let Ok(Ok(p)) = got {
                return Ok(p);
            }
        }
    }

    fn emit(&mut self) -> Result<()> {
        let data = std::mem::replace(&mut self.cur, Vec::with_capacity(self.cs as usize));
        let index = self.crcs.len() as u64;
        self.crcs.push(ckptfs_crc::crc32c(&data));
        let hash = ChunkHash::of(&data);
        if let Some(r) = self.prev.get(&hash) {
            let mut r = r.clone();
            r.sent = false;
            self.refs.lock().unwrap().insert(index, r);
            return Ok(());
        }
        let slot = self.slot()?;
        let job = Job {
            index,
            hash,
            data: Arc::new(data),
            _slot: slot,
        };
        let tx = self.shared.tx.lock().unwrap();
        tx.as_ref()
            .expect("open")
            .send(job)
            .map_err(|_| proto("pool", "senders gone"))?;
        self.queued += 1;
        Ok(())
    }

    /// Take the next bytes of the file (returns once they are in the write buffer).
    pub fn write(&mut self, mut b: &[u8]) -> Result<()> {
        while !b.is_empty() {
            let n = (self.cs as usize - self.cur.len()).min(b.len());
            self.cur.extend_from_slice(&b[..n]);
            b = &b[n..];
            self.written += n as u64;
            if self.cur.len() as u64 == self.cs {
                self.emit()?;
            }
        }
        Ok(())
    }

    /// Wait for every chunk, then commit the chunk map (the content's CRC32C must be
    /// `want_crc` when given). Returns the report.
    pub fn commit(mut self, mtime_ns: u64, mode: u32, want_crc: Option<u32>) -> Result<PutReport> {
        if !self.cur.is_empty() {
            self.emit()?;
        }
        let app = self.t0.elapsed().as_secs_f64();
        while self.shared.done.load(Ordering::SeqCst) < self.queued {
            if self.shared.alive.load(Ordering::SeqCst) == 0 {
                self.extend()?;
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        let stored = self.t0.elapsed().as_secs_f64();
        self.shared.tx.lock().unwrap().take();
        let crc = self.crcs.iter().enumerate().fold(0u32, |acc, (i, c)| {
            let len = (self.written - i as u64 * self.cs).min(self.cs);
            ckptfs_level::crc::crc_combine(acc, *c, len)
        });
        if want_crc.is_some_and(|w| w != crc) {
            return Err(PoolError::Corrupt {
                what: format!(
                    "{} (the bytes written do not match the source's CRC32C)",
                    self.path
                ),
                chunk: 0,
            });
        }
        // A member that failed after acknowledging chunks took them with it (one copy
        // per chunk): the write fails, by name, rather than commit a lost file.
        let failed = self.failed.lock().unwrap().clone();
        let refs = self.refs.lock().unwrap();
        let gone: Vec<u64> = refs
            .iter()
            .filter(|(_, r)| r.sent && failed.contains(&r.node))
            .map(|(i, _)| *i)
            .collect();
        if let Some(first) = gone.first() {
            return Err(PoolError::Lost {
                path: self.path.clone(),
                chunk: *first,
                node: refs[first].node.clone(),
            });
        }
        let chunks: Vec<ChunkRef> = (0..self.crcs.len() as u64)
            .map(|i| {
                refs.get(&i)
                    .cloned()
                    .ok_or_else(|| proto("pool", format!("chunk {i} not stored")))
            })
            .collect::<Result<_>>()?;
        drop(refs);
        let chunks_sent = chunks.iter().filter(|c| c.sent).count() as u64;
        let n = chunks.len() as u64;
        let r = self.c.ask(&Request::Commit {
            write_id: self.write_id,
            size: self.written,
            chunk_size: self.cs,
            mtime_ns,
            mode,
            crc32c: crc,
            chunk_crc32c: self.crcs.clone(),
            chunks,
        })?;
        let Reply::Committed { version } = r else {
            return Err(proto("manager", "unexpected reply to commit"));
        };
        self.committed = true;
        let size = self.written as f64;
        Ok(PutReport {
            path: self.path.clone(),
            version,
            size: self.written,
            chunks: n,
            chunks_sent,
            bytes_sent: self.sent_bytes.load(Ordering::SeqCst),
            app_seconds: app,
            stored_seconds: stored,
            oab: size / app.max(1e-9),
            asb: size / stored.max(1e-9),
            stripe: self
                .members
                .iter()
                .filter(|m| !failed.contains(m))
                .cloned()
                .collect(),
        })
    }
}

impl Drop for PoolWrite<'_> {
    fn drop(&mut self) {
        self.shared.tx.lock().unwrap().take();
        if !self.committed {
            let _ = self.c.ask(&Request::Abort {
                write_id: self.write_id,
            });
        }
    }
}

/// One stripe member's sender: takes queued chunks, sends each, waits for its Ack.
async fn sender(
    net: &PoolNet,
    p: &Peer,
    write_id: u64,
    sh: &Shared,
    refs: &Mutex<BTreeMap<u64, ChunkRef>>,
    sent: &AtomicU64,
    total: &AtomicU64,
) -> Result<()> {
    let mut conn = net.connect(&p.addr, &p.node).await?;
    loop {
        let job = { sh.rx.lock().await.recv().await };
        let Some(job) = job else { return Ok(()) };
        match put_chunk(&mut conn, &net.me, write_id, &job).await {
            Ok(()) => {
                sent.fetch_add(job.data.len() as u64, Ordering::SeqCst);
                total.fetch_add(job.data.len() as u64, Ordering::SeqCst);
                refs.lock().unwrap().insert(
                    job.index,
                    ChunkRef {
                        hash: job.hash.clone(),
                        node: p.node.clone(),
                        len: job.data.len() as u32,
                        sent: true,
                    },
                );
                sh.done.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                // Hand the chunk back for another member, and stop.
                if let Some(tx) = sh.tx.lock().unwrap().as_ref() {
                    let _ = tx.send(job);
                }
                return Err(e);
            }
        }
    }
}

async fn put_chunk(conn: &mut tp::Conn, me: &str, write_id: u64, job: &Job) -> Result<()> {
    let peer = conn.peer_id().to_string();
    let terr = |e: tp::TransportError| PoolError::Peer {
        peer: peer.clone(),
        why: e.to_string(),
        errno: e.errno(),
    };
    let size = job.data.len() as u64;
    conn.send(&Msg::PutBegin(PutBegin {
        src_node: me.to_string(),
        path: format!("c/{write_id}/{}", job.hash),
        size,
        chunk_size: size.max(1) as u32,
        mtime_ns: 0,
        generation: job.index,
    }))
    .await
    .map_err(terr)?;
    conn.send_chunk(&ChunkHeader::for_data(job.index, 0, &job.data), &job.data)
        .await
        .map_err(terr)?;
    conn.send(&Msg::PutEnd(PutEnd {
        generation: job.index,
        chunks: 1,
        size,
    }))
    .await
    .map_err(terr)?;
    match conn.recv().await.map_err(terr)? {
        Msg::Ack { .. } => Ok(()),
        Msg::Nack(n) => Err(PoolError::Peer {
            peer,
            why: n.reason,
            errno: n.errno,
        }),
        m => Err(proto(&peer, format!("unexpected {:?}", m.kind()))),
    }
}
