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
//!
//! # Reed-Solomon
//!
//! Each data member sends its segment of stripe `s` to the stripe's row-0 holder
//! (member `s`), which encodes each piece once the stripe's data pieces are in and
//! forwards rows `1..k` to members `s + j`. A round is one piece offset. A member runs
//! two parts at once:
//!
//! - its **data sender** hands its data pieces of round `r` (one per stripe it is a data
//!   member of) to their connections once its **loop** has finished round
//!   `r - RS_WINDOW` (so up to [`RS_WINDOW`] rounds are in flight: the links carry the
//!   next rounds' data while the loop waits and encodes);
//! - its **loop**, round by round: wait for round `r`'s data pieces of its own stripe,
//!   encode, forward each row at once (rows on connections of their own, never queued
//!   behind data of later rounds), then wait for round `r`'s rows it holds (from members
//!   `i - j`).
//!
//! No deadlock: every connection is drained by its receiver's connection handler
//! whatever that member's loop is doing, so a send waits only for its link, never for
//! another member's schedule. Suppose every member has finished the rounds before `r`.
//! Then every data sender may send round `r` (`r <= (r - 1) + RS_WINDOW`), so every
//! holder gets its stripe's data of round `r`, encodes it (it waits for nothing else
//! first) and forwards its rows, so every member gets the rows of round `r` it holds
//! and finishes round `r`. By induction every round finishes.
//!
//! Memory: a data sender is at most `RS_WINDOW` rounds ahead of its own loop, and a loop
//! finishes round `r` only once the data of round `r` of every member it depends on has
//! been sent, so pieces that arrive before their round (kept until then) are bounded by
//! about two windows of pieces per stream; what is queued to send is two pieces per
//! connection. Checks: a piece is taken only from a stream the schedule names (its
//! stripe's data members, the rows' row-0 holders) and only when it is exactly the next
//! piece of that stream (each stream travels on one connection, in order); arrival
//! across streams may interleave in any order.

/// Largest piece of a segment sent at once.
pub const PIECE: u64 = 1 << 20;

/// Rounds (piece offsets) of Reed-Solomon data a member may have sent beyond the last
/// round its loop finished (module doc, "Reed-Solomon").
pub const RS_WINDOW: usize = 8;

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

    /// The Reed-Solomon schedule of the module doc run as a model: every member's data
    /// sender and loop, messages delivered in a random order (in order per connection),
    /// many seeds and set shapes. It never deadlocks (every member finishes every
    /// round), every piece a member receives is one the schedule names, and the pieces
    /// a member holds before their round stay within two windows per stream.
    #[test]
    fn the_reed_solomon_window_never_deadlocks_and_stays_bounded() {
        use std::collections::{BTreeMap, HashSet, VecDeque};
        // (kind: 0 data / 1 row, stripe, row, round)
        type Msg = (u8, usize, usize, usize);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |m: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m as u64) as usize
        };
        for (n, k) in [(3, 1), (4, 2), (6, 2), (8, 2), (8, 3), (5, 4)] {
            let lay = Layout::new(Scheme::Rs(k as u16), n, 1000).unwrap();
            for rounds in [1usize, 3, 9] {
                for _ in 0..20 {
                    // Connections (from, to, kind) carry messages in order.
                    let mut links: BTreeMap<(usize, usize, u8), VecDeque<Msg>> = BTreeMap::new();
                    let mut sent = vec![0usize; n];
                    let mut round = vec![0usize; n];
                    let mut encoded = vec![false; n];
                    let mut have: Vec<HashSet<(usize, u8, usize, usize)>> = vec![HashSet::new(); n];
                    let streams = |i: usize| lay.data_members(i).len() + k - 1;
                    loop {
                        let mut acts: Vec<(usize, u8)> = Vec::new();
                        for m in 0..n {
                            if sent[m] < rounds && sent[m] < round[m] + RS_WINDOW {
                                acts.push((m, 0));
                            }
                            if round[m] < rounds {
                                let r = round[m];
                                let data_in = lay
                                    .data_members(m)
                                    .iter()
                                    .all(|&d| have[m].contains(&(d, 0, 0, r)));
                                let rows_in = (1..k).all(|j| have[m].contains(&((m + n - j) % n, 1, j, r)));
                                if (!encoded[m] && data_in) || (encoded[m] && rows_in) {
                                    acts.push((m, 1));
                                }
                            }
                        }
                        let busy: Vec<(usize, usize, u8)> = links
                            .iter()
                            .filter(|(_, q)| !q.is_empty())
                            .map(|(c, _)| *c)
                            .collect();
                        if acts.is_empty() && busy.is_empty() {
                            break;
                        }
                        let pick = rnd(acts.len() + busy.len());
                        if pick < acts.len() {
                            let (m, what) = acts[pick];
                            if what == 0 {
                                for s in (0..n).filter(|&s| lay.segment_of(m, s).is_some()) {
                                    links.entry((m, s, 0)).or_default().push_back((0, s, 0, sent[m]));
                                }
                                sent[m] += 1;
                            } else if !encoded[m] {
                                for j in 1..k {
                                    links
                                        .entry((m, (m + j) % n, 1))
                                        .or_default()
                                        .push_back((1, m, j, round[m]));
                                }
                                encoded[m] = true;
                            } else {
                                encoded[m] = false;
                                round[m] += 1;
                            }
                        } else {
                            let (from, to, kind) = busy[pick - acts.len()];
                            let (kd, s, j, r) =
                                links.get_mut(&(from, to, kind)).unwrap().pop_front().unwrap();
                            // Only what the schedule names: the data of its own stripe
                            // from a data member, or row j from member to - j.
                            let named = if kd == 0 {
                                s == to && lay.data_members(to).contains(&from)
                            } else {
                                s == from && (1..k).contains(&j) && (from + j) % n == to
                            };
                            assert!(named, "{n}/{k}: {from} -> {to} {kd} {s} {j}");
                            assert!(r >= round[to], "a piece of a finished round");
                            have[to].insert((from, kd, j, r));
                            let ahead = have[to].iter().filter(|x| x.3 > round[to]).count();
                            assert!(
                                ahead <= 2 * RS_WINDOW * streams(to),
                                "{n}/{k}: member {to} holds {ahead} pieces ahead of round {}",
                                round[to]
                            );
                        }
                    }
                    assert!(round.iter().all(|&r| r == rounds), "{n}/{k}: stuck at {round:?}");
                    assert!(sent.iter().all(|&r| r == rounds));
                }
            }
        }
    }
}
