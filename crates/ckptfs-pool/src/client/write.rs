//! Writing a file to the pool: the write buffer, the senders, the commit.
//!
//! **Write buffer.** A [`PoolWrite`] cuts the bytes it is given into chunks; each new
//! chunk takes a slot of the buffer (`buffer / chunk_size` slots) until every copy of
//! it is acknowledged. The plan's members form one or more replica groups (disjoint,
//! in distinct failure domains where possible); the chunk is queued once for each
//! group, and each group's senders (one thread and connection per member) take the next
//! chunk of their group's queue when their previous one is acknowledged (round-robin
//! while the members keep pace; a slow member's share goes to the others of its group).
//! So every chunk lands on one member of each group: `r` copies on `r` distinct
//! benefactors. The writer blocks only while every slot is taken. A member that fails
//! or is full hands its chunk back to its group's queue and stops; when a group has no
//! member left the client asks the manager to extend the plan (members of the other
//! groups excluded, so the copies stay on distinct benefactors).
//!
//! **Incremental writes.** The plan carries the chunk map of the newest committed version
//! of the file; a chunk whose BLAKE3 hash is in it is not sent again, only referenced.
//!
//! **Bandwidths.** OAB (observed application bandwidth) is the size over the time from
//! open to the moment the application's last byte was taken (its close, with the
//! transfers still in flight); ASB (achieved storage bandwidth) is the size over the time
//! from open until every copy of every chunk was acknowledged by its benefactor.

use super::{PoolClient, PutReport};
use crate::msg::{ChunkHash, ChunkRef, Peer, Reply, Request};
use crate::net::{proto, put_chunk};
use crate::{PoolError, PoolNet, Result};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Locks `m`, also after a holder panicked (the data behind these locks stays
/// consistent: counters and lists updated in one step).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The write buffer's slots: a chunk holds one until every copy of it is acknowledged.
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

/// One slot, given back when dropped.
struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        *lock(&self.0.free) += 1;
        self.0.freed.notify_one();
    }
}

impl Slots {
    fn new(n: usize) -> Arc<Slots> {
        Arc::new(Slots {
            free: Mutex::new(n),
            freed: Condvar::new(),
        })
    }

    /// A slot, waiting at most `d` for one.
    fn take(self: &Arc<Self>, d: Duration) -> Option<Slot> {
        let g = lock(&self.free);
        let (mut g, _) = self
            .freed
            .wait_timeout_while(g, d, |n| *n == 0)
            .unwrap_or_else(|p| p.into_inner());
        if *g == 0 {
            return None;
        }
        *g -= 1;
        Some(Slot(self.clone()))
    }
}

struct Job {
    index: u64,
    hash: ChunkHash,
    data: Vec<u8>,
    _slot: Slot,
}

/// A group's queue of chunks: open until the write commits or is dropped. Senders
/// waiting for a chunk are served in the order they came (round-robin while the
/// members keep pace, so no member takes more than its share of a benefactor's memory
/// because its thread happened to be scheduled first).
struct Queue {
    q: Mutex<QueueState>,
    ready: Condvar,
}

struct QueueState {
    jobs: VecDeque<Arc<Job>>,
    open: bool,
    /// Waiting senders' tickets, first come first served.
    waiting: VecDeque<u64>,
    next_ticket: u64,
}

impl Queue {
    fn new() -> Queue {
        Queue {
            q: Mutex::new(QueueState {
                jobs: VecDeque::new(),
                open: true,
                waiting: VecDeque::new(),
                next_ticket: 0,
            }),
            ready: Condvar::new(),
        }
    }

    /// Queues a chunk; false once closed.
    fn push(&self, j: Arc<Job>) -> bool {
        let mut g = lock(&self.q);
        if !g.open {
            return false;
        }
        g.jobs.push_back(j);
        drop(g);
        self.ready.notify_all();
        true
    }

    /// The next chunk, waiting for it behind the senders that waited first; None once
    /// closed and empty.
    fn pop(&self) -> Option<Arc<Job>> {
        let mut g = lock(&self.q);
        let t = g.next_ticket;
        g.next_ticket += 1;
        g.waiting.push_back(t);
        let mut g = self
            .ready
            .wait_while(g, |s| {
                s.waiting.front() != Some(&t) || (s.jobs.is_empty() && s.open)
            })
            .unwrap_or_else(|p| p.into_inner());
        g.waiting.pop_front();
        let j = g.jobs.pop_front();
        drop(g);
        // The next in line may take the next chunk (or learn the queue closed).
        self.ready.notify_all();
        j
    }

