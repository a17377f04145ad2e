//! Drain a node store to the object level and restore from it, file by file through
//! the generic [`ckptfs_level::copy`] (the store's reader into the object writer, and
//! back). `ckptfs agent --dest s3://...` and `ckptfs restore --dest s3://...` call these.
//!
//! A drain: (1) one listing checks endpoint, credentials and bucket before anything
//! moves; (2) the uploads an earlier, interrupted drain of this node left are aborted
//! ([`ObjectLevel::recover_uploads`]); (3) every complete store file whose content the
//! bucket does not hold yet is copied; (4) one manifest naming them is written last.
//! A crash before (4) leaves data objects no manifest names: invisible, and replaced by
//! the next drain, which sends those files again.

use crate::{ObjectError, ObjectLevel};
use ckptfs_level::{copy, Level, LevelError};
use ckptfs_store::level::StoreLevel;
use ckptfs_store::Store;
use serde::Serialize;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The store's own records (levels record, dataset state): not checkpoint data.
fn internal(path: &str) -> bool {
    path == "/.ckptfs" || path.starts_with("/.ckptfs/")
}

/// A file that failed.
#[derive(Debug, Clone, Serialize)]
pub struct Failed {
    /// Store path.
    pub path: String,
    /// Why (no credentials in it).
    pub error: String,
}

/// What one drain did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DrainReport {
    /// The level (`s3:bucket/prefix`).
    pub level: String,
    /// Endpoint URL.
    pub endpoint: String,
    /// Files copied.
    pub drained_files: u64,
    /// Their bytes (uncompressed).
    pub drained_bytes: u64,
    /// Object bytes written (compressed size when compressed).
    pub object_bytes: u64,
    /// Files the bucket already held with the same content.
    pub already_drained: u64,
    /// Files the selection ([`DrainOptions::select`], the dataset flush policy) left
    /// in the store for now.
    pub left: u64,
    /// Unfinished uploads of earlier drains aborted at the start.
    pub aborted_uploads: usize,
    /// The manifest written (None when nothing was drained).
    pub manifest: Option<String>,
    /// Files that failed.
    pub failed: Vec<Failed>,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Which complete store files a drain takes now (true: drain it). The dataset flush
/// policy (`ckptfs_datasets::FlushPolicy`) answers through this in `ckptfs agent`.
pub type Select = std::sync::Arc<dyn Fn(&ckptfs_level::Stored) -> bool + Send + Sync>;

/// Options of a drain.
#[derive(Clone, Default)]
pub struct DrainOptions {
    /// Bandwidth cap in bytes per second (checked between files).
    pub max_bw: Option<f64>,
    /// Free the store's copy after the manifest naming it is written.
    pub evict: bool,
    /// Only files under this store path (default `/`).
    pub prefix: Option<String>,
    /// Only the files this accepts (None: every complete file); the others are left in
    /// the store and asked about again at the next drain.
    pub select: Option<Select>,
}

impl std::fmt::Debug for DrainOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrainOptions")
            .field("max_bw", &self.max_bw)
            .field("evict", &self.evict)
            .field("prefix", &self.prefix)
            .field("select", &self.select.as_ref().map(|_| "..."))
            .finish()
    }
}

