//! The settings table itself: every setting's key, environment variable, flag, default,
//! help text and kind ([`SETTINGS`]), and the defaults and ranges the rows use. How the
//! rows are resolved is `table.rs`; the `[daemon]` and `[levels]` sections' own types are
//! in `daemon.rs` and `levels.rs`.

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

/// What kind of value a setting holds (how it is parsed and range-checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A store name ([`crate::check_store_name`]).
    StoreName,
    /// A size in bytes, at most [`crate::MAX_SIZE`].
    Size,
    /// A chunk size: a power of two from 64 KiB to 64 MiB.
    ChunkSize,
    /// A count from 2 to [`MAX_MAX_FILES`].
    FileCount,
    /// A directory path (empty: none).
    Dir,
    /// A boolean ([`crate::parse_bool`]).
    Bool,
    /// Colon-separated absolute path prefixes ([`crate::parse_prefixes`]).
    Prefixes,
    /// Free text checked by the crate that uses it (the dataset rules, `ckptfs-datasets`).
    Text,
    /// A non-negative whole number (counts of datasets).
    Count,
    /// A non-negative decimal number (seconds, probabilities, bytes per second).
    Number,
    /// Seconds: a decimal number from 0 to 3600.
    Seconds,
    /// A size ([`crate::parse_size`]) or a share of memory `N%` (0 to 100).
    SizeOrShare,
    /// Level ids in read order, comma-separated (the `[levels]` section: `crate::levels`).
    Levels,
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
    // The levels a restore reads, in read order (crate ckptfs-level's registry,
    // docs/design.md "The [levels] section"): the `[levels]` section of the settings
    // file, `order = [...]`, with one table of options per level.
    Setting {
        key: "levels.order",
        env: "CKPTFS_LEVELS",
        flag: "--levels",
        default: || crate::levels::DEFAULT_LEVELS.into(),
        help: "levels a restore and a restart read, in read order: comma-separated level ids (local first, then partner; then pfs (the drain destinations), pfs:/DIR, s3:BUCKET/PREFIX, dir:/DIR, pool:MANAGER in any order); options per level in the file's [levels.\"ID\"] tables",
        kind: Kind::Levels,
    },
];

/// The row of `key`.
pub fn setting(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.key == key)
}
