//! What the dataset records say about moving a file version to one level: the one
//! policy type behind the drain's [`crate::FlushPolicy`] and the partner copies'
//! [`crate::PartnerPolicy`] (and any later level), parametrised by the level's rule.
//!
//! A [`LevelPolicy`] reads this node's dataset records of a job once per scan
//! ([`LevelPolicy::refresh`], read only: it never settles or writes a record), keeps for
//! every file version (path, size, mtime) the verdict the level's rule gives the newest
//! dataset listing it, and answers a [`Lookup`] per complete file of the store:
//!
//! - the records could not be read: [`Lookup::Unreadable`] (nothing moves this scan);
//! - the job has no record on this node: [`Lookup::NoRecords`], saying whether the file
//!   changed after the (empty) records were read;
//! - the file changed after the records were read: [`Lookup::Changed`] (a `begin`
//!   between the read and the listing cannot lose a file to an early move);
//! - a dataset lists this version: [`Lookup::Listed`] with the rule's verdict;
//! - no dataset lists it, but an open part of this node may still take it (modified at
//!   or after that part's `begin`, or after its open record was created):
//!   [`Lookup::MayBeTaken`];
//! - otherwise [`Lookup::Unlisted`].
//!
//! What each answer means is the level's: the drain keeps what is not listed for flush
//! and hands unlisted files to its fallback; the partner copies hold what may still be
//! taken and copy unlisted files.

use crate::record::{self, Dataset, State};
use ckptfs_settings::now_ns;
use ckptfs_store::{Store, StoreOptions};
use std::collections::HashMap;
use std::sync::Mutex;

/// The answer for one complete file version (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<V> {
    /// The records could not be read this scan.
    Unreadable,
    /// The job has no record on this node (as without datasets).
    NoRecords {
        /// Modified after the records were read.
        changed: bool,
    },
    /// Modified after the records were read.
    Changed,
    /// The newest dataset listing this version (size and mtime) gives this verdict.
    Listed(V),
    /// No dataset lists it, but an open part of this node may still take it.
    MayBeTaken,
    /// No dataset lists it and none may take it.
    Unlisted,
}

#[derive(Debug)]
struct Snapshot<V> {
    /// When the records were read (the node's clock, as the store's mtimes).
    taken_ns: u64,
    any: bool,
    /// Per path, the datasets' versions, oldest first: (size, mtime_ns, verdict).
    files: HashMap<String, Vec<(u64, u64, V)>>,
    /// The earliest `begin` of a part, or creation of a record, still open here.
    open_since: Option<u64>,
    unreadable: bool,
}

impl<V> Snapshot<V> {
    fn empty(taken_ns: u64, unreadable: bool) -> Snapshot<V> {
        Snapshot {
            taken_ns,
            any: false,
            files: HashMap::new(),
            open_since: None,
            unreadable,
        }
    }
}

/// The records of one job, read for one level's moves (see the module documentation).
pub struct LevelPolicy<V> {
    opts: StoreOptions,
    job: String,
    /// Names the level in logs (`pfs`, `partner`, ...).
    level: &'static str,
    store: Mutex<Option<Store>>,
    snap: Mutex<Snapshot<V>>,
}

impl<V> std::fmt::Debug for LevelPolicy<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LevelPolicy")
            .field("level", &self.level)
            .field("store", &self.opts.name)
            .field("job", &self.job)
            .finish()
    }
}

impl<V: Copy> LevelPolicy<V> {
    /// The records of `job` in the store `opts` names (attached at the first refresh: a
    /// daemon may start before the store exists), for moves to `level`. Until the first
    /// refresh every answer is [`Lookup::NoRecords`].
    pub fn new(opts: StoreOptions, job: &str, level: &'static str) -> LevelPolicy<V> {
        LevelPolicy {
            opts,
            job: job.to_string(),
            level,
            store: Mutex::new(None),
            snap: Mutex::new(Snapshot::empty(0, false)),
        }
    }

