//! Encode throughput against memcpy, on one core (used by `ckptfs bench erasure`).

use crate::codec::{Encoder, Scheme};
use crate::layout::Layout;
use serde::Serialize;
use std::time::Instant;

/// One measured scheme.
#[derive(Debug, Clone, Serialize)]
pub struct EncodeFigure {
    /// Scheme.
    pub scheme: String,
    /// Set size.
    pub members: usize,
    /// Bytes of data (all members' parts) encoded per second, one core.
    pub encode_bytes_per_s: f64,
    /// Rebuild of one member's segments (decode), bytes of that member per second.
    pub decode_bytes_per_s: f64,
    /// memcpy of the same data, bytes per second.
    pub memcpy_bytes_per_s: f64,
    /// encode / memcpy.
    pub ratio_to_memcpy: f64,
    /// Bytes each member sends to encode (the reduce-scatter), per byte of its part.
    pub sent_per_part: f64,
    /// Extra memory per member per byte of its part.
    pub stored_per_part: f64,
}

fn best_of(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best.max(1e-9)
}

/// Measure `scheme` over `members` with parts of `part` bytes.
pub fn measure(scheme: Scheme, members: usize, part: usize, reps: usize) -> Result<EncodeFigure, crate::ErasureError> {
    let lay = Layout::new(scheme, members, part as u64)?;
    let d = lay.data();
    let seg = lay.segment as usize;
    let p = scheme.parity();
    let data: Vec<Vec<u8>> = (0..d)
        .map(|i| (0..seg).map(|j| (j as u32).wrapping_mul(2_654_435_761).wrapping_add(i as u32) as u8).collect())
        .collect();
    let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut enc = Encoder::new(scheme, d, seg)?;
    let mut par = vec![Vec::new(); p];
    enc.encode(&refs, &mut par)?;
    // One stripe holds d segments of data: a whole set is n stripes.
    let stripe_bytes = (d * seg) as f64;
    let te = best_of(reps, || {
        enc.encode(&refs, &mut par).expect("encode");
    });
    let mut dst = vec![0u8; seg];
    let tm = best_of(reps, || {
        for s in &data {
            dst.copy_from_slice(s);
            std::hint::black_box(&mut dst);
        }
    });
    let td = best_of(reps, || {
        let mut shards: Vec<Option<Vec<u8>>> = data.iter().cloned().map(Some).chain(par.iter().cloned().map(Some)).collect();
        shards[0] = None;
        crate::codec::decode(scheme, d, seg, &mut shards).expect("decode");
    });
    let encode = stripe_bytes / te;
    let memcpy = stripe_bytes / tm;
    Ok(EncodeFigure {
        scheme: scheme.to_string(),
        members,
        encode_bytes_per_s: encode,
        decode_bytes_per_s: seg as f64 / td,
        memcpy_bytes_per_s: memcpy,
        ratio_to_memcpy: encode / memcpy,
        // Gather to the stripe's first parity holder, which forwards the other rows:
        // each member sends its n-p segments (its part) plus, as a holder, p-1 rows.
        sent_per_part: 1.0 + (p as f64 - 1.0) / d as f64,
        stored_per_part: p as f64 / d as f64,
    })
}
