//! Restart agreement between ranks (failure case D9): every rank of one job restart
//! gets the same dataset, even when a fast rank resumed and deleted its files of the
//! chosen dataset before a slower rank looked.
//!
//! Without this, each rank judges "newest wholly recoverable" on its own, and a rank
//! that decides after another rank deleted (or rewrote) its files of the chosen dataset
//! finds it no longer whole and takes an older one. So the first rank's choice is
//! recorded as a **restart round** in its node's store
//! (`/.ckptfs/datasets/JOB/restarts.json`), read by every rank on every node (this
//! node's file, and the other nodes' through their daemons: `Query {"op":"restarts"}`),
//! and the later ranks of the same job restart adopt it:
//!
//! - the newest round any node reports is **joined** (its dataset adopted) by a rank
//!   that is not among its ranks yet (the union over the nodes), while fewer than
//!   `world` ranks have taken part and no dataset newer than any id known when it was
//!   opened is complete job-wide (a complete newer dataset means every rank restarted
//!   and the job checkpointed again: the round is over);
//! - otherwise the rank opens the next round with its own search. Right before it
//!   modifies anything (restores files), it reads the rounds again: a rank that
//!   deleted files must have recorded its round before it returned to the application,
//!   so a search that saw such a deletion also sees that round now, and adopts its
//!   dataset instead;
//! - adopting restores this node's files of that dataset that are still recoverable
//!   (own store, a partner's copy, the PFS) and lists the others (`missing`: files the
//!   faster ranks of this node deleted themselves). A round whose dataset has nothing
//!   left on this node, or is no longer complete job-wide, is not adopted.

use crate::costs::record_level_transfer;
use crate::error::{DatasetError, Result};
use crate::handle::Datasets;
use crate::jobwide::{judge, JobState};
use crate::record::{self, job_dir, NodePart, State};
use crate::restart::{local_ok, Found, Merged, Recheck, Restart, Skipped, Source};
use crate::rounds::rounds_path;
pub use crate::rounds::{load_rounds, Round};
use std::collections::BTreeMap;

/// Rounds kept per node (the newest by number).
const KEEP: usize = 16;

/// The newest round over every node's entries (None: no round yet). Two entries of one
/// round naming different datasets (two first ranks searched at once and saw different
/// files) resolve to the newest dataset, the one the faster rank saw whole.
pub(crate) fn newest(rounds: &[(String, Round)]) -> Option<Merged> {
    let r = rounds.iter().map(|x| x.1.round).max()?;
    let of: Vec<&Round> = rounds.iter().filter(|x| x.1.round == r).map(|x| &x.1).collect();
    let best = of.iter().max_by_key(|x| x.id)?;
    Some(Merged {
        round: r,
        id: best.id,
        name: best.name.clone(),
        ranks: of.iter().flat_map(|x| x.ranks.iter().cloned()).collect(),
        nodes: rounds
            .iter()
            .filter(|x| x.1.round == r)
            .map(|x| x.0.clone())
            .collect(),
        world: of.iter().map(|x| x.world).max().unwrap_or(1),
        max_id: of.iter().map(|x| x.max_id).min().unwrap_or(0),
    })
}

impl Datasets {
    /// This node's id in the rounds.
    fn me(&self) -> String {
        self.completion
            .job_nodes()
            .map(|n| n.me().to_string())
            .unwrap_or_else(|| self.cfg.node.clone())
    }

    /// Every node's restart rounds of this job (this node's from its store), with the
    /// node that recorded each.
    pub(crate) fn all_rounds(&self) -> Vec<(String, Round)> {
        let me = self.me();
        let mut v: Vec<(String, Round)> = load_rounds(&self.store, &self.cfg.job)
            .into_iter()
            .map(|r| (me.clone(), r))
            .collect();
        if let Some(nodes) = self.completion.job_nodes() {
            for (n, r) in nodes.restarts(&self.cfg.job) {
                v.extend(r.into_iter().map(|r| (n.clone(), r)));
            }
        }
        v
    }

