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
use ckptfs_settings::{Settings, SettingsError};
use ckptfs_store::{FileHandle, Store, StoreOptions};
use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Errno-valued result of shim operations.
pub type R<T> = Result<T, i32>;

/// Map a store error to the errno a local file system would give: a full file table
/// is ENOSPC (as ext4 out of inodes), not the store API's ENFILE, which programs read as
/// "this process has too many files open" and may retry.
pub fn se(e: ckptfs_store::StoreError) -> i32 {
    match e {
        ckptfs_store::StoreError::TooManyFiles(_) => libc::ENOSPC,
        e => e.errno(),
    }
}

// ------------------------------------------------------------------ configuration

/// The settings from the `CKPTFS_*` environment, resolved by `ckptfs-settings` with the
/// rules of the CLI and the C API, once, at the first intercepted call that needs them.
static SETTINGS: OnceLock<Result<Settings, SettingsError>> = OnceLock::new();
/// The mount prefixes: the resolved ones, or (settings invalid) those of `CKPTFS_MOUNT`
/// read leniently, so that calls under them fail with EINVAL instead of reaching the
/// kernel.
static MOUNTS: OnceLock<Vec<String>> = OnceLock::new();

fn settings() -> &'static Result<Settings, SettingsError> {
    SETTINGS.get_or_init(|| ckptfs_settings::from_env(&|k| std::env::var(k).ok()))
}

/// The mount prefixes (`CKPTFS_MOUNT`, default `/ckpt`).
#[inline]
pub fn mounts() -> &'static [String] {
    MOUNTS.get_or_init(|| match settings() {
        Ok(s) => s.mounts.clone(),
        Err(_) => paths::parse_mounts(std::env::var("CKPTFS_MOUNT").ok().as_deref()),
    })
}

/// Store options from the same environment variables the CLI uses; EINVAL (after a
/// one-line message on stderr naming the variable, printed by [`store`]) when one is
/// invalid.
pub fn options_from_env() -> Result<StoreOptions, &'static SettingsError> {
    settings().as_ref().map(|s| StoreOptions::from(s.store.clone()))
}

static STORE: OnceLock<R<Store>> = OnceLock::new();

/// The store, attached (or created) on first use. Call inside [`sys::guarded`]. With an
/// invalid `CKPTFS_*` variable every call is EINVAL; the first prints why.
pub fn store() -> R<&'static Store> {
    let r = STORE.get_or_init(|| {
        let opts = match options_from_env() {
            Ok(o) => o,
            Err(e) => {
                eprintln!(
                    "ckptfs-preload: {e}; calls under {} fail with EINVAL",
                    mounts().join(":")
                );
                return Err(e.errno().get());
            }
        };
        slots();
        register_handlers();
        Store::open_or_create(&opts).map_err(|e| {
            eprintln!("ckptfs-preload: cannot attach the store: {e}");
            se(e)
        })
    });
    r.as_ref().map_err(|e| *e)
}

/// Diagnostic hook: the settings this shim resolved from the environment, as the JSON
/// object that `ckptfs config --json` shows as `resolved` (or `{"error":"..."}`), copied
/// with a NUL into `buf` when it fits. Returns the text's length, -EINVAL when the
/// settings are invalid, -ERANGE when `len` is too small. Programs find it with
/// `dlsym(RTLD_DEFAULT, "ckptfs_preload_settings")`; it attaches nothing.
///
/// # Safety
/// `buf` is NULL or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ckptfs_preload_settings(buf: *mut libc::c_char, len: usize) -> isize {
    let r = sys::guarded(|| {
        let (text, err) = match settings() {
            Ok(s) => (s.to_json(), 0),
            Err(e) => (
                format!("{{\"error\":{}}}", ckptfs_settings::json_str(&e.to_string())),
                e.errno().get(),
            ),
        };
        if text.len() >= len || buf.is_null() {
            return Err(libc::ERANGE);
        }
        // SAFETY: text.len() + 1 <= len bytes are writable per the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
            buf.add(text.len()).write(0);
        }
        if err != 0 {
            return Err(err);
        }
        Ok(text.len() as isize)
    });
    r.unwrap_or_else(|e| -(e as isize))
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
    /// The memfd behind the region (passed on across exec), or -1.
    fd: AtomicI32,
    hint: AtomicUsize,
}
// SAFETY: the region is only accessed through atomics.
unsafe impl Send for Slots {}
// SAFETY: as above.
unsafe impl Sync for Slots {}

