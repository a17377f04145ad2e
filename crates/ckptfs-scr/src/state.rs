//! The library's process-wide state and the implementation of each call (safe Rust;
//! the C and Fortran entry points in [`crate::api`] and [`crate::fortran`] only convert
//! arguments).
//!
//! Collective discipline: a call validates its local arguments first and returns
//! without communicating if they are bad (every rank passes the same arguments, as SCR
//! requires, so every rank returns); after the first collective step every rank goes
//! through the same sequence of MPI calls whatever fails locally, and the outcome is
//! agreed (`mpi::all`), so that all ranks return the same code.

use crate::config::{self, ScrConfig};
use ckptfs_compat::session::Session;
use ckptfs_compat::{mpi, CompatError, Result};
use ckptfs_datasets::Dataset;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// SCR_MAX_FILENAME: the size of the buffers the caller passes.
pub const MAX_FILENAME: usize = 1024;
/// SCR_FLAG_CHECKPOINT.
pub const FLAG_CHECKPOINT: i32 = 1;
/// SCR_FLAG_OUTPUT.
pub const FLAG_OUTPUT: i32 = 2;

/// What the library is doing between calls.
pub enum Phase {
    /// Between phases.
    Idle,
    /// Between SCR_Start_output and SCR_Complete_output.
    Output {
        /// The dataset (checkpoints only; output-only datasets have none).
        id: Option<u64>,
        /// Its name.
        name: String,
        /// SCR_FLAG_* given.
        flags: i32,
        /// Staging directory name.
        dir: String,
        /// Routed files: path relative to the prefix -> staged path.
        files: BTreeMap<String, PathBuf>,
    },
    /// Between SCR_Start_restart and SCR_Complete_restart.
    Restart {
        /// The dataset being read.
        d: Box<Dataset>,
        /// This rank's files: path relative to the prefix -> store path.
        files: BTreeMap<String, String>,
        /// Staging directory name.
        dir: String,
    },
}

/// The initialized library.
pub struct Scr {
    /// The store and datasets.
    pub sess: Session,
    /// The resolved configuration.
    pub cfg: ScrConfig,
    /// The current phase.
    pub phase: Phase,
    need_calls: u64,
    last_ckpt: Instant,
    /// Datasets dropped with SCR_Drop (not offered for restart by this run).
    dropped: BTreeSet<u64>,
    /// Only datasets below this id are offered (SCR_Current, a failed restart).
    below: Option<u64>,
    outputs: u64,
}

/// The library's state: None before SCR_Init and after SCR_Finalize.
pub static STATE: Mutex<Option<Scr>> = Mutex::new(None);

fn not_init(call: &'static str) -> CompatError {
    CompatError::NotInitialized(call)
}

/// Run `f` on the initialized state.
pub fn with<T>(call: &'static str, f: impl FnOnce(&mut Scr) -> Result<T>) -> Result<T> {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let s = g.as_mut().ok_or_else(|| not_init(call))?;
    f(s)
}

/// SCR_Init.
pub fn init() -> Result<()> {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_some() {
        return Err(CompatError::State("SCR_Init called twice".into()));
    }
    let cfg = config::resolve()?;
    let (rank, size) = mpi::attach(mpi::Comm::World)?;
    let sess = Session::open("scr", &cfg.mapped, rank, size);
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
    if rank == 0 {
        for k in &cfg.ignored {
            eprintln!("ckptfs-scr: {k} has no meaning with ckptfs and is ignored");
        }
        for n in &cfg.notes {
            eprintln!("ckptfs-scr: {n}");
        }
    }
    *g = Some(Scr {
        sess,
        cfg,
        phase: Phase::Idle,
        need_calls: 0,
        last_ckpt: Instant::now(),
        dropped: BTreeSet::new(),
        below: None,
        outputs: 0,
    });
    Ok(())
}

/// SCR_Finalize: ends a phase left open (its dataset stays incomplete), frees the
/// communicator.
pub fn finalize() -> Result<()> {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let s = g.take().ok_or_else(|| not_init("SCR_Finalize"))?;
    if let Phase::Output { dir, .. } | Phase::Restart { dir, .. } = &s.phase {
        s.sess.unstage(dir);
    }
    let r = mpi::barrier();
    mpi::detach()?;
    r
}

