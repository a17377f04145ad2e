//! Begin, complete, list, show, delete: the dataset state machine on one node, and the
//! job-wide verdicts applied to this node's records.
//!
//! Every change happens under the store's dataset lock ([`crate::handle`]) and ends
//! with a crash-safe record write ([`crate::record::save`]).

use crate::completion::{Agreement, JobNodes};
use crate::config::{glob_match, CompleteRule};
use crate::error::{DatasetError, Result};
use crate::filecrc::file_crc_from_chunks;
use crate::handle::Datasets;
use crate::jobwide::{complete_ranks, judge, peer_floor, JobDataset, JobState, Views};
use crate::record::{self, Dataset, FileRec, NodePart, Part, State, SYSTEM_DIR};
use ckptfs_settings::now_ns;
use ckptfs_store::{FileKind, Stat, StoreError, WriteState};
use std::collections::BTreeMap;

fn is_data_path(p: &str) -> bool {
    p != SYSTEM_DIR
        && !p.starts_with(&format!("{SYSTEM_DIR}/"))
        && !p.rsplit('/').next().unwrap_or("").starts_with(".ckptfs-restore.")
}

impl Datasets {
    fn next_id(&self, all: &[Dataset]) -> Result<u64> {
        self.next_id_from(all, 1)
    }

    /// The next id, at least `floor` (cluster mode: one past the largest any node knows,
    /// and every reachable node's floor), at least this node's `next_id` and one past its
    /// records, and at least the floor recorded in the PFS destinations (failure case
    /// D10). Nothing is written: [`Datasets::record_floor`] records the new floor once
    /// the dataset's record is saved.
    pub(crate) fn next_id_from(&self, all: &[Dataset], floor: u64) -> Result<u64> {
        let stored = crate::id_floor::stored_next_id(&self.store, &self.cfg.job)?;
        Ok(stored
            .max(all.iter().map(|d| d.id + 1).max().unwrap_or(1))
            .max(floor)
            .max(crate::id_floor::pfs_floor(&self.cfg.dests, &self.cfg.job)))
    }

    /// Record the floor past dataset `id` once its record is saved here: in this node's
    /// `next_id`, in the PFS destinations and, across nodes, told to every node. Recorded
    /// before the record, a node beginning the same dataset at that moment would see a
    /// floor past it but no dataset of that name, and take the next id instead of
    /// joining (the floor is asked before the records: [`Datasets::cluster_id`]).
    fn record_floor(&self, id: u64) -> Result<()> {
        crate::id_floor::raise_locked(&self.store, &self.cfg.job, id + 1)?;
        let node = match self.completion.job_nodes() {
            Some(n) => n.me().to_string(),
            None => self.cfg.node.clone(),
        };
        crate::id_floor::pfs_record(&self.cfg.dests, &self.cfg.job, &node, id + 1);
        if let Some(nodes) = self.completion.job_nodes() {
            nodes.raise_floor(&self.cfg.job, id + 1);
        }
        Ok(())
    }

    /// Begin a dataset named `name` for this rank; returns its id. A rank joins an open
    /// dataset of the same name begun by another rank; otherwise a new id is taken.
    /// `pid`: the rank's process when it is the caller (the C API), so that its death is
    /// noticed (failure case D3). A part this rank left open in an older dataset makes
    /// that dataset incomplete (failure case D3b).
    pub fn begin(&self, name: &str, pid: Option<ckptfs_store::process::ProcId>) -> Result<u64> {
        check_name(name)?;
        let _l = self.lock()?;
        record::clean_temps(&self.store, &self.cfg.job);
        let (mut all, _) = record::load_all(&self.store, &self.cfg.job)?;
        self.refresh_locked(&mut all)?;
        let rank = self.cfg.rank.clone();
        let join = all.iter().rposition(|d| {
            d.state == State::Open && d.dir.is_none() && d.name == name && !d.parts.contains_key(&rank)
        });
        for d in all.iter_mut() {
            if d.state == State::Open && d.parts.get(&rank).is_some_and(|p| p.state == State::Open) {
                let msg = format!("rank {rank} began dataset {name:?} without completing this one");
                self.close(d, State::Incomplete, Some(msg))?;
            }
        }
        let part = Part {
            state: State::Open,
            begun_ns: now_ns(),
            done_ns: None,
            pid: pid.map(|p| p.pid),
            pid_start: pid.map(|p| p.start),
        };
        let mut ds = match (join, self.completion.job_nodes()) {
            (Some(i), _) => all.swap_remove(i),
            (None, None) => {
                let id = self.next_id(&all)?;
                self.new_record(id, name, None)
            }
            (None, Some(nodes)) => {
                // Ids agree across nodes: join the dataset other nodes' ranks began under
                // this name, else take one past the largest id any node knows.
                let (join, floor) = self.cluster_id(nodes, &all, name);
                match join {
                    Some(id) => self.new_record(id, name, None),
                    None => {
                        let id = self.next_id_from(&all, floor)?;
                        self.new_record(id, name, None)
                    }
                }
            }
        };
        ds.parts.insert(rank, part);
        record::save(&self.store, &ds)?;
        self.record_floor(ds.id)?;
        Ok(ds.id)
    }

