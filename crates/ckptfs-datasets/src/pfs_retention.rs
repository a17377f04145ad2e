//! `dataset_keep_pfs = M`: only the newest M datasets whose files are all on the PFS
//! keep their PFS copies. Older ones lose them: each file's entry is dropped from the
//! drain manifest that lists it (same store path, size and CRC32C; the manifest is
//! replaced atomically with the agent's own writer), then the file is removed. Their
//! records stay, `pfs_pruned: true`.
//!
//! A drain agent that still holds the directory's manifest in memory could write the
//! entry back when it publishes another file into the same directory; restart then
//! finds the file missing, the checked restore fails and the dataset is skipped for the
//! next older one (safe, never wrong bytes). Datasets in directories of their own (the
//! usual `/ckpt/stepN/`) are not written into again.

use crate::error::Result;
use crate::handle::Datasets;
use crate::pfs_copies::{pfs_has, remove_copies};
use crate::record::{self, Dataset, State};

impl Datasets {
    /// Complete datasets wholly on the PFS and not pruned, oldest first.
    fn on_pfs<'a>(&self, all: &'a [Dataset]) -> Vec<&'a Dataset> {
        all.iter()
            .filter(|d| d.state == State::Complete && !d.pfs_pruned && !d.files.is_empty())
            .filter(|d| {
                d.files
                    .iter()
                    .all(|(p, f)| pfs_has(&self.cfg.dests, p, f.size, f.crc32c))
            })
            .collect()
    }

    /// The datasets beyond the newest `keep_pfs` wholly on the PFS, plus `ahead` more
    /// (oldest first).
    fn pfs_beyond(&self, all: &[Dataset], ahead: usize) -> Vec<u64> {
        let m = self.cfg.keep_pfs as usize;
        if m == 0 || self.cfg.dests.is_empty() {
            return Vec::new();
        }
        let on = self.on_pfs(all);
        let n = on.len().saturating_sub(m.saturating_sub(ahead));
        on.iter().take(n).map(|d| d.id).collect()
    }

    /// The datasets whose PFS copies are removed when the next dataset reaches the PFS
    /// (oldest first), for `ckpt list`.
    pub fn next_pfs_prunes(&self, all: &[Dataset]) -> Vec<u64> {
        self.pfs_beyond(all, 1)
    }

    /// Apply `dataset_keep_pfs`. Called with the lock held (after a completion and at
    /// every look).
    pub(crate) fn prune_pfs_locked(&self) -> Result<()> {
        let (mut all, _) = record::load_all(&self.store, &self.cfg.job)?;
        let ids = self.pfs_beyond(&all, 0);
        for d in all.iter_mut().filter(|d| ids.contains(&d.id)) {
            for (p, f) in d.files.iter_mut() {
                remove_copies(&self.cfg.dests, p, f.size, f.crc32c);
                f.levels.retain(|l| l != "pfs");
            }
            d.pfs_pruned = true;
            record::save(&self.store, d)?;
        }
        Ok(())
    }
}
