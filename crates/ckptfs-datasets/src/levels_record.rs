//! Which levels hold each file of a node: the record the node daemon keeps of the
//! partner copies its partners acknowledged, and the view of it that `ckptfs ls -l`,
//! `ckptfs status --json` and the C API's `ckptfs_file_levels` show (local, partner
//! nodes, PFS).
//!
//! The record is one JSON file in the store's system namespace, `/.ckptfs/levels.json`,
//! written only by the node daemon (one per store) and replaced atomically (written as
//! `levels.json.tmp`, then renamed). It lives in node memory with the files it
//! describes: when the store is lost, so is the record, and a replacement daemon
//! rebuilds it as it re-establishes the copies. A copy counts only for the version it
//! was made of ([`Identity`]: inode, generation, size, mtime): a rewritten file shows no
//! partner copy until the daemon has sent the new version.
//!
//! The record types live here, not in `ckptfs-node`, so that readers without the
//! daemon's dependencies (tokio, the transport) can use them: the node daemon writes it
//! and re-exports these types; the CLI and the C API read it. The PFS level comes from
//! the drain agent's status file and the manifest it publishes in each destination
//! directory (`ckptfs-agent`).

use ckptfs_store::{OpenFlags, Stat, Store, StoreError, WriteState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Writing the record failed: what was being done, and the store's error.
#[derive(Debug, thiserror::Error)]
#[error("{what} the levels record: {source}")]
pub struct SaveError {
    /// The step that failed ("write", "publish", ...).
    pub what: &'static str,
    /// The store's error.
    #[source]
    pub source: StoreError,
}

impl SaveError {
    /// The POSIX errno of the failure.
    pub fn errno(&self) -> i32 {
        self.source.errno()
    }
}

/// Store path of the record.
pub const LEVELS_PATH: &str = "/.ckptfs/levels.json";
const LEVELS_TMP: &str = "/.ckptfs/levels.json.tmp";

/// What identifies one version of a file: any rewrite, truncate or replace changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Inode number.
    pub ino: u64,
    /// Inode slot generation.
    pub generation: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns.
    pub mtime_ns: u64,
}

impl Identity {
    /// The identity of a stat result.
    pub fn of(st: &Stat) -> Identity {
        Identity {
            ino: st.ino,
            generation: st.generation,
            size: st.size,
            mtime_ns: st.mtime_ns,
        }
    }
}

/// The levels of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLevels {
    /// The version the copies are of.
    pub identity: Identity,
    /// Partner nodes that acknowledged a complete, verified copy of this version.
    pub partners: Vec<String>,
    /// Partners that refused a copy, with the reason (e.g. ENOSPC: "no partner copy").
    #[serde(default)]
    pub refused: BTreeMap<String, String>,
    /// The version's copy generation: it increases with every version of the file this
    /// node copies (and over a replacement of the node), travels with each copy and is
    /// kept by the holder, so a restore can tell the newest copy from an older one.
    #[serde(default)]
    pub generation: u64,
    /// Nodes that may still hold a copy of an older version (a rewrite while they held
    /// one, a stand-in whose place the planned partner took back): each gets the new
    /// version or a Delete, and leaves this list only when it acknowledged that.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale: Vec<String>,
    /// Other levels holding a verified copy of this version, by level id
    /// (`erasure:set1`, `pool:node1`, `s3:bucket/prefix`): the generic entry of a level
    /// that is neither the store, a partner nor the drain's directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
}

/// The whole record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Levels {
    /// Node id of the daemon that wrote it.
    pub node: String,
    /// Per store path.
    pub files: BTreeMap<String, FileLevels>,
    /// The last copy generation given out (the next version gets a larger one).
    #[serde(default)]
    pub last_generation: u64,
    /// Deleted files whose copies some nodes may still hold: each node gets a Delete
    /// until it acknowledges one (a node that was down when the file was removed too).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dropping: BTreeMap<String, Dropping>,
}

/// The copies of a deleted file still to drop.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropping {
    /// The deleted version's copy generation: a holder drops its copy only if it is of
    /// this generation or older (never a newer file made under the same name since).
    pub generation: u64,
    /// Nodes that have not acknowledged the Delete yet.
    pub nodes: Vec<String>,
}

impl Levels {
    /// Read the record of a store (empty if there is none or it is unreadable).
    pub fn load(store: &Store) -> Levels {
        let Ok(mut f) = store.open(LEVELS_PATH, OpenFlags::READ, 0) else {
            return Levels::default();
        };
        let mut buf = vec![0u8; f.size() as usize];
        if f.read_full(&mut buf).is_err() {
            return Levels::default();
        }
        serde_json::from_slice(&buf).unwrap_or_default()
    }

