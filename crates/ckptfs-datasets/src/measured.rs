//! The levels' costs as this job measured them, read where they are published: the
//! drain agent's status file (`levels[]`: the PFS level's smoothed put and get
//! bandwidths), the node daemon's status file (is it running, with which partners) and
//! its levels record (which files a partner acknowledged, `/.ckptfs/levels.json`, whose
//! store mtime is the time of the last acknowledgement), plus this job's own restores
//! (`costs.json`). Read only: neither the agent nor the node daemon is changed.
//!
//! **Partner copy time.** The daemon copies every complete file to its partners in the
//! background; a dataset is protected on the partner level once the last of its files
//! is acknowledged. At each completion the newest dataset not sampled yet whose every
//! file (this version) has a partner copy, and whose files are the newest ones the
//! record lists, gives one sample: seconds from its last file's close (mtime) to the
//! record's last change, and bytes / seconds as the partner bandwidth (smoothed like
//! the other costs). A later acknowledgement of another file would make the sample too
//! long, so such datasets are not sampled (the estimate errs on the slow side only).
//!
//! **Erasure encode time.** With an erasure set (the node daemon's status names its
//! level, scheme and members), the set's daemons encode every complete dataset and each
//! member keeps the encoding's header in its store
//! (`/.ckptfs/erasure/JOB.ID/SET/header`), written when the encode commits. At each
//! completion the newest dataset not sampled yet whose header is in the store gives
//! one sample: seconds from its last file's close to the header's mtime, and this
//! node's part / seconds as the encode bandwidth. The rebuild bandwidth comes from this
//! job's restarts that rebuilt files from the set, the memory cost from the scheme:
//! `p / (N - p)` of the part (`1 / (N - 1)` for XOR).

use crate::costs::{smooth, Costs};
use crate::handle::Datasets;
use crate::levels_record::{Levels, LEVELS_PATH};
use crate::record::Dataset;
pub use crate::record::Measured;

/// Transfers shorter than this are not timed reliably (as `ckptfs_level::cost`).
const MIN_SECONDS: f64 = 1e-4;

/// The node daemon's erasure set: level id, scheme and member count (its status file).
fn node_erasure(store_name: &str) -> Option<(String, String, usize)> {
    let dir = ckptfs_runtime::RuntimeDir::for_caller().ok()?;
    let text = dir.read(&format!("{store_name}.node.json")).ok()??;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let e = &v["erasure"];
    Some((
        e["level"].as_str()?.to_string(),
        e["scheme"].as_str()?.to_string(),
        e["members"].as_array()?.len(),
    ))
}

/// Extra memory per node of `scheme` over `n` members, as a fraction of the part.
fn erasure_memory(scheme: &str, n: usize) -> Option<f64> {
    let p = ckptfs_erasure::Scheme::parse(scheme)?.parity();
    (n > p).then(|| p as f64 / (n - p) as f64)
}

/// Take an encode time sample into `costs` (see the module documentation) from `all`:
/// the complete datasets and the one completing now, oldest first.
pub(crate) fn sample_erasure(ds: &Datasets, all: &[&Dataset], costs: &mut Costs) {
    let Some((level, _, _)) = node_erasure(ds.store.name()) else {
        return;
    };
    let set = level.strip_prefix("erasure:").unwrap_or(&level);
    let header = |d: &Dataset| {
        let key = format!("{}.{}", ds.cfg.job, d.id);
        ds.store
            .stat(&format!("{}/header", ckptfs_erasure::dataset_dir(&key, set)))
            .ok()
    };
    let Some((d, h)) = all
        .iter()
        .rev()
        .filter(|d| !d.files.is_empty())
        .find_map(|d| header(d).map(|h| (d, h)))
    else {
        return;
    };
    if costs.erasure_sampled_id.is_some_and(|id| id >= d.id) {
        return;
    }
    costs.erasure_sampled_id = Some(d.id);
    let last_close = d.files.values().map(|f| f.mtime_ns).max().unwrap_or(0);
    if h.mtime_ns < last_close {
        return;
    }
    let secs = ((h.mtime_ns - last_close) as f64 / 1e9).max(MIN_SECONDS);
    let bytes = d.size().max(1) as f64;
    costs.erasure_bps = smooth(costs.erasure_bps, bytes / secs);
}

/// The node daemon of `store_name`: running (its lock held) and its partners now.
fn node_daemon(store_name: &str) -> Option<(bool, Vec<String>)> {
    let dir = ckptfs_runtime::RuntimeDir::for_caller().ok()?;
    let text = dir.read(&format!("{store_name}.node.json")).ok()??;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let partners = v["partners"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p.as_str().map(String::from)).collect())
        .unwrap_or_default();
    Some((dir.is_locked(&format!("{store_name}.node.lock")), partners))
}

