//! Restart from the newest dataset that can be wholly recovered from the levels this
//! node can see: its own store first, then the steps of the read order (the settings'
//! `[levels]` section: the drain destinations' PFS manifests via the agent's checked
//! restore, and the registry's levels, such as object storage, through the mover).
//! Across nodes, restart_cluster.rs adds the set levels (partner copies, erasure sets:
//! `JobNodes::set_levels`) after the node store.

use crate::costs::record_pfs_transfer;
use crate::error::Result;
use crate::filecrc::file_crc;
use crate::handle::Datasets;
use crate::jobwide::JobDataset;
use crate::pfs_copies::pfs_has;
use crate::record::{Dataset, State};
use ckptfs_level::Step;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Where one file of a dataset can come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Source {
    /// The node store holds the exact content.
    Local,
    /// A drain destination's manifest lists the exact content (size and CRC32C).
    Pfs,
    /// A level holds or can bring back the exact content, by its id: an instance of a
    /// set level (`partner:node2` for a copy on node2, `erasure:set0` for the node's
    /// erasure set; `JobNodes::set_levels`) or a level of the read order's registry
    /// (`s3:bucket/prefix`, `pfs:/dir`).
    Level(String),
}

impl Source {
    /// `local`, `pfs` or the level id (`partner:NODE`, `erasure:SET`, ...).
    pub fn label(&self) -> String {
        match self {
            Source::Local => "local".into(),
            Source::Pfs => "pfs".into(),
            Source::Level(id) => id.clone(),
        }
    }
}

/// A dataset passed over, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// Dataset id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Why it cannot be used.
    pub reason: String,
}

/// The outcome of a restart search.
#[derive(Debug, Clone, Serialize)]
pub struct Restart {
    /// The dataset chosen, if any.
    pub chosen: Option<Dataset>,
    /// Files brought back into the store, with their bytes.
    pub restored: Vec<(String, u64)>,
    /// Newer datasets passed over.
    pub skipped: Vec<Skipped>,
    /// Where each file of this node's part came from (`local`, `partner:NODE`, `pfs`).
    #[serde(default)]
    pub sources: std::collections::BTreeMap<String, String>,
    /// The restart round this rank took part in (failure case D9; None: not recorded).
    #[serde(default)]
    pub round: Option<u64>,
    /// The dataset was adopted from a round another rank opened (not searched).
    #[serde(default)]
    pub adopted: bool,
    /// Adopted: files of this node's part left on no level (deleted by faster ranks).
    #[serde(default)]
    pub missing: Vec<String>,
}

pub(crate) fn local_ok(ds: &Datasets, path: &str, size: u64, crc: u32) -> bool {
    match ds.store.stat(path) {
        Ok(st) if st.state == ckptfs_store::WriteState::Complete && st.size == size => {
            matches!(file_crc(&ds.store, path), Ok((n, c)) if n == size && c == crc)
        }
        _ => false,
    }
}

