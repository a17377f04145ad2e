//! The handle on one job's datasets in one node store ([`Datasets`]), with what every
//! other module of the crate builds on: the per-store lock (an `flock` on a file in the
//! caller's runtime directory, released by the kernel when a holder is SIGKILLed), a new
//! record, closing a record. The operations are added by the modules above this one
//! (`ops`: begin, complete, list; `restart`; the job-wide rules; the policy).

use crate::completion::Completion;
use crate::config::Config;
use crate::error::{DatasetError, Result};
use crate::record::{self, Dataset, State, FORMAT};
use ckptfs_settings::now_ns;
use ckptfs_store::Store;
use std::collections::BTreeMap;

/// The datasets of one job in one node store.
pub struct Datasets {
    pub(crate) store: Store,
    pub(crate) cfg: Config,
    pub(crate) completion: Box<dyn Completion + Send + Sync>,
    /// The levels a restart reads, in order (the settings' `[levels]` section).
    pub(crate) order: ckptfs_level::ReadOrder,
}

/// The per-store lock; dropped = released.
pub(crate) struct Lock(#[allow(dead_code)] std::fs::File);

/// The name of store `store`'s dataset lock file in the caller's runtime directory.
fn lock_name(store: &str) -> String {
    format!("datasets.{store}.lock")
}

/// Remove store `store_name`'s dataset lock file from the caller's runtime directory
/// (after destroying the store), unless a process holds it now. A holder is given up
/// to 200 ms to let go: a child that another thread of this program is starting holds
/// an inherited copy of a lock descriptor from its fork until its exec closes it
/// (descriptors are close-on-exec), and that is no user of the lock.
pub fn remove_lock(store_name: &str) {
    if let Ok(dir) = ckptfs_runtime::RuntimeDir::for_caller() {
        let name = lock_name(store_name);
        for _ in 0..40 {
            if !dir.is_locked(&name) {
                let _ = dir.remove(&name);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Take store `store_name`'s dataset lock (held until the result is dropped).
pub(crate) fn lock_store(store_name: &str) -> Result<Lock> {
    let rt = ckptfs_runtime::RuntimeDir::for_caller()?;
    let name = lock_name(store_name);
    let f = rt.open_file(&name, libc::O_CREAT | libc::O_RDWR)?;
    f.lock().map_err(|source| DatasetError::Lock {
        path: rt.file_path(&name).display().to_string(),
        source,
    })?;
    Ok(Lock(f))
}

/// Store `store_name`'s dataset lock if no one holds it now (None: held).
pub(crate) fn try_lock_store(store_name: &str) -> Result<Option<Lock>> {
    let rt = ckptfs_runtime::RuntimeDir::for_caller()?;
    let name = lock_name(store_name);
    let f = rt.open_file(&name, libc::O_CREAT | libc::O_RDWR)?;
    match f.try_lock() {
        Ok(()) => Ok(Some(Lock(f))),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(source)) => Err(DatasetError::Lock {
            path: rt.file_path(&name).display().to_string(),
            source,
        }),
    }
}

impl Datasets {
    /// The datasets of `cfg.job` in `store`, agreement by `completion`.
    pub fn new(store: Store, cfg: Config, completion: Box<dyn Completion + Send + Sync>) -> Datasets {
        Datasets {
            store,
            cfg,
            completion,
            order: ckptfs_level::ReadOrder::default(),
        }
    }

    /// Read the levels of `order` at restart (the settings' `[levels]` section, its
    /// registry levels opened by the front-end): after the node store (and the partners
    /// across nodes), each step in turn, the drain destinations where `pfs` is listed.
    /// Without it: local, partner, pfs, as before the section existed.
    pub fn with_levels(mut self, order: ckptfs_level::ReadOrder) -> Datasets {
        self.order = order;
        self
    }

    /// The read order a restart walks.
    pub fn levels(&self) -> &ckptfs_level::ReadOrder {
        &self.order
    }

    /// Single-node datasets ([`crate::SingleNode`]).
    pub fn single_node(store: Store, cfg: Config) -> Datasets {
        Self::new(store, cfg, Box::new(crate::SingleNode))
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn lock(&self) -> Result<Lock> {
        lock_store(self.store.name())
    }

    pub(crate) fn new_record(&self, id: u64, name: &str, dir: Option<String>) -> Dataset {
        Dataset {
            format: FORMAT.into(),
            id,
            name: name.to_string(),
            job: self.cfg.job.clone(),
            state: State::Open,
            reason: None,
            created_ns: now_ns(),
            closed_ns: None,
            parts_expected: if dir.is_some() { 1 } else { self.cfg.world },
            parts: BTreeMap::new(),
            dir,
            files: BTreeMap::new(),
            decision: None,
            flush: false,
            evicted: false,
            node: self.completion.job_nodes().map(|c| c.me().to_string()),
            local_expected: self
                .completion
                .job_nodes()
                .map(|c| self.cfg.local_ranks(c.nodes().len())),
            node_done: false,
            nodes: BTreeMap::new(),
            pfs_pruned: false,
        }
    }

    pub(crate) fn close(&self, d: &mut Dataset, state: State, reason: Option<String>) -> Result<()> {
        d.state = state;
        d.reason = reason;
        d.closed_ns = Some(now_ns());
        record::save(&self.store, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock file goes with the store once nobody holds it: a holder that lets go within
    /// the grace (as a child between its fork and exec does) does not keep it; one that
    /// goes on holding it does.
    #[test]
    fn remove_lock_waits_out_a_brief_holder_and_keeps_a_held_lock() {
        let name = format!("hd-rmlock-{}", std::process::id());
        let lock = lock_name(&name);
        let dir = ckptfs_runtime::RuntimeDir::for_caller().unwrap();
        let held = dir.lock(&lock).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(held);
        });
        remove_lock(&name);
        t.join().unwrap();
        assert!(!dir.file_path(&lock).exists(), "removed after the holder let go");
        let held = dir.lock(&lock).unwrap();
        remove_lock(&name);
        assert!(dir.file_path(&lock).exists(), "a held lock is kept");
        drop(held);
        remove_lock(&name);
        assert!(!dir.file_path(&lock).exists());
    }
}
