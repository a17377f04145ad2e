//! Process state of the shim: the attached store, the mount prefixes, the descriptor
//! table, the shared open-file descriptions, the virtual working directory, and the fork
//! and exit handlers.
//!
//! Every store descriptor is a real kernel descriptor (an `O_PATH` descriptor of
//! `/dev/null`), so its number is unique in the process. The table maps it to a
//! [`Desc`] (the open file description: store handle, path, access mode) whose offset and
//! status flags live in a [`Slot`] of a `MAP_SHARED|MAP_ANONYMOUS` region that `fork`
//! shares with children exactly as the kernel shares a description.

use crate::lock::RwSpin;
use crate::paths;
use crate::sys;
use ckptfs_store::{FileHandle, Store, StoreOptions};
use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Errno-valued result of shim operations.
pub type R<T> = Result<T, i32>;

/// Map a store error to its errno.
pub fn se(e: ckptfs_store::StoreError) -> i32 {
    e.errno()
}

// ------------------------------------------------------------------ configuration

static MOUNTS: OnceLock<Vec<String>> = OnceLock::new();

/// The mount prefixes (`CKPTFS_MOUNT`, default `/ckpt`).
#[inline]
pub fn mounts() -> &'static [String] {
    MOUNTS.get_or_init(|| paths::parse_mounts(std::env::var("CKPTFS_MOUNT").ok().as_deref()))
}

/// Parse a size with an optional K/M/G/T suffix (binary units, `iB`/`B` accepted).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (num, mul) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1u64 << 10),
        'm' | 'M' => (&t[..t.len() - 1], 1 << 20),
        'g' | 'G' => (&t[..t.len() - 1], 1 << 30),
        't' | 'T' => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// Store options from the same environment variables the CLI uses.
pub fn options_from_env() -> StoreOptions {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    StoreOptions {
        name: var("CKPTFS_STORE").unwrap_or_default(),
        mem_size: var("CKPTFS_MEM_SIZE").and_then(|v| parse_size(&v)),
        chunk_size: var("CKPTFS_CHUNK_SIZE").and_then(|v| parse_size(&v)),
        max_files: var("CKPTFS_MAX_FILES").and_then(|v| v.parse().ok()),
        spill_dir: var("CKPTFS_SPILL_DIR").map(Into::into),
        spill_size: var("CKPTFS_SPILL_SIZE").and_then(|v| parse_size(&v)),
        private: var("CKPTFS_PRIVATE").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
    }
}

static STORE: OnceLock<R<Store>> = OnceLock::new();

/// The store, attached (or created) on first use. Call inside [`sys::guarded`].
pub fn store() -> R<&'static Store> {
    let r = STORE.get_or_init(|| {
        slots();
        register_handlers();
        Store::open_or_create(&options_from_env()).map_err(|e| {
            eprintln!("ckptfs-preload: cannot attach the store: {e}");
            se(e)
        })
    });
    r.as_ref().map_err(|e| *e)
}

// ------------------------------------------------------------------ shared descriptions

/// Per-description state shared across fork: offset and status flags.
#[repr(C, align(32))]
pub struct Slot {
    /// Processes holding this description (the last one frees the slot).
    pub refs: AtomicU32,
    /// Serialises offset updates between processes sharing the description.
    lock: AtomicU32,
    /// Status flags (O_APPEND, O_NONBLOCK, ...), as F_GETFL reports them.
    pub flags: AtomicU32,
    /// File offset.
    pub off: AtomicU64,
}

const NSLOTS: usize = 1 << 16;

struct Slots {
    base: *const Slot,
    hint: AtomicUsize,
}
// SAFETY: the region is only accessed through atomics.
unsafe impl Send for Slots {}
// SAFETY: as above.
unsafe impl Sync for Slots {}

static SLOTS: OnceLock<Slots> = OnceLock::new();

fn slots() -> &'static Slots {
    SLOTS.get_or_init(|| {
        let len = NSLOTS * std::mem::size_of::<Slot>();
        // SAFETY: fresh anonymous shared mapping; zeroed memory is a valid array of free slots.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        let base = if p == libc::MAP_FAILED { std::ptr::null() } else { p as *const Slot };
        Slots {
            base,
            hint: AtomicUsize::new(0),
        }
    })
}

