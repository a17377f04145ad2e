//! Datasets across the nodes of a job: job-wide completion (failure case D7) and the
//! agreed ids.
//!
//! Each node keeps the records of its own ranks' parts in its own store. Whether a
//! dataset is complete job-wide is a pure function ([`judge`]) of what every node
//! reports (its records, through its node daemon: [`JobNodes::records`]), so every rank
//! on every node that asks the same nodes reaches the same verdict. A node's record
//! becomes `complete` only once the job-wide verdict is; it then keeps every node's part
//! (`nodes`), so a surviving node knows the files of a node lost later.

use crate::completion::{JobNodes, NodeRecords};
use crate::handle::Datasets;
use crate::record::{self, Dataset, NodePart, State};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What every node of the job reported: this node's records and the others' answers.
#[derive(Debug, Clone)]
pub struct Views {
    /// This node.
    pub me: String,
    /// Every node of the cluster.
    pub nodes: Vec<String>,
    /// Per node: its records, or why it could not be asked.
    pub by_node: BTreeMap<String, NodeRecords>,
}

impl Views {
    /// The records of dataset `id`, per node that has one.
    pub fn records_of(&self, id: u64) -> Vec<(&str, &Dataset)> {
        self.by_node
            .iter()
            .filter_map(|(n, r)| r.as_ref().ok().map(|l| (n, l)))
            .filter_map(|(n, l)| l.iter().find(|d| d.id == id).map(|d| (n.as_str(), d)))
            .collect()
    }

    /// Every dataset id any node knows, ascending.
    pub fn ids(&self) -> BTreeSet<u64> {
        self.by_node
            .values()
            .filter_map(|r| r.as_ref().ok())
            .flat_map(|l| l.iter().map(|d| d.id))
            .collect()
    }

    /// The largest id any node knows.
    pub fn max_id(&self) -> u64 {
        self.ids().last().copied().unwrap_or(0)
    }
}

/// A dataset's state across the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "lowercase")]
pub enum JobState {
    /// Every rank's part complete on every node, every node's files checked.
    Complete,
    /// A part was completed invalid.
    Invalid(String),
    /// It can never complete (a rank or node lost, a file not closed complete, ...).
    Incomplete(String),
    /// Still waiting for parts (the text says for what).
    Open(String),
}

impl JobState {
    /// Lower-case name.
    pub fn name(&self) -> &'static str {
        match self {
            JobState::Complete => "complete",
            JobState::Invalid(_) => "invalid",
            JobState::Incomplete(_) => "incomplete",
            JobState::Open(_) => "open",
        }
    }

    /// The reason, if any.
    pub fn reason(&self) -> Option<&str> {
        match self {
            JobState::Complete => None,
            JobState::Invalid(r) | JobState::Incomplete(r) | JobState::Open(r) => Some(r),
        }
    }
}

/// One dataset as the whole job sees it.
#[derive(Debug, Clone, Serialize)]
pub struct JobDataset {
    /// Id (the same on every node).
    pub id: u64,
    /// Name.
    pub name: String,
    /// Job-wide state.
    pub state: JobState,
    /// Every node's part (the agreed one once complete; else what the nodes report).
    pub parts: BTreeMap<String, NodePart>,
    /// Oldest creation time reported (ns, each node's own clock).
    pub created_ns: u64,
    /// Newest closing time reported.
    pub closed_ns: Option<u64>,
    /// Nodes that could not be asked.
    pub unreachable: Vec<String>,
}

impl JobDataset {
    /// Total bytes over every node's part.
    pub fn size(&self) -> u64 {
        self.parts
            .values()
            .flat_map(|p| p.files.values())
            .map(|f| f.size)
            .sum()
    }

    /// Levels holding every file of every node (as the nodes last checked, with the
    /// registry levels [`crate::Datasets::refresh_job_levels`] added), fastest first:
    /// in the order of the first file's list (`local`, `partner`, `erasure`, `pfs` as
    /// the daemons report them, then level ids such as `s3:bucket/prefix`).
    pub fn levels(&self) -> Vec<String> {
        let files: Vec<_> = self.parts.values().flat_map(|p| p.files.values()).collect();
        let mut out: Vec<String> = Vec::new();
        let Some(first) = files.first() else {
            return out;
        };
        for l in &first.levels {
            if !out.contains(l) && files.iter().all(|f| f.levels.contains(l)) {
                out.push(l.clone());
            }
        }
        out
    }
}

pub(crate) fn complete_ranks(d: &Dataset) -> Vec<String> {
    d.parts
        .iter()
        .filter(|(_, p)| p.state == State::Complete)
        .map(|(r, _)| r.clone())
        .collect()
}

