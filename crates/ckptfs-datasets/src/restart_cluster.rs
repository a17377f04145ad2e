//! Restart across nodes: the newest dataset complete job-wide whose every node's part
//! can be wholly recovered, judged by every rank from the same answers (the nodes'
//! records and which node holds which file), and this node's files brought back from
//! the fastest level: its own store, then a partner's memory, then the PFS, each file's
//! CRC32C checked against the agreed record.

use crate::completion::{JobNodes, Want};
use crate::costs::{record_erasure_transfer, record_partner_transfer, record_pfs_transfer};
use crate::error::{DatasetError, Result};
use crate::handle::Datasets;
use crate::jobwide::{judge, JobDataset, JobState, Views};
use crate::record::{self, Dataset, NodePart, State};
use crate::restart::{local_ok, Restart, Skipped, Source};
use crate::restart::{Found, Recheck, RecheckFn};
use ckptfs_level::Step;
use std::collections::BTreeMap;

impl Datasets {
    /// Where each file of `owner`'s part can come from, fastest first, or the reason one
    /// cannot. `owner`'s own store counts as `Local` (for this node: checked here; for
    /// another: as that node's daemon answers).
    pub(crate) fn part_sources(
        &self,
        nodes: &dyn JobNodes,
        owner: &str,
        part: &NodePart,
        id: u64,
    ) -> std::result::Result<Vec<(String, Source)>, String> {
        let me = nodes.me();
        let wants: Vec<Want> = part
            .files
            .iter()
            .map(|(p, f)| Want {
                path: p.clone(),
                size: f.size,
                crc32c: f.crc32c,
            })
            .collect();
        // Ask the other nodes only for what this node cannot see itself.
        let local: Vec<bool> = if owner == me {
            wants
                .iter()
                .map(|w| local_ok(self, &w.path, w.size, w.crc32c))
                .collect()
        } else {
            vec![false; wants.len()]
        };
        // The owner's own store first; partners only for what it lacks (each answer
        // reads the files for their CRC32C).
        let mut holders: BTreeMap<String, Vec<bool>> = BTreeMap::new();
        if owner != me {
            holders.extend(nodes.holders(owner, &wants, &[owner.to_string()]));
        }
        let owner_has = |k: usize| holders.get(owner).and_then(|v| v.get(k)).copied() == Some(true);
        let missing: Vec<usize> = (0..wants.len()).filter(|&k| !local[k] && !owner_has(k)).collect();
        if !missing.is_empty() {
            let sub: Vec<Want> = missing.iter().map(|&k| wants[k].clone()).collect();
            let others: Vec<String> = nodes
                .nodes()
                .into_iter()
                .filter(|n| n != me && n != owner)
                .collect();
            for (n, v) in nodes.holders(owner, &sub, &others) {
                let mut full = vec![false; wants.len()];
                for (j, &k) in missing.iter().enumerate() {
                    full[k] = v.get(j).copied().unwrap_or(false);
                }
                holders.insert(n, full);
            }
        }
        let mut out = Vec::new();
        // The owner's erasure set, asked once, for the files no copy holds (issue 32).
        let mut erasure: Option<std::result::Result<String, String>> = None;
        // Partner copies are read where the `[levels]` order lists `partner`.
        let partners = self.order.reads(&Step::Partner);
        for (k, w) in wants.iter().enumerate() {
            let held_by = |n: &str| holders.get(n).and_then(|v| v.get(k)).copied() == Some(true);
            let src = if local[k] || (owner != me && held_by(owner)) {
                Source::Local
            } else if let Some(n) = holders
                .keys()
                .find(|n| partners && n.as_str() != owner && held_by(n))
            {
                Source::Partner(n.clone())
            } else if partners && owner != me && nodes.holds_copy(owner, w) {
                Source::Partner(me.to_string())
            } else if let Ok(l) = erasure
                .get_or_insert_with(|| nodes.erasure_source(&self.cfg.job, id, owner, &wants))
                .as_ref()
            {
                Source::Erasure(l.clone())
            } else if let Some(src) = self.held_beyond(&w.path, w.size, w.crc32c) {
                src
            } else {
                return Err(format!(
                    "file {} of node {owner} ({} bytes, crc32c {:08x}) is damaged or lost on every level (local{}{}{})",
                    w.path,
                    w.size,
                    w.crc32c,
                    if partners { ", partner" } else { "" },
                    match &erasure {
                        Some(Err(e)) if e != "no erasure sets" => format!(", erasure: {e}"),
                        _ => String::new(),
                    },
                    self.beyond_names()
                ));
            };
            out.push((w.path.clone(), src));
        }
        Ok(out)
    }

