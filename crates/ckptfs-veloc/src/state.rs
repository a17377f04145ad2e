//! The library's process-wide state and the implementation of each call (safe Rust,
//! apart from [`crate::regions`]); [`crate::api`] converts the C arguments.
//!
//! Collective discipline as in ckptfs-scr: local argument checks return before any
//! communication; after the first collective step every rank goes through the same MPI
//! calls and the outcome is agreed.

use crate::config::{self, VelocConfig};
use crate::regions::{self, Region, Regions};
use ckptfs_compat::session::Session;
use ckptfs_compat::{mpi, CompatError, Result};
use ckptfs_datasets::Dataset;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// VELOC_MAX_NAME: the size of the buffer VELOC_Route_file writes.
pub const MAX_NAME: usize = 1024;
/// VELOC_CKPT_ALL / VELOC_RECOVER_ALL.
pub const ALL: i32 = 0;
/// VELOC_CKPT_SOME / VELOC_RECOVER_SOME.
pub const SOME: i32 = 1;
/// VELOC_CKPT_REST / VELOC_RECOVER_REST.
pub const REST: i32 = 2;

/// What the library is doing between calls.
pub enum Phase {
    /// Between phases.
    Idle,
    /// Between VELOC_Checkpoint_begin and VELOC_Checkpoint_end.
    Checkpoint {
        /// Label and version.
        name: String,
        /// Version.
        version: i32,
        /// Dataset id.
        id: u64,
        /// The staged file handed out by VELOC_Route_file.
        routed: Option<PathBuf>,
        /// A VELOC_Checkpoint_mem failed on this rank.
        mem_failed: bool,
    },
    /// Between VELOC_Restart_begin and VELOC_Restart_end.
    Restart {
        /// Label.
        name: String,
        /// Version.
        version: i32,
        /// This rank's files of the dataset: file name -> store path.
        files: BTreeMap<String, String>,
        /// The memory checkpoint, read at the first VELOC_Recover_*.
        mem: Option<Vec<u8>>,
    },
}

/// The initialized library.
pub struct Veloc {
    sess: Session,
    cfg: VelocConfig,
    /// Registered memory regions.
    pub regions: Regions,
    /// Current phase.
    pub phase: Phase,
    last_flush: Option<Instant>,
}

/// None before VELOC_Init and after VELOC_Finalize.
pub static STATE: Mutex<Option<Veloc>> = Mutex::new(None);

/// Run `f` on the initialized state.
pub fn with<T>(call: &'static str, f: impl FnOnce(&mut Veloc) -> Result<T>) -> Result<T> {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let s = g.as_mut().ok_or(CompatError::NotInitialized(call))?;
    f(s)
}

/// VELOC_Init / VELOC_Init_single (`single`: the process's unique id).
pub fn init(comm: mpi::Comm, single: Option<u32>, cfg_file: &Path) -> Result<()> {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_some() {
        return Err(CompatError::State("VELOC_Init called twice".into()));
    }
    let mut cfg = config::read(cfg_file)?;
    let (rank, size) = mpi::attach(comm)?;
    let (rank, size) = match single {
        Some(id) => {
            cfg.mapped.job_suffix = Some(format!(".single{id}"));
            (id, 1)
        }
        None => (rank, size),
    };
    let sess = Session::open("veloc", &cfg.mapped, rank, size);
    let ok = mpi::all(sess.is_ok());
    let sess = match (sess, ok) {
        (Ok(s), Ok(true)) => s,
        (Err(e), _) | (_, Err(e)) => {
            let _ = mpi::detach();
            return Err(e);
        }
        (Ok(_), Ok(false)) => {
            let _ = mpi::detach();
            return Err(CompatError::Collective(
                "another rank could not attach to its node store".into(),
            ));
        }
    };
    if mpi::cached_rank() == Some(0) {
        for r in &cfg.reports {
            eprintln!("ckptfs-veloc: {r}");
        }
    }
    *g = Some(Veloc {
        sess,
        cfg,
        regions: Regions::new(),
        phase: Phase::Idle,
        last_flush: None,
    });
    Ok(())
}

/// VELOC_Finalize.
pub fn finalize() -> Result<()> {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let s = g.take().ok_or(CompatError::NotInitialized("VELOC_Finalize"))?;
    if let Phase::Checkpoint { id, .. } = &s.phase {
        s.sess.unstage(&format!("d{id}"));
    }
    s.sess.unstage("restart");
    let r = mpi::barrier();
    mpi::detach()?;
    r
}

/// A checkpoint label: letters, digits and '_' only (VeloC's rule).
pub fn check_label(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() >= MAX_NAME
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(CompatError::Invalid(format!(
            "checkpoint name {name:?}: 1-{} characters from [a-zA-Z0-9_]",
            MAX_NAME - 1
        )));
    }
    Ok(())
}

