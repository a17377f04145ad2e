//! The namespace of pool files: commits, listings, removals, longevity.

use super::meta::{
    add_ref, deref, drained, expire, get_json, meta, put_json, rule_for, FileRec, KeepRule, VersionRec,
    CHUNKS, FILES, KEEP,
};
use super::{refused, Manager};
use crate::msg::{ChunkInfo, ChunkName, FileInfo, ReplicaInfo, Reply};
use crate::Result;
use redb::ReadableTable;

impl Manager {
    /// Queue, for every holder of every chunk of `v` of `path` (those marked in `only`,
    /// when given), the chunk's name; the first holder drains it (writes its chunk file,
    /// or hard-links it to the chunk's file of an earlier version).
    pub(super) fn announce(&self, path: &str, v: &VersionRec, only: Option<&[bool]>) {
        let mut st = self.st.lock().unwrap();
        let count = v.chunks.len() as u64;
        for (i, c) in v.chunks.iter().enumerate() {
            if only.is_some_and(|o| !o.get(i).copied().unwrap_or(false)) {
                continue;
            }
            for (k, n) in c.holders().enumerate() {
                st.outbox.entry(n.clone()).or_default().commit.push(ChunkName {
                    path: path.to_string(),
                    version: v.version,
                    index: i as u64,
                    count,
                    hash: c.hash.clone(),
                    drain: k == 0,
                });
            }
        }
    }

    /// Re-queue the names of every committed chunk not yet drained (after a restart).
    pub(super) fn requeue(&self) -> Result<()> {
        let tx = self.db.begin_read().map_err(meta)?;
        let files = tx.open_table(FILES).map_err(meta)?;
        let chunks = tx.open_table(CHUNKS).map_err(meta)?;
        for row in files.iter().map_err(meta)? {
            let (p, f) = row.map_err(meta)?;
            let f: FileRec = serde_json::from_str(f.value()).map_err(meta)?;
            for v in &f.versions {
                let d = v
                    .chunks
                    .iter()
                    .map(|c| drained(&chunks, c))
                    .collect::<Result<Vec<bool>>>()?;
                if d.iter().all(|x| *x) {
                    continue;
                }
                self.announce(p.value(), v, None);
            }
        }
        Ok(())
    }

    pub(super) fn file(&self, path: &str) -> Result<Option<FileRec>> {
        let tx = self.db.begin_read().map_err(meta)?;
        let t = tx.open_table(FILES).map_err(meta)?;
        get_json(&t, path)
    }

    pub(super) fn commit(&self, conn: u64, write_id: u64, mut v: VersionRec) -> Result<Reply> {
        let path = {
            let st = self.st.lock().unwrap();
            let Some(w) = st.open.get(&write_id).filter(|w| w.conn == conn) else {
                return Ok(refused(
                    libc::EBADF,
                    "no such open write (aborted, or the manager restarted)",
                ));
            };
            for c in v.chunks.iter().filter(|c| c.sent) {
                if let Some(n) = c.holders().find(|n| !st.bens.contains_key(*n)) {
                    return Ok(refused(
                        libc::EINVAL,
                        format!("chunk map names {n}, not a benefactor"),
                    ));
                }
            }
            w.path.clone()
        };
        let rules = self.rules()?;
        let tx = self.db.begin_write().map_err(meta)?;
        let mut drops = Vec::new();
        {
            let mut files = tx.open_table(FILES).map_err(meta)?;
            let mut chunks = tx.open_table(CHUNKS).map_err(meta)?;
            let mut f: FileRec = get_json(&files, &path)?.unwrap_or_default();
            for c in v.chunks.iter_mut() {
                let Some(holders) = add_ref(&mut chunks, c)? else {
                    // A reference to a chunk no longer held (its version expired
                    // meanwhile): the transaction is dropped, nothing changes.
                    return Ok(refused(
                        libc::EAGAIN,
                        format!("chunk {} is no longer in the pool; write it again", c.hash),
                    ));
                };
                c.node = holders[0].clone();
                c.also = holders[1..].to_vec();
            }
            v.version = f.versions.last().map(|l| l.version).unwrap_or(0) + 1;
            f.versions.push(v.clone());
            if let Some(rule) = rule_for(&rules, &path) {
                for old in expire(&mut f, rule) {
                    deref(&mut chunks, &old, &mut drops)?;
                }
            }
            if f.versions.is_empty() {
                files.remove(path.as_str()).map_err(meta)?;
            } else {
                put_json(&mut files, &path, &f)?;
            }
        }
        // Durable before the client hears of it (redb's default durability).
        tx.commit().map_err(meta)?;
        self.queue_drops(drops);
        self.st.lock().unwrap().open.remove(&write_id);
        self.announce(&path, &v, None);
        Ok(Reply::Committed { version: v.version })
    }

