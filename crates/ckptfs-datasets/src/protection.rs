//! Which protection beyond its node a dataset gets: the runtime level policy's choice
//! (its `decision`: `local` in memory only, REMEM's choice when a failure is unlikely;
//! `partner`; `pfs`) as `dataset_partner_copies` applies it, and the dataset's `flush`
//! mark. What `ckptfs ls -l`, `ckptfs ls --json`, `ckptfs status --json`, `ckptfs ckpt
//! list` and Python's `ckptfs.torch.list_checkpoints` show for a dataset and its files
//! (docs/datasets.md, "Partner copies follow the decision").
//!
//! This says what the node daemon and the drain are told to do with the dataset, read
//! from its record; the levels that hold each file now are the levels record's
//! ([`crate::levels_record::LevelsView`]).

use crate::config::Config;
use crate::partner_policy::{decided, CopyVerdict};
use crate::record::{self, Dataset, State};
use ckptfs_store::{Stat, Store};
use serde::Serialize;
use std::collections::HashMap;

/// The `dataset_partner_copies` setting: which complete datasets the node daemon copies
/// to its partners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PartnerCopies {
    /// Every complete dataset (the default): protected beyond its node whatever the
    /// policy's level.
    Complete,
    /// Only datasets the adaptive policy decided `partner` (or decided while the partner
    /// level was not on offer): one decided `local` stays node-local by that choice.
    Decision,
    /// Every complete file at once, datasets or not.
    All,
    /// The cluster protects complete datasets with erasure sets (`[redundancy] erasure`,
    /// issue 32): the set's parity instead of partner copies.
    Erasure,
}

impl PartnerCopies {
    /// The mode a dataset configuration sets.
    pub fn of(cfg: &Config) -> PartnerCopies {
        match (cfg.partner_copies_follow_decision, cfg.partner_copies_adaptive) {
            (false, _) => PartnerCopies::All,
            (true, true) => PartnerCopies::Decision,
            (true, false) => PartnerCopies::Complete,
        }
    }

    /// The setting's value.
    pub fn name(self) -> &'static str {
        match self {
            PartnerCopies::Complete => "complete",
            PartnerCopies::Decision => "decision",
            PartnerCopies::All => "all",
            PartnerCopies::Erasure => "erasure",
        }
    }
}

/// The runtime level policy's choice for a dataset, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyChoice {
    /// `local`, `partner` (or `erasure`, the node's erasure set) or `pfs`.
    pub level: String,
    /// Why, with the estimates and inputs (the record's `decision.reason`).
    pub reason: String,
}

/// The protection of one dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Protection {
    /// Dataset id.
    pub id: u64,
    /// Dataset name.
    pub name: String,
    /// Its job.
    pub job: String,
    /// Its state (`open`, `complete`, `incomplete`, `invalid`).
    pub state: &'static str,
    /// The levels its files are meant to reach: `local` (this node's memory), then
    /// `partner` (copies on partner nodes) and `pfs` (marked `flush`: the drain writes
    /// it to the PFS). Empty while the dataset is open.
    pub chosen: Vec<String>,
    /// Short form for listings: `partner`, `partner+pfs`, `pfs`, `local` (node-local),
    /// `open`, `incomplete`, `invalid`.
    pub short: String,
    /// The policy's choice, when one was recorded.
    pub policy: Option<PolicyChoice>,
    /// Node-local by the policy's choice (`dataset_partner_copies = decision`, decided
    /// `local` with the partner level on offer, not flushed).
    pub node_local_by_choice: bool,
    /// The `dataset_partner_copies` setting applied.
    pub partner_copies: PartnerCopies,
    /// One sentence: which protection and why.
    pub note: String,
}

