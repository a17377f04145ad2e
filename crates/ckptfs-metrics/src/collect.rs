//! The families every ckptfs process holding a store exports (docs/metrics.md).
//!
//! Each collector reads the state at scrape time (the store's header, its listing, the
//! levels record, the dataset records, the drain agent's status file): nothing is kept
//! between scrapes, so a daemon restarted on the same store exports the same gauges.
//! Counters that belong to a process (bytes drained since the agent started) reset when
//! that process restarts, as Prometheus counters may.

use crate::text::{Exposition, Kind};
use crate::Result;
use ckptfs_datasets::levels_record::LevelsView;
use ckptfs_datasets::record;
use ckptfs_datasets::State;
use ckptfs_store::{FileKind, Store, WriteState};
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the epoch now.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn age_s(now_ns: u64, then_ns: u64) -> f64 {
    now_ns.saturating_sub(then_ns) as f64 / 1e9
}

/// Store capacity and use per tier (memory, spill), files, incomplete files, huge pages.
pub fn store(e: &mut Exposition, store: &Store) -> Result<()> {
    let i = store.info();
    let cs = i.chunk_size as f64;
    e.family(
        "ckptfs_store_capacity_bytes",
        Kind::Gauge,
        "Bytes the node store can hold, per tier (memory: the shared-memory segment; spill: the SSD file).",
    )?
    .sample(&[("tier", "memory")], i.mem_chunks as f64 * cs)?
    .sample(&[("tier", "spill")], i.spill_chunks as f64 * cs)?;
    e.family(
        "ckptfs_store_used_bytes",
        Kind::Gauge,
        "Bytes of the node store in use (whole chunks), per tier.",
    )?
    .sample(
        &[("tier", "memory")],
        i.mem_chunks.saturating_sub(i.mem_free_chunks) as f64 * cs,
    )?
    .sample(
        &[("tier", "spill")],
        i.spill_chunks.saturating_sub(i.spill_free_chunks) as f64 * cs,
    )?;
    e.single(
        "ckptfs_store_files",
        Kind::Gauge,
        "Files in the node store (every namespace).",
        i.files as f64,
    )?;
    e.single(
        "ckptfs_store_incomplete_files",
        Kind::Gauge,
        "Files in the node store not closed complete (being written, or left by a dead writer).",
        i.incomplete as f64,
    )?;
    e.single(
        "ckptfs_store_huge_pages",
        Kind::Gauge,
        "1 when the store's segment lies on a huge-page tmpfs (shm_dir), else 0.",
        if i.huge_pages.enabled { 1.0 } else { 0.0 },
    )?;
    Ok(())
}

/// What [`levels`] found, for the node daemon's own families.
#[derive(Debug, Default, Clone)]
pub struct LevelsSummary {
    /// Complete files of this node with no verified partner copy and none refused, that
    /// the caller's filter wants copied: (size, mtime_ns) each.
    pub pending: Vec<(u64, u64)>,
}

/// This node's own files (the application namespace) per level holding them: `local`
/// (complete in the store), `partner` (a verified copy on at least one partner), `pfs`
/// (drained: the drain manifest lists this version). `wants_partner(path, size,
/// mtime_ns)` says whether a file should get a partner copy (the dataset policy); the
/// files it wants that have none yet are returned as pending.
pub fn levels(
    e: &mut Exposition,
    store: &Store,
    wants_partner: &dyn Fn(&str, u64, u64) -> bool,
) -> Result<LevelsSummary> {
    let view = LevelsView::load(store);
    let mut files = [0u64; 3];
    let mut bytes = [0u64; 3];
    let mut sum = LevelsSummary::default();
    for (path, st) in store.list_all() {
        if st.kind != FileKind::File || st.state != WriteState::Complete {
            continue;
        }
        let w = view.of(&path, &st);
        for (i, on) in [w.local, !w.partners.is_empty(), w.pfs].into_iter().enumerate() {
            if on {
                files[i] += 1;
                bytes[i] += st.size;
            }
        }
        if w.partners.is_empty() && w.refused.is_empty() && wants_partner(&path, st.size, st.mtime_ns) {
            sum.pending.push((st.size, st.mtime_ns));
        }
    }
    let names = ["local", "partner", "pfs"];
    let mut f = e.family(
        "ckptfs_level_files",
        Kind::Gauge,
        "This node's complete checkpoint files held on each level (local: node memory or spill; partner: a verified copy in a partner's memory; pfs: drained).",
    )?;
    for (i, l) in names.iter().enumerate() {
        f.sample(&[("level", l)], files[i] as f64)?;
    }
    let mut f = e.family(
        "ckptfs_level_bytes",
        Kind::Gauge,
        "Bytes of this node's complete checkpoint files held on each level.",
    )?;
    for (i, l) in names.iter().enumerate() {
        f.sample(&[("level", l)], bytes[i] as f64)?;
    }
    Ok(sum)
}

