//! Re-replication: the copies a lost benefactor held are made again elsewhere.
//!
//! With a replication factor r > 1, every refresh interval the manager looks for chunks
//! with a copy recorded on a benefactor that is dead (silent past the death timeout), or
//! with fewer than r copies on live benefactors, and a copy on a live one. For each copy
//! to make it picks a target (alive, trusted, not holding the chunk, with room;
//! a failure domain none of the live holders is in where possible; then the most free
//! memory), reads the chunk from a live holder (checked against its BLAKE3 hash), sends
//! it to the target under a write of its own (so the target does not reclaim it), and
//! then, in one metadata transaction, moves the dead copy's references to the target
//! and rewrites the chunk maps naming it (or, for a copy added, adds the target to the
//! chunk maps with fewer than r holders). The target is told the chunk's names (and
//! drains it if no copy was drained yet). The dead benefactor's copy is dropped, should
//! it come back.
//!
//! The manager copies the bytes itself (one chunk at a time, at most
//! [`REPAIR_BATCH`] chunks per interval): repair traffic crosses the manager's link.

use super::meta::{copies_of, get_json, key, meta, put_json, ChunkRec, FileRec, CHUNKS, FILES};
use super::{Manager, OpenWrite};
use crate::msg::ChunkHash;
use crate::net_server::{get_chunk, put_chunk};
use crate::{PoolError, Result};
use redb::ReadableTable;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Most chunks copied per refresh interval.
pub const REPAIR_BATCH: usize = 256;

/// One copy to make: `hash` from `src` to `dst`, replacing the copy on `dead` (None:
/// one more copy).
#[derive(Debug, Clone)]
struct Job {
    hash: ChunkHash,
    dead: Option<String>,
    src: String,
    dst: String,
}

impl Manager {
    /// The copies to make now (see the module documentation).
    fn repair_jobs(&self) -> Result<Vec<Job>> {
        let r = self.net.pool.replicas as usize;
        if r <= 1 {
            return Ok(Vec::new());
        }
        let tx = self.db.begin_read().map_err(meta)?;
        let chunks = tx.open_table(CHUNKS).map_err(meta)?;
        let st = self.st.lock().unwrap();
        let live = |n: &str| self.alive(&st, n);
        // A benefactor never seen since the manager started may still be coming back
        // (it registers at its next refresh): it counts as lost only once the death
        // timeout has passed since the start.
        let lost = |n: &str| match st.bens.get(n) {
            Some(_) => !live(n),
            None => self.started.elapsed() > self.death(),
        };
        // Every copy, grouped by hash: (node, len).
        let mut all: BTreeMap<ChunkHash, Vec<(String, u32)>> = BTreeMap::new();
        for row in chunks.iter().map_err(meta)? {
            let (k, v) = row.map_err(meta)?;
            let Some((h, n)) = k.value().split_once('@') else {
                continue;
            };
            let (Some(h), Ok(rec)) = (ChunkHash::parse(h), serde_json::from_str::<ChunkRec>(v.value()))
            else {
                continue;
            };
            all.entry(h).or_default().push((n.to_string(), rec.len));
        }
        let mut planned: HashMap<String, u64> = HashMap::new();
        let mut jobs = Vec::new();
        for (h, copies) in all {
            let alive: Vec<&String> = copies.iter().map(|(n, _)| n).filter(|n| live(n)).collect();
            let gone: Vec<&String> = copies.iter().map(|(n, _)| n).filter(|n| lost(n)).collect();
            let Some(src) = alive.first() else { continue };
            let missing = r.saturating_sub(alive.len());
            if gone.is_empty() && missing == 0 {
                continue;
            }
            let len = copies[0].1 as u64;
            let holders: BTreeSet<&str> = copies.iter().map(|(n, _)| n.as_str()).collect();
            let mut domains: BTreeSet<String> = alive.iter().map(|n| self.domain_of(n)).collect();
            let mut taken: BTreeSet<String> = BTreeSet::new();
            // Each dead copy replaced; then copies added until r are alive.
            let wanted: Vec<Option<String>> = gone
                .iter()
                .map(|d| Some((*d).clone()))
                .chain(std::iter::repeat_n(None, missing.saturating_sub(gone.len())))
                .collect();
            for dead in wanted {
                let free = |n: &String, b: &super::Ben| {
                    b.mem
                        .saturating_sub(b.used + planned.get(n).copied().unwrap_or(0))
                };
                let best = st
                    .bens
                    .iter()
                    .filter(|(n, b)| {
                        live(n)
                            && b.suspect.is_none()
                            && !holders.contains(n.as_str())
                            && !taken.contains(*n)
                            && free(n, b) >= len
                    })
                    .max_by_key(|(n, b)| {
                        (
                            !domains.contains(&self.domain_of(n)),
                            free(n, b),
                            std::cmp::Reverse((*n).clone()),
                        )
                    })
                    .map(|(n, _)| n.clone());
                let Some(dst) = best else { break };
                *planned.entry(dst.clone()).or_default() += len;
                domains.insert(self.domain_of(&dst));
                taken.insert(dst.clone());
                jobs.push(Job {
                    hash: h.clone(),
                    dead,
                    src: (*src).clone(),
                    dst,
                });
                if jobs.len() >= REPAIR_BATCH {
                    return Ok(jobs);
                }
            }
        }
        Ok(jobs)
    }