/// The protection of dataset `d` under `mode`.
pub fn of(d: &Dataset, mode: PartnerCopies) -> Protection {
    let policy = d.decision.as_ref().map(|x| PolicyChoice {
        level: x.level.clone(),
        reason: x.reason.clone(),
    });
    let mut p = Protection {
        id: d.id,
        name: d.name.clone(),
        job: d.job.clone(),
        state: d.state.name(),
        chosen: Vec::new(),
        short: d.state.name().to_string(),
        policy,
        node_local_by_choice: false,
        partner_copies: mode,
        note: String::new(),
    };
    match d.state {
        State::Open => {
            p.note = "open: its files are held until it is complete and decided".into();
            return p;
        }
        State::Invalid | State::Incomplete => {
            p.note = format!(
                "{}: never chosen for a restart ({}); its files are copied as files outside datasets",
                d.state.name(),
                d.reason.as_deref().unwrap_or("no reason recorded")
            );
            return p;
        }
        State::Complete => {}
    }
    if mode == PartnerCopies::Erasure {
        p.chosen = vec!["local".into(), "erasure".into()];
        if d.flush {
            p.chosen.push("pfs".into());
        }
        p.short = p.chosen[1..].join("+");
        p.note = "the cluster's erasure set (its parity spread over the set's nodes, \
                  `[redundancy] erasure`) instead of partner copies"
            .into();
        if let Some(dec) = &d.decision {
            p.note.push_str(&format!("; the policy's choice: {}", dec.level));
            if let Some(m) = dec.measured.as_ref().filter(|m| m.erasure) {
                let mb = |b: Option<f64>| b.map_or("-".to_string(), |b| format!("{:.1} MB/s", b / 1e6));
                p.note.push_str(&format!(
                    " (erasure level measured: encode {}, rebuild {}, memory {} of the part)",
                    mb(m.erasure_bps),
                    mb(m.erasure_get_bps),
                    m.erasure_memory.map_or("-".to_string(), |f| format!("{f:.2}"))
                ));
            }
        }
        if d.flush {
            p.note.push_str("; marked flush: the drain writes it to the PFS");
        }
        return p;
    }
    let partner = match mode {
        PartnerCopies::Complete | PartnerCopies::All => true,
        PartnerCopies::Decision => decided(d, true) == CopyVerdict::Copy,
        PartnerCopies::Erasure => false,
    };
    p.chosen.push("local".into());
    if partner {
        p.chosen.push("partner".into());
    }
    if d.flush {
        p.chosen.push("pfs".into());
    }
    p.short = if p.chosen.len() == 1 {
        "local".into()
    } else {
        p.chosen[1..].join("+")
    };
    let level = p.policy.as_ref().map(|c| c.level.clone()).unwrap_or_default();
    let reason = p.policy.as_ref().map(|c| c.reason.clone()).unwrap_or_default();
    let setting = format!("dataset_partner_copies = {}", mode.name());
    p.note = match (mode, partner) {
        (PartnerCopies::Decision, false) if level == "local" && !d.flush => {
            p.node_local_by_choice = true;
            format!("node-local by the policy's choice ({setting}): {reason}")
        }
        (PartnerCopies::Decision, false) => {
            format!("no partner copy by the policy's choice of {level} ({setting}): {reason}")
        }
        (PartnerCopies::Decision, true) if level == "partner" => {
            format!("partner copies by the policy's choice ({setting}): {reason}")
        }
        (PartnerCopies::Decision, true) if p.policy.is_some() => format!(
            "partner copies: the policy chose {level} while the partner level was not on offer \
             (its copy time is measured by copying; {setting}): {reason}"
        ),
        (_, true) if p.policy.is_some() => format!(
            "partner copies ({setting}: every complete dataset); the policy's choice: {level}: {reason}"
        ),
        (_, _) => format!("partner copies ({setting}); no policy decision recorded"),
    };
    if d.flush {
        p.note.push_str("; marked flush: the drain writes it to the PFS");
    }
    p
}

/// The protections of every dataset of every job in a store, and which dataset each
/// file version belongs to (the newest listing its size and mtime), for listings.
#[derive(Debug, Default)]
pub struct FileProtections {
    list: Vec<Protection>,
    /// Path -> (size, mtime_ns, index into `list`) of every dataset listing it, oldest
    /// first per job.
    files: HashMap<String, Vec<(u64, u64, usize)>>,
}