/// The job-wide verdict on dataset `id` from `views` (docs/datasets.md, "Across nodes"):
///
/// 1. a node's record already agreed complete (it keeps every node's part): complete;
/// 2. a node's record invalid or incomplete: the same, with that node named;
/// 3. two nodes giving it different names: incomplete;
/// 4. `world` ranks complete over all nodes and every node with a part checked its
///    files: complete;
/// 5. D7: a node that cannot be asked, or that has no part of it but began a newer
///    dataset (its store was replaced after a loss), while parts are missing:
///    incomplete;
/// 6. otherwise open (waiting).
pub fn judge(views: &Views, id: u64, world: u32) -> JobDataset {
    let recs = views.records_of(id);
    let unreachable: Vec<String> = views
        .nodes
        .iter()
        .filter(|n| !matches!(views.by_node.get(*n), Some(Ok(_))))
        .cloned()
        .collect();
    let name = recs.first().map(|(_, d)| d.name.clone()).unwrap_or_default();
    let created_ns = recs.iter().map(|(_, d)| d.created_ns).min().unwrap_or(0);
    let closed_ns = recs.iter().filter_map(|(_, d)| d.closed_ns).max();
    let reported: BTreeMap<String, NodePart> = recs
        .iter()
        .map(|(n, d)| {
            (
                n.to_string(),
                NodePart {
                    ranks: complete_ranks(d),
                    files: d.files.clone(),
                },
            )
        })
        .collect();
    let mk = |state: JobState, parts: BTreeMap<String, NodePart>| JobDataset {
        id,
        name: name.clone(),
        state,
        parts,
        created_ns,
        closed_ns,
        unreachable: unreachable.clone(),
    };
    if let Some((_, d)) = recs
        .iter()
        .find(|(_, d)| d.state == State::Complete && !d.nodes.is_empty())
    {
        // Levels as each node reports them now, where it does.
        let mut parts = d.nodes.clone();
        for (n, p) in parts.iter_mut() {
            if let Some(r) = reported.get(n) {
                for (path, f) in p.files.iter_mut() {
                    if let Some(now) = r.files.get(path).filter(|x| x.crc32c == f.crc32c) {
                        f.levels = now.levels.clone();
                    }
                }
            }
        }
        return mk(JobState::Complete, parts);
    }
    for bad in [State::Invalid, State::Incomplete] {
        if let Some((n, d)) = recs.iter().find(|(_, d)| d.state == bad) {
            let why = format!(
                "node {n}: {}",
                d.reason.clone().unwrap_or_else(|| bad.name().into())
            );
            let st = if bad == State::Invalid {
                JobState::Invalid(why)
            } else {
                JobState::Incomplete(why)
            };
            return mk(st, reported);
        }
    }
    if let Some((n, d)) = recs.iter().find(|(_, d)| d.name != name) {
        let why = format!("node {n} calls it {:?}, node {} {:?}", d.name, recs[0].0, name);
        return mk(JobState::Incomplete(why), reported);
    }
    // A transparent dataset has one part per node (its directory there), whatever the
    // job's ranks.
    let transparent = recs.iter().any(|(_, d)| d.dir.is_some());
    let world = recs
        .iter()
        .map(|(_, d)| d.parts_expected)
        .max()
        .unwrap_or(world)
        .max(if transparent { 0 } else { world });
    let done: BTreeSet<&String> = recs
        .iter()
        .flat_map(|(_, d)| {
            d.parts
                .iter()
                .filter(|(_, p)| p.state == State::Complete)
                .map(|(r, _)| r)
        })
        .collect();
    let unchecked: Vec<&str> = recs
        .iter()
        .filter(|(_, d)| !d.node_done)
        .map(|(n, _)| *n)
        .collect();
    if done.len() as u32 >= world && unchecked.is_empty() {
        return mk(JobState::Complete, reported);
    }
    // Failure case D7: a node lost between begin and complete.
    for n in &views.nodes {
        match views.by_node.get(n) {
            Some(Ok(list)) => {
                if recs.iter().any(|(m, _)| m == n) {
                    continue;
                }
                if let Some(newer) = list.iter().filter(|d| d.id > id).map(|d| d.id).min() {
                    let why = format!(
                        "node {n} has no part of it but began dataset {newer} later (its store was replaced after a loss, or its ranks skipped it)"
                    );
                    return mk(JobState::Incomplete(why), reported);
                }
            }
            Some(Err(e)) => {
                let why = format!("node {n} was lost before its part completed ({e})");
                return mk(JobState::Incomplete(why), reported);
            }
            None => {
                let why = format!("node {n} was not asked");
                return mk(JobState::Incomplete(why), reported);
            }
        }
    }
    let why = if unchecked.is_empty() {
        format!("waiting: {} of {world} ranks complete", done.len())
    } else {
        format!(
            "waiting: {} of {world} ranks complete; ranks still writing on {}",
            done.len(),
            unchecked.join(",")
        )
    };
    mk(JobState::Open(why), reported)
}