fn alloc_slot(flags: u32) -> R<&'static Slot> {
    let s = slots();
    if s.base.is_null() {
        return Err(libc::ENOMEM);
    }
    let start = s.hint.load(Ordering::Relaxed);
    for k in 0..NSLOTS {
        let i = (start + k) % NSLOTS;
        // SAFETY: i < NSLOTS, inside the mapping, which lives for the whole process.
        let slot = unsafe { &*s.base.add(i) };
        if slot.refs.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            slot.off.store(0, Ordering::Relaxed);
            slot.flags.store(flags, Ordering::Relaxed);
            slot.lock.store(0, Ordering::Relaxed);
            s.hint.store(i + 1, Ordering::Relaxed);
            return Ok(slot);
        }
    }
    Err(libc::ENFILE)
}

impl Slot {
    /// Hold the description's offset lock (shared with forked processes). A holder that
    /// died is detected by its pid and the lock taken over.
    pub fn lock(&self) -> SlotGuard<'_> {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        let mut i = 0u32;
        loop {
            match self.lock.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return SlotGuard(self),
                Err(owner) => {
                    i += 1;
                    if i % 1024 == 0 && owner != 0 && owner != me {
                        // SAFETY: kill with signal 0 only checks existence.
                        let dead = unsafe { libc::kill(owner as i32, 0) } != 0 && sys::errno() == libc::ESRCH;
                        if dead {
                            let _ = self.lock.compare_exchange(owner, 0, Ordering::AcqRel, Ordering::Relaxed);
                        }
                    }
                    if i < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }
}

/// Held offset lock.
pub struct SlotGuard<'a>(&'a Slot);
impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.0.lock.store(0, Ordering::Release);
    }
}

/// Bumped in every fork child: descriptions created in an older generation hold the
/// parent's lease until the child adopts them.
static FORK_GEN: AtomicU64 = AtomicU64::new(0);

/// An open file description of a store file or directory.
pub struct Desc {
    /// Shared offset and flags.
    pub slot: &'static Slot,
    handle: Mutex<Option<FileHandle>>,
    /// Index of the mount prefix it was opened under.
    pub mount: usize,
    /// Store path at open time.
    pub path: String,
    /// Directory?
    pub is_dir: bool,
    /// O_RDONLY / O_WRONLY / O_RDWR (O_PATH descriptors count as O_RDONLY).
    pub acc: i32,
    gen: AtomicU64,
}

impl Desc {
    /// A new description for `h`.
    pub fn new(h: FileHandle, mount: usize, path: String, acc: i32, flags: u32) -> R<Desc> {
        let slot = alloc_slot(flags)?;
        Ok(Desc {
            slot,
            is_dir: h.is_dir(),
            handle: Mutex::new(Some(h)),
            mount,
            path,
            acc,
            gen: AtomicU64::new(FORK_GEN.load(Ordering::Relaxed)),
        })
    }

    /// The store handle, adopted for this process after a fork on first use.
    pub fn handle(&self) -> R<MutexGuard<'_, Option<FileHandle>>> {
        let mut g = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        let now = FORK_GEN.load(Ordering::Relaxed);
        if self.gen.load(Ordering::Relaxed) != now {
            if let Some(h) = g.as_mut() {
                h.adopt_after_fork().map_err(se)?;
            }
            self.gen.store(now, Ordering::Relaxed);
        }
        if g.is_none() {
            return Err(libc::EBADF);
        }
        Ok(g)
    }

    /// Full virtual path (mount + store path).
    pub fn full_path(&self) -> String {
        paths::full_path(&mounts()[self.mount], &self.path)
    }

    /// Close the store handle: called when this process drops its last reference.
    fn finish(&self) -> R<()> {
        let h = self.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(h) = h else { return Ok(()) };
        if self.gen.load(Ordering::Relaxed) != FORK_GEN.load(Ordering::Relaxed) {
            // A fork child that never used it: the lease is the parent's; leave it alone.
            std::mem::forget(h);
            return Ok(());
        }
        h.close().map_err(se)
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        let _ = self.finish();
        self.slot.refs.fetch_sub(1, Ordering::AcqRel);
    }
}

