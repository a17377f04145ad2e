//! Level costs read from a file: the crate's own schema, or the JSON output of
//! `ckptfs bench ... --json` turned into costs with a checkpoint size.
//!
//! The file may give only some levels; flags such as `--ckpt-pfs` add or
//! override levels (the PFS must come from one of the two).
//!
//! Own schema (`restart_s` defaults to `checkpoint_s`):
//!
//! ```json
//! {"levels": {"local":   {"checkpoint_s": 0.5, "restart_s": 0.4},
//!             "partner": {"checkpoint_s": 8},
//!             "pfs":     {"checkpoint_s": 130, "restart_s": 110}}}
//! ```
//!
//! Bench document: `{"bench": "...", "results": [{"case": "...",
//! "gbps": 2.5, ...}, ...]}` as printed by `ckptfs bench ... --json`. Each
//! result gives a bandwidth in GB/s (10⁹ bytes per second) in `gbps` or
//! `bandwidth_gbps`. Its level is the result's `"level"` field if
//! present, else the first keyword found among the words of the lower-cased
//! case name (words are split at any non-alphanumeric character, so `tmpfs`
//! is not `pfs`):
//! `pfs`, `disk`, `parallel`, `drain` → PFS; `partner`, `remote`, `replica`
//! → partner; `local`, `memory`, `mem`, `shm`, `store`, `node`, `ckptfs` →
//! node memory (so the store bench's `ckptfs-write` and `ckptfs-read` give
//! the node-memory level, and its baselines `memcpy` and `devshm-write` are
//! ignored). Its
//! direction is the `"op"` field if present, else `read` or `restart` in the
//! case name means restart, anything else checkpoint. Several results for
//! the same level and direction: the median bandwidth. Cost = checkpoint size
//! / bandwidth; a level without a read result restarts at its write
//! bandwidth. Other fields and unmatched cases are ignored.

use crate::decide::{Level, LevelCost, LevelCosts};
use crate::error::PolicyError;
use serde_json::Value;
use std::path::Path;

/// Costs read from a file (any level may be missing), with one line per
/// level saying where they came from.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedCosts {
    /// Node memory, if the file gives it.
    pub local: Option<LevelCost>,
    /// Partner memory, if the file gives it.
    pub partner: Option<LevelCost>,
    /// PFS, if the file gives it.
    pub pfs: Option<LevelCost>,
    /// Human-readable provenance, one line per level.
    pub provenance: Vec<String>,
}

impl LoadedCosts {
    /// Complete costs, or an error when the PFS is missing.
    pub fn complete(&self, path: &Path) -> Result<LevelCosts, PolicyError> {
        let pfs = self.pfs.ok_or_else(|| PolicyError::CostsFile {
            path: path.to_path_buf(),
            message: "no PFS cost in the file (a result whose case names pfs/disk/parallel/drain, \
                      \"level\": \"pfs\", or levels.pfs); add --ckpt-pfs"
                .into(),
        })?;
        Ok(LevelCosts {
            local: self.local,
            partner: self.partner,
            pfs,
        })
    }
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
    let (local, partner, pfs) = (get("local")?, get("partner")?, get("pfs")?);
    // Validate with a placeholder PFS when the file has none.
    LevelCosts {
        local,
        partner,
        pfs: pfs.unwrap_or(LevelCost {
            checkpoint_s: 0.0,
            restart_s: 0.0,
        }),
    }
    .validate()?;
    let provenance = [("local", local), ("partner", partner), ("pfs", pfs)]
        .iter()
        .filter(|(_, c)| c.is_some())
        .map(|(l, _)| format!("{l}: from levels.{l}"))
        .collect();
    Ok(LoadedCosts {
        local,
        partner,
        pfs,
        provenance,
    })
}

fn classify(case: &str) -> Option<Level> {
    let c = case.to_ascii_lowercase();
    let tokens: Vec<&str> = c.split(|ch: char| !ch.is_ascii_alphanumeric()).collect();
    let has = |words: &[&str]| words.iter().any(|w| tokens.contains(w));
    if has(&["pfs", "disk", "parallel", "drain"]) {
        Some(Level::Pfs)
    } else if has(&["partner", "remote", "replica"]) {
        Some(Level::Partner)
    } else if has(&["local", "memory", "mem", "shm", "store", "node", "ckptfs"]) {
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
        let Some((field, gbps)) = ["gbps", "bandwidth_gbps"]
            .iter()
            .find_map(|f| r.get(*f).map(|v| (*f, v)))
        else {
            continue;
        };
        let gbps = gbps
            .as_f64()
            .filter(|g| g.is_finite() && *g > 0.0)
            .ok_or_else(|| err(format!("results[{i}].{field} must be a number > 0")))?;
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
    let pfs = cost(Level::Pfs);
    if local.is_none() && partner.is_none() && pfs.is_none() {
        return Err(err(format!(
            "no result maps to a level (see docs/policy.md); cases: {}",
            seen.join(", ")
        )));
    }
    Ok(LoadedCosts {
        local,
        partner,
        pfs,
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
        let c = parse(t, Path::new("c.json"), None)
            .unwrap()
            .complete(Path::new("c.json"))
            .unwrap();
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
        let c = l.complete(Path::new("b.json")).unwrap();
        assert_eq!(c.local.unwrap().checkpoint_s, 1.0); // median 7 GB/s
        assert_eq!(c.partner.unwrap().checkpoint_s, 7.0);
        assert_eq!(c.partner.unwrap().restart_s, 1.0);
        assert_eq!(c.pfs.checkpoint_s, 14.0);
        assert_eq!(c.pfs.restart_s, 7.0);
        assert_eq!(l.provenance.len(), 3);
        let e = parse(t, Path::new("b.json"), None).unwrap_err();
        assert!(e.to_string().contains("--ckpt-size"), "{e}");
        let e = parse(
            r#"{"bench": "x", "results": [{"case": "memcpy", "gbps": 1}]}"#,
            Path::new("b.json"),
            Some(1.0),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no result maps"), "{e}");
    }

    /// The document `ckptfs bench store --json` prints (crates/ckptfs-bench).
    #[test]
    fn store_bench_output_gives_the_node_memory_level() {
        let t = r#"{"bench": "store", "settings": {"size": 1}, "notes": [],
            "results": [
              {"case": "memcpy", "procs": 1, "bytes": 100, "seconds": [1.0], "seconds_median": 1.0, "gbps": 8.0},
              {"case": "devshm-write", "procs": 1, "bytes": 100, "seconds": [1.0], "seconds_median": 1.0, "gbps": 2.5},
              {"case": "ckptfs-write", "procs": 1, "bytes": 100, "seconds": [1.0], "seconds_median": 1.0, "gbps": 4.0},
              {"case": "ckptfs-read", "procs": 1, "bytes": 100, "seconds": [1.0], "seconds_median": 1.0, "gbps": 8.0},
              {"case": "chunk-sweep", "procs": 2, "bytes": 100, "seconds": [1.0], "seconds_median": 1.0, "gbps": 3.0}
            ]}"#;
        let p = Path::new("store.json");
        let l = parse(t, p, Some(4e9)).unwrap();
        let local = l.local.unwrap();
        assert_eq!((local.checkpoint_s, local.restart_s), (1.0, 0.5));
        assert!(l.partner.is_none() && l.pfs.is_none());
        let e = l.complete(p).unwrap_err();
        assert!(e.to_string().contains("--ckpt-pfs"), "{e}");
    }
}
