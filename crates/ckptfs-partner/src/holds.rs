//! The dataset question `holds {owner, files}` answered for another node (failure case
//! 36 of docs/cluster.md): for each file (path, size, CRC32C), whether this node holds
//! exactly that content. Any authenticated node of the job may ask, so the answer is
//! confined to what the question legitimately needs:
//!
//! - `owner` is this node (a restart checking that this node's part of a dataset is
//!   whole in its own store): only files of this node's dataset records, with the size
//!   and CRC32C the record has; never another application file, never a path under
//!   `/.ckptfs` (other nodes' copies, internal records);
//! - `owner` is another node (the asker itself, or a third node whose part a restart
//!   checks): only that owner's partner copies, `/.ckptfs/partners/<owner>/<path>`.
//!
//! Anything else is answered "not held". The work is bounded: at most
//! [`MAX_HOLDS_FILES`] files a question (more is an error; [`ClusterNodes`] asks in
//! batches), each distinct path looked at once, and the CRC32C combined from the
//! store's chunk records (no pass over the data); only a file whose records cannot
//! give it is read, at most [`READ_BUDGET`] bytes a question (past it: not held). So a
//! question costs a stat and a chunk list per distinct file, and an asker that hangs
//! up leaves nothing long running behind.
//!
//! [`ClusterNodes`]: crate::cluster::ClusterNodes

use crate::copies;
use ckptfs_datasets::Want;
use ckptfs_store::level::crcs_from_chunks;
use ckptfs_store::{FileKind, OpenFlags, Store, WriteState};
use std::collections::{BTreeMap, BTreeSet};

/// Most files one `holds` question may name.
pub const MAX_HOLDS_FILES: usize = 4096;

/// Most bytes one question may read for files whose chunk records give no CRC32C.
pub const READ_BUDGET: u64 = 256 << 20;

/// Size and CRC32C of the complete regular file `path` of `store`: from its chunk
/// records, or (when a record is stale) by reading it, charged to `budget`.
fn content_of(store: &Store, path: &str, budget: &mut u64) -> Option<(u64, u32)> {
    let st = store.stat(path).ok()?;
    if st.kind != FileKind::File || st.state != WriteState::Complete {
        return None;
    }
    if let Ok(chunks) = store.chunk_list(path) {
        if let Some((crc, _)) = crcs_from_chunks(st.size, store.chunk_size(), &chunks) {
            return Some((st.size, crc));
        }
    }
    if st.size > *budget {
        return None;
    }
    let mut f = store.open(path, OpenFlags::READ, 0).ok()?;
    if f.stat().state != WriteState::Complete {
        return None;
    }
    let mut buf = vec![0u8; 1 << 20];
    let (mut n, mut crc) = (0u64, 0u32);
    loop {
        let got = f.read(&mut buf).ok()?;
        if got == 0 {
            return Some((n, crc));
        }
        *budget = budget.saturating_sub(got as u64);
        crc = ckptfs_store::checksum::crc32c_append(crc, &buf[..got]);
        n += got as u64;
        if n > st.size {
            return None;
        }
    }
}

/// Whether `store` (node `me`'s) holds a partner copy of `owner`'s file `w` with exactly
/// its content.
pub fn holds_copy(store: &Store, me: &str, owner: &str, w: &Want) -> bool {
    let mut budget = READ_BUDGET;
    answer(store, me, owner, std::slice::from_ref(w), &mut budget)
        .first()
        .copied()
        .unwrap_or(false)
}

/// The files of this node's dataset records (every job), with the size and CRC32C
/// each record has.
fn dataset_files(store: &Store, me: &str) -> BTreeSet<(String, u64, u32)> {
    let dir = format!("{}/datasets", ckptfs_datasets::record::SYSTEM_DIR);
    let mut out = BTreeSet::new();
    let Ok(jobs) = store.read_dir(&dir) else {
        return out;
    };
    for j in jobs.iter().filter(|e| e.kind == FileKind::Dir) {
        if ckptfs_datasets::check_component("job", &j.name).is_err() {
            continue;
        }
        let Ok((all, _)) = ckptfs_datasets::record::load_all(store, &j.name) else {
            continue;
        };
        for d in all {
            let mine = d.nodes.get(me).map(|p| &p.files);
            for (p, f) in d.files.iter().chain(mine.into_iter().flatten()) {
                out.insert((p.clone(), f.size, f.crc32c));
            }
        }
    }
    out
}

/// The flags of a `holds` question about `owner`'s `files`, asked of node `me` (the
/// caller checked the count): see the module's rules.
pub fn answer(store: &Store, me: &str, owner: &str, files: &[Want], budget: &mut u64) -> Vec<bool> {
    if copies::check_node_id(owner).is_err() {
        return vec![false; files.len()];
    }
    let records = (owner == me).then(|| dataset_files(store, me));
    // Each distinct store path looked at once.
    let mut seen: BTreeMap<String, Option<(u64, u32)>> = BTreeMap::new();
    files
        .iter()
        .map(|w| {
            // Never a path under /.ckptfs, never one that leaves the namespace.
            let Ok(path) = copies::check_rel_path(&w.path) else {
                return false;
            };
            let at = match &records {
                Some(r) => {
                    if !r.contains(&(path.clone(), w.size, w.crc32c)) {
                        return false;
                    }
                    path
                }
                None => copies::copy_path(owner, &path),
            };
            let got = match seen.get(&at) {
                Some(g) => *g,
                None => {
                    let g = content_of(store, &at, budget);
                    seen.insert(at, g);
                    g
                }
            };
            got == Some((w.size, w.crc32c))
        })
        .collect()
}
