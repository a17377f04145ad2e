//! One process's link to the node store and its datasets.
//!
//! Layout: the files of dataset ID written by rank R live in the store under
//! `/API/JOB/ID/rR/REL` (API `scr` or `veloc`, JOB the ckptfs job, REL the file's path
//! relative to the application's prefix, or VeloC's file name). The application writes
//! and reads real files in a staging directory (`CACHE/ckptfs-API.UID/JOB/rR/...`,
//! owner-checked, mode 0700) because both APIs hand out paths for POSIX I/O; a
//! completed phase copies them into the store, a restart copies them back out on
//! demand. Memory-mode data (VeloC) goes straight into the store.

use crate::error::{CompatError, Result};
use ckptfs_datasets::{Config, Dataset, Datasets, State};
use ckptfs_settings::types::Level;
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What the configuration sources mapped onto ckptfs settings.
#[derive(Debug, Clone, Default)]
pub struct Mapped {
    /// Where staging directories go (SCR_CACHE_BASE, VeloC `scratch`); default /dev/shm.
    pub cache_base: Option<PathBuf>,
    /// The PFS directory datasets are flushed to (the drain destination); None: none.
    pub dest: Option<PathBuf>,
    /// Flush every Nth checkpoint dataset to `dest` (0: never, unless asked per dataset).
    pub flush_every: u32,
    /// Complete datasets kept in memory (0: all).
    pub keep_memory: u32,
    /// Complete datasets kept on the PFS (0: all).
    pub keep_pfs: u32,
    /// Appended to the ckptfs job (`VELOC_Init_single`: each process its own job).
    pub job_suffix: Option<String>,
}

/// A process's session: the store, its datasets, its rank and staging directory.
pub struct Session {
    /// The datasets of the job, for this rank.
    pub ds: Datasets,
    /// The node store.
    pub store: Store,
    /// `scr` or `veloc`: the top directory in the store.
    pub api: &'static str,
    /// The ckptfs job.
    pub job: String,
    /// This rank.
    pub rank: u32,
    /// Ranks in the communicator.
    pub size: u32,
    /// This rank's staging directory.
    pub stage: PathBuf,
    /// The flush destination, if any.
    pub dest: Option<PathBuf>,
    /// Flush every Nth dataset.
    pub flush_every: u32,
    /// Across nodes (`CKPTFS_CLUSTER`, `CKPTFS_NODE_ID`): the job-wide calls.
    pub jobwide: Option<crate::cluster::JobWide>,
    /// This process flushes its node's datasets (the first process of the
    /// communicator on each ckptfs node).
    pub flusher: bool,
    /// A drain daemon kept the store's drain lock: flushes are left to it.
    flush_left: std::sync::atomic::AtomicBool,
    /// The preload shim's mount prefix when the shim is in this process and serves this
    /// store: routed files then go straight into the store ([`crate::direct`]).
    pub direct: Option<String>,
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
}

/// Create `dir` (and parents) and check that it is a directory owned by this user and
/// not writable by others: staging lives in shared places like /dev/shm.
fn owned_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| CompatError::io(format!("create {}", dir.display()), e))?;
    let md =
        std::fs::symlink_metadata(dir).map_err(|e| CompatError::io(format!("stat {}", dir.display()), e))?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if !md.is_dir() || md.uid() != uid || md.mode() & 0o022 != 0 {
        return Err(CompatError::Invalid(format!(
            "{} is not a directory owned by uid {uid} and closed to others",
            dir.display()
        )));
    }
    Ok(())
}

