//! Which complete files the node daemon copies to its partners when datasets are used:
//! the runtime level decision is honoured (docs/datasets.md, "Partner copies follow the
//! decision").
//!
//! [`PartnerPolicy`] is read by the node daemon's partner-copy scan (crate
//! `ckptfs-node`). At each scan it reads this node's dataset records of the job (read
//! only) and answers, per complete file version (size and mtime):
//!
//! - the newest dataset listing this version is **complete** with a level decision:
//!   copied when the decision is `partner`, or when the partner level was not on offer
//!   (no copy time measured yet: copies are how it gets measured); **not copied** when
//!   the partner level was on offer and the decision is `local` (memory only) or `pfs`;
//! - it is listed by an **open** dataset, or no dataset lists it yet but an open part of
//!   this node may still take it (modified at or after that part's `begin`, or after
//!   the open record was created): **held** until the dataset is decided;
//! - listed by an invalid or incomplete dataset, or by none and no open part may take
//!   it: copied (as without datasets);
//! - modified after the records were read: held until the next scan (a `begin` between
//!   the read and the listing cannot lose a file to an early copy).
//!
//! With no record of the job at all, every complete file is copied at once, exactly as
//! without datasets. A decision that arrives after a copy was made keeps that copy (it
//! is a valid extra level; the levels record lists it, restart may use it); only copies
//! not yet made are skipped. A file rewritten for a later dataset is judged again.

use crate::record::{self, Dataset, State};
use ckptfs_settings::now_ns;
use ckptfs_store::{Store, StoreOptions};
use std::collections::HashMap;
use std::sync::Mutex;

/// What the records say about a file version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyVerdict {
    /// Copy it to the partners.
    Copy,
    /// Not now: its dataset is open (or may still take it), or it changed after the
    /// records were read.
    Hold,
    /// Never for this version: its dataset's decision excludes the partner level.
    Skip,
}

#[derive(Debug, Default)]
struct Snapshot {
    taken_ns: u64,
    /// Any record of the job at all (else: copy everything, as without datasets).
    any: bool,
    /// Per path: (size, mtime_ns, verdict) of every dataset listing it, oldest first.
    files: HashMap<String, Vec<(u64, u64, CopyVerdict)>>,
    /// The earliest begin of a part (or creation of a record) still open on this node.
    open_since: Option<u64>,
    /// The records could not be read: hold everything this scan.
    unreadable: bool,
}

/// The partner-copy rule for the datasets of one job (see the module documentation).
pub struct PartnerPolicy {
    opts: StoreOptions,
    /// Follow each decision's level (`decision`), else copy every complete dataset.
    adaptive: bool,
    /// The cluster protects complete datasets with erasure sets (`[redundancy]
    /// erasure`): their files get no partner copies (the set's parity replaces them).
    erasure: bool,
    job: String,
    store: Mutex<Option<Store>>,
    snap: Mutex<Snapshot>,
}

impl std::fmt::Debug for PartnerPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartnerPolicy")
            .field("store", &self.opts.name)
            .field("job", &self.job)
            .finish()
    }
}

/// The verdict of a complete dataset's decision on its files: with `adaptive`
/// (`dataset_partner_copies = decision`) the decision's level; else every complete
/// dataset is copied (protected beyond its node, the default).
fn decided(d: &Dataset, adaptive: bool) -> CopyVerdict {
    if !adaptive {
        return CopyVerdict::Copy;
    }
    match &d.decision {
        Some(dec) if dec.level != "partner" && dec.measured.as_ref().is_some_and(|m| m.partner) => {
            CopyVerdict::Skip
        }
        _ => CopyVerdict::Copy,
    }
}

fn snapshot(all: &[Dataset], taken_ns: u64, adaptive: bool, erasure: bool) -> Snapshot {
    let mut s = Snapshot {
        taken_ns,
        any: !all.is_empty(),
        ..Default::default()
    };
    for d in all {
        let verdict = match d.state {
            State::Complete if erasure => CopyVerdict::Skip,
            State::Complete => decided(d, adaptive),
            State::Open => CopyVerdict::Hold,
            State::Invalid | State::Incomplete => CopyVerdict::Copy,
        };
        for (p, f) in &d.files {
            s.files
                .entry(p.clone())
                .or_default()
                .push((f.size, f.mtime_ns, verdict));
        }
        if d.state == State::Open {
            let since = d
                .parts
                .values()
                .filter(|p| p.state == State::Open)
                .map(|p| p.begun_ns)
                .min()
                .unwrap_or(d.created_ns)
                .min(d.created_ns);
            s.open_since = Some(s.open_since.map_or(since, |o| o.min(since)));
        }
    }
    s
}

