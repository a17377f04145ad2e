//! The id floor: "ids never go back", also after every node of the job lost its memory
//! (docs/datasets.md, "Ids", failure case D10).
//!
//! A node's floor of a job is the next id it would give: the larger of its `next_id`
//! file and one past every id of its records and of the verdicts it was told. The floor
//! is kept in three places, so that it survives the loss of every store:
//!
//! - each node's store (`next_id`), raised whenever the node learns a larger one;
//! - every other node's store: a `begin` tells every node the new floor
//!   ([`crate::JobNodes::raise_floor`]), and each node daemon asks its peers for their
//!   floors when it starts and every few seconds after (so a replacement knows the
//!   floor before the nodes it learned it from can be lost);
//! - with a PFS destination: one small file per node and job in the destination's top
//!   directory, `.ckptfs-ids.JOB.NODE` (the decimal floor), read by every `begin`.

use crate::error::{DatasetError, Result};
use crate::record::{self, job_dir, SYSTEM_DIR};
use ckptfs_store::{FileKind, Store, StoreError};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest floor accepted from a peer or a file (far beyond any job, far from overflow).
pub const MAX_FLOOR: u64 = 1 << 53;

/// At most this many jobs in one peer's answer.
pub const MAX_JOBS: usize = 256;

fn next_id_path(job: &str) -> String {
    format!("{}/next_id", job_dir(job))
}

/// The `next_id` file of `job` in `store` (1 when there is none).
pub(crate) fn stored_next_id(store: &Store, job: &str) -> Result<u64> {
    match record::read_file(store, &next_id_path(job)) {
        Ok(b) => Ok(String::from_utf8_lossy(&b)
            .trim()
            .parse::<u64>()
            .unwrap_or(1)
            .min(MAX_FLOOR)),
        Err(DatasetError::Store(StoreError::NotFound(_))) => Ok(1),
        Err(e) => Err(e),
    }
}

/// This node's floor of `job`: the next id it would give.
pub fn floor(store: &Store, job: &str) -> u64 {
    let stored = stored_next_id(store, job).unwrap_or(1);
    let recs = record::load_all(store, job)
        .map(|(a, _)| a.iter().map(|d| d.id.saturating_add(1)).max().unwrap_or(1))
        .unwrap_or(1);
    let verdicts = record::load_verdicts(store, job)
        .iter()
        .map(|d| d.id.saturating_add(1))
        .max()
        .unwrap_or(1);
    stored.max(recs).max(verdicts).min(MAX_FLOOR)
}

/// The floor of every job this node knows (records, verdicts or a `next_id` file).
pub fn floors(store: &Store) -> BTreeMap<String, u64> {
    let mut jobs = std::collections::BTreeSet::new();
    for dir in ["datasets", "verdicts"] {
        if let Ok(entries) = store.read_dir(&format!("{SYSTEM_DIR}/{dir}")) {
            jobs.extend(
                entries
                    .into_iter()
                    .filter(|e| e.kind == FileKind::Dir && crate::check_component("job", &e.name).is_ok())
                    .map(|e| e.name),
            );
        }
    }
    jobs.into_iter()
        .take(MAX_JOBS)
        .map(|j| {
            let f = floor(store, &j);
            (j, f)
        })
        .collect()
}

/// Raise `job`'s `next_id` in `store` to at least `next` (never lowers it), unless a
/// `begin` holds the store's dataset lock now (then nothing is done: the daemons
/// exchange floors again within seconds, and that `begin` asks every node's floor
/// itself). Returns whether it changed.
pub fn raise(store: &Store, job: &str, next: u64) -> Result<bool> {
    crate::check_component("job", job)?;
    if next > MAX_FLOOR {
        return Err(DatasetError::Invalid(format!("id floor {next} is out of range")));
    }
    let Some(_l) = crate::handle::try_lock_store(store.name())? else {
        return Ok(false);
    };
    raise_locked(store, job, next)
}

/// [`raise`] with the dataset lock held by the caller.
pub(crate) fn raise_locked(store: &Store, job: &str, next: u64) -> Result<bool> {
    if stored_next_id(store, job)? >= next {
        return Ok(false);
    }
    record::mkdir_p(store, &job_dir(job))?;
    record::write_atomic(store, &next_id_path(job), format!("{next}\n").as_bytes())?;
    Ok(true)
}

fn pfs_prefix(job: &str) -> String {
    format!(".ckptfs-ids.{job}.")
}

/// The largest floor of `job` recorded in the PFS destinations (0: none). Only regular
/// files owned by the caller count (a file another user planted in a shared directory
/// is ignored); at most 64 bytes of each are read.
pub fn pfs_floor(dests: &[PathBuf], job: &str) -> u64 {
    let prefix = pfs_prefix(job);
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut best = 0;
    for d in dests {
        let Ok(entries) = std::fs::read_dir(d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with(&prefix) || name.contains(".tmp.") {
                continue;
            }
            if let Some(v) = read_small(&d.join(name), me) {
                best = best.max(v.min(MAX_FLOOR));
            }
        }
    }
    best
}

fn read_small(path: &Path, uid: u32) -> Option<u64> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let m = f.metadata().ok()?;
    if !m.file_type().is_file() || m.uid() != uid {
        return None;
    }
    let mut s = String::new();
    f.take(64).read_to_string(&mut s).ok()?;
    s.trim().parse().ok()
}

/// Record `next` as node `node`'s floor of `job` in every PFS destination (temporary
/// name, then rename; best effort: a destination that cannot be written is skipped
/// with a warning).
pub fn pfs_record(dests: &[PathBuf], job: &str, node: &str, next: u64) {
    if crate::check_component("node", node).is_err() {
        return;
    }
    for d in dests {
        let name = format!("{}{node}", pfs_prefix(job));
        let tmp = d.join(format!("{name}.tmp.{}", std::process::id()));
        let r = (|| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)?;
            f.write_all(format!("{next}\n").as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, d.join(&name))
        })();
        if let Err(e) = r {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(
                "could not record the id floor of job {job} in {}: {e}",
                d.display()
            );
        }
    }
}