/// The largest id floor the other nodes of the job report (0: none; failure case D10).
pub(crate) fn peer_floor(nodes: &dyn JobNodes, job: &str) -> u64 {
    nodes.floors(job).values().copied().max().unwrap_or(0)
}

impl Datasets {
    /// Views of every node: this node's `local` records and the others' answers.
    pub(crate) fn views(&self, nodes: &dyn JobNodes, local: &[Dataset]) -> Views {
        let mut by_node = nodes.records(&self.cfg.job);
        let mut mine =
            record::with_verdicts(local.to_vec(), record::load_verdicts(&self.store, &self.cfg.job));
        nodes.fill_levels(&mut mine, &self.cfg.dests);
        by_node.insert(nodes.me().to_string(), Ok(mine));
        Views {
            me: nodes.me().to_string(),
            nodes: nodes.nodes(),
            by_node,
        }
    }

    /// Cluster mode: the id for a rank beginning `name`: an open dataset of that name
    /// on another node that this rank is not part of (join), else one past the largest
    /// id any node knows (records and floors).
    pub(crate) fn cluster_id(
        &self,
        nodes: &dyn JobNodes,
        local: &[Dataset],
        name: &str,
    ) -> (Option<u64>, u64) {
        // Every node's floor first, then the records: a node records its floor only after
        // it saved the dataset's record (`record_floor`), so a floor seen here past an
        // open dataset's id comes with that dataset's record in the views below, and this
        // rank joins it instead of taking the next id.
        let peers = peer_floor(nodes, &self.cfg.job);
        let views = self.views(nodes, local);
        let rank = &self.cfg.rank;
        let join = views
            .records_of_name(name)
            .into_iter()
            .filter(|d| d.state == State::Open && d.dir.is_none() && !d.parts.contains_key(rank))
            .filter(|d| !local.iter().any(|l| l.id == d.id))
            .filter(|d| matches!(judge(&views, d.id, self.cfg.world).state, JobState::Open(_)))
            .map(|d| d.id)
            .max();
        // Ids never go back: also past every node's floor (its `next_id`, failure case D10).
        let floor = (views.max_id() + 1).max(peers);
        (join, floor)
    }
}

impl Views {
    /// Ids other nodes gave a transparent dataset directory of this name.
    pub(crate) fn records_of_dir_name(&self, name: &str) -> Vec<u64> {
        self.by_node
            .iter()
            .filter(|(n, _)| **n != self.me)
            .filter_map(|(_, r)| r.as_ref().ok())
            .flat_map(|l| {
                l.iter()
                    .filter(|d| d.dir.is_some() && d.name == name)
                    .map(|d| d.id)
            })
            .collect()
    }

    fn records_of_name(&self, name: &str) -> Vec<&Dataset> {
        self.by_node
            .values()
            .filter_map(|r| r.as_ref().ok())
            .flat_map(|l| l.iter().filter(|d| d.name == name))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FileRec, Part, FORMAT};

    fn rec(node: &str, id: u64, name: &str, ranks: &[(&str, State)], done: bool) -> Dataset {
        Dataset {
            format: FORMAT.into(),
            id,
            name: name.into(),
            job: "j".into(),
            state: State::Open,
            reason: None,
            created_ns: 1,
            closed_ns: None,
            parts_expected: 4,
            parts: ranks
                .iter()
                .map(|(r, s)| {
                    (
                        r.to_string(),
                        Part {
                            state: *s,
                            begun_ns: 1,
                            done_ns: None,
                            pid: None,
                            pid_start: None,
                        },
                    )
                })
                .collect(),
            dir: None,
            files: [(
                format!("/c/{node}/{id}"),
                FileRec {
                    size: 10,
                    crc32c: 7,
                    mtime_ns: 1,
                    levels: vec!["local".into()],
                },
            )]
            .into(),
            decision: None,
            flush: false,
            evicted: false,
            node: Some(node.into()),
            local_expected: Some(2),
            node_done: done,
            nodes: BTreeMap::new(),
            pfs_pruned: false,
        }
    }

    fn views(by: Vec<(&str, NodeRecords)>) -> Views {
        Views {
            me: "a".into(),
            nodes: vec!["a".into(), "b".into()],
            by_node: by.into_iter().map(|(n, r)| (n.to_string(), r)).collect(),
        }
    }

    const C: State = State::Complete;
    const O: State = State::Open;

