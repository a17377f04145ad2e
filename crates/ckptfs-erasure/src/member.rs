//! One member's share of its set's encodings, in its own node store (any [`Level`]: the
//! node daemon passes its store as a level): its part described for a plan, its data
//! segments read from its files (every chunk checked), its parity shards and headers
//! written through a mover and read back checked. Paths as in the set (`set.rs`): under
//! `/.ckptfs/erasure/DATASET/SET/`.

use crate::layout::{FileRecord, Header, ParityRecord, PartRecord};
use crate::proto::WantFile;
use crate::set::{header_path, marker_path, parity_path, put_checked, read_all, read_range, PARITY_CHUNK};
use crate::ErasureError;
use ckptfs_level::crc::crc_combine;
use ckptfs_level::mem::BufReader;
use ckptfs_level::{CostMeter, Level, LevelError, Mover, Recovered};

/// This member's part: the files `want` lists, each of which its level must hold with
/// exactly that size and CRC32C (and chunk CRCs known).
pub fn part_record(level: &dyn Level, member: &str, want: &[WantFile]) -> Result<PartRecord, ErasureError> {
    let mut files = Vec::with_capacity(want.len());
    for w in want {
        let st = level
            .stat(&w.path)?
            .ok_or_else(|| ErasureError::NotProtected(format!("{} is not in the store", w.path)))?;
        if st.version.size != w.size || st.version.crc32c != Some(w.crc32c) {
            return Err(ErasureError::Level(LevelError::Changed(w.path.clone())));
        }
        files.push(FileRecord::of(&st).ok_or_else(|| {
            ErasureError::Layout(format!(
                "{}: its CRCs are not known; it cannot be encoded",
                w.path
            ))
        })?);
    }
    let size = files.iter().map(|f| f.size).sum();
    let crc32c = files.iter().fold(0u32, |a, f| crc_combine(a, f.crc32c, f.size));
    Ok(PartRecord {
        member: member.to_string(),
        size,
        crc32c,
        files,
    })
}

/// `out.len()` bytes at `off` of member `i`'s data segment of stripe `s` of `h` (zeros
/// past its part's end), from its files on `level` (each the recorded version, every
/// chunk read checked).
pub fn read_segment(
    level: &dyn Level,
    h: &Header,
    i: usize,
    s: usize,
    off: u64,
    out: &mut [u8],
) -> Result<(), ErasureError> {
    let lay = h.layout();
    let t = lay.segment_of(i, s).ok_or_else(|| {
        ErasureError::Layout(format!("{} is not a data member of stripe {s}", h.members[i]))
    })?;
    if off + out.len() as u64 > lay.segment {
        return Err(ErasureError::Layout("a read past the segment".into()));
    }
    read_range(level, &h.parts[i].files, t as u64 * lay.segment + off, out)?;
    Ok(())
}

/// Store parity shard (`s`, `j`) of `h`'s epoch on `level` and read it back checked; its
/// record.
pub fn store_parity(
    mover: &Mover,
    level: &dyn Level,
    h: &Header,
    holder: &str,
    s: usize,
    j: usize,
    bytes: &[u8],
) -> Result<ParityRecord, ErasureError> {
    let path = parity_path(&h.dataset, &h.set, h.epoch, s, j);
    let st = put_checked(mover, level, &path, bytes, PARITY_CHUNK, h.epoch)?;
    Ok(ParityRecord {
        stripe: s,
        row: j,
        holder: holder.to_string(),
        crc32c: st.version.crc32c.unwrap_or(0),
        chunk_crc32c: st.chunk_crc32c,
    })
}

/// Parity shard (`s`, `j`) of `h`'s epoch as `level` holds it (not checked here: see
/// [`crate::parity_matches`]).
pub fn read_parity(level: &dyn Level, h: &Header, s: usize, j: usize) -> Result<Vec<u8>, ErasureError> {
    Ok(read_all(
        level,
        &parity_path(&h.dataset, &h.set, h.epoch, s, j),
        h.segment,
    )?)
}