fn dataset_name(name: &str, version: i32) -> String {
    format!("{name}.{version}")
}

fn version_of(d: &Dataset, name: &str) -> Option<i32> {
    d.name.strip_prefix(name)?.strip_prefix('.')?.parse().ok()
}

impl Veloc {
    fn file_name(&self, name: &str, version: i32) -> String {
        format!("{name}-{}-{version}.dat", self.sess.rank)
    }

    fn mem_name(&self, name: &str, version: i32) -> String {
        format!("{name}-{}-{version}.mem", self.sess.rank)
    }

    /// VELOC_Mem_protect / VELOC_Region_protect.
    pub fn protect(&mut self, region: &str, id: i32, ptr: usize, count: usize, base: usize) -> Result<()> {
        let len = count
            .checked_mul(base)
            .ok_or_else(|| CompatError::Invalid(format!("region {id}: {count} x {base} bytes overflows")))?;
        if ptr == 0 && len > 0 {
            return Err(CompatError::Invalid(format!("region {id}: NULL pointer")));
        }
        self.regions.insert((region.to_string(), id), Region { ptr, len });
        Ok(())
    }

    /// VELOC_Mem_unprotect / VELOC_Region_unprotect.
    pub fn unprotect(&mut self, region: &str, id: i32) -> Result<()> {
        self.regions
            .remove(&(region.to_string(), id))
            .map(|_| ())
            .ok_or_else(|| CompatError::NotFound(format!("region {id} is not protected")))
    }

    /// VELOC_Mem_clear / VELOC_Region_clear.
    pub fn clear(&mut self, region: Option<&str>) {
        match region {
            None => self.regions.clear(),
            Some(r) => self.regions.retain(|(n, _), _| n != r),
        }
    }

    /// VELOC_Checkpoint_begin.
    pub fn checkpoint_begin(&mut self, name: &str, version: i32) -> Result<()> {
        check_label(name)?;
        if version < 0 {
            return Err(CompatError::Invalid(format!("version {version} is negative")));
        }
        if !matches!(self.phase, Phase::Idle) {
            return Err(CompatError::State(
                "VELOC_Checkpoint_begin inside a checkpoint or restart phase".into(),
            ));
        }
        let id = self.sess.begin_all(&dataset_name(name, version));
        let ok = mpi::all(id.is_ok())?;
        let id = id?;
        if !ok {
            return Err(CompatError::Collective(
                "another rank could not begin the checkpoint".into(),
            ));
        }
        self.sess.unstage(&format!("d{id}"));
        self.phase = Phase::Checkpoint {
            name: name.to_string(),
            version,
            id,
            routed: None,
            mem_failed: false,
        };
        Ok(())
    }

    /// VELOC_Checkpoint_selective / VELOC_Checkpoint_mem: the regions into the store.
    pub fn checkpoint_mem(&mut self, mode: i32, ids: &[i32]) -> Result<()> {
        let (name, version, id) = match &self.phase {
            Phase::Checkpoint {
                name, version, id, ..
            } => (name.clone(), *version, *id),
            _ => {
                return Err(CompatError::State(
                    "VELOC_Checkpoint_mem outside a checkpoint phase".into(),
                ))
            }
        };
        let which = selector(mode, ids)?;
        for i in ids {
            if mode == SOME && !self.regions.contains_key(&(String::new(), *i)) {
                return Err(CompatError::NotFound(format!("region {i} is not protected")));
            }
        }
        let data = regions::serialize(&self.regions, &|n, i| !n.is_empty() || which(i));
        let r = self.sess.write_file(id, &self.mem_name(&name, version), &data);
        if r.is_err() {
            if let Phase::Checkpoint { mem_failed, .. } = &mut self.phase {
                *mem_failed = true;
            }
        }
        r
    }

    /// VELOC_Route_file: the staged path of this rank's file of the current checkpoint
    /// (or, during a restart, the file brought back for reading).
    pub fn route(&mut self, original: &str) -> Result<String> {
        if original.len() >= MAX_NAME {
            return Err(CompatError::TooLong(format!(
                "original name of {} bytes (VELOC_MAX_NAME is {MAX_NAME})",
                original.len()
            )));
        }
        let p = match &self.phase {
            Phase::Checkpoint {
                name, version, id, ..
            } => {
                let p = self
                    .sess
                    .staged(&format!("d{id}"), &self.file_name(name, *version))?;
                if let Phase::Checkpoint { routed, .. } = &mut self.phase {
                    *routed = Some(p.clone());
                }
                p
            }
            Phase::Restart {
                name, version, files, ..
            } => {
                let f = self.file_name(name, *version);
                let src = files.get(&f).ok_or_else(|| {
                    CompatError::NotFound(format!(
                        "checkpoint {name} version {version} has no file of this rank"
                    ))
                })?;
                let p = self.sess.staged("restart", &f)?;
                if !p.exists() {
                    self.sess.export(src, &p)?;
                }
                p
            }
            Phase::Idle => {
                return Err(CompatError::State(
                    "VELOC_Route_file outside a checkpoint or restart phase".into(),
                ))
            }
        };
        let s = p.to_string_lossy().into_owned();
        if s.len() >= MAX_NAME {
            return Err(CompatError::TooLong(format!("routed path of {} bytes", s.len())));
        }
        Ok(s)
    }