static SLOTS: OnceLock<Slots> = OnceLock::new();
const SLOTS_LEN: usize = NSLOTS * std::mem::size_of::<Slot>();

fn map_slots(fd: i32) -> *const Slot {
    // SAFETY: mapping a memfd of SLOTS_LEN bytes; zeroed memory is an array of free slots.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SLOTS_LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null()
    } else {
        p as *const Slot
    }
}

/// The shared-description region: a memfd mapped MAP_SHARED, so fork shares it and exec
/// can pass it on (its descriptor is close-on-exec except across an exec that inherits
/// store descriptors).
fn slots() -> &'static Slots {
    SLOTS.get_or_init(|| {
        // SAFETY: raw memfd_create/ftruncate with a static name.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_memfd_create,
                c"ckptfs-slots".as_ptr(),
                libc::MFD_CLOEXEC,
            )
        } as i32;
        let fd = move_high(fd);
        // SAFETY: as above.
        let ok = fd >= 0 && unsafe { libc::syscall(libc::SYS_ftruncate, fd, SLOTS_LEN) } == 0;
        Slots {
            base: if ok { map_slots(fd) } else { std::ptr::null() },
            fd: AtomicI32::new(fd),
            hint: AtomicUsize::new(0),
        }
    })
}

/// Move a descriptor of the shim's to a high number, out of the way of programs that
/// pick their own numbers (shells use 3-9 for redirections and dup2 onto them).
pub(crate) fn move_high(fd: i32) -> i32 {
    if fd < 0 {
        return fd;
    }
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: raw getrlimit into a local struct.
    unsafe { libc::syscall(libc::SYS_getrlimit, libc::RLIMIT_NOFILE, &mut rl) };
    let start = (rl.rlim_cur.min(1 << 20) as i64 - 64).max(100);
    // SAFETY: raw fcntl/close on descriptor numbers.
    let n = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, start) } as i32;
    if n < 0 {
        return fd;
    }
    raw_close(fd);
    n
}

/// The program is about to dup2 onto `fd`: if that is the shim's memfd, move it first.
pub fn protect_fd(fd: i32) {
    if let Some(s) = SLOTS.get() {
        let cur = s.fd.load(Ordering::Relaxed);
        if cur == fd && cur >= 0 {
            // SAFETY: raw fcntl on our own descriptor.
            let n = unsafe { libc::syscall(libc::SYS_fcntl, cur, libc::F_DUPFD_CLOEXEC, 100) } as i32;
            if n >= 0 {
                s.fd.store(n, Ordering::Relaxed);
            }
        }
    }
}

/// The memfd of the slot region (close_range must not close it behind our back).
pub fn slots_fd() -> i32 {
    SLOTS.get().map_or(-1, |s| s.fd.load(Ordering::Relaxed))
}

fn slot_at(i: usize) -> Option<&'static Slot> {
    let s = slots();
    // SAFETY: i < NSLOTS, inside the mapping, which lives for the whole process.
    (i < NSLOTS && !s.base.is_null()).then(|| unsafe { &*s.base.add(i) })
}

