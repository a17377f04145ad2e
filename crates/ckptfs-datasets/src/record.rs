//! Dataset records and their crash-safe storage in the node store.
//!
//! One JSON record per dataset at `/.ckptfs/datasets/JOB/ID.json` (ID zero-padded to 20
//! digits so that names sort by id). A record is written to `.tmp.PID.ID` in the same
//! directory and renamed over the old one: a SIGKILL at any point leaves the old or the
//! new record, never a torn one (the store's rename is atomic under its namespace lock).
//! Left-over temporary files are ignored by readers and removed by the next writer.

use crate::error::{DatasetError, Result};
use ckptfs_store::{FileKind, OpenFlags, Store, StoreError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The store's system directory (hidden from listings once the node daemon's store
/// change is merged; see docs/datasets.md).
pub const SYSTEM_DIR: &str = ckptfs_store::SYSTEM_DIR;
/// Format tag of a record.
pub const FORMAT: &str = "ckptfs-dataset-1";

/// State of a dataset (docs/datasets.md, "State machine").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Begun; not every part is complete yet.
    Open,
    /// Every part complete and valid, every file closed complete.
    Complete,
    /// A part was completed with valid = false.
    Invalid,
    /// It can never complete: a rank died or moved on, a file was not closed complete,
    /// the marker came before the files.
    Incomplete,
}

impl State {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            State::Open => "open",
            State::Complete => "complete",
            State::Invalid => "invalid",
            State::Incomplete => "incomplete",
        }
    }
}

/// One rank's (participant's) part of a dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// `open`, `complete` or `invalid`.
    pub state: State,
    /// When it began, ns since the epoch, on this node's clock.
    pub begun_ns: u64,
    /// When it was completed, if it was.
    pub done_ns: Option<u64>,
    /// Process that began it, when that process is the rank itself (the C API); `None`
    /// for the CLI, whose process exits at once.
    pub pid: Option<u32>,
    /// Start time of `pid` (clock ticks after boot), so a reused pid is not mistaken.
    pub pid_start: Option<u64>,
}

/// One file of a dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRec {
    /// Size in bytes at completion.
    pub size: u64,
    /// CRC32C of the whole file at completion.
    pub crc32c: u32,
    /// Modification time in the store at completion.
    pub mtime_ns: u64,
    /// Levels known to hold this content (as last checked).
    pub levels: Vec<String>,
}

/// The level decision made when the dataset completed, with its inputs and reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRec {
    /// Chosen level: `local`, `partner` or `pfs`.
    pub level: String,
    /// Why (one sentence).
    pub reason: String,
    /// The policy input as given to `ckptfs_policy::decide` (JSON).
    pub input: serde_json::Value,
    /// Expected overhead per level, seconds.
    pub estimates: BTreeMap<String, f64>,
    /// Failure rule used: `posterior` or `remem`.
    pub rule: String,
    /// Failure probability of the source nodes in the next interval.
    pub p_source: f64,
    /// Was there an alarm for this node?
    pub alarm: bool,
    /// The measured costs it used and where each came from (absent in records written
    /// before it existed).
    #[serde(default)]
    pub measured: Option<Measured>,
}

