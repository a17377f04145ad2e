//! Kernel attribute/entry caching for the store mount, with invalidation driven by the
//! store's change counter.
//!
//! The store mount answers lookups and getattrs with a long TTL ([`CacheConfig::ttl`]) so
//! that a stat of a known path costs no FUSE request at all. Other processes change the
//! same store behind the kernel's back (the preload shim, the C API, the agent), so a
//! poller thread watches the store's change sequence ([`Store::change_seq`], store
//! format 4) and, when it moved, asks [`Store::changed_since`] which inodes changed and
//! tells the kernel what is now wrong:
//!
//! * `KernelView` records what the kernel was told and still holds: for each inode it
//!   has looked up (until FORGET) the attributes it was given and the one name it knows
//!   it under (the store has one name per inode).
//! * For every inode the store lists as changed since the last round (or every known
//!   inode when the store cannot say), the poller compares the store with that record:
//!   different size or mtime: `notify_inval_inode(ino, 0, 0)` (attributes and cached
//!   pages); other attributes: `notify_inval_inode(ino, -1, 0)` (attributes only); the
//!   inode gone or its name now naming something else: `notify_inval_entry(parent,
//!   name)`. Each name in the store's name-change log that the kernel holds a dentry
//!   for has its inode checked the same way (a rename or unlink through the shim).
//! * Requests through the mount update the record as they answer, so a change made
//!   through the mount compares equal and invalidates nothing extra.
//! * A reply computed from a store state that moved before the reply reached the kernel
//!   could install a stale entry after the poller already looked: handlers read the
//!   sequence before the store and after replying, and if it moved they queue the inode
//!   as a suspect the poller checks in its next round.
//!
//! The poller never holds the view's lock while it notifies: an invalidation waits for
//! the kernel's inode and directory locks, which a request in flight holds until a
//! request thread answers it, and request threads take the view's lock.

use ckptfs_store::{FileKind, Stat, Store};
use fuser::{INodeNo, Notifier};
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Caching settings of the store mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// How long the kernel may keep attributes and entries without asking. Zero turns
    /// caching off (every stat and every path step is a request, and no poller runs).
    pub ttl: Duration,
    /// How often the poller reads the store's change sequence.
    pub poll: Duration,
}

impl CacheConfig {
    /// No kernel caching (TTL 0): what the mount does when the store has no change
    /// counter.
    pub const OFF: CacheConfig = CacheConfig {
        ttl: Duration::ZERO,
        poll: Duration::ZERO,
    };

    /// The default: 10 s attributes and entries, a 2 ms poll (a change made outside the
    /// mount is visible through it within about one poll interval).
    pub const DEFAULT: CacheConfig = CacheConfig {
        ttl: Duration::from_secs(10),
        poll: Duration::from_millis(2),
    };

    /// Is kernel caching on?
    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig::DEFAULT
    }
}

/// What a stat shows that the kernel caches: compared to decide what to invalidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AttrKey {
    size: u64,
    mtime_ns: u64,
    ctime_ns: u64,
    atime_ns: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
}

impl AttrKey {
    fn of(st: &Stat) -> AttrKey {
        AttrKey {
            size: st.size,
            mtime_ns: st.mtime_ns,
            ctime_ns: st.ctime_ns,
            atime_ns: st.atime_ns,
            mode: st.mode,
            uid: st.uid,
            gid: st.gid,
            nlink: st.nlink,
        }
    }

    fn data_differs(&self, o: &AttrKey) -> bool {
        self.size != o.size || self.mtime_ns != o.mtime_ns
    }
}

/// One inode the kernel holds.
#[derive(Debug)]
struct Known {
    /// Lookups not yet forgotten (the kernel's reference count).
    nlookup: u64,
    generation: u32,
    /// The name the kernel has a dentry for, if any.
    entry: Option<(u64, String)>,
    /// The attributes the kernel was last given.
    attr: AttrKey,
}

#[derive(Default)]
struct View {
    inodes: HashMap<u64, Known>,
    /// Parent directory -> names the kernel holds a dentry for -> inode.
    children: HashMap<u64, HashMap<String, u64>>,
    /// Inodes whose reply may have been computed from a state that moved meanwhile.
    suspects: Vec<u64>,
}