impl Session {
    /// Attach to the node store the `CKPTFS_*` environment names (created when
    /// missing, as the preload shim does) and open the job's datasets for `rank` of
    /// `size`.
    pub fn open(api: &'static str, m: &Mapped, rank: u32, size: u32) -> Result<Session> {
        let get = |k: &str| std::env::var(k).ok();
        let s = ckptfs_settings::from_env(&get)
            .map_err(|e| CompatError::Invalid(format!("ckptfs settings: {e}")))?;
        if s.store.private {
            return Err(CompatError::Invalid(
                "datasets need a shared node store (CKPTFS_PRIVATE is set)".into(),
            ));
        }
        let mut cfg = Config::from_settings(&s, &get)?;
        let default_name = s
            .row("store")
            .is_some_and(|r| r.source == ckptfs_settings::Source::Default);
        let settings_name = s.store.name.clone();
        let mut opts = StoreOptions::from(s.store);
        if default_name {
            opts.name.clear();
        }
        let mut jobwide = None;
        let mut node_index = None;
        if let Some((file, node)) = crate::cluster::from_env() {
            let (name, index) = crate::cluster::node_store(&file, &node)?;
            node_index = Some(index);
            if !opts.name.is_empty() && opts.name != name {
                return Err(CompatError::Invalid(format!(
                    "CKPTFS_STORE {} conflicts with node {node}'s store {name} in {}",
                    opts.name,
                    file.display()
                )));
            }
            opts.name = name;
            cfg.node = node;
            jobwide = Some(crate::cluster::JobWide::load()?);
        }
        let store = Store::open_or_create(&opts)?;
        cfg.rank = rank.to_string();
        cfg.world = size;
        if m.flush_every > 0 {
            cfg.flush_every = m.flush_every;
        }
        if m.keep_memory > 0 {
            cfg.keep_memory = m.keep_memory;
        }
        if m.keep_pfs > 0 {
            cfg.keep_pfs = m.keep_pfs;
        }
        if let Some(d) = &m.dest {
            if !cfg.dests.contains(d) {
                cfg.dests.insert(0, d.clone());
            }
        }
        if let Some(sfx) = &m.job_suffix {
            cfg.job = format!("{}{sfx}", cfg.job);
        }
        let job = cfg.job.clone();
        let base = m
            .cache_base
            .clone()
            .or_else(|| env("CKPTFS_STAGE_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("/dev/shm"));
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let top = base.join(format!("ckptfs-{api}.{uid}"));
        owned_dir(&top)?;
        let stage = top.join(&job).join(format!("r{rank}"));
        owned_dir(&stage)?;
        let dest = cfg.dests.first().cloned();
        // Collective: every process of the communicator opens its session in Init.
        let flusher = match node_index {
            Some(i) => crate::mpi::color_rank(i)? == 0,
            None => crate::mpi::cached_rank() == Some(0),
        };
        let flush_every = cfg.flush_every;
        let direct = crate::direct::detect(&[store.name(), &settings_name]);
        Ok(Session {
            ds: Datasets::single_node(store.clone(), cfg),
            store,
            api,
            job,
            rank,
            size,
            stage,
            dest,
            flush_every,
            jobwide,
            flusher,
            flush_left: std::sync::atomic::AtomicBool::new(false),
            direct,
        })
    }

    /// The store directory of dataset `id`.
    pub fn dataset_dir(&self, id: u64) -> String {
        format!("/{}/{}/{id}", self.api, self.job)
    }

    /// The store path of `rel` written by `rank` in dataset `id`.
    pub fn store_path(&self, id: u64, rank: u32, rel: &str) -> String {
        format!("{}/r{rank}/{}", self.dataset_dir(id), rel.trim_start_matches('/'))
    }

    /// Begin dataset `name` on every rank, collectively: rank 0 first, then the others
    /// join it; every rank gets the same id (checked).
    pub fn begin_all(&self, name: &str) -> Result<u64> {
        let pid = Some(ckptfs_store::process::me());
        // The first process of the communicator (not the dataset rank: VELOC_Init_single
        // gives each process its own id and job).
        let first = crate::mpi::cached_rank() == Some(0);
        let begin = || match &self.jobwide {
            Some(j) => j.begin(name),
            None => self.ds.begin(name, pid).map_err(Into::into),
        };
        let mine = if first { begin() } else { Ok(0) };
        let r0 = crate::mpi::bcast_bytes(&mine.as_ref().map(|i| *i as i64).unwrap_or(-1).to_le_bytes())?;
        let id0 = i64::from_le_bytes(r0[..8].try_into().unwrap_or([0xff; 8]));
        if id0 < 0 {
            return Err(mine
                .err()
                .unwrap_or_else(|| CompatError::Collective("rank 0 could not begin the dataset".into())));
        }
        let id = if first { id0 as u64 } else { begin()? };
        if id != id0 as u64 {
            return Err(CompatError::Collective(format!(
                "rank {} began dataset {id}, the first rank dataset {id0}",
                self.rank
            )));
        }
        Ok(id)
    }

    /// Where the application writes `rel` of this rank in dataset `id`: the store file
    /// itself under the shim's mount prefix when the shim serves this store (its
    /// directories created), else None (the caller stages it).
    pub fn route_direct(&self, id: u64, rel: &str) -> Result<Option<PathBuf>> {
        let Some(mount) = &self.direct else {
            return Ok(None);
        };
        let path = self.store_path(id, self.rank, rel);
        self.mkdirs(&path)?;
        Ok(Some(PathBuf::from(format!("{mount}{path}"))))
    }

    /// Whether `p` is a route into the store ([`Session::route_direct`]), not a staged
    /// file.
    pub fn is_direct(&self, p: &Path) -> bool {
        self.direct.as_ref().is_some_and(|m| {
            p.to_str()
                .and_then(|s| s.strip_prefix(m.as_str()))
                .is_some_and(|r| r.starts_with('/'))
        })
    }

    /// The store file `store_path` under the shim's mount prefix, for reading, when the
    /// shim serves this store.
    pub fn read_direct(&self, store_path: &str) -> Option<PathBuf> {
        self.direct
            .as_ref()
            .map(|m| PathBuf::from(format!("{m}{store_path}")))
    }

    /// Copy the staged files `(rel, staged)` of this rank into dataset `id`'s directory
    /// in the store and remove the staged copies. Missing staged files (routed, never
    /// written) and files routed straight into the store are skipped. Returns the bytes
    /// copied.
    pub fn ingest(&self, id: u64, files: &[(String, PathBuf)]) -> Result<u64> {
        let mut total = 0;
        for (rel, staged) in files {
            if self.is_direct(staged) {
                continue;
            }
            let src = match std::fs::File::open(staged) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(CompatError::io(format!("open {}", staged.display()), e)),
            };
            let path = self.store_path(id, self.rank, rel);
            self.mkdirs(&path)?;
            let mut f = self.store.open(&path, OpenFlags::CREATE, 0o644)?;
            total += crate::staged::copy_into(&src, staged, &mut f)?;
            f.close()?;
        }
        Ok(total)
    }

    /// Write `bytes` as `rel` of this rank in dataset `id` (memory mode).
    pub fn write_file(&self, id: u64, rel: &str, bytes: &[u8]) -> Result<()> {
        let path = self.store_path(id, self.rank, rel);
        self.mkdirs(&path)?;
        let mut f = self.store.open(&path, OpenFlags::CREATE, 0o644)?;
        f.write_all(bytes)?;
        f.close()?;
        Ok(())
    }

    /// Read the store file `path` whole.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let mut f = self.store.open(path, OpenFlags::READ, 0)?;
        let mut out = vec![0u8; f.size() as usize];
        let n = f.read_full(&mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Copy the store file `path` out to the real file `to` (parents created).
    pub fn export(&self, path: &str, to: &Path) -> Result<u64> {
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p).map_err(|e| CompatError::io(format!("create {}", p.display()), e))?;
        }
        let mut f = self.store.open(path, OpenFlags::READ, 0)?;
        let mut out =
            std::fs::File::create(to).map_err(|e| CompatError::io(format!("create {}", to.display()), e))?;
        let mut buf = vec![0u8; 4 << 20];
        let mut total = 0;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n])
                .map_err(|e| CompatError::io(format!("write {}", to.display()), e))?;
            total += n as u64;
        }
        Ok(total)
    }

    fn mkdirs(&self, path: &str) -> Result<()> {
        let mut cur = String::new();
        let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        for c in &parts[..parts.len().saturating_sub(1)] {
            cur.push('/');
            cur.push_str(c);
            match self.store.mkdir(&cur, 0o755) {
                Ok(_) => {}
                Err(e) if e.errno() == libc::EEXIST => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Complete this rank's part of dataset `id`.
    pub fn complete(&self, id: u64, valid: bool) -> Result<()> {
        match &self.jobwide {
            Some(j) => j.complete(id, valid),
            None => self.ds.complete(Some(id), valid).map(|_| ()).map_err(Into::into),
        }
    }

    /// This node's records of the job as they are (read only: not settled).
    fn records(&self) -> Result<Vec<Dataset>> {
        Ok(ckptfs_datasets::record::load_all(&self.store, &self.job)?.0)
    }

    /// The newest record of this library named `name` on this node.
    pub fn record_named(&self, name: &str) -> Result<Option<Dataset>> {
        Ok(self
            .records()?
            .into_iter()
            .rev()
            .find(|d| d.name == name && self.owns(d)))
    }

    /// Across nodes: restart job-wide (every rank of the restart gets the same dataset,
    /// this node's missing files come back from partners or the PFS) and return it with
    /// this rank's files.
    pub fn restart_jobwide(&self) -> Result<Option<(Dataset, BTreeMap<String, String>)>> {
        let j = self
            .jobwide
            .as_ref()
            .ok_or_else(|| CompatError::State("not in cluster mode".into()))?;
        let Some(name) = j.start_restart()? else {
            return Ok(None);
        };
        let d = self
            .record_named(&name)?
            .ok_or_else(|| CompatError::NotFound(format!("dataset {name}: no record of it on this node")))?;
        let files = self.files_of(&d);
        Ok(Some((d, files)))
    }

    /// This rank's files of `d` (relative name -> store path), from the record's files
    /// and, across nodes, every node's agreed part.
    pub fn files_of(&self, d: &Dataset) -> BTreeMap<String, String> {
        let mine = format!("{}/r{}/", self.dataset_dir(d.id), self.rank);
        d.files
            .keys()
            .chain(d.nodes.values().flat_map(|p| p.files.keys()))
            .filter_map(|p| p.strip_prefix(&mine).map(|rel| (rel.to_string(), p.clone())))
            .collect()
    }

    /// Whether `d` is one of this library's datasets (all its files under its directory).
    pub fn owns(&self, d: &Dataset) -> bool {
        let dir = format!("{}/", self.dataset_dir(d.id));
        let mut files = d
            .files
            .keys()
            .chain(d.nodes.values().flat_map(|p| p.files.keys()))
            .peekable();
        files.peek().is_some() && files.all(|p| p.starts_with(&dir))
    }

    /// The newest complete dataset of this library with an id below `below` that
    /// `want` accepts and that is wholly recoverable now (every file intact in the
    /// store or listed with its size and CRC32C by a PFS manifest).
    pub fn newest_recoverable(
        &self,
        below: Option<u64>,
        want: &dyn Fn(&Dataset) -> bool,
    ) -> Result<Option<Dataset>> {
        if let Some(j) = &self.jobwide {
            // Across nodes only the job-wide choice is known (the newest wholly
            // recoverable dataset): it is offered if it passes the filters.
            let Some(name) = j.have_restart()? else {
                return Ok(None);
            };
            let d = self.record_named(&name)?;
            return Ok(d.filter(|d| below.is_none_or(|b| d.id < b) && want(d)));
        }
        let (all, _) = self.ds.list()?;
        for d in all.iter().rev() {
            if d.state != State::Complete || below.is_some_and(|b| d.id >= b) || !self.owns(d) || !want(d) {
                continue;
            }
            if self.ds.sources(d).is_ok() {
                return Ok(Some(d.clone()));
            }
        }
        Ok(None)
    }

    /// This rank's files of `d` (relative name -> store path), bringing back from the
    /// PFS (checked restore) those the store no longer holds intact.
    pub fn bring_back(&self, d: &Dataset) -> Result<BTreeMap<String, String>> {
        let mine = format!("{}/r{}/", self.dataset_dir(d.id), self.rank);
        let srcs = self.ds.sources(d).map_err(|why| {
            CompatError::NotFound(format!(
                "dataset {} ({}) is no longer recoverable: {why}",
                d.id, d.name
            ))
        })?;
        let mut out = BTreeMap::new();
        for (path, src) in srcs {
            let Some(rel) = path.strip_prefix(&mine) else {
                continue;
            };
            if src == ckptfs_datasets::Source::Pfs {
                let dests: Vec<PathBuf> = self.ds.config().dests.clone();
                match ckptfs_agent::restore_path(&self.store, &dests, &path) {
                    Ok(true) => {}
                    Ok(false) => return Err(CompatError::NotFound(format!("{path}: not on the PFS"))),
                    Err(e) => return Err(CompatError::Flush(format!("restore {path}: {e}"))),
                }
            }
            out.insert(rel.to_string(), path);
        }
        Ok(out)
    }

    /// Flush dataset `id` to the PFS destination now (the drain agent, run once in this
    /// process, restricted to the dataset's directory), so that the PFS manifest lists
    /// it and a restart can find it there. Called by one process per node.
    pub fn flush(&self, id: u64) -> Result<u64> {
        let Some(dest) = &self.dest else {
            return Err(CompatError::Flush("no PFS destination configured".into()));
        };
        if self.flush_left.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(0);
        }
        std::fs::create_dir_all(dest)
            .map_err(|e| CompatError::io(format!("create {}", dest.display()), e))?;
        let mut cfg = ckptfs_agent::AgentConfig::new(std::slice::from_ref(dest));
        cfg.priority = ckptfs_agent::sys::Priority::Normal;
        cfg.policy = Some(std::sync::Arc::new(OnlyUnder(format!(
            "{}/",
            self.dataset_dir(id)
        ))));
        // One agent per store at a time: another process of this job flushing, or a
        // `ckptfs agent` / node daemon draining this store, holds the lock. Wait for a
        // short holder; a drain daemon that keeps it drains the dataset itself (when it
        // is configured to: docs/scr-veloc.md).
        let t0 = std::time::Instant::now();
        let agent = loop {
            match ckptfs_agent::Agent::new(&self.store, cfg.clone()) {
                Ok(a) => break a,
                Err(ckptfs_agent::AgentError::Busy { .. }) if t0.elapsed() < FLUSH_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e @ ckptfs_agent::AgentError::Busy { .. }) => {
                    self.flush_left.store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(CompatError::Flush(format!(
                        "{e}: flushes of this run are left to that drain (configure it with dataset_flush_every)"
                    )));
                }
                Err(e) => return Err(CompatError::Flush(e.to_string())),
            }
        };
        let sum = agent.run_once().map_err(|e| CompatError::Flush(e.to_string()))?;
        if let Some(f) = sum.failed.first() {
            return Err(CompatError::Flush(format!(
                "{} file(s) failed, first: {f:?}",
                sum.failed.len()
            )));
        }
        Ok(sum.drained_bytes)
    }

    /// A staged path for `rel` in the phase directory `phase`, parents created.
    pub fn staged(&self, phase: &str, rel: &str) -> Result<PathBuf> {
        let p = self.stage.join(phase).join(rel.trim_start_matches('/'));
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| CompatError::io(format!("create {}", dir.display()), e))?;
        }
        Ok(p)
    }

    /// Remove a phase's staging directory.
    pub fn unstage(&self, phase: &str) {
        let _ = std::fs::remove_dir_all(self.stage.join(phase));
    }
}

/// How long [`Session::flush`] waits for another agent to let go of the store.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The drain policy of [`Session::flush`]: files under one directory go to the PFS.
#[derive(Debug)]
struct OnlyUnder(String);

impl ckptfs_agent::MovePolicy for OnlyUnder {
    fn route(&self, from: Level, c: &ckptfs_agent::mover::Candidate<'_>) -> Option<Level> {
        (from == Level::Local && c.path.starts_with(&self.0)).then_some(Level::Pfs)
    }
    fn release_source(&self, _: Level, _: Level) -> bool {
        false
    }
}
