//! The settings table and its resolution: every store setting is a CLI flag, an
//! environment variable `CKPTFS_*` and a key of a TOML file, with precedence
//! flags > env > file > defaults.
//!
//! A setting left at its default is not imposed on an existing store: the resolved
//! [`StoreSettings`] carries `None` for it, and attaching accepts whatever the segment
//! was created with. A setting given explicitly (by any source) must match.

use crate::parse::{check_store_name, parse_bool, parse_count, parse_prefixes, parse_size, parse_store_size};
use crate::types::Errno;
use std::path::PathBuf;

/// Default memory for file data: 1 GiB.
pub const DEFAULT_MEM_SIZE: u64 = 1 << 30;
/// Default directory of a store's segment file (`DIR/ckptfs.NAME`).
pub const DEFAULT_SHM_DIR: &str = "/dev/shm";
/// Default chunk size: 1 MiB.
pub const DEFAULT_CHUNK_SIZE: u64 = 1 << 20;
/// Memory per file when the file count is not given: the store makes one inode per
/// 8 KiB of its memory (as tmpfs's default), at least 256.
pub const BYTES_PER_FILE: u64 = 8 << 10;
/// Default maximum number of files and directories, for the default memory size (a store
/// of another size gets one per [`BYTES_PER_FILE`] of its memory).
pub const DEFAULT_MAX_FILES: u32 = (DEFAULT_MEM_SIZE / BYTES_PER_FILE) as u32;
/// Smallest chunk size: 64 KiB.
pub const MIN_CHUNK_SIZE: u64 = 64 << 10;
/// Largest chunk size: 64 MiB.
pub const MAX_CHUNK_SIZE: u64 = 64 << 20;
/// Largest `max_files`.
pub const MAX_MAX_FILES: u64 = 1 << 22;
/// Environment variable naming the TOML settings file.
pub const CONFIG_ENV: &str = "CKPTFS_CONFIG";

/// The default store name, derived from the user id: `u<UID>`.
pub fn default_store_name() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    format!("u{}", unsafe { libc::getuid() })
}

/// Where a setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Built-in default.
    Default,
    /// The TOML file.
    File,
    /// An environment variable.
    Env,
    /// A command-line flag.
    Flag,
}

impl Source {
    /// Lower-case name, as `ckptfs config` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::File => "file",
            Source::Env => "env",
            Source::Flag => "flag",
        }
    }
}

/// What kind of value a setting holds (how it is parsed and range-checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A store name ([`check_store_name`]).
    StoreName,
    /// A size in bytes, at most [`crate::MAX_SIZE`].
    Size,
    /// A chunk size: a power of two from 64 KiB to 64 MiB.
    ChunkSize,
    /// A count from 2 to [`MAX_MAX_FILES`].
    FileCount,
    /// A directory path (empty: none).
    Dir,
    /// A boolean ([`parse_bool`]).
    Bool,
    /// Colon-separated absolute path prefixes ([`parse_prefixes`]).
    Prefixes,
    /// Free text checked by the crate that uses it (the dataset rules, `ckptfs-datasets`).
    Text,
    /// A non-negative whole number (counts of datasets).
    Count,
    /// A non-negative decimal number (seconds, probabilities, bytes per second).
    Number,
    /// Seconds: a decimal number from 0 to 3600.
    Seconds,
    /// A size ([`parse_size`]) or a share of memory `N%` (0 to 100).
    SizeOrShare,
}

/// One row of the settings table.
pub struct Setting {
    /// Key in the TOML file.
    pub key: &'static str,
    /// Environment variable.
    pub env: &'static str,
    /// Command-line flag.
    pub flag: &'static str,
    /// Default value, as text.
    pub default: fn() -> String,
    /// What it does.
    pub help: &'static str,
    /// How its value is parsed.
    pub kind: Kind,
}

