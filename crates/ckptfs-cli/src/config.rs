//! The settings table: every store setting is a CLI flag, an environment variable
//! `CKPTFS_*` and a key of a TOML file, with precedence flags > env > file > defaults.
//! `ckptfs config` prints the effective value of each and where it came from.
//!
//! A setting left at its default is not imposed on an existing store: attaching accepts
//! whatever the segment was created with. A setting given explicitly (by any source)
//! must match, or attaching fails with a clear error.

use anyhow::{bail, Context, Result};
use ckptfs_store::{
    default_store_name, StoreOptions, DEFAULT_CHUNK_SIZE, DEFAULT_MAX_FILES, DEFAULT_MEM_SIZE,
};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub use ckptfs_bench::store::parse_size;

/// Store flags accepted by every subcommand.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Store settings (any subcommand)")]
pub struct StoreArgs {
    /// Store name: the segment is /dev/shm/ckptfs.NAME [env CKPTFS_STORE; default u<UID>]
    #[arg(long, global = true, value_name = "NAME")]
    pub store: Option<String>,
    /// Memory for file data, fixed at creation (K/M/G) [env CKPTFS_MEM_SIZE; default 1G]
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size)]
    pub mem_size: Option<u64>,
    /// Chunk size, a power of two from 64K to 64M [env CKPTFS_CHUNK_SIZE; default 1M]
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size)]
    pub chunk_size: Option<u64>,
    /// Maximum files and directories [env CKPTFS_MAX_FILES; default 4096]
    #[arg(long, global = true, value_name = "N")]
    pub max_files: Option<u32>,
    /// Directory for the spill file used when memory is full [env CKPTFS_SPILL_DIR]
    #[arg(long, global = true, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Size of the spill file (K/M/G) [env CKPTFS_SPILL_SIZE; default 0 = no spill]
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size)]
    pub spill_size: Option<u64>,
    /// One private segment per process (NAME.RANK) instead of one per node [env CKPTFS_PRIVATE]
    #[arg(long, global = true)]
    pub private: bool,
    /// Path prefix(es) served by the store in `ckptfs run`, colon-separated [env CKPTFS_MOUNT; default /ckpt]
    #[arg(long, global = true, value_name = "PREFIX[:PREFIX]")]
    pub mount: Option<String>,
    /// TOML settings file [env CKPTFS_CONFIG; default ~/.config/ckptfs/config.toml if it exists]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The node this command acts for, in a cluster (global options).
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Cluster (any subcommand)")]
pub struct ClusterArgs {
    /// Cluster file: with --node-id, every store command acts on that node's store (the
    /// file names each node's store) [env CKPTFS_CLUSTER]
    #[arg(long, global = true, value_name = "FILE", env = "CKPTFS_CLUSTER")]
    pub cluster: Option<PathBuf>,
    /// This node's id (in the cluster file; also the drain's placement and manifest
    /// name) [env CKPTFS_NODE_ID; default: the host name]
    #[arg(long, global = true, value_name = "ID", env = "CKPTFS_NODE_ID")]
    pub node_id: Option<String>,
}

/// Where a setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
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
}

/// The table. Keep in sync with `StoreArgs` (tested).
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "store",
        env: "CKPTFS_STORE",
        flag: "--store",
        default: default_store_name,
        help: "store name",
    },
    Setting {
        key: "mem_size",
        env: "CKPTFS_MEM_SIZE",
        flag: "--mem-size",
        default: || DEFAULT_MEM_SIZE.to_string(),
        help: "memory for file data (bytes)",
    },
    Setting {
        key: "chunk_size",
        env: "CKPTFS_CHUNK_SIZE",
        flag: "--chunk-size",
        default: || DEFAULT_CHUNK_SIZE.to_string(),
        help: "chunk size (bytes)",
    },
    Setting {
        key: "max_files",
        env: "CKPTFS_MAX_FILES",
        flag: "--max-files",
        default: || DEFAULT_MAX_FILES.to_string(),
        help: "maximum files and directories",
    },
    Setting {
        key: "spill_dir",
        env: "CKPTFS_SPILL_DIR",
        flag: "--spill-dir",
        default: String::new,
        help: "spill file directory",
    },
    Setting {
        key: "spill_size",
        env: "CKPTFS_SPILL_SIZE",
        flag: "--spill-size",
        default: || "0".into(),
        help: "spill file size (bytes)",
    },
    Setting {
        key: "private",
        env: "CKPTFS_PRIVATE",
        flag: "--private",
        default: || "false".into(),
        help: "private segment per process",
    },
    Setting {
        key: "mount",
        env: "CKPTFS_MOUNT",
        flag: "--mount",
        default: || "/ckpt".into(),
        help: "path prefixes served by `ckptfs run`",
    },
];