    pub(super) fn list_where(&self, want: impl Fn(&str) -> bool) -> Result<Vec<FileInfo>> {
        let tx = self.db.begin_read().map_err(meta)?;
        let files = tx.open_table(FILES).map_err(meta)?;
        let chunks = tx.open_table(CHUNKS).map_err(meta)?;
        let r = self.net.pool.replicas.max(1) as usize;
        let st = self.st.lock().unwrap();
        let mut out = Vec::new();
        for row in files.iter().map_err(meta)? {
            let (p, f) = row.map_err(meta)?;
            if !want(p.value()) {
                continue;
            }
            let f: FileRec = serde_json::from_str(f.value()).map_err(meta)?;
            let Some(v) = f.versions.last() else { continue };
            let (mut degraded, mut lost) = (false, false);
            let mut infos = Vec::with_capacity(v.chunks.len());
            for c in &v.chunks {
                let drained = drained(&chunks, c)?;
                let alive: Vec<bool> = c.holders().map(|n| self.alive(&st, n)).collect();
                let live = alive.iter().filter(|a| **a).count();
                if live == 0 && !drained {
                    lost = true;
                } else if live < r || live < alive.len() {
                    degraded = true;
                }
                infos.push(ChunkInfo {
                    hash: c.hash.clone(),
                    node: c.node.clone(),
                    len: c.len,
                    drained,
                    alive: alive[0],
                    replicas: c
                        .also
                        .iter()
                        .zip(&alive[1..])
                        .map(|(n, a)| ReplicaInfo {
                            node: n.clone(),
                            alive: *a,
                        })
                        .collect(),
                });
            }
            out.push(FileInfo {
                path: p.value().to_string(),
                version: v.version,
                size: v.size,
                chunk_size: v.chunk_size,
                mtime_ns: v.mtime_ns,
                mode: v.mode,
                crc32c: v.crc32c,
                chunk_crc32c: v.chunk_crc32c.clone(),
                chunks: infos,
                committed_ms: v.committed_ms,
                state: if lost {
                    "lost"
                } else if degraded {
                    "degraded"
                } else {
                    "ok"
                }
                .into(),
                older: f.versions[..f.versions.len() - 1]
                    .iter()
                    .map(|o| o.version)
                    .collect(),
            });
        }
        Ok(out)
    }

    pub(super) fn delete(&self, path: &str, version: Option<u64>, crc32c: Option<u32>) -> Result<Reply> {
        let tx = self.db.begin_write().map_err(meta)?;
        let mut drops = Vec::new();
        let n;
        {
            let mut files = tx.open_table(FILES).map_err(meta)?;
            let mut chunks = tx.open_table(CHUNKS).map_err(meta)?;
            let Some(mut f) = get_json::<FileRec>(&files, path)? else {
                return Ok(Reply::Deleted(0));
            };
            let (gone, kept): (Vec<VersionRec>, Vec<VersionRec>) = f.versions.into_iter().partition(|v| {
                version.is_none_or(|w| w == v.version) && crc32c.is_none_or(|c| c == v.crc32c)
            });
            n = gone.len() as u64;
            for v in &gone {
                deref(&mut chunks, v, &mut drops)?;
            }
            f.versions = kept;
            if f.versions.is_empty() {
                files.remove(path).map_err(meta)?;
            } else {
                put_json(&mut files, path, &f)?;
            }
        }
        tx.commit().map_err(meta)?;
        self.queue_drops(drops);
        Ok(Reply::Deleted(n))
    }

    pub(super) fn queue_drops(&self, drops: Vec<(String, crate::msg::ChunkHash)>) {
        let mut st = self.st.lock().unwrap();
        for (node, h) in drops {
            st.outbox.entry(node).or_default().drop.push(h);
        }
    }

    /// Set the longevity rule of `prefix`, and apply it.
    pub(super) fn keep(&self, prefix: &str, rule: KeepRule) -> Result<Reply> {
        let tx = self.db.begin_write().map_err(meta)?;
        {
            let mut t = tx.open_table(KEEP).map_err(meta)?;
            put_json(&mut t, prefix.trim_end_matches('/'), &rule)?;
        }
        tx.commit().map_err(meta)?;
        self.expire_all()?;
        Ok(Reply::Ok)
    }

    /// Apply the longevity rules to every file.
    pub fn expire_all(&self) -> Result<()> {
        let rules = self.rules()?;
        if rules.is_empty() {
            return Ok(());
        }
        let tx = self.db.begin_write().map_err(meta)?;
        let mut drops = Vec::new();
        {
            let mut files = tx.open_table(FILES).map_err(meta)?;
            let mut chunks = tx.open_table(CHUNKS).map_err(meta)?;
            let mut all = Vec::new();
            for row in files.iter().map_err(meta)? {
                let (p, f) = row.map_err(meta)?;
                all.push((p.value().to_string(), f.value().to_string()));
            }
            for (p, f) in all {
                let Some(rule) = rule_for(&rules, &p) else {
                    continue;
                };
                let mut f: FileRec = serde_json::from_str(&f).map_err(meta)?;
                let gone = expire(&mut f, rule);
                if gone.is_empty() {
                    continue;
                }
                for v in &gone {
                    deref(&mut chunks, v, &mut drops)?;
                }
                if f.versions.is_empty() {
                    files.remove(p.as_str()).map_err(meta)?;
                } else {
                    put_json(&mut files, &p, &f)?;
                }
            }
        }
        tx.commit().map_err(meta)?;
        self.queue_drops(drops);
        Ok(())
    }

    fn rules(&self) -> Result<Vec<(String, KeepRule)>> {
        let tx = self.db.begin_read().map_err(meta)?;
        let t = tx.open_table(KEEP).map_err(meta)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(meta)? {
            let (k, v) = row.map_err(meta)?;
            out.push((
                k.value().to_string(),
                serde_json::from_str(v.value()).map_err(meta)?,
            ));
        }
        Ok(out)
    }
}