    /// Replace the record atomically (the node daemon, its only writer).
    pub fn save(&self, store: &Store) -> Result<(), SaveError> {
        match store.mkdir(ckptfs_store::SYSTEM_DIR, 0o700) {
            Ok(_) | Err(StoreError::Exists(_)) => {}
            Err(source) => {
                return Err(SaveError {
                    what: "create the system directory for",
                    source,
                })
            }
        }
        let data = serde_json::to_vec_pretty(self).expect("levels serialize");
        let write = |source| SaveError {
            what: "write",
            source,
        };
        let mut f = store.open(LEVELS_TMP, OpenFlags::CREATE, 0o600).map_err(write)?;
        f.write_all(&data).and_then(|_| f.close()).map_err(write)?;
        store.rename(LEVELS_TMP, LEVELS_PATH).map_err(|source| SaveError {
            what: "publish",
            source,
        })
    }

    /// The next copy generation: larger than every one given before, and at least the
    /// wall clock in ns (so a node that lost its record and was replaced still gives
    /// larger ones than its predecessor, clocks kept in step by NTP; a restore also
    /// raises it past every generation it saw, [`Levels::saw_generation`]).
    pub fn next_generation(&mut self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        self.last_generation = now.max(self.last_generation + 1);
        self.last_generation
    }

    /// A generation seen elsewhere (a holder's copy): later ones will be larger.
    pub fn saw_generation(&mut self, g: u64) {
        self.last_generation = self.last_generation.max(g);
    }

    /// Partners holding a copy of the file's current version `st` (empty if the record
    /// is of another version).
    pub fn partners_of(&self, path: &str, st: &Stat) -> &[String] {
        match self.files.get(path) {
            Some(l) if l.identity == Identity::of(st) => &l.partners,
            _ => &[],
        }
    }
}

/// Store path of the object-storage levels' record.
pub const OBJECT_LEVELS_PATH: &str = "/.ckptfs/object-levels.json";

/// Which object-storage levels (`s3:bucket/prefix`) hold which version of each file:
/// written by `ckptfs agent --dest s3://...` and `ckptfs restore --dest s3://...` after
/// each run from the bucket's manifests (replaced atomically, like [`Levels`]), read by
/// listings. A version is its size and mtime (the object level keeps no inode).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLevels {
    /// Store path -> level name -> (size, mtime_ns) of the version it holds.
    pub files: BTreeMap<String, BTreeMap<String, (u64, u64)>>,
}

impl ObjectLevels {
    /// Read the record (empty if there is none or it is unreadable).
    pub fn load(store: &Store) -> ObjectLevels {
        let Ok(mut f) = store.open(OBJECT_LEVELS_PATH, OpenFlags::READ, 0) else {
            return ObjectLevels::default();
        };
        let mut buf = vec![0u8; f.size() as usize];
        if f.read_full(&mut buf).is_err() {
            return ObjectLevels::default();
        }
        serde_json::from_slice(&buf).unwrap_or_default()
    }

    /// Level `level` holds exactly `held` (path, size, mtime_ns): replaces what the record
    /// said of that level.
    pub fn set(&mut self, level: &str, held: impl IntoIterator<Item = (String, u64, u64)>) {
        for l in self.files.values_mut() {
            l.remove(level);
        }
        for (p, size, mtime) in held {
            self.files
                .entry(p)
                .or_default()
                .insert(level.to_string(), (size, mtime));
        }
        self.files.retain(|_, l| !l.is_empty());
    }