impl View {
    fn unlink_entry(&mut self, ino: u64) {
        let Some(k) = self.inodes.get_mut(&ino) else {
            return;
        };
        if let Some((parent, name)) = k.entry.take() {
            if let Some(set) = self.children.get_mut(&parent) {
                if set.get(&name) == Some(&ino) {
                    set.remove(&name);
                }
                if set.is_empty() {
                    self.children.remove(&parent);
                }
            }
        }
    }

    fn set_entry(&mut self, ino: u64, parent: u64, name: &str) {
        self.unlink_entry(ino);
        if let Some(k) = self.inodes.get_mut(&ino) {
            k.entry = Some((parent, name.to_string()));
            self.children
                .entry(parent)
                .or_default()
                .insert(name.to_string(), ino);
        }
    }
}

/// What the kernel holds (see the module documentation). All methods are cheap no-ops
/// when caching is off.
pub(crate) struct KernelView {
    enabled: bool,
    store: Store,
    view: Mutex<View>,
    /// Set when the poller starts (the notifier exists only once the session does).
    notifier: OnceLock<Notifier>,
    /// Subdirectory counts of directories (for their link count).
    subdirs: Mutex<Subdirs>,
}

/// Subdirectory counts: dropped when a directory name is added to or removed from the
/// directory, through the mount or (seen by the poller in the store's name-change log)
/// outside it. A count computed while a drop happened is not kept (`drops` epoch).
#[derive(Default)]
struct Subdirs {
    /// Directory inode -> (generation, subdirectories).
    counts: HashMap<u64, (u32, u32)>,
    drops: u64,
    /// Inodes seen to be directories (a removed name's inode is freed and cannot be
    /// asked its kind any more).
    dirs: HashSet<u64>,
}

impl Subdirs {
    fn note_dir(&mut self, ino: u64) {
        if self.dirs.len() >= 1 << 16 && !self.dirs.contains(&ino) {
            // Forgetting which inodes were directories forgets the counts they affect.
            self.dirs.clear();
            self.counts.clear();
            self.drops += 1;
        }
        self.dirs.insert(ino);
    }
}

