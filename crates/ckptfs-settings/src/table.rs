//! The settings table and its resolution: every store setting is a CLI flag, an
//! environment variable `CKPTFS_*` and a key of a TOML file, with precedence
//! flags > env > file > defaults.
//!
//! A setting left at its default is not imposed on an existing store: the resolved
//! [`StoreSettings`] carries `None` for it, and attaching accepts whatever the segment
//! was created with. A setting given explicitly (by any source) must match.

use crate::daemon::{parse_size_or_share, DaemonSettings};
use crate::levels::{parse_order, with_options, LevelsSettings};
use crate::parse::{
    check_store_name, json_str, parse_bool, parse_count, parse_prefixes, parse_size, parse_store_size,
};
use crate::rows::{Kind, DEFAULT_SHM_DIR, MAX_CHUNK_SIZE, MAX_MAX_FILES, MIN_CHUNK_SIZE, SETTINGS};
use crate::types::Errno;
use std::collections::BTreeMap;
use std::path::PathBuf;

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

/// A file section and the settings in it (`[daemon]` holds the `daemon.*` keys,
/// `[levels]` the `levels.*` keys and one options table per level).
#[cfg(feature = "toml-file")]
const SECTIONS: &[&str] = &["daemon", "levels"];

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
    /// A `[levels."ID"]` options table that is refused.
    #[error("{file}: [levels.{id:?}]: {problem}")]
    LevelOptions {
        /// The settings file.
        file: String,
        /// The level id of the table.
        id: String,
        /// What is wrong (never an option's value).
        problem: String,
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

fn number(v: &str) -> Option<f64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
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
    /// The `[levels]` section.
    pub levels: LevelsSettings,
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

/// Level option tables of the file: `(level id, options)`.
type LevelTables = Vec<(String, BTreeMap<String, String>)>;

/// The file's values by setting key, and its `[levels."ID"]` tables.
fn file_values(f: FileText<'_>) -> Result<(Vec<(String, String)>, LevelTables), SettingsError> {
    #[cfg(feature = "toml-file")]
    {
        let doc: toml::Table = f
            .text
            .parse()
            .map_err(|e: toml::de::Error| SettingsError::BadFile {
                file: f.name.to_string(),
                msg: e.to_string(),
            })?;
        let text_of = |v: toml::Value| match v {
            toml::Value::String(s) => s,
            other => other.to_string(),
        };
        let mut out = Vec::new();
        let mut flat = Vec::new();
        let mut tables = Vec::new();
        for (k, v) in doc {
            match v {
                toml::Value::Table(t) if SECTIONS.contains(&k.as_str()) => {
                    for (k2, v2) in t {
                        match v2 {
                            // `[levels."s3:bucket/prefix"]`: one level's options.
                            toml::Value::Table(opts) if k == "levels" => {
                                let mut o = BTreeMap::new();
                                for (ok, ov) in opts {
                                    if matches!(ov, toml::Value::Table(_) | toml::Value::Array(_)) {
                                        return Err(SettingsError::LevelOptions {
                                            file: f.name.to_string(),
                                            id: k2,
                                            problem: format!(
                                                "option {ok:?} is not a string, number or boolean"
                                            ),
                                        });
                                    }
                                    o.insert(ok, text_of(ov));
                                }
                                tables.push((k2, o));
                            }
                            // `order = ["local", "s3:b/p"]`: the ids, as the variable
                            // writes them.
                            toml::Value::Array(a) if k == "levels" => {
                                let ids: Vec<String> = a.into_iter().map(text_of).collect();
                                flat.push((format!("{k}.{k2}"), toml::Value::String(ids.join(","))));
                            }
                            v2 => flat.push((format!("{k}.{k2}"), v2)),
                        }
                    }
                }
                v => flat.push((k, v)),
            }
        }
        for (k, v) in flat {
            if crate::rows::setting(&k).is_none() {
                let known: Vec<_> = SETTINGS.iter().map(|s| s.key).collect();
                return Err(SettingsError::UnknownKey {
                    file: f.name.to_string(),
                    key: k,
                    known: known.join(", "),
                });
            }
            out.push((k, text_of(v)));
        }
        Ok((out, tables))
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
    let (file, level_tables) = match inp.file {
        Some(f) => file_values(f)?,
        None => (Vec::new(), Vec::new()),
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
    let mut levels = LevelsSettings::default();
    let mut level_tables = Some(level_tables);
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
            Kind::Levels => {
                let order = parse_order(v).map_err(bad)?;
                let mut tables = level_tables.take().unwrap_or_default();
                // An order from the environment or a flag replaces the file's: its
                // tables of levels not listed then stay unused rather than refused.
                if matches!(row.source, Source::Env | Source::Flag) {
                    let ids: Vec<String> = order.iter().map(|e| e.id()).collect();
                    tables.retain(|(id, _)| ids.contains(id));
                }
                levels =
                    with_options(order, tables).map_err(|(id, problem)| SettingsError::LevelOptions {
                        file: file_name.to_string(),
                        id,
                        problem,
                    })?;
            }
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
        levels,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::PartnerMax;
    use crate::rows::default_store_name;
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

    #[cfg(feature = "toml-file")]
    #[test]
    fn levels_section_order_options_and_precedence() {
        let text = "[levels]\norder = [\"local\", \"partner\", \"s3:lv3-bkt/run1\", \"pfs\"]\n\n[levels.\"s3:lv3-bkt/run1\"]\nendpoint = \"http://127.0.0.1:46301\"\nconcurrency = 2\n";
        let file = Some(FileText { name: "c.toml", text });
        let s = resolve(&Inputs {
            flags: &|_| None,
            env: &|_| None,
            file,
        })
        .unwrap();
        let ids: Vec<String> = s.levels.order.iter().map(|e| e.id()).collect();
        assert_eq!(ids, ["local", "partner", "s3:lv3-bkt/run1", "pfs"]);
        assert_eq!(s.levels.order[2].options["endpoint"], "http://127.0.0.1:46301");
        assert_eq!(s.levels.order[2].options["concurrency"], "2");
        let row = s.row("levels.order").unwrap();
        assert_eq!(
            (row.value.as_str(), row.source),
            ("local,partner,s3:lv3-bkt/run1,pfs", Source::File)
        );
        // The variable beats the file; its order keeps the options of the levels it lists.
        let env = env_of(&[("CKPTFS_LEVELS", "local,s3:lv3-bkt/run1")]);
        let s = resolve(&Inputs {
            flags: &|_| None,
            env: &env,
            file,
        })
        .unwrap();
        assert_eq!(s.levels.order.len(), 2);
        assert_eq!(s.levels.order[1].options["endpoint"], "http://127.0.0.1:46301");
        assert!(!s.levels.reads("pfs"));
        // The flag beats both.
        let flags = |k: &str| (k == "levels.order").then(|| "local,pfs".to_string());
        let s = resolve(&Inputs {
            flags: &flags,
            env: &env,
            file,
        })
        .unwrap();
        assert_eq!(s.levels.order.len(), 2);
        assert_eq!(s.row("levels.order").unwrap().source, Source::Flag);
        // The default is today's order.
        assert_eq!(
            from_env(&|_| None).unwrap().levels,
            crate::LevelsSettings::default()
        );
        // Errors name the entry and where it came from; an options table for a level not
        // listed names the table; a credential option is refused without its value.
        let e = from_env(&env_of(&[("CKPTFS_LEVELS", "local,s3:x")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("CKPTFS_LEVELS") && e.contains("\"s3:x\"") && e.contains("bucket"),
            "{e}"
        );
        let bad = |text: &str| {
            resolve(&Inputs {
                flags: &|_| None,
                env: &|_| None,
                file: Some(FileText { name: "c.toml", text }),
            })
            .unwrap_err()
            .to_string()
        };
        let e = bad("[levels]\norder = [\"local\", \"pfs:rel\"]\n");
        assert!(
            e.contains("file c.toml") && e.contains("\"pfs:rel\"") && e.contains("absolute"),
            "{e}"
        );
        let e = bad("[levels.\"s3:lv3-other/x\"]\nendpoint = \"http://h\"\n");
        assert!(
            e.contains("c.toml") && e.contains("s3:lv3-other/x") && e.contains("not in levels.order"),
            "{e}"
        );
        let e = bad("[levels]\norder = [\"local\", \"s3:lv3-b/p\"]\n[levels.\"s3:lv3-b/p\"]\nsecret_access_key = \"SEKRIT\"\n");
        assert!(e.contains("credential") && !e.contains("SEKRIT"), "{e}");
        let e = bad("[levels]\nordre = \"local\"\n");
        assert!(e.contains("unknown setting") && e.contains("levels.ordre"), "{e}");
    }
}