fn slot_index(slot: &Slot) -> usize {
    (slot as *const Slot as usize - slots().base as usize) / std::mem::size_of::<Slot>()
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
        if slot
            .refs
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
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
            match self
                .lock
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return SlotGuard(self),
                Err(owner) => {
                    i += 1;
                    if i.is_multiple_of(1024) && owner != 0 && owner != me {
                        // SAFETY: kill with signal 0 only checks existence.
                        let dead = unsafe { libc::kill(owner as i32, 0) } != 0 && sys::errno() == libc::ESRCH;
                        if dead {
                            let _ = self
                                .lock
                                .compare_exchange(owner, 0, Ordering::AcqRel, Ordering::Relaxed);
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
    /// Its slot reference passes to the next program image (exec): do not drop it.
    keep_slot: AtomicBool,
    /// OFD and flock locks (a stand-in kernel description, see `locks`).
    pub locks: crate::locks::DescLocks,
}

impl Desc {
    /// A new description for `h`.
    pub fn new(h: FileHandle, mount: usize, path: String, acc: i32, flags: u32) -> R<Desc> {
        Ok(Self::with_slot(h, mount, path, acc, alloc_slot(flags)?))
    }

    fn with_slot(h: FileHandle, mount: usize, path: String, acc: i32, slot: &'static Slot) -> Desc {
        Desc {
            slot,
            is_dir: h.is_dir(),
            handle: Mutex::new(Some(h)),
            mount,
            path,
            acc,
            gen: AtomicU64::new(FORK_GEN.load(Ordering::Relaxed)),
            keep_slot: AtomicBool::new(false),
            locks: Default::default(),
        }
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
        if !self.keep_slot.load(Ordering::Relaxed) {
            self.slot.refs.fetch_sub(1, Ordering::AcqRel);
        }
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
    let keys: Vec<i32> = m
        .range(lo.min(i32::MAX as u32) as i32..)
        .map(|(k, _)| *k)
        .filter(|k| *k as u32 <= hi)
        .collect();
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
    // Closing any descriptor of a file drops the process's POSIX locks on it.
    crate::locks::on_close(&d);
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
    // Shared writable mappings: bring the checksums of what they wrote up to date.
    crate::shmap::flush_all();
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

/// Set or clear the virtual working directory (and its `CKPTFS_CWD` environment entry).
pub fn set_vcwd(p: Option<String>) {
    let mut g = VCWD.lock().unwrap_or_else(|e| e.into_inner());
    let was = VCWD_SET.swap(p.is_some(), Ordering::AcqRel);
    if was || p.is_some() {
        // Children (exec, posix_spawn, system, popen) inherit it through the environment.
        crate::cwd::publish(p.as_deref());
    }
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
        let Ok(s) = std::str::from_utf8(b) else {
            return Ok(Loc::Real);
        };
        let n = paths::normalize(s);
        return Ok(match paths::match_mount(ms, &n) {
            Some((m, p)) => Loc::Store(m, p),
            // `/ckpt/..`: the kernel cannot walk through the mount, which does not exist.
            None if paths::quick_prefix(ms, b) => CString::new(n).map(Loc::RealAbs).unwrap_or(Loc::Real),
            None => Loc::Real,
        });
    }
    let Ok(s) = std::str::from_utf8(b) else {
        return Ok(Loc::Real);
    };
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
    if let Some(base) = crate::dirfds::path_of(dirfd) {
        // A kernel directory above a mount prefix (rsync walks from "/").
        return Ok(classify_full(paths::join(&base, s)));
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
    // SAFETY: getpid has no preconditions.
    OWNER_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
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

/// The process whose memory this is (a vfork child shares it but has another pid).
static OWNER_PID: AtomicI32 = AtomicI32::new(0);

fn register_handlers() {
    // SAFETY: getpid has no preconditions.
    OWNER_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    // SAFETY: registering plain extern "C" handlers.
    unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child));
        libc::atexit(at_exit);
    }
}

/// Before _exit: release every store file.
pub fn before_exit() {
    if STORE.get().is_some() {
        at_exit();
    }
}

// ------------------------------------------------------------------ exec

/// Environment variable describing the store descriptors a new program image inherits:
/// `SLOTSFD;MODE` then one record per descriptor `FD,SLOT,ACC,DIR,MOUNT,PATH`, records
/// separated by 0x1e. MODE `T`: the slot references pass to the new image (exec in the
/// owning process); `A`: the new image adds its own (exec in a vfork child, whose parent
/// keeps its descriptors).
pub const INHERIT_ENV: &str = "CKPTFS_INHERIT";

/// One inherited descriptor.
#[derive(Debug, Clone)]
pub struct Inherit {
    fd: i32,
    slot: usize,
    acc: i32,
    dir: bool,
    mount: usize,
    path: String,
}

fn kernel_cloexec(fd: i32) -> bool {
    // SAFETY: raw fcntl on a descriptor number.
    let f = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFD) };
    f < 0 || f as i32 & libc::FD_CLOEXEC != 0
}

fn set_cloexec(fd: i32, on: bool) {
    // SAFETY: raw fcntl on a descriptor number.
    unsafe {
        libc::syscall(
            libc::SYS_fcntl,
            fd,
            libc::F_SETFD,
            if on { libc::FD_CLOEXEC } else { 0 },
        )
    };
}

/// Before exec: which store descriptors survive it, and the environment entry that
/// tells the new image about them. In the owning process (not a vfork child) every
/// store file is released (leases dropped, streams flushed); the slots of inherited
/// descriptors are kept for the new image. Returns None when nothing is inherited.
pub fn prepare_exec() -> Option<(Vec<Inherit>, CString)> {
    STORE.get()?;
    // SAFETY: getpid has no preconditions.
    let owner = unsafe { libc::getpid() } == OWNER_PID.load(Ordering::Relaxed);
    let mut inh = Vec::new();
    {
        let _h = ReadHold::new();
        // SAFETY: shared hold.
        for (fd, d) in unsafe { &*TABLE.map.get() } {
            if !kernel_cloexec(*fd) {
                inh.push(Inherit {
                    fd: *fd,
                    slot: slot_index(d.slot),
                    acc: d.acc,
                    dir: d.is_dir,
                    mount: d.mount,
                    path: d.path.clone(),
                });
                if owner {
                    d.keep_slot.store(true, Ordering::Relaxed);
                }
            }
        }
    }
    if owner {
        close_all();
    }
    if inh.is_empty() {
        return None;
    }
    let sfd = slots_fd();
    set_cloexec(sfd, false);
    let mut v = format!("{INHERIT_ENV}={sfd};{}", if owner { 'T' } else { 'A' });
    for i in &inh {
        v.push('\x1e');
        v.push_str(&format!(
            "{},{},{},{},{},{}",
            i.fd, i.slot, i.acc, i.dir as u8, i.mount, i.path
        ));
    }
    CString::new(v).ok().map(|c| (inh, c))
}

/// exec failed: take the descriptors back.
pub fn exec_failed(inh: Vec<Inherit>) {
    set_cloexec(slots_fd(), true);
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } == OWNER_PID.load(Ordering::Relaxed) {
        adopt(inh, false);
    }
}

