//! SCR's configuration sources mapped onto ckptfs settings.
//!
//! Precedence as in SCR: values set with `SCR_Config` before `SCR_Init`, then the
//! environment, then the user configuration file (`SCR_CONF_FILE`, else
//! `SCR_PREFIX/.scrconf`). Keys with a ckptfs meaning are mapped (table in
//! docs/scr-veloc.md); other SCR keys are accepted and reported once as ignored.

use ckptfs_compat::conf;
use ckptfs_compat::session::Mapped;
use ckptfs_compat::{CompatError, Result};
use std::path::PathBuf;
use std::sync::Mutex;

/// Values set with `SCR_Config` (before `SCR_Init`).
pub static SET: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Keys that are read and have a ckptfs meaning.
pub const MAPPED: &[&str] = &[
    "SCR_PREFIX",
    "SCR_CACHE_BASE",
    "CACHE",
    "SCR_FLUSH",
    "SCR_CACHE_SIZE",
    "SCR_PREFIX_SIZE",
    "SCR_CHECKPOINT_INTERVAL",
    "SCR_CHECKPOINT_SECONDS",
    "SCR_CONF_FILE",
    "SCR_COPY_TYPE",
    "SCR_ENABLE",
];

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct ScrConfig {
    /// SCR_PREFIX (default: the working directory at SCR_Init).
    pub prefix: PathBuf,
    /// What maps onto the session.
    pub mapped: Mapped,
    /// SCR_CHECKPOINT_INTERVAL: every Nth SCR_Need_checkpoint call says yes (0: unset).
    pub interval: u64,
    /// SCR_CHECKPOINT_SECONDS: yes once this many seconds passed since the last
    /// checkpoint (0: unset).
    pub seconds: u64,
    /// Keys that have no meaning here (reported once by rank 0).
    pub ignored: Vec<String>,
    /// Notes about mapped keys that only partly apply (reported with the ignored ones).
    pub notes: Vec<String>,
}

fn lock() -> std::sync::MutexGuard<'static, Vec<(String, String)>> {
    SET.lock().unwrap_or_else(|e| e.into_inner())
}

/// The value of `key` from `SCR_Config`, else the environment.
pub fn set_or_env(key: &str) -> Option<String> {
    conf::lookup(&lock(), key)
        .map(str::to_string)
        .or_else(|| std::env::var(key).ok())
        .filter(|v| !v.is_empty())
}

/// Resolve every source.
pub fn resolve() -> Result<ScrConfig> {
    let cwd = std::env::current_dir().map_err(|e| CompatError::io("getcwd", e))?;
    let prefix0 = set_or_env("SCR_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| cwd.clone());
    let file = set_or_env("SCR_CONF_FILE").map(PathBuf::from);
    let mut pairs = match &file {
        Some(f) => conf::read(f)?,
        None => {
            let f = prefix0.join(".scrconf");
            if f.is_file() {
                conf::read(&f)?
            } else {
                Vec::new()
            }
        }
    };
    // The environment's SCR_* and the SCR_Config values override the file.
    let mut env: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k.starts_with("SCR_")).collect();
    env.sort();
    pairs.extend(env);
    pairs.extend(lock().iter().cloned());
    let get = |k: &str| {
        conf::lookup(&pairs, k)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let prefix = get("SCR_PREFIX").map(PathBuf::from).unwrap_or(cwd);
    let prefix = if prefix.is_absolute() {
        prefix
    } else {
        std::env::current_dir()
            .map_err(|e| CompatError::io("getcwd", e))?
            .join(prefix)
    };
    let mut mapped = Mapped {
        cache_base: get("SCR_CACHE_BASE").or_else(|| get("CACHE")).map(PathBuf::from),
        dest: Some(prefix.join(".ckptfs")),
        flush_every: 10,
        ..Mapped::default()
    };
    if let Some(v) = get("SCR_FLUSH") {
        mapped.flush_every = conf::count("SCR_FLUSH", &v)?;
    }
    if let Some(v) = get("SCR_CACHE_SIZE") {
        mapped.keep_memory = conf::count("SCR_CACHE_SIZE", &v)?;
    }
    if let Some(v) = get("SCR_PREFIX_SIZE") {
        mapped.keep_pfs = conf::count("SCR_PREFIX_SIZE", &v)?;
    }
    let interval = get("SCR_CHECKPOINT_INTERVAL")
        .map(|v| conf::count("SCR_CHECKPOINT_INTERVAL", &v))
        .transpose()?;
    let seconds = get("SCR_CHECKPOINT_SECONDS")
        .map(|v| conf::count("SCR_CHECKPOINT_SECONDS", &v))
        .transpose()?;
    let mut notes = Vec::new();
    if let Some(t) = get("SCR_COPY_TYPE") {
        if !t.eq_ignore_ascii_case("SINGLE") {
            notes.push(format!(
                "SCR_COPY_TYPE={t}: redundancy across nodes is the node daemons' partner level (ckptfs node); this library writes the local level only"
            ));
        }
    }
    if get("SCR_ENABLE").is_some_and(|v| v == "0") {
        notes.push("SCR_ENABLE=0: ignored, ckptfs stays enabled".into());
    }
    let mut ignored: Vec<String> = pairs
        .iter()
        .map(|(k, _)| k.to_ascii_uppercase())
        .filter(|k| !MAPPED.contains(&k.as_str()))
        .collect();
    ignored.sort();
    ignored.dedup();
    Ok(ScrConfig {
        prefix,
        mapped,
        interval: u64::from(interval.unwrap_or(0)),
        seconds: u64::from(seconds.unwrap_or(0)),
        ignored,
        notes,
    })
}

/// `SCR_Config(config)`: set (`KEY=VALUE`), unset (`KEY=`) or query (`KEY`). Returns the
/// queried value (None for set/unset or an unknown key).
pub fn config_call(s: &str, initialized: bool) -> Result<Option<String>> {
    let s = s.trim();
    match s.split_once('=') {
        Some((k, v)) => {
            if initialized {
                return Err(CompatError::State(
                    "SCR_Config cannot set values after SCR_Init".into(),
                ));
            }
            let k = k.trim();
            if k.is_empty() {
                return Err(CompatError::Invalid(format!("SCR_Config: no key in {s:?}")));
            }
            let v = v.trim().trim_matches('"');
            let mut set = lock();
            set.retain(|(x, _)| !x.eq_ignore_ascii_case(k));
            if !v.is_empty() {
                set.push((k.to_string(), v.to_string()));
            }
            Ok(None)
        }
        None if s.is_empty() => Err(CompatError::Invalid("SCR_Config: empty string".into())),
        None => Ok(set_or_env(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_query_unset_and_refused_after_init() {
        assert_eq!(config_call("CKPTFS_TEST_KEY_X=5", false).unwrap(), None);
        assert_eq!(
            config_call("CKPTFS_TEST_KEY_X", false).unwrap().as_deref(),
            Some("5")
        );
        assert_eq!(config_call("CKPTFS_TEST_KEY_X=\"a=b\"", false).unwrap(), None);
        assert_eq!(
            config_call("CKPTFS_TEST_KEY_X", true).unwrap().as_deref(),
            Some("a=b")
        );
        assert!(
            config_call("CKPTFS_TEST_KEY_X=7", true).is_err(),
            "no set after SCR_Init"
        );
        assert_eq!(config_call("CKPTFS_TEST_KEY_X=", false).unwrap(), None);
        assert_eq!(config_call("CKPTFS_TEST_KEY_X", false).unwrap(), None);
        assert!(config_call("=3", false).is_err());
        assert!(config_call("  ", false).is_err());
    }
}