/// The PFS level's smoothed bandwidths from the drain agent's status file.
fn agent_pfs(store_name: &str) -> (Option<f64>, Option<f64>) {
    let Some(st) = ckptfs_agent::status(store_name) else {
        return (None, None);
    };
    let Some(l) = st.levels.iter().find(|l| l.level == "pfs") else {
        return (None, None);
    };
    let ok = |b: Option<f64>| b.filter(|b| b.is_finite() && *b > 0.0);
    (ok(l.put_bps), ok(l.get_bps))
}

/// Take a partner copy time sample into `costs` (see the module documentation) from
/// `all`: the complete datasets and the one completing now, oldest first.
pub(crate) fn sample_partner(ds: &Datasets, all: &[&Dataset], costs: &mut Costs) {
    let levels = Levels::load(&ds.store);
    if levels.files.is_empty() {
        return;
    }
    let Ok(rec) = ds.store.stat(LEVELS_PATH) else {
        return;
    };
    let copied = |d: &Dataset| {
        !d.files.is_empty()
            && d.files.iter().all(|(p, f)| {
                levels.files.get(p).is_some_and(|l| {
                    !l.partners.is_empty() && l.identity.size == f.size && l.identity.mtime_ns == f.mtime_ns
                })
            })
    };
    let Some(d) = all.iter().rev().find(|d| copied(d)) else {
        return;
    };
    if costs.partner_sampled_id.is_some_and(|id| id >= d.id) {
        return;
    }
    let last_close = d.files.values().map(|f| f.mtime_ns).max().unwrap_or(0);
    // Another file acknowledged after this dataset's: the record's mtime is not its.
    let newer = levels
        .files
        .iter()
        .any(|(p, l)| !d.files.contains_key(p) && !l.partners.is_empty() && l.identity.mtime_ns > last_close);
    costs.partner_sampled_id = Some(d.id);
    if newer || rec.mtime_ns < last_close {
        return;
    }
    let secs = ((rec.mtime_ns - last_close) as f64 / 1e9).max(MIN_SECONDS);
    let bytes = d.size().max(1) as f64;
    costs.partner_bps = smooth(costs.partner_bps, bytes / secs);
}

/// The measured inputs for a decision, given the job's smoothed `costs`.
pub(crate) fn measure(ds: &Datasets, costs: &Costs) -> Measured {
    let name = ds.store.name().to_string();
    let (agent_put, agent_get) = agent_pfs(&name);
    let setting = ds.cfg.pfs_bandwidth;
    let pick = |agent: Option<f64>| match (agent, costs.pfs_bps) {
        (Some(a), _) => (a, "agent"),
        (None, Some(r)) => (r, "restores"),
        (None, None) => (setting, "setting"),
    };
    let (pfs_put_bps, put_src) = pick(agent_put);
    let (pfs_get_bps, get_src) = pick(agent_get);
    let (partner, partner_reason) = match node_daemon(&name) {
        None => (false, format!("no node daemon status for store {name}")),
        Some((false, _)) => (false, format!("the node daemon of store {name} is not running")),
        Some((true, p)) if p.is_empty() => (false, "the node daemon has no partner".to_string()),
        Some((true, p)) => match costs.partner_bps {
            None => (
                false,
                format!("partners {} but no partner copy time measured yet", p.join(",")),
            ),
            Some(_) => (true, format!("partners {}, copy time measured", p.join(","))),
        },
    };
    let (erasure, erasure_reason, erasure_level, erasure_scheme, erasure_memory) =
        match (node_daemon(&name), node_erasure(&name)) {
            (Some((true, _)), Some((level, scheme, n))) => {
                let mem = erasure_memory(&scheme, n);
                match costs.erasure_bps {
                    None => (
                        false,
                        format!("{level} ({scheme} over {n}) but no encode time measured yet"),
                        Some(level),
                        Some(scheme),
                        mem,
                    ),
                    Some(_) => (
                        true,
                        format!("{level} ({scheme} over {n}), encode time measured"),
                        Some(level),
                        Some(scheme),
                        mem,
                    ),
                }
            }
            (Some((true, _)), None) => (
                false,
                "the node daemon is in no erasure set".into(),
                None,
                None,
                None,
            ),
            _ => (
                false,
                format!("no node daemon running on store {name}"),
                None,
                None,
                None,
            ),
        };
    Measured {
        pfs_put_bps,
        pfs_put_source: put_src.into(),
        pfs_get_bps,
        pfs_get_source: get_src.into(),
        partner,
        partner_reason,
        partner_bps: costs.partner_bps,
        partner_get_bps: costs.partner_get_bps,
        erasure,
        erasure_reason,
        erasure_level,
        erasure_scheme,
        erasure_bps: costs.erasure_bps,
        erasure_get_bps: costs.erasure_get_bps,
        erasure_memory,
    }
}