/// `name` (relative to the working directory, or absolute) as a path relative to the
/// prefix; outside the prefix is an error.
pub fn relative_to_prefix(prefix: &Path, name: &str) -> Result<String> {
    if name.is_empty() {
        return Err(CompatError::Invalid("empty file name".into()));
    }
    if name.len() >= MAX_FILENAME {
        return Err(CompatError::TooLong(format!(
            "file name of {} bytes (SCR_MAX_FILENAME is {MAX_FILENAME})",
            name.len()
        )));
    }
    let cwd = std::env::current_dir().map_err(|e| CompatError::io("getcwd", e))?;
    let mut out: Vec<String> = Vec::new();
    for c in cwd.join(name).components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
        }
    }
    let abs = PathBuf::from(format!("/{}", out.join("/")));
    let rel = abs.strip_prefix(prefix).map_err(|_| {
        CompatError::Invalid(format!(
            "{name} ({}) is not under the prefix directory {}",
            abs.display(),
            prefix.display()
        ))
    })?;
    let rel = rel.to_string_lossy().into_owned();
    if rel.is_empty() {
        return Err(CompatError::Invalid(format!(
            "{name} is the prefix directory itself"
        )));
    }
    Ok(rel)
}

fn fits(p: &Path) -> Result<String> {
    let s = p.to_string_lossy().into_owned();
    if s.len() >= MAX_FILENAME {
        return Err(CompatError::TooLong(format!(
            "routed path of {} bytes (SCR_MAX_FILENAME is {MAX_FILENAME})",
            s.len()
        )));
    }
    Ok(s)
}

impl Scr {
    /// SCR_Start_output.
    pub fn start_output(&mut self, name: Option<&str>, flags: i32) -> Result<()> {
        if !matches!(self.phase, Phase::Idle) {
            return Err(CompatError::State(
                "SCR_Start_output inside an output or restart phase".into(),
            ));
        }
        if flags & !(FLAG_CHECKPOINT | FLAG_OUTPUT) != 0 || flags == 0 {
            return Err(CompatError::Invalid(format!(
                "flags {flags}: SCR_FLAG_CHECKPOINT and/or SCR_FLAG_OUTPUT"
            )));
        }
        if let Some(n) = name {
            if n.len() >= MAX_FILENAME {
                return Err(CompatError::TooLong(format!(
                    "dataset name of {} bytes (SCR_MAX_FILENAME is {MAX_FILENAME})",
                    n.len()
                )));
            }
            ckptfs_datasets::check_name(n)?;
        }
        // Every rank must give the same name and flags.
        let mine = format!("{flags}\n{}", name.unwrap_or(""));
        let r0 = mpi::bcast_str(&mine)?;
        if !mpi::all(r0 == mine)? {
            return Err(CompatError::Collective(format!(
                "SCR_Start_output: ranks passed different names or flags (rank 0: {r0:?})"
            )));
        }
        self.outputs += 1;
        let name = match name {
            Some(n) => n.to_string(),
            None => {
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                mpi::bcast_str(&format!("scr.dataset.{stamp}"))?
            }
        };
        let (id, dir) = if flags & FLAG_CHECKPOINT != 0 {
            let id = self.sess.begin_all(&name);
            let ok = mpi::all(id.is_ok())?;
            let id = id?;
            if !ok {
                return Err(CompatError::Collective(
                    "another rank could not begin the dataset".into(),
                ));
            }
            (Some(id), format!("d{id}"))
        } else {
            (None, format!("out{}", self.outputs))
        };
        self.sess.unstage(&dir);
        self.phase = Phase::Output {
            id,
            name,
            flags,
            dir,
            files: BTreeMap::new(),
        };
        Ok(())
    }

