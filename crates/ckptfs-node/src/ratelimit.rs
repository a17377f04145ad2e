//! Rate-limited log lines (failure case 37 of docs/cluster.md): a peer that connects
//! thousands of times a minute with a wrong secret, or an authenticated one that keeps
//! breaking the protocol, must not write one WARN line per attempt. A [`LogLimiter`]
//! lets at most one line per key (a source address, a peer) through per period and
//! counts the ones it holds back; the count is logged when the period ends ("refused
//! 312 more connections from 127.0.0.1 in the last 10 s") or with the next line let
//! through.
//!
//! The daemon's refusal line (`daemon.rs`, accept loop) goes through
//! [`refused_connection`]; the handler's warnings about one peer through [`peer_warn`].

use std::collections::HashMap;
use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// Period of the daemon's limiters: one line per key per 10 s.
pub const PERIOD: Duration = Duration::from_secs(10);

/// Most keys a limiter tracks at once; past it, the keys of other sources share one.
const MAX_KEYS: usize = 4096;

/// The key that stands for every source past [`MAX_KEYS`].
const OTHER: &str = "other sources";

struct Window {
    /// When the last line let through was logged.
    start: Instant,
    /// Lines held back since.
    held: u64,
}

/// What [`LogLimiter::note`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log this one; `held` lines of this key were held back since its last line.
    Log {
        /// Lines held back before this one.
        held: u64,
    },
    /// Hold it back; `first` when it is the first held back in this period (the caller
    /// arranges for the count to be logged when the period ends).
    Hold {
        /// First one held back in the period.
        first: bool,
    },
}

/// At most one log line per key per period; the rest counted.
pub struct LogLimiter {
    period: Duration,
    keys: Mutex<HashMap<String, Window>>,
}

impl LogLimiter {
    /// One line per key per `period`.
    pub fn new(period: Duration) -> LogLimiter {
        LogLimiter {
            period,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Whether to log an event of `key` now: `Some(held)` (log it, with the number of
    /// events of `key` held back since its last line), or None (held back, counted).
    pub fn allow(&self, key: &str) -> Option<u64> {
        match self.note(key) {
            Verdict::Log { held } => Some(held),
            Verdict::Hold { .. } => None,
        }
    }

    /// As [`LogLimiter::allow`], telling the first event held back in a period apart.
    pub fn note(&self, key: &str) -> Verdict {
        let now = Instant::now();
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if !keys.contains_key(key) && keys.len() >= MAX_KEYS {
            // Forget the quiet keys (nothing held back, period over); if none is, every
            // further source shares one key.
            let period = self.period;
            keys.retain(|_, w| w.held > 0 || now.duration_since(w.start) < period);
            if keys.len() >= MAX_KEYS {
                return self.note_in(&mut keys, OTHER, now);
            }
        }
        self.note_in(&mut keys, key, now)
    }

    fn note_in(&self, keys: &mut HashMap<String, Window>, key: &str, now: Instant) -> Verdict {
        match keys.get_mut(key) {
            Some(w) if now.duration_since(w.start) < self.period => {
                w.held += 1;
                Verdict::Hold { first: w.held == 1 }
            }
            Some(w) => {
                w.start = now;
                Verdict::Log {
                    held: std::mem::take(&mut w.held),
                }
            }
            None => {
                keys.insert(key.to_string(), Window { start: now, held: 0 });
                Verdict::Log { held: 0 }
            }
        }
    }

    /// The events of `key` held back since its last line, reset to zero (for the line
    /// logged when the period ends).
    pub fn take_held(&self, key: &str) -> u64 {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.get_mut(key)
            .map(|w| std::mem::take(&mut w.held))
            .unwrap_or(0)
    }
}

/// Log `line` through `limiter` under `key`; the held-back count is logged by
/// `summary(count)` with the next line let through, or when the period ends (a task on
/// the current tokio runtime, one per key and period).
fn limited(
    limiter: &'static LogLimiter,
    key: String,
    line: impl FnOnce(u64),
    summary: impl Fn(u64) + Send + 'static,
) {
    match limiter.note(&key) {
        Verdict::Log { held } => line(held),
        Verdict::Hold { first: true } => {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    tokio::time::sleep(limiter.period()).await;
                    let n = limiter.take_held(&key);
                    if n > 0 {
                        summary(n);
                    }
                });
            }
        }
        Verdict::Hold { first: false } => {}
    }
}