    /// The newest dataset complete job-wide whose every node's file is held somewhere
    /// (what a restart would choose, without restoring anything).
    pub(crate) fn have_cluster(&self, nodes: &dyn JobNodes) -> Result<Option<(u64, String)>> {
        let (local, _) = self.list()?;
        let views = self.views(nodes, &local);
        let mut passed_over = None;
        'ids: for id in views.ids().into_iter().rev() {
            let j = judge(&views, id, self.cfg.world);
            if j.state != JobState::Complete {
                continue;
            }
            for (owner, part) in &j.parts {
                if self.part_sources(nodes, owner, part, id).is_err() {
                    passed_over.get_or_insert((id, j.name.clone()));
                    continue 'ids;
                }
            }
            if let Some(e) = unreachable_error(&views, passed_over.as_ref()) {
                return Err(e);
            }
            return Ok(Some((id, j.name)));
        }
        match unreachable_error(&views, passed_over.as_ref()) {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// Bring one of this node's files back from `src`; the reason when it fails.
    pub(crate) fn bring_back(
        &self,
        nodes: &dyn JobNodes,
        id: u64,
        path: &str,
        size: u64,
        crc: u32,
        src: &Source,
    ) -> Option<String> {
        let r = match src {
            Source::Local => return None,
            Source::Partner(n) => nodes
                .fetch(&self.store, n, path)
                .map(|_| ())
                .map_err(|e| format!("from the partner copy on {n}: {e}")),
            // The whole part at once (a file already back is kept: the fastest level).
            Source::Erasure(_) if local_ok(self, path, size, crc) => Ok(()),
            Source::Erasure(l) => nodes
                .erasure_rebuild(&self.store, &self.cfg.job, id)
                .map_err(|e| format!("from {l}: {e}")),
            Source::Pfs | Source::Level(_) => self.fetch_beyond(path, src),
        };
        match r {
            Err(e) => Some(format!("file {path}: restore {e}")),
            Ok(()) if !local_ok(self, path, size, crc) => {
                // Not the dataset's bytes: do not leave them under its name.
                let _ = self.store.unlink(path);
                Some(format!(
                    "file {path}: the bytes brought back ({}) do not match the dataset's checksum",
                    src.label()
                ))
            }
            Ok(()) => None,
        }
    }

    /// [`Datasets::restart`] across the job's nodes.
    /// `recheck`: asked about the candidate dataset right before anything is restored
    /// (the restart round's rule, failure case D9; None: no round).
    pub(crate) fn restart_cluster(&self, nodes: &dyn JobNodes, recheck: Option<RecheckFn>) -> Result<Found> {
        let (local, _) = self.list()?;
        let views = self.views(nodes, &local);
        let me = nodes.me().to_string();
        let mut skipped = Vec::new();
        // Failure case D10b: a complete dataset passed over for lack of files while some
        // node could not be asked may be whole after all: the ranks that can see every
        // node would choose it.
        let mut passed_over = None;
        'ids: for id in views.ids().into_iter().rev() {
            let j = judge(&views, id, self.cfg.world);
            let skip = |reason: String| Skipped {
                id,
                name: j.name.clone(),
                reason,
            };
            if j.state != JobState::Complete {
                skipped.push(skip(format!(
                    "{} job-wide{}",
                    j.state.name(),
                    j.state.reason().map(|r| format!(": {r}")).unwrap_or_default()
                )));
                continue;
            }
            let mut mine = Vec::new();
            for (owner, part) in &j.parts {
                match self.part_sources(nodes, owner, part, id) {
                    Ok(s) if *owner == me => mine = s,
                    Ok(_) => {}
                    Err(reason) => {
                        passed_over.get_or_insert((id, j.name.clone()));
                        skipped.push(skip(reason));
                        continue 'ids;
                    }
                }
            }
            if let Some(e) = unreachable_error(&views, passed_over.as_ref()) {
                return Err(e);
            }
            let round = match recheck.map(|f| f(id)).transpose()? {
                Some(Recheck::Adopt(m)) => return Ok(Found::Adopt(m, skipped)),
                Some(Recheck::Go(r)) => Some(r),
                None => None,
            };
            let part = j.parts.get(&me).cloned().unwrap_or(NodePart {
                ranks: Vec::new(),
                files: BTreeMap::new(),
            });
            let t0 = std::time::Instant::now();
            let mut restored = Vec::new();
            let mut pfs_bytes = 0;
            let (mut partner_bytes, mut partner_s) = (0, 0.0);
            let (mut erasure_bytes, mut erasure_s) = (0, 0.0);
            for (path, src) in &mine {
                let f = &part.files[path];
                let t1 = std::time::Instant::now();
                if let Some(reason) = self.bring_back(nodes, id, path, f.size, f.crc32c, src) {
                    skipped.push(skip(reason));
                    continue 'ids;
                }
                if matches!(src, Source::Partner(_)) {
                    partner_bytes += f.size;
                    partner_s += t1.elapsed().as_secs_f64();
                }
                if matches!(src, Source::Erasure(_)) {
                    erasure_bytes += f.size;
                    erasure_s += t1.elapsed().as_secs_f64();
                }
                if *src != Source::Local {
                    restored.push((path.clone(), f.size));
                }
                if *src == Source::Pfs {
                    pfs_bytes += f.size;
                }
            }
            if pfs_bytes > 0 {
                let _ = record_pfs_transfer(self, pfs_bytes, t0.elapsed().as_secs_f64());
            }
            if partner_bytes > 0 {
                let _ = record_partner_transfer(self, partner_bytes, partner_s);
            }
            if erasure_bytes > 0 {
                let _ = record_erasure_transfer(self, erasure_bytes, erasure_s);
            }
            let chosen = self.adopt_record(&local, &j, &part)?;
            return Ok(Found::Chosen(Box::new(Restart {
                chosen: Some(chosen),
                restored,
                skipped,
                sources: mine.iter().map(|(p, s)| (p.clone(), s.label())).collect(),
                round,
                adopted: false,
                missing: Vec::new(),
            })));
        }
        if let Some(e) = unreachable_error(&views, passed_over.as_ref()) {
            return Err(e);
        }
        Ok(Found::Chosen(Box::new(Restart {
            chosen: None,
            restored: Vec::new(),
            skipped,
            sources: BTreeMap::new(),
            round: None,
            adopted: false,
            missing: Vec::new(),
        })))
    }

