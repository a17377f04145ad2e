//! Process-shared robust mutexes living inside the segment.
//!
//! A holder may be SIGKILLed at any instruction. glibc's robust futex list makes the
//! kernel hand the lock to the next waiter with `EOWNERDEAD`; we then mark the mutex
//! consistent *first* (so that dying again during the repair re-triggers `EOWNERDEAD`
//! instead of leaving an unrecoverable lock) and tell the caller to repair the structure
//! the lock protects. Nobody ever waits on a dead holder.

use std::cell::UnsafeCell;

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

    /// Lock, reporting whether the previous holder died.
    pub fn lock(&self) -> (Guard<'_>, Acquired) {
        loop {
            // SAFETY: the mutex was initialised by `init_in_place` when the segment was
            // created; the pointer is valid for the life of the mapping.
            let rc = unsafe { libc::pthread_mutex_lock(self.raw.get()) };
            match rc {
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
                other => panic!("pthread_mutex_lock failed with errno {other}"),
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