    /// Another node's daemon reports an open dataset whose rank died as incomplete (it
    /// was open for ever to the rest of the job until that node looked under its lock).
    #[test]
    fn a_dead_ranks_open_dataset_is_reported_incomplete_without_the_lock() {
        let mut a = rec("a", 1, "s", &[("0", C), ("1", O)], false);
        let me = ckptfs_store::process::me();
        let p = a.parts.get_mut("1").unwrap();
        p.pid = Some(me.pid);
        p.pid_start = Some(me.start.wrapping_add(1)); // this pid, another start: dead
        let alive = rec("a", 2, "t", &[("0", O)], false);
        let mut alive = alive;
        let q = alive.parts.get_mut("0").unwrap();
        q.pid = Some(me.pid);
        q.pid_start = Some(me.start);
        let out = record::with_dead_ranks(vec![a, alive]);
        assert_eq!(out[0].state, State::Incomplete);
        assert!(
            out[0].reason.as_deref().unwrap().contains("rank 1"),
            "{:?}",
            out[0].reason
        );
        assert_eq!(out[1].state, State::Open);
        let v = views(vec![("a", Ok(out)), ("b", Ok(vec![]))]);
        assert!(matches!(judge(&v, 1, 4).state, JobState::Incomplete(_)));
    }

    #[test]
    fn complete_only_when_every_rank_on_every_node_is_in_and_checked() {
        let a = rec("a", 1, "s", &[("0", C), ("1", C)], true);
        let b_open = rec("b", 1, "s", &[("2", C), ("3", O)], false);
        let v = views(vec![("a", Ok(vec![a.clone()])), ("b", Ok(vec![b_open]))]);
        assert!(matches!(judge(&v, 1, 4).state, JobState::Open(_)));
        let b = rec("b", 1, "s", &[("2", C), ("3", C)], true);
        let v = views(vec![("a", Ok(vec![a.clone()])), ("b", Ok(vec![b]))]);
        let j = judge(&v, 1, 4);
        assert_eq!(j.state, JobState::Complete);
        assert_eq!(j.parts.len(), 2);
        assert_eq!(j.size(), 20);
        // b has not begun yet: waiting, not lost.
        let v = views(vec![("a", Ok(vec![a])), ("b", Ok(vec![]))]);
        assert!(matches!(judge(&v, 1, 4).state, JobState::Open(_)));
    }

    #[test]
    fn d7_a_node_lost_or_replaced_before_its_part_makes_it_incomplete() {
        let a = rec("a", 1, "s", &[("0", C), ("1", C)], true);
        let v = views(vec![
            ("a", Ok(vec![a.clone()])),
            ("b", Err("connection refused".into())),
        ]);
        match judge(&v, 1, 4).state {
            JobState::Incomplete(r) => assert!(r.contains("node b was lost"), "{r}"),
            s => panic!("{s:?}"),
        }
        // A replacement (empty store) that began a newer dataset without this one.
        let newer = rec("b", 2, "t", &[("2", O)], false);
        let v = views(vec![("a", Ok(vec![a.clone()])), ("b", Ok(vec![newer]))]);
        match judge(&v, 1, 4).state {
            JobState::Incomplete(r) => assert!(r.contains("began dataset 2 later"), "{r}"),
            s => panic!("{s:?}"),
        }
        // Once agreed complete, a later loss does not change the verdict.
        let mut done = a;
        done.state = State::Complete;
        done.nodes = [(
            "a".to_string(),
            NodePart {
                ranks: vec!["0".into()],
                files: BTreeMap::new(),
            },
        )]
        .into();
        let v = views(vec![("a", Ok(vec![done])), ("b", Err("gone".into()))]);
        assert_eq!(judge(&v, 1, 4).state, JobState::Complete);
    }

    #[test]
    fn an_invalid_or_incomplete_part_or_differing_names_decide_for_the_job() {
        let a = rec("a", 1, "s", &[("0", C), ("1", C)], true);
        let mut b = rec("b", 1, "s", &[("2", C), ("3", State::Invalid)], false);
        b.state = State::Invalid;
        b.reason = Some("rank 3 completed it as invalid".into());
        let v = views(vec![("a", Ok(vec![a.clone()])), ("b", Ok(vec![b]))]);
        assert!(matches!(judge(&v, 1, 4).state, JobState::Invalid(r) if r.contains("node b")));
        let b = rec("b", 1, "other", &[("2", C), ("3", C)], true);
        let v = views(vec![("a", Ok(vec![a])), ("b", Ok(vec![b]))]);
        assert!(matches!(judge(&v, 1, 4).state, JobState::Incomplete(r) if r.contains("calls it")));
    }
}