/// Protection of a dataset: 0 some file is on no level, 1 node memory only, 2 also a
/// partner's memory (survives the node's loss), 3 on the PFS (survives the job).
fn protection(store: &Store, view: &LevelsView, d: &ckptfs_datasets::Dataset) -> (f64, [bool; 3]) {
    let mut all = [true; 3];
    for (path, rec) in &d.files {
        let on = match store.stat(path) {
            Ok(st) if st.size == rec.size && st.mtime_ns == rec.mtime_ns => {
                let w = view.of(path, &st);
                [
                    w.local,
                    !w.partners.is_empty(),
                    w.pfs || rec.levels.iter().any(|l| l == "pfs"),
                ]
            }
            // Not (or no longer this version) in the store: what the record last saw
            // beyond this node's memory.
            _ => [
                false,
                rec.levels.iter().any(|l| l == "partner"),
                rec.levels.iter().any(|l| l == "pfs"),
            ],
        };
        for i in 0..3 {
            all[i] &= on[i];
        }
    }
    if d.files.is_empty() {
        return (0.0, [false; 3]);
    }
    let level = if all[2] {
        3.0
    } else if all[1] {
        2.0
    } else if all[0] {
        1.0
    } else {
        0.0
    };
    (level, all)
}

/// Datasets of `job` in this node's records by state, and the newest complete one: its
/// id, size, age and protection level.
pub fn datasets(e: &mut Exposition, store: &Store, job: &str) -> Result<()> {
    let (all, bad) = record::load_all(store, job)
        .map_err(|err| crate::MetricsError::Collect(format!("dataset records of job {job}: {err}")))?;
    let mut f = e.family(
        "ckptfs_datasets",
        Kind::Gauge,
        "Checkpoint datasets of the job in this node's records, by state (open, complete, invalid, incomplete).",
    )?;
    for s in [State::Open, State::Complete, State::Invalid, State::Incomplete] {
        let n = all.iter().filter(|d| d.state == s && !d.evicted).count();
        f.sample(&[("state", s.name())], n as f64)?;
    }
    e.single(
        "ckptfs_dataset_bad_records",
        Kind::Gauge,
        "Dataset records of the job that cannot be parsed.",
        bad.len() as f64,
    )?;
    let newest = all
        .iter()
        .filter(|d| d.state == State::Complete && !d.evicted)
        .max_by_key(|d| d.id);
    let now = now_ns();
    let view = LevelsView::load(store);
    let p = newest.map(|d| protection(store, &view, d));
    let mut f = e.family(
        "ckptfs_newest_dataset_id",
        Kind::Gauge,
        "Id of the newest complete dataset in this node's records (absent when there is none).",
    )?;
    if let Some(d) = newest {
        f.sample(&[], d.id as f64)?;
    }
    let mut f = e.family(
        "ckptfs_newest_dataset_bytes",
        Kind::Gauge,
        "Bytes of this node's part of the newest complete dataset.",
    )?;
    if let Some(d) = newest {
        f.sample(&[], d.size() as f64)?;
    }
    let mut f = e.family(
        "ckptfs_newest_dataset_age_seconds",
        Kind::Gauge,
        "Seconds since the newest complete dataset completed.",
    )?;
    if let Some(d) = newest {
        f.sample(&[], age_s(now, d.closed_ns.unwrap_or(d.created_ns)))?;
    }
    let mut f = e.family(
        "ckptfs_newest_dataset_protection_level",
        Kind::Gauge,
        "Protection of this node's part of the newest complete dataset: 0 a file is on no level, 1 node memory only, 2 also partner memory (survives this node's loss), 3 drained to the PFS.",
    )?;
    if let Some((level, _)) = p {
        f.sample(&[], level)?;
    }
    let mut f = e.family(
        "ckptfs_newest_dataset_on_level",
        Kind::Gauge,
        "1 when every file of this node's part of the newest complete dataset is on the level, else 0.",
    )?;
    if let Some((_, on)) = p {
        for (i, l) in ["local", "partner", "pfs"].iter().enumerate() {
            f.sample(&[("level", l)], if on[i] { 1.0 } else { 0.0 })?;
        }
    }
    Ok(())
}

