//! Encode throughput against memcpy on one core, and one in-process set's protect and
//! rebuild times against partner copies (used by `ckptfs bench erasure`).

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
    /// Bytes of data encoded per second of this thread's CPU time (best of the reps):
    /// on a machine whose cores other processes share, wall time also counts their turns.
    pub encode_cpu_bytes_per_s: f64,
    /// memcpy of the same data, bytes per second of this thread's CPU time.
    pub memcpy_cpu_bytes_per_s: f64,
    /// encode / memcpy, both in CPU time.
    pub ratio_to_memcpy_cpu: f64,
    /// Bytes each member sends to encode (the reduce-scatter), per byte of its part.
    pub sent_per_part: f64,
    /// Extra memory per member per byte of its part.
    pub stored_per_part: f64,
}

/// CPU time of the calling thread, seconds (NaN if the clock cannot be read).
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes one timespec through the pointer, which points
    // to `ts`, a local that is exclusively borrowed for the call and outlives it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The best wall time and the best CPU time of this thread over `reps` runs of `f`.
fn best_of(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    let (mut wall, mut cpu) = (f64::MAX, f64::MAX);
    for _ in 0..reps {
        let c = thread_cpu_s();
        let t = Instant::now();
        f();
        wall = wall.min(t.elapsed().as_secs_f64());
        cpu = cpu.min(thread_cpu_s() - c);
    }
    (wall.max(1e-9), cpu.max(1e-9))
}

/// Measure `scheme` over `members` with parts of `part` bytes.
pub fn measure(
    scheme: Scheme,
    members: usize,
    part: usize,
    reps: usize,
) -> Result<EncodeFigure, crate::ErasureError> {
    let lay = Layout::new(scheme, members, part as u64)?;
    let d = lay.data();
    let seg = lay.segment as usize;
    let p = scheme.parity();
    let data: Vec<Vec<u8>> = (0..d)
        .map(|i| {
            (0..seg)
                .map(|j| (j as u32).wrapping_mul(2_654_435_761).wrapping_add(i as u32) as u8)
                .collect()
        })
        .collect();
    let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut enc = Encoder::new(scheme, d, seg)?;
    let mut par = vec![Vec::new(); p];
    enc.encode(&refs, &mut par)?;
    // One stripe holds d segments of data: a whole set is n stripes.
    let stripe_bytes = (d * seg) as f64;
    let (te, te_cpu) = best_of(reps, || {
        enc.encode(&refs, &mut par).expect("encode");
    });
    // memcpy of the same bytes into a destination of the same size (faulted in first).
    let mut dst = vec![1u8; d * seg];
    let (tm, tm_cpu) = best_of(reps, || {
        for (s, o) in data.iter().zip(dst.chunks_exact_mut(seg)) {
            o.copy_from_slice(s);
        }
        std::hint::black_box(&mut dst);
    });
    // Decode of one lost data shard; the shards are set up outside the timing.
    let mut td = f64::MAX;
    let mut dec = crate::codec::Decoder::new(scheme, d, seg);
    for _ in 0..reps + 1 {
        let mut shards: Vec<Option<Vec<u8>>> = data
            .iter()
            .cloned()
            .map(Some)
            .chain(par.iter().cloned().map(Some))
            .collect();
        shards[0] = None;
        let t = Instant::now();
        dec.decode(&mut shards).expect("decode");
        td = td.min(t.elapsed().as_secs_f64().max(1e-9));
        std::hint::black_box(&shards);
    }
    let encode = stripe_bytes / te;
    let memcpy = stripe_bytes / tm;
    Ok(EncodeFigure {
        scheme: scheme.to_string(),
        members,
        encode_bytes_per_s: encode,
        decode_bytes_per_s: seg as f64 / td,
        memcpy_bytes_per_s: memcpy,
        ratio_to_memcpy: encode / memcpy,
        encode_cpu_bytes_per_s: stripe_bytes / te_cpu,
        memcpy_cpu_bytes_per_s: stripe_bytes / tm_cpu,
        ratio_to_memcpy_cpu: tm_cpu / te_cpu,
        // Gather to the stripe's first parity holder, which forwards the other rows:
        // each member sends its n-p segments (its part) plus, as a holder, p-1 rows.
        sent_per_part: 1.0 + (p as f64 - 1.0) / d as f64,
        stored_per_part: p as f64 / d as f64,
    })
}

