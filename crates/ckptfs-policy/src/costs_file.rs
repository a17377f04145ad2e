//! Level costs read from a file: the crate's own schema, or the JSON output of
//! `ckptfs bench ... --json` turned into costs with a checkpoint size.
//!
//! Own schema (`restart_s` defaults to `checkpoint_s`; `pfs` is required):
//!
//! ```json
//! {"levels": {"local":   {"checkpoint_s": 0.5, "restart_s": 0.4},
//!             "partner": {"checkpoint_s": 8},
//!             "pfs":     {"checkpoint_s": 130, "restart_s": 110}}}
//! ```
//!
//! Bench document: `{"bench": "...", "results": [{"case": "...",
//! "bandwidth_gbps": 2.5, ...}, ...]}`. Each result gives a bandwidth in GB/s
//! (10⁹ bytes per second). Its level is the result's `"level"` field if
//! present, else the first keyword found among the words of the lower-cased
//! case name (words are split at any non-alphanumeric character, so `tmpfs`
//! is not `pfs`):
//! `pfs`, `disk`, `parallel` → PFS; `partner`, `remote`, `replica` → partner;
//! `local`, `memory`, `mem`, `shm`, `store`, `node` → node memory. Its
//! direction is the `"op"` field if present, else `read` or `restart` in the
//! case name means restart, anything else checkpoint. Several results for
//! the same level and direction: the median bandwidth. Cost = checkpoint size
//! / bandwidth; a level without a read result restarts at its write
//! bandwidth. Other fields and unmatched cases are ignored.

use crate::decide::{Level, LevelCost, LevelCosts};
use crate::error::PolicyError;
use serde_json::Value;
use std::path::Path;

/// Costs read from a file, with one line per level saying where they came from.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedCosts {
    /// The costs.
    pub costs: LevelCosts,
    /// Human-readable provenance, one line per level.
    pub provenance: Vec<String>,
}

/// Reads a costs file (see the module docs). `ckpt_size` (bytes) is required
/// for a bench document and refused for the own schema.
pub fn load(path: &Path, ckpt_size: Option<f64>) -> Result<LoadedCosts, PolicyError> {
    let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path, ckpt_size)
}

/// Parses costs-file text (see the module docs).
pub fn parse(text: &str, path: &Path, ckpt_size: Option<f64>) -> Result<LoadedCosts, PolicyError> {
    let err = |message: String| PolicyError::CostsFile {
        path: path.to_path_buf(),
        message,
    };
    let doc: Value = serde_json::from_str(text).map_err(|e| err(format!("not JSON: {e}")))?;
    if let Some(levels) = doc.get("levels") {
        if ckpt_size.is_some() {
            return Err(err(
                "--ckpt-size only applies to bench documents; this file gives costs in seconds".into(),
            ));
        }
        own_schema(levels, &err)
    } else if let Some(results) = doc.get("results").and_then(Value::as_array) {
        let size = ckpt_size.ok_or_else(|| {
            err("a bench document gives bandwidths: pass --ckpt-size to turn them into costs".into())
        })?;
        bench(results, size, &err)
    } else {
        Err(err(
            "expected {\"levels\": {...}} or a bench document {\"results\": [...]}".into(),
        ))
    }
}

fn own_schema(levels: &Value, err: &dyn Fn(String) -> PolicyError) -> Result<LoadedCosts, PolicyError> {
    let obj = levels
        .as_object()
        .ok_or_else(|| err("`levels` must be an object".into()))?;
    for key in obj.keys() {
        if !matches!(key.as_str(), "local" | "partner" | "pfs") {
            return Err(err(format!(
                "unknown level `{key}` (expected local, partner, pfs)"
            )));
        }
    }
    let get = |name: &str| -> Result<Option<LevelCost>, PolicyError> {
        let Some(v) = obj.get(name) else {
            return Ok(None);
        };
        let num = |field: &str| -> Result<Option<f64>, PolicyError> {
            match v.get(field) {
                None => Ok(None),
                Some(x) => x
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| err(format!("levels.{name}.{field} must be a number"))),
            }
        };
        let c = num("checkpoint_s")?.ok_or_else(|| err(format!("levels.{name}.checkpoint_s is missing")))?;
        let r = num("restart_s")?.unwrap_or(c);
        Ok(Some(LevelCost {
            checkpoint_s: c,
            restart_s: r,
        }))
    };
    let pfs = get("pfs")?.ok_or_else(|| err("levels.pfs is missing".into()))?;
    let costs = LevelCosts {
        local: get("local")?,
        partner: get("partner")?,
        pfs,
    };
    costs.validate()?;
    let provenance = costs
        .levels()
        .into_iter()
        .map(|l| format!("{l}: from levels.{l}"))
        .collect();
    Ok(LoadedCosts { costs, provenance })
}