/// Drain `store`'s complete files to `obj` (see the module documentation).
pub fn drain_once(store: &Store, obj: &ObjectLevel, opt: &DrainOptions) -> Result<DrainReport, ObjectError> {
    let t0 = Instant::now();
    obj.check()?;
    let mut rep = DrainReport {
        level: obj.name(),
        endpoint: obj.config().endpoint_display(),
        aborted_uploads: obj.recover_uploads()?,
        ..Default::default()
    };
    let local =
        StoreLevel::new(store).map_err(|e| ObjectError::Config(format!("the store as a level: {e}")))?;
    let prefix = opt.prefix.as_deref().unwrap_or("/");
    let held: HashMap<String, ckptfs_level::Stored> = obj
        .list(prefix)
        .map_err(level_err)?
        .into_iter()
        .map(|s| (s.path.clone(), s))
        .collect();
    let files = local
        .list(prefix)
        .map_err(|e| ObjectError::Config(format!("list the store: {e}")))?;
    let mut done = Vec::new();
    obj.begin_set();
    for f in files.iter().filter(|f| !internal(&f.path)) {
        if opt.select.as_ref().is_some_and(|sel| !sel(f)) {
            rep.left += 1;
            continue;
        }
        if held
            .get(&f.path)
            .is_some_and(|h| h.version.same_content(&f.version))
        {
            rep.already_drained += 1;
            continue;
        }
        match copy(&local, obj, &f.path) {
            Ok(t) => {
                rep.drained_files += 1;
                rep.drained_bytes += t.bytes;
                done.push(f.clone());
            }
            Err(e) => {
                // An unusable endpoint fails every file the same way: stop at the first.
                let fatal = e.errno() == libc::EACCES || is_no_bucket(&e);
                rep.failed.push(Failed {
                    path: f.path.clone(),
                    error: e.to_string(),
                });
                if fatal {
                    obj.abandon_set();
                    return Err(level_to_obj(e));
                }
            }
        }
        if let Some(bw) = opt.max_bw.filter(|b| *b > 0.0) {
            let due = Duration::from_secs_f64(rep.drained_bytes as f64 / bw);
            if let Some(wait) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    rep.manifest = obj.publish_set()?;
    for f in &done {
        if let Some(e) = obj.cached_entry(&f.path) {
            rep.object_bytes += e.object_size;
        }
    }
    if opt.evict {
        for f in &done {
            // Only the version that was drained; a rewrite since keeps its memory copy.
            let _ = local.delete(&f.path, &f.version);
        }
    }
    rep.seconds = t0.elapsed().as_secs_f64();
    Ok(rep)
}

fn is_no_bucket(e: &LevelError) -> bool {
    let mut s: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = s {
        if let Some(ObjectError::NoBucket { .. }) = x.downcast_ref::<ObjectError>() {
            return true;
        }
        s = x.source();
    }
    false
}

fn level_err(e: LevelError) -> ObjectError {
    level_to_obj(e)
}

/// The object error inside a level error, or the level error as text.
fn level_to_obj(e: LevelError) -> ObjectError {
    match e {
        LevelError::Backend { source, .. } => match source.downcast::<ObjectError>() {
            Ok(o) => *o,
            Err(other) => ObjectError::Config(other.to_string()),
        },
        other => ObjectError::Config(other.to_string()),
    }
}

/// What one restore did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RestoreReport {
    /// The level (`s3:bucket/prefix`).
    pub level: String,
    /// Files brought back (checksums verified).
    pub restored_files: u64,
    /// Their bytes.
    pub restored_bytes: u64,
    /// Files the store already held with the same content.
    pub already_present: u64,
    /// Files that failed (corrupt, missing, unreachable).
    pub failed: Vec<Failed>,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Bring the files under `prefix` back from `obj` into `store`, every chunk checked
/// against the manifest's CRC32C (a corrupt object fails its file; nothing of it is
/// published in the store).
pub fn restore(store: &Store, obj: &ObjectLevel, prefix: &str) -> Result<RestoreReport, ObjectError> {
    let t0 = Instant::now();
    let local =
        StoreLevel::new(store).map_err(|e| ObjectError::Config(format!("the store as a level: {e}")))?;
    let mut rep = RestoreReport {
        level: obj.name(),
        ..Default::default()
    };
    for f in obj.list(prefix).map_err(level_err)? {
        if let Ok(Some(have)) = local.stat(&f.path) {
            if have.version.same_content(&f.version) {
                rep.already_present += 1;
                continue;
            }
        }
        match copy(obj, &local, &f.path) {
            Ok(t) => {
                rep.restored_files += 1;
                rep.restored_bytes += t.bytes;
            }
            Err(e) => rep.failed.push(Failed {
                path: f.path.clone(),
                error: e.to_string(),
            }),
        }
    }
    rep.seconds = t0.elapsed().as_secs_f64();
    Ok(rep)
}