    /// Complete this rank's part of dataset `id` (None: its newest open one), valid or
    /// not. Returns the record after the change.
    pub fn complete(&self, id: Option<u64>, valid: bool) -> Result<Dataset> {
        let _l = self.lock()?;
        let (mut all, _) = record::load_all(&self.store, &self.cfg.job)?;
        self.refresh_locked(&mut all)?;
        let rank = self.cfg.rank.clone();
        let i = match id {
            Some(id) => all
                .iter()
                .position(|d| d.id == id)
                .ok_or(DatasetError::NotFound(id))?,
            None => all
                .iter()
                .rposition(|d| d.dir.is_none() && d.parts.get(&rank).is_some_and(|p| p.state == State::Open))
                .ok_or_else(|| DatasetError::NoneOpen(rank.clone()))?,
        };
        let mut ds = all.swap_remove(i);
        let Some(part) = ds.parts.get(&rank).cloned() else {
            return Err(DatasetError::NotBegun {
                id: ds.id,
                name: ds.name.clone(),
                rank,
            });
        };
        if part.state != State::Open || ds.state != State::Open {
            return Err(DatasetError::AlreadyCompleted {
                id: ds.id,
                name: ds.name.clone(),
                rank,
                state: match &ds.reason {
                    Some(r) => format!("{}: {r}", ds.state.name()),
                    None => ds.state.name().to_string(),
                },
            });
        }
        let now = now_ns();
        if valid {
            // This rank's files: data files modified since its part began (docs/datasets.md,
            // "Membership").
            for (path, st) in self.store.list_all() {
                if st.kind == FileKind::File && is_data_path(&path) && st.mtime_ns >= part.begun_ns {
                    ds.files.insert(path, file_rec(&st));
                }
            }
        }
        let p = ds.parts.get_mut(&rank).expect("checked above");
        p.state = if valid { State::Complete } else { State::Invalid };
        p.done_ns = Some(now);
        if let Some(nodes) = self.completion.job_nodes() {
            return self.complete_in_cluster(nodes, ds, &rank, valid);
        }
        match self.completion.agree(&ds) {
            Agreement::Invalid(why) => self.close(&mut ds, State::Invalid, Some(why))?,
            Agreement::Waiting { .. } => record::save(&self.store, &ds)?,
            Agreement::AllComplete => {
                self.finish(&mut ds, &all)?;
                self.retention_locked()?;
            }
        }
        Ok(ds)
    }

    /// Cluster mode: this rank's part is recorded in `ds`. When every rank of this node
    /// is in, this node's files are checked; then the job-wide verdict is asked for.
    fn complete_in_cluster(
        &self,
        nodes: &dyn JobNodes,
        mut ds: Dataset,
        rank: &str,
        valid: bool,
    ) -> Result<Dataset> {
        if !valid {
            self.close(
                &mut ds,
                State::Invalid,
                Some(format!("rank {rank} completed it as invalid")),
            )?;
            return Ok(ds);
        }
        let here = ds.parts.values().filter(|p| p.state == State::Complete).count() as u32;
        let expected = ds.local_expected.unwrap_or(1);
        if here >= expected && !ds.node_done {
            if let Some(msg) = self.check_files(&mut ds)? {
                self.close(&mut ds, State::Incomplete, Some(msg))?;
                return Ok(ds);
            }
            ds.node_done = true;
        }
        record::save(&self.store, &ds)?;
        self.settle_locked(nodes)?;
        record::load(&self.store, &self.cfg.job, ds.id)
    }

    /// Every part is in: check the files, checksum them, choose the level.
    fn finish(&self, ds: &mut Dataset, older: &[Dataset]) -> Result<()> {
        if let Some(msg) = self.check_files(ds)? {
            return self.close(ds, State::Incomplete, Some(msg));
        }
        self.decide_and_close(ds, older)
    }

