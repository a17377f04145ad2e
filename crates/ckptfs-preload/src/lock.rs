//! A small reader-writer spin lock whose state is one word, so that the fork handlers can
//! take it in the parent and simply reset it in the child (a pthread lock cannot be
//! unlocked by the child's thread, which has a new tid).

use std::sync::atomic::{AtomicU32, Ordering};

const WRITER: u32 = 1 << 31;
const WAITING: u32 = 1 << 30;

/// Reader-writer lock: readers are store operations, the writer changes the fd table.
pub struct RwSpin {
    s: AtomicU32,
}

fn pause(i: &mut u32) {
    *i += 1;
    if *i < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl Default for RwSpin {
    fn default() -> Self {
        Self::new()
    }
}

impl RwSpin {
    /// An unlocked lock.
    pub const fn new() -> RwSpin {
        RwSpin { s: AtomicU32::new(0) }
    }

    /// Take a shared hold (waits while a writer holds or waits).
    pub fn read(&self) {
        let mut i = 0;
        loop {
            let s = self.s.load(Ordering::Relaxed);
            if s & (WRITER | WAITING) == 0
                && self
                    .s
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            pause(&mut i);
        }
    }

    /// Release a shared hold.
    pub fn read_unlock(&self) {
        self.s.fetch_sub(1, Ordering::Release);
    }

    /// Take the exclusive hold.
    pub fn write(&self) {
        let mut i = 0;
        loop {
            let s = self.s.load(Ordering::Relaxed);
            if s & WRITER == 0 {
                if s & !WAITING == 0 {
                    if self
                        .s
                        .compare_exchange_weak(s, WRITER, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        return;
                    }
                } else if s & WAITING == 0 {
                    self.s.fetch_or(WAITING, Ordering::Relaxed);
                }
            }
            pause(&mut i);
        }
    }

    /// Release the exclusive hold.
    pub fn write_unlock(&self) {
        self.s.store(0, Ordering::Release);
    }

    /// Forget every holder (in a fork child, where only the forking thread survives).
    pub fn reset(&self) {
        self.s.store(0, Ordering::Release);
    }
}
