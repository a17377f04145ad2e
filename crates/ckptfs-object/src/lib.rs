//! # ckptfs-object: S3-compatible object storage as the persistent level
//!
//! [`ObjectLevel`] implements [`ckptfs_level::Level`] on the `object_store` crate's
//! S3 client (`s3://bucket/prefix`; endpoint and credentials as the AWS tools read them,
//! see [`config`]). Bytes reach it and leave it through the generic
//! [`ckptfs_level::copy`] like every other level's.
//!
//! ## Layout (docs/object.md)
//! - `PREFIX/data/<store path>`: one object per file, its bytes (or, compressed, zstd
//!   frames of `group` bytes each, back to back). Files larger than one part go up as a
//!   multipart upload of `part_size` parts, several in flight, each carrying an
//!   `x-amz-checksum-sha256` the service checks on receipt.
//! - `PREFIX/manifests/<ns>-<node>-<pid>-<seq>.json`: a drained set of files with
//!   sizes, chunk CRC32Cs, whole-file CRC32C, ETag and compression ([`manifest`]),
//!   written after every object it names is complete. The level lists only what
//!   manifests name, so a listing never shows a half-uploaded checkpoint.
//! - `PREFIX/uploads/<node>/<ns>-<pid>-<seq>.json`: the journal of multipart uploads in
//!   progress (key and upload id), written before the first part and removed after
//!   completion or abort. [`ObjectLevel::recover_uploads`], run when a drain starts,
//!   aborts the uploads a crashed drain left, so no orphaned parts stay behind.
//!
//! ## Reading
//! A reader fetches ranges of `part_size` (or one compressed frame) several at a time
//! ahead of the chunk asked for, decompresses, and checks every chunk against the
//! manifest's CRC32C before handing it out; `finish` checks the object's ETag is still
//! the manifest's. A corrupted object is detected, never served.
//!
//! ## Threads
//! The [`Level`] trait is synchronous: the level owns a small tokio runtime and blocks
//! on it. Calling it from inside another async runtime is refused
//! ([`ObjectError::InRuntime`]) instead of panicking.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod config;
pub mod drain;
pub mod error;
pub mod factory;
pub mod manifest;
mod reader;
mod writer;

pub use config::{Compression, ObjectConfig, Secret};
pub use error::ObjectError;
pub use manifest::{Entry, Manifest};

use bytes::Bytes;
use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, Level, LevelError, LevelId, LevelKind, Stored, Version,
};
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, PutPayload, RetryConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One multipart upload in progress, as journaled under `uploads/`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Journal {
    key: String,
    upload_id: String,
}

#[derive(Default)]
struct Index {
    /// Manifest keys already applied.
    loaded: HashSet<String>,
    /// Path -> (manifest key it came from, entry). Deleted entries stay as tombstones so
    /// that manifests read out of order resolve the same way.
    files: BTreeMap<String, (String, Entry)>,
    /// Manifests that failed their checks (skipped, reported).
    bad: Vec<String>,
}

impl Index {
    fn apply(&mut self, mkey: &str, e: Entry) {
        match self.files.get(&e.path) {
            Some((k, _)) if k.as_str() > mkey => {}
            _ => {
                self.files.insert(e.path.clone(), (mkey.to_string(), e));
            }
        }
    }
}

/// S3-compatible object storage as a level (see the crate documentation).
pub struct ObjectLevel {
    cfg: ObjectConfig,
    rt: tokio::runtime::Runtime,
    s3: Arc<AmazonS3>,
    index: Mutex<Index>,
    /// Entries committed while a set is open ([`ObjectLevel::begin_set`]).
    set: Mutex<Option<Vec<Entry>>>,
    seq: AtomicU64,
    /// When the manifests were last listed (stat/holds list again only after
    /// [`STAT_TTL`]; `list` always does).
    listed: Mutex<Option<std::time::Instant>>,
    meter: CostMeter,
}

/// How long a listing of the manifests answers `stat` and `holds` (a registry asks
/// every level about every file: one LIST per file would dominate).
pub const STAT_TTL: Duration = Duration::from_millis(500);

impl std::fmt::Debug for ObjectLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectLevel").field("cfg", &self.cfg).finish()
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn under(path: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || path == p || path.starts_with(&format!("{p}/"))
}

/// The [`Stored`] a manifest entry describes.
fn stored_of(e: &Entry) -> Stored {
    Stored {
        path: e.path.clone(),
        version: Version {
            ino: 0,
            generation: 0,
            size: e.size,
            mtime_ns: e.mtime_ns,
            crc32c: Some(e.crc32c),
            serial: 0,
        },
        mode: e.mode,
        chunk_size: e.chunk_size,
        chunk_crc32c: e.chunk_crc32c.clone(),
    }
}