    /// SCR_Route_file.
    pub fn route(&mut self, name: &str) -> Result<String> {
        match &mut self.phase {
            Phase::Idle => {
                if name.len() >= MAX_FILENAME {
                    return Err(CompatError::TooLong(format!(
                        "file name of {} bytes (SCR_MAX_FILENAME is {MAX_FILENAME})",
                        name.len()
                    )));
                }
                Ok(name.to_string())
            }
            Phase::Output {
                dir,
                files,
                id,
                flags,
                ..
            } => {
                let rel = relative_to_prefix(&self.cfg.prefix, name)?;
                // Under the preload shim, a checkpoint's file goes straight into the
                // store (an output's is copied to the prefix from its staged copy).
                if let (Some(id), FLAG_CHECKPOINT, Some(m)) = (*id, *flags, self.sess.direct.as_deref()) {
                    let p = PathBuf::from(format!("{m}{}", self.sess.store_path(id, self.sess.rank, &rel)));
                    let s = fits(&p)?;
                    self.sess.route_direct(id, &rel)?;
                    files.insert(rel, p);
                    return Ok(s);
                }
                let p = self.sess.stage.join(&*dir).join(&rel);
                let s = fits(&p)?;
                let p = self.sess.staged(dir, &rel)?;
                files.insert(rel, p);
                Ok(s)
            }
            Phase::Restart { files, dir, d } => {
                let rel = match relative_to_prefix(&self.cfg.prefix, name) {
                    Ok(r) => r,
                    // A bare file name (deprecated in SCR, still accepted): look it up.
                    Err(e) if !name.contains('/') => files
                        .keys()
                        .find(|k| Path::new(k).file_name().is_some_and(|b| b == name))
                        .cloned()
                        .ok_or(e)?,
                    Err(e) => return Err(e),
                };
                let Some(src) = files.get(&rel) else {
                    return Err(CompatError::NotFound(format!(
                        "{name}: not a file of this rank in checkpoint {}",
                        d.name
                    )));
                };
                if let Some(p) = self.sess.read_direct(src) {
                    return fits(&p);
                }
                let p = self.sess.stage.join(&*dir).join(&rel);
                let s = fits(&p)?;
                if !p.exists() {
                    let p = self.sess.staged(dir, &rel)?;
                    self.sess.export(src, &p)?;
                }
                Ok(s)
            }
        }
    }

    /// SCR_Complete_output.
    pub fn complete_output(&mut self, valid: bool) -> Result<()> {
        if !matches!(self.phase, Phase::Output { .. }) {
            return Err(CompatError::State(
                "SCR_Complete_output without SCR_Start_output".into(),
            ));
        }
        let Phase::Output {
            id,
            flags,
            dir,
            files,
            name,
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            unreachable!("checked above")
        };
        let list: Vec<(String, PathBuf)> = files.into_iter().collect();
        // This rank's part: copy into the store, copy outputs to the prefix.
        let mut local: Result<()> = Ok(());
        if let Some(id) = id {
            local = self.sess.ingest(id, &list).map(|_| ());
        }
        if local.is_ok() && valid && flags & FLAG_OUTPUT != 0 {
            local = publish(&self.cfg.prefix, &list);
        }
        let all_valid = mpi::all(valid && local.is_ok())?;
        let mut completed: Result<()> = Ok(());
        if let Some(id) = id {
            completed = match self.sess.complete(id, all_valid) {
                // Another rank's invalid part already closed the dataset as invalid.
                Err(CompatError::Datasets(e)) if !all_valid && e.errno() == libc::EALREADY => Ok(()),
                r => r.map(|_| ()),
            };
            mpi::barrier()?;
            // Flush through the drain when the dataset is marked (every SCR_FLUSH-th,
            // or an output), by the first process of each node.
            let flush = if all_valid && completed.is_ok() && self.sess.flusher {
                match &self.sess.jobwide {
                    Some(_) => {
                        let every = self.sess.flush_every;
                        if flags & FLAG_OUTPUT != 0 || (every > 0 && id % u64::from(every) == 0) {
                            self.sess.flush(id).map(|_| ())
                        } else {
                            Ok(())
                        }
                    }
                    None => match self.sess.ds.show(id) {
                        Ok(d) if d.flush || flags & FLAG_OUTPUT != 0 => self.sess.flush(id).map(|_| ()),
                        Ok(_) => Ok(()),
                        Err(e) => Err(e.into()),
                    },
                }
            } else {
                Ok(())
            };
            if let Err(e) = flush {
                ckptfs_compat::ffi::report("ckptfs-scr", "SCR_Complete_output (flush)", &e);
            }
            self.last_ckpt = Instant::now();
        }
        self.sess.unstage(&dir);
        let ok = mpi::all(local.is_ok() && completed.is_ok())?;
        local?;
        completed?;
        if !ok {
            return Err(CompatError::Collective(format!(
                "dataset {name}: another rank failed its part"
            )));
        }
        if !all_valid {
            return Err(CompatError::Collective(format!(
                "dataset {name}: some rank's part is invalid"
            )));
        }
        Ok(())
    }

