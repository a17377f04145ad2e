//! A level's measured cost: bandwidth smoothed over its own recent transfers.
//!
//! Every transfer that puts a file on a level or gets one from it reports its bytes and
//! seconds to the level's [`CostMeter`]; the meter keeps an exponentially smoothed
//! bandwidth per direction (weight [`SMOOTH`] on the new sample, the same weight the
//! datasets policy uses for its own costs) and counts. The policy reads it with
//! [`CostMeter::cost`]: "costs measured from this job's own recent transfers".

use std::sync::Mutex;

/// Weight of a new sample in the smoothed bandwidths.
pub const SMOOTH: f64 = 0.5;

/// Transfers shorter than this are not timed reliably: their bytes count, their
/// bandwidth does not (a 10-byte file "at 40 GB/s" would skew the estimate).
pub const MIN_SAMPLE_SECONDS: f64 = 1e-4;

/// A snapshot of what a level costs, as measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    /// Smoothed bytes per second of puts (writes to this level); None until measured.
    pub put_bps: Option<f64>,
    /// Smoothed bytes per second of gets (reads from this level); None until measured.
    pub get_bps: Option<f64>,
    /// Files put so far.
    pub puts: u64,
    /// Files got so far.
    pub gets: u64,
    /// Bytes put so far.
    pub put_bytes: u64,
    /// Bytes got so far.
    pub get_bytes: u64,
}

impl Cost {
    /// Estimated seconds to put `bytes` on this level (None until a put was measured).
    pub fn put_seconds(&self, bytes: u64) -> Option<f64> {
        self.put_bps.map(|b| bytes as f64 / b)
    }

    /// Estimated seconds to get `bytes` from this level (None until a get was measured).
    pub fn get_seconds(&self, bytes: u64) -> Option<f64> {
        self.get_bps.map(|b| bytes as f64 / b)
    }
}

/// Which way a transfer went, seen from the level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Written to the level.
    Put,
    /// Read from the level.
    Get,
}

/// Accumulates a level's transfers (thread-safe; one per level instance).
#[derive(Debug, Default)]
pub struct CostMeter {
    cost: Mutex<Cost>,
}

fn smooth(old: Option<f64>, new: f64) -> Option<f64> {
    Some(match old {
        None => new,
        Some(o) => o * (1.0 - SMOOTH) + new * SMOOTH,
    })
}

impl CostMeter {
    /// A meter with nothing measured.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record one finished transfer of `bytes` in `seconds`.
    pub fn record(&self, dir: Direction, bytes: u64, seconds: f64) {
        let mut c = self.cost.lock().unwrap_or_else(|e| e.into_inner());
        let timed = seconds >= MIN_SAMPLE_SECONDS && bytes > 0;
        let bps = bytes as f64 / seconds;
        match dir {
            Direction::Put => {
                c.puts += 1;
                c.put_bytes += bytes;
                if timed {
                    c.put_bps = smooth(c.put_bps, bps);
                }
            }
            Direction::Get => {
                c.gets += 1;
                c.get_bytes += bytes;
                if timed {
                    c.get_bps = smooth(c.get_bps, bps);
                }
            }
        }
    }

    /// What has been measured so far.
    pub fn cost(&self) -> Cost {
        *self.cost.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_smoothed_over_timed_transfers_and_tiny_ones_only_count() {
        let m = CostMeter::new();
        assert_eq!(m.cost().put_bps, None);
        m.record(Direction::Put, 1_000_000, 1.0);
        assert_eq!(m.cost().put_bps, Some(1e6));
        m.record(Direction::Put, 2_000_000, 0.5);
        let want = 1e6 * (1.0 - SMOOTH) + 4e6 * SMOOTH;
        assert!((m.cost().put_bps.unwrap() - want).abs() < 1e-6);
        // Too short to time: counted, not used for the bandwidth.
        m.record(Direction::Put, 10, 1e-7);
        let c = m.cost();
        assert_eq!((c.puts, c.put_bytes), (3, 3_000_010));
        assert!((c.put_bps.unwrap() - want).abs() < 1e-6);
        assert_eq!(c.get_bps, None);
        m.record(Direction::Get, 500, 0.001);
        assert_eq!(m.cost().get_seconds(1000), Some(0.002));
    }
}
