//! Checkpoints saved without a dataset record: the `unrecorded` dataset question.
//!
//! A DCP save made without the ckptfs Writer (torch's fsspec writer through a
//! `ckptfs://` checkpoint id, `Writer(dataset=False)`, a FUSE or shim path) leaves a
//! checkpoint directory whose `.metadata` no dataset record lists. A restart takes the
//! newest *recorded* checkpoint, so it must say that a newer unrecorded one exists
//! (issue 37, item 3). In a job across nodes the `.metadata` is only in the
//! coordinator's node store, so every rank asks every node ([`scan`] answers for one
//! store; the daemons answer `unrecorded {job, root}`,
//! [`crate::cluster::ClusterNodes::unrecorded`] asks them all).
//!
//! A directory is reported when its `.metadata` is closed complete, every file directly
//! in it is closed complete (not a save still being written or left by a dead writer),
//! and no dataset record of the job on this node lists that `.metadata` (same size and
//! mtime). Only reads; at most [`MAX_UNRECORDED`] directories (the newest) an answer.

use ckptfs_store::{FileKind, Store, WriteState};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Most directories one answer lists (the newest by `.metadata` time).
pub const MAX_UNRECORDED: usize = 64;

/// The file whose presence makes a directory a DCP checkpoint.
pub const METADATA: &str = ".metadata";

/// One checkpoint directory without a dataset record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unrecorded {
    /// The directory (store path).
    pub path: String,
    /// Its `.metadata`'s modification time (ns, the store's clock).
    pub metadata_mtime_ns: u64,
    /// Files directly in the directory.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Whether `path` is `root` or below it.
fn under(path: &str, root: &str) -> bool {
    let r = root.trim_end_matches('/');
    r.is_empty() || path == r || path.strip_prefix(r).is_some_and(|rest| rest.starts_with('/'))
}

/// The checkpoint directories under `root` in `store` that no dataset record of `job`
/// lists (see the module documentation), newest first.
pub fn scan(store: &Store, job: &str, root: &str) -> Result<Vec<Unrecorded>, String> {
    ckptfs_datasets::check_component("job", job).map_err(|e| e.to_string())?;
    let (records, _bad) = ckptfs_datasets::record::load_all(store, job).map_err(|e| e.to_string())?;
    let listed: BTreeSet<(&str, u64, u64)> = records
        .iter()
        .flat_map(|d| d.files.iter())
        .map(|(p, f)| (p.as_str(), f.size, f.mtime_ns))
        .collect();
    let all = store.list_all();
    // Directory -> (files, bytes, all complete), for the files directly in it.
    let mut dirs: BTreeMap<&str, (u64, u64, bool)> = BTreeMap::new();
    for (p, st) in &all {
        if st.kind != FileKind::File {
            continue;
        }
        let Some((dir, _)) = p.rsplit_once('/') else {
            continue;
        };
        let e = dirs.entry(dir).or_insert((0, 0, true));
        e.0 += 1;
        e.1 += st.size;
        e.2 &= st.state == WriteState::Complete;
    }
    let mut out: Vec<Unrecorded> = all
        .iter()
        .filter(|(_, st)| st.kind == FileKind::File && st.state == WriteState::Complete)
        .filter_map(|(p, st)| {
            let dir = p.strip_suffix(METADATA)?.strip_suffix('/')?;
            let dir = if dir.is_empty() { "/" } else { dir };
            if !under(dir, root) || listed.contains(&(p.as_str(), st.size, st.mtime_ns)) {
                return None;
            }
            let key = p.rsplit_once('/').map(|(d, _)| d).unwrap_or_default();
            let (files, bytes, complete) = dirs.get(key).copied().unwrap_or((0, 0, false));
            complete.then(|| Unrecorded {
                path: dir.to_string(),
                metadata_mtime_ns: st.mtime_ns,
                files,
                bytes,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.metadata_mtime_ns
            .cmp(&a.metadata_mtime_ns)
            .then(a.path.cmp(&b.path))
    });
    out.truncate(MAX_UNRECORDED);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckptfs_store::{OpenFlags, StoreOptions};

    fn put(s: &Store, path: &str, bytes: &[u8]) {
        let mut f = s.open(path, OpenFlags::CREATE, 0o644).unwrap();
        f.write_all(bytes).unwrap();
        f.close().unwrap();
    }

    #[test]
    fn a_checkpoint_without_a_record_is_reported_and_a_recorded_one_is_not() {
        let name = format!("tc3-unrec-{}", std::process::id());
        let mut o = StoreOptions::named(&name);
        o.mem_size = Some(8 << 20);
        o.chunk_size = Some(64 << 10);
        let s = Store::create(&o).unwrap();
        let cfg = ckptfs_datasets::Config::for_job("u");
        let ds = ckptfs_datasets::Datasets::single_node(s.clone(), cfg);
        s.mkdir("/c", 0o755).unwrap();
        s.mkdir("/c/step1", 0o755).unwrap();
        s.mkdir("/c/step2", 0o755).unwrap();
        s.mkdir("/c/step3", 0o755).unwrap();
        let id = ds.begin("/c/step1", None).unwrap();
        put(&s, "/c/step1/__0_0.distcp", b"shard1");
        put(&s, "/c/step1/.metadata", b"meta1");
        ds.complete(Some(id), true).unwrap();
        // step2: saved without a record; step3: a shard still being written.
        put(&s, "/c/step2/__0_0.distcp", b"shard2");
        put(&s, "/c/step2/.metadata", b"meta2");
        put(&s, "/c/step3/.metadata", b"meta3");
        let _open = s.open("/c/step3/__0_0.distcp", OpenFlags::CREATE, 0o644).unwrap();
        let got = scan(&s, "u", "/c").unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].path.as_str(), got[0].files, got[0].bytes),
            ("/c/step2", 2, 11)
        );
        assert!(scan(&s, "u", "/other").unwrap().is_empty());
        // Another job's records do not list step1: for that job it is unrecorded too.
        assert_eq!(scan(&s, "v", "/").unwrap().len(), 2);
        assert!(scan(&s, "../x", "/").is_err());
        drop(_open);
        drop(ds);
        drop(s);
        let _ = Store::destroy(&name);
    }
}
