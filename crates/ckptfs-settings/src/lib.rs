//! # ckptfs-settings: one settings layer for every front-end
//!
//! The settings table (keys, `CKPTFS_*` variables, flags, defaults, sources and their
//! precedence flags > env > file > defaults), the parsing of its values (sizes, booleans,
//! counts, prefixes, store names), lexical path normalisation, `now_ns`, and the types
//! the levels above the node store share ([`NodeId`], [`Rank`], [`Level`],
//! [`DatasetId`], [`Errno`]); the job identity and the other variables a process reads
//! besides the table ([`job`]); the `[levels]` section, the levels a restore reads in
//! read order ([`levels`]).
//!
//! The CLI, the C API and the LD_PRELOAD shim all resolve their settings here, so a
//! value means the same thing everywhere. The crate does no I/O: callers pass the
//! environment as a lookup function and the settings file as text. It runs no code at
//! load time and allocates only while resolving, so the shim can call it lazily from
//! its first intercepted call.
//!
//! ```
//! use ckptfs_settings::{from_env, Source};
//! let s = from_env(&|k| (k == "CKPTFS_PRIVATE").then(|| "yes".to_string())).unwrap();
//! assert!(s.store.private);
//! assert_eq!(s.row("private").unwrap().source, Source::Env);
//! let e = from_env(&|k| (k == "CKPTFS_MAX_FILES").then(|| "abc".to_string())).unwrap_err();
//! assert!(e.to_string().contains("CKPTFS_MAX_FILES"));
//! ```
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod daemon;
pub mod job;
pub mod levels;
pub mod parse;
pub mod path;
mod rows;
mod table;
pub mod types;

pub use daemon::{parse_size_or_share, DaemonSettings, PartnerMax};
pub use levels::{LevelEntry, LevelsSettings};
pub use parse::{
    check_store_name, json_str, parse_bool, parse_count, parse_prefixes, parse_size, parse_store_size,
    MAX_SIZE,
};
pub use rows::{
    default_store_name, setting, Kind, Setting, BYTES_PER_FILE, CONFIG_ENV, DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_FILES, DEFAULT_MEM_SIZE, DEFAULT_SHM_DIR, MAX_CHUNK_SIZE, MAX_MAX_FILES, MIN_CHUNK_SIZE,
    SETTINGS,
};
pub use table::{from_env, resolve, FileText, Inputs, Row, Settings, SettingsError, Source, StoreSettings};
pub use types::{DatasetId, Errno, Level, NodeId, Rank};

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