    fn offered(&self) -> impl Fn(&Dataset) -> bool + '_ {
        move |d: &Dataset| !self.dropped.contains(&d.id)
    }

    /// The dataset a restart would load, as chosen by rank 0 and broadcast.
    fn choose(&self) -> Result<Option<(u64, String)>> {
        let mine = if self.sess.rank == 0 {
            match self.sess.newest_recoverable(self.below, &self.offered()) {
                Ok(Some(d)) => format!("{}\n{}", d.id, d.name),
                Ok(None) => "0\n".into(),
                Err(e) => {
                    ckptfs_compat::ffi::report("ckptfs-scr", "restart search", &e);
                    "E\n".into()
                }
            }
        } else {
            String::new()
        };
        let s = mpi::bcast_str(&mine)?;
        let (id, name) = s.split_once('\n').unwrap_or(("E", ""));
        match id.parse::<u64>() {
            Ok(0) => Ok(None),
            Ok(id) => Ok(Some((id, name.to_string()))),
            Err(_) => Err(CompatError::Collective(
                "rank 0 could not search the datasets".into(),
            )),
        }
    }

    /// SCR_Have_restart: the name of the checkpoint a restart would load.
    pub fn have_restart(&mut self) -> Result<Option<String>> {
        if !matches!(self.phase, Phase::Idle) {
            return Err(CompatError::State("SCR_Have_restart inside a phase".into()));
        }
        Ok(self.choose()?.map(|c| c.1))
    }

    /// SCR_Start_restart.
    pub fn start_restart(&mut self) -> Result<String> {
        if !matches!(self.phase, Phase::Idle) {
            return Err(CompatError::State("SCR_Start_restart inside a phase".into()));
        }
        if self.sess.jobwide.is_some() {
            return self.start_restart_jobwide();
        }
        let Some((id, name)) = self.choose()? else {
            return Err(CompatError::NotFound("no checkpoint to restart from".into()));
        };
        let mine = self
            .sess
            .ds
            .show(id)
            .map_err(CompatError::from)
            .and_then(|d| Ok((self.sess.bring_back(&d)?, d)));
        let ok = mpi::all(mine.is_ok())?;
        let (files, d) = mine?;
        if !ok {
            return Err(CompatError::Collective(format!(
                "checkpoint {name}: another rank could not load its files"
            )));
        }
        let dir = format!("restart{id}");
        self.sess.unstage(&dir);
        self.phase = Phase::Restart {
            d: Box::new(d),
            files,
            dir,
        };
        Ok(name)
    }

    /// Across nodes: every rank restarts job-wide (the C API's agreement gives all the
    /// same dataset, and brings this node's missing files back from partners or the
    /// PFS); the ranks check that they agree.
    fn start_restart_jobwide(&mut self) -> Result<String> {
        let mine = self.sess.restart_jobwide();
        let name = match &mine {
            Ok(Some((d, _))) => d.name.clone(),
            _ => String::new(),
        };
        let r0 = mpi::bcast_str(&name)?;
        let ok = mpi::all(!name.is_empty() && name == r0)?;
        let Some((d, files)) = mine? else {
            return Err(CompatError::NotFound("no checkpoint to restart from".into()));
        };
        if !ok {
            return Err(CompatError::Collective(format!(
                "ranks chose different checkpoints or failed to load theirs (rank 0: {r0:?}, this rank: {name:?})"
            )));
        }
        let dir = format!("restart{}", d.id);
        self.sess.unstage(&dir);
        self.phase = Phase::Restart {
            d: Box::new(d),
            files,
            dir,
        };
        Ok(name)
    }

    /// SCR_Complete_restart.
    pub fn complete_restart(&mut self, valid: bool) -> Result<()> {
        if !matches!(self.phase, Phase::Restart { .. }) {
            return Err(CompatError::State(
                "SCR_Complete_restart without SCR_Start_restart".into(),
            ));
        }
        let Phase::Restart { d, dir, .. } = std::mem::replace(&mut self.phase, Phase::Idle) else {
            unreachable!("checked above")
        };
        self.sess.unstage(&dir);
        let all = mpi::all(valid)?;
        if !all {
            // The next SCR_Have_restart offers the next older checkpoint.
            self.below = Some(d.id);
            return Err(CompatError::Collective(format!(
                "restart from {} failed on some rank",
                d.name
            )));
        }
        Ok(())
    }

    /// SCR_Need_checkpoint.
    pub fn need_checkpoint(&mut self) -> Result<bool> {
        self.need_calls += 1;
        let due = if self.cfg.interval > 0 {
            self.need_calls.is_multiple_of(self.cfg.interval)
        } else if self.cfg.seconds > 0 {
            self.last_ckpt.elapsed().as_secs() >= self.cfg.seconds
        } else if self.sess.rank == 0 {
            ckptfs_datasets::policy::need(&self.sess.ds)
                .map(|n| n.due)
                .unwrap_or(true)
        } else {
            false
        };
        // Rank 0 decides, so that every rank gets the same answer.
        Ok(mpi::max(i64::from(due && self.sess.rank == 0))? == 1)
    }

    /// SCR_Should_exit: the halt file `PREFIX/.ckptfs/halt` exists (rank 0 looks).
    pub fn should_exit(&mut self) -> Result<bool> {
        let halt = self.sess.rank == 0 && self.cfg.prefix.join(".ckptfs").join("halt").exists();
        Ok(mpi::max(i64::from(halt))? == 1)
    }

    fn by_name(&self, name: &str) -> Result<Option<Dataset>> {
        let (all, _) = self.sess.ds.list()?;
        Ok(all
            .into_iter()
            .rev()
            .find(|d| d.name == name && self.sess.owns(d)))
    }

    fn agreed_by_name(&self, name: &str) -> Result<u64> {
        let mine = if self.sess.rank == 0 {
            self.by_name(name).ok().flatten().map(|d| d.id).unwrap_or(0)
        } else {
            0
        };
        let id = mpi::max(mine as i64)? as u64;
        if id == 0 {
            return Err(CompatError::NotFound(format!("no dataset named {name}")));
        }
        Ok(id)
    }

    /// SCR_Current: restart from `name` (newer datasets are no longer offered).
    pub fn current(&mut self, name: &str) -> Result<()> {
        let id = self.agreed_by_name(name)?;
        self.below = Some(id + 1);
        Ok(())
    }

    /// SCR_Drop: no longer offer `name` for restart (its files stay).
    pub fn drop_name(&mut self, name: &str) -> Result<()> {
        let id = self.agreed_by_name(name)?;
        self.dropped.insert(id);
        Ok(())
    }

    /// SCR_Delete: delete `name`'s record and files (rank 0, after every rank is here).
    pub fn delete(&mut self, name: &str) -> Result<()> {
        let id = self.agreed_by_name(name)?;
        mpi::barrier()?;
        let r = if self.sess.rank == 0 {
            self.sess.ds.delete(id).map_err(CompatError::from)
        } else {
            Ok(())
        };
        let ok = mpi::all(r.is_ok())?;
        r?;
        if !ok {
            return Err(CompatError::Collective(
                "rank 0 could not delete the dataset".into(),
            ));
        }
        Ok(())
    }
}