impl ObjectLevel {
    /// Open the level `cfg` describes. No request is made yet; [`ObjectLevel::check`]
    /// makes one.
    pub fn new(cfg: ObjectConfig) -> Result<ObjectLevel, ObjectError> {
        cfg.check()?;
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(ObjectError::InRuntime);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ckptfs-s3")
            .enable_all()
            .build()
            .map_err(ObjectError::Runtime)?;
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: cfg.retry_backoff,
                max_backoff: Duration::from_secs(15),
                base: 2.0,
            },
            max_retries: cfg.max_retries,
            retry_timeout: cfg.retry_timeout,
        };
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&cfg.bucket)
            .with_region(&cfg.region)
            .with_retry(retry)
            .with_checksum_algorithm(object_store::aws::Checksum::SHA256)
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(Duration::from_secs(5))
                    .with_timeout(Duration::from_secs(120)),
            );
        if let Some(k) = &cfg.access_key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(s) = &cfg.secret_access_key {
            b = b.with_secret_access_key(s.expose());
        }
        if let Some(t) = &cfg.session_token {
            b = b.with_token(t.expose());
        }
        if let Some(ep) = &cfg.endpoint {
            b = b
                .with_endpoint(ep)
                .with_allow_http(ep.starts_with("http://"))
                .with_virtual_hosted_style_request(false);
        }
        let s3 = b
            .build()
            .map_err(|e| ObjectError::Config(format!("{}: {e}", cfg.name())))?;
        Ok(ObjectLevel {
            cfg,
            rt,
            s3: Arc::new(s3),
            index: Mutex::new(Index::default()),
            set: Mutex::new(None),
            seq: AtomicU64::new(0),
            listed: Mutex::new(None),
            meter: CostMeter::new(),
        })
    }

    /// The level's settings.
    pub fn config(&self) -> &ObjectConfig {
        &self.cfg
    }

    fn cx(&self) -> error::Ctx<'_> {
        error::Ctx {
            endpoint: self.cfg.endpoint.as_deref().unwrap_or("(AWS)"),
            bucket: &self.cfg.bucket,
            secret: self.cfg.secret_access_key.as_ref().map(|s| s.expose()),
            from: &self.cfg.credentials_from,
            retries: self.cfg.max_retries,
        }
    }

    pub(crate) fn err(&self, op: &'static str, key: &Path, e: object_store::Error) -> ObjectError {
        ObjectError::request(&self.cx(), op, key.as_ref(), e)
    }

    /// Run `f` to completion on the level's runtime (refused inside another runtime).
    pub(crate) fn block<F: Future>(&self, f: F) -> Result<F::Output, ObjectError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(ObjectError::InRuntime);
        }
        Ok(self.rt.block_on(f))
    }

    pub(crate) fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt.spawn(f)
    }

    pub(crate) fn store(&self) -> Arc<AmazonS3> {
        self.s3.clone()
    }

    /// The object key of `rel` under the prefix.
    pub(crate) fn key(&self, rel: &str) -> Result<Path, ObjectError> {
        let full = if self.cfg.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.cfg.prefix)
        };
        Path::parse(&full).map_err(|e| ObjectError::Config(format!("object key {full:?}: {e}")))
    }

    /// The data object of store path `path`.
    pub fn data_key(&self, path: &str) -> Result<Path, ObjectError> {
        if !manifest::valid_path(path) {
            return Err(ObjectError::Config(format!("{path:?} is not a store path")));
        }
        self.key(&format!("data{path}"))
    }

    fn unique(&self) -> String {
        format!(
            "{:020}-{}-{}",
            now_ns(),
            std::process::id(),
            self.seq.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// One request to the bucket (a listing of the manifests): checks the endpoint, the
    /// credentials and that the bucket exists, before anything is moved.
    pub fn check(&self) -> Result<(), ObjectError> {
        self.refresh().map(|_| ())
    }

    /// [`ObjectLevel::refresh`] unless the last listing is younger than [`STAT_TTL`].
    fn refresh_if_stale(&self) -> Result<(), ObjectError> {
        let fresh = self
            .listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t.elapsed() < STAT_TTL);
        if fresh {
            return Ok(());
        }
        self.refresh()
    }

    /// Read the manifests not read yet.
    fn refresh(&self) -> Result<(), ObjectError> {
        let started = std::time::Instant::now();
        self.refresh_inner()?;
        *self.listed.lock().unwrap_or_else(|p| p.into_inner()) = Some(started);
        Ok(())
    }

    fn refresh_inner(&self) -> Result<(), ObjectError> {
        let mprefix = self.key("manifests")?;
        let s3 = self.store();
        let metas: Vec<object_store::ObjectMeta> = self
            .block(async { s3.list(Some(&mprefix)).try_collect().await })?
            .map_err(|e| self.err("list", &mprefix, e))?;
        let mut new: Vec<object_store::ObjectMeta> = {
            let ix = self.index.lock().unwrap_or_else(|p| p.into_inner());
            metas
                .into_iter()
                .filter(|m| {
                    m.location.as_ref().ends_with(".json") && !ix.loaded.contains(m.location.as_ref())
                })
                .collect()
        };
        if new.is_empty() {
            return Ok(());
        }
        new.sort_by(|a, b| a.location.cmp(&b.location));
        let got: Vec<(String, Result<Manifest, ObjectError>)> = self.block(async {
            futures::stream::iter(new.into_iter().map(|m| {
                let s3 = s3.clone();
                async move {
                    let key = m.location.to_string();
                    if m.size > manifest::MAX_MANIFEST {
                        return (
                            key.clone(),
                            Err(ObjectError::Manifest {
                                key,
                                reason: format!("{} bytes, larger than the limit", m.size),
                            }),
                        );
                    }
                    let r = match s3.get(&m.location).await {
                        Ok(g) => g.bytes().await,
                        Err(e) => Err(e),
                    };
                    (key.clone(), r.map_err(|e| self.err("get", &m.location, e)))
                        .map_res(|b| Manifest::parse(&key, &b))
                }
            }))
            .buffered(8)
            .collect()
            .await
        })?;
        let mut ix = self.index.lock().unwrap_or_else(|p| p.into_inner());
        for (key, m) in got {
            match m {
                Ok(m) => {
                    for e in m.files {
                        ix.apply(&key, e);
                    }
                    ix.loaded.insert(key);
                }
                // A manifest that vanished between list and get (deleted): skip.
                Err(ObjectError::Request { errno, .. }) if errno == libc::ENOENT => {}
                Err(e @ ObjectError::Manifest { .. }) => {
                    tracing::warn!("{e}: skipped");
                    ix.bad.push(e.to_string());
                    ix.loaded.insert(key);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Manifests skipped because they failed their checks (messages).
    pub fn bad_manifests(&self) -> Vec<String> {
        self.index.lock().unwrap_or_else(|p| p.into_inner()).bad.clone()
    }

    /// The entry of `path` as last read (no request): the open set, then the manifests
    /// read so far.
    pub fn cached_entry(&self, path: &str) -> Option<Entry> {
        self.lookup(path)
    }

    fn lookup(&self, path: &str) -> Option<Entry> {
        if let Some(set) = &*self.set.lock().unwrap_or_else(|p| p.into_inner()) {
            if let Some(e) = set.iter().rev().find(|e| e.path == path) {
                return (!e.deleted).then(|| e.clone());
            }
        }
        let ix = self.index.lock().unwrap_or_else(|p| p.into_inner());
        ix.files
            .get(path)
            .filter(|(_, e)| !e.deleted)
            .map(|(_, e)| e.clone())
    }

    /// The manifest entry of `path` (after reading new manifests).
    pub fn entry(&self, path: &str) -> Result<Option<Entry>, ObjectError> {
        self.refresh_if_stale()?;
        Ok(self.lookup(path))
    }

    /// Start collecting committed files into one set: their manifest is written by
    /// [`ObjectLevel::publish_set`]. Without an open set every commit writes a manifest
    /// of its own.
    pub fn begin_set(&self) {
        let mut s = self.set.lock().unwrap_or_else(|p| p.into_inner());
        if s.is_none() {
            *s = Some(Vec::new());
        }
    }

    /// Write the manifest of the files committed since [`ObjectLevel::begin_set`]
    /// (last: their data objects are complete) and close the set. Returns the
    /// manifest's key, None if the set was empty.
    pub fn publish_set(&self) -> Result<Option<String>, ObjectError> {
        let files = self
            .set
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default();
        if files.is_empty() {
            return Ok(None);
        }
        self.write_manifest(files).map(Some)
    }

    /// Close the set without writing its manifest (its files stay invisible; the next
    /// drain sends them again).
    pub fn abandon_set(&self) {
        self.set.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn write_manifest(&self, files: Vec<Entry>) -> Result<String, ObjectError> {
        let m = Manifest {
            format: manifest::FORMAT.into(),
            version: manifest::VERSION,
            node: self.cfg.node.clone(),
            created_ns: now_ns(),
            files,
        };
        let key = self.key(&format!("manifests/{}-{}.json", self.unique(), self.cfg.node))?;
        let body =
            serde_json::to_vec_pretty(&m).map_err(|e| ObjectError::Config(format!("manifest: {e}")))?;
        let s3 = self.store();
        self.block(s3.put(&key, PutPayload::from(body)))?
            .map_err(|e| self.err("put", &key, e))?;
        let mut ix = self.index.lock().unwrap_or_else(|p| p.into_inner());
        for e in m.files {
            ix.apply(key.as_ref(), e);
        }
        ix.loaded.insert(key.to_string());
        Ok(key.to_string())
    }

    /// A committed file: into the open set, or its own manifest now.
    pub(crate) fn record(&self, e: Entry) -> Result<(), ObjectError> {
        {
            let mut s = self.set.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(set) = s.as_mut() {
                set.push(e);
                return Ok(());
            }
        }
        self.write_manifest(vec![e]).map(|_| ())
    }

    /// Journal a multipart upload before its first part.
    pub(crate) fn journal_add(&self, key: &Path, upload_id: &str) -> Result<Path, ObjectError> {
        let jkey = self.key(&format!("uploads/{}/{}.json", self.cfg.node, self.unique()))?;
        let body = serde_json::to_vec(&Journal {
            key: key.to_string(),
            upload_id: upload_id.to_string(),
        })
        .map_err(|e| ObjectError::Config(format!("journal: {e}")))?;
        let s3 = self.store();
        self.block(s3.put(&jkey, PutPayload::from(body)))?
            .map_err(|e| self.err("put", &jkey, e))?;
        Ok(jkey)
    }

    /// Remove a journal entry (its upload completed or was aborted).
    pub(crate) fn journal_remove(&self, jkey: &Path) -> Result<(), ObjectError> {
        let s3 = self.store();
        match self.block(s3.delete(jkey))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("delete", jkey, e)),
        }
    }

    /// Abort the multipart uploads this node's earlier drains left unfinished (a crash,
    /// a kill, a lost connection) and drop their journal entries: after this, none of
    /// their parts is kept by the service. Run when a drain starts; returns how many were
    /// aborted. Only this node's journal (`uploads/<node>/`) is read: drains of other
    /// nodes into the same prefix are left alone.
    pub fn recover_uploads(&self) -> Result<usize, ObjectError> {
        let jprefix = self.key(&format!("uploads/{}", self.cfg.node))?;
        let s3 = self.store();
        let metas: Vec<object_store::ObjectMeta> = self
            .block(async { s3.list(Some(&jprefix)).try_collect().await })?
            .map_err(|e| self.err("list", &jprefix, e))?;
        let mut n = 0;
        for m in metas {
            let body = match self.block(async { s3.get(&m.location).await?.bytes().await })? {
                Ok(b) => b,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(self.err("get", &m.location, e)),
            };
            if let Ok(j) = serde_json::from_slice::<Journal>(&body) {
                // Only keys under our own prefix: a journal entry is not trusted to
                // point elsewhere.
                let ours = self.key("data").map(|d| j.key.starts_with(&format!("{d}/")));
                if let (Ok(true), Ok(key)) = (ours, Path::parse(&j.key)) {
                    // Twice, a moment apart: a part that was still arriving when the first
                    // abort ran may survive it (S3's documented behaviour for parts in
                    // progress), not the second.
                    let (first, _) = self.block(async {
                        let first = s3.abort_multipart(&key, &j.upload_id).await;
                        tokio::time::sleep(Duration::from_millis(250)).await;
                        (first, s3.abort_multipart(&key, &j.upload_id).await)
                    })?;
                    match first {
                        Ok(()) => n += 1,
                        // Already completed or aborted (NoSuchUpload): nothing to do.
                        Err(e) => tracing::info!("abort of {} upload: {e}", j.key),
                    }
                }
            }
            self.journal_remove(&m.location)?;
        }
        Ok(n)
    }

    /// Bytes of a whole object (tests and tools).
    pub fn get_object(&self, key: &Path) -> Result<Bytes, ObjectError> {
        let s3 = self.store();
        self.block(async { s3.get(key).await?.bytes().await })?
            .map_err(|e| self.err("get", key, e))
    }

    /// Keys of the objects under `rel` (relative to the prefix).
    pub fn list_keys(&self, rel: &str) -> Result<Vec<String>, ObjectError> {
        let p = self.key(rel)?;
        let s3 = self.store();
        let metas: Vec<object_store::ObjectMeta> = self
            .block(async { s3.list(Some(&p)).try_collect().await })?
            .map_err(|e| self.err("list", &p, e))?;
        Ok(metas.into_iter().map(|m| m.location.to_string()).collect())
    }

    /// Part size used for a file of `size` bytes with chunks of `cs`: the setting,
    /// rounded up to whole chunks, raised so no file needs more than S3's 10,000 parts.
    pub(crate) fn part_size_for(&self, size: u64, cs: u64) -> u64 {
        let cs = cs.max(1);
        let min_for_count = size.div_ceil(config::MAX_PARTS);
        let p = self.cfg.part_size.max(min_for_count);
        p.div_ceil(cs) * cs
    }
}

trait MapRes<T> {
    fn map_res<U>(self, f: impl FnOnce(T) -> Result<U, ObjectError>) -> (String, Result<U, ObjectError>);
}

impl<T> MapRes<T> for (String, Result<T, ObjectError>) {
    fn map_res<U>(self, f: impl FnOnce(T) -> Result<U, ObjectError>) -> (String, Result<U, ObjectError>) {
        (self.0, self.1.and_then(f))
    }
}

impl Level for ObjectLevel {
    fn kind(&self) -> LevelKind {
        LevelKind::Object
    }

    fn name(&self) -> String {
        self.cfg.name()
    }

    /// `s3:bucket/prefix` (`s3:bucket` without a prefix).
    fn id(&self) -> LevelId {
        let inst = if self.cfg.prefix.is_empty() {
            self.cfg.bucket.clone()
        } else {
            format!("{}/{}", self.cfg.bucket, self.cfg.prefix)
        };
        LevelId::new("s3", inst)
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError> {
        self.refresh()?;
        let mut by: BTreeMap<String, Entry> = {
            let ix = self.index.lock().unwrap_or_else(|p| p.into_inner());
            ix.files
                .iter()
                .map(|(p, (_, e))| (p.clone(), e.clone()))
                .collect()
        };
        if let Some(set) = &*self.set.lock().unwrap_or_else(|p| p.into_inner()) {
            for e in set {
                by.insert(e.path.clone(), e.clone());
            }
        }
        Ok(by
            .values()
            .filter(|e| !e.deleted && under(&e.path, prefix))
            .map(stored_of)
            .collect())
    }

    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError> {
        Ok(self.entry(path)?.as_ref().map(stored_of))
    }

    fn get<'a>(&'a self, path: &str) -> Result<Box<dyn ChunkReader + 'a>, LevelError> {
        // The entry as last listed (a restore lists first: no LIST per file); a newer
        // object than that entry fails `finish`'s ETag check instead of mixing.
        let e = match self.lookup(path) {
            Some(e) => Some(e),
            None => self.entry(path)?,
        };
        let e = e.ok_or_else(|| LevelError::NotFound {
            level: self.name(),
            path: path.to_string(),
        })?;
        Ok(Box::new(reader::ObjectReader::new(self, e)?))
    }

    fn put<'a>(&'a self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'a>, LevelError> {
        Ok(Box::new(writer::ObjectWriter::new(self, src)?))
    }

    fn delete(&self, path: &str, want: &Version) -> Result<bool, LevelError> {
        let Some(e) = self.entry(path)? else {
            return Ok(false);
        };
        if !stored_of(&e).version.same_content(want) {
            return Ok(false);
        }
        // The tombstone first: from then on no listing names the file, and a reader
        // that already has the entry fails on the missing object instead of mixing.
        self.write_manifest(vec![Entry {
            path: path.to_string(),
            deleted: true,
            size: 0,
            mode: 0,
            mtime_ns: 0,
            chunk_size: 0,
            crc32c: 0,
            chunk_crc32c: Vec::new(),
            object_size: 0,
            e_tag: None,
            parts: 0,
            zstd: None,
        }])?;
        if let Some(set) = self.set.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            set.retain(|x| x.path != path);
        }
        let key = self.data_key(path)?;
        let s3 = self.store();
        match self.block(s3.delete(&key))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(self.err("delete", &key, e).into()),
        }
    }

    fn meter(&self) -> &CostMeter {
        &self.meter
    }

    fn holds(&self, files: &[(String, u32)]) -> Result<Vec<bool>, LevelError> {
        self.refresh_if_stale()?;
        Ok(files
            .iter()
            .map(|(p, crc)| self.lookup(p).is_some_and(|e| e.crc32c == *crc))
            .collect())
    }
}

/// `abort_multipart` through the trait object (used by the writer's drop).
pub(crate) async fn abort(s3: Arc<AmazonS3>, key: Path, id: String) -> object_store::Result<()> {
    s3.abort_multipart(&key, &id).await
}
