//! The level registry: the run-time levels of a node in read order, and the one answer
//! to "which levels hold this file, and in which order should they be read".
//!
//! Every front-end (the CLI's `ls -l` and `restore`, the C API, Python, the dataset
//! restart) asks [`Registry::holders`] instead of knowing the kinds of levels: a new
//! level is one crate implementing [`Level`] plus one [`LevelFactory`] entry where the
//! registry is assembled.

use crate::{Level, LevelError, LevelId, Stored};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One level's copy of a file.
#[derive(Debug, Clone)]
pub struct Holding {
    /// Which level.
    pub level: LevelId,
    /// Its copy.
    pub stored: Stored,
}

/// Every level's copy of one file, sorted: the newest version's copies in read order,
/// then copies of older versions (never to be restored as current).
#[derive(Debug, Default)]
pub struct Holders {
    /// Copies of the newest version, in the order to read them (fastest level first).
    pub current: Vec<Holding>,
    /// Copies of older versions: reported, never read as the file.
    pub superseded: Vec<Holding>,
    /// Levels that could not answer (down, refused), with why.
    pub errors: Vec<(LevelId, LevelError)>,
}

impl Holders {
    /// The ids of the levels holding the newest version, in read order.
    pub fn ids(&self) -> Vec<LevelId> {
        self.current.iter().map(|h| h.level.clone()).collect()
    }
}

/// Which of two copies is newer: the larger copy generation where both levels keep one,
/// else the later modification time.
fn newer(a: &Stored, b: &Stored) -> std::cmp::Ordering {
    let (va, vb) = (&a.version, &b.version);
    if va.serial > 0 && vb.serial > 0 && va.serial != vb.serial {
        return va.serial.cmp(&vb.serial);
    }
    va.mtime_ns.cmp(&vb.mtime_ns)
}

/// The levels of a node, in read order.
#[derive(Default, Clone)]
pub struct Registry {
    levels: Vec<Arc<dyn Level>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.levels.iter().map(|l| l.id().to_string()))
            .finish()
    }
}

impl Registry {
    /// No levels.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Add a level. The read order is by kind (local, partner, erasure, pool, PFS,
    /// object storage, then kinds this crate does not know), and among one kind the
    /// order the levels were added in. A second level with the same id replaces the
    /// first.
    pub fn add(&mut self, level: Arc<dyn Level>) {
        let id = level.id();
        self.levels.retain(|l| l.id() != id);
        let rank = id.kind_rank();
        let at = self
            .levels
            .iter()
            .position(|l| l.id().kind_rank() > rank)
            .unwrap_or(self.levels.len());
        self.levels.insert(at, level);
    }

    /// Append a level after every other, whatever its kind: the read order a caller
    /// gives (the settings' `[levels]` order). A second level with the same id replaces
    /// the first in its place.
    pub fn push(&mut self, level: Arc<dyn Level>) {
        let id = level.id();
        match self.levels.iter().position(|l| l.id() == id) {
            Some(i) => self.levels[i] = level,
            None => self.levels.push(level),
        }
    }

    /// With `level` added.
    pub fn with(mut self, level: Arc<dyn Level>) -> Registry {
        self.add(level);
        self
    }

    /// The levels in read order.
    pub fn levels(&self) -> &[Arc<dyn Level>] {
        &self.levels
    }

    /// The level with this id.
    pub fn get(&self, id: &LevelId) -> Option<&Arc<dyn Level>> {
        self.levels.iter().find(|l| &l.id() == id)
    }

    /// Every level's copy of `path`: the newest version's copies in read order, older
    /// versions apart, levels that could not answer with their error.
    pub fn holders(&self, path: &str) -> Holders {
        let mut all = Vec::new();
        let mut out = Holders::default();
        for l in &self.levels {
            match l.stat(path) {
                Ok(Some(stored)) => all.push(Holding {
                    level: l.id(),
                    stored,
                }),
                Ok(None) => {}
                Err(e) => out.errors.push((l.id(), e)),
            }
        }
        split_newest(all, &mut out);
        out
    }

    /// [`Registry::holders`] for every file under `prefix` any level lists.
    pub fn holders_under(&self, prefix: &str) -> (BTreeMap<String, Holders>, Vec<(LevelId, LevelError)>) {
        let mut by: BTreeMap<String, Vec<Holding>> = BTreeMap::new();
        let mut errors = Vec::new();
        for l in &self.levels {
            match l.list(prefix) {
                Ok(list) => {
                    for stored in list {
                        by.entry(stored.path.clone()).or_default().push(Holding {
                            level: l.id(),
                            stored,
                        });
                    }
                }
                Err(e) => errors.push((l.id(), e)),
            }
        }
        let files = by
            .into_iter()
            .map(|(p, all)| {
                let mut h = Holders::default();
                split_newest(all, &mut h);
                (p, h)
            })
            .collect();
        (files, errors)
    }
}

/// Sort `all` (in read order) into the newest version's copies and older ones.
fn split_newest(all: Vec<Holding>, out: &mut Holders) {
    let Some(newest) = all
        .iter()
        .max_by(|a, b| newer(&a.stored, &b.stored))
        .map(|h| h.stored.clone())
    else {
        return;
    };
    for h in all {
        if h.stored.version.same_content(&newest.version) {
            out.current.push(h);
        } else {
            out.superseded.push(h);
        }
    }
}

/// Opens a level of one kind from its id and options: the one entry a new level adds
/// where a registry is assembled from the settings.
pub trait LevelFactory: Send + Sync {
    /// The kind this factory opens (`s3`, `dir`, ...).
    fn kind(&self) -> &'static str;
    /// Open the level `id` (its kind is [`LevelFactory::kind`]) with `options` from the
    /// settings' `[levels]` entry.
    fn open(&self, id: &LevelId, options: &BTreeMap<String, String>) -> Result<Arc<dyn Level>, LevelError>;
}

/// Open every `(id, options)` with the factory of its kind, read in the order given
/// ([`Registry::push`]); an id whose kind no factory opens is an error naming it and the
/// kinds known.
pub fn open_all(
    specs: &[(LevelId, BTreeMap<String, String>)],
    factories: &[&dyn LevelFactory],
) -> Result<Registry, LevelError> {
    let mut reg = Registry::new();
    for (id, opts) in specs {
        let f = factories.iter().find(|f| f.kind() == id.kind).ok_or_else(|| {
            let known: Vec<&str> = factories.iter().map(|f| f.kind()).collect();
            LevelError::backend(
                libc::EINVAL,
                std::io::Error::other(format!(
                    "level {id}: no level of kind {:?} (known: {})",
                    id.kind,
                    known.join(", ")
                )),
            )
        })?;
        reg.push(f.open(id, opts)?);
    }
    Ok(reg)
}
