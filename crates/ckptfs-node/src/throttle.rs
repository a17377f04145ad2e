//! The pacing of partner copies: a bandwidth cap, and stepping back while the
//! application writes into the store.

use ckptfs_store::Store;
use std::time::Duration;
// The throttle keeps tokio's clock (the same as std's, except in tests with paused time).
use tokio::time::Instant as TInstant;

/// A bandwidth cap: sleeps so that the bytes sent since the start stay under the rate.
///
/// It also makes copies step back while an application writes into the store (the
/// store's write count moves, checked before every chunk sent): a copy waits until the
/// count has been still for [`STILL`], at most `yield_max` at a stretch, and after that
/// only while its time spent waiting stays below its time spent sending plus
/// `yield_max`, so a writer that never stops still leaves a copy at least half the time.
/// The count last seen is kept from one copy to the next: a copy that starts while the
/// application writes its next checkpoint waits from its first chunk. `yield_max` zero:
/// never.
pub(crate) struct Throttle {
    rate: Option<f64>,
    start: TInstant,
    bytes: u64,
    yield_max: Duration,
    seen: u64,
    /// Time waited and start of the current copy.
    waited: Duration,
    copy_start: TInstant,
}

/// How long the write count must stay still before a copy goes on.
pub(crate) const STILL: Duration = Duration::from_millis(2);

impl Throttle {
    pub(crate) fn new(rate: Option<f64>, store: &Store, yield_max: Duration) -> Throttle {
        Throttle {
            rate,
            start: TInstant::now(),
            bytes: 0,
            yield_max,
            seen: store.write_count(),
            waited: Duration::ZERO,
            copy_start: TInstant::now(),
        }
    }

    /// The daemon wrote into the store itself: take the count as seen.
    pub(crate) fn absorb(&mut self, store: &Store) {
        self.seen = store.write_count();
    }

    /// A copy starts (the bound on waiting is per copy).
    pub(crate) fn copy_starts(&mut self) {
        self.waited = Duration::ZERO;
        self.copy_start = TInstant::now();
    }

    /// Before a chunk is sent: wait while an application writes into `store`. Returns
    /// the time waited.
    pub(crate) async fn before_chunk(&mut self, store: &Store) -> Duration {
        if self.yield_max.is_zero() {
            return Duration::ZERO;
        }
        let t0 = TInstant::now();
        let mut now = store.write_count();
        while now != self.seen {
            self.seen = now;
            let waited = self.waited + t0.elapsed();
            let sending = self.copy_start.elapsed().saturating_sub(waited);
            if t0.elapsed() >= self.yield_max || waited >= sending + self.yield_max {
                break;
            }
            tokio::time::sleep(STILL).await;
            now = store.write_count();
        }
        let w = t0.elapsed();
        self.waited += w;
        w
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

#[cfg(test)]
mod tests {
    //! The throttle's stepping back, on tokio's paused clock: the "application" below
    //! writes once per virtual millisecond, so the waits are exact whatever the load.
    use super::{Throttle, STILL};
    use ckptfs_store::{OpenFlags, Store, StoreOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

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

    /// Writes 4 KiB into `/w` once per millisecond (virtual), `n` times or until `stop`.
    fn app(s: Store, n: u64, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut f = s.open("/w", OpenFlags::CREATE, 0o600).unwrap();
            for i in 0..n {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                f.pwrite(&[1u8; 4096], (i % 16) * 4096).unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            f.close().unwrap();
        })
    }

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn a_copy_waits_until_the_writes_have_stopped_for_two_ms() {
        let (s, name) = store("stop");
        let mut t = Throttle::new(None, &s, Duration::from_secs(1));
        t.copy_starts();
        assert_eq!(
            t.before_chunk(&s).await,
            Duration::ZERO,
            "nothing written: no wait"
        );
        // 50 writes, 1 ms apart (the last at 49 ms).
        let w = app(s.clone(), 50, Arc::default());
        tokio::task::yield_now().await;
        let waited = t.before_chunk(&s).await;
        assert!(waited >= 49 * MS && waited <= 49 * MS + 2 * STILL, "{waited:?}");
        w.await.unwrap();
        // The writes stopped: the next chunk goes at once.
        assert_eq!(t.before_chunk(&s).await, Duration::ZERO);
        drop(s);
        let _ = Store::destroy(&name);
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_that_never_stops_holds_a_copy_back_at_most_half_the_time() {
        let (s, name) = store("never");
        let max = 20 * MS;
        let mut t = Throttle::new(None, &s, max);
        let stop = Arc::new(AtomicBool::new(false));
        let w = app(s.clone(), u64::MAX, stop.clone());
        tokio::task::yield_now().await;
        t.copy_starts();
        let first = t.before_chunk(&s).await;
        assert!(first >= max && first <= max + STILL, "{first:?}");
        // Sending a chunk takes 5 ms here; waits after the first stretch alternate with it.
        let (mut waited, mut sending) = (first, Duration::ZERO);
        for _ in 0..40 {
            tokio::time::sleep(5 * MS).await;
            sending += 5 * MS;
            let w = t.before_chunk(&s).await;
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
        stop.store(true, Ordering::Relaxed);
        w.await.unwrap();
        drop(s);
        let _ = Store::destroy(&name);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_never_waits_and_the_daemons_own_writes_are_absorbed() {
        let (s, name) = store("zero");
        let mut off = Throttle::new(None, &s, Duration::ZERO);
        let mut on = Throttle::new(None, &s, Duration::from_secs(1));
        on.copy_starts();
        // The daemon's own write (its levels record), absorbed: no wait.
        let mut f = s.open("/own", OpenFlags::CREATE, 0o600).unwrap();
        f.write_all(b"record").unwrap();
        f.close().unwrap();
        on.absorb(&s);
        assert_eq!(on.before_chunk(&s).await, Duration::ZERO);
        let w = app(s.clone(), 30, Arc::default());
        tokio::task::yield_now().await;
        assert_eq!(off.before_chunk(&s).await, Duration::ZERO, "0: never steps back");
        assert!(on.before_chunk(&s).await >= 29 * MS);
        w.await.unwrap();
        drop(s);
        let _ = Store::destroy(&name);
    }
}