impl Datasets {
    /// The first step of the read order after the node store and the partners that
    /// holds exactly this content: the drain destinations (`pfs`) or a registry level.
    pub(crate) fn held_beyond(&self, path: &str, size: u64, crc: u32) -> Option<Source> {
        for step in self.order.beyond_partners() {
            match step {
                Step::Pfs if pfs_has(&self.cfg.dests, path, size, crc) => return Some(Source::Pfs),
                Step::Level(id) => {
                    let held = self.order.level(id).is_some_and(|l| {
                        matches!(l.stat(path), Ok(Some(s)) if s.version.size == size && s.version.crc32c == Some(crc))
                    });
                    if held {
                        return Some(Source::Level(id.to_string()));
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// The steps after the node store, for messages: `, pfs, s3:b/p` (`; no PFS
    /// destination given` where `pfs` is read but none is given).
    pub(crate) fn beyond_names(&self) -> String {
        let mut s = String::new();
        for step in self.order.beyond_partners() {
            match step {
                Step::Pfs if self.cfg.dests.is_empty() => s.push_str("; no PFS destination given"),
                Step::Pfs => s.push_str(", pfs"),
                Step::Level(id) => s.push_str(&format!(", {id}")),
                _ => {}
            }
        }
        s
    }

    /// Bring `path` back into the store from `src` (the drain destinations, or a
    /// registry level through the mover: every chunk checked against the level's CRCs,
    /// nothing published on a mismatch). Not checked against the dataset's record here.
    /// Err: `from WHERE: why`.
    pub(crate) fn fetch_beyond(&self, path: &str, src: &Source) -> std::result::Result<(), String> {
        match src {
            Source::Pfs => match ckptfs_agent::restore_path(&self.store, &self.cfg.dests, path) {
                Ok(true) => Ok(()),
                Ok(false) => Err("from the PFS: no copy found".into()),
                Err(e) => Err(format!("from the PFS failed: {e}")),
            },
            Source::Level(id) => {
                let level = self
                    .order
                    .registry
                    .levels()
                    .iter()
                    .find(|l| l.id().to_string() == *id)
                    .ok_or_else(|| format!("from {id}: no such level"))?;
                let local = ckptfs_store::level::StoreLevel::new(&self.store)
                    .map_err(|e| format!("the store as a level: {e}"))?;
                ckptfs_level::copy(level.as_ref(), &local, path)
                    .map(|_| ())
                    .map_err(|e| format!("from {id}: {e}"))
            }
            Source::Local => Ok(()),
        }
    }

    /// Bring back the files of `d` that `srcs` (from [`Datasets::sources`]) finds beyond
    /// the node store, each checked against the dataset's size and CRC32C afterwards (a
    /// mismatch is removed again). Returns the files restored and their bytes; Err: why
    /// the dataset cannot be used.
    pub fn restore_sources(
        &self,
        d: &Dataset,
        srcs: &[(String, Source)],
    ) -> std::result::Result<Vec<(String, u64)>, String> {
        let mut restored = Vec::new();
        let (mut pfs_bytes, t0) = (0, std::time::Instant::now());
        for (path, src) in srcs {
            if *src == Source::Local {
                continue;
            }
            let f = &d.files[path];
            if let Err(e) = self.fetch_beyond(path, src) {
                return Err(format!("file {path}: restore {e}"));
            }
            if !local_ok(self, path, f.size, f.crc32c) {
                // Not the dataset's bytes: do not leave them under its name.
                let _ = self.store.unlink(path);
                return Err(format!(
                    "file {path}: restore from {} failed: the restored bytes do not match the dataset's checksum",
                    if *src == Source::Pfs { "the PFS".to_string() } else { src.label() }
                ));
            }
            if *src == Source::Pfs {
                pfs_bytes += f.size;
            }
            restored.push((path.clone(), f.size));
        }
        if pfs_bytes > 0 {
            let _ = record_pfs_transfer(self, pfs_bytes, t0.elapsed().as_secs_f64());
        }
        Ok(restored)
    }

    /// Where each file of `d` can be recovered from, or the reason it cannot be.
    pub fn sources(&self, d: &Dataset) -> std::result::Result<Vec<(String, Source)>, String> {
        if d.state != State::Complete {
            return Err(format!(
                "{}{}",
                d.state.name(),
                d.reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default()
            ));
        }
        let mut out = Vec::new();
        for (path, f) in &d.files {
            if local_ok(self, path, f.size, f.crc32c) {
                out.push((path.clone(), Source::Local));
            } else if let Some(src) = self.held_beyond(path, f.size, f.crc32c) {
                out.push((path.clone(), src));
            } else {
                return Err(format!(
                    "file {path} ({} bytes, crc32c {:08x}) is damaged or lost on every level (local{})",
                    f.size,
                    f.crc32c,
                    self.beyond_names()
                ));
            }
        }
        if out.is_empty() {
            return Err("it has no files".into());
        }
        Ok(out)
    }

    /// The single-node search; `recheck`: asked about the candidate dataset right before
    /// anything is restored (the restart round's rule, failure case D9; None: no round).
    pub(crate) fn restart_single(&self, recheck: Option<RecheckFn>) -> Result<Found> {
        let (all, _) = self.list()?;
        let mut skipped = Vec::new();
        for d in all.iter().rev() {
            let srcs = match self.sources(d) {
                Ok(s) => s,
                Err(reason) => {
                    skipped.push(Skipped {
                        id: d.id,
                        name: d.name.clone(),
                        reason,
                    });
                    continue;
                }
            };
            let round = match recheck.map(|f| f(d.id)).transpose()? {
                Some(Recheck::Adopt(m)) => return Ok(Found::Adopt(m, skipped)),
                Some(Recheck::Go(r)) => Some(r),
                None => None,
            };
            let restored = match self.restore_sources(d, &srcs) {
                Ok(r) => r,
                Err(reason) => {
                    skipped.push(Skipped {
                        id: d.id,
                        name: d.name.clone(),
                        reason,
                    });
                    continue;
                }
            };
            let sources = srcs.iter().map(|(p, s)| (p.clone(), s.label())).collect();
            return Ok(Found::Chosen(Box::new(Restart {
                chosen: Some(d.clone()),
                restored,
                skipped,
                sources,
                round,
                adopted: false,
                missing: Vec::new(),
            })));
        }
        Ok(Found::Chosen(Box::new(Restart {
            chosen: None,
            restored: Vec::new(),
            skipped,
            sources: Default::default(),
            round: None,
            adopted: false,
            missing: Vec::new(),
        })))
    }

    /// Add the read order's registry levels (by id: `s3:bucket/prefix`, `pfs:/dir`,
    /// ...) that hold each file of every node's part of `d` with its size and CRC32C
    /// to the levels the nodes reported (`ckpt list --cluster`): a level every node
    /// reaches (object storage, a shared directory) is asked here, by the listing
    /// node, rather than by each node's daemon.
    pub fn refresh_job_levels(&self, d: &mut JobDataset) {
        for part in d.parts.values_mut() {
            for (path, f) in part.files.iter_mut() {
                for step in self.order.beyond_partners() {
                    let Step::Level(id) = step else { continue };
                    let name = id.to_string();
                    if f.levels.contains(&name) {
                        continue;
                    }
                    let held = self.order.level(id).is_some_and(|lv| {
                        matches!(lv.stat(path), Ok(Some(s)) if s.version.size == f.size && s.version.crc32c == Some(f.crc32c))
                    });
                    if held {
                        f.levels.push(name);
                    }
                }
            }
        }
    }

    /// Levels holding each file of `d` now (local, pfs, the read order's registry
    /// levels by id), for listings.
    pub fn refresh_levels(&self, d: &mut Dataset) {
        for (path, f) in d.files.iter_mut() {
            let mut l = Vec::new();
            if matches!(self.store.stat(path), Ok(st) if st.size == f.size && st.mtime_ns == f.mtime_ns) {
                l.push("local".to_string());
            }
            for step in self.order.beyond_partners() {
                match step {
                    Step::Pfs if pfs_has(&self.cfg.dests, path, f.size, f.crc32c) => {
                        l.push("pfs".to_string())
                    }
                    Step::Level(id) => {
                        let held = self.order.level(id).is_some_and(|lv| {
                            matches!(lv.stat(path), Ok(Some(s)) if s.version.size == f.size && s.version.crc32c == Some(f.crc32c))
                        });
                        if held {
                            l.push(id.to_string());
                        }
                    }
                    _ => {}
                }
            }
            f.levels = l;
        }
    }
}

/// A round as every node reports it.
#[derive(Debug, Clone)]
pub(crate) struct Merged {
    pub round: u64,
    pub id: u64,
    pub name: String,
    pub ranks: BTreeSet<String>,
    /// Nodes with an entry of this round (their ranks took part).
    pub nodes: BTreeSet<String>,
    pub world: u32,
    pub max_id: u64,
}

/// Asked by a restart search about its candidate dataset (by id) before it restores
/// anything: go on in a round, or adopt another rank's choice (the restart round's
/// rule, `crate::restart_round`, handed down to the searches).
pub(crate) type RecheckFn<'a> = &'a dyn Fn(u64) -> Result<Recheck>;

/// What a restart search is told about the rounds.
pub(crate) enum Recheck {
    /// Go on with this candidate, in this round.
    Go(u64),
    /// Another rank's round chose another dataset: adopt it.
    Adopt(Merged),
}

/// The outcome of a search.
pub(crate) enum Found {
    /// This dataset (files restored; `round` set when it is to be recorded).
    Chosen(Box<Restart>),
    /// Another rank's round decides (the datasets passed over so far).
    Adopt(Merged, Vec<Skipped>),
}

impl Found {
    pub(crate) fn into_restart(self) -> Restart {
        match self {
            Found::Chosen(r) => *r,
            Found::Adopt(_, skipped) => Restart {
                chosen: None,
                restored: Vec::new(),
                skipped,
                sources: BTreeMap::new(),
                round: None,
                adopted: false,
                missing: Vec::new(),
            },
        }
    }
}