// ------------------------------------------------------------------ descriptor table

struct Table {
    lock: RwSpin,
    map: UnsafeCell<BTreeMap<i32, Arc<Desc>>>,
}
// SAFETY: `map` is only touched with `lock` held (shared for reads, exclusive for writes).
unsafe impl Sync for Table {}

static TABLE: Table = Table {
    lock: RwSpin::new(),
    map: UnsafeCell::new(BTreeMap::new()),
};

const LOW_FDS: usize = 1 << 16;
static BITS: [AtomicU64; LOW_FDS / 64] = [const { AtomicU64::new(0) }; LOW_FDS / 64];
static HIGH: AtomicUsize = AtomicUsize::new(0);

fn set_bit(fd: i32, on: bool) {
    let fd = fd as usize;
    if fd < LOW_FDS {
        let b = 1u64 << (fd % 64);
        if on {
            BITS[fd / 64].fetch_or(b, Ordering::Release);
        } else {
            BITS[fd / 64].fetch_and(!b, Ordering::Release);
        }
    } else if on {
        HIGH.fetch_add(1, Ordering::Relaxed);
    } else {
        HIGH.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Could `fd` be a store descriptor? Lock-free; false is definitive.
#[inline]
pub fn maybe_store_fd(fd: i32) -> bool {
    if fd < 0 {
        return false;
    }
    let u = fd as usize;
    if u < LOW_FDS {
        BITS[u / 64].load(Ordering::Acquire) & (1u64 << (u % 64)) != 0
    } else {
        HIGH.load(Ordering::Relaxed) > 0
    }
}

/// Shared hold of the table for the duration of one store operation.
pub struct ReadHold(());
impl ReadHold {
    fn new() -> ReadHold {
        TABLE.lock.read();
        ReadHold(())
    }
}
impl Drop for ReadHold {
    fn drop(&mut self) {
        TABLE.lock.read_unlock();
    }
}

struct WriteHold(());
impl WriteHold {
    fn new() -> WriteHold {
        TABLE.lock.write();
        WriteHold(())
    }
    #[allow(clippy::mut_from_ref)]
    fn map(&self) -> &mut BTreeMap<i32, Arc<Desc>> {
        // SAFETY: exclusive hold of the table lock.
        unsafe { &mut *TABLE.map.get() }
    }
}
impl Drop for WriteHold {
    fn drop(&mut self) {
        TABLE.lock.write_unlock();
    }
}

/// Run `f` on the description of store descriptor `fd`; None if `fd` is not one.
pub fn with_fd<T>(fd: i32, f: impl FnOnce(&Arc<Desc>) -> R<T>) -> Option<R<T>> {
    if !maybe_store_fd(fd) {
        return None;
    }
    let hold = ReadHold::new();
    // SAFETY: shared hold of the table lock.
    let d = unsafe { &*TABLE.map.get() }.get(&fd).cloned();
    let r = d.map(|d| f(&d));
    drop(hold);
    r
}

/// The description of `fd` if it is a store descriptor.
pub fn desc_of(fd: i32) -> Option<Arc<Desc>> {
    if !maybe_store_fd(fd) {
        return None;
    }
    let _hold = ReadHold::new();
    // SAFETY: shared hold of the table lock.
    unsafe { &*TABLE.map.get() }.get(&fd).cloned()
}

/// A reserved kernel descriptor number: O_PATH on /dev/null, so that any call that
/// bypasses the shim fails with EBADF instead of touching a real file.
pub fn reserve_fd(cloexec: bool) -> R<i32> {
    let fl = libc::O_PATH | if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: raw openat with a static NUL-terminated path.
    let fd = unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, c"/dev/null".as_ptr(), fl, 0) };
    if fd < 0 {
        return Err(sys::errno());
    }
    Ok(fd as i32)
}