    /// Ids complete job-wide that are newer than `after`.
    fn complete_after(&self, after: u64) -> Result<Vec<u64>> {
        if let Some(nodes) = self.completion.job_nodes() {
            let (local, _) = record::load_all(&self.store, &self.cfg.job)?;
            let views = self.views(nodes, &local);
            return Ok(views
                .ids()
                .into_iter()
                .filter(|&id| id > after)
                .filter(|&id| judge(&views, id, self.cfg.world).state == JobState::Complete)
                .collect());
        }
        let (all, _) = record::load_all(&self.store, &self.cfg.job)?;
        Ok(all
            .iter()
            .filter(|d| d.id > after && d.state == State::Complete)
            .map(|d| d.id)
            .collect())
    }

    /// The round this rank must join, if any (see the module documentation).
    pub(crate) fn joinable(&self, rounds: &[(String, Round)]) -> Result<Option<Merged>> {
        let Some(m) = newest(rounds) else {
            return Ok(None);
        };
        let world = m.world.max(self.cfg.world) as usize;
        if m.ranks.contains(&self.cfg.rank) || m.ranks.len() >= world {
            return Ok(None);
        }
        if !self.complete_after(m.max_id)?.is_empty() {
            return Ok(None);
        }
        Ok(Some(m))
    }

    /// Before a search restores anything for `candidate` in round `planned`: a round
    /// opened meanwhile by another rank decides.
    pub(crate) fn recheck(&self, planned: u64, candidate: u64) -> Result<Recheck> {
        match self.joinable(&self.all_rounds())? {
            Some(m) if m.round >= planned && m.id != candidate => Ok(Recheck::Adopt(m)),
            Some(m) if m.round >= planned => Ok(Recheck::Go(m.round)),
            _ => Ok(Recheck::Go(planned)),
        }
    }

    /// Record that this rank restarted from `id` in `round`.
    pub(crate) fn record_round(&self, round: u64, id: u64, name: &str, max_id: u64) -> Result<()> {
        let _l = self.lock()?;
        let mut v = load_rounds(&self.store, &self.cfg.job);
        let now = ckptfs_settings::now_ns();
        match v.iter_mut().find(|r| r.round == round && r.id == id) {
            Some(r) => {
                if !r.ranks.contains(&self.cfg.rank) {
                    r.ranks.push(self.cfg.rank.clone());
                }
                r.at_ns = now;
            }
            None => v.push(Round {
                round,
                id,
                name: name.to_string(),
                ranks: vec![self.cfg.rank.clone()],
                world: self.cfg.world,
                max_id,
                at_ns: now,
            }),
        }
        v.sort_by_key(|r| r.round);
        let drop = v.len().saturating_sub(KEEP);
        v.drain(..drop);
        record::mkdir_p(&self.store, &job_dir(&self.cfg.job))?;
        let bytes = serde_json::to_vec_pretty(&v).map_err(|e| DatasetError::Invalid(e.to_string()))?;
        record::write_atomic(&self.store, &rounds_path(&self.cfg.job), &bytes)
    }

    /// The largest dataset id any node knows now.
    pub(crate) fn known_max_id(&self) -> Result<u64> {
        let (local, _) = record::load_all(&self.store, &self.cfg.job)?;
        let mine = local.iter().map(|d| d.id).max().unwrap_or(0);
        Ok(match self.completion.job_nodes() {
            Some(nodes) => self.views(nodes, &local).max_id().max(mine),
            None => mine,
        })
    }