/// Open the store files of inherited descriptors and enter them in the table.
fn adopt(inh: Vec<Inherit>, add_ref: bool) {
    let Ok(store) = store() else { return };
    let mut by_slot: BTreeMap<usize, Arc<Desc>> = BTreeMap::new();
    for i in inh {
        if let Some(d) = by_slot.get(&i.slot) {
            // Another descriptor of the same description (dup): share it.
            install(i.fd, d.clone());
            crate::stdio::install_std(i.fd);
            continue;
        }
        let Some(slot) = slot_at(i.slot) else { continue };
        if add_ref {
            slot.refs.fetch_add(1, Ordering::AcqRel);
        }
        let flags = ckptfs_store::OpenFlags {
            read: i.acc != libc::O_WRONLY,
            write: i.acc != libc::O_RDONLY,
            directory: i.dir,
            ..Default::default()
        };
        match store.open(&i.path, flags, 0) {
            Ok(h) => {
                let d = Arc::new(Desc::with_slot(h, i.mount, i.path, i.acc, slot));
                by_slot.insert(i.slot, d.clone());
                install(i.fd, d);
                crate::stdio::install_std(i.fd);
            }
            Err(e) => {
                eprintln!("ckptfs-preload: inherited descriptor {} ({}): {e}", i.fd, i.path);
                slot.refs.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// At load: adopt the store descriptors inherited across exec, if any.
pub fn adopt_inherited() {
    let Some(v) = std::env::var_os(INHERIT_ENV) else {
        return;
    };
    // SAFETY: removing our own variable while single-threaded (library constructor).
    unsafe { libc::unsetenv(c"CKPTFS_INHERIT".as_ptr()) };
    let v = v.to_string_lossy().to_string();
    let mut recs = v.split('\x1e');
    let head = recs.next().unwrap_or("");
    let (sfd, mode) = head.split_once(';').unwrap_or(("", ""));
    let Ok(sfd) = sfd.parse::<i32>() else { return };
    let base = map_slots(sfd);
    set_cloexec(sfd, true);
    if base.is_null()
        || SLOTS
            .set(Slots {
                base,
                fd: AtomicI32::new(sfd),
                hint: AtomicUsize::new(0),
            })
            .is_err()
    {
        return;
    }
    let inh: Vec<Inherit> = recs
        .filter_map(|r| {
            let mut f = r.splitn(6, ',');
            Some(Inherit {
                fd: f.next()?.parse().ok()?,
                slot: f.next()?.parse().ok()?,
                acc: f.next()?.parse().ok()?,
                dir: f.next()? == "1",
                mount: f.next()?.parse().ok().filter(|m| *m < mounts().len())?,
                path: f.next()?.to_string(),
            })
        })
        .collect();
    adopt(inh, mode == "A");
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