/// Copy output files to their path under the prefix (temporary name, fsync, rename).
fn publish(prefix: &Path, files: &[(String, PathBuf)]) -> Result<()> {
    for (rel, staged) in files {
        if !staged.exists() {
            continue;
        }
        let to = prefix.join(rel);
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p).map_err(|e| CompatError::io(format!("create {}", p.display()), e))?;
        }
        let tmp = to.with_file_name(format!(
            ".{}.ckptfs-tmp.{}",
            to.file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        std::fs::copy(staged, &tmp).map_err(|e| CompatError::io(format!("copy to {}", tmp.display()), e))?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| CompatError::io(format!("fsync {}", tmp.display()), e))?;
        std::fs::rename(&tmp, &to).map_err(|e| CompatError::io(format!("rename to {}", to.display()), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_names_must_lie_under_the_prefix() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(relative_to_prefix(&cwd, "ckpt/a.dat").unwrap(), "ckpt/a.dat");
        assert_eq!(relative_to_prefix(&cwd, "./x/../b").unwrap(), "b");
        let abs = cwd.join("d/e").to_string_lossy().into_owned();
        assert_eq!(relative_to_prefix(&cwd, &abs).unwrap(), "d/e");
        for bad in ["../out", "/etc/passwd", "", ".", "a/../.."] {
            assert!(relative_to_prefix(&cwd, bad).is_err(), "{bad:?}");
        }
        let long = "n".repeat(MAX_FILENAME);
        assert!(matches!(
            relative_to_prefix(&cwd, &long),
            Err(CompatError::TooLong(_))
        ));
        // A look-alike of the prefix is outside it.
        let sib = format!("{}2/f", cwd.display());
        assert!(relative_to_prefix(&cwd, &sib).is_err());
    }
}