fn classify(case: &str) -> Option<Level> {
    let c = case.to_ascii_lowercase();
    let tokens: Vec<&str> = c.split(|ch: char| !ch.is_ascii_alphanumeric()).collect();
    let has = |words: &[&str]| words.iter().any(|w| tokens.contains(w));
    if has(&["pfs", "disk", "parallel"]) {
        Some(Level::Pfs)
    } else if has(&["partner", "remote", "replica"]) {
        Some(Level::Partner)
    } else if has(&["local", "memory", "mem", "shm", "store", "node"]) {
        Some(Level::Local)
    } else {
        None
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn bench(
    results: &[Value],
    size: f64,
    err: &dyn Fn(String) -> PolicyError,
) -> Result<LoadedCosts, PolicyError> {
    crate::error::positive("ckpt-size", size)?;
    // [level][0 = checkpoint, 1 = restart] -> (bandwidths, cases)
    let mut bw: [[(Vec<f64>, Vec<String>); 2]; 3] = Default::default();
    let mut seen = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let case = r.get("case").and_then(Value::as_str).unwrap_or("");
        seen.push(case.to_string());
        let level = match r.get("level").and_then(Value::as_str) {
            Some(l) => Some(match l.to_ascii_lowercase().as_str() {
                "local" => Level::Local,
                "partner" => Level::Partner,
                "pfs" => Level::Pfs,
                other => {
                    return Err(err(format!(
                        "results[{i}].level `{other}` is not local, partner or pfs"
                    )))
                }
            }),
            None => classify(case),
        };
        let Some(level) = level else { continue };
        let Some(gbps) = r.get("bandwidth_gbps") else {
            continue;
        };
        let gbps = gbps
            .as_f64()
            .filter(|g| g.is_finite() && *g > 0.0)
            .ok_or_else(|| err(format!("results[{i}].bandwidth_gbps must be a number > 0")))?;
        let op = r
            .get("op")
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase)
            .unwrap_or_else(|| case.to_ascii_lowercase());
        let dir = usize::from(op.contains("read") || op.contains("restart"));
        let slot = &mut bw[level.index()][dir];
        slot.0.push(gbps);
        slot.1.push(case.to_string());
    }
    let mut provenance = Vec::new();
    let mut cost = |level: Level| -> Option<LevelCost> {
        let [w, r] = &bw[level.index()];
        if w.0.is_empty() && r.0.is_empty() {
            return None;
        }
        let wbw = if w.0.is_empty() {
            median(r.0.clone())
        } else {
            median(w.0.clone())
        };
        let rbw = if r.0.is_empty() { wbw } else { median(r.0.clone()) };
        let cases: Vec<&str> = w.1.iter().chain(&r.1).map(String::as_str).collect();
        provenance.push(format!(
            "{level}: write {wbw} GB/s, read {rbw} GB/s (cases: {})",
            cases.join(", ")
        ));
        Some(LevelCost {
            checkpoint_s: size / (wbw * 1e9),
            restart_s: size / (rbw * 1e9),
        })
    };
    let local = cost(Level::Local);
    let partner = cost(Level::Partner);
    let pfs = cost(Level::Pfs).ok_or_else(|| {
        err(format!(
            "no result for the PFS level (a case naming pfs/disk/parallel, or \"level\": \"pfs\"); cases: {}",
            seen.join(", ")
        ))
    })?;
    Ok(LoadedCosts {
        costs: LevelCosts { local, partner, pfs },
        provenance,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_schema_reads_levels_and_defaults_restart() {
        let t =
            r#"{"levels": {"partner": {"checkpoint_s": 8}, "pfs": {"checkpoint_s": 130, "restart_s": 100}}}"#;
        let c = parse(t, Path::new("c.json"), None).unwrap().costs;
        assert_eq!(c.partner.unwrap().restart_s, 8.0);
        assert_eq!(c.pfs.restart_s, 100.0);
        assert!(c.local.is_none());
        let e = parse(
            r#"{"levels": {"pfs": {"checkpoint_s": -1}}}"#,
            Path::new("c.json"),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("ckpt-pfs"), "{e}");
    }

    #[test]
    fn bench_document_gives_costs_from_size() {
        let t = r#"{"bench": "store", "results": [
            {"case": "store-write-1MiB", "bandwidth_gbps": 8.0},
            {"case": "store-write-1MiB", "bandwidth_gbps": 6.0},
            {"case": "store-write-1MiB", "bandwidth_gbps": 7.0},
            {"case": "partner copy", "bandwidth_gbps": 1.0},
            {"case": "pfs drain", "bandwidth_gbps": 0.5},
            {"case": "pfs read", "bandwidth_gbps": 1.0},
            {"case": "tmpfs baseline", "bandwidth_gbps": 2.5},
            {"case": "remote-memory", "level": "partner", "op": "read", "bandwidth_gbps": 7.0}
        ]}"#;
        let l = parse(t, Path::new("b.json"), Some(7e9)).unwrap();
        let c = l.costs;
        assert_eq!(c.local.unwrap().checkpoint_s, 1.0); // median 7 GB/s
        assert_eq!(c.partner.unwrap().checkpoint_s, 7.0);
        assert_eq!(c.partner.unwrap().restart_s, 1.0);
        assert_eq!(c.pfs.checkpoint_s, 14.0);
        assert_eq!(c.pfs.restart_s, 7.0);
        assert_eq!(l.provenance.len(), 3);
        let e = parse(t, Path::new("b.json"), None).unwrap_err();
        assert!(e.to_string().contains("--ckpt-size"), "{e}");
        let e = parse(
            r#"{"bench": "x", "results": [{"case": "shm", "bandwidth_gbps": 1}]}"#,
            Path::new("b.json"),
            Some(1.0),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no result for the PFS"), "{e}");
    }
}