impl KernelView {
    pub(crate) fn new(cfg: CacheConfig, store: Store) -> KernelView {
        KernelView {
            enabled: cfg.enabled(),
            store,
            view: Mutex::new(View::default()),
            notifier: OnceLock::new(),
            subdirs: Mutex::new(Subdirs::default()),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The change sequence before a store read (0 when caching is off).
    pub(crate) fn seq(&self) -> u64 {
        if self.enabled {
            self.store.change_seq()
        } else {
            0
        }
    }

    /// After a reply computed from a store read that started at sequence `before`: if
    /// the store moved meanwhile, have the poller check `ino` again.
    pub(crate) fn settle(&self, before: u64, ino: u64) {
        if self.enabled && self.seq() != before {
            self.view.lock().unwrap().suspects.push(ino);
        }
    }

    /// An entry reply for `name` in `parent` (lookup, create, mkdir, mknod): the kernel
    /// holds one more reference to the inode and a dentry for the name.
    pub(crate) fn entry(&self, parent: u64, name: &str, st: &Stat) {
        if !self.enabled {
            return;
        }
        let mut v = self.view.lock().unwrap();
        let k = v.inodes.entry(st.ino).or_insert(Known {
            nlookup: 0,
            generation: st.generation,
            entry: None,
            attr: AttrKey::of(st),
        });
        // A reused slot (new generation): the kernel makes a new inode under the same
        // number and later forgets the old one with its own count, so the counts add up
        // per number; the record follows the newest generation.
        k.generation = st.generation;
        k.nlookup += 1;
        k.attr = AttrKey::of(st);
        v.set_entry(st.ino, parent, name);
    }

    /// An attribute reply (getattr, setattr), or a change through the mount whose new
    /// attributes the kernel derives itself (write, truncate).
    pub(crate) fn attr(&self, st: &Stat) {
        if !self.enabled {
            return;
        }
        let mut v = self.view.lock().unwrap();
        if let Some(k) = v.inodes.get_mut(&st.ino) {
            if k.generation == st.generation {
                k.attr = AttrKey::of(st);
            }
        }
    }

    /// `ino` lost its name through the mount (unlink, rmdir): the kernel dropped the
    /// dentry itself.
    pub(crate) fn unlinked(&self, ino: u64) {
        if self.enabled {
            self.view.lock().unwrap().unlink_entry(ino);
        }
    }

    /// `ino` was renamed through the mount to `name` in `parent` (the kernel moved its
    /// dentry itself).
    pub(crate) fn renamed(&self, ino: u64, parent: u64, name: &str) {
        if self.enabled {
            self.view.lock().unwrap().set_entry(ino, parent, name);
        }
    }

    /// At open (close-to-open consistency): if `st`, the store's current state, differs
    /// from what the kernel was told, the kernel's attributes are invalidated now,
    /// before the open is answered (attributes only: no page locks are taken, so this
    /// is safe inside a request), and `true` says the open must drop the cached pages.
    pub(crate) fn changed_at_open(&self, st: &Stat) -> bool {
        if !self.enabled {
            return false;
        }
        let stale = {
            let mut v = self.view.lock().unwrap();
            match v.inodes.get_mut(&st.ino) {
                Some(k) if k.generation == st.generation && k.attr != AttrKey::of(st) => {
                    k.attr = AttrKey::of(st);
                    true
                }
                _ => false,
            }
        };
        if stale {
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(INodeNo(st.ino), -1, 0);
            }
        }
        stale
    }

    /// The cached subdirectory count of directory `ino` (generation `generation`), or
    /// the epoch to pass to [`KernelView::set_subdirs`] after counting.
    pub(crate) fn subdirs(&self, ino: u64, generation: u32) -> Result<u32, u64> {
        let mut m = self.subdirs.lock().unwrap();
        m.note_dir(ino);
        match m.counts.get(&ino) {
            Some(&(g, n)) if self.enabled && g == generation => Ok(n),
            _ => Err(m.drops),
        }
    }

    /// Remember the subdirectory count of a directory counted since `epoch`.
    pub(crate) fn set_subdirs(&self, ino: u64, generation: u32, n: u32, epoch: u64) {
        if self.enabled {
            let mut m = self.subdirs.lock().unwrap();
            if m.drops != epoch {
                return;
            }
            if m.counts.len() >= 65536 {
                m.counts.clear();
            }
            m.counts.insert(ino, (generation, n));
        }
    }

    /// A directory name was added to or removed from `dir`.
    pub(crate) fn drop_subdirs(&self, dir: u64) {
        let mut m = self.subdirs.lock().unwrap();
        m.drops += 1;
        m.counts.remove(&dir);
    }

    /// The poller's part: a name `name_ino` (generation `generation`, `freed` if its
    /// slot is free now) was added to or removed from `dir`.
    fn name_changed(&self, dir: u64, name_ino: u64, generation: u32, freed: bool) {
        let was_dir = self.subdirs.lock().unwrap().dirs.contains(&name_ino);
        // Not freed and not a file now: a directory, or unknown (then dropped too).
        let is_dir = !freed
            && !self
                .store
                .stat_ino(name_ino)
                .is_ok_and(|st| st.generation == generation && st.kind == FileKind::File);
        if is_dir {
            self.subdirs.lock().unwrap().note_dir(name_ino);
        }
        if was_dir || is_dir {
            self.drop_subdirs(dir);
        }
    }

    /// FORGET: the kernel dropped `n` references.
    pub(crate) fn forget(&self, ino: u64, n: u64) {
        if !self.enabled {
            return;
        }
        let mut v = self.view.lock().unwrap();
        let gone = match v.inodes.get_mut(&ino) {
            Some(k) => {
                k.nlookup = k.nlookup.saturating_sub(n);
                k.nlookup == 0
            }
            None => false,
        };
        if gone {
            v.unlink_entry(ino);
            v.inodes.remove(&ino);
        }
    }

    /// Inodes the kernel holds (tests and the status log).
    pub(crate) fn known(&self) -> usize {
        self.view.lock().unwrap().inodes.len()
    }

    /// One poll round over the changed inodes and the inodes behind the changed names
    /// the kernel holds (None: every known inode) plus the suspects: compares with the
    /// store and returns the notifications to send (sent by the caller, without the
    /// lock). The store is read without the view's lock held (request threads take it
    /// at every reply, and the poller may be descheduled on a busy machine), between a
    /// snapshot of the records and the update of those still unchanged.
    fn round(&self, changed: Option<Changed>) -> Vec<Inval> {
        let mut freed = HashSet::new();
        let snap: Vec<Snap> = {
            let mut v = self.view.lock().unwrap();
            let mut todo: Vec<u64> = match changed {
                Some((inodes, names)) => {
                    let mut inodes: Vec<u64> = inodes
                        .into_iter()
                        .map(|(ino, exists)| {
                            if !exists {
                                freed.insert(ino);
                            }
                            ino
                        })
                        .collect();
                    for (parent, name) in names {
                        if let Some(&ino) = v.children.get(&parent).and_then(|m| m.get(&name)) {
                            inodes.push(ino);
                        }
                    }
                    inodes
                }
                None => v.inodes.keys().copied().collect(),
            };
            todo.append(&mut v.suspects);
            let mut seen = HashSet::new();
            todo.into_iter()
                .filter(|ino| seen.insert(*ino))
                .filter_map(|ino| {
                    v.inodes.get(&ino).map(|k| Snap {
                        ino,
                        generation: k.generation,
                        entry: k.entry.clone(),
                    })
                })
                .collect()
        };
        let looked: Vec<(Snap, bool, Option<Stat>)> = snap
            .into_iter()
            .map(|s| {
                let (name_ok, cur) = probe(&self.store, &s, &freed);
                (s, name_ok, cur)
            })
            .collect();
        let mut v = self.view.lock().unwrap();
        let mut out = Vec::new();
        for (s, name_ok, cur) in looked {
            apply(&mut v, s, name_ok, cur, &mut out);
        }
        out
    }
}

/// A record as the poller saw it before reading the store.
struct Snap {
    ino: u64,
    generation: u32,
    entry: Option<(u64, String)>,
}

/// Read the store for one record: is the name the kernel holds still this inode's, and
/// the inode's state. The lookup's answer is also the inode's state; only an inode
/// without its name is stat'ed, and not one the store listed as freed (a stat racing
/// with the free would be reported as damage).
fn probe(store: &Store, s: &Snap, freed: &HashSet<u64>) -> (bool, Option<Stat>) {
    let mine = |st: &Stat| st.ino == s.ino && st.generation == s.generation;
    let mut cur = None;
    let mut name_ok = true;
    if let Some((parent, name)) = &s.entry {
        match store.lookup(*parent, name) {
            Ok(st) if mine(&st) => cur = Some(st),
            _ => name_ok = false,
        }
    }
    if cur.is_none() && !freed.contains(&s.ino) {
        cur = store.stat_ino(s.ino).ok().filter(mine);
    }
    (name_ok, cur)
}

/// Compare a probe with the record (if the record is still the one probed) and queue
/// the invalidations.
fn apply(v: &mut View, s: Snap, name_ok: bool, cur: Option<Stat>, out: &mut Vec<Inval>) {
    let Some(k) = v.inodes.get(&s.ino) else {
        return;
    };
    if k.generation != s.generation {
        return; // looked up again meanwhile: the kernel has the newer answer
    }
    if !name_ok && k.entry == s.entry {
        if let Some((parent, name)) = s.entry {
            out.push(Inval::Entry { parent, name });
            v.unlink_entry(s.ino);
        }
    }
    let Some(k) = v.inodes.get_mut(&s.ino) else {
        return;
    };
    match cur {
        None => out.push(Inval::Inode {
            ino: s.ino,
            data: true,
        }),
        Some(st) => {
            let now = AttrKey::of(&st);
            if now != k.attr {
                out.push(Inval::Inode {
                    ino: s.ino,
                    data: now.data_differs(&k.attr),
                });
                k.attr = now;
            }
        }
    }
}

/// Changed inodes (number, still allocated), and changed names as (parent, name).
type Changed = (Vec<(u64, bool)>, Vec<(u64, String)>);

/// A notification to send.
#[derive(Debug, PartialEq, Eq)]
enum Inval {
    /// Attributes (and with `data`, the cached pages) of an inode.
    Inode { ino: u64, data: bool },
    /// A name in a directory.
    Entry { parent: u64, name: String },
}

/// The poller thread; stops (and is joined) when dropped.
pub struct Poller {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Poller {
    /// Start polling for `fs`'s view; `None` when caching is off.
    pub(crate) fn start(
        view: Arc<KernelView>,
        cfg: CacheConfig,
        notifier: Notifier,
    ) -> std::io::Result<Option<Poller>> {
        if !view.enabled {
            return Ok(None);
        }
        let _ = view.notifier.set(notifier.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ckptfs-inval".into())
            .spawn(move || poll_loop(&view, cfg.poll, &notifier, &stop2))?;
        Ok(Some(Poller {
            stop,
            thread: Some(thread),
        }))
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The poller waits at least this many times the duration of its last round.
const BACKOFF: u32 = 3;

fn poll_loop(view: &KernelView, every: Duration, notifier: &Notifier, stop: &AtomicBool) {
    let store = &view.store;
    let mut last = store.change_seq();
    let (mut sent, mut incomplete) = (0u64, 0u64);
    let mut pause = every;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(pause);
        pause = every;
        let seq = store.change_seq();
        let suspects = !view.view.lock().unwrap().suspects.is_empty();
        if seq == last && !suspects {
            continue;
        }
        // A round reads the inode slots the kernel holds (as many as the files after a
        // burst of creates; before round 2 session 8 every slot of the store: 131,072
        // in a 1 GiB store, about a millisecond), so while the store keeps changing (a
        // create burst, a checkpoint written through the shim) a round every 2 ms could
        // keep this thread busy half the time. Waiting at least BACKOFF times what the round
        // took bounds the poller to 1/(BACKOFF+1) of a CPU; the delay before an outside
        // change shows grows with the store instead.
        let started = Instant::now();
        let changed = if seq == last {
            Some((Vec::new(), Vec::new()))
        } else {
            // A change landing during the call is listed now or next round (the
            // answer's seq was read before the inodes), never missed. Only the inodes
            // the kernel holds can be stale in it; the list is taken after that seq, so
            // an inode the kernel is given meanwhile is looked at next round.
            let known = || view.view.lock().unwrap().inodes.keys().copied().collect();
            let c = store.changed_since_among(last, Some(known));
            last = c.seq;
            if !c.complete {
                incomplete += 1;
                let mut m = view.subdirs.lock().unwrap();
                m.counts.clear();
                m.drops += 1;
            }
            // A file's name leaves the parent's link count alone.
            let freed: HashSet<u64> = c.inodes.iter().filter(|i| !i.exists).map(|i| i.ino).collect();
            for n in &c.names {
                view.name_changed(n.parent_ino, n.ino, n.generation, freed.contains(&n.ino));
            }
            c.complete.then(|| {
                (
                    c.inodes.into_iter().map(|i| (i.ino, i.exists)).collect(),
                    c.names.into_iter().map(|n| (n.parent_ino, n.name)).collect(),
                )
            })
        };
        for inval in view.round(changed) {
            let r = match &inval {
                Inval::Inode { ino, data } => {
                    notifier.inval_inode(INodeNo(*ino), if *data { 0 } else { -1 }, 0)
                }
                Inval::Entry { parent, name } => notifier.inval_entry(INodeNo(*parent), OsStr::new(name)),
            };
            match r {
                Ok(()) => sent += 1,
                // The session is gone (unmounted): stop.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV) | Some(libc::EBADF)) => return,
                Err(e) => tracing::debug!(error = %e, ?inval, "invalidation refused"),
            }
        }
        pause = every.max(started.elapsed() * BACKOFF);
    }
    tracing::info!(
        invalidations = sent,
        incomplete_rounds = incomplete,
        known = view.known(),
        "invalidation poller stopped"
    );
}

/// Starts the invalidation poller of a mounted [`crate::StoreFs`] (see
/// [`crate::StoreFs::invalidator`]).
pub struct Invalidator {
    pub(crate) view: Arc<KernelView>,
    pub(crate) cache: CacheConfig,
}

impl Invalidator {
    /// Start the poller with the session's notifier; `None` when caching is off. The
    /// poller stops when the returned value is dropped (or the session ends).
    pub fn start(self, notifier: fuser::Notifier) -> std::io::Result<Option<Poller>> {
        Poller::start(self.view, self.cache, notifier)
    }
}