    /// VELOC_Checkpoint_end.
    pub fn checkpoint_end(&mut self, success: bool) -> Result<()> {
        if !matches!(self.phase, Phase::Checkpoint { .. }) {
            return Err(CompatError::State(
                "VELOC_Checkpoint_end without VELOC_Checkpoint_begin".into(),
            ));
        }
        let Phase::Checkpoint {
            name,
            version,
            id,
            routed,
            mem_failed,
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            unreachable!("checked above")
        };
        let files: Vec<(String, PathBuf)> = routed
            .map(|p| (self.file_name(&name, version), p))
            .into_iter()
            .collect();
        let local = self.sess.ingest(id, &files).map(|_| ());
        let all_valid = mpi::all(success && !mem_failed && local.is_ok())?;
        let completed = match self.sess.complete(id, all_valid) {
            Err(CompatError::Datasets(e)) if !all_valid && e.errno() == libc::EALREADY => Ok(()),
            r => r.map(|_| ()),
        };
        mpi::barrier()?;
        let flush = self.flush_due(all_valid && completed.is_ok());
        if self.sess.flusher {
            if let Err(e) = flush.then(|| self.sess.flush(id)).transpose() {
                ckptfs_compat::ffi::report("ckptfs-veloc", "VELOC_Checkpoint_end (persistent)", &e);
            }
        }
        self.sess.unstage(&format!("d{id}"));
        let ok = mpi::all(local.is_ok() && completed.is_ok())?;
        local?;
        completed?;
        if !ok || !all_valid {
            return Err(CompatError::Collective(format!(
                "checkpoint {name} version {version}: not every rank stored its part"
            )));
        }
        Ok(())
    }

    fn flush_due(&mut self, complete: bool) -> bool {
        if !complete || self.sess.dest.is_none() || self.cfg.persistent_interval < 0 {
            return false;
        }
        let due = self
            .last_flush
            .is_none_or(|t| t.elapsed().as_secs() >= self.cfg.persistent_interval as u64);
        if due {
            self.last_flush = Some(Instant::now());
        }
        due
    }

    /// VELOC_Restart_test: the newest wholly recoverable version of `name` below
    /// `max_version` (0: any), agreed on every rank.
    pub fn restart_test(&mut self, name: &str, max_version: i32) -> Result<Option<i32>> {
        check_label(name)?;
        if !matches!(self.phase, Phase::Idle) {
            return Err(CompatError::State("VELOC_Restart_test inside a phase".into()));
        }
        let want = |d: &Dataset| version_of(d, name).is_some_and(|v| max_version <= 0 || v < max_version);
        let mine = if mpi::cached_rank() == Some(0) {
            self.sess
                .newest_recoverable(None, &want)?
                .and_then(|d| version_of(&d, name))
                .map(i64::from)
                .unwrap_or(-1)
        } else {
            -1
        };
        let v = mpi::max(mine)?;
        Ok((v >= 0).then_some(v as i32))
    }

    /// VELOC_Restart_begin.
    pub fn restart_begin(&mut self, name: &str, version: i32) -> Result<()> {
        check_label(name)?;
        if version < 0 {
            return Err(CompatError::Invalid(format!("version {version} is negative")));
        }
        if !matches!(self.phase, Phase::Idle) {
            return Err(CompatError::State("VELOC_Restart_begin inside a phase".into()));
        }
        let dn = dataset_name(name, version);
        let mine = (|| {
            if self.sess.jobwide.is_some() {
                // Across nodes: the job-wide restart (agreed by every rank, this node's
                // files brought back); only the newest wholly recoverable checkpoint.
                return match self.sess.restart_jobwide()? {
                    Some((d, files)) if d.name == dn => Ok(files),
                    Some((d, _)) => Err(CompatError::NotFound(format!(
                        "across nodes only the newest wholly recoverable checkpoint ({}) can be restarted, not {dn}",
                        d.name
                    ))),
                    None => Err(CompatError::NotFound("no checkpoint to restart from".into())),
                };
            }
            let (all, _) = self.sess.ds.list()?;
            let d = all
                .into_iter()
                .rev()
                .find(|d| d.name == dn && d.state == ckptfs_datasets::State::Complete && self.sess.owns(d))
                .ok_or_else(|| {
                    CompatError::NotFound(format!("no complete checkpoint {name} version {version}"))
                })?;
            self.sess.bring_back(&d)
        })();
        let ok = mpi::all(mine.is_ok())?;
        let files = mine?;
        if !ok {
            return Err(CompatError::Collective(format!(
                "checkpoint {name} version {version}: another rank cannot restart from it"
            )));
        }
        self.sess.unstage("restart");
        self.phase = Phase::Restart {
            name: name.to_string(),
            version,
            files,
            mem: None,
        };
        Ok(())
    }

