//! The agent as the mover between levels: a [`MovePolicy`] decides which complete
//! files go from which level to which, and the mover copies them through the levels'
//! common interface ([`ckptfs_level::Level`]).
//!
//! - store -> PFS is the drain ([`crate::Agent`]): it schedules (scan, stage, staged
//!   marshaling, publish, status, back-off) and its bytes go through a
//!   [`ckptfs_level::Mover`] configured from its settings (writers, write size, rate
//!   limit, priority, progress: [`crate::engine`]); [`DrainPolicy`] (`--every`,
//!   `--evict`) is its policy.
//! - PFS -> store is restore ([`crate::restore()`]): the PFS level's reader into the
//!   store level's writer.
//! - [`fill`] is the generic mover for any pair of levels: every copy of `from` under a
//!   prefix that the policy routes to `to` and that `to` does not hold with the same
//!   content is copied chunk by chunk ([`ckptfs_level::copy`]). Further levels (partner
//!   memory, erasure sets, the pool, object storage) plug in here as implementations of
//!   `Level` (docs/design.md, "Levels, and where the next ones plug in").

use ckptfs_level::{copy, Level, LevelError, LevelKind, Stored};
use serde::Serialize;

/// A complete file on a level, as a policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Store path.
    pub path: &'a str,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: u64,
    /// Ordinal of its checkpoint directory: parents of files are numbered 1, 2, ... in
    /// creation order, kept across agent restarts (0 where unknown).
    pub dir_ordinal: u64,
}

/// Decides what moves where.
pub trait MovePolicy: Send + Sync + std::fmt::Debug {
    /// Called once before each pass over the candidates (the drain's scan, [`fill`]):
    /// a policy that depends on state outside the files (e.g. the dataset records of
    /// `ckptfs_datasets::FlushPolicy`) takes its snapshot here.
    fn refresh(&self) {}
    /// The level a complete file on `from` should be copied to now (None: leave it; it
    /// is asked again at the next pass).
    fn route(&self, from: LevelKind, c: &Candidate<'_>) -> Option<LevelKind>;
    /// Free the copy on `from` once its copy on `to` is published and verified?
    fn release_source(&self, from: LevelKind, to: LevelKind) -> bool;
}

/// The drain's policy: every `every`-th checkpoint directory goes from the store to
/// the PFS; with `evict`, the store copy is freed afterwards (if still that version).
#[derive(Debug, Clone, Copy)]
pub struct DrainPolicy {
    /// Drain every N-th checkpoint directory (1: all).
    pub every: u32,
    /// Free the memory copy after a verified drain.
    pub evict: bool,
}

impl MovePolicy for DrainPolicy {
    fn route(&self, from: LevelKind, c: &Candidate<'_>) -> Option<LevelKind> {
        (from == LevelKind::Local && c.dir_ordinal.is_multiple_of(self.every as u64))
            .then_some(LevelKind::Pfs)
    }

    fn release_source(&self, from: LevelKind, to: LevelKind) -> bool {
        self.evict && from == LevelKind::Local && to == LevelKind::Pfs
    }
}

/// What [`fill`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FillReport {
    /// Files copied.
    pub copied: Vec<String>,
    /// Files `to` already held with the same content.
    pub present: Vec<String>,
    /// Files the policy left where they are.
    pub skipped: Vec<String>,
    /// Files released on `from` after their copy.
    pub released: Vec<String>,
    /// Files that failed: path, message, errno.
    pub failed: Vec<(String, String, i32)>,
}

/// Move the copies under `prefix` from level `from` to level `to` as `policy` says
/// (`None`: copy everything `to` lacks). A copy `to` already holds with the same
/// content is left alone; a failed file does not stop the others. `Err` only if `from`
/// cannot be listed.
pub fn fill(
    from: &dyn Level,
    to: &dyn Level,
    prefix: &str,
    policy: Option<&dyn MovePolicy>,
) -> Result<FillReport, LevelError> {
    let mut rep = FillReport::default();
    if let Some(p) = policy {
        p.refresh();
    }
    let ordinals = dir_ordinals(&from.list(prefix)?);
    for (s, ord) in ordinals {
        let c = Candidate {
            path: &s.path,
            size: s.version.size,
            mtime_ns: s.version.mtime_ns,
            dir_ordinal: ord,
        };
        if let Some(p) = policy {
            if p.route(from.kind(), &c) != Some(to.kind()) {
                rep.skipped.push(s.path.clone());
                continue;
            }
        }
        match to.stat(&s.path) {
            Ok(Some(d)) if d.version.same_content(&s.version) => {
                rep.present.push(s.path.clone());
                continue;
            }
            Ok(_) => {}
            Err(e) => {
                rep.failed.push((s.path.clone(), e.to_string(), e.errno()));
                continue;
            }
        }
        match copy(from, to, &s.path) {
            Ok(t) => {
                rep.copied.push(s.path.clone());
                let release = policy.is_some_and(|p| p.release_source(from.kind(), to.kind()));
                if release && t.stored.version.same_content(&s.version) {
                    match from.delete(&s.path, &s.version) {
                        Ok(true) => rep.released.push(s.path.clone()),
                        Ok(false) => {}
                        Err(e) => rep.failed.push((s.path.clone(), e.to_string(), e.errno())),
                    }
                }
            }
            Err(e) => rep.failed.push((s.path.clone(), e.to_string(), e.errno())),
        }
    }
    Ok(rep)
}

/// Number the parent directories of `files` 1, 2, ... in order of their oldest file
/// (a level's listing has no directory creation times), oldest file first.
fn dir_ordinals(files: &[Stored]) -> Vec<(Stored, u64)> {
    let mut files = files.to_vec();
    files.sort_by(|a, b| (a.version.mtime_ns, &a.path).cmp(&(b.version.mtime_ns, &b.path)));
    let mut ords: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    files
        .into_iter()
        .map(|s| {
            let dir = s
                .path
                .rsplit_once('/')
                .map(|d| d.0.to_string())
                .unwrap_or_default();
            let n = ords.len() as u64 + 1;
            let ord = *ords.entry(dir).or_insert(n);
            (s, ord)
        })
        .collect()
}