/// Note that `epoch` of `dataset` is being encoded (so a later encode removes its parity
/// if this one never finishes).
pub fn mark_encoding(
    mover: &Mover,
    level: &dyn Level,
    dataset: &str,
    set: &str,
    epoch: u64,
) -> Result<(), ErasureError> {
    put_checked(
        mover,
        level,
        &marker_path(dataset, set),
        &epoch.to_le_bytes(),
        PARITY_CHUNK,
        epoch,
    )?;
    Ok(())
}

/// The epoch last marked as being encoded.
pub fn marked(level: &dyn Level, dataset: &str, set: &str) -> Option<u64> {
    let b = read_all(level, &marker_path(dataset, set), 8).ok()?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// Keep `h` as this member's header (published atomically, read back checked).
pub fn store_header(mover: &Mover, level: &dyn Level, h: &Header) -> Result<(), ErasureError> {
    h.check()?;
    let bytes = serde_json::to_vec(h).map_err(|e| ErasureError::Header(e.to_string()))?;
    put_checked(
        mover,
        level,
        &header_path(&h.dataset, &h.set),
        &bytes,
        PARITY_CHUNK,
        h.epoch,
    )?;
    Ok(())
}

/// This member's header of `dataset` by `set` (None when it has none, or one that does
/// not parse, check, or name this dataset and set).
pub fn header(level: &dyn Level, dataset: &str, set: &str) -> Option<Header> {
    let b = read_all(level, &header_path(dataset, set), crate::layout::MAX_HEADER).ok()?;
    let h = Header::parse(&b).ok()?;
    (h.dataset == dataset && h.set == set).then_some(h)
}

/// Remove the parity shards member `i` holds for `epoch` of `h`'s dataset (best effort).
pub fn drop_epoch(level: &dyn Level, h: &Header, i: usize, epoch: u64) {
    for (s, j) in h.layout().held_by(i) {
        let path = parity_path(&h.dataset, &h.set, epoch, s, j);
        if let Ok(Some(st)) = level.stat(&path) {
            let _ = level.delete(&path, &st.version);
        }
    }
}

/// Remove everything of `dataset` by `set` this member holds: the header, the marker,
/// and the parity shards of the epochs named (best effort).
pub fn forget(level: &dyn Level, h: &Header, i: usize, epochs: &[u64]) {
    for &e in epochs {
        drop_epoch(level, h, i, e);
    }
    for path in [header_path(&h.dataset, &h.set), marker_path(&h.dataset, &h.set)] {
        if let Ok(Some(st)) = level.stat(&path) {
            let _ = level.delete(&path, &st.version);
        }
    }
}

/// Whether member `i` still holds everything of `h` it should: its files as recorded
/// and its parity shards of the epoch (sizes and CRCs as the level reports them).
pub fn holds_share(level: &dyn Level, h: &Header, i: usize) -> bool {
    let files_ok = h.parts[i].files.iter().all(|f| {
        matches!(level.stat(&f.path), Ok(Some(s)) if s.version.size == f.size && s.version.crc32c == Some(f.crc32c))
    });
    files_ok
        && h.layout().held_by(i).iter().all(|&(s, j)| {
            let r = h.parity_of(s, j);
            matches!(level.stat(&parity_path(&h.dataset, &h.set, h.epoch, s, j)),
                Ok(Some(st)) if st.version.crc32c == Some(r.crc32c) && st.version.size == h.segment)
        })
}

/// Write a rebuilt part's files into `into` through `mover` (each checked chunk by chunk
/// against the recorded CRCs on the way, and read back).
pub fn write_part(
    mover: &Mover,
    rec: &PartRecord,
    part: &[u8],
    into: &dyn Level,
) -> Result<Recovered, LevelError> {
    let mut out = Recovered::default();
    let mut at = 0usize;
    for f in &rec.files {
        let bytes = &part[at..at + f.size as usize];
        at += f.size as usize;
        let src = f.stored();
        let w = into.put(&src)?;
        let t = mover.copy_open(
            Box::new(BufReader::new(src.clone(), bytes)),
            w,
            (&CostMeter::default(), into.meter()),
        )?;
        into.verify(&f.path, &src.version)?;
        out.bytes += f.size;
        out.files.push(t.stored);
    }
    Ok(out)
}