/// The table.
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "store",
        env: "CKPTFS_STORE",
        flag: "--store",
        default: default_store_name,
        help: "store name",
        kind: Kind::StoreName,
    },
    Setting {
        key: "mem_size",
        env: "CKPTFS_MEM_SIZE",
        flag: "--mem-size",
        default: || DEFAULT_MEM_SIZE.to_string(),
        help: "memory for file data (bytes)",
        kind: Kind::Size,
    },
    Setting {
        key: "chunk_size",
        env: "CKPTFS_CHUNK_SIZE",
        flag: "--chunk-size",
        default: || DEFAULT_CHUNK_SIZE.to_string(),
        help: "chunk size (bytes)",
        kind: Kind::ChunkSize,
    },
    Setting {
        key: "max_files",
        env: "CKPTFS_MAX_FILES",
        flag: "--max-files",
        default: || DEFAULT_MAX_FILES.to_string(),
        help: "maximum files and directories (default: one per 8 KiB of memory)",
        kind: Kind::FileCount,
    },
    Setting {
        key: "shm_dir",
        env: "CKPTFS_SHM_DIR",
        flag: "--shm-dir",
        default: || DEFAULT_SHM_DIR.into(),
        help: "directory of the store's segment file: a tmpfs (mounted with huge= for huge pages)",
        kind: Kind::Dir,
    },
    Setting {
        key: "spill_dir",
        env: "CKPTFS_SPILL_DIR",
        flag: "--spill-dir",
        default: String::new,
        help: "spill file directory",
        kind: Kind::Dir,
    },
    Setting {
        key: "spill_size",
        env: "CKPTFS_SPILL_SIZE",
        flag: "--spill-size",
        default: || "0".into(),
        help: "spill file size (bytes)",
        kind: Kind::Size,
    },
    Setting {
        key: "private",
        env: "CKPTFS_PRIVATE",
        flag: "--private",
        default: || "false".into(),
        help: "private segment per process",
        kind: Kind::Bool,
    },
    Setting {
        key: "allow_foreign_owner",
        env: "CKPTFS_ALLOW_FOREIGN_OWNER",
        flag: "--allow-foreign-owner",
        default: || "false".into(),
        help: "attach a store segment owned by another user (root, explicitly)",
        kind: Kind::Bool,
    },
    Setting {
        key: "warm",
        env: "CKPTFS_WARM",
        flag: "-",
        default: || "0".into(),
        help: "bytes of free chunks (or `all`) whose page tables a process builds in the background when it attaches; the preload shim then attaches at process start",
        kind: Kind::Size,
    },
    Setting {
        key: "mount",
        env: "CKPTFS_MOUNT",
        flag: "--mount",
        default: || "/ckpt".into(),
        help: "path prefixes served by `ckptfs run`",
        kind: Kind::Prefixes,
    },
    // The node daemon (crate ckptfs-node, docs/cluster.md); `ckptfs node
    // --partner-priority` overrides it.
    Setting {
        key: "partner_priority",
        env: "CKPTFS_PARTNER_PRIORITY",
        flag: "-",
        default: || "low".into(),
        help: "CPU and IO priority of partner copies in `ckptfs node`: idle (nice 19, idle IO), low (nice 10) or normal",
        kind: Kind::Text,
    },
    // The dataset rules (crate ckptfs-datasets, docs/datasets.md).
    Setting {
        key: "dataset_pattern",
        env: "CKPTFS_DATASET_PATTERN",
        flag: "-",
        default: String::new,
        help: "transparent datasets: store directories matching this glob (e.g. /step.*) are datasets",
        kind: Kind::Text,
    },
    Setting {
        key: "dataset_complete",
        env: "CKPTFS_DATASET_COMPLETE",
        flag: "-",
        default: String::new,
        help: "transparent datasets are complete at files:N closed files or when marker:NAME appears",
        kind: Kind::Text,
    },
    Setting {
        key: "dataset_keep_memory",
        env: "CKPTFS_DATASET_KEEP_MEMORY",
        flag: "-",
        default: || "0".into(),
        help: "complete datasets kept in node memory (0 = all)",
        kind: Kind::Count,
    },
    Setting {
        key: "dataset_flush_every",
        env: "CKPTFS_DATASET_FLUSH_EVERY",
        flag: "-",
        default: || "0".into(),
        help: "flush every Nth complete dataset to the PFS whatever the policy says (0 = policy only)",
        kind: Kind::Count,
    },
    Setting {
        key: "dataset_keep_pfs",
        env: "CKPTFS_DATASET_KEEP_PFS",
        flag: "-",
        default: || "0".into(),
        help: "flushed datasets kept on the PFS (0 = all)",
        kind: Kind::Count,
    },
    Setting {
        key: "dataset_partner_copies",
        env: "CKPTFS_DATASET_PARTNER_COPIES",
        flag: "-",
        default: || "complete".into(),
        help: "which files `ckptfs node` copies to partners: complete (every complete dataset's files, and files outside datasets), decision (only datasets the adaptive level policy decided partner) or all (every complete file at once)",
        kind: Kind::Text,
    },
    Setting {
        key: "node_mtbf",
        env: "CKPTFS_NODE_MTBF",
        flag: "-",
        default: || "86400".into(),
        help: "mean time between failures of one node, seconds (checkpoint advice, failure posterior)",
        kind: Kind::Number,
    },
    Setting {
        key: "checkpoint_interval",
        env: "CKPTFS_CHECKPOINT_INTERVAL",
        flag: "-",
        default: || "0".into(),
        help: "the job's checkpoint interval tau in seconds for the level policy (0 = measured between completions)",
        kind: Kind::Number,
    },
    Setting {
        key: "job_nodes",
        env: "CKPTFS_JOB_NODES",
        flag: "-",
        default: || "1".into(),
        help: "nodes of the job (failure base rate)",
        kind: Kind::Count,
    },
    Setting {
        key: "predictor_precision",
        env: "CKPTFS_PREDICTOR_PRECISION",
        flag: "-",
        default: || "0.7".into(),
        help: "failure predictor precision (fraction of alarms followed by a failure)",
        kind: Kind::Number,
    },
    Setting {
        key: "predictor_recall",
        env: "CKPTFS_PREDICTOR_RECALL",
        flag: "-",
        default: || "0.7".into(),
        help: "failure predictor recall (fraction of failures preceded by an alarm)",
        kind: Kind::Number,
    },
    Setting {
        key: "failure_rule",
        env: "CKPTFS_FAILURE_RULE",
        flag: "-",
        default: || "posterior".into(),
        help: "failure probability from alarms: posterior (uses the base rate) or remem",
        kind: Kind::Text,
    },
    Setting {
        key: "pfs_bandwidth",
        env: "CKPTFS_PFS_BANDWIDTH",
        flag: "-",
        default: || "1073741824".into(),
        help: "PFS bandwidth per node in bytes/s until transfers have been measured",
        kind: Kind::Number,
    },
    // The node daemon (`ckptfs node`, crate ckptfs-node, docs/cluster.md): the `[daemon]`
    // section of the settings file; the flags are `ckptfs node`'s.
    Setting {
        key: "daemon.scan_interval",
        env: "CKPTFS_NODE_SCAN_INTERVAL",
        flag: "--interval",
        default: || "0.2".into(),
        help: "seconds between the daemon's scans of the store for files to copy to partners (at least 0.01)",
        kind: Kind::Seconds,
    },
    Setting {
        key: "daemon.writer_yield",
        env: "CKPTFS_NODE_WRITER_YIELD",
        flag: "--writer-yield",
        default: || "1".into(),
        help: "longest pause, seconds, of partner copies while an application writes into the store (0: never step back; at most 3600)",
        kind: Kind::Seconds,
    },
    Setting {
        key: "daemon.max_bw",
        env: "CKPTFS_NODE_MAX_BW",
        flag: "--max-bw",
        default: || "0".into(),
        help: "bandwidth cap of partner copies out, MB/s (0: none)",
        kind: Kind::Number,
    },
    Setting {
        key: "daemon.partner_max",
        env: "CKPTFS_NODE_PARTNER_MAX",
        flag: "--partner-max",
        default: || "50%".into(),
        help: "most memory this node gives to other nodes' copies: a size (K/M/G) or a share of the store's memory (N%)",
        kind: Kind::SizeOrShare,
    },
    Setting {
        key: "daemon.metrics",
        env: "CKPTFS_METRICS",
        flag: "--metrics",
        default: String::new,
        help: "serve Prometheus metrics of `ckptfs node` at http://HOST:PORT/metrics (empty: off)",
        kind: Kind::Text,
    },
];