static REFUSED: LazyLock<LogLimiter> = LazyLock::new(|| LogLimiter::new(PERIOD));
static PEER: LazyLock<LogLimiter> = LazyLock::new(|| LogLimiter::new(PERIOD));

/// The daemon `node` refused a connection from `addr` (wrong secret, unknown node,
/// garbage): one WARN line per source address per [`PERIOD`], then "refused N more
/// connections from ADDR in the last 10 s".
pub fn refused_connection(node: &str, addr: SocketAddr, e: &dyn Display) {
    let ip = addr.ip();
    let secs = PERIOD.as_secs();
    limited(
        &REFUSED,
        format!("{node} {ip}"),
        |held| {
            if held == 0 {
                tracing::warn!("refused connection from {addr}: {e}");
            } else {
                tracing::warn!("refused connection from {addr}: {e} (and {held} more from {ip} not logged)");
            }
        },
        move |n| tracing::warn!("refused {n} more connections from {ip} in the last {secs} s"),
    );
}

/// A warning about authenticated peer `peer` of daemon `node`, of kind `what` (one line
/// per kind and peer per [`PERIOD`], then "N more like it from PEER in the last 10 s").
pub(crate) fn peer_warn(node: &str, peer: &str, what: &'static str, line: &dyn Display) {
    let peer2 = peer.to_string();
    let secs = PERIOD.as_secs();
    limited(
        &PEER,
        format!("{node} {peer} {what}"),
        |held| {
            if held == 0 {
                tracing::warn!("{line}");
            } else {
                tracing::warn!("{line} (and {held} more like it not logged)");
            }
        },
        move |n| tracing::warn!("peer {peer2}: {n} more {what} in the last {secs} s"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_key_per_period_and_the_rest_counted() {
        let l = LogLimiter::new(Duration::from_millis(300));
        assert_eq!(l.allow("127.0.0.1"), Some(0));
        for _ in 0..312 {
            assert_eq!(l.allow("127.0.0.1"), None);
        }
        // Another key has its own window.
        assert_eq!(l.allow("10.0.0.2"), Some(0));
        std::thread::sleep(Duration::from_millis(350));
        // The next line after the period carries the count held back.
        assert_eq!(l.allow("127.0.0.1"), Some(312));
        assert_eq!(l.allow("127.0.0.1"), None);
        assert_eq!(l.take_held("127.0.0.1"), 1);
        assert_eq!(l.take_held("127.0.0.1"), 0);
        assert_eq!(l.take_held("never seen"), 0);
    }

    #[test]
    fn the_first_held_back_in_a_period_is_told_apart() {
        let l = LogLimiter::new(Duration::from_secs(60));
        assert_eq!(l.note("a"), Verdict::Log { held: 0 });
        assert_eq!(l.note("a"), Verdict::Hold { first: true });
        assert_eq!(l.note("a"), Verdict::Hold { first: false });
        assert_eq!(l.take_held("a"), 2);
        // After the summary took the count, the next one held back starts a new count.
        assert_eq!(l.note("a"), Verdict::Hold { first: true });
    }

    #[test]
    fn past_the_key_limit_new_sources_share_one_key() {
        let l = LogLimiter::new(Duration::from_secs(60));
        for i in 0..MAX_KEYS {
            assert_eq!(l.allow(&format!("k{i}")), Some(0));
        }
        assert_eq!(l.allow("one more"), Some(0));
        assert_eq!(l.allow("and another"), None);
        assert_eq!(l.keys.lock().unwrap().len(), MAX_KEYS + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_summed_up_when_its_period_ends() {
        static L: LazyLock<LogLimiter> = LazyLock::new(|| LogLimiter::new(Duration::from_secs(10)));
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        for _ in 0..100 {
            let (a, b) = (seen.clone(), seen.clone());
            limited(
                &L,
                "127.0.0.1".into(),
                move |held| a.lock().unwrap().push(format!("line {held}")),
                move |n| b.lock().unwrap().push(format!("summary {n}")),
            );
        }
        assert_eq!(*seen.lock().unwrap(), ["line 0"]);
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(*seen.lock().unwrap(), ["line 0", "summary 99"]);
    }
}
