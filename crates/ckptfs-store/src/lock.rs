//! Process-shared robust mutexes living inside the segment.
//!
//! A holder may be SIGKILLed at any instruction. glibc's robust futex list makes the
//! kernel hand the lock to the next waiter with `EOWNERDEAD`; we then mark the mutex
//! consistent *first* (so that dying again during the repair re-triggers `EOWNERDEAD`
//! instead of leaving an unrecoverable lock) and tell the caller to repair the structure
//! the lock protects. Nobody ever waits on a dead holder.
//!
//! The kernel only hands over a lock whose holder died *as a registered robust owner*.
//! A lock word damaged into "held by thread T" where T does not exist (a stray write, a
//! bad DIMM) would block every locker forever, fsck included. So a locker waits in
//! slices of [`SLICE`]; after each it reads the owner thread id from the lock word and,
//! if that thread does not exist (or is a thread of a process that does not even map the
//! segment, so cannot hold a lock inside it), does what the kernel does for a dead robust owner:
//! it replaces the word (by compare-and-swap, so only one waiter does it) with
//! `FUTEX_OWNER_DIED`, and the next lock attempt returns `EOWNERDEAD`, whose repair runs
//! as usual. A live holder is waited for, with a warning naming it every minute.
//! Assumption: every process using a store is in the same PID namespace (as for leases).
//!
//! Damage to the mutex's other fields: glibc returns EINVAL for most (the mutex is then
//! re-created); a damaged type field (`__kind`) is checked before every lock, since
//! glibc's priority-protocol paths abort the process on an impossible one.

use std::cell::UnsafeCell;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Does thread `tid`'s process map the segment file with inode number `segment`? (By
/// inode, not path: the creator maps the segment under its temporary name.) Unknown (no
/// inode, unreadable maps) counts as yes: only a positive "it does not" lets a waiter
/// break a lock.
fn maps_segment(tid: u32, segment: Option<u64>) -> bool {
    let Some(ino) = segment.filter(|&i| i != 0) else {
        return true;
    };
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{tid}/maps")) else {
        return true;
    };
    // addr perms offset dev inode [path]
    maps.lines().any(|l| {
        l.split_ascii_whitespace()
            .nth(4)
            .and_then(|f| f.parse::<u64>().ok())
            == Some(ino)
    })
}

/// How long one wait for a lock lasts before its holder is checked.
pub const SLICE: Duration = Duration::from_millis(500);
const FUTEX_WAITERS: u32 = 0x8000_0000;
const FUTEX_OWNER_DIED: u32 = 0x4000_0000;
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
/// Byte offset of `__kind` in glibc's 64-bit `pthread_mutex_t`.
const KIND_OFFSET: usize = 16;
/// glibc's `PTHREAD_MUTEX_ELISION_NP | PTHREAD_MUTEX_NO_ELISION_NP` kind bits.
const KIND_ELISION_BITS: u32 = 0x300;

/// A `pthread_mutex_t` configured robust and process-shared, padded to 64 bytes.
#[repr(C, align(64))]
pub struct RobustMutex {
    raw: UnsafeCell<libc::pthread_mutex_t>,
}

// SAFETY: pthread mutexes configured PTHREAD_PROCESS_SHARED are designed to be used
// concurrently from many threads and processes through shared memory.
unsafe impl Sync for RobustMutex {}
// SAFETY: see above; the mutex has no thread affinity except while locked, and a guard
// is never sent to another thread (MutexGuard is !Send).
unsafe impl Send for RobustMutex {}

const _: () = assert!(std::mem::size_of::<RobustMutex>() == 64);

/// How a lock was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The previous holder unlocked normally.
    Clean,
    /// The previous holder died while holding it: the protected data must be repaired.
    OwnerDied,
}