impl FileProtections {
    /// Read every job's records in `store` (read only; a rank that died with its part
    /// open makes its dataset incomplete, as the next look will record).
    pub fn load(store: &Store, mode: PartnerCopies) -> FileProtections {
        let mut out = FileProtections::default();
        let root = format!("{}/datasets", record::SYSTEM_DIR);
        let Ok(mut jobs) = store.read_dir(&root) else {
            return out;
        };
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        for j in jobs {
            if j.kind != ckptfs_store::FileKind::Dir {
                continue;
            }
            let Ok((all, _bad)) = record::load_all(store, &j.name) else {
                continue;
            };
            for d in record::with_dead_ranks(all) {
                let i = out.list.len();
                for (path, f) in &d.files {
                    out.files
                        .entry(path.clone())
                        .or_default()
                        .push((f.size, f.mtime_ns, i));
                }
                out.list.push(of(&d, mode));
            }
        }
        out
    }

    /// The protection of the newest dataset listing this version of `path`.
    pub fn of(&self, path: &str, st: &Stat) -> Option<&Protection> {
        self.files
            .get(path)?
            .iter()
            .filter(|(size, mtime, _)| *size == st.size && *mtime == st.mtime_ns)
            .map(|(_, _, i)| &self.list[*i])
            .max_by_key(|p| p.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measured::Measured;
    use crate::record::{DecisionRec, FORMAT};
    use std::collections::BTreeMap;

    fn ds(level: &str, on_offer: bool, flush: bool) -> Dataset {
        Dataset {
            format: FORMAT.into(),
            id: 3,
            name: "/ckpt/step3".into(),
            job: "j".into(),
            state: State::Complete,
            reason: None,
            created_ns: 1,
            closed_ns: Some(2),
            parts_expected: 1,
            parts: BTreeMap::new(),
            dir: None,
            files: BTreeMap::new(),
            decision: Some(DecisionRec {
                level: level.into(),
                reason: format!("{level} has the lowest expected overhead"),
                input: serde_json::Value::Null,
                estimates: BTreeMap::new(),
                rule: "posterior".into(),
                p_source: 0.0,
                alarm: false,
                measured: Some(Measured {
                    partner: on_offer,
                    ..Default::default()
                }),
            }),
            flush,
            evicted: false,
            node: None,
            local_expected: None,
            node_done: true,
            nodes: BTreeMap::new(),
            pfs_pruned: false,
        }
    }

    #[test]
    fn the_default_protects_every_complete_dataset_and_names_the_policys_choice() {
        let p = of(&ds("local", true, false), PartnerCopies::Complete);
        assert_eq!(p.chosen, ["local", "partner"]);
        assert_eq!(p.short, "partner");
        assert!(!p.node_local_by_choice);
        assert!(p.note.contains("the policy's choice: local"), "{}", p.note);
        assert_eq!(p.policy.as_ref().unwrap().level, "local");
    }

    #[test]
    fn the_adaptive_choice_says_node_local_and_why_and_pfs_when_flushed() {
        let p = of(&ds("local", true, false), PartnerCopies::Decision);
        assert_eq!((p.short.as_str(), p.node_local_by_choice), ("local", true));
        assert!(
            p.note.starts_with("node-local by the policy's choice") && p.note.contains("lowest expected"),
            "{}",
            p.note
        );
        let p = of(&ds("pfs", true, true), PartnerCopies::Decision);
        assert_eq!((p.short.as_str(), p.node_local_by_choice), ("pfs", false));
        assert!(p.note.contains("drain writes it to the PFS"), "{}", p.note);
        let p = of(&ds("partner", true, false), PartnerCopies::Decision);
        assert_eq!(p.short, "partner");
        // Decided local before the partner level was on offer: copied (to measure it).
        let p = of(&ds("local", false, false), PartnerCopies::Decision);
        assert_eq!(p.short, "partner");
        assert!(p.note.contains("not on offer"), "{}", p.note);
    }

    #[test]
    fn open_and_failed_datasets_choose_nothing_yet() {
        let mut d = ds("local", true, false);
        d.state = State::Open;
        assert_eq!(of(&d, PartnerCopies::Complete).short, "open");
        assert!(of(&d, PartnerCopies::Complete).chosen.is_empty());
        d.state = State::Incomplete;
        d.reason = Some("rank 1 died".into());
        let p = of(&d, PartnerCopies::Complete);
        assert_eq!(p.short, "incomplete");
        assert!(p.note.contains("rank 1 died"), "{}", p.note);
    }
}
