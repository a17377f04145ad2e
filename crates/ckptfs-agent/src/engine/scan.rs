//! Scanning the store for complete files the policy sends to the PFS (FIFO: oldest
//! completed checkpoint first), skipping what is already published and unchanged.

use super::{lock, parent_of, Fp, Item, Shared};
use crate::error::AgentError;
use crate::mover::Candidate;
use ckptfs_level::LevelKind;
use ckptfs_store::level::crcs_from_chunks;
use ckptfs_store::{FileKind, Stat, WriteState};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

impl Shared {
    pub(super) fn scan(&self) {
        // The policy's snapshot first: a file listed below that changed after it is
        // the policy's to defer.
        self.policy.refresh();
        let all = self.store.list_all();
        let now = Instant::now();
        // Checkpoint directories (parents of files) get ordinals in creation order.
        let dir_ctime: HashMap<&str, u64> = all
            .iter()
            .filter(|(_, st)| st.kind == FileKind::Dir)
            .map(|(p, st)| (p.as_str(), st.ctime_ns))
            .collect();
        {
            let mut s = lock(&self.state);
            let mut new_dirs: Vec<(u64, String)> = all
                .iter()
                .filter(|(_, st)| st.kind == FileKind::File)
                .map(|(p, _)| parent_of(p))
                .filter(|d| !s.st.dirs.contains_key(*d))
                .collect::<HashSet<_>>()
                .into_iter()
                .map(|d| (dir_ctime.get(d).copied().unwrap_or(0), d.to_string()))
                .collect();
            new_dirs.sort();
            let mut next = s.st.dirs.values().max().copied().unwrap_or(0);
            for (_, d) in new_dirs {
                next += 1;
                s.st.dirs.insert(d, next);
            }
        }
        let mut cands: Vec<(u64, Item)> = Vec::new();
        for (path, st) in &all {
            if st.kind != FileKind::File || st.state != WriteState::Complete {
                continue;
            }
            let fp = Fp::of(st);
            {
                let mut s = lock(&self.state);
                if s.in_flight.contains_key(path)
                    || s.queue.iter().any(|i| &i.path == path)
                    || s.drained.get(path) == Some(&fp)
                {
                    continue;
                }
                if let Some(f) = s.failed.get(path) {
                    if f.fp == fp && f.retry_at.is_none_or(|t| now < t) {
                        continue;
                    }
                }
                let ord = s.st.dirs.get(parent_of(path)).copied().unwrap_or(1);
                let cand = Candidate {
                    path,
                    size: st.size,
                    mtime_ns: st.mtime_ns,
                    dir_ordinal: ord,
                };
                if self.policy.route(LevelKind::Local, &cand) != Some(LevelKind::Pfs) {
                    s.skipped.insert(path.clone());
                    continue;
                }
                s.skipped.remove(path);
            }
            match self.already_published(path, st) {
                Ok(true) => {
                    let mut s = lock(&self.state);
                    s.drained.insert(path.clone(), fp);
                    s.failed.remove(path);
                    s.st.already_drained += 1;
                    continue;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(%path, error = %e, "cannot read the destination manifest"),
            }
            cands.push((
                st.mtime_ns,
                Item {
                    path: path.clone(),
                    fp,
                },
            ));
        }
        // FIFO: oldest completed checkpoint first.
        cands.sort_by(|a, b| (a.0, &a.1.path).cmp(&(b.0, &b.1.path)));
        lock(&self.state).queue.extend(cands.into_iter().map(|(_, i)| i));
    }

    fn already_published(&self, path: &str, st: &Stat) -> Result<bool, AgentError> {
        let Some((e, there)) = self.pfs.published(path)? else {
            return Ok(false);
        };
        if e.size != st.size || e.store_path != path {
            return Ok(false);
        }
        let chunks = self.store.chunk_list(path)?;
        let Some((crc, _)) = crcs_from_chunks(st.size, self.cs, &chunks) else {
            return Ok(false);
        };
        Ok(crc == e.crc32c && there)
    }
}