/// Close a kernel descriptor bypassing the hooks.
pub fn raw_close(fd: i32) -> i32 {
    // SAFETY: closing a descriptor number; no memory involved.
    unsafe { libc::syscall(libc::SYS_close, fd) as i32 }
}

/// Enter `fd` -> `d` in the table; an older entry for the same number (its kernel
/// descriptor was closed behind the shim's back) is dropped.
pub fn install(fd: i32, d: Arc<Desc>) {
    let old = {
        let w = WriteHold::new();
        let old = w.map().insert(fd, d);
        if old.is_none() {
            set_bit(fd, true);
        }
        old
    };
    drop(old);
}

/// Remove `fd` from the table; returns its description.
pub fn remove(fd: i32) -> Option<Arc<Desc>> {
    if !maybe_store_fd(fd) {
        return None;
    }
    let w = WriteHold::new();
    let d = w.map().remove(&fd);
    if d.is_some() {
        set_bit(fd, false);
    }
    d
}

/// Remove every store descriptor in `[lo, hi]`.
pub fn remove_range(lo: u32, hi: u32) -> Vec<(i32, Arc<Desc>)> {
    let w = WriteHold::new();
    let m = w.map();
    let keys: Vec<i32> = m.range(lo.min(i32::MAX as u32) as i32..).map(|(k, _)| *k).filter(|k| *k as u32 <= hi).collect();
    keys.into_iter()
        .filter_map(|k| {
            set_bit(k, false);
            m.remove(&k).map(|d| (k, d))
        })
        .collect()
}

/// Drop a description this process no longer references through `fd`; if it was the
/// last reference, close the store handle and report its error.
pub fn release(d: Arc<Desc>) -> R<()> {
    match Arc::try_unwrap(d) {
        Ok(d) => d.finish(),
        Err(_) => Ok(()),
    }
}

/// Called when a pass-through call returned kernel descriptor `fd`: a stale entry (its
/// store descriptor was closed with a raw syscall) must not shadow the new file.
#[inline]
pub fn forget_stale(fd: i32) {
    if maybe_store_fd(fd) {
        if let Some(d) = remove(fd) {
            let _ = release(d);
        }
    }
}

/// Close every store descriptor (process exit, exec): flush stdio streams on store files,
/// release leases so the files are complete.
pub fn close_all() {
    crate::stdio::flush_all();
    let all = {
        let w = WriteHold::new();
        let m = std::mem::take(w.map());
        for k in m.keys() {
            set_bit(*k, false);
        }
        m
    };
    for (_, d) in all {
        let _ = release(d);
    }
}

// ------------------------------------------------------------------ working directory

static VCWD_SET: AtomicBool = AtomicBool::new(false);
static VCWD: Mutex<Option<String>> = Mutex::new(None);

/// The virtual working directory (a store directory entered with chdir), if any.
pub fn vcwd() -> Option<String> {
    if !VCWD_SET.load(Ordering::Acquire) {
        return None;
    }
    VCWD.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Set or clear the virtual working directory.
pub fn set_vcwd(p: Option<String>) {
    let mut g = VCWD.lock().unwrap_or_else(|e| e.into_inner());
    VCWD_SET.store(p.is_some(), Ordering::Release);
    *g = p;
}

/// The kernel's working directory (raw syscall, no hooks).
pub fn real_cwd() -> R<String> {
    let mut buf = [0u8; libc::PATH_MAX as usize];
    // SAFETY: buffer and its length.
    let n = unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) };
    if n < 0 {
        return Err(sys::errno());
    }
    let s = CStr::from_bytes_until_nul(&buf).map_err(|_| libc::EIO)?;
    s.to_str().map(str::to_string).map_err(|_| libc::EILSEQ)
}

/// Where a path argument leads.
pub enum Loc {
    /// To the kernel, with the caller's arguments unchanged.
    Real,
    /// To the kernel, with this absolute path instead (relative to a store directory but
    /// leaving the mount through `..`).
    RealAbs(CString),
    /// To the store: mount index and store path.
    Store(usize, String),
}

