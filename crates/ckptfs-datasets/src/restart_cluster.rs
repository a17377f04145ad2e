//! Restart across nodes: the newest dataset complete job-wide whose every node's part
//! can be wholly recovered, judged by every rank from the same answers (the nodes'
//! records and which node holds which file), and this node's files brought back from
//! the fastest level: its own store, then the set levels (`JobNodes::set_levels`:
//! partner copies, erasure sets, asked by level id), then the PFS and the registry,
//! each file's CRC32C checked against the agreed record.

use crate::completion::{JobNodes, Want};
use crate::costs::{record_level_transfer, record_pfs_transfer};
use crate::error::{DatasetError, Result};
use crate::handle::Datasets;
use crate::jobwide::{judge, JobDataset, JobState, Views};
use crate::record::{self, Dataset, NodePart, State};
use crate::restart::{local_ok, Restart, Skipped, Source};
use crate::restart::{Found, Recheck, RecheckFn};
use ckptfs_level::{dataset_key, LevelId, PartFile, SetProtection};
use ckptfs_store::level::StoreLevel;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Datasets {
    /// The set levels the read order reads, in their order ([`JobNodes::set_levels`];
    /// [`ckptfs_level::ReadOrder::reads_set_kind`] says which kinds are read).
    pub(crate) fn set_levels_read(&self, nodes: &dyn JobNodes) -> Vec<Arc<dyn SetProtection>> {
        nodes
            .set_levels()
            .into_iter()
            .filter(|l| self.order.reads_set_kind(&l.id().kind))
            .collect()
    }

    /// Where each file of `owner`'s part can come from, fastest first, or the reason one
    /// cannot. `owner`'s own store counts as `Local` (for this node: checked here; for
    /// another: as that node's daemon answers); then each set level in read order is
    /// asked, once, for the files still without a source (the level instance it names
    /// is the source: `partner:node3`, `erasure:set0`); then the PFS and the registry.
    pub(crate) fn part_sources(
        &self,
        nodes: &dyn JobNodes,
        owner: &str,
        part: &NodePart,
        id: u64,
    ) -> std::result::Result<Vec<(String, Source)>, String> {
        let me = nodes.me();
        let files: Vec<PartFile> = part
            .files
            .iter()
            .map(|(p, f)| PartFile {
                path: p.clone(),
                size: f.size,
                crc32c: f.crc32c,
            })
            .collect();
        // Ask the other nodes only for what this node cannot see itself.
        let mut srcs: Vec<Option<Source>> = if owner == me {
            files
                .iter()
                .map(|f| local_ok(self, &f.path, f.size, f.crc32c).then_some(Source::Local))
                .collect()
        } else {
            // The owner's own store first (each answer reads the files for their CRC32C).
            let wants: Vec<Want> = files.iter().map(Want::from).collect();
            let has = nodes
                .holders(owner, &wants, &[owner.to_string()])
                .remove(owner)
                .unwrap_or_default();
            (0..files.len())
                .map(|k| (has.get(k).copied() == Some(true)).then_some(Source::Local))
                .collect()
        };
        // The set levels, each asked once for the files no faster level has.
        let key = dataset_key(&self.cfg.job, id);
        let mut asked = String::new();
        for level in self.set_levels_read(nodes) {
            let missing: Vec<usize> = (0..files.len()).filter(|&k| srcs[k].is_none()).collect();
            if missing.is_empty() {
                break;
            }
            if !level.members().iter().any(|m| m == owner) {
                continue;
            }
            let sub: Vec<PartFile> = missing.iter().map(|&k| files[k].clone()).collect();
            match level.locate(&key, owner, &sub) {
                Ok(found) => {
                    asked.push_str(&format!(", {}", level.id()));
                    for (j, &k) in missing.iter().enumerate() {
                        if let Some(Some(l)) = found.get(j) {
                            srcs[k] = Some(Source::Level(l.to_string()));
                        }
                    }
                }
                Err(e) => asked.push_str(&format!(", {}: {e}", level.id())),
            }
        }
        let mut out = Vec::new();
        for (f, src) in files.iter().zip(srcs) {
            let src = match src.or_else(|| self.held_beyond(&f.path, f.size, f.crc32c)) {
                Some(s) => s,
                None => {
                    return Err(format!(
                        "file {} of node {owner} ({} bytes, crc32c {:08x}) is damaged or lost on every level (local{asked}{})",
                        f.path,
                        f.size,
                        f.crc32c,
                        self.beyond_names()
                    ))
                }
            };
            out.push((f.path.clone(), src));
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

    /// Bring one of this node's files back from `src`: the bytes a set level wrote
    /// (with the kind of its level id, for the measured costs), or the reason it failed.
    /// A file already back with the dataset's content is kept (a set level may bring a
    /// whole part back at once: its other files are then back too).
    pub(crate) fn bring_back(
        &self,
        nodes: &dyn JobNodes,
        id: u64,
        path: &str,
        size: u64,
        crc: u32,
        src: &Source,
    ) -> std::result::Result<Option<(String, u64)>, String> {
        let mut wrote = None;
        let r = match src {
            Source::Local => return Ok(None),
            _ if local_ok(self, path, size, crc) => return Ok(None),
            Source::Level(l) => match LevelId::parse(l).and_then(|lid| {
                let level = self.set_levels_read(nodes).into_iter().find(|s| s.covers(&lid))?;
                Some((lid, level))
            }) {
                Some((lid, level)) => {
                    let file = PartFile {
                        path: path.to_string(),
                        size,
                        crc32c: crc,
                    };
                    StoreLevel::new(&self.store)
                        .map_err(|e| format!("the store as a level: {e}"))
                        .and_then(|into| {
                            level
                                .recover_files(
                                    &dataset_key(&self.cfg.job, id),
                                    nodes.me(),
                                    std::slice::from_ref(&file),
                                    &lid,
                                    &into,
                                )
                                .map_err(|e| format!("from {l}: {e}"))
                        })
                        .map(|r| wrote = Some((lid.kind.clone(), r.bytes)))
                }
                None => self.fetch_beyond(path, src),
            },
            Source::Pfs => self.fetch_beyond(path, src),
        };
        match r {
            Err(e) => Err(format!("file {path}: restore {e}")),
            Ok(()) if !local_ok(self, path, size, crc) => {
                // Not the dataset's bytes: do not leave them under its name.
                let _ = self.store.unlink(path);
                Err(format!(
                    "file {path}: the bytes brought back ({}) do not match the dataset's checksum",
                    src.label()
                ))
            }
            Ok(()) => Ok(wrote),
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
            // Per set level kind: bytes it wrote and seconds taken.
            let mut by_kind: BTreeMap<String, (u64, f64)> = BTreeMap::new();
            for (path, src) in &mine {
                let f = &part.files[path];
                let t1 = std::time::Instant::now();
                match self.bring_back(nodes, id, path, f.size, f.crc32c, src) {
                    Err(reason) => {
                        skipped.push(skip(reason));
                        continue 'ids;
                    }
                    Ok(Some((kind, bytes))) => {
                        let e = by_kind.entry(kind).or_default();
                        e.0 += bytes;
                        e.1 += t1.elapsed().as_secs_f64();
                    }
                    Ok(None) => {}
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
            for (kind, (bytes, secs)) in by_kind {
                let _ = record_level_transfer(self, &kind, bytes, secs);
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