    /// Check that every file of `ds` is closed complete and record its size and CRC32C;
    /// the reason when one is not.
    fn check_files(&self, ds: &mut Dataset) -> Result<Option<String>> {
        let mut recs = BTreeMap::new();
        for path in ds.files.keys() {
            let st = match self.store.stat(path) {
                Ok(st) => st,
                Err(StoreError::NotFound(_)) => {
                    return Ok(Some(format!(
                        "file {path} was removed before the dataset completed"
                    )));
                }
                Err(e) => return Err(e.into()),
            };
            if st.state != WriteState::Complete {
                let msg = format!("file {path} is {:?}, not closed complete", st.state).to_lowercase();
                return Ok(Some(msg));
            }
            let (size, crc) = match file_crc_from_chunks(&self.store, path) {
                Ok(c) => (c.size, c.crc32c),
                Err(e) => return Ok(Some(format!("file {path} cannot be read back: {e}"))),
            };
            let mut r = file_rec(&st);
            r.size = size;
            r.crc32c = crc;
            recs.insert(path.clone(), r);
        }
        ds.files = recs;
        Ok(None)
    }

    /// Choose the level (the runtime policy), mark the flush, close it complete.
    pub(crate) fn decide_and_close(&self, ds: &mut Dataset, older: &[Dataset]) -> Result<()> {
        let begun = ds
            .parts
            .values()
            .map(|p| p.begun_ns)
            .min()
            .unwrap_or(ds.created_ns);
        let decision = crate::decide::decide_at_completion(self, ds, older, begun)?;
        if decision.level == "pfs" {
            ds.flush = true;
        }
        let nth = self.cfg.flush_every;
        if nth > 0 {
            let n_complete = older.iter().filter(|d| d.state == State::Complete).count() as u32 + 1;
            if n_complete.is_multiple_of(nth) {
                ds.flush = true;
            }
        }
        ds.decision = Some(decision);
        self.close(ds, State::Complete, None)
    }

    /// Mark open datasets whose rank died (failure case D3), and discover and judge
    /// transparent datasets. Called with the lock held.
    fn refresh_locked(&self, all: &mut Vec<Dataset>) -> Result<()> {
        for d in all
            .iter_mut()
            .filter(|d| d.state == State::Open && d.dir.is_none())
        {
            let dead = d.parts.iter().find(|(_, p)| {
                p.state == State::Open
                    && matches!((p.pid, p.pid_start), (Some(pid), Some(start))
                        if !ckptfs_store::process::alive(ckptfs_store::process::ProcId { pid, start }))
            });
            if let Some((rank, p)) = dead {
                let msg = format!("rank {rank} (pid {}) died before completing", p.pid.unwrap_or(0));
                self.close(d, State::Incomplete, Some(msg))?;
            }
        }
        if let (Some(pat), Some(rule)) = (self.cfg.pattern.clone(), self.cfg.complete_rule.clone()) {
            self.scan_transparent(all, &pat, &rule)?;
        }
        Ok(())
    }