    /// Chunk maps short of r live holders take live copies the pool holds already (a
    /// chunk repeated within or across files has copies under several maps): no bytes
    /// move. A dead holder is then left out of a map that has r live ones (its copy's
    /// references drop with it). One transaction; returns the maps changed.
    fn relink(&self) -> Result<usize> {
        let r = self.net.pool.replicas as usize;
        let (alive, known): (BTreeSet<String>, BTreeSet<String>) = {
            let st = self.st.lock().unwrap();
            (
                st.bens.keys().filter(|n| self.alive(&st, n)).cloned().collect(),
                st.bens.keys().cloned().collect(),
            )
        };
        let startup = self.started.elapsed() <= self.death();
        let lost = |n: &String| !alive.contains(n) && (known.contains(n) || !startup);
        let tx = self.db.begin_write().map_err(meta)?;
        let mut changed_maps = 0;
        let mut drops = Vec::new();
        let mut announce = Vec::new();
        {
            let mut chunks = tx.open_table(CHUNKS).map_err(meta)?;
            let mut files = tx.open_table(FILES).map_err(meta)?;
            let mut all = Vec::new();
            for row in files.iter().map_err(meta)? {
                let (p, f) = row.map_err(meta)?;
                all.push((p.value().to_string(), f.value().to_string()));
            }
            for (p, f) in all {
                let mut f: FileRec = serde_json::from_str(&f).map_err(meta)?;
                let mut changed = false;
                for v in f.versions.iter_mut() {
                    let mut only = vec![false; v.chunks.len()];
                    for (i, c) in v.chunks.iter_mut().enumerate() {
                        let holders: Vec<String> = c.holders().cloned().collect();
                        let live: Vec<String> =
                            holders.iter().filter(|n| alive.contains(*n)).cloned().collect();
                        let dead: Vec<String> = holders.iter().filter(|n| lost(n)).cloned().collect();
                        if live.len() >= r && dead.is_empty() {
                            continue;
                        }
                        let mut domains: BTreeSet<String> = live.iter().map(|n| self.domain_of(n)).collect();
                        let mut extra: Vec<(String, ChunkRec)> = copies_of(&chunks, &c.hash)?
                            .into_iter()
                            .filter(|(n, _)| alive.contains(n) && !holders.contains(n))
                            .collect();
                        // Other domains first.
                        extra.sort_by_key(|(n, _)| domains.contains(&self.domain_of(n)));
                        let mut new: Vec<String> = live.clone();
                        for (n, mut rec) in extra {
                            if new.len() >= r {
                                break;
                            }
                            domains.insert(self.domain_of(&n));
                            rec.refs += 1;
                            put_json(&mut chunks, &key(&c.hash, &n), &rec)?;
                            new.push(n);
                        }
                        if new.len() == live.len() && (new.len() < r || dead.is_empty()) {
                            continue;
                        }
                        if new.len() >= r {
                            // Dead holders leave the map.
                            for d in &dead {
                                let k = key(&c.hash, d);
                                if let Some(mut rec) = get_json::<ChunkRec>(&chunks, &k)? {
                                    rec.refs = rec.refs.saturating_sub(1);
                                    if rec.refs == 0 {
                                        chunks.remove(k.as_str()).map_err(meta)?;
                                        drops.push((d.clone(), c.hash.clone()));
                                    } else {
                                        put_json(&mut chunks, &k, &rec)?;
                                    }
                                }
                            }
                        } else {
                            new.extend(dead.iter().cloned());
                        }
                        // Holders neither alive nor lost (not yet registered) stay.
                        for n in holders.iter().filter(|n| !alive.contains(*n) && !lost(n)) {
                            new.push(n.clone());
                        }
                        c.node = new[0].clone();
                        c.also = new[1..].to_vec();
                        only[i] = true;
                    }
                    if only.iter().any(|x| *x) {
                        changed = true;
                        changed_maps += 1;
                        announce.push((p.clone(), v.clone(), only));
                    }
                }
                if changed {
                    put_json(&mut files, &p, &f)?;
                }
            }
        }
        tx.commit().map_err(meta)?;
        self.queue_drops(drops);
        for (p, v, only) in announce {
            self.announce(&p, &v, Some(&only));
        }
        Ok(changed_maps)
    }