/// The measured costs one decision used, and where each came from (recorded with the
/// decision, `ckpt show ID --json`: `decision.measured`; read by [`crate::measured`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Bytes per second of a flush to the PFS.
    pub pfs_put_bps: f64,
    /// `agent` (its status file's `levels[]`), `restores` (this job's restores from the
    /// PFS) or `setting` (`pfs_bandwidth`, nothing measured yet).
    pub pfs_put_source: String,
    /// Bytes per second of a restore from the PFS.
    pub pfs_get_bps: f64,
    /// As `pfs_put_source`.
    pub pfs_get_source: String,
    /// Whether the partner level was offered: a node daemon runs on this store with at
    /// least one partner, and a partner copy time has been measured.
    pub partner: bool,
    /// Why the partner level was (not) offered.
    pub partner_reason: String,
    /// Smoothed partner copy bandwidth (close of a dataset's last file to its last
    /// acknowledgement), bytes per second.
    pub partner_bps: Option<f64>,
    /// Smoothed bandwidth of fetches from partners at restart, bytes per second.
    pub partner_get_bps: Option<f64>,
    /// Whether the erasure level was offered: a node daemon runs on this store in an
    /// erasure set, and an encode time has been measured.
    #[serde(default)]
    pub erasure: bool,
    /// Why the erasure level was (not) offered.
    #[serde(default)]
    pub erasure_reason: String,
    /// The set's level id (`erasure:set0`) and scheme (`xor`, `rs:2`).
    #[serde(default)]
    pub erasure_level: Option<String>,
    /// The set's scheme.
    #[serde(default)]
    pub erasure_scheme: Option<String>,
    /// Smoothed encode bandwidth (this node's part over close to header), bytes/s.
    #[serde(default)]
    pub erasure_bps: Option<f64>,
    /// Smoothed bandwidth of this job's rebuilds from the set at restart, bytes/s.
    #[serde(default)]
    pub erasure_get_bps: Option<f64>,
    /// Extra memory per node as a fraction of its part: `p / (N - p)`.
    #[serde(default)]
    pub erasure_memory: Option<f64>,
}

/// One dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    /// Always [`FORMAT`].
    pub format: String,
    /// Id, monotonic per job.
    pub id: u64,
    /// Name given at begin (transparent mode: the directory).
    pub name: String,
    /// Job it belongs to.
    pub job: String,
    /// State.
    pub state: State,
    /// Why it is invalid or incomplete.
    pub reason: Option<String>,
    /// When it was created, ns on this node's clock.
    pub created_ns: u64,
    /// When it became complete / invalid / incomplete.
    pub closed_ns: Option<u64>,
    /// Parts expected (ranks of the job on this record).
    pub parts_expected: u32,
    /// Parts by rank.
    pub parts: BTreeMap<String, Part>,
    /// Transparent mode: the store directory that is the dataset.
    pub dir: Option<String>,
    /// Files by store path.
    pub files: BTreeMap<String, FileRec>,
    /// The level decision at completion.
    pub decision: Option<DecisionRec>,
    /// Flushed to the PFS (requested from the drain engine and seen in its manifest).
    pub flush: bool,
    /// Local copies deleted by retention.
    pub evicted: bool,
    /// Cluster mode: the node whose record this is (None: single node).
    #[serde(default)]
    pub node: Option<String>,
    /// Cluster mode: ranks expected on this node (its part is done when they all are).
    #[serde(default)]
    pub local_expected: Option<u32>,
    /// Cluster mode: every local rank completed and this node's files were checked
    /// (closed complete, size and CRC32C recorded).
    #[serde(default)]
    pub node_done: bool,
    /// Cluster mode, once complete job-wide: every node's part as agreed (so that a
    /// surviving node knows a lost node's files).
    #[serde(default)]
    pub nodes: BTreeMap<String, NodePart>,
    /// Its PFS copies were removed by `dataset_keep_pfs` (M flushed datasets kept).
    #[serde(default)]
    pub pfs_pruned: bool,
}

/// One node's part of a dataset, as agreed at job-wide completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePart {
    /// Ranks that completed on that node.
    pub ranks: Vec<String>,
    /// That node's files.
    pub files: BTreeMap<String, FileRec>,
}

impl Dataset {
    /// Total bytes.
    pub fn size(&self) -> u64 {
        self.files.values().map(|f| f.size).sum()
    }

    /// Levels holding every file (intersection), fastest first.
    pub fn levels(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        // In the order of the first file's list (the read order: local, partner, pfs,
        // then the ids of the `[levels]` registry levels).
        let Some(first) = self.files.values().next() else {
            return out;
        };
        for l in &first.levels {
            if !out.contains(l) && self.files.values().all(|f| f.levels.contains(l)) {
                out.push(l.clone());
            }
        }
        out
    }
}

/// Directory of a job's records.
pub fn job_dir(job: &str) -> String {
    format!("{SYSTEM_DIR}/datasets/{job}")
}