fn classify_full(full: String) -> Loc {
    match paths::match_mount(mounts(), &full) {
        Some((m, p)) => Loc::Store(m, p),
        None => CString::new(full).map(Loc::RealAbs).unwrap_or(Loc::Real),
    }
}

/// Classify `path` relative to `dirfd` (AT_FDCWD or a descriptor).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub unsafe fn classify(dirfd: i32, path: *const libc::c_char) -> R<Loc> {
    if path.is_null() {
        return Ok(Loc::Real);
    }
    // SAFETY: caller guarantees a C string.
    let b = unsafe { CStr::from_ptr(path) }.to_bytes();
    if b.is_empty() {
        return Ok(Loc::Real);
    }
    let ms = mounts();
    if b[0] == b'/' {
        if !paths::needs_normalize(b) {
            if !paths::quick_prefix(ms, b) {
                return Ok(Loc::Real);
            }
            let s = std::str::from_utf8(b).map_err(|_| libc::EILSEQ)?;
            return Ok(match paths::match_mount(ms, s) {
                Some((m, p)) => Loc::Store(m, p),
                None => Loc::Real,
            });
        }
        let Ok(s) = std::str::from_utf8(b) else { return Ok(Loc::Real) };
        let n = paths::normalize(s);
        return Ok(match paths::match_mount(ms, &n) {
            Some((m, p)) => Loc::Store(m, p),
            // `/ckpt/..`: the kernel cannot walk through the mount, which does not exist.
            None if paths::quick_prefix(ms, b) => CString::new(n).map(Loc::RealAbs).unwrap_or(Loc::Real),
            None => Loc::Real,
        });
    }
    let Ok(s) = std::str::from_utf8(b) else { return Ok(Loc::Real) };
    if dirfd == libc::AT_FDCWD {
        if let Some(v) = vcwd() {
            return Ok(classify_full(paths::join(&v, s)));
        }
        let cwd = real_cwd()?;
        return Ok(match paths::match_mount(ms, &paths::join(&cwd, s)) {
            Some((m, p)) => Loc::Store(m, p),
            None => Loc::Real,
        });
    }
    if let Some(d) = desc_of(dirfd) {
        if !d.is_dir {
            return Err(libc::ENOTDIR);
        }
        return Ok(classify_full(paths::join(&d.full_path(), s)));
    }
    Ok(Loc::Real)
}

// ------------------------------------------------------------------ fork and exit

static STDIO_LOCKS: [&RwSpin; 2] = [&crate::stdio::LOCK, &crate::dir::LOCK];

extern "C" fn before_fork() {
    for l in STDIO_LOCKS {
        l.write();
    }
    TABLE.lock.write();
}

extern "C" fn after_fork_parent() {
    TABLE.lock.write_unlock();
    for l in STDIO_LOCKS.iter().rev() {
        l.write_unlock();
    }
}

extern "C" fn after_fork_child() {
    TABLE.lock.reset();
    for l in STDIO_LOCKS {
        l.reset();
    }
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
    // SAFETY: only this thread exists in the child and the lock is free.
    let m = unsafe { &*TABLE.map.get() };
    let mut seen: Vec<*const Desc> = Vec::new();
    for d in m.values() {
        let p = Arc::as_ptr(d);
        if !seen.contains(&p) {
            seen.push(p);
            d.slot.refs.fetch_add(1, Ordering::AcqRel);
        }
    }
}

extern "C" fn at_exit() {
    let _ = sys::guarded(|| {
        close_all();
        Ok(())
    });
}

fn register_handlers() {
    // SAFETY: registering plain extern "C" handlers.
    unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child));
        libc::atexit(at_exit);
    }
}

/// Before exec or _exit: release every store file (they do not survive exec).
pub fn before_exec_or_exit() {
    if STORE.get().is_some() {
        at_exit();
    }
}

/// umask of the process (two raw syscalls; no hooks involved).
pub fn umask() -> u32 {
    // SAFETY: umask has no memory arguments.
    unsafe {
        let m = libc::syscall(libc::SYS_umask, 0o022);
        libc::syscall(libc::SYS_umask, m);
        m as u32
    }
}