impl PartnerPolicy {
    /// The rule for the datasets of `job` in the store `opts` names (attached at the
    /// first scan: the daemon may start before the store exists).
    pub fn new(opts: StoreOptions, job: &str) -> PartnerPolicy {
        PartnerPolicy {
            opts,
            adaptive: true,
            erasure: false,
            job: job.to_string(),
            store: Mutex::new(None),
            snap: Mutex::new(Snapshot::default()),
        }
    }

    /// Whether a complete dataset is copied only when its level decision says
    /// `partner` (`dataset_partner_copies = decision`, REMEM's adaptive choice) or
    /// always (`complete`, the default: every complete dataset protected beyond its
    /// node). [`Self::new`] follows the decisions.
    pub fn adaptive(mut self, adaptive: bool) -> PartnerPolicy {
        self.adaptive = adaptive;
        self
    }

    /// The cluster protects complete datasets with erasure sets (issue 32: `--redundancy
    /// xor|rs:K` instead of `partner:K`): their files are not copied to partners; files
    /// of no dataset still are.
    pub fn erasure(mut self, on: bool) -> PartnerPolicy {
        self.erasure = on;
        self
    }

    /// Read the records again (once per scan, before the store is listed).
    pub fn refresh(&self) {
        let taken_ns = now_ns();
        let mut st = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if st.is_none() {
            *st = Store::attach(&self.opts).ok();
        }
        let s = match st.as_ref().map(|s| record::load_all(s, &self.job)) {
            // No store yet: nothing to copy either.
            None => Snapshot {
                taken_ns,
                ..Default::default()
            },
            Some(Ok((all, _bad))) => snapshot(&all, taken_ns, self.adaptive, self.erasure),
            Some(Err(e)) => {
                tracing::warn!(job = %self.job, error = %e, "cannot read the dataset records; no partner copies this scan");
                Snapshot {
                    taken_ns,
                    unreadable: true,
                    ..Default::default()
                }
            }
        };
        *self.snap.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    /// The verdict on the complete file `path` of `size` bytes modified at `mtime_ns`
    /// (the store's clock), from the records read by the last [`Self::refresh`].
    pub fn verdict(&self, path: &str, size: u64, mtime_ns: u64) -> CopyVerdict {
        let s = self.snap.lock().unwrap_or_else(|e| e.into_inner());
        if s.unreadable {
            return CopyVerdict::Hold;
        }
        if !s.any {
            return CopyVerdict::Copy;
        }
        if mtime_ns >= s.taken_ns {
            return CopyVerdict::Hold;
        }
        if let Some(v) = s
            .files
            .get(path)
            .and_then(|v| v.iter().rev().find(|(sz, mt, _)| *sz == size && *mt == mtime_ns))
        {
            return v.2;
        }
        if s.open_since.is_some_and(|t| mtime_ns >= t) {
            return CopyVerdict::Hold;
        }
        CopyVerdict::Copy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{DecisionRec, FileRec, FORMAT};
    use std::collections::BTreeMap;

    fn decided_local() -> Dataset {
        Dataset {
            format: FORMAT.into(),
            id: 1,
            name: "s".into(),
            job: "j".into(),
            state: State::Complete,
            reason: None,
            created_ns: 1,
            closed_ns: Some(2),
            parts_expected: 1,
            parts: BTreeMap::new(),
            dir: None,
            files: [(
                "/c/a".to_string(),
                FileRec {
                    size: 10,
                    crc32c: 7,
                    mtime_ns: 1,
                    levels: vec!["local".into()],
                },
            )]
            .into(),
            decision: Some(DecisionRec {
                level: "local".into(),
                reason: "local has the lowest expected overhead".into(),
                input: serde_json::Value::Null,
                estimates: BTreeMap::new(),
                rule: "posterior".into(),
                p_source: 0.0,
                alarm: false,
                measured: Some(crate::measured::Measured {
                    partner: true,
                    ..Default::default()
                }),
            }),
            flush: false,
            evicted: false,
            node: None,
            local_expected: None,
            node_done: true,
            nodes: BTreeMap::new(),
            pfs_pruned: false,
        }
    }

    /// The default protects every complete dataset beyond its node; only the explicit
    /// adaptive choice (`dataset_partner_copies = decision`) leaves one decided `local`
    /// (with the partner level on offer) node-local.
    #[test]
    fn a_dataset_decided_local_is_copied_by_default_and_skipped_only_when_adaptive() {
        let d = decided_local();
        let s = snapshot(std::slice::from_ref(&d), 10, false, false);
        assert_eq!(s.files["/c/a"][0].2, CopyVerdict::Copy);
        let s = snapshot(std::slice::from_ref(&d), 10, true, false);
        assert_eq!(s.files["/c/a"][0].2, CopyVerdict::Skip);
        // With erasure sets the set's parity protects it instead of a partner copy.
        let s = snapshot(std::slice::from_ref(&d), 10, false, true);
        assert_eq!(s.files["/c/a"][0].2, CopyVerdict::Skip);
    }
}
