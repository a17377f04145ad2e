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
use crate::level_policy::{LevelPolicy, Lookup};
use crate::record::{Dataset, State};
use ckptfs_agent::mover::{Candidate, DrainPolicy, MovePolicy};
use ckptfs_level::LevelKind;
use ckptfs_store::StoreOptions;

/// What the records say about one version for the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// A complete dataset marked for flush holds this version.
    Flush,
    /// A dataset holds this version but it is not to be flushed (not marked, pruned,
    /// invalid, incomplete, still open).
    Keep,
}

/// The drain's rule for one dataset.
fn flush_rule(d: &Dataset) -> Verdict {
    if d.state == State::Complete && d.flush && !d.pfs_pruned {
        Verdict::Flush
    } else {
        Verdict::Keep
    }
}

/// Drain only the datasets marked for flush (see the module documentation).
#[derive(Debug)]
pub struct FlushPolicy {
    records: LevelPolicy<Verdict>,
    pattern: Option<String>,
    fallback: DrainPolicy,
}

impl FlushPolicy {
    /// The policy for the datasets of `job` in the store `opts` names (attached at the
    /// first scan: a daemon may start before the store exists), transparent datasets
    /// under `pattern`; files outside datasets follow `fallback`.
    pub fn new(opts: StoreOptions, job: &str, pattern: Option<String>, fallback: DrainPolicy) -> FlushPolicy {
        FlushPolicy {
            records: LevelPolicy::new(opts, job, "pfs"),
            pattern,
            fallback,
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

impl MovePolicy for FlushPolicy {
    fn refresh(&self) {
        self.records.refresh(flush_rule);
    }

    fn route(&self, from: LevelKind, c: &Candidate<'_>) -> Option<LevelKind> {
        if from != LevelKind::Local {
            return None;
        }
        match self.records.lookup(c.path, c.size, c.mtime_ns) {
            Lookup::Listed(v) => (v == Verdict::Flush).then_some(LevelKind::Pfs),
            Lookup::Unreadable
            | Lookup::Changed
            | Lookup::NoRecords { changed: true }
            | Lookup::MayBeTaken => None,
            Lookup::NoRecords { changed: false } | Lookup::Unlisted => {
                if self.under_pattern(c.path) {
                    None
                } else {
                    self.fallback.route(from, c)
                }
            }
        }
    }

    fn release_source(&self, from: LevelKind, to: LevelKind) -> bool {
        self.fallback.release_source(from, to)
    }
}
