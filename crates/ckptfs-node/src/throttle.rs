//! The pacing of partner copies: a bandwidth cap, and stepping back while the
//! application writes into the store.
//!
//! [`CopyPace`] is the partner copies' limiter: the replicator hands it to the mover
//! ([`ckptfs_level::MoveOptions::limiter`]), which asks it before every chunk.
//! [`Throttle`] is the bandwidth cap of the erasure ring's async senders.

use ckptfs_level::{Pace, RateLimit};
use ckptfs_store::Store;
use std::sync::Mutex;
use std::time::{Duration, Instant};
// The throttle keeps tokio's clock (the same as std's, except in tests with paused time).
use tokio::time::Instant as TInstant;

/// A bandwidth cap for async senders: sleeps so that the bytes sent since the start stay
/// under the rate.
pub(crate) struct Throttle {
    rate: Option<f64>,
    start: TInstant,
    bytes: u64,
}

impl Throttle {
    pub(crate) fn new(rate: Option<f64>) -> Throttle {
        Throttle {
            rate,
            start: TInstant::now(),
            bytes: 0,
        }
    }

    pub(crate) async fn sent(&mut self, n: usize) {
        let Some(rate) = self.rate else { return };
        self.bytes += n as u64;
        let due = Duration::from_secs_f64(self.bytes as f64 / rate);
        let el = self.start.elapsed();
        if due > el {
            tokio::time::sleep(due - el).await;
        }
        // Forget old history so an idle period does not allow a burst.
        if el > Duration::from_secs(2) && due + Duration::from_millis(100) < el {
            self.start = TInstant::now();
            self.bytes = 0;
        }
    }
}

/// How long the write count must stay still before a copy goes on.
pub(crate) const STILL: Duration = Duration::from_millis(2);

/// The time a [`CopyPace`] keeps and sleeps on (a virtual one in the tests).
pub(crate) trait Clock: Send + Sync {
    fn now(&self) -> Instant;
    fn sleep(&self, d: Duration);
}

/// The real clock.
pub(crate) struct Real;

impl Clock for Real {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}

struct Yielding {
    /// The store's write count last seen.
    seen: u64,
    /// Time waited in the current copy, and its start.
    waited: Duration,
    copy_start: Instant,
}

/// The partner copies' pacing, as the mover's rate limit: before every chunk, a copy
/// steps back while an application writes into the store (the store's write count
/// moves): it waits until the count has been still for [`STILL`], at most `yield_max`
/// at a stretch, and after that only while its time spent waiting stays below its time
/// spent sending plus `yield_max`, so a writer that never stops still leaves a copy at
/// least half the time. The count last seen is kept from one copy to the next: a copy
/// that starts while the application writes its next checkpoint waits from its first
/// chunk. `yield_max` zero: never. Then the bandwidth cap ([`Pace`]), if any.
pub(crate) struct CopyPace {
    store: Store,
    yield_max: Duration,
    rate: Option<Pace>,
    state: Mutex<Yielding>,
    /// Told of every wait (the daemon's `yielded` counter).
    on_wait: Box<dyn Fn(Duration) + Send + Sync>,
    clock: Box<dyn Clock>,
}

impl CopyPace {
    pub(crate) fn new(
        rate: Option<f64>,
        store: &Store,
        yield_max: Duration,
        on_wait: Box<dyn Fn(Duration) + Send + Sync>,
    ) -> CopyPace {
        CopyPace::with_clock(rate, store, yield_max, on_wait, Box::new(Real))
    }

