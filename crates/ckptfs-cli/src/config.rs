//! The CLI side of the settings table (`ckptfs-settings`): every store setting is a CLI
//! flag, an environment variable `CKPTFS_*` and a key of a TOML file, with precedence
//! flags > env > file > defaults. `ckptfs config` prints the effective value of each and
//! where it came from. This module only reads the file and the environment and hands
//! them to [`ckptfs_settings::resolve`], which the C API and the shim use too.
//!
//! A setting left at its default is not imposed on an existing store: attaching accepts
//! whatever the segment was created with. A setting given explicitly (by any source)
//! must match, or attaching fails with a clear error.

use anyhow::{bail, Context, Result};
use ckptfs_settings::{FileText, Inputs};
use ckptfs_store::StoreOptions;
use std::path::PathBuf;

pub use ckptfs_settings::{parse_size, Settings, Source, SETTINGS};

/// Store flags accepted by every subcommand.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Store settings (any subcommand)")]
pub struct StoreArgs {
    /// Store name: the segment is /dev/shm/ckptfs.NAME (see --shm-dir) [env CKPTFS_STORE; default u<UID>]
    #[arg(long, global = true, value_name = "NAME")]
    pub store: Option<String>,
    /// Memory for file data, fixed at creation (K/M/G) [env CKPTFS_MEM_SIZE; default 1G]
    #[arg(long, global = true, value_name = "SIZE", value_parser = ckptfs_settings::parse_store_size)]
    pub mem_size: Option<u64>,
    /// Chunk size, a power of two from 64K to 64M [env CKPTFS_CHUNK_SIZE; default 1M]
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size)]
    pub chunk_size: Option<u64>,
    /// Maximum files and directories [env CKPTFS_MAX_FILES; default one per 8K of memory]
    #[arg(long, global = true, value_name = "N")]
    pub max_files: Option<u32>,
    /// Directory of the store's segment file, a tmpfs; one mounted with huge=within_size
    /// (or always) gives the store huge pages, so a fresh process's first checkpoint and
    /// restart skip most page-table work [env CKPTFS_SHM_DIR; default /dev/shm]
    #[arg(long, global = true, value_name = "DIR")]
    pub shm_dir: Option<PathBuf>,
    /// Directory for the spill file used when memory is full [env CKPTFS_SPILL_DIR]
    #[arg(long, global = true, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Size of the spill file (K/M/G) [env CKPTFS_SPILL_SIZE; default 0 = no spill]
    #[arg(long, global = true, value_name = "SIZE", value_parser = ckptfs_settings::parse_store_size)]
    pub spill_size: Option<u64>,
    /// One private segment per process (NAME.RANK) instead of one per node [env CKPTFS_PRIVATE]
    #[arg(long, global = true)]
    pub private: bool,
    /// Attach a store segment owned by another user (root only, explicitly; the segment
    /// must still have mode 0600) [env CKPTFS_ALLOW_FOREIGN_OWNER]
    #[arg(long, global = true)]
    pub allow_foreign_owner: bool,
    /// Path prefix(es) served by the store in `ckptfs run`, colon-separated [env CKPTFS_MOUNT; default /ckpt]
    #[arg(long, global = true, value_name = "PREFIX[:PREFIX]")]
    pub mount: Option<String>,
    /// Levels a restore and a restart read, in read order: comma-separated level ids
    /// (`local` first, then `partner`; `pfs` = the drain destinations, `pfs:/DIR`,
    /// `s3:BUCKET/PREFIX`, `dir:/DIR`, `pool:MANAGER` in any order; docs/design.md "The
    /// [levels] section") [setting levels.order, env CKPTFS_LEVELS; default local,partner,pfs]
    #[arg(long, global = true, value_name = "ID[,ID...]")]
    pub levels: Option<String>,
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
    /// The resolution itself (for `child_env` and the JSON summary).
    pub settings: Settings,
    /// The cluster file, if given.
    pub cluster: Option<ckptfs_cluster::Cluster>,
    /// Its path (absolute when it could be made so), passed on to `ckptfs run`'s command.
    pub cluster_file: Option<PathBuf>,
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
        "shm_dir" => a.shm_dir.as_ref().map(|p| p.display().to_string()),
        "spill_dir" => a.spill_dir.as_ref().map(|p| p.display().to_string()),
        "spill_size" => a.spill_size.map(|v| v.to_string()),
        "private" => a.private.then(|| "true".to_string()),
        "allow_foreign_owner" => a.allow_foreign_owner.then(|| "true".to_string()),
        "mount" => a.mount.clone(),
        "levels.order" => a.levels.clone(),
        _ => None,
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
            .or_else(|| {
                env(ckptfs_settings::CONFIG_ENV)
                    .filter(|s| !s.is_empty())
                    .map(PathBuf::from)
            })
            .or_else(default_config_file);
        let text = match &config_file {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading settings file {}", p.display()))?,
            ),
            None => None,
        };
        let name = config_file.as_ref().map(|p| p.display().to_string());
        let file = match (&name, &text) {
            (Some(name), Some(text)) => Some(FileText { name, text }),
            _ => None,
        };
        let settings = ckptfs_settings::resolve(&Inputs {
            flags: &|k| flag_value(args, k),
            env,
            file,
        })?;
        Ok(Ctx {
            store: settings.store.clone().into(),
            mounts: settings.mounts.iter().map(PathBuf::from).collect(),
            config_file,
            table: settings
                .rows
                .iter()
                .map(|r| (r.key, r.value.clone(), r.source))
                .collect(),
            settings,
            cluster: None,
            cluster_file: None,
            node_id: None,
        })
    }

    /// The settings resolved again with a subcommand's own flags (by setting key, e.g.
    /// `ckptfs node`'s for the `[daemon]` section), the environment and the settings file.
    pub fn resolve_with_flags(&self, flags: &dyn Fn(&str) -> Option<String>) -> Result<Settings> {
        let text = match &self.config_file {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading settings file {}", p.display()))?,
            ),
            None => None,
        };
        let name = self.config_file.as_ref().map(|p| p.display().to_string());
        let file = match (&name, &text) {
            (Some(name), Some(text)) => Some(FileText { name, text }),
            _ => None,
        };
        Ok(ckptfs_settings::resolve(&Inputs {
            flags,
            env: &|k| std::env::var(k).ok(),
            file,
        })?)
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
            // Children (the preload shim) get their settings from `settings`: same store.
            if let Some(r) = self.settings.rows.iter_mut().find(|r| r.key == "store") {
                r.value = node.store.clone();
                r.source = Source::Flag;
            }
            self.settings.store.name = node.store.clone();
            if let Some(m) = cluster.mem_size {
                self.use_cluster_mem_size(m);
            }
        }
        self.cluster = Some(cluster);
        self.cluster_file = Some(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()));
        Ok(self)
    }

    /// The cluster file's `mem_size` (`cluster init --mem`) for this node's store, when
    /// no flag, `CKPTFS_MEM_SIZE` or settings file gives one and the store does not exist
    /// yet (it is created with that size; an existing store is attached as it is).
    fn use_cluster_mem_size(&mut self, m: u64) {
        let Some(row) = self.table.iter_mut().find(|r| r.0 == "mem_size") else {
            return;
        };
        let seg = ckptfs_store::segment_path_in(self.store.shm_dir.as_deref(), &self.store.name);
        if row.2 != Source::Default || std::fs::symlink_metadata(seg).is_ok() {
            return;
        }
        // Shown by `ckptfs config` as coming from a file (the cluster file).
        row.1 = m.to_string();
        row.2 = Source::File;
        self.store.mem_size = Some(m);
        if let Some(r) = self.settings.rows.iter_mut().find(|r| r.key == "mem_size") {
            r.value = m.to_string();
            r.source = Source::File;
        }
        self.settings.store.mem_size = Some(m);
    }

    /// The `dataset_partner_copies` setting as this command resolves it (as `ckpt
    /// list`): what `ls -l` and `status --json` say a dataset's protection is.
    pub fn partner_copies(&self) -> ckptfs_datasets::protection::PartnerCopies {
        use ckptfs_datasets::protection::PartnerCopies;
        match ckptfs_datasets::Config::from_settings(&self.settings, &|k| std::env::var(k).ok()) {
            Ok(c) => self.protection_mode(PartnerCopies::of(&c)),
            Err(e) => {
                eprintln!("ckptfs: dataset settings: {e}; showing the default protection (complete)");
                PartnerCopies::Complete
            }
        }
    }

    /// `mode` under this command's cluster file (`ckptfs_node::protection_mode`, as
    /// Python's listing: erasure sets when the file names a scheme, issue 32).
    pub fn protection_mode(
        &self,
        mode: ckptfs_datasets::protection::PartnerCopies,
    ) -> ckptfs_datasets::protection::PartnerCopies {
        ckptfs_node::protection_mode(self.cluster.as_ref(), mode)
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
        self.settings.child_env()
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

    /// `cluster init --mem`: a node's store not created yet gets the cluster file's
    /// `mem_size` (shown from a file, passed on to children); a variable still wins.
    #[test]
    fn the_cluster_files_mem_size_sizes_a_new_store_unless_a_setting_gives_one() {
        let dir = tempfile::tempdir().unwrap();
        let job = format!("cfgmem{}", std::process::id());
        let mut c = ckptfs_cluster::Cluster::local(2, &job, 17400).unwrap();
        c.mem_size = Some(40 << 20);
        let f = dir.path().join("c.toml");
        std::fs::write(&f, c.to_toml()).unwrap();
        let cl = ClusterArgs {
            cluster: Some(f),
            node_id: Some("node2".into()),
        };
        let ctx = Ctx::resolve_with(&StoreArgs::default(), &env_of(&[]))
            .unwrap()
            .with_cluster(&cl)
            .unwrap();
        assert_eq!(ctx.store.name, format!("{job}.node2"));
        assert_eq!(ctx.store.mem_size, Some(40 << 20));
        assert!(ctx
            .table
            .iter()
            .any(|r| r.0 == "mem_size" && r.1 == "41943040" && r.2 == Source::File));
        assert!(ctx
            .child_env()
            .contains(&("CKPTFS_MEM_SIZE", "41943040".to_string())));
        let ctx = Ctx::resolve_with(&StoreArgs::default(), &env_of(&[("CKPTFS_MEM_SIZE", "24M")]))
            .unwrap()
            .with_cluster(&cl)
            .unwrap();
        assert_eq!(ctx.store.mem_size, Some(24 << 20));
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