    fn scan_transparent(&self, all: &mut Vec<Dataset>, pat: &str, rule: &CompleteRule) -> Result<()> {
        let listing = self.store.list_all();
        let mut dirs: Vec<(&String, &Stat)> = listing
            .iter()
            .filter(|(p, st)| st.kind == FileKind::Dir && is_data_path(p) && glob_match(pat, p))
            .filter(|(p, _)| !all.iter().any(|d| d.dir.as_deref() == Some(p.as_str())))
            .map(|(p, st)| (p, st))
            .collect();
        dirs.sort_by(|a, b| (a.1.ctime_ns, a.0).cmp(&(b.1.ctime_ns, b.0)));
        let nodes = self.completion.job_nodes();
        // Across nodes: each node's directory is its part (keyed by the node), and the
        // id is the one another node gave this directory's name, else one past the
        // largest any node knows (docs/datasets.md, "Transparent mode across nodes").
        let views = match (nodes, dirs.is_empty()) {
            (Some(n), false) => {
                // The floor before the records (see `record_floor`).
                let floor = peer_floor(n, &self.cfg.job);
                Some((self.views(n, all), floor))
            }
            _ => None,
        };
        for (p, _) in dirs {
            let name = p.trim_start_matches('/');
            let id = match &views {
                Some((v, peers)) => {
                    let join = v.records_of_dir_name(name).into_iter().max();
                    match join {
                        Some(id) if !all.iter().any(|d| d.id == id) => id,
                        _ => self.next_id_from(
                            all,
                            (v.max_id().max(all.iter().map(|d| d.id).max().unwrap_or(0)) + 1).max(*peers),
                        )?,
                    }
                }
                None => self.next_id(all)?,
            };
            let mut d = self.new_record(id, name, Some(p.clone()));
            let key = match nodes {
                Some(n) => {
                    d.parts_expected = n.nodes().len() as u32;
                    d.local_expected = Some(1);
                    format!("node:{}", n.me())
                }
                None => "transparent".into(),
            };
            d.parts.insert(
                key,
                Part {
                    state: State::Open,
                    begun_ns: d.created_ns,
                    done_ns: None,
                    pid: None,
                    pid_start: None,
                },
            );
            record::save(&self.store, &d)?;
            self.record_floor(d.id)?;
            all.push(d);
        }
        for i in 0..all.len() {
            if all[i].state != State::Open || all[i].dir.is_none() || all[i].node_done {
                continue;
            }
            // Decisions see the datasets before this one as they are now (ids ascending).
            let (before, rest) = all.split_at_mut(i);
            let d = &mut rest[0];
            let dir = d.dir.clone().unwrap_or_default();
            let prefix = format!("{dir}/");
            let files: Vec<(&String, &Stat)> = listing
                .iter()
                .filter(|(p, st)| st.kind == FileKind::File && p.starts_with(&prefix))
                .map(|(p, st)| (p, st))
                .collect();
            let bad = files
                .iter()
                .find(|(_, st)| matches!(st.state, WriteState::Incomplete | WriteState::Failed));
            if let Some((p, st)) = bad {
                let msg =
                    format!("file {p} is {:?}: its writer died or a write failed", st.state).to_lowercase();
                self.close(d, State::Incomplete, Some(msg))?;
                continue;
            }
            let done = match rule {
                CompleteRule::Files(n) => {
                    files
                        .iter()
                        .filter(|(_, st)| st.state == WriteState::Complete)
                        .count()
                        >= *n as usize
                        && files.iter().all(|(_, st)| st.state == WriteState::Complete)
                }
                CompleteRule::Marker(m) => {
                    let mpath = format!("{dir}/{m}");
                    let Some((_, mst)) = files.iter().find(|(p, _)| **p == mpath) else {
                        continue;
                    };
                    let early = files.iter().find(|(p, st)| {
                        **p != mpath && (st.state != WriteState::Complete || st.mtime_ns > mst.mtime_ns)
                    });
                    if let Some((p, _)) = early {
                        // Failure case D4: the marker was written before this file was closed.
                        let msg = format!("marker {m} appeared before {p} was closed");
                        self.close(d, State::Incomplete, Some(msg))?;
                        continue;
                    }
                    true
                }
            };
            if done {
                d.files = files.iter().map(|(p, st)| ((*p).clone(), file_rec(st))).collect();
                for part in d.parts.values_mut() {
                    part.state = State::Complete;
                    part.done_ns = Some(now_ns());
                }
                if self.completion.job_nodes().is_some() {
                    // This node's part is in; the job-wide verdict settles it.
                    if let Some(msg) = self.check_files(d)? {
                        self.close(d, State::Incomplete, Some(msg))?;
                    } else {
                        d.node_done = true;
                        record::save(&self.store, d)?;
                    }
                    continue;
                }
                self.finish(d, before)?;
            }
        }
        Ok(())
    }

    /// Settle this node's open records against the job-wide verdicts: records agreed
    /// complete are finished (level decision, every node's part kept), those that can
    /// never complete are closed with the reason. Called with the lock held.
    pub(crate) fn settle_locked(&self, nodes: &dyn JobNodes) -> Result<()> {
        let (mut all, _) = record::load_all(&self.store, &self.cfg.job)?;
        if !all.iter().any(|d| d.state == State::Open) {
            return Ok(());
        }
        let views = self.views(nodes, &all);
        let mut changed = false;
        for i in 0..all.len() {
            if all[i].state != State::Open {
                continue;
            }
            let j = judge(&views, all[i].id, self.cfg.world);
            let (before, rest) = all.split_at_mut(i);
            let d = &mut rest[0];
            match j.state {
                JobState::Complete => {
                    d.nodes = j.parts;
                    self.decide_and_close(d, before)?;
                    nodes.announce(&self.cfg.job, d);
                    changed = true;
                }
                JobState::Invalid(r) => {
                    self.close(d, State::Invalid, Some(r))?;
                }
                JobState::Incomplete(r) => {
                    self.close(d, State::Incomplete, Some(r))?;
                }
                JobState::Open(_) => {}
            }
        }
        if changed {
            self.retention_locked()?;
        }
        Ok(())
    }