/// A file section and the settings in it (`[daemon]` holds the `daemon.*` keys).
const SECTIONS: &[&str] = &["daemon"];

/// The row of `key`.
pub fn setting(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.key == key)
}

/// A bad setting or settings file. Every variant maps to EINVAL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// A value that does not parse or is out of range.
    #[error("setting {key} ({origin}): {problem}")]
    Invalid {
        /// The setting's key.
        key: &'static str,
        /// Where the value came from: `env CKPTFS_X`, `flag --x`, `file PATH`.
        origin: String,
        /// What is wrong, quoting the value.
        problem: String,
    },
    /// A key of the settings file that is not a setting.
    #[error("{file}: unknown setting {key:?} (known: {known})")]
    UnknownKey {
        /// The settings file.
        file: String,
        /// The unknown key.
        key: String,
        /// The known keys.
        known: String,
    },
    /// The settings file is not valid TOML.
    #[error("parsing settings file {file}: {msg}")]
    BadFile {
        /// The settings file.
        file: String,
        /// The parser's message.
        msg: String,
    },
}

impl SettingsError {
    /// The errno of every settings error: EINVAL.
    pub fn errno(&self) -> Errno {
        Errno::EINVAL
    }
}

/// One resolved row: key, value as text, source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The setting's key.
    pub key: &'static str,
    /// Its value as text (as given, or the default).
    pub value: String,
    /// Where it came from.
    pub source: Source,
}