/// Resolved settings handed to every command.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// Store options (explicit settings are `Some`).
    pub store: StoreOptions,
    /// Prefixes for the preload shim.
    pub mounts: Vec<PathBuf>,
    /// The settings file used, if any.
    pub config_file: Option<PathBuf>,
    /// Every setting: (key, value, source).
    pub table: Vec<(&'static str, String, Source)>,
    /// The cluster file, if given.
    pub cluster: Option<ckptfs_cluster::Cluster>,
    /// This node's id, if given.
    pub node_id: Option<String>,
}

fn default_config_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    let p = base.join("ckptfs").join("config.toml");
    p.exists().then_some(p)
}

fn flag_value(a: &StoreArgs, key: &str) -> Option<String> {
    match key {
        "store" => a.store.clone(),
        "mem_size" => a.mem_size.map(|v| v.to_string()),
        "chunk_size" => a.chunk_size.map(|v| v.to_string()),
        "max_files" => a.max_files.map(|v| v.to_string()),
        "spill_dir" => a.spill_dir.as_ref().map(|p| p.display().to_string()),
        "spill_size" => a.spill_size.map(|v| v.to_string()),
        "private" => a.private.then(|| "true".to_string()),
        "mount" => a.mount.clone(),
        _ => None,
    }
}

fn toml_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Ctx {
    /// Resolve all settings from flags, the environment and the settings file.
    pub fn resolve(args: &StoreArgs) -> Result<Ctx> {
        Self::resolve_with(args, &|k| std::env::var(k).ok())
    }

    /// As [`Ctx::resolve`], with an injectable environment (for tests).
    pub fn resolve_with(args: &StoreArgs, env: &dyn Fn(&str) -> Option<String>) -> Result<Ctx> {
        let config_file = args
            .config
            .clone()
            .or_else(|| env("CKPTFS_CONFIG").filter(|s| !s.is_empty()).map(PathBuf::from))
            .or_else(default_config_file);
        let mut file: BTreeMap<String, String> = BTreeMap::new();
        if let Some(p) = &config_file {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading settings file {}", p.display()))?;
            let doc: toml::Table = text
                .parse()
                .with_context(|| format!("parsing settings file {}", p.display()))?;
            for (k, v) in doc {
                if !SETTINGS.iter().any(|s| s.key == k) {
                    let keys: Vec<_> = SETTINGS.iter().map(|s| s.key).collect();
                    bail!(
                        "{}: unknown setting {k:?} (known: {})",
                        p.display(),
                        keys.join(", ")
                    );
                }
                file.insert(k, toml_text(&v));
            }
        }
        let mut table = Vec::new();
        for s in SETTINGS {
            let (v, src) = if let Some(v) = flag_value(args, s.key) {
                (v, Source::Flag)
            } else if let Some(v) = env(s.env).filter(|v| !v.is_empty()) {
                (v, Source::Env)
            } else if let Some(v) = file.get(s.key) {
                (v.clone(), Source::File)
            } else {
                ((s.default)(), Source::Default)
            };
            table.push((s.key, v, src));
        }
        let get = |k: &str| {
            table
                .iter()
                .find(|r| r.0 == k)
                .map(|r| (r.1.clone(), r.2))
                .unwrap()
        };
        let explicit = |k: &str| {
            let (v, src) = get(k);
            (src != Source::Default).then_some(v)
        };
        let size = |k: &str| -> Result<Option<u64>> {
            explicit(k)
                .map(|v| parse_size(&v).map_err(|e| anyhow::anyhow!("setting {k}: {e}")))
                .transpose()
        };
        let private = match get("private").0.as_str() {
            "1" | "true" | "yes" | "on" => true,
            "0" | "false" | "no" | "off" | "" => false,
            other => bail!("setting private: {other:?} is not a boolean (true/false)"),
        };
        let store = StoreOptions {
            name: get("store").0,
            mem_size: size("mem_size")?,
            chunk_size: size("chunk_size")?,
            max_files: explicit("max_files")
                .map(|v| {
                    v.parse()
                        .map_err(|_| anyhow::anyhow!("setting max_files: {v:?} is not a number"))
                })
                .transpose()?,
            spill_dir: explicit("spill_dir").filter(|s| !s.is_empty()).map(PathBuf::from),
            spill_size: size("spill_size")?.filter(|&s| s > 0),
            private,
        };
        let mounts = get("mount")
            .0
            .split(':')
            .filter(|s| !s.is_empty())
            .map(|s| {
                if !s.starts_with('/') {
                    bail!("setting mount: prefix {s:?} must be an absolute path");
                }
                Ok(PathBuf::from(s.trim_end_matches('/')))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Ctx {
            store,
            mounts,
            config_file,
            table,
            cluster: None,
            node_id: None,
        })
    }

    /// Apply `--cluster` / `--node-id`: with both, the store is that node's store from
    /// the cluster file (an explicit `--store`/`CKPTFS_STORE` naming another is an error).
    pub fn with_cluster(mut self, args: &ClusterArgs) -> Result<Ctx> {
        self.node_id = args.node_id.clone().filter(|s| !s.is_empty());
        let Some(path) = args.cluster.as_ref().filter(|p| !p.as_os_str().is_empty()) else {
            return Ok(self);
        };
        let cluster = ckptfs_cluster::Cluster::load(path)
            .with_context(|| format!("cluster file {}", path.display()))?;
        if let Some(id) = &self.node_id {
            let node = cluster
                .node(id)
                .with_context(|| format!("node {id} in {}", path.display()))?;
            let row = self.table.iter_mut().find(|r| r.0 == "store").expect("store row");
            if row.2 != Source::Default && row.1 != node.store {
                bail!(
                    "--store {} conflicts with node {id}'s store {} in {}",
                    row.1,
                    node.store,
                    path.display()
                );
            }
            row.1 = node.store.clone();
            self.store.name = node.store.clone();
        }
        self.cluster = Some(cluster);
        Ok(self)
    }

    /// The cluster file and this node's id, or an error naming what is missing.
    pub fn cluster_node(&self) -> Result<(&ckptfs_cluster::Cluster, &str)> {
        match (&self.cluster, &self.node_id) {
            (Some(c), Some(n)) => Ok((c, n.as_str())),
            (None, _) => bail!("needs --cluster FILE (or CKPTFS_CLUSTER)"),
            (_, None) => bail!("needs --node-id ID (or CKPTFS_NODE_ID)"),
        }
    }

    /// Environment variables that pass these settings on to a child (e.g. the preload shim).
    pub fn child_env(&self) -> Vec<(&'static str, String)> {
        SETTINGS
            .iter()
            .zip(&self.table)
            .filter(|(s, row)| row.2 != Source::Default || s.key == "store" || s.key == "mount")
            .map(|(s, row)| (s.env, row.1.clone()))
            .collect()
    }
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

    #[test]
    fn precedence_flag_env_file_default() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "store = \"fromfile\"\nmem_size = \"64M\"\nchunk_size = \"128K\"\n",
        )
        .unwrap();
        let args = StoreArgs {
            store: Some("fromflag".into()),
            config: Some(f),
            ..Default::default()
        };
        let ctx = Ctx::resolve_with(
            &args,
            &env_of(&[("CKPTFS_STORE", "fromenv"), ("CKPTFS_MEM_SIZE", "32M")]),
        )
        .unwrap();
        assert_eq!(ctx.store.name, "fromflag");
        assert_eq!(ctx.store.mem_size, Some(32 << 20));
        assert_eq!(ctx.store.chunk_size, Some(128 << 10));
        assert_eq!(
            ctx.store.max_files, None,
            "defaults are not imposed on existing stores"
        );
        let src = |k: &str| ctx.table.iter().find(|r| r.0 == k).unwrap().2;
        assert_eq!(src("store"), Source::Flag);
        assert_eq!(src("mem_size"), Source::Env);
        assert_eq!(src("chunk_size"), Source::File);
        assert_eq!(src("max_files"), Source::Default);
        assert_eq!(ctx.mounts, vec![PathBuf::from("/ckpt")]);
    }

    #[test]
    fn bad_values_name_the_setting() {
        let e =
            Ctx::resolve_with(&StoreArgs::default(), &env_of(&[("CKPTFS_MEM_SIZE", "lots")])).unwrap_err();
        assert!(e.to_string().contains("mem_size"), "{e}");
        let e =
            Ctx::resolve_with(&StoreArgs::default(), &env_of(&[("CKPTFS_MOUNT", "rel/path")])).unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "colour = 1\n").unwrap();
        let args = StoreArgs {
            config: Some(f),
            ..Default::default()
        };
        let e = Ctx::resolve_with(&args, &env_of(&[])).unwrap_err();
        assert!(e.to_string().contains("unknown setting"), "{e}");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("-1M").is_err());
    }
}
