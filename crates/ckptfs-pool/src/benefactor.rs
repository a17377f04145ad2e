//! A benefactor: lends a bounded amount of its memory to the pool.
//!
//! Chunks live in the benefactor process's own memory (a map from BLAKE3 hash to the
//! bytes), not in the node store: the memory lent is volatile by design (a benefactor
//! lost loses what was not drained, as in stdchk), the bound is exact (the sum of the
//! chunks held), and the benefactor needs no store of its own on a node that only lends
//! memory. Every chunk arriving is checked against the hash it is sent under (and its
//! CRC32C by the transport); one above the bound is refused with ENOSPC after drained
//! chunks have been evicted to make room.
//!
//! It registers with the manager and refreshes every interval (soft state); a refresh
//! reports the chunks not yet named by a commit (with their write) and the chunks
//! drained since the last one, and brings back the names of committed chunks to drain
//! and the chunks to drop. A drain thread writes committed chunks to the PFS first in
//! first out ([`crate::drain`]); drained chunks may be evicted, and are then served
//! from their chunk files.

use crate::drain;
use crate::msg::{ChunkHash, ChunkName, Reply, Request, MAX_LIST};
use crate::net_server::ask;
use crate::{PoolError, PoolNet, Result};
use ckptfs_transport::{self as tp, ChunkHeader, Msg, Nack, PutBegin, PutEnd};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

struct Entry {
    data: Option<Arc<Vec<u8>>>,
    len: u64,
    /// The last write that sent it (a chunk sent again by a later write belongs to it).
    write_id: u64,
    /// `State::puts` when it was last sent.
    put_no: u64,
    committed: bool,
    drained: Option<PathBuf>,
}

#[derive(Default)]
struct State {
    chunks: HashMap<ChunkHash, Entry>,
    used: u64,
    queue: VecDeque<ChunkName>,
    newly_drained: Vec<ChunkHash>,
    evictable: VecDeque<ChunkHash>,
    /// Chunks received so far (a clock for `Entry::put_no`).
    puts: u64,
}

/// A benefactor.
pub struct Benefactor {
    net: PoolNet,
    mem: u64,
    drain_dir: Option<PathBuf>,
    st: Mutex<State>,
    wake: Condvar,
    lie: AtomicBool,
    lie_used: AtomicBool,
    drain_paused: AtomicBool,
}

impl Benefactor {
    /// A benefactor of node `net.me` lending `mem` bytes, draining into the map's
    /// `pool.drain_dir` (if any).
    pub fn new(net: PoolNet, mem: u64) -> Arc<Benefactor> {
        let drain_dir = net.pool.drain_dir.as_ref().map(|d| net.cluster.resolve_path(d));
        Arc::new(Benefactor {
            net,
            mem,
            drain_dir,
            st: Mutex::new(State::default()),
            wake: Condvar::new(),
            lie: AtomicBool::new(false),
            lie_used: AtomicBool::new(false),
            drain_paused: AtomicBool::new(false),
        })
    }

    /// Memory used (bytes of chunks held).
    pub fn used(&self) -> u64 {
        self.st.lock().unwrap().used
    }

    /// Chunks held in memory.
    pub fn chunks(&self) -> usize {
        self.st
            .lock()
            .unwrap()
            .chunks
            .values()
            .filter(|e| e.data.is_some())
            .count()
    }

    /// Testing: serve chunks with one byte flipped (a benefactor returning wrong bytes).
    pub fn set_lie(&self, on: bool) {
        self.lie.store(on, Ordering::SeqCst);
    }

    /// Testing: report no memory used (a benefactor lying about its free memory).
    pub fn set_lie_about_memory(&self, on: bool) {
        self.lie_used.store(on, Ordering::SeqCst);
    }