    /// The job's id.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Read the records again (once per scan, before the store is listed); `rule` gives
    /// each dataset's verdict for this level. No store yet: nothing is listed.
    pub fn refresh(&self, rule: impl Fn(&Dataset) -> V) {
        let taken_ns = now_ns();
        let mut st = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if st.is_none() {
            *st = Store::attach(&self.opts).ok();
        }
        let s = match st.as_ref().map(|s| record::load_all(s, &self.job)) {
            None => Snapshot::empty(taken_ns, false),
            Some(Ok((all, _bad))) => snapshot(&all, taken_ns, &rule),
            Some(Err(e)) => {
                tracing::warn!(job = %self.job, level = self.level, error = %e,
                    "cannot read the dataset records; nothing moves to this level this scan");
                Snapshot::empty(taken_ns, true)
            }
        };
        *self.snap.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    /// The answer for the complete file `path` of `size` bytes modified at `mtime_ns`
    /// (the store's clock), from the records of the last [`Self::refresh`].
    pub fn lookup(&self, path: &str, size: u64, mtime_ns: u64) -> Lookup<V> {
        let s = self.snap.lock().unwrap_or_else(|e| e.into_inner());
        if s.unreadable {
            return Lookup::Unreadable;
        }
        let changed = mtime_ns >= s.taken_ns;
        if !s.any {
            return Lookup::NoRecords { changed };
        }
        if changed {
            return Lookup::Changed;
        }
        // The newest dataset listing this version decides (records are in id order).
        if let Some(v) = s
            .files
            .get(path)
            .and_then(|v| v.iter().rev().find(|(sz, mt, _)| *sz == size && *mt == mtime_ns))
        {
            return Lookup::Listed(v.2);
        }
        if s.open_since.is_some_and(|t| mtime_ns >= t) {
            return Lookup::MayBeTaken;
        }
        Lookup::Unlisted
    }
}

/// The snapshot of a job's records taken at `taken_ns`, each dataset's files under the
/// verdict `rule` gives it.
fn snapshot<V: Copy>(all: &[Dataset], taken_ns: u64, rule: &impl Fn(&Dataset) -> V) -> Snapshot<V> {
    let mut s = Snapshot::empty(taken_ns, false);
    s.any = !all.is_empty();
    for d in all {
        let verdict = rule(d);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FileRec, Part, FORMAT};
    use std::collections::BTreeMap;

    fn rec(
        id: u64,
        state: State,
        created: u64,
        begun: &[(State, u64)],
        files: &[(&str, u64, u64)],
    ) -> Dataset {
        Dataset {
            format: FORMAT.into(),
            id,
            name: format!("s{id}"),
            job: "j".into(),
            state,
            reason: None,
            created_ns: created,
            closed_ns: None,
            parts_expected: begun.len() as u32,
            parts: begun
                .iter()
                .enumerate()
                .map(|(i, (st, b))| {
                    (
                        i.to_string(),
                        Part {
                            state: *st,
                            begun_ns: *b,
                            done_ns: None,
                            pid: None,
                            pid_start: None,
                        },
                    )
                })
                .collect(),
            dir: None,
            files: files
                .iter()
                .map(|(p, size, mtime)| {
                    (
                        p.to_string(),
                        FileRec {
                            size: *size,
                            crc32c: 0,
                            mtime_ns: *mtime,
                            levels: vec!["local".into()],
                        },
                    )
                })
                .collect(),
            decision: None,
            flush: false,
            evicted: false,
            node: None,
            local_expected: None,
            node_done: false,
            nodes: BTreeMap::new(),
            pfs_pruned: false,
        }
    }

    fn answers(all: &[Dataset], taken: u64) -> LevelPolicy<u64> {
        let p = LevelPolicy::new(StoreOptions::named("unused"), "j", "test");
        *p.snap.lock().unwrap() = snapshot(all, taken, &|d: &Dataset| d.id);
        p
    }

    /// Every kind of answer, in the order they are decided.
    #[test]
    fn each_answer_comes_from_the_records_in_order() {
        let all = [
            rec(1, State::Complete, 10, &[(State::Complete, 10)], &[("/a", 5, 11)]),
            rec(2, State::Complete, 20, &[(State::Complete, 20)], &[("/a", 6, 21)]),
            rec(
                3,
                State::Open,
                30,
                &[(State::Complete, 30), (State::Open, 40)],
                &[],
            ),
        ];
        let p = answers(&all, 100);
        assert_eq!(p.lookup("/a", 5, 11), Lookup::Listed(1));
        assert_eq!(
            p.lookup("/a", 6, 21),
            Lookup::Listed(2),
            "the version decides, not the path"
        );
        assert_eq!(
            p.lookup("/a", 6, 100),
            Lookup::Changed,
            "changed after the records were read"
        );
        // The open record was created at 30, before its open part began (40): a file of
        // 35 may belong to it (a part that completed, or one not yet recorded).
        assert_eq!(p.lookup("/b", 1, 35), Lookup::MayBeTaken);
        assert_eq!(p.lookup("/b", 1, 25), Lookup::Unlisted);
        assert_eq!(
            answers(&[], 100).lookup("/b", 1, 25),
            Lookup::NoRecords { changed: false }
        );
        assert_eq!(
            answers(&[], 100).lookup("/b", 1, 100),
            Lookup::NoRecords { changed: true }
        );
        let q = answers(&all, 100);
        q.snap.lock().unwrap().unreadable = true;
        assert_eq!(q.lookup("/a", 5, 11), Lookup::Unreadable);
    }

    /// A version listed by two datasets takes the newer one's verdict.
    #[test]
    fn the_newest_dataset_listing_a_version_decides() {
        let all = [
            rec(1, State::Complete, 10, &[(State::Complete, 10)], &[("/a", 5, 11)]),
            rec(2, State::Complete, 20, &[(State::Complete, 20)], &[("/a", 5, 11)]),
        ];
        assert_eq!(answers(&all, 100).lookup("/a", 5, 11), Lookup::Listed(2));
    }
}
