//! The options of `ckptfs agent` and `ckptfs restore`, and the helpers the node and
//! object commands share with them (apart from the commands, so that `cmd_agent`, which
//! hands `s3://` destinations to `cmd_object` and peer restores to `cmd_node`, is not
//! named back by them).

use crate::config::Ctx;
use anyhow::{bail, Result};
use ckptfs_agent::config::targets;
use ckptfs_agent::AgentConfig;
use ckptfs_store::Store;
use std::path::PathBuf;

/// Where drained files go and how this node picks its target.
#[derive(clap::Args, Debug, Clone)]
pub struct DestArgs {
    /// Destination directories (e.g. one per I/O server), comma-separated. A store file
    /// /a/b is published as DIR/a/b. Or one `s3://BUCKET/PREFIX`: the object level
    /// (docs/object.md; endpoint and keys from the AWS_* variables or ~/.aws).
    #[arg(long, value_name = "DIR[,DIR...]", value_delimiter = ',', env = "CKPTFS_DEST")]
    pub dest: Vec<PathBuf>,
    /// Lustre: the targets are these OSTs of each destination directory; files get one
    /// stripe on the chosen OST (needs `lfs`).
    #[arg(long, value_name = "I[,I...]", value_delimiter = ',')]
    pub ost: Vec<u32>,
    /// Mapping file of `NODE TARGET` lines (TARGET: 0-based index or a --dest DIR;
    /// `*` = default); unlisted nodes get a balanced assignment by node number.
    #[arg(long, value_name = "FILE")]
    pub map: Option<PathBuf>,
}

impl DestArgs {
    /// The drain's destination: `--dest` (or `CKPTFS_DEST`) when given, else the drain
    /// target of the settings' `[levels]` section (the first `pfs:/DIR` or
    /// `s3:BUCKET/PREFIX` of `levels.order`; docs/agent.md, "Where the drain goes").
    /// Returns the destination and, when it came from the section, the level's id.
    pub(crate) fn or_levels(&self, ctx: &Ctx) -> Result<(DestArgs, Option<String>)> {
        if !self.dest.is_empty() {
            return Ok((self.clone(), None));
        }
        let levels = &ctx.settings.levels;
        let Some(e) = levels.drain_target() else {
            let order: Vec<String> = levels.order.iter().map(|e| e.id()).collect();
            bail!(
                "no drain destination: give --dest DIR[,DIR...] or --dest s3://BUCKET/PREFIX \
                 (or CKPTFS_DEST), or list a persistent level (pfs:/DIR or s3:BUCKET/PREFIX) \
                 in the settings' [levels] section (levels.order, CKPTFS_LEVELS, --levels; \
                 now {})",
                order.join(",")
            );
        };
        let dest = match e.kind.as_str() {
            "s3" => PathBuf::from(format!("s3://{}", e.instance)),
            _ => PathBuf::from(&e.instance),
        };
        let mut d = self.clone();
        d.dest = vec![dest];
        Ok((d, Some(e.id())))
    }

    /// The drain settings; `node_id` is the global `--node-id` (placement and manifest
    /// names; default: the host name).
    pub(crate) fn config(&self, node_id: Option<&str>) -> Result<AgentConfig> {
        if self.dest.is_empty() {
            bail!("--dest DIR[,DIR...] is required");
        }
        if self.dest.iter().any(|d| d.to_string_lossy().starts_with("s3://")) {
            bail!(
                "an s3:// destination works with `ckptfs agent --dest` and `ckptfs restore --dest` \
                 (one destination, without --from-peers) for now: docs/object.md"
            );
        }
        let mut c = AgentConfig::new(&self.dest);
        c.targets = targets(&self.dest, &self.ost);
        if let Some(n) = node_id {
            c.node_id = n.to_string();
        }
        c.map_file = self.map.clone();
        Ok(c)
    }
}

/// When datasets are configured (`dataset_flush_every` or `dataset_pattern` set), the
/// drain flushes only the datasets marked for flush ([`ckptfs_datasets::FlushPolicy`];
/// files outside datasets follow `every`/`evict` as before). Used by `ckptfs agent` and
/// `ckptfs node --dest` (the node daemon's drain builds its agent from this config).
/// Returns whether the dataset policy is in use.
pub(crate) fn use_dataset_policy(ctx: &Ctx, c: &mut AgentConfig) -> Result<bool> {
    let ds = ckptfs_datasets::Config::from_settings(&ctx.settings, &|k| std::env::var(k).ok())?;
    if ds.flush_every == 0 && ds.pattern.is_none() {
        return Ok(false);
    }
    let fallback = ckptfs_agent::DrainPolicy::from_config(c);
    c.policy = Some(std::sync::Arc::new(ckptfs_datasets::FlushPolicy::new(
        ctx.store.clone(),
        &ds.job,
        ds.pattern.clone(),
        fallback,
    )));
    Ok(true)
}

