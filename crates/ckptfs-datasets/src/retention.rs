//! Retention in memory (`dataset_keep_memory`): datasets beyond the newest `keep_memory`
//! complete ones lose their local copies once a newer one is protected beyond this
//! node's memory; then retention on the PFS (`dataset_keep_pfs`, [`crate::pfs_retention`]).

use crate::error::Result;
use crate::handle::Datasets;
use crate::pfs_copies::pfs_has;
use crate::record::{self, Dataset, State};

impl Datasets {
    /// Retention: in memory (`dataset_keep_memory`), then on the PFS (`dataset_keep_pfs`).
    pub(crate) fn retention_locked(&self) -> Result<()> {
        self.memory_retention_locked()?;
        self.prune_pfs_locked()
    }

    /// Datasets beyond the newest `keep_memory` complete ones lose their local copies
    /// (files whose content is still the dataset's and that no newer dataset holds).
    fn memory_retention_locked(&self) -> Result<()> {
        let k = self.cfg.keep_memory as usize;
        if k == 0 {
            return Ok(());
        }
        let (mut all, _) = record::load_all(&self.store, &self.cfg.job)?;
        let complete: Vec<usize> = (0..all.len())
            .filter(|&i| all[i].state == State::Complete)
            .collect();
        if complete.len() <= k {
            return Ok(());
        }
        let (old, keep) = complete.split_at(complete.len() - k);
        let kept: std::collections::HashSet<String> =
            keep.iter().flat_map(|&i| all[i].files.keys().cloned()).collect();
        // Memory copies go only once a newer dataset is protected beyond this node's
        // memory (partner or PFS level), when such a level exists.
        let Some(safe) = complete.iter().rev().find(|&&i| self.protected(&all[i])).copied() else {
            return Ok(());
        };
        for &i in old {
            if i >= safe {
                break;
            }
            let d = &mut all[i];
            if d.evicted {
                continue;
            }
            self.remove_local(d, &kept);
            d.evicted = true;
            record::save(&self.store, d)?;
        }
        Ok(())
    }

    /// Whether `d` is held beyond this node's memory: on the partner level (cluster) or
    /// on the PFS (a destination given); with neither level configured, every complete
    /// dataset counts as protected.
    fn protected(&self, d: &Dataset) -> bool {
        if let Some(nodes) = self.completion.job_nodes() {
            let mut v = vec![d.clone()];
            nodes.fill_levels(&mut v, &self.cfg.dests);
            return v[0].levels().iter().any(|l| l == "partner" || l == "pfs");
        }
        if self.cfg.dests.is_empty() {
            return true;
        }
        !d.files.is_empty()
            && d.files
                .iter()
                .all(|(p, f)| pfs_has(&self.cfg.dests, p, f.size, f.crc32c))
    }

    pub(crate) fn remove_local(&self, d: &mut Dataset, keep: &std::collections::HashSet<String>) {
        for (path, f) in d.files.iter_mut() {
            f.levels.retain(|l| l != "local");
            if keep.contains(path) {
                continue;
            }
            if let Ok(st) = self.store.stat(path) {
                if st.mtime_ns == f.mtime_ns && st.size == f.size {
                    let _ = self.store.unlink(path);
                }
            }
        }
    }

    /// The datasets the next retention pass would evict from memory (oldest first).
    pub fn next_evictions(&self, all: &[Dataset]) -> Vec<u64> {
        let k = self.cfg.keep_memory as usize;
        if k == 0 {
            return Vec::new();
        }
        let live: Vec<&Dataset> = all
            .iter()
            .filter(|d| d.state == State::Complete && !d.evicted)
            .collect();
        // When one more dataset completes, everything beyond the newest k-1 goes.
        let n = live.len().saturating_sub(k.saturating_sub(1));
        live.iter().take(n).map(|d| d.id).collect()
    }
}
