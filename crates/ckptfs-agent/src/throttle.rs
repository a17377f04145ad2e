//! A bandwidth cap shared by all IO threads: each write reserves its bytes on a
//! timeline that advances at the configured rate and sleeps until its slot.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes-per-second limiter.
pub(crate) struct Throttle {
    rate: f64,
    next: Mutex<Option<Instant>>,
}

impl Throttle {
    pub(crate) fn new(bytes_per_s: f64) -> Throttle {
        Throttle {
            rate: bytes_per_s,
            next: Mutex::new(None),
        }
    }

    /// Wait until `n` more bytes fit under the cap.
    pub(crate) fn acquire(&self, n: usize) {
        let start = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            // An idle period does not bank credit beyond one write.
            let start = next.filter(|t| *t > now).unwrap_or(now);
            *next = Some(start + Duration::from_secs_f64(n as f64 / self.rate));
            start
        };
        let now = Instant::now();
        if start > now {
            std::thread::sleep(start - now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_spaces_writes() {
        let t = Throttle::new(10e6);
        let t0 = Instant::now();
        for _ in 0..4 {
            t.acquire(1_000_000);
        }
        // The 4th write may start only after 3 MB at 10 MB/s.
        assert!(t0.elapsed() >= Duration::from_millis(290));
    }
}