/// The drain to the PFS, from the status file of store `store_name`'s drain agent (the
/// node daemon's drain thread or a `ckptfs agent`): whether one runs, its backlog, the
/// files and bytes it published, its copy rate, failed files.
pub fn drain(e: &mut Exposition, store_name: &str) -> Result<()> {
    let st = ckptfs_agent::status(store_name);
    e.single(
        "ckptfs_drain_running",
        Kind::Gauge,
        "1 while a drain agent runs on this store, else 0.",
        if st.as_ref().is_some_and(|s| s.running) {
            1.0
        } else {
            0.0
        },
    )?;
    let Some(s) = st else {
        return Ok(());
    };
    let backlog_files = s.queued.len() + s.in_flight.len();
    let backlog_bytes: u64 = s.queued.iter().map(|q| q.size).sum::<u64>()
        + s.in_flight
            .iter()
            .map(|f| f.size.saturating_sub(f.done))
            .sum::<u64>();
    e.single(
        "ckptfs_drain_backlog_files",
        Kind::Gauge,
        "Complete files waiting for the drain or being drained.",
        backlog_files as f64,
    )?;
    e.single(
        "ckptfs_drain_backlog_bytes",
        Kind::Gauge,
        "Bytes still to drain (waiting files, and what is left of the files in flight).",
        backlog_bytes as f64,
    )?;
    e.single(
        "ckptfs_drained_files_total",
        Kind::Counter,
        "Files published on the PFS by the running drain agent since it started.",
        s.drained_files as f64,
    )?;
    e.single(
        "ckptfs_drained_bytes_total",
        Kind::Counter,
        "Bytes published on the PFS by the running drain agent since it started (rate(): the drain rate).",
        s.drained_bytes as f64,
    )?;
    e.single(
        "ckptfs_drain_copy_rate_bytes_per_second",
        Kind::Gauge,
        "Bytes per second of copying measured by the drain agent (time spent copying only).",
        s.bandwidth_mbps * 1e6,
    )?;
    e.single(
        "ckptfs_drain_failed_files",
        Kind::Gauge,
        "Files whose last drain attempt failed.",
        s.failed.len() as f64,
    )?;
    e.single(
        "ckptfs_drain_status_age_seconds",
        Kind::Gauge,
        "Seconds since the drain agent last wrote its status.",
        age_s(now_ns(), s.updated_ns),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckptfs_store::{OpenFlags, StoreOptions};

    fn store(tag: &str) -> Store {
        let name = format!("metrics-{tag}-{}", std::process::id());
        let _ = Store::destroy(&name);
        Store::create(&StoreOptions {
            name,
            mem_size: Some(8 << 20),
            chunk_size: Some(1 << 20),
            max_files: Some(64),
            ..Default::default()
        })
        .unwrap()
    }

    fn put(s: &Store, path: &str, data: &[u8]) {
        let mut dir = String::new();
        let comps: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        for c in &comps[..comps.len() - 1] {
            dir.push('/');
            dir.push_str(c);
            let _ = s.mkdir(&dir, 0o755);
        }
        let mut f = s.open(path, OpenFlags::CREATE, 0o600).unwrap();
        f.write_all(data).unwrap();
        f.close().unwrap();
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
            .map(|v| v.parse().unwrap())
    }

    #[test]
    fn store_and_levels_follow_the_files_written() {
        let s = store("levels");
        let mut e = Exposition::new();
        super::store(&mut e, &s).unwrap();
        let sum = levels(&mut e, &s, &|_, _, _| true).unwrap();
        let t = e.finish();
        assert_eq!(
            value(&t, "ckptfs_store_capacity_bytes{tier=\"memory\"}"),
            Some((8 << 20) as f64)
        );
        assert_eq!(value(&t, "ckptfs_store_used_bytes{tier=\"memory\"}"), Some(0.0));
        assert_eq!(value(&t, "ckptfs_level_files{level=\"local\"}"), Some(0.0));
        assert!(sum.pending.is_empty());
        put(&s, "/ckpt/a", &vec![7u8; 3 << 20]);
        let mut e = Exposition::new();
        super::store(&mut e, &s).unwrap();
        let sum = levels(&mut e, &s, &|p, _, _| p == "/ckpt/a").unwrap();
        let t = e.finish();
        assert_eq!(
            value(&t, "ckptfs_store_used_bytes{tier=\"memory\"}"),
            Some((3 << 20) as f64)
        );
        assert_eq!(value(&t, "ckptfs_level_files{level=\"local\"}"), Some(1.0));
        assert_eq!(
            value(&t, "ckptfs_level_bytes{level=\"local\"}"),
            Some((3 << 20) as f64)
        );
        assert_eq!(value(&t, "ckptfs_level_files{level=\"partner\"}"), Some(0.0));
        assert_eq!(sum.pending.len(), 1);
        // A file the policy does not send to partners is not pending.
        let mut e = Exposition::new();
        assert!(levels(&mut e, &s, &|_, _, _| false).unwrap().pending.is_empty());
        Store::destroy(s.name()).unwrap();
    }

    #[test]
    fn datasets_by_state_and_the_newest_complete_one() {
        let s = store("ds");
        let mut e = Exposition::new();
        datasets(&mut e, &s, "j1").unwrap();
        let t = e.finish();
        assert_eq!(value(&t, "ckptfs_datasets{state=\"complete\"}"), Some(0.0));
        assert_eq!(value(&t, "ckptfs_newest_dataset_id"), None);
        let ds = ckptfs_datasets::Datasets::single_node(s.clone(), ckptfs_datasets::Config::for_job("j1"));
        let id = ds.begin("step1", None).unwrap();
        put(&s, "/ckpt/step1/r0", b"hello");
        ds.complete(Some(id), true).unwrap();
        let id2 = ds.begin("step2", None).unwrap();
        let mut e = Exposition::new();
        datasets(&mut e, &s, "j1").unwrap();
        let t = e.finish();
        assert_eq!(value(&t, "ckptfs_datasets{state=\"complete\"}"), Some(1.0), "{t}");
        assert_eq!(value(&t, "ckptfs_datasets{state=\"open\"}"), Some(1.0), "{t}");
        assert_eq!(value(&t, "ckptfs_newest_dataset_id"), Some(id as f64), "{t}");
        assert!(id2 > id);
        // In node memory only.
        assert_eq!(
            value(&t, "ckptfs_newest_dataset_protection_level"),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            value(&t, "ckptfs_newest_dataset_on_level{level=\"partner\"}"),
            Some(0.0),
            "{t}"
        );
        Store::destroy(s.name()).unwrap();
    }

    #[test]
    fn no_drain_agent_is_drain_running_zero() {
        let mut e = Exposition::new();
        drain(&mut e, &format!("metrics-nodrain-{}", std::process::id())).unwrap();
        let t = e.finish();
        assert_eq!(value(&t, "ckptfs_drain_running"), Some(0.0));
        assert_eq!(value(&t, "ckptfs_drain_backlog_files"), None);
    }
}