/// The resolved store settings. Settings left at their default are `None` (not imposed
/// on an existing store); the store name is always set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreSettings {
    /// Store name (the default `u<UID>` when not given).
    pub name: String,
    /// Memory for file data, when given.
    pub mem_size: Option<u64>,
    /// Chunk size, when given.
    pub chunk_size: Option<u64>,
    /// Maximum files and directories, when given.
    pub max_files: Option<u32>,
    /// Directory of the segment file, when given and not the default `/dev/shm`.
    pub shm_dir: Option<PathBuf>,
    /// Spill directory, when given and not empty.
    pub spill_dir: Option<PathBuf>,
    /// Spill size, when given and not zero.
    pub spill_size: Option<u64>,
    /// One private segment per process.
    pub private: bool,
    /// Attach a segment owned by another user (root only, explicitly).
    pub allow_foreign_owner: bool,
    /// Bytes of free chunks to warm at attach (`u64::MAX`: all), when not zero.
    pub warm: Option<u64>,
}

/// How much memory a node daemon gives to other nodes' copies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PartnerMax {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this share (0 to 1) of the store's memory.
    Share(f64),
}

/// `SIZE` or `N%` (0 to 100).
pub fn parse_size_or_share(v: &str) -> Result<PartnerMax, String> {
    match v.trim().strip_suffix('%') {
        Some(p) => match p.trim().parse::<f64>() {
            Ok(x) if (0.0..=100.0).contains(&x) => Ok(PartnerMax::Share(x / 100.0)),
            _ => Err(format!("{v:?}: want a share from 0% to 100%")),
        },
        None => parse_size(v).map(PartnerMax::Bytes),
    }
}

fn number(v: &str) -> Option<f64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
}

/// The resolved `[daemon]` settings (`ckptfs node`).
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSettings {
    /// Seconds between scans of the store (at least 0.01).
    pub scan_interval: f64,
    /// Longest pause of partner copies for the application's writes, seconds (0: none).
    pub writer_yield: f64,
    /// Bandwidth cap of partner copies out, bytes per second (None: none).
    pub max_bw: Option<f64>,
    /// Memory given to other nodes' copies.
    pub partner_max: PartnerMax,
    /// Prometheus metrics address (None: off).
    pub metrics: Option<String>,
}

impl Default for DaemonSettings {
    fn default() -> Self {
        DaemonSettings {
            scan_interval: 0.2,
            writer_yield: 1.0,
            max_bw: None,
            partner_max: PartnerMax::Share(0.5),
            metrics: None,
        }
    }
}

