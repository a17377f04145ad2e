//! The manager's persistent metadata: the redb tables and their records.
//!
//! One redb file, `pool-meta.redb` under the meta directory:
//!
//! * `files`: store path → its committed versions (JSON [`FileRec`]: version, size,
//!   chunk size, CRCs, chunk map with every chunk's holders, commit time);
//! * `chunks`: `<hash>@<node>` → references from committed versions, length, drained
//!   ([`ChunkRec`]): one record per copy of a chunk, so a chunk with r replicas has r;
//! * `keep`: path prefix → longevity rule ([`KeepRule`]).
//!
//! Every change is one write transaction, durable (redb's default) when it returns.

use crate::msg::{ChunkHash, ChunkRef};
use crate::{now_ms, PoolError, Result};
use redb::{ReadableTable, Table, TableDefinition};
use serde::{Deserialize, Serialize};

pub(super) const FILES: TableDefinition<&str, &str> = TableDefinition::new("files");
pub(super) const CHUNKS: TableDefinition<&str, &str> = TableDefinition::new("chunks");
pub(super) const KEEP: TableDefinition<&str, &str> = TableDefinition::new("keep");

/// One committed version of a file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct VersionRec {
    pub version: u64,
    pub size: u64,
    pub chunk_size: u64,
    pub mtime_ns: u64,
    pub mode: u32,
    pub crc32c: u32,
    pub chunk_crc32c: Vec<u32>,
    pub chunks: Vec<ChunkRef>,
    pub committed_ms: u64,
}

/// A file: its committed versions, oldest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct FileRec {
    pub versions: Vec<VersionRec>,
}

/// One copy of a chunk on one benefactor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ChunkRec {
    /// Committed versions whose chunk map names this copy.
    pub refs: u64,
    pub len: u32,
    pub drained: bool,
    /// When the first version referencing it was committed (ms since the epoch).
    #[serde(default)]
    pub at_ms: u64,
}

/// Longevity of the files under a prefix.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct KeepRule {
    pub versions: Option<u32>,
    pub seconds: Option<u64>,
}

pub(super) type Tbl<'t> = Table<'t, &'static str, &'static str>;

pub(super) fn meta(e: impl std::fmt::Display) -> PoolError {
    PoolError::Meta(e.to_string())
}

/// The `chunks` key of the copy of `h` on `node`.
pub(super) fn key(h: &ChunkHash, node: &str) -> String {
    format!("{h}@{node}")
}

/// Read a JSON record.
pub(super) fn get_json<T: for<'de> Deserialize<'de>>(
    t: &impl ReadableTable<&'static str, &'static str>,
    k: &str,
) -> Result<Option<T>> {
    t.get(k)
        .map_err(meta)?
        .map(|v| serde_json::from_str(v.value()).map_err(meta))
        .transpose()
}

/// Write a JSON record.
pub(super) fn put_json<T: Serialize>(t: &mut Tbl<'_>, k: &str, v: &T) -> Result<()> {
    let s = serde_json::to_string(v).map_err(meta)?;
    t.insert(k, s.as_str()).map_err(meta)?;
    Ok(())
}

/// The copies of `h` recorded: (node, record).
pub(super) fn copies_of(
    t: &impl ReadableTable<&'static str, &'static str>,
    h: &ChunkHash,
) -> Result<Vec<(String, ChunkRec)>> {
    let lo = format!("{h}@");
    // '@' + 1 is 'A': every key of the hash sorts before it.
    let hi = format!("{h}A");
    let mut out = Vec::new();
    for row in t.range(lo.as_str()..hi.as_str()).map_err(meta)? {
        let (k, v) = row.map_err(meta)?;
        if let (Some((_, n)), Ok(r)) = (
            k.value().split_once('@'),
            serde_json::from_str::<ChunkRec>(v.value()),
        ) {
            out.push((n.to_string(), r));
        }
    }
    Ok(out)
}

/// Is any copy of `h` drained?
pub(super) fn drained(t: &impl ReadableTable<&'static str, &'static str>, c: &ChunkRef) -> Result<bool> {
    for n in c.holders() {
        if get_json::<ChunkRec>(t, &key(&c.hash, n))?.is_some_and(|r| r.drained) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Count one more reference to every copy named by `c`. A copy sent by this write is
/// created; a reference to a copy that is no longer recorded (a repair moved it, or its
/// version expired meanwhile) is resolved to the copies recorded now. Returns the
/// holders finally referenced, or None when the chunk is no longer in the pool.
pub(super) fn add_ref(chunks: &mut Tbl<'_>, c: &ChunkRef) -> Result<Option<Vec<String>>> {
    let mut holders = Vec::new();
    for n in c.holders() {
        let k = key(&c.hash, n);
        match get_json::<ChunkRec>(chunks, &k)? {
            Some(mut r) => {
                r.refs += 1;
                put_json(chunks, &k, &r)?;
                holders.push(n.clone());
            }
            None if c.sent => {
                let r = ChunkRec {
                    refs: 1,
                    len: c.len,
                    drained: false,
                    at_ms: now_ms(),
                };
                put_json(chunks, &k, &r)?;
                holders.push(n.clone());
            }
            None => {}
        }
    }
    if holders.is_empty() {
        for (n, mut r) in copies_of(chunks, &c.hash)? {
            r.refs += 1;
            put_json(chunks, &key(&c.hash, &n), &r)?;
            holders.push(n);
        }
    }
    Ok((!holders.is_empty()).then_some(holders))
}

/// Drop one reference to every copy named by the chunks of `v`; copies no longer
/// referenced are removed and returned as (node, hash) to drop.
pub(super) fn deref(
    chunks: &mut Tbl<'_>,
    v: &VersionRec,
    drops: &mut Vec<(String, ChunkHash)>,
) -> Result<()> {
    for c in &v.chunks {
        for n in c.holders() {
            let k = key(&c.hash, n);
            if let Some(mut r) = get_json::<ChunkRec>(chunks, &k)? {
                r.refs = r.refs.saturating_sub(1);
                if r.refs == 0 {
                    chunks.remove(k.as_str()).map_err(meta)?;
                    drops.push((n.clone(), c.hash.clone()));
                } else {
                    put_json(chunks, &k, &r)?;
                }
            }
        }
    }
    Ok(())
}

/// The most specific rule whose prefix covers `path`.
pub(super) fn rule_for(rules: &[(String, KeepRule)], path: &str) -> Option<KeepRule> {
    rules
        .iter()
        .filter(|(pre, _)| pre.is_empty() || path == pre || path.starts_with(&format!("{pre}/")))
        .max_by_key(|(pre, _)| pre.len())
        .map(|(_, r)| *r)
}

/// Remove the versions `rule` no longer keeps; returns them.
pub(super) fn expire(f: &mut FileRec, rule: KeepRule) -> Vec<VersionRec> {
    let now = now_ms();
    let mut gone = Vec::new();
    if let Some(s) = rule.seconds {
        let cut = now.saturating_sub(s.saturating_mul(1000));
        let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut f.versions)
            .into_iter()
            .partition(|v| v.committed_ms < cut);
        gone.extend(old);
        f.versions = keep;
    }
    if let Some(n) = rule.versions {
        let n = n.max(1) as usize;
        if f.versions.len() > n {
            let k = f.versions.len() - n;
            gone.extend(f.versions.drain(..k));
        }
    }
    gone
}