    /// Adopt round `m`'s dataset: bring back this node's files of it that are still
    /// recoverable; the reason when it cannot be adopted.
    pub(crate) fn adopt_round(&self, m: &Merged) -> Result<std::result::Result<Restart, String>> {
        let me = self.me();
        if m.id == 0 {
            // The round found nothing recoverable: neither does this rank.
            return Ok(Ok(Restart {
                chosen: None,
                restored: Vec::new(),
                skipped: Vec::new(),
                sources: BTreeMap::new(),
                round: Some(m.round),
                adopted: true,
                missing: Vec::new(),
            }));
        }
        let (local, _) = self.list()?;
        let (part, job) = match self.completion.job_nodes() {
            Some(nodes) => {
                let views = self.views(nodes, &local);
                let j = judge(&views, m.id, self.cfg.world);
                if j.state != JobState::Complete {
                    return Ok(Err(format!("it is {} job-wide", j.state.name())));
                }
                // A node's part may lack files only when its own ranks took part in the
                // round (they resumed and deleted them); a node lost or replaced since
                // (no entry of the round) lost them: the dataset is gone for good.
                for (owner, p) in &j.parts {
                    if *owner != me && !m.nodes.contains(owner) {
                        if let Err(why) = self.part_sources(nodes, owner, p, m.id) {
                            return Ok(Err(format!(
                                "node {owner} took no part in the round and its part is not whole: {why}"
                            )));
                        }
                    }
                }
                let part = j.parts.get(&me).cloned().unwrap_or(NodePart {
                    ranks: Vec::new(),
                    files: BTreeMap::new(),
                });
                (part, Some(j))
            }
            None => match local.iter().find(|d| d.id == m.id) {
                Some(d) if d.state == State::Complete => (
                    NodePart {
                        ranks: Vec::new(),
                        files: d.files.clone(),
                    },
                    None,
                ),
                Some(d) => return Ok(Err(format!("it is {}", d.state.name()))),
                None => return Ok(Err("its record is gone".into())),
            },
        };
        let mut restored = Vec::new();
        let mut missing = Vec::new();
        let mut sources = BTreeMap::new();
        for (path, f) in &part.files {
            let mut src = None;
            if local_ok(self, path, f.size, f.crc32c) {
                src = Some(Source::Local);
            }
            // The set levels in read order (partner copies, erasure sets, ...): the
            // first that names a source for the file and brings it back (a level that
            // rebuilds the whole part brings the part's other files back with it).
            if let (None, Some(nodes)) = (&src, self.completion.job_nodes()) {
                let key = ckptfs_level::dataset_key(&self.cfg.job, m.id);
                let file = ckptfs_level::PartFile {
                    path: path.clone(),
                    size: f.size,
                    crc32c: f.crc32c,
                };
                for level in self.set_levels_read(nodes) {
                    if !level.members().contains(&me) {
                        continue;
                    }
                    let Ok(found) = level.locate(&key, &me, std::slice::from_ref(&file)) else {
                        continue;
                    };
                    let Some(Some(l)) = found.into_iter().next() else {
                        continue;
                    };
                    let s = Source::Level(l.to_string());
                    let t0 = std::time::Instant::now();
                    if let Ok(wrote) = self.bring_back(nodes, m.id, path, f.size, f.crc32c, &s) {
                        if let Some((kind, bytes)) = wrote {
                            let _ = record_level_transfer(self, &kind, bytes, t0.elapsed().as_secs_f64());
                        }
                        src = Some(s);
                        break;
                    }
                }
            }
            if src.is_none() {
                if let Some(s) = self.held_beyond(path, f.size, f.crc32c) {
                    if self.fetch_beyond(path, &s).is_ok() && local_ok(self, path, f.size, f.crc32c) {
                        src = Some(s);
                    }
                }
            }
            match src {
                Some(s) => {
                    if s != Source::Local {
                        restored.push((path.clone(), f.size));
                    }
                    sources.insert(path.clone(), s.label());
                }
                None => missing.push(path.clone()),
            }
        }
        if !missing.is_empty() && !m.nodes.contains(&me) {
            return Ok(Err(format!(
                "no rank of this node took part in the round and {} of its files are on no level",
                missing.len()
            )));
        }
        if !part.files.is_empty() && missing.len() == part.files.len() {
            return Ok(Err("none of this node's files of it is left on any level".into()));
        }
        let chosen = match (&job, self.completion.job_nodes()) {
            (Some(j), Some(_)) => self.adopt_record(&local, j, &part)?,
            _ => local
                .iter()
                .find(|d| d.id == m.id)
                .cloned()
                .ok_or(DatasetError::NotFound(m.id))?,
        };
        Ok(Ok(Restart {
            chosen: Some(chosen),
            restored,
            skipped: Vec::new(),
            sources,
            round: Some(m.round),
            adopted: true,
            missing,
        }))
    }