/// Every setting resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Every row of [`SETTINGS`], in order: value and source.
    pub rows: Vec<Row>,
    /// The store settings.
    pub store: StoreSettings,
    /// The mount prefixes (normalised, at least one).
    pub mounts: Vec<String>,
    /// The `[daemon]` section.
    pub daemon: DaemonSettings,
}

/// The settings file: a name for messages and its TOML text.
#[derive(Debug, Clone, Copy)]
pub struct FileText<'a> {
    /// The file's path, for messages.
    pub name: &'a str,
    /// Its content.
    pub text: &'a str,
}

/// The sources of a resolution. No I/O happens here: the caller reads the environment
/// and the file.
pub struct Inputs<'a> {
    /// Flag values by setting key (None: not given).
    pub flags: &'a dyn Fn(&str) -> Option<String>,
    /// Environment lookup by variable name. Unset and blank variables are "not given".
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The settings file, if one is used.
    pub file: Option<FileText<'a>>,
}

fn file_values(f: FileText<'_>) -> Result<Vec<(String, String)>, SettingsError> {
    #[cfg(feature = "toml-file")]
    {
        let doc: toml::Table = f
            .text
            .parse()
            .map_err(|e: toml::de::Error| SettingsError::BadFile {
                file: f.name.to_string(),
                msg: e.to_string(),
            })?;
        let mut out = Vec::new();
        let mut flat = Vec::new();
        for (k, v) in doc {
            match v {
                toml::Value::Table(t) if SECTIONS.contains(&k.as_str()) => {
                    flat.extend(t.into_iter().map(|(k2, v2)| (format!("{k}.{k2}"), v2)))
                }
                v => flat.push((k, v)),
            }
        }
        for (k, v) in flat {
            if setting(&k).is_none() {
                let known: Vec<_> = SETTINGS.iter().map(|s| s.key).collect();
                return Err(SettingsError::UnknownKey {
                    file: f.name.to_string(),
                    key: k,
                    known: known.join(", "),
                });
            }
            let text = match v {
                toml::Value::String(s) => s,
                other => other.to_string(),
            };
            out.push((k, text));
        }
        Ok(out)
    }
    #[cfg(not(feature = "toml-file"))]
    {
        Err(SettingsError::BadFile {
            file: f.name.to_string(),
            msg: "built without settings-file support".into(),
        })
    }
}

