//! VeloC's configuration file (the `cfg_file` of `VELOC_Init`) mapped onto ckptfs
//! settings (table in docs/scr-veloc.md). Unknown or meaningless keys are accepted and
//! reported once.

use ckptfs_compat::conf;
use ckptfs_compat::session::Mapped;
use ckptfs_compat::{CompatError, Result};
use std::path::{Path, PathBuf};

/// The resolved configuration.
#[derive(Debug, Clone, Default)]
pub struct VelocConfig {
    /// What maps onto the session.
    pub mapped: Mapped,
    /// `persistent_interval`: seconds between flushes to `persistent` (0: every
    /// checkpoint; negative: never).
    pub persistent_interval: i64,
    /// Keys with no meaning here, and notes on partly mapped ones.
    pub reports: Vec<String>,
}

const KNOWN: &[&str] = &[
    "scratch",
    "persistent",
    "persistent_interval",
    "max_versions",
    "scratch_versions",
    "mode",
];

/// Read `path`.
pub fn read(path: &Path) -> Result<VelocConfig> {
    let pairs = conf::read(path)?;
    let get = |k: &str| {
        conf::lookup(&pairs, k)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let scratch = get("scratch").ok_or_else(|| {
        CompatError::Invalid(format!(
            "{}: no scratch = <path> (VeloC requires it)",
            path.display()
        ))
    })?;
    let mut c = VelocConfig {
        mapped: Mapped {
            cache_base: Some(PathBuf::from(scratch)),
            dest: get("persistent").map(PathBuf::from),
            ..Mapped::default()
        },
        ..VelocConfig::default()
    };
    if let Some(v) = get("persistent_interval") {
        c.persistent_interval = v
            .trim()
            .parse()
            .map_err(|_| CompatError::Invalid(format!("persistent_interval={v}: not an integer")))?;
    }
    if let Some(v) = get("max_versions") {
        c.mapped.keep_pfs = conf::count("max_versions", &v)?;
    }
    if let Some(v) = get("scratch_versions") {
        c.mapped.keep_memory = conf::count("scratch_versions", &v)?;
    }
    if let Some(m) = get("mode") {
        if m.eq_ignore_ascii_case("async") {
            c.reports.push(
                "mode = async: checkpoints are stored synchronously (the store write is a memory copy); VELOC_Checkpoint_wait returns at once"
                    .into(),
            );
        } else if !m.eq_ignore_ascii_case("sync") {
            return Err(CompatError::Invalid(format!("mode = {m}: sync or async")));
        }
    }
    for (k, _) in &pairs {
        let k = k.to_ascii_lowercase();
        if !KNOWN.contains(&k.as_str()) && !c.reports.iter().any(|r| r.starts_with(&format!("{k} "))) {
            c.reports
                .push(format!("{k} has no meaning with ckptfs and is ignored"));
        }
    }
    Ok(c)
}