    /// This node's record of the chosen dataset; a replacement node (its records lost
    /// with its store) gets one rebuilt from the agreed parts.
    pub(crate) fn adopt_record(&self, local: &[Dataset], j: &JobDataset, part: &NodePart) -> Result<Dataset> {
        if let Some(d) = local.iter().find(|d| d.id == j.id) {
            return Ok(d.clone());
        }
        let _l = self.lock()?;
        let mut d = self.new_record(j.id, &j.name, None);
        d.state = State::Complete;
        d.reason = Some("rebuilt at restart from the other nodes' records".into());
        d.closed_ns = j.closed_ns;
        d.files = part.files.clone();
        d.node_done = true;
        d.nodes = j.parts.clone();
        record::save(&self.store, &d)?;
        Ok(d)
    }
}

/// Failure case D10b: the error for a restart that could not ask every node and
/// passed over dataset `passed`, complete job-wide, for lack of files: the ranks that
/// can ask every node may find it whole, so choosing an older one (or none) here would
/// split the job. None when every node answered, or nothing was passed over.
fn unreachable_error(views: &Views, passed: Option<&(u64, String)>) -> Option<DatasetError> {
    let (id, name) = passed?;
    let lost: Vec<String> = views
        .by_node
        .iter()
        .filter_map(|(n, r)| r.as_ref().err().map(|e| format!("{n}: {e}")))
        .collect();
    if lost.is_empty() {
        return None;
    }
    Some(DatasetError::Unreachable {
        nodes: lost.join("; "),
        why: format!("dataset {id} ({name}) is complete but not wholly held by the nodes that answered"),
    })
}
