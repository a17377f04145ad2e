//! The drain's policy when datasets are used: flush every Nth dataset (and those the
//! runtime policy sends to the PFS), not every complete file.
//!
//! [`FlushPolicy`] is a [`MovePolicy`] for the drain engine (`ckptfs_agent::Agent`, used
//! by `ckptfs agent` and by the node daemon's drain through `AgentConfig::policy`). At
//! each scan it reads this node's dataset records of the job (read only: it never
//! settles or writes a record) and routes a complete file of the store to the PFS when:
//!
//! - a complete dataset lists it with this size and mtime and is marked `flush`
//!   (`dataset_flush_every`, or the level decision `pfs`) and its PFS copies were not
//!   pruned (`dataset_keep_pfs`);
//! - no dataset lists it, no open dataset of this node may still take it (modified at
//!   or after an open part's `begin`), and it is not under a transparent dataset
//!   directory (`dataset_pattern`): then the fallback policy (`--every`/`--evict`)
//!   decides, as without datasets.
//!
//! Files of datasets not marked `flush`, open, invalid or incomplete stay in memory. A
//! file modified after the records were read is left for the next scan, so a dataset
//! begun between the snapshot and the listing cannot lose a file to the drain.

use crate::config::glob_match;
use crate::record::{self, Dataset, State};
use ckptfs_agent::mover::{Candidate, DrainPolicy, MovePolicy};
use ckptfs_level::LevelKind;
use ckptfs_settings::now_ns;
use ckptfs_store::{Store, StoreOptions};
use std::collections::HashMap;
use std::sync::Mutex;

/// What the records say about one store path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// A complete dataset marked for flush holds this version.
    Flush,
    /// A dataset holds this version but it is not to be flushed (not marked, pruned,
    /// invalid, incomplete, still open).
    Keep,
}

#[derive(Debug, Default)]
struct Snapshot {
    /// When the records were read (the node's clock, as the store's mtimes).
    taken_ns: u64,
    /// Per path, the datasets' versions: (size, mtime_ns, verdict).
    files: HashMap<String, Vec<(u64, u64, Verdict)>>,
    /// The earliest `begin` of a part still open on this node (None: nothing open).
    open_since: Option<u64>,
    /// Records could not be read: keep everything this pass.
    unreadable: bool,
}

/// Drain only the datasets marked for flush (see the module documentation).
pub struct FlushPolicy {
    opts: StoreOptions,
    job: String,
    pattern: Option<String>,
    fallback: DrainPolicy,
    store: Mutex<Option<Store>>,
    snap: Mutex<Snapshot>,
}

impl std::fmt::Debug for FlushPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlushPolicy")
            .field("store", &self.opts.name)
            .field("job", &self.job)
            .field("pattern", &self.pattern)
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl FlushPolicy {
    /// The policy for the datasets of `job` in the store `opts` names (attached at the
    /// first scan: a daemon may start before the store exists), transparent datasets
    /// under `pattern`; files outside datasets follow `fallback`.
    pub fn new(opts: StoreOptions, job: &str, pattern: Option<String>, fallback: DrainPolicy) -> FlushPolicy {
        FlushPolicy {
            opts,
            job: job.to_string(),
            pattern,
            fallback,
            store: Mutex::new(None),
            snap: Mutex::new(Snapshot::default()),
        }
    }

    fn load(&self) -> Snapshot {
        let taken_ns = now_ns();
        let mut st = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if st.is_none() {
            *st = Store::attach(&self.opts).ok();
        }
        let Some(store) = st.as_ref() else {
            return Snapshot {
                taken_ns,
                unreadable: true,
                ..Default::default()
            };
        };
        match record::load_all(store, &self.job) {
            Ok((all, _bad)) => snapshot(&all, taken_ns),
            Err(e) => {
                tracing::warn!(job = %self.job, error = %e, "cannot read the dataset records; nothing drained this pass");
                Snapshot {
                    taken_ns,
                    unreadable: true,
                    ..Default::default()
                }
            }
        }
    }

    fn under_pattern(&self, path: &str) -> bool {
        let Some(pat) = &self.pattern else {
            return false;
        };
        let mut dir = path;
        while let Some((parent, _)) = dir.rsplit_once('/') {
            if parent.is_empty() {
                break;
            }
            if glob_match(pat, parent) {
                return true;
            }
            dir = parent;
        }
        false
    }
}

/// The snapshot of a job's records taken at `taken_ns`.
fn snapshot(all: &[Dataset], taken_ns: u64) -> Snapshot {
    let mut s = Snapshot {
        taken_ns,
        ..Default::default()
    };
    for d in all {
        let verdict = if d.state == State::Complete && d.flush && !d.pfs_pruned {
            Verdict::Flush
        } else {
            Verdict::Keep
        };
        for (p, f) in &d.files {
            s.files
                .entry(p.clone())
                .or_default()
                .push((f.size, f.mtime_ns, verdict));
        }
        if d.state == State::Open {
            let open = d
                .parts
                .values()
                .filter(|p| p.state == State::Open)
                .map(|p| p.begun_ns);
            let since = open.min().unwrap_or(d.created_ns);
            s.open_since = Some(s.open_since.map_or(since, |o| o.min(since)));
        }
    }
    s
}

impl MovePolicy for FlushPolicy {
    fn refresh(&self) {
        let s = self.load();
        *self.snap.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    fn route(&self, from: LevelKind, c: &Candidate<'_>) -> Option<LevelKind> {
        if from != LevelKind::Local {
            return None;
        }
        let s = self.snap.lock().unwrap_or_else(|e| e.into_inner());
        if s.unreadable || c.mtime_ns >= s.taken_ns {
            return None;
        }
        if let Some(versions) = s.files.get(c.path) {
            // The newest dataset listing this version decides (records are in id order).
            if let Some(v) = versions
                .iter()
                .rev()
                .find(|(size, mtime, _)| *size == c.size && *mtime == c.mtime_ns)
            {
                return (v.2 == Verdict::Flush).then_some(LevelKind::Pfs);
            }
        }
        if s.open_since.is_some_and(|t| c.mtime_ns >= t) || self.under_pattern(c.path) {
            return None;
        }
        self.fallback.route(from, c)
    }

    fn release_source(&self, from: LevelKind, to: LevelKind) -> bool {
        self.fallback.release_source(from, to)
    }
}