/// Resolve every setting from flags, the environment and the settings file.
pub fn resolve(inp: &Inputs<'_>) -> Result<Settings, SettingsError> {
    let file = match inp.file {
        Some(f) => file_values(f)?,
        None => Vec::new(),
    };
    let mut rows = Vec::with_capacity(SETTINGS.len());
    for s in SETTINGS {
        let (value, source) = if let Some(v) = (inp.flags)(s.key) {
            (v, Source::Flag)
        } else if let Some(v) = (inp.env)(s.env).filter(|v| !v.trim().is_empty()) {
            (v, Source::Env)
        } else if let Some((_, v)) = file.iter().find(|(k, _)| k == s.key) {
            (v.clone(), Source::File)
        } else {
            ((s.default)(), Source::Default)
        };
        rows.push(Row {
            key: s.key,
            value,
            source,
        });
    }
    let file_name = inp.file.map(|f| f.name).unwrap_or("");
    let mut daemon = DaemonSettings::default();
    let mut st = StoreSettings::default();
    let mut mounts = Vec::new();
    for (s, row) in SETTINGS.iter().zip(&rows) {
        let bad = |problem: String| SettingsError::Invalid {
            key: s.key,
            origin: match row.source {
                Source::Flag => format!("flag {}", s.flag),
                Source::Env => format!("env {}", s.env),
                Source::File => format!("file {file_name}"),
                Source::Default => "default".into(),
            },
            problem,
        };
        let explicit = row.source != Source::Default;
        let v = row.value.as_str();
        match s.kind {
            Kind::StoreName => {
                check_store_name(v).map_err(bad)?;
                st.name = v.to_string();
            }
            Kind::Size if s.key == "warm" && v.trim() == "all" => st.warm = Some(u64::MAX),
            Kind::Size => {
                let n = parse_store_size(v)
                    .map_err(|e| {
                        if s.key == "warm" {
                            format!("{e} (a size, or `all`)")
                        } else {
                            e
                        }
                    })
                    .map_err(bad)?;
                match s.key {
                    "mem_size" => st.mem_size = explicit.then_some(n),
                    "warm" => st.warm = (n > 0).then_some(n),
                    _ => st.spill_size = (explicit && n > 0).then_some(n),
                }
            }
            Kind::ChunkSize => {
                let n = parse_size(v).map_err(bad)?;
                if !n.is_power_of_two() || !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&n) {
                    return Err(bad(format!(
                        "{v:?} is out of range (a power of two from 64K to 64M)"
                    )));
                }
                st.chunk_size = explicit.then_some(n);
            }
            Kind::FileCount => {
                let n = parse_count(v, 2, MAX_MAX_FILES).map_err(bad)?;
                st.max_files = explicit.then_some(n as u32);
            }
            Kind::Dir => {
                let dir = (explicit && !v.is_empty()).then(|| PathBuf::from(v));
                match s.key {
                    "shm_dir" => {
                        if let Some(d) = &dir {
                            if !d.is_absolute() {
                                return Err(bad(format!("{v:?} is not an absolute path")));
                            }
                        }
                        st.shm_dir = dir.filter(|d| d != std::path::Path::new(DEFAULT_SHM_DIR));
                    }
                    _ => st.spill_dir = dir,
                }
            }
            Kind::Bool => {
                let b = parse_bool(v).map_err(bad)?;
                match s.key {
                    "allow_foreign_owner" => st.allow_foreign_owner = b,
                    _ => st.private = b,
                }
            }
            Kind::Prefixes => mounts = parse_prefixes(v).map_err(bad)?,
            Kind::Text => {}
            Kind::Count => {
                parse_count(v, 0, u32::MAX as u64).map_err(bad)?;
            }
            Kind::Number => {
                let x = number(v).ok_or_else(|| bad(format!("{v:?} is not a non-negative number")))?;
                if s.key == "daemon.max_bw" {
                    daemon.max_bw = (x > 0.0).then_some(x * 1e6);
                }
            }
            Kind::Seconds => {
                let x = number(v)
                    .filter(|x| *x <= 3600.0)
                    .ok_or_else(|| bad(format!("{v:?} is not a number of seconds from 0 to 3600")))?;
                match s.key {
                    "daemon.scan_interval" => daemon.scan_interval = x.max(0.01),
                    _ => daemon.writer_yield = x,
                }
            }
            Kind::SizeOrShare => daemon.partner_max = parse_size_or_share(v).map_err(bad)?,
        }
        if s.key == "daemon.metrics" {
            daemon.metrics = Some(v.trim().to_string()).filter(|m| !m.is_empty());
        }
    }
    Ok(Settings {
        rows,
        store: st,
        mounts,
        daemon,
    })
}

/// Resolve from the environment alone (no flags, no settings file): what the C API and
/// the shim do.
pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
    resolve(&Inputs {
        flags: &|_| None,
        env,
        file: None,
    })
}

impl Settings {
    /// The row of `key`.
    pub fn row(&self, key: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.key == key)
    }

    /// Environment variables that pass these settings on to a child (e.g. the preload
    /// shim): every explicit setting, plus the store name and the mount prefixes.
    pub fn child_env(&self) -> Vec<(&'static str, String)> {
        SETTINGS
            .iter()
            .zip(&self.rows)
            .filter(|(s, row)| row.source != Source::Default || s.key == "store" || s.key == "mount")
            .map(|(s, row)| (s.env, row.value.clone()))
            .collect()
    }

    /// The resolved values as one JSON object (the same text from every front-end:
    /// `ckptfs config --json` shows it as `resolved`, the C API's `ckptfs_settings` and
    /// the shim's `ckptfs_preload_settings` return it). Settings left at their default
    /// are `null`.
    pub fn to_json(&self) -> String {
        let st = &self.store;
        let num = |v: Option<u64>| v.map_or("null".to_string(), |n| n.to_string());
        let mounts: Vec<String> = self.mounts.iter().map(|m| json_str(m)).collect();
        format!(
            "{{\"store\":{},\"mem_size\":{},\"chunk_size\":{},\"max_files\":{},\"shm_dir\":{},\"spill_dir\":{},\"spill_size\":{},\"private\":{},\"allow_foreign_owner\":{},\"mount\":[{}]}}",
            json_str(&st.name),
            num(st.mem_size),
            num(st.chunk_size),
            num(st.max_files.map(u64::from)),
            st.shm_dir
                .as_ref()
                .map_or("null".to_string(), |p| json_str(&p.to_string_lossy())),
            st.spill_dir
                .as_ref()
                .map_or("null".to_string(), |p| json_str(&p.to_string_lossy())),
            num(st.spill_size),
            st.private,
            st.allow_foreign_owner,
            mounts.join(",")
        )
    }
}