    /// Every dataset of the job, oldest first, after noticing dead ranks and judging
    /// transparent directories. Records that cannot be parsed are reported in the
    /// second list (path, reason).
    pub fn list(&self) -> Result<(Vec<Dataset>, record::BadRecords)> {
        let _l = self.lock()?;
        let (mut all, bad) = record::load_all(&self.store, &self.cfg.job)?;
        self.refresh_locked(&mut all)?;
        if let Some(nodes) = self.completion.job_nodes() {
            self.settle_locked(nodes)?;
        }
        self.retention_locked()?;
        let (all, _) = record::load_all(&self.store, &self.cfg.job)?;
        Ok((all, bad))
    }

    /// Every node's view now (this node's records as stored).
    pub fn job_views(&self) -> Result<Option<Views>> {
        let Some(nodes) = self.completion.job_nodes() else {
            return Ok(None);
        };
        let (local, _) = self.list()?;
        Ok(Some(self.views(nodes, &local)))
    }

    /// Every dataset of the job as the whole job sees it (cluster mode; on a single node
    /// this node's records), oldest first.
    pub fn job_list(&self) -> Result<Vec<JobDataset>> {
        let Some(v) = self.job_views()? else {
            let (all, _) = self.list()?;
            return Ok(all
                .into_iter()
                .map(|d| JobDataset {
                    id: d.id,
                    name: d.name.clone(),
                    state: match d.state {
                        State::Complete => JobState::Complete,
                        State::Invalid => JobState::Invalid(d.reason.clone().unwrap_or_default()),
                        State::Incomplete => JobState::Incomplete(d.reason.clone().unwrap_or_default()),
                        State::Open => JobState::Open("waiting".into()),
                    },
                    parts: [(
                        self.cfg.node.clone(),
                        NodePart {
                            ranks: complete_ranks(&d),
                            files: d.files.clone(),
                        },
                    )]
                    .into(),
                    created_ns: d.created_ns,
                    closed_ns: d.closed_ns,
                    unreachable: Vec::new(),
                })
                .collect());
        };
        Ok(v.ids()
            .into_iter()
            .map(|id| judge(&v, id, self.cfg.world))
            .collect())
    }

    /// One dataset.
    pub fn show(&self, id: u64) -> Result<Dataset> {
        let (all, _) = self.list()?;
        all.into_iter()
            .find(|d| d.id == id)
            .ok_or(DatasetError::NotFound(id))
    }

    /// Delete dataset `id`: its record and its local files whose content is still the
    /// dataset's (a file rewritten by a newer dataset stays).
    pub fn delete(&self, id: u64) -> Result<()> {
        let _l = self.lock()?;
        let mut d = record::load(&self.store, &self.cfg.job, id)?;
        let (all, _) = record::load_all(&self.store, &self.cfg.job)?;
        let kept: std::collections::HashSet<String> = all
            .iter()
            .filter(|o| o.id != id && o.state != State::Incomplete && !o.evicted)
            .flat_map(|o| o.files.keys().cloned())
            .collect();
        self.remove_local(&mut d, &kept);
        record::remove(&self.store, &self.cfg.job, id)
    }
}

fn file_rec(st: &Stat) -> FileRec {
    FileRec {
        size: st.size,
        crc32c: 0,
        mtime_ns: st.mtime_ns,
        levels: vec!["local".into()],
    }
}

/// A dataset name: 1-255 bytes, no control characters.
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 255 || name.chars().any(|c| c.is_control()) {
        return Err(DatasetError::Invalid(format!(
            "dataset name {name:?}: 1-255 bytes without control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::remove_lock;
    use crate::Config;
    use ckptfs_store::Store;

    /// A node joining dataset `id` that another node began takes `id` and its next
    /// dataset is `id + 1`, as on the node that began it (it used to be `id + 2`).
    #[test]
    fn a_join_moves_the_next_id_past_it_without_using_one_up() {
        let name = format!("hd-noteid-{}", std::process::id());
        let mut o = ckptfs_store::StoreOptions::named(&name);
        o.mem_size = Some(8 << 20);
        o.chunk_size = Some(64 << 10);
        let store = Store::create(&o).unwrap();
        let ds = Datasets::single_node(store, Config::for_job("t"));
        let join = |id: u64| crate::id_floor::raise_locked(&ds.store, &ds.cfg.job, id + 1).unwrap();
        join(1);
        assert_eq!(ds.next_id(&[]).unwrap(), 2);
        join(5);
        join(3); // never lowers it
        assert_eq!(ds.next_id(&[]).unwrap(), 6);
        drop(ds);
        let _ = Store::destroy(&name);
        remove_lock(&name);
    }
}