    /// Make the copies of one round; returns how many were made.
    pub async fn repair(&self) -> Result<usize> {
        if self.net.pool.replicas <= 1 {
            return Ok(0);
        }
        self.relink()?;
        let jobs = self.repair_jobs()?;
        if jobs.is_empty() {
            return Ok(0);
        }
        let write_id = super::rand_u64();
        self.st.lock().unwrap().open.insert(
            write_id,
            OpenWrite {
                conn: u64::MAX,
                path: String::new(),
            },
        );
        let mut conns = HashMap::new();
        let mut made = Vec::new();
        for (i, j) in jobs.iter().enumerate() {
            match self.copy(&mut conns, write_id, i as u64, j).await {
                Ok(()) => made.push(j.clone()),
                Err(e) => tracing::warn!("pool repair: {} {} -> {}: {e}", j.hash, j.src, j.dst),
            }
        }
        let r = self.record(&made);
        self.st.lock().unwrap().open.remove(&write_id);
        r?;
        if !made.is_empty() {
            tracing::info!("pool repair: {} chunk copies made", made.len());
        }
        Ok(made.len())
    }

    async fn conn<'c>(
        &self,
        conns: &'c mut HashMap<String, ckptfs_transport::Conn>,
        node: &str,
    ) -> Result<&'c mut ckptfs_transport::Conn> {
        if !conns.contains_key(node) {
            let addr = self.st.lock().unwrap().bens.get(node).map(|b| b.addr.clone());
            let addr = addr.ok_or_else(|| PoolError::Config(format!("{node}: not a benefactor")))?;
            let c = self.net.connect(&addr, node).await?;
            conns.insert(node.to_string(), c);
        }
        Ok(conns.get_mut(node).expect("connected"))
    }

    async fn copy(
        &self,
        conns: &mut HashMap<String, ckptfs_transport::Conn>,
        write_id: u64,
        index: u64,
        j: &Job,
    ) -> Result<()> {
        let me = self.net.me.clone();
        let got = get_chunk(self.conn(conns, &j.src).await?, &me, &j.hash).await;
        let data = match got {
            Ok(d) => d,
            Err(e) => {
                conns.remove(&j.src);
                return Err(e);
            }
        };
        if ChunkHash::of(&data) != j.hash {
            return Err(PoolError::Corrupt {
                what: format!("repair source {}", j.src),
                chunk: index,
            });
        }
        let r = put_chunk(
            self.conn(conns, &j.dst).await?,
            &me,
            write_id,
            index,
            &j.hash,
            &data,
        )
        .await;
        if r.is_err() {
            conns.remove(&j.dst);
        }
        r
    }

    /// Record the copies made, in one transaction: a replacing copy takes over the dead
    /// copy's references and chunk maps; an added copy joins every chunk map of its
    /// chunk with fewer than r holders. Then the holders concerned are told the names.
    fn record(&self, made: &[Job]) -> Result<()> {
        if made.is_empty() {
            return Ok(());
        }
        let r = self.net.pool.replicas as usize;
        let alive: BTreeSet<String> = {
            let st = self.st.lock().unwrap();
            st.bens.keys().filter(|n| self.alive(&st, n)).cloned().collect()
        };
        let by: HashMap<(&ChunkHash, &str), &str> = made
            .iter()
            .filter_map(|j| Some(((&j.hash, j.dead.as_deref()?), j.dst.as_str())))
            .collect();
        let mut adds: HashMap<&ChunkHash, Vec<&str>> = HashMap::new();
        for j in made.iter().filter(|j| j.dead.is_none()) {
            adds.entry(&j.hash).or_default().push(j.dst.as_str());
        }
        let tx = self.db.begin_write().map_err(meta)?;
        let mut announce = Vec::new();
        let mut drops = Vec::new();
        {
            let mut chunks = tx.open_table(CHUNKS).map_err(meta)?;
            let mut files = tx.open_table(FILES).map_err(meta)?;
            for j in made {
                let Some(dead) = &j.dead else { continue };
                let Some(mut rec) = get_json::<ChunkRec>(&chunks, &key(&j.hash, dead))? else {
                    continue;
                };
                chunks.remove(key(&j.hash, dead).as_str()).map_err(meta)?;
                drops.push((dead.clone(), j.hash.clone()));
                let nk = key(&j.hash, &j.dst);
                if let Some(old) = get_json::<ChunkRec>(&chunks, &nk)? {
                    rec.refs += old.refs;
                    rec.drained |= old.drained;
                } else {
                    rec.drained = false;
                }
                put_json(&mut chunks, &nk, &rec)?;
            }
            let mut all = Vec::new();
            for row in files.iter().map_err(meta)? {
                let (p, f) = row.map_err(meta)?;
                all.push((p.value().to_string(), f.value().to_string()));
            }
            // Added copies: (hash, node) -> chunk maps that now name it, and a length.
            let mut added: HashMap<(ChunkHash, String), (u64, u32)> = HashMap::new();
            for (p, f) in all {
                let mut f: FileRec = serde_json::from_str(&f).map_err(meta)?;
                let mut changed = false;
                for v in f.versions.iter_mut() {
                    let mut touched = false;
                    for c in v.chunks.iter_mut() {
                        let mut holders: Vec<String> = c.holders().cloned().collect();
                        let mut moved = false;
                        for h in holders.iter_mut() {
                            if let Some(d) = by.get(&(&c.hash, h.as_str())) {
                                *h = d.to_string();
                                moved = true;
                            }
                        }
                        for d in adds.get(&c.hash).into_iter().flatten() {
                            if holders.len() < r && !holders.iter().any(|h| h == d) {
                                holders.push(d.to_string());
                                let e = added.entry((c.hash.clone(), d.to_string())).or_insert((0, c.len));
                                e.0 += 1;
                                moved = true;
                            }
                        }
                        if moved {
                            dedup_in_order(&mut holders);
                            // Live holders first: the first one drains the chunk.
                            holders.sort_by_key(|h| !alive.contains(h));
                            c.node = holders[0].clone();
                            c.also = holders[1..].to_vec();
                            touched = true;
                        }
                    }
                    if touched {
                        changed = true;
                        announce.push((p.clone(), v.clone()));
                    }
                }
                if changed {
                    put_json(&mut files, &p, &f)?;
                }
            }
            for ((h, n), (refs, len)) in added {
                let k = key(&h, &n);
                let rec = match get_json::<ChunkRec>(&chunks, &k)? {
                    Some(mut old) => {
                        old.refs += refs;
                        old
                    }
                    None => ChunkRec {
                        refs,
                        len,
                        drained: false,
                        at_ms: crate::now_ms(),
                    },
                };
                put_json(&mut chunks, &k, &rec)?;
            }
        }
        tx.commit().map_err(meta)?;
        self.queue_drops(drops);
        for (p, v) in announce {
            // Only the chunks that moved need naming again: to the new holder, and to
            // the first holder (which may now be the one to drain it).
            let only: Vec<bool> = v
                .chunks
                .iter()
                .map(|c| {
                    made.iter()
                        .any(|j| j.hash == c.hash && c.holders().any(|n| *n == j.dst))
                })
                .collect();
            self.announce(&p, &v, Some(&only));
        }
        Ok(())
    }
}

fn dedup_in_order(v: &mut Vec<String>) {
    let mut seen = BTreeSet::new();
    v.retain(|x| seen.insert(x.clone()));
}
