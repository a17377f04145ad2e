//! Process state of the shim: the attached store, the mount prefixes, the descriptor
//! table and the shared open-file descriptions.
//!
//! This is the lowest layer of the shim above `sys`, `lock`, `paths` and `shimfds`: it
//! calls nothing else. The fork and exit handlers, which must also take the stream and
//! directory locks, live in `lifecycle`, which calls [`fork_prepare`], [`fork_parent`]
//! and [`fork_child`] here; the virtual working directory is in `cwd`, path
//! classification in `resolve`, closing a descriptor (with its POSIX locks) in `ops`.
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

/// Does the environment ask for warming at attach (`CKPTFS_WARM`, not zero)?
pub fn warm_requested() -> bool {
    options_from_env().is_ok_and(|o| o.warm.is_some())
}

static STORE: OnceLock<R<Store>> = OnceLock::new();

/// Run once when the store is first attached, before any store file is opened: the
/// process lifecycle module installs its fork and exit handlers here (see
/// [`set_attach_hook`]), so that this module calls nothing above it.
static ATTACH_HOOK: OnceLock<fn()> = OnceLock::new();

/// Install the function [`store`] runs at the first attach (once; later calls are
/// ignored). The library constructor installs `lifecycle::register_handlers`.
pub fn set_attach_hook(f: fn()) {
    let _ = ATTACH_HOOK.set(f);
}

/// Has the store been attached (or its attach tried) in this process?
pub fn attached() -> bool {
    STORE.get().is_some()
}

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
        if let Some(hook) = ATTACH_HOOK.get() {
            hook();
        }
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

pub(crate) fn map_slots(fd: i32) -> *const Slot {
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
        let fd = sys::move_high(fd);
        // SAFETY: as above.
        let ok = fd >= 0 && unsafe { libc::syscall(libc::SYS_ftruncate, fd, SLOTS_LEN) } == 0;
        Slots {
            base: if ok { map_slots(fd) } else { std::ptr::null() },
            fd: AtomicI32::new(fd),
            hint: AtomicUsize::new(0),
        }
    })
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

/// Adopt the slot region a previous program image passed on (its memfd `fd`), before
/// the region is created. False if it cannot be mapped or a region exists already.
pub(crate) fn adopt_slots(fd: i32) -> bool {
    let base = map_slots(fd);
    !base.is_null()
        && SLOTS
            .set(Slots {
                base,
                fd: AtomicI32::new(fd),
                hint: AtomicUsize::new(0),
            })
            .is_ok()
}

/// The memfd of the slot region (close_range must not close it behind our back).
pub fn slots_fd() -> i32 {
    SLOTS.get().map_or(-1, |s| s.fd.load(Ordering::Relaxed))
}

pub(crate) fn slot_at(i: usize) -> Option<&'static Slot> {
    let s = slots();
    // SAFETY: i < NSLOTS, inside the mapping, which lives for the whole process.
    (i < NSLOTS && !s.base.is_null()).then(|| unsafe { &*s.base.add(i) })
}

pub(crate) fn slot_index(slot: &Slot) -> usize {
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
    pub(crate) keep_slot: AtomicBool,
    /// OFD and flock locks (a stand-in kernel description, see `locks`).
    pub locks: crate::shimfds::DescLocks,
}

impl Desc {
    /// A new description for `h`.
    pub fn new(h: FileHandle, mount: usize, path: String, acc: i32, flags: u32) -> R<Desc> {
        Ok(Self::with_slot(h, mount, path, acc, alloc_slot(flags)?))
    }

    pub(crate) fn with_slot(
        h: FileHandle,
        mount: usize,
        path: String,
        acc: i32,
        slot: &'static Slot,
    ) -> Desc {
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
/// last reference, close the store handle and report its error. (Closing a descriptor
/// also drops the process's POSIX locks on the file: `ops::release` does both.)
pub fn finish(d: Arc<Desc>) -> R<()> {
    match Arc::try_unwrap(d) {
        Ok(d) => d.finish(),
        Err(_) => Ok(()),
    }
}

/// Empty the table (process exit, exec): every description, for the caller to release.
pub fn take_all() -> BTreeMap<i32, Arc<Desc>> {
    let w = WriteHold::new();
    let m = std::mem::take(w.map());
    for k in m.keys() {
        set_bit(*k, false);
    }
    m
}

/// Run `f` on every (descriptor, description) of the table, under a shared hold.
pub fn for_each(mut f: impl FnMut(i32, &Arc<Desc>)) {
    let _h = ReadHold::new();
    // SAFETY: shared hold of the table lock.
    for (fd, d) in unsafe { &*TABLE.map.get() } {
        f(*fd, d);
    }
}

// ------------------------------------------------------------------ fork

/// Before fork: hold the table exclusively so the child gets it in a consistent state.
/// (`lifecycle` takes the stream and directory locks first.)
pub fn fork_prepare() {
    TABLE.lock.write();
}

/// After fork, in the parent: let go of the table.
pub fn fork_parent() {
    TABLE.lock.write_unlock();
}

/// After fork, in the child: reset the table lock (only the forking thread survives),
/// start a new fork generation (descriptions adopt the parent's leases on first use) and
/// count the child's references to the shared descriptions.
pub fn fork_child() {
    TABLE.lock.reset();
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

/// umask of the process (two raw syscalls; no hooks involved).
pub fn umask() -> u32 {
    // SAFETY: umask has no memory arguments.
    unsafe {
        let m = libc::syscall(libc::SYS_umask, 0o022);
        libc::syscall(libc::SYS_umask, m);
        m as u32
    }
}