    fn mem(&mut self) -> Result<&[u8]> {
        let mem_name = match &self.phase {
            Phase::Restart { name, version, .. } => self.mem_name(name, *version),
            _ => {
                return Err(CompatError::State(
                    "VELOC_Recover_* outside a restart phase".into(),
                ))
            }
        };
        let Phase::Restart {
            files,
            mem,
            name,
            version,
            ..
        } = &mut self.phase
        else {
            unreachable!("checked above")
        };
        if mem.is_none() {
            let path = files.get(&mem_name).ok_or_else(|| {
                CompatError::NotFound(format!(
                    "checkpoint {name} version {version} has no memory regions of this rank"
                ))
            })?;
            *mem = Some(self.sess.read_file(path)?);
        }
        Ok(mem.as_deref().unwrap_or_default())
    }

    /// VELOC_Recover_selective / VELOC_Recover_mem.
    pub fn recover(&mut self, mode: i32, ids: &[i32]) -> Result<()> {
        let which = selector(mode, ids)?;
        let regs = self.regions.clone();
        let data = self.mem()?;
        let saved = regions::parse(data)?;
        if mode == SOME {
            for i in ids {
                if !saved.contains_key(&(String::new(), *i)) {
                    return Err(CompatError::NotFound(format!(
                        "region {i} is not in the checkpoint"
                    )));
                }
            }
        }
        for ((n, i), range) in &saved {
            if n.is_empty() && !which(*i) {
                continue;
            }
            let r = regs.get(&(n.clone(), *i)).ok_or_else(|| {
                CompatError::NotFound(format!("region {i} of the checkpoint is not protected"))
            })?;
            regions::restore(r, &data[range.clone()])?;
        }
        Ok(())
    }

    /// VELOC_Recover_size: the saved size of region `id`, or None.
    pub fn recover_size(&mut self, id: i32) -> Result<Option<usize>> {
        let data = self.mem()?;
        Ok(regions::parse(data)?.get(&(String::new(), id)).map(|r| r.len()))
    }

    /// VELOC_Restart_end.
    pub fn restart_end(&mut self, success: bool) -> Result<()> {
        if !matches!(self.phase, Phase::Restart { .. }) {
            return Err(CompatError::State(
                "VELOC_Restart_end without VELOC_Restart_begin".into(),
            ));
        }
        self.phase = Phase::Idle;
        self.sess.unstage("restart");
        if !mpi::all(success)? {
            return Err(CompatError::Collective("the restart failed on some rank".into()));
        }
        Ok(())
    }

    /// VELOC_Cleanup: delete every checkpoint of `name` (records and store files).
    pub fn cleanup(&mut self, name: &str) -> Result<()> {
        check_label(name)?;
        mpi::barrier()?;
        let r: Result<()> = if mpi::cached_rank() == Some(0) || self.cfg.mapped.job_suffix.is_some() {
            (|| {
                let (all, _) = self.sess.ds.list()?;
                for d in all
                    .iter()
                    .filter(|d| version_of(d, name).is_some() && self.sess.owns(d))
                {
                    self.sess.ds.delete(d.id)?;
                }
                Ok(())
            })()
        } else {
            Ok(())
        };
        let ok = mpi::all(r.is_ok())?;
        r?;
        if !ok {
            return Err(CompatError::Collective(
                "rank 0 could not delete the checkpoints".into(),
            ));
        }
        Ok(())
    }
}

/// Which region ids a VELOC_CKPT_* / VELOC_RECOVER_* mode selects.
pub fn selector(mode: i32, ids: &[i32]) -> Result<impl Fn(i32) -> bool + '_> {
    if ![ALL, SOME, REST].contains(&mode) {
        return Err(CompatError::Invalid(format!(
            "mode {mode}: ALL (0), SOME (1) or REST (2)"
        )));
    }
    Ok(move |i: i32| match mode {
        ALL => true,
        SOME => ids.contains(&i),
        _ => !ids.contains(&i),
    })
}