    /// Testing: hold the drain (chunks stay queued).
    pub fn pause_drain(&self, on: bool) {
        self.drain_paused.store(on, Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// Run the server, the refresh loop and the drain thread on `rt` (listening at
    /// `addr`); returns once the listener is bound.
    pub async fn start(self: &Arc<Self>, addr: &str) -> Result<()> {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| PoolError::io(format!("listen on {addr}"), e))?;
        self.start_on(l, addr).await
    }

    /// As [`Benefactor::start`], on a listener already bound at `addr` (the address it
    /// registers with).
    pub async fn start_on(self: &Arc<Self>, l: tokio::net::TcpListener, addr: &str) -> Result<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = l.accept().await else { continue };
                let b = me.clone();
                tokio::spawn(async move {
                    if let Ok(conn) = b.net.accept(sock).await {
                        b.serve(conn).await;
                    }
                });
            }
        });
        let me = self.clone();
        let addr = addr.to_string();
        tokio::spawn(async move { me.refresh_loop(addr).await });
        if self.drain_dir.is_some() {
            let me = self.clone();
            std::thread::Builder::new()
                .name("pool-drain".into())
                .spawn(move || me.drain_loop())
                .map_err(|e| PoolError::io("drain thread", e))?;
        }
        Ok(())
    }

    async fn refresh_loop(self: Arc<Self>, addr: String) {
        let every = Duration::from_millis(self.net.pool.refresh_ms);
        let mut conn: Option<tp::Conn> = None;
        let mut registered = false;
        loop {
            if conn.is_none() {
                conn = self.net.connect_manager().await.ok();
                registered = false;
            }
            if let Some(c) = conn.as_mut() {
                let mut asked_at = u64::MAX;
                let r = if registered {
                    let req = {
                        let mut st = self.st.lock().unwrap();
                        asked_at = st.puts;
                        let uncommitted: Vec<(u64, ChunkHash)> = st
                            .chunks
                            .iter()
                            .filter(|(_, e)| !e.committed)
                            .take(MAX_LIST)
                            .map(|(h, e)| (e.write_id, h.clone()))
                            .collect();
                        let n = st.newly_drained.len().min(MAX_LIST);
                        let used = if self.lie_used.load(Ordering::SeqCst) {
                            0
                        } else {
                            st.used
                        };
                        Request::Refresh {
                            used,
                            uncommitted,
                            drained: st.newly_drained.drain(..n).collect(),
                        }
                    };
                    ask(c, &req).await
                } else {
                    ask(
                        c,
                        &Request::Register {
                            mem: self.mem,
                            used: self.used(),
                            addr: addr.clone(),
                        },
                    )
                    .await
                };
                match r {
                    Ok(Reply::Ok) => registered = true,
                    Ok(Reply::Refreshed { known, commit, drop }) => {
                        if !known {
                            registered = false;
                        }
                        self.apply(commit, drop, asked_at);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!("pool benefactor {}: manager: {e}", self.net.me);
                        conn = None;
                    }
                }
            }
            tokio::time::sleep(if registered {
                every
            } else {
                every.min(Duration::from_millis(200))
            })
            .await;
        }
    }

    /// Apply a refresh's answer: `asked_at` is `State::puts` when the refresh was sent;
    /// a chunk sent again since is not dropped (the answer did not know of that write).
    fn apply(&self, commit: Vec<ChunkName>, drop: Vec<ChunkHash>, asked_at: u64) {
        let mut st = self.st.lock().unwrap();
        for h in drop {
            if st.chunks.get(&h).is_some_and(|e| e.put_no > asked_at) {
                continue;
            }
            if let Some(e) = st.chunks.remove(&h) {
                if e.data.is_some() {
                    st.used -= e.len;
                }
            }
        }
        for n in commit {
            if let Some(e) = st.chunks.get_mut(&n.hash) {
                e.committed = true;
                // A replica is kept in memory only; the chunk's first holder drains it.
                if self.drain_dir.is_some() && n.drain {
                    st.queue.push_back(n);
                }
            }
        }
        self.wake.notify_all();
    }

    fn drain_loop(self: Arc<Self>) {
        let dir = self.drain_dir.clone().expect("drain dir");
        loop {
            let (name, data, link) = {
                let mut st = self.st.lock().unwrap();
                while st.queue.is_empty() || self.drain_paused.load(Ordering::SeqCst) {
                    st = self.wake.wait_timeout(st, Duration::from_millis(200)).unwrap().0;
                }
                let n = st.queue.pop_front().expect("not empty");
                let Some(e) = st.chunks.get(&n.hash) else { continue };
                match (&e.data, &e.drained) {
                    (_, Some(p)) => (n, None, Some(p.clone())),
                    (Some(d), None) => (n, Some(d.clone()), None),
                    (None, None) => continue,
                }
            };
            let r = match (&data, &link) {
                (_, Some(l)) => match drain::write_chunk(&dir, &name, &[], Some(l)) {
                    Ok(p) => Ok(p),
                    // The link failed (another file system): copy from the first file.
                    Err(_) => std::fs::read(l)
                        .map_err(|e| PoolError::io("read drained chunk", e))
                        .and_then(|d| drain::write_chunk(&dir, &name, &d, None)),
                },
                (Some(d), None) => drain::write_chunk(&dir, &name, d, None),
                _ => continue,
            };
            match r {
                Ok(p) => {
                    let mut st = self.st.lock().unwrap();
                    let first = st.chunks.get(&name.hash).is_some_and(|e| e.drained.is_none());
                    if let Some(e) = st.chunks.get_mut(&name.hash) {
                        e.drained.get_or_insert(p);
                    }
                    if first {
                        st.newly_drained.push(name.hash.clone());
                        st.evictable.push_back(name.hash);
                    }
                }
                Err(e) => {
                    tracing::warn!("pool drain: {e}");
                    std::thread::sleep(Duration::from_millis(500));
                    self.st.lock().unwrap().queue.push_back(name);
                }
            }
        }
    }

    /// Room for `len` more bytes, evicting drained chunks first in first out.
    fn reserve(&self, st: &mut State, len: u64) -> bool {
        while st.used + len > self.mem {
            let Some(h) = st.evictable.pop_front() else {
                return false;
            };
            if let Some(e) = st.chunks.get_mut(&h) {
                if e.drained.is_some() && e.data.take().is_some() {
                    st.used -= e.len;
                }
            }
        }
        true
    }

    async fn serve(&self, mut conn: tp::Conn) {
        loop {
            let m = match conn.recv().await {
                Ok(m) => m,
                Err(_) => return,
            };
            let ok = match m {
                Msg::PutBegin(b) => self.put(&mut conn, b).await,
                Msg::Get { path, .. } => self.get(&mut conn, &path).await,
                Msg::Bye => return,
                _ => false,
            };
            if !ok {
                return;
            }
        }
    }

    async fn nack(conn: &mut tp::Conn, tag: u64, errno: i32, reason: &str) -> bool {
        conn.send(&Msg::Nack(Nack {
            tag,
            errno,
            reason: reason.into(),
        }))
        .await
        .is_ok()
    }

    /// `c/<write id>/<hash>`: one chunk, Chunk and PutEnd follow.
    async fn put(&self, conn: &mut tp::Conn, b: PutBegin) -> bool {
        let parsed = b
            .path
            .strip_prefix("c/")
            .and_then(|r| r.split_once('/'))
            .and_then(|(w, h)| Some((w.parse::<u64>().ok()?, ChunkHash::parse(h)?)));
        let Some((write_id, hash)) = parsed else {
            return false;
        };
        if b.size > 64 << 20 {
            return false;
        }
        let mut data = vec![0u8; b.size as usize];
        match conn.recv().await {
            Ok(Msg::Chunk(c)) if c.len as u64 == b.size && c.offset == 0 => {
                if conn.recv_chunk_data(&mut data).await.is_err() {
                    return false;
                }
            }
            _ => return false,
        }
        if !matches!(conn.recv().await, Ok(Msg::PutEnd(e)) if e.size == b.size) {
            return false;
        }
        if ChunkHash::of(&data) != hash {
            return Self::nack(conn, b.generation, libc::EBADMSG, "chunk does not match its hash").await;
        }
        if !self.hold(hash, write_id, data) {
            return Self::nack(conn, b.generation, libc::ENOSPC, "benefactor full").await;
        }
        conn.send(&Msg::Ack { tag: b.generation }).await.is_ok()
    }

    /// Keep a chunk in memory; false when it does not fit.
    fn hold(&self, hash: ChunkHash, write_id: u64, data: Vec<u8>) -> bool {
        let mut st = self.st.lock().unwrap();
        let len = data.len() as u64;
        st.puts += 1;
        let put_no = st.puts;
        let mut data = Some(data);
        let held = match st.chunks.get(&hash).map(|e| e.data.is_some()) {
            Some(true) => true,
            Some(false) => {
                // Evicted earlier and sent again: hold it in memory again.
                if !self.reserve(&mut st, len) {
                    return false;
                }
                st.used += len;
                if let Some(e) = st.chunks.get_mut(&hash) {
                    e.data = data.take().map(Arc::new);
                }
                true
            }
            None => false,
        };
        if let (true, Some(e)) = (held, st.chunks.get_mut(&hash)) {
            // Sent again (by this or another write): it now belongs to this write
            // until a commit names it, so that the end of an earlier write does not
            // reclaim it under the new one.
            e.write_id = write_id;
            e.committed = false;
            e.put_no = put_no;
            return true;
        }
        if !self.reserve(&mut st, len) {
            return false;
        }
        st.used += len;
        st.chunks.insert(
            hash,
            Entry {
                data: data.map(Arc::new),
                len,
                write_id,
                put_no,
                committed: false,
                drained: None,
            },
        );
        true
    }

    /// `c/<hash>`: PutBegin, Chunk, PutEnd with the bytes, or a Nack.
    async fn get(&self, conn: &mut tp::Conn, path: &str) -> bool {
        let Some(hash) = path.strip_prefix("c/").and_then(ChunkHash::parse) else {
            return false;
        };
        let found = {
            let st = self.st.lock().unwrap();
            st.chunks.get(&hash).map(|e| (e.data.clone(), e.drained.clone()))
        };
        let data: Arc<Vec<u8>> = match found {
            Some((Some(d), _)) => d,
            Some((None, Some(p))) => match std::fs::read(&p) {
                Ok(d) if ChunkHash::of(&d) == hash => Arc::new(d),
                _ => return Self::nack(conn, 0, libc::EIO, "drained chunk unreadable").await,
            },
            _ => return Self::nack(conn, 0, libc::ENOENT, "no such chunk").await,
        };
        let mut bytes = data.as_ref().clone();
        if self.lie.load(Ordering::SeqCst) && !bytes.is_empty() {
            bytes[0] ^= 0x5a;
        }
        let size = bytes.len() as u64;
        let ok = conn
            .send(&Msg::PutBegin(PutBegin {
                src_node: self.net.me.clone(),
                path: path.to_string(),
                size,
                chunk_size: size.max(1) as u32,
                mtime_ns: 0,
                generation: 0,
            }))
            .await
            .is_ok()
            && conn
                .send_chunk(&ChunkHeader::for_data(0, 0, &bytes), &bytes)
                .await
                .is_ok()
            && conn
                .send(&Msg::PutEnd(PutEnd {
                    generation: 0,
                    chunks: 1,
                    size,
                }))
                .await
                .is_ok();
        ok
    }
}

/// Run a benefactor for `net` lending `mem` bytes until the process ends.
pub fn run(net: PoolNet, mem: u64) -> Result<()> {
    let addr = net.benefactor_addr(&net.me)?;
    let b = Benefactor::new(net, mem);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| PoolError::io("runtime", e))?;
    rt.block_on(async move {
        b.start(&addr).await?;
        std::future::pending::<()>().await;
        Ok(())
    })
}