/// `s` as a JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[cfg(feature = "toml-file")]
    #[test]
    fn daemon_section_precedence_flag_env_file_default() {
        let text = "[daemon]\nwriter_yield = 0.5\nscan_interval = 0.3\nmax_bw = 100\npartner_max = \"8M\"\n";
        let env = env_of(&[
            ("CKPTFS_NODE_SCAN_INTERVAL", "0.4"),
            ("CKPTFS_NODE_MAX_BW", "200"),
        ]);
        let flags = |k: &str| (k == "daemon.max_bw").then(|| "300".to_string());
        let s = resolve(&Inputs {
            flags: &flags,
            env: &env,
            file: Some(FileText { name: "c.toml", text }),
        })
        .unwrap();
        let d = &s.daemon;
        assert_eq!(d.writer_yield, 0.5, "file");
        assert_eq!(d.scan_interval, 0.4, "env beats the file");
        assert_eq!(d.max_bw, Some(300e6), "the flag beats both (MB/s)");
        assert_eq!(d.partner_max, PartnerMax::Bytes(8 << 20));
        assert_eq!(d.metrics, None);
        assert_eq!(s.row("daemon.max_bw").unwrap().source, Source::Flag);
        let d = from_env(&|_| None).unwrap().daemon;
        assert_eq!(d, DaemonSettings::default());
        assert_eq!(d.partner_max, PartnerMax::Share(0.5));
        // Out of range and unknown keys are errors naming them.
        let e = from_env(&|k| (k == "CKPTFS_NODE_WRITER_YIELD").then(|| "3601".into())).unwrap_err();
        assert!(e.to_string().contains("CKPTFS_NODE_WRITER_YIELD"), "{e}");
        let e = from_env(&|k| (k == "CKPTFS_NODE_PARTNER_MAX").then(|| "101%".into())).unwrap_err();
        assert!(e.to_string().contains("daemon.partner_max"), "{e}");
        let e = resolve(&Inputs {
            flags: &|_| None,
            env: &|_| None,
            file: Some(FileText {
                name: "c.toml",
                text: "[daemon]\nwriter_yeild = 1\n",
            }),
        })
        .unwrap_err();
        assert!(e.to_string().contains("daemon.writer_yeild"), "{e}");
    }

    #[test]
    fn precedence_flag_env_file_default() {
        let env = env_of(&[("CKPTFS_STORE", "fromenv"), ("CKPTFS_MEM_SIZE", "32M")]);
        let flags = |k: &str| (k == "store").then(|| "fromflag".to_string());
        let s = resolve(&Inputs {
            flags: &flags,
            env: &env,
            file: Some(FileText {
                name: "c.toml",
                text: "store = \"fromfile\"\nmem_size = \"64M\"\nchunk_size = \"128K\"\nprivate = true\n",
            }),
        })
        .unwrap();
        assert_eq!(s.store.name, "fromflag");
        assert_eq!(s.store.mem_size, Some(32 << 20));
        assert_eq!(s.store.chunk_size, Some(128 << 10));
        assert_eq!(s.store.max_files, None, "defaults are not imposed");
        assert!(s.store.private);
        let src: Vec<_> = s.rows.iter().map(|r| r.source).collect();
        assert_eq!(
            &src[..4],
            [Source::Flag, Source::Env, Source::File, Source::Default]
        );
        assert_eq!(s.mounts, ["/ckpt"]);
    }

    #[test]
    fn warm_is_a_size_or_all() {
        let warm = |v: &str| from_env(&env_of(&[("CKPTFS_WARM", v)])).map(|s| s.store.warm);
        assert_eq!(warm("all").unwrap(), Some(u64::MAX));
        assert_eq!(warm("64M").unwrap(), Some(64 << 20));
        assert_eq!(warm("0").unwrap(), None);
        assert_eq!(from_env(&env_of(&[])).unwrap().store.warm, None);
        let e = warm("lots").unwrap_err().to_string();
        assert!(e.contains("CKPTFS_WARM") && e.contains("`all`"), "{e}");
    }

    #[test]
    fn blank_variables_are_not_given() {
        let s = from_env(&env_of(&[("CKPTFS_MEM_SIZE", "  "), ("CKPTFS_PRIVATE", "")])).unwrap();
        assert_eq!(s.store.mem_size, None);
        assert!(!s.store.private);
        assert_eq!(s.store.name, default_store_name());
    }

    #[test]
    fn errors_name_the_setting_and_the_variable() {
        for (var, val, words) in [
            ("CKPTFS_MAX_FILES", "abc", "not a number"),
            ("CKPTFS_MAX_FILES", "1", "out of range"),
            ("CKPTFS_MEM_SIZE", "1e30", "out of range"),
            ("CKPTFS_MEM_SIZE", "65T", "out of range"),
            ("CKPTFS_CHUNK_SIZE", "100K", "power of two"),
            ("CKPTFS_PRIVATE", "maybe", "not a boolean"),
            ("CKPTFS_STORE", ".", "store name"),
            ("CKPTFS_STORE", "..", "store name"),
            ("CKPTFS_STORE", "a/b", "store name"),
            ("CKPTFS_MOUNT", "rel", "absolute"),
        ] {
            let e = from_env(&env_of(&[(var, val)])).unwrap_err();
            let key = SETTINGS.iter().find(|s| s.env == var).unwrap().key;
            let m = e.to_string();
            assert!(
                m.contains(var) && m.contains(key) && m.contains(words),
                "{var}={val}: {m}"
            );
            assert_eq!(e.errno(), Errno::EINVAL);
        }
    }

    #[test]
    fn file_errors_name_the_file() {
        let bad = |text: &str| {
            resolve(&Inputs {
                flags: &|_| None,
                env: &|_| None,
                file: Some(FileText { name: "x.toml", text }),
            })
            .unwrap_err()
            .to_string()
        };
        assert!(bad("colour = 1\n").contains("unknown setting"));
        assert!(bad("mem_size = \n").contains("x.toml"));
        let e = bad("max_files = \"lots\"\n");
        assert!(e.contains("file x.toml") && e.contains("max_files"), "{e}");
    }

    #[test]
    fn json_summary_and_child_env() {
        let s = from_env(&env_of(&[
            ("CKPTFS_STORE", "j\"1"),
            ("CKPTFS_MAX_FILES", "100"),
            ("CKPTFS_PRIVATE", "yes"),
        ]));
        assert!(s.is_err(), "a quote is not allowed in a store name");
        let s = from_env(&env_of(&[
            ("CKPTFS_STORE", "j1"),
            ("CKPTFS_MAX_FILES", "100"),
            ("CKPTFS_PRIVATE", "yes"),
            ("CKPTFS_SPILL_DIR", "/tmp/a\"b"),
        ]))
        .unwrap();
        assert_eq!(
            s.to_json(),
            r#"{"store":"j1","mem_size":null,"chunk_size":null,"max_files":100,"shm_dir":null,"spill_dir":"/tmp/a\"b","spill_size":null,"private":true,"allow_foreign_owner":false,"mount":["/ckpt"]}"#
        );
        let env = s.child_env();
        assert!(env.contains(&("CKPTFS_PRIVATE", "yes".into())));
        assert!(env.contains(&("CKPTFS_MOUNT", "/ckpt".into())));
        assert!(!env.iter().any(|(k, _)| *k == "CKPTFS_MEM_SIZE"));
    }
}