    /// The levels holding the version `st` of `path`.
    pub fn of(&self, path: &str, st: &Stat) -> Vec<String> {
        self.files
            .get(path)
            .map(|l| {
                l.iter()
                    .filter(|(_, v)| **v == (st.size, st.mtime_ns))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Replace the record atomically.
    pub fn save(&self, store: &Store) -> Result<(), SaveError> {
        match store.mkdir(ckptfs_store::SYSTEM_DIR, 0o700) {
            Ok(_) | Err(StoreError::Exists(_)) => {}
            Err(source) => {
                return Err(SaveError {
                    what: "create the system directory for",
                    source,
                })
            }
        }
        let tmp = format!("{OBJECT_LEVELS_PATH}.{}.tmp", std::process::id());
        let data = serde_json::to_vec(self).expect("object levels serialize");
        let write = |source| SaveError {
            what: "write",
            source,
        };
        let mut f = store.open(&tmp, OpenFlags::CREATE, 0o600).map_err(write)?;
        f.write_all(&data).and_then(|_| f.close()).map_err(write)?;
        store
            .rename(&tmp, OBJECT_LEVELS_PATH)
            .map_err(|source| SaveError {
                what: "publish",
                source,
            })
    }
}

/// The levels holding one file, as `ckptfs ls -l` and `ckptfs status --json` show them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Where {
    /// In this node's store, complete.
    pub local: bool,
    /// Partner nodes holding a verified copy of this version.
    pub partners: Vec<String>,
    /// Partners that refused a copy (node: reason).
    pub refused: BTreeMap<String, String>,
    /// Drained to the parallel file system (by the drain agent of this store).
    pub pfs: bool,
    /// Object-storage levels holding this version (`s3:bucket/prefix`), as the last
    /// drain or restore with them recorded ([`ObjectLevels`]).
    pub objects: Vec<String>,
    /// Every level holding this version, by level id, in read order (`local`,
    /// `partner:node3`, `pfs:/scratch/run`, then other levels' ids): what
    /// `ckptfs ls -l`, `status --json`, the C API and Python report.
    pub levels: Vec<String>,
}

impl Where {
    /// The level ids of `local`, `partners`, `pfs` (the drain's directory, when known)
    /// and `held`, in read order.
    pub fn ids(local: bool, partners: &[String], pfs: Option<&str>, held: &[String]) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        if local {
            v.push("local".into());
        }
        v.extend(partners.iter().map(|n| format!("partner:{n}")));
        if let Some(dir) = pfs {
            v.push(if dir.is_empty() {
                "pfs".into()
            } else {
                format!("pfs:{dir}")
            });
        }
        v.extend(held.iter().cloned());
        // Read order: by kind (local, partner, erasure, pool, pfs, object), stable.
        v.sort_by_key(|id| ckptfs_level::LevelId::parse(id).map_or(usize::MAX, |l| l.kind_rank()));
        v
    }

    /// Short text: `local, partner:node3, pfs:/scratch/run` (`-` when nothing holds it).
    pub fn summary(&self) -> String {
        let mut v: Vec<String> = self.levels.clone();
        for n in self.refused.keys() {
            v.push(format!("no copy on {n}"));
        }
        if v.is_empty() {
            "-".into()
        } else {
            v.join(", ")
        }
    }
}

/// A drain manifest's files: name -> (size, mtime_ns).
type Drained = BTreeMap<String, (u64, u64)>;

/// A snapshot of the levels of a store's files, for listings.
pub struct LevelsView {
    levels: Levels,
    /// The drain agent's target directory and node id, if an agent ran on the store.
    drain: Option<(std::path::PathBuf, String)>,
    /// Its manifests read so far, per store directory (file name -> (size, mtime_ns)).
    manifests: std::cell::RefCell<BTreeMap<String, Drained>>,
    /// The object-storage levels' record.
    objects: ObjectLevels,
}

impl LevelsView {
    /// Read the levels record and the drain agent's status of `store`.
    pub fn load(store: &Store) -> LevelsView {
        let drain = ckptfs_agent::status(store.name()).and_then(|a| {
            let dir = a.target.split(" (OST ").next().unwrap_or_default().to_string();
            (!dir.is_empty()).then(|| (std::path::PathBuf::from(dir), a.node))
        });
        LevelsView {
            levels: Levels::load(store),
            drain,
            manifests: Default::default(),
            objects: ObjectLevels::load(store),
        }
    }

    /// Whether the drain published this version of `path` (its manifest in the
    /// destination directory of `path`'s directory says so).
    fn drained(&self, path: &str, st: &Stat) -> bool {
        use ckptfs_agent::manifest::{file_name, Manifest};
        let Some((target, node)) = &self.drain else {
            return false;
        };
        let (dir, name) = match path.rfind('/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => ("", path),
        };
        let mut cache = self.manifests.borrow_mut();
        let files = cache.entry(dir.to_string()).or_insert_with(|| {
            let file = target.join(dir.trim_start_matches('/')).join(file_name(node));
            match Manifest::load(&ckptfs_agent::dest::PosixDest::default(), &file) {
                Ok(Some(m)) => m
                    .files
                    .into_iter()
                    .map(|(k, e)| (k, (e.size, e.mtime_ns)))
                    .collect(),
                _ => BTreeMap::new(),
            }
        });
        files.get(name) == Some(&(st.size, st.mtime_ns))
    }

    /// The levels holding `path` with stat `st`.
    pub fn of(&self, path: &str, st: &Stat) -> Where {
        let rec = self
            .levels
            .files
            .get(path)
            .filter(|l| l.identity == Identity::of(st));
        let local = st.state == WriteState::Complete;
        let partners = rec.map(|l| l.partners.clone()).unwrap_or_default();
        let objects = self.objects.of(path, st);
        let mut held = rec.map(|l| l.held.clone()).unwrap_or_default();
        held.extend(objects.iter().cloned());
        let pfs = self.drained(path, st);
        let dir = self.drain.as_ref().map(|(d, _)| d.display().to_string());
        Where {
            levels: Where::ids(
                local,
                &partners,
                pfs.then_some(dir.as_deref().unwrap_or("")),
                &held,
            ),
            local,
            partners,
            refused: rec.map(|l| l.refused.clone()).unwrap_or_default(),
            pfs,
            objects,
        }
    }
}