    /// The dataset [`Datasets::restart`] would choose now (id, name), without restoring
    /// anything: the current restart round's, else the newest wholly recoverable one
    /// (job-wide across nodes).
    pub fn have_restart(&self) -> Result<Option<(u64, String)>> {
        if let Some(m) = self.joinable(&self.all_rounds())? {
            return Ok((m.id != 0).then_some((m.id, m.name)));
        }
        if let Some(nodes) = self.completion.job_nodes() {
            return self.have_cluster(nodes);
        }
        let (all, _) = self.list()?;
        Ok(all
            .iter()
            .rev()
            .find(|d| self.sources(d).is_ok())
            .map(|d| (d.id, d.name.clone())))
    }

    /// Find the newest wholly recoverable dataset and bring its missing files back
    /// (CRC32C checked against the manifest while copying, then against the dataset
    /// record). Datasets that fail are skipped with the reason.
    ///
    /// Every rank of one job restart gets the same dataset (failure case D9): the first
    /// rank's choice is recorded as a restart round and the later ranks adopt it (this
    /// module's documentation): join the current restart round, or open the next one.
    pub fn restart(&self) -> Result<Restart> {
        let rounds = self.all_rounds();
        let mut notes = Vec::new();
        if let Some(m) = self.joinable(&rounds)? {
            match self.adopt_round(&m)? {
                Ok(r) => {
                    self.record_round(m.round, m.id, &m.name, m.max_id)?;
                    return Ok(r);
                }
                Err(why) => notes.push(Skipped {
                    id: m.id,
                    name: m.name.clone(),
                    reason: format!("restart round {} chose it, but {why}: searching again", m.round),
                }),
            }
        }
        let planned = rounds.iter().map(|r| r.1.round).max().unwrap_or(0) + 1;
        let max_id = self.known_max_id()?;
        let recheck = |candidate| self.recheck(planned, candidate);
        let found = match self.completion.job_nodes() {
            Some(nodes) => self.restart_cluster(nodes, Some(&recheck))?,
            None => self.restart_single(Some(&recheck))?,
        };
        let mut r = match found {
            Found::Chosen(r) => *r,
            Found::Adopt(m, skipped) => {
                let mut r = match self.adopt_round(&m)? {
                    Ok(r) => r,
                    // The round's dataset is gone here too: search without rounds.
                    Err(why) => {
                        notes.push(Skipped {
                            id: m.id,
                            name: m.name.clone(),
                            reason: format!("restart round {} chose it, but {why}", m.round),
                        });
                        match self.completion.job_nodes() {
                            Some(nodes) => self.restart_cluster(nodes, None)?,
                            None => self.restart_single(None)?,
                        }
                        .into_restart()
                    }
                };
                if r.adopted {
                    self.record_round(m.round, m.id, &m.name, m.max_id)?;
                }
                r.skipped.splice(0..0, skipped);
                r.skipped.splice(0..0, notes);
                return Ok(r);
            }
        };
        match (&r.chosen, r.round) {
            (Some(d), Some(round)) => self.record_round(round, d.id, &d.name, max_id)?,
            (None, _) => {
                // Nothing recoverable: recorded too, so that the later ranks of this
                // restart do not adopt an older round's dataset. A round opened
                // meanwhile by a rank that found one decides instead.
                if let Some(m) = self
                    .joinable(&self.all_rounds())?
                    .filter(|m| m.round >= planned && m.id != 0)
                {
                    if let Ok(mut a) = self.adopt_round(&m)? {
                        self.record_round(m.round, m.id, &m.name, m.max_id)?;
                        a.skipped.splice(0..0, r.skipped);
                        a.skipped.splice(0..0, notes);
                        return Ok(a);
                    }
                }
                self.record_round(planned, 0, "", max_id)?;
                r.round = Some(planned);
            }
            _ => {}
        }
        r.skipped.splice(0..0, notes);
        Ok(r)
    }
}