    pub(crate) fn with_clock(
        rate: Option<f64>,
        store: &Store,
        yield_max: Duration,
        on_wait: Box<dyn Fn(Duration) + Send + Sync>,
        clock: Box<dyn Clock>,
    ) -> CopyPace {
        let now = clock.now();
        CopyPace {
            store: store.clone(),
            yield_max,
            rate: rate.map(Pace::new),
            state: Mutex::new(Yielding {
                seen: store.write_count(),
                waited: Duration::ZERO,
                copy_start: now,
            }),
            on_wait,
            clock,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Yielding> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The daemon wrote into the store itself: take the count as seen.
    pub(crate) fn absorb(&self) {
        self.state().seen = self.store.write_count();
    }

    /// A copy starts (the bound on waiting is per copy).
    pub(crate) fn copy_starts(&self) {
        let now = self.clock.now();
        let mut s = self.state();
        s.waited = Duration::ZERO;
        s.copy_start = now;
    }

    /// Wait while an application writes into the store; returns the time waited.
    pub(crate) fn step_back(&self) -> Duration {
        if self.yield_max.is_zero() {
            return Duration::ZERO;
        }
        let mut s = self.state();
        let t0 = self.clock.now();
        let since = |c: &dyn Clock| c.now().duration_since(t0);
        let mut slept = false;
        let mut now = self.store.write_count();
        while now != s.seen {
            s.seen = now;
            let waited = s.waited + since(&*self.clock);
            let sending = self
                .clock
                .now()
                .duration_since(s.copy_start)
                .saturating_sub(waited);
            if since(&*self.clock) >= self.yield_max || waited >= sending + self.yield_max {
                break;
            }
            self.clock.sleep(STILL);
            slept = true;
            now = self.store.write_count();
        }
        if !slept {
            return Duration::ZERO;
        }
        let w = since(&*self.clock);
        s.waited += w;
        drop(s);
        (self.on_wait)(w);
        w
    }
}

impl RateLimit for CopyPace {
    fn acquire(&self, n: u64) {
        self.step_back();
        if let Some(p) = &self.rate {
            p.acquire(n);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The copies' stepping back, on a virtual clock: the "application" below writes once
    //! per virtual millisecond as the clock advances, so the waits are exact whatever the
    //! load.
    use super::{Clock, CopyPace, STILL};
    use ckptfs_store::{FileHandle, OpenFlags, Store, StoreOptions};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    fn store(tag: &str) -> (Store, String) {
        let name = format!("hnd-yield-{tag}-{}", std::process::id());
        let _ = Store::destroy(&name);
        let s = Store::create(&StoreOptions {
            name: name.clone(),
            mem_size: Some(2 << 20),
            chunk_size: Some(64 << 10),
            max_files: Some(16),
            ..Default::default()
        })
        .unwrap();
        (s, name)
    }

    const MS: Duration = Duration::from_millis(1);

    /// An application writing 4 KiB into `/w` once per millisecond, `left` more times.
    struct App {
        f: FileHandle,
        next: Duration,
        left: u64,
        i: u64,
    }

    /// Virtual time; the application's writes happen as it passes.
    struct Virtual {
        base: Instant,
        t: Mutex<Duration>,
        app: Mutex<Option<App>>,
    }

    impl Virtual {
        fn new() -> Arc<Virtual> {
            Arc::new(Virtual {
                base: Instant::now(),
                t: Mutex::new(Duration::ZERO),
                app: Mutex::new(None),
            })
        }

        /// The application starts now: its first write at once, `n` in all.
        fn start_app(&self, s: &Store, n: u64) {
            let f = s.open("/w", OpenFlags::CREATE, 0o600).unwrap();
            *self.app.lock().unwrap() = Some(App {
                f,
                next: *self.t.lock().unwrap(),
                left: n,
                i: 0,
            });
            self.run_app();
        }

        fn run_app(&self) {
            let t = *self.t.lock().unwrap();
            let mut g = self.app.lock().unwrap();
            if let Some(a) = g.as_mut() {
                while a.left > 0 && a.next <= t {
                    a.f.pwrite(&[1u8; 4096], (a.i % 16) * 4096).unwrap();
                    a.i += 1;
                    a.left -= 1;
                    a.next += MS;
                }
            }
        }

        fn advance(&self, d: Duration) {
            *self.t.lock().unwrap() += d;
            self.run_app();
        }
    }

    struct V(Arc<Virtual>);

    impl Clock for V {
        fn now(&self) -> Instant {
            self.0.base + *self.0.t.lock().unwrap()
        }
        fn sleep(&self, d: Duration) {
            self.0.advance(d)
        }
    }

    fn pace(s: &Store, v: &Arc<Virtual>, yield_max: Duration) -> CopyPace {
        CopyPace::with_clock(None, s, yield_max, Box::new(|_| {}), Box::new(V(v.clone())))
    }

    #[test]
    fn a_copy_waits_until_the_writes_have_stopped_for_two_ms() {
        let (s, name) = store("stop");
        let v = Virtual::new();
        let t = pace(&s, &v, Duration::from_secs(1));
        t.copy_starts();
        assert_eq!(t.step_back(), Duration::ZERO, "nothing written: no wait");
        // 50 writes, 1 ms apart (the last at 49 ms).
        v.start_app(&s, 50);
        let waited = t.step_back();
        assert!(waited >= 49 * MS && waited <= 49 * MS + 2 * STILL, "{waited:?}");
        // The writes stopped: the next chunk goes at once.
        assert_eq!(t.step_back(), Duration::ZERO);
        drop((t, v));
        drop(s);
        let _ = Store::destroy(&name);
    }

    #[test]
    fn a_writer_that_never_stops_holds_a_copy_back_at_most_half_the_time() {
        let (s, name) = store("never");
        let v = Virtual::new();
        let max = 20 * MS;
        let t = pace(&s, &v, max);
        v.start_app(&s, u64::MAX);
        t.copy_starts();
        let first = t.step_back();
        assert!(first >= max && first <= max + STILL, "{first:?}");
        // Sending a chunk takes 5 ms here; waits after the first stretch alternate with it.
        let (mut waited, mut sending) = (first, Duration::ZERO);
        for _ in 0..40 {
            v.advance(5 * MS);
            sending += 5 * MS;
            let w = t.step_back();
            assert!(w <= max + STILL, "{w:?}");
            waited += w;
        }
        assert!(
            waited <= sending + max + 2 * STILL,
            "waited {waited:?}, sent {sending:?}"
        );
        assert!(
            waited >= sending / 2,
            "it did step back: {waited:?} against {sending:?}"
        );
        drop((t, v));
        drop(s);
        let _ = Store::destroy(&name);
    }

    #[test]
    fn zero_never_waits_and_the_daemons_own_writes_are_absorbed() {
        let (s, name) = store("zero");
        let v = Virtual::new();
        let off = pace(&s, &v, Duration::ZERO);
        let on = pace(&s, &v, Duration::from_secs(1));
        on.copy_starts();
        // The daemon's own write (its levels record), absorbed: no wait.
        let mut f = s.open("/own", OpenFlags::CREATE, 0o600).unwrap();
        f.write_all(b"record").unwrap();
        f.close().unwrap();
        on.absorb();
        assert_eq!(on.step_back(), Duration::ZERO);
        v.start_app(&s, 30);
        assert_eq!(off.step_back(), Duration::ZERO, "0: never steps back");
        assert!(on.step_back() >= 29 * MS);
        drop((off, on, v));
        drop(s);
        let _ = Store::destroy(&name);
    }
}