/// Staged marshaling switch.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// CPU and IO priority of the agent.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorityArg {
    /// nice 10, best-effort IO at level 7.
    Low,
    /// nice 19, idle IO class.
    Idle,
    /// Unchanged.
    Normal,
}

/// `ckptfs agent ...`: drain complete files to the parallel file system.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AgentArgs {
    /// `status`.
    #[command(subcommand)]
    pub cmd: Option<AgentCmd>,
    /// Destination.
    #[command(flatten)]
    pub dest: DestArgs,
    /// Drain what is complete now, then exit (exit 1 if a file failed).
    #[arg(long)]
    pub once: bool,
    /// IO threads writing one file's blocks in parallel (1 = one sequential stream;
    /// more for O_DIRECT or a PFS).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub io_threads: usize,
    /// Bytes per write call (K/M/G).
    #[arg(long, value_name = "SIZE", default_value = "8M", value_parser = crate::config::parse_size)]
    pub write_size: u64,
    /// Write aligned blocks with O_DIRECT straight from the store's chunks.
    #[arg(long)]
    pub direct: bool,
    /// Bandwidth cap in MB/s.
    #[arg(long, value_name = "MB/S")]
    pub max_bw: Option<f64>,
    /// CPU and IO priority.
    #[arg(long, value_enum, default_value = "low")]
    pub priority: PriorityArg,
    /// Staged marshaling: one file flushed at a time per node, pipelined with staging
    /// the next (off: every queued file is flushed at once, one thread each).
    #[arg(long, value_enum, default_value = "on")]
    pub marshal: OnOff,
    /// Drain only every Nth checkpoint directory (in creation order). With datasets
    /// configured (`dataset_flush_every` or `dataset_pattern` set), a dataset's files are
    /// drained only when the dataset is complete and marked for flush; this applies to
    /// files outside every dataset.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub every: u32,
    /// Free the memory copy after a verified drain.
    #[arg(long)]
    pub evict: bool,
    /// Seconds between scans for new complete files.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.5)]
    pub interval: f64,
    /// Print the summary (with --once) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (host:port; docs/metrics.md).
    #[arg(long, value_name = "HOST:PORT", env = "CKPTFS_AGENT_METRICS")]
    pub metrics: Option<String>,
}

/// Subcommands of `ckptfs agent`.
#[derive(clap::Subcommand, Debug)]
pub enum AgentCmd {
    /// Show queued, in-flight, drained and failed files of the store's agent.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Keep refreshing (progress bars) until the agent exits.
        #[arg(long)]
        watch: bool,
    },
}

/// `ckptfs restore [PATH]`: bring drained files back into the store.
#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// Store path (file or directory) to restore [default: everything].
    pub path: Option<String>,
    /// Destination the files were drained to.
    #[command(flatten)]
    pub dest: DestArgs,
    /// First from the partners' memory (needs --cluster and --node-id; the daemons of
    /// the partner nodes must run), then from --dest, if given, for the rest.
    #[arg(long)]
    pub from_peers: bool,
    /// From the PFS, also take the files node ID drained (repeatable; by default only
    /// this node's own, --node-id, are restored: nodes sharing a PFS directory each
    /// restore theirs).
    #[arg(long = "from-node", value_name = "ID")]
    pub from_node: Vec<String>,
    /// From the PFS, take the files every node drained there.
    #[arg(long, conflicts_with = "from_node")]
    pub all_nodes: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Restore the drained files under `prefix` into `store`, searching this node's target
/// first, then the others (`ckptfs restore`, `ckptfs run --restore`): the files the
/// manifests of `nodes` list (every node's with `None`).
pub(crate) fn restore_into(
    store: &Store,
    c: &AgentConfig,
    prefix: &str,
    nodes: Option<&[String]>,
) -> Result<ckptfs_agent::RestoreReport> {
    let mine = c.target()?.clone();
    let mut order = vec![mine.clone()];
    order.extend(c.targets.iter().filter(|t| **t != mine).cloned());
    Ok(match nodes {
        Some(n) => ckptfs_agent::restore_nodes(store, &order, prefix, n)?,
        None => ckptfs_agent::restore(store, &order, prefix)?,
    })
}

pub(crate) fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}
