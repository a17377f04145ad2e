//! The schedule of an XOR encoding across the set's daemons: a pipelined reduce-scatter
//! over the set's ring (member `i` sends only to `i + 1` and receives only from
//! `i - 1`).
//!
//! Stripe `s`'s data members `s+1, s+2, ..., s+n-1` form a chain ending at its parity
//! holder `s` (the layout's, [`crate::Layout`]): `s+1` sends its segment to `s+2`, which
//! XORs its own segment into it and passes the sum on, and so on; `s` receives the
//! whole sum and stores it. Member `i` is at place `c` of stripe `i - 1 - c`'s chain,
//! so every member does one step of every stripe: step 0 sends, steps 1 to `n - 2`
//! receive, add and send, step `n - 1` receives its own parity shard. Each link carries
//! `n - 1` segments, about one part, whatever `n` is.
//!
//! Segments go in pieces of at most [`PIECE`] bytes, piece by piece across the steps
//! (for each piece `k`: steps 0, 1, ..., n-1), so the work of every member interleaves
//! with its neighbours': a member has sent at most one piece more than it received at
//! any time, so with two pieces of buffer per link the ring cannot deadlock, and memory
//! is a few pieces plus the parity shard being built.

/// Largest piece of a segment sent at once.
pub const PIECE: u64 = 1 << 20;

/// What a member does at one step of every piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send the piece of its own segment of `stripe` to its successor.
    Send(usize),
    /// Receive the running sum of `stripe` from its predecessor, XOR its own segment
    /// into it, send it on.
    Pass(usize),
    /// Receive the whole sum of `stripe` (its own parity shard) and keep it.
    Keep(usize),
}

impl Step {
    /// The stripe of the step.
    pub fn stripe(&self) -> usize {
        match *self {
            Step::Send(s) | Step::Pass(s) | Step::Keep(s) => s,
        }
    }
}

/// Member `i`'s steps, in order, for a set of `n` members (`n >= 2`).
pub fn steps(n: usize, i: usize) -> Vec<Step> {
    (0..n)
        .map(|c| {
            let s = (i + 2 * n - 1 - c) % n;
            match c {
                0 => Step::Send(s),
                c if c == n - 1 => Step::Keep(s),
                _ => Step::Pass(s),
            }
        })
        .collect()
}

/// The pieces of a segment of `segment` bytes: (offset, length).
pub fn pieces(segment: u64) -> Vec<(u64, u32)> {
    (0..segment.div_ceil(PIECE))
        .map(|k| {
            let o = k * PIECE;
            (o, (segment - o).min(PIECE) as u32)
        })
        .collect()
}

/// The member after `i`.
pub fn successor(n: usize, i: usize) -> usize {
    (i + 1) % n
}

/// The member before `i`.
pub fn predecessor(n: usize, i: usize) -> usize {
    (i + n - 1) % n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Layout, Scheme};

    /// Simulates the ring over in-memory segments: every stripe's kept sum is its XOR
    /// parity, each member sends exactly n - 1 segments, and the order of pieces a member
    /// receives is the order its predecessor sends them.
    #[test]
    fn the_ring_computes_every_stripes_xor_parity() {
        for n in 2..9 {
            let lay = Layout::new(Scheme::Xor, n, 1000).unwrap();
            for i in 0..n {
                let st = steps(n, i);
                assert!(matches!(st[n - 1], Step::Keep(s) if s == i));
                // Data steps are exactly the stripes where i is a data member.
                let mut data: Vec<usize> = st[..n - 1].iter().map(|s| s.stripe()).collect();
                data.sort();
                let want: Vec<usize> = (0..n).filter(|&s| lay.segment_of(i, s).is_some()).collect();
                assert_eq!(data, want);
                // What i receives at step c is what its predecessor sent at step c - 1.
                let p = predecessor(n, i);
                let ps = steps(n, p);
                for c in 1..n {
                    assert_eq!(st[c].stripe(), ps[c - 1].stripe());
                }
            }
        }
        assert_eq!(pieces(0), vec![]);
        assert_eq!(pieces(PIECE + 64), vec![(0, PIECE as u32), (PIECE, 64)]);
    }
}
