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

use crate::level_policy::{LevelPolicy, Lookup};
use crate::record::{Dataset, State};
use ckptfs_store::StoreOptions;

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

/// The partner-copy rule for the datasets of one job (see the module documentation).
#[derive(Debug)]
pub struct PartnerPolicy {
    records: LevelPolicy<CopyVerdict>,
    /// Follow each decision's level (`decision`), else copy every complete dataset.
    adaptive: bool,
    /// The cluster protects complete datasets with erasure sets (`[redundancy]
    /// erasure`): their files get no partner copies (the set's parity replaces them).
    erasure: bool,
}

/// The verdict of a complete dataset's decision on its files: with `adaptive`
/// (`dataset_partner_copies = decision`) the decision's level; else every complete
/// dataset is copied (protected beyond its node, the default).
pub(crate) fn decided(d: &Dataset, adaptive: bool) -> CopyVerdict {
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

/// The partner copies' rule for one dataset.
fn copy_rule(d: &Dataset, adaptive: bool, erasure: bool) -> CopyVerdict {
    match d.state {
        State::Complete if erasure => CopyVerdict::Skip,
        State::Complete => decided(d, adaptive),
        State::Open => CopyVerdict::Hold,
        State::Invalid | State::Incomplete => CopyVerdict::Copy,
    }
}

impl PartnerPolicy {
    /// The rule for the datasets of `job` in the store `opts` names (attached at the
    /// first scan: the daemon may start before the store exists).
    pub fn new(opts: StoreOptions, job: &str) -> PartnerPolicy {
        PartnerPolicy {
            records: LevelPolicy::new(opts, job, "partner"),
            adaptive: true,
            erasure: false,
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
        let (adaptive, erasure) = (self.adaptive, self.erasure);
        self.records.refresh(|d| copy_rule(d, adaptive, erasure));
    }

    /// The verdict on the complete file `path` of `size` bytes modified at `mtime_ns`
    /// (the store's clock), from the records read by the last [`Self::refresh`].
    pub fn verdict(&self, path: &str, size: u64, mtime_ns: u64) -> CopyVerdict {
        match self.records.lookup(path, size, mtime_ns) {
            Lookup::Unreadable | Lookup::Changed | Lookup::MayBeTaken => CopyVerdict::Hold,
            // No record of the job: every complete file at once, as without datasets.
            Lookup::NoRecords { .. } | Lookup::Unlisted => CopyVerdict::Copy,
            Lookup::Listed(v) => v,
        }
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
        assert_eq!(copy_rule(&d, false, false), CopyVerdict::Copy);
        assert_eq!(copy_rule(&d, true, false), CopyVerdict::Skip);
        // With erasure sets the set's parity protects it instead of a partner copy.
        assert_eq!(copy_rule(&d, false, true), CopyVerdict::Skip);
    }
}