fn record_path(job: &str, id: u64) -> String {
    format!("{}/{id:020}.json", job_dir(job))
}

/// `mkdir -p` in the store.
pub fn mkdir_p(store: &Store, path: &str) -> Result<()> {
    let mut cur = String::new();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        cur.push('/');
        cur.push_str(c);
        match store.mkdir(&cur, 0o700) {
            Ok(_) | Err(StoreError::Exists(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Read a whole store file.
pub fn read_file(store: &Store, path: &str) -> Result<Vec<u8>> {
    let mut f = store.open(path, OpenFlags::READ, 0)?;
    let mut buf = vec![0u8; f.size() as usize];
    let n = f.read_full(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Write `bytes` to `path` crash-safely: temporary name in the same directory, then
/// rename over `path`.
pub fn write_atomic(store: &Store, path: &str, bytes: &[u8]) -> Result<()> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let tmp = format!("{dir}/.tmp.{}.{name}", std::process::id());
    let mut f = store.open(&tmp, OpenFlags::CREATE, 0o600)?;
    f.write_all(bytes)?;
    f.close()?;
    store.rename(&tmp, path)?;
    Ok(())
}

/// Save a record (crash-safe).
pub fn save(store: &Store, ds: &Dataset) -> Result<()> {
    mkdir_p(store, &job_dir(&ds.job))?;
    let bytes = serde_json::to_vec_pretty(ds).map_err(|e| DatasetError::Invalid(e.to_string()))?;
    write_atomic(store, &record_path(&ds.job, ds.id), &bytes)
}

/// Load one record.
pub fn load(store: &Store, job: &str, id: u64) -> Result<Dataset> {
    let path = record_path(job, id);
    let bytes = match read_file(store, &path) {
        Ok(b) => b,
        Err(DatasetError::Store(StoreError::NotFound(_))) => return Err(DatasetError::NotFound(id)),
        Err(e) => return Err(e),
    };
    parse(&bytes).map_err(|msg| DatasetError::BadRecord { path, msg })
}

fn parse(bytes: &[u8]) -> std::result::Result<Dataset, String> {
    let ds: Dataset = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if ds.format != FORMAT {
        return Err(format!("format {:?}, expected {FORMAT:?}", ds.format));
    }
    Ok(ds)
}

/// Records that could not be read: (store path, reason).
pub type BadRecords = Vec<(String, String)>;

/// Every record of `job`, oldest id first. Records that do not parse are returned as
/// problems (path, message) and otherwise skipped; temporary files are ignored.
pub fn load_all(store: &Store, job: &str) -> Result<(Vec<Dataset>, BadRecords)> {
    let dir = job_dir(job);
    let entries = match store.read_dir(&dir) {
        Ok(e) => e,
        Err(StoreError::NotFound(_)) => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for e in entries {
        if e.kind != FileKind::File || e.name.starts_with('.') || !e.name.ends_with(".json") {
            continue;
        }
        let Some(id) = e.name.strip_suffix(".json").and_then(|s| s.parse::<u64>().ok()) else {
            continue;
        };
        let path = format!("{dir}/{}", e.name);
        match read_file(store, &path).map(|b| parse(&b)) {
            Ok(Ok(ds)) if ds.id == id => out.push(ds),
            Ok(Ok(_)) => bad.push((path, "id does not match the file name".into())),
            Ok(Err(msg)) => bad.push((path, msg)),
            Err(DatasetError::Store(StoreError::NotFound(_))) => {} // deleted meanwhile
            Err(e) => bad.push((path, e.to_string())),
        }
    }
    out.sort_by_key(|d| d.id);
    Ok((out, bad))
}

/// Directory of the job-wide verdicts other nodes told this node (failure case D7b).
pub fn verdict_dir(job: &str) -> String {
    format!("{SYSTEM_DIR}/verdicts/{job}")
}

/// Keep a job-wide verdict another node announced: dataset `ds` agreed complete, with
/// every node's part (`ds.nodes`). Refused unless it is complete with parts.
pub fn save_verdict(store: &Store, ds: &Dataset) -> Result<()> {
    if ds.state != State::Complete || ds.nodes.is_empty() || ds.format != FORMAT {
        return Err(DatasetError::Invalid(format!(
            "dataset {} is not a complete job-wide verdict",
            ds.id
        )));
    }
    crate::check_component("job", &ds.job)?;
    mkdir_p(store, &verdict_dir(&ds.job))?;
    let bytes = serde_json::to_vec_pretty(ds).map_err(|e| DatasetError::Invalid(e.to_string()))?;
    write_atomic(
        store,
        &format!("{}/{:020}.json", verdict_dir(&ds.job), ds.id),
        &bytes,
    )
}

/// The verdicts this node was told of `job`, by id (unreadable ones skipped).
pub fn load_verdicts(store: &Store, job: &str) -> Vec<Dataset> {
    let dir = verdict_dir(job);
    let Ok(entries) = store.read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<Dataset> = entries
        .into_iter()
        .filter(|e| e.kind == FileKind::File && e.name.ends_with(".json") && !e.name.starts_with('.'))
        .filter_map(|e| read_file(store, &format!("{dir}/{}", e.name)).ok())
        .filter_map(|b| parse(&b).ok())
        .filter(|d| d.job == job && d.state == State::Complete && !d.nodes.is_empty())
        .collect();
    out.sort_by_key(|d| d.id);
    out
}

/// Records as they stand for a reader that does not take the lock (another node's
/// question through the daemon): an open dataset with an open part whose process died
/// is reported `incomplete`, with the reason the next locked look will record (failure
/// case D3), instead of open for ever to the rest of the job. Nothing is written.
pub fn with_dead_ranks(mut all: Vec<Dataset>) -> Vec<Dataset> {
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
            d.reason = Some(format!(
                "rank {rank} (pid {}) died before completing",
                p.pid.unwrap_or(0)
            ));
            d.state = State::Incomplete;
        }
    }
    all
}

/// `all` (this node's records of a job) with the verdicts it was told: a dataset this
/// node has no complete record of, but another node announced complete job-wide, is
/// taken as that verdict (it carries every node's part), so the verdict survives the
/// loss of the nodes that reached it.
pub fn with_verdicts(mut all: Vec<Dataset>, verdicts: Vec<Dataset>) -> Vec<Dataset> {
    for v in verdicts {
        match all.iter_mut().find(|d| d.id == v.id) {
            Some(d) if d.state == State::Complete && !d.nodes.is_empty() => {}
            Some(d) if d.state == State::Open || d.state == State::Complete => {
                let files = std::mem::take(&mut d.files);
                *d = Dataset { files, ..v };
            }
            Some(_) => {}
            // This node has no record of it (its store was replaced): the verdict, with
            // no file of this node's own (its part is in `nodes`).
            None => all.push(Dataset {
                files: BTreeMap::new(),
                ..v
            }),
        }
    }
    all.sort_by_key(|d| d.id);
    all
}

/// Remove a record.
pub fn remove(store: &Store, job: &str, id: u64) -> Result<()> {
    match store.unlink(&record_path(job, id)) {
        Ok(()) => Ok(()),
        Err(StoreError::NotFound(_)) => Err(DatasetError::NotFound(id)),
        Err(e) => Err(e.into()),
    }
}

/// Remove temporary record files left by killed writers (not this process's).
pub fn clean_temps(store: &Store, job: &str) {
    let dir = job_dir(job);
    let mine = format!(".tmp.{}.", std::process::id());
    if let Ok(entries) = store.read_dir(&dir) {
        for e in entries {
            if e.name.starts_with(".tmp.") && !e.name.starts_with(&mine) {
                let pid = e.name[5..].split('.').next().and_then(|p| p.parse::<i32>().ok());
                // SAFETY: kill with signal 0 only checks whether the process exists.
                let alive = pid.is_some_and(|p| unsafe { libc::kill(p, 0) } == 0);
                if !alive {
                    let _ = store.unlink(&format!("{dir}/{}", e.name));
                }
            }
        }
    }
}