/// Holds the mutex until dropped.
pub struct Guard<'a> {
    m: &'a RobustMutex,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl RobustMutex {
    /// Initialise a mutex in place inside freshly created (zeroed) shared memory.
    ///
    /// # Safety
    /// `this` must point to writable memory of at least 64 bytes that no other thread or
    /// process is using yet.
    pub unsafe fn init_in_place(this: *mut RobustMutex) {
        // SAFETY: the caller guarantees exclusive access; the attr object is local and
        // initialised before use and destroyed after.
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            libc::pthread_mutexattr_init(&mut attr);
            libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
            libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
            libc::pthread_mutex_init((*this).raw.get(), &attr);
            libc::pthread_mutexattr_destroy(&mut attr);
        }
    }

    /// glibc's `__kind` field (type, robust and process-shared bits, priority protocol
    /// and ceiling), without the lock-elision bits, which glibc may set differently in
    /// another process.
    fn kind(&self) -> u32 {
        // SAFETY: glibc's 64-bit `pthread_mutex_t` holds `int __kind` at byte 16 (after
        // `__lock`, `__count`, `__owner`, `__nusers`), aligned; the memory lives as long
        // as self. It is only read here (glibc writes it at init only).
        let k = unsafe { &*((self.raw.get() as *const u8).add(KIND_OFFSET) as *const AtomicU32) };
        k.load(Ordering::Relaxed) & !KIND_ELISION_BITS
    }

    /// [`RobustMutex::kind`] of a mutex set up as every segment mutex is.
    fn expected_kind() -> u32 {
        static KIND: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        *KIND.get_or_init(|| {
            let mut m = std::mem::MaybeUninit::<RobustMutex>::zeroed();
            // SAFETY: a local, zeroed, 64-byte-aligned mutex that nothing else uses.
            unsafe { Self::init_in_place(m.as_mut_ptr()) };
            // SAFETY: initialised just above.
            unsafe { m.assume_init_ref() }.kind()
        })
    }

    /// The futex word (first field of glibc's `pthread_mutex_t`): owner tid and flags.
    fn word(&self) -> &AtomicU32 {
        // SAFETY: glibc's pthread_mutex_t starts with the 32-bit futex word `__lock`,
        // which the kernel and glibc access atomically; the memory lives as long as self.
        unsafe { &*(self.raw.get() as *const AtomicU32) }
    }

    /// After a timed-out wait: if the lock word names an owner thread that does not
    /// exist, or whose process does not map `segment`, mark the owner dead as the kernel
    /// would. Returns the live owner otherwise.
    fn recover_if_owner_gone(&self, what: &str, segment: Option<u64>) -> Option<u32> {
        let w = self.word();
        let v = w.load(Ordering::Acquire);
        let tid = v & FUTEX_TID_MASK;
        if v == 0 || v & FUTEX_OWNER_DIED != 0 && tid == 0 {
            return None; // free or already marked: the next attempt takes it
        }
        if tid != 0 && Path::new(&format!("/proc/{tid}")).exists() && maps_segment(tid, segment) {
            return Some(tid);
        }
        let new = (v & FUTEX_WAITERS) | FUTEX_OWNER_DIED;
        if w.compare_exchange(v, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::warn!(
                lock = what,
                word = format!("{v:#010x}"),
                "lock held by thread {tid}, which does not exist (damaged or stale lock word): recovering it"
            );
            futex_wake(w);
        }
        None
    }

    /// Lock, reporting whether the previous holder died.
    pub fn lock(&self) -> (Guard<'_>, Acquired) {
        self.lock_named("store", None)
    }

    /// [`RobustMutex::lock`] with a name for messages and the path of the segment the
    /// mutex lives in (a holder must map it).
    pub fn lock_named(&self, what: &str, segment: Option<u64>) -> (Guard<'_>, Acquired) {
        let started = Instant::now();
        let mut warned = Duration::ZERO;
        loop {
            if self.kind() != Self::expected_kind() {
                // A damaged `__kind` can send glibc down its priority-protocol paths,
                // which assert (abort the process) on impossible ceilings instead of
                // returning an error: re-create the mutex before glibc reads it. A mutex
                // whose type is damaged cannot be held in a meaningful way by anyone;
                // the caller repairs what it protects, as after a dead holder.
                tracing::warn!(
                    lock = what,
                    kind = format!("{:#x}", self.kind()),
                    "shared mutex is damaged (its type field); reinitialising it"
                );
                // SAFETY: as for the EINVAL case below.
                unsafe { Self::init_in_place(self as *const Self as *mut Self) };
                let (g, _) = self.lock_named(what, segment);
                return (g, Acquired::OwnerDied);
            }
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes into our local timespec.
            unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
            let ns = ts.tv_nsec + SLICE.as_nanos() as libc::c_long;
            ts.tv_sec += (ns / 1_000_000_000) as libc::time_t;
            ts.tv_nsec = (ns % 1_000_000_000) as _;
            // SAFETY: the mutex was initialised by `init_in_place` when the segment was
            // created; the pointer is valid for the life of the mapping.
            let rc = unsafe { libc::pthread_mutex_timedlock(self.raw.get(), &ts) };
            match rc {
                libc::ETIMEDOUT => {
                    if let Some(tid) = self.recover_if_owner_gone(what, segment) {
                        let waited = started.elapsed();
                        if waited >= warned + Duration::from_secs(60) {
                            warned = waited;
                            tracing::warn!(
                                lock = what,
                                "waited {} s for the {what} lock, held by live thread {tid}",
                                waited.as_secs()
                            );
                        }
                    }
                    continue;
                }
                0 => return (self.guard(), Acquired::Clean),
                libc::EOWNERDEAD => {
                    // SAFETY: we hold the mutex (EOWNERDEAD returns with it locked).
                    unsafe { libc::pthread_mutex_consistent(self.raw.get()) };
                    return (self.guard(), Acquired::OwnerDied);
                }
                libc::ENOTRECOVERABLE => {
                    // Only reachable if some process unlocked without marking it
                    // consistent, which this crate never does. Re-create it rather than
                    // failing forever; the caller repairs the protected data.
                    tracing::warn!("shared mutex was unrecoverable; reinitialising it");
                    // SAFETY: an unrecoverable mutex cannot be held by anyone.
                    unsafe { Self::init_in_place(self as *const Self as *mut Self) };
                    let (g, _) = self.lock();
                    return (g, Acquired::OwnerDied);
                }
                libc::EINTR | libc::EAGAIN => continue,
                other => {
                    // EINVAL and the like: the mutex's own fields are damaged. Nobody can
                    // hold a lock that cannot be taken: re-create it; the caller repairs.
                    tracing::warn!(
                        lock = what,
                        errno = other,
                        "shared mutex is damaged; reinitialising it"
                    );
                    // SAFETY: as for ENOTRECOVERABLE above.
                    unsafe { Self::init_in_place(self as *const Self as *mut Self) };
                    let (g, _) = self.lock_named(what, segment);
                    return (g, Acquired::OwnerDied);
                }
            }
        }
    }

    fn guard(&self) -> Guard<'_> {
        Guard {
            m: self,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // SAFETY: a Guard exists only while this thread holds the mutex.
        unsafe { libc::pthread_mutex_unlock(self.m.raw.get()) };
    }
}

/// Wake every process waiting on `word` (a lock word, or one slept on with
/// [`futex_wait`]; a shared futex: the word is in the segment, mapped by several
/// processes).
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 of a live mapping; no memory is written.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0,
            0,
            0,
        )
    };
}

/// Sleep while `word` holds `seen`, at most `timeout` (or until woken, or a signal).
pub(crate) fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the valid, aligned u32 and the timespec we pass (a
    // relative timeout); it writes nothing.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &ts as *const libc::timespec,
            0,
            0,
        )
    };
}