    /// Closes the queue (its senders finish what is queued and stop).
    fn close(&self) {
        lock(&self.q).open = false;
        self.ready.notify_all();
    }

    /// Takes every queued chunk out; how many.
    fn clear(&self) -> usize {
        let mut g = lock(&self.q);
        let n = g.jobs.len();
        g.jobs.clear();
        n
    }
}

/// The queue and senders of one replica group.
struct Group {
    queue: Queue,
    alive: AtomicUsize,
    members: Mutex<Vec<String>>,
    /// No member left and none to be had: its copies are given up (r > 1 only).
    retired: std::sync::atomic::AtomicBool,
}

impl Group {
    fn new() -> Arc<Group> {
        Arc::new(Group {
            queue: Queue::new(),
            alive: AtomicUsize::new(0),
            members: Mutex::new(Vec::new()),
            retired: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// What the senders share with the writer.
struct Shared {
    /// Copies acknowledged.
    done: AtomicUsize,
    last_err: Mutex<Option<String>>,
    /// Chunk index → its reference (holders in the order they acknowledged).
    refs: Mutex<BTreeMap<u64, ChunkRef>>,
    /// Members that failed: their acknowledged copies are given up.
    failed: Mutex<Vec<String>>,
    /// Members that refused a chunk for want of memory: they take no more, and their
    /// acknowledged copies stand.
    full: Mutex<Vec<String>>,
    sent_bytes: AtomicU64,
}

/// A file being written to the pool (see the module documentation).
pub struct PoolWrite {
    c: PoolClient,
    path: String,
    write_id: u64,
    pub(super) cs: u64,
    t0: Instant,
    prev: HashMap<ChunkHash, ChunkRef>,
    cur: Vec<u8>,
    written: u64,
    crcs: Vec<u32>,
    slots: Arc<Slots>,
    groups: Vec<Arc<Group>>,
    sh: Arc<Shared>,
    /// Copies queued (a chunk once per group not retired).
    queued: usize,
    committed: bool,
}

impl PoolWrite {
    pub(super) fn open(c: PoolClient, path: &str, chunk_size: Option<u64>) -> Result<PoolWrite> {
        let t0 = Instant::now();
        let Reply::Opened {
            write_id,
            chunk_size: pool_cs,
            stripe,
            prev,
        } = c.ask(&Request::Open {
            path: path.into(),
            size: 0,
        })?
        else {
            return Err(proto("manager", "unexpected reply to open"));
        };
        let cs = chunk_size
            .filter(|c| (4096..=64 << 20).contains(c))
            .unwrap_or(pool_cs);
        let slots = (c.buffer() / cs).max(1) as usize;
        // The manager plans over its stripe width; a client configured narrower takes
        // the first members (the most free memory) of each group.
        let width = c.net().pool.stripe_width.max(1) as usize;
        let mut taken: HashMap<u32, usize> = HashMap::new();
        let stripe: Vec<Peer> = stripe
            .into_iter()
            .filter(|p| {
                let n = taken.entry(p.group).or_default();
                *n += 1;
                *n <= width
            })
            .collect();
        let ngroups = stripe.iter().map(|p| p.group).max().map_or(1, |g| g as usize + 1);
        let mut w = PoolWrite {
            c,
            path: path.to_string(),
            write_id,
            cs,
            t0,
            prev: prev.into_iter().map(|r| (r.hash.clone(), r)).collect(),
            cur: Vec::with_capacity(cs as usize),
            written: 0,
            crcs: Vec::new(),
            slots: Slots::new(slots),
            groups: (0..ngroups).map(|_| Group::new()).collect(),
            sh: Arc::new(Shared {
                done: AtomicUsize::new(0),
                last_err: Mutex::new(None),
                refs: Mutex::new(BTreeMap::new()),
                failed: Mutex::new(Vec::new()),
                full: Mutex::new(Vec::new()),
                sent_bytes: AtomicU64::new(0),
            }),
            queued: 0,
            committed: false,
        };
        for p in stripe {
            let g = (p.group as usize).min(ngroups - 1);
            w.spawn(g, p);
        }
        Ok(w)
    }

    /// The chunk size of this write.
    pub fn chunk_size(&self) -> u64 {
        self.cs
    }

    /// Bytes taken so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The store path written.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn spawn(&mut self, g: usize, p: Peer) {
        let grp = self.groups[g].clone();
        {
            let mut m = lock(&grp.members);
            if m.contains(&p.node) {
                return;
            }
            m.push(p.node.clone());
        }
        grp.alive.fetch_add(1, Ordering::SeqCst);
        let sh = self.sh.clone();
        let net = self.c.net().clone();
        let total = self.c.inner.bytes_sent.clone();
        let write_id = self.write_id;
        let run = move || {
            let r = sender(&net, &p, write_id, &grp, &sh, &total);
            if let Err(e) = r {
                tracing::warn!("pool: benefactor {}: {e}", p.node);
                *lock(&sh.last_err) = Some(format!("{}: {e}", p.node));
                if e.errno() == libc::ENOSPC {
                    // Still a member: its copies are this write's.
                    lock(&sh.full).push(p.node.clone());
                } else {
                    lock(&sh.failed).push(p.node.clone());
                    lock(&grp.members).retain(|m| *m != p.node);
                }
            }
            grp.alive.fetch_sub(1, Ordering::SeqCst);
        };
        let started = std::thread::Builder::new().name("pool-sender".into()).spawn(run);
        if let Err(e) = started {
            // The group counts this member as gone, so the write extends or fails.
            tracing::warn!("pool: no thread for a sender: {e}");
            let grp = &self.groups[g];
            grp.alive.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Group `g` has no sender left: ask the manager for more benefactors (not the
    /// failed or full ones, nor members of the other groups).
    fn extend(&mut self, g: usize) -> Result<()> {
        let mut failed = lock(&self.sh.failed).clone();
        failed.extend(lock(&self.sh.full).iter().cloned());
        let others: Vec<String> = self
            .groups
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != g)
            .flat_map(|(_, o)| lock(&o.members).clone())
            .collect();
        let mut exclude = failed.clone();
        exclude.extend(others.iter().cloned());
        match self.c.ask(&Request::Extend {
            write_id: self.write_id,
            exclude,
        })? {
            Reply::Opened { stripe, .. } => {
                let fresh: Vec<Peer> = stripe
                    .into_iter()
                    .filter(|p| !failed.contains(&p.node) && !others.contains(&p.node))
                    .collect();
                if fresh.is_empty() {
                    let why = lock(&self.sh.last_err).clone().unwrap_or_default();
                    return Err(PoolError::Peer {
                        peer: "pool".into(),
                        why: format!("no benefactor left to write to ({why})"),
                        errno: libc::EIO,
                    });
                }
                for p in fresh {
                    self.spawn(g, p);
                }
                Ok(())
            }
            _ => Err(proto("manager", "unexpected reply to extend")),
        }
    }

    /// Extend every group left without senders. A group that cannot be extended while
    /// another group still has senders is retired: its queued copies are given up (the
    /// chunks keep their other copies; the manager makes the missing ones later).
    fn keep_groups_alive(&mut self) -> Result<()> {
        for g in 0..self.groups.len() {
            let grp = self.groups[g].clone();
            if grp.retired.load(Ordering::SeqCst) || grp.alive.load(Ordering::SeqCst) != 0 {
                continue;
            }
            if let Err(e) = self.extend(g) {
                let others = self.groups.iter().enumerate().any(|(k, o)| {
                    k != g && !o.retired.load(Ordering::SeqCst) && o.alive.load(Ordering::SeqCst) > 0
                });
                if !others {
                    return Err(e);
                }
                tracing::warn!("pool: {}: replica group {g} given up: {e}", self.path);
                grp.retired.store(true, Ordering::SeqCst);
                let given_up = grp.queue.clear();
                self.sh.done.fetch_add(given_up, Ordering::SeqCst);
            }
        }
        Ok(())
    }

    fn slot(&mut self) -> Result<Slot> {
        loop {
            self.keep_groups_alive()?;
            if let Some(s) = self.slots.take(Duration::from_millis(200)) {
                return Ok(s);
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
            lock(&self.sh.refs).insert(index, r);
            return Ok(());
        }
        let slot = self.slot()?;
        let job = Arc::new(Job {
            index,
            hash,
            data,
            _slot: slot,
        });
        for g in self.groups.iter().filter(|g| !g.retired.load(Ordering::SeqCst)) {
            if !g.queue.push(job.clone()) {
                return Err(proto("pool", "write closed"));
            }
            self.queued += 1;
        }
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

    /// Wait for every copy of every chunk, then commit the chunk map (the content's
    /// CRC32C must be `want_crc` when given). Returns the report.
    pub fn commit(mut self, mtime_ns: u64, mode: u32, want_crc: Option<u32>) -> Result<PutReport> {
        if !self.cur.is_empty() {
            self.emit()?;
        }
        let app = self.t0.elapsed().as_secs_f64();
        while self.sh.done.load(Ordering::SeqCst) < self.queued {
            self.keep_groups_alive()?;
            std::thread::sleep(Duration::from_micros(300));
        }
        let stored = self.t0.elapsed().as_secs_f64();
        for g in &self.groups {
            g.queue.close();
        }
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
        // A member that failed after acknowledging chunks took its copies with it (one
        // that only ran out of memory keeps them): they
        // leave the chunk map (the manager re-replicates them); a chunk with no copy
        // left fails the write, by name, rather than commit a lost file.
        let failed = lock(&self.sh.failed).clone();
        let mut chunks = Vec::with_capacity(self.crcs.len());
        {
            let refs = lock(&self.sh.refs);
            for i in 0..self.crcs.len() as u64 {
                let r = refs
                    .get(&i)
                    .ok_or_else(|| proto("pool", format!("chunk {i} not stored")))?;
                if !r.sent {
                    chunks.push(r.clone());
                    continue;
                }
                let live: Vec<String> = r.holders().filter(|n| !failed.contains(n)).cloned().collect();
                let Some(first) = live.first() else {
                    return Err(PoolError::Lost {
                        path: self.path.clone(),
                        chunk: i,
                        node: r.node.clone(),
                    });
                };
                let mut r = r.clone();
                r.node = first.clone();
                r.also = live[1..].to_vec();
                chunks.push(r);
            }
        }
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
        let mut stripe: Vec<String> = self
            .groups
            .iter()
            .flat_map(|g| lock(&g.members).clone())
            .collect();
        stripe.retain(|m| !failed.contains(m));
        Ok(PutReport {
            path: self.path.clone(),
            version,
            size: self.written,
            chunks: n,
            chunks_sent,
            bytes_sent: self.sh.sent_bytes.load(Ordering::SeqCst),
            app_seconds: app,
            stored_seconds: stored,
            oab: size / app.max(1e-9),
            asb: size / stored.max(1e-9),
            stripe,
        })
    }
}

impl PoolWrite {
    /// Testing: drop this write without telling the manager, as a client that dies
    /// does (its chunks are then reclaimed when its connection is gone).
    #[doc(hidden)]
    pub fn abandon(mut self) {
        self.committed = true;
    }
}

impl Drop for PoolWrite {
    fn drop(&mut self) {
        for g in &self.groups {
            g.queue.close();
        }
        if !self.committed {
            let _ = self.c.ask(&Request::Abort {
                write_id: self.write_id,
            });
        }
    }
}

/// One group member's sender: takes its group's queued chunks, sends each, waits for
/// its Ack.
fn sender(net: &PoolNet, p: &Peer, write_id: u64, grp: &Group, sh: &Shared, total: &AtomicU64) -> Result<()> {
    let mut conn = net.dial(&p.addr, &p.node)?;
    loop {
        let Some(job) = grp.queue.pop() else {
            return Ok(());
        };
        match put_chunk(&mut conn, &net.me, write_id, job.index, &job.hash, &job.data) {
            Ok(()) => {
                let len = job.data.len() as u64;
                sh.sent_bytes.fetch_add(len, Ordering::SeqCst);
                total.fetch_add(len, Ordering::SeqCst);
                {
                    let mut refs = lock(&sh.refs);
                    match refs.get_mut(&job.index) {
                        Some(r) => {
                            if !r.holders().any(|n| *n == p.node) {
                                r.also.push(p.node.clone());
                            }
                        }
                        None => {
                            refs.insert(
                                job.index,
                                ChunkRef {
                                    hash: job.hash.clone(),
                                    node: p.node.clone(),
                                    also: Vec::new(),
                                    len: len as u32,
                                    sent: true,
                                },
                            );
                        }
                    }
                }
                sh.done.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                // Hand the chunk back for another member of the group, and stop.
                grp.queue.push(job);
                return Err(e);
            }
        }
    }
}