/// One in-process set run: protect a dataset, lose one member, rebuild it.
#[derive(Debug, Clone, Serialize)]
pub struct SetFigure {
    /// Scheme.
    pub scheme: String,
    /// Members.
    pub members: usize,
    /// Bytes of each member's part.
    pub part_bytes: u64,
    /// Seconds to encode the whole set (read parts, compute, store and verify parity).
    pub protect_s: f64,
    /// Seconds to copy every member's part to one partner (the partner-copy baseline,
    /// through the same mover and levels).
    pub partner_copy_s: f64,
    /// Seconds to rebuild one lost member's files into an empty level (read the
    /// survivors, decode, check, write, read back).
    pub rebuild_s: f64,
    /// Seconds for the whole repair: rebuild onto the replacement, then re-encode.
    pub rebuild_reencode_s: f64,
    /// Seconds to restore one member's part from its partner copy.
    pub partner_restore_s: f64,
    /// Parity bytes stored per member / part bytes.
    pub stored_per_part: f64,
}

/// Run one set of `members` directory levels under `dir` (a tmpfs directory keeps the
/// figures about the arithmetic and the data path, not a disk).
pub fn run_set(
    scheme: Scheme,
    members: usize,
    part_bytes: usize,
    dir: &std::path::Path,
) -> Result<SetFigure, crate::ErasureError> {
    use ckptfs_dirlevel::DirLevel;
    use ckptfs_level::{conformance::put_bytes, Level, Part};
    use std::sync::Arc;
    let ds = "bench";
    let mk = |name: &str| -> Result<Arc<dyn Level>, crate::ErasureError> {
        Ok(Arc::new(DirLevel::new(dir.join(name))?))
    };
    let mut levels = Vec::new();
    let mut parts = Vec::new();
    for i in 0..members {
        let l = mk(&format!("m{i}"))?;
        let b: Vec<u8> = (0..part_bytes)
            .map(|j| ((j as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ i as u8)
            .collect();
        let st = put_bytes(&*l, &format!("/{ds}/rank{i}"), &b, 1 << 20, 1)?;
        parts.push(Part {
            dataset: ds.into(),
            member: format!("node{i}"),
            files: vec![st],
        });
        levels.push((format!("node{i}"), l));
    }
    let set = crate::ErasureSet::new("set0", scheme, levels.clone())?;
    let t = Instant::now();
    let h = set.encode(ds, &parts)?;
    let protect_s = t.elapsed().as_secs_f64();
    // Partner copies: every member's part to the next member's level.
    let t = Instant::now();
    let partners: Vec<Arc<dyn Level>> = (0..members)
        .map(|i| mk(&format!("partner{i}")))
        .collect::<Result<_, _>>()?;
    for i in 0..members {
        ckptfs_level::copy(
            &*levels[i].1,
            &*partners[(i + 1) % members],
            &parts[i].files[0].path,
        )?;
    }
    let partner_copy_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let fresh = mk("restored-from-partner")?;
    ckptfs_level::copy(&*partners[1], &*fresh, &parts[0].files[0].path)?;
    let partner_restore_s = t.elapsed().as_secs_f64();
    set.replace("node0", mk("replacement0")?)?;
    let t = Instant::now();
    ckptfs_level::SetProtection::recover(&set, ds, "node0", &*mk("rebuilt0")?)?;
    let rebuild_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    set.rebuild(ds)?;
    let rebuild_reencode_s = t.elapsed().as_secs_f64();
    Ok(SetFigure {
        scheme: scheme.to_string(),
        members,
        part_bytes: part_bytes as u64,
        protect_s,
        partner_copy_s,
        rebuild_s,
        rebuild_reencode_s,
        partner_restore_s,
        stored_per_part: (h.segment * scheme.parity() as u64) as f64 / part_bytes.max(1) as f64,
    })
}
