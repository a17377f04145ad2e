//! # ckptfs: the command-line front end
//!
//! Wires the crates together: creates and inspects node stores (`init`, `status`, `ls`,
//! `cat`, `put`, `get`, `rm`, `mkdir`, `fsck`, `destroy`), prints the effective settings
//! (`config`), runs the benchmarks (`bench`) and the level policy (`policy`). Store
//! settings come from one table (see `config.rs`): flags > `CKPTFS_*` env > TOML > defaults.

mod agent_args;
mod bench_datasets_partner;
mod bench_erasure;
mod bench_object;
mod bench_partner;
mod bench_pool;
mod bench_scr;
mod cluster_remap;
mod cmd_agent;
mod cmd_ckpt;
mod cmd_cluster;
mod cmd_ls;
mod cmd_mount;
mod cmd_node;
mod cmd_object;
mod cmd_pool;
mod cmd_run;
mod config;
mod elf;
mod levels;
mod slurm_topology;
mod store_cmds;
mod text;

use anyhow::Result;
use clap::{Parser, Subcommand};
use config::{ClusterArgs, Ctx, StoreArgs};

/// ckptfs: multi-level checkpoint storage for HPC and ML jobs.
///
/// Checkpoint files live in node memory (a persistent shared-memory store that survives
/// the application's crash), spill to SSD when memory is short, and are drained to the
/// parallel file system in the background. Store paths are absolute inside the store:
/// a file written as /ckpt/a/b by a program whose mount prefix is /ckpt is /a/b here.
#[derive(Parser, Debug)]
#[command(name = "ckptfs", version, propagate_version = true, max_term_width = 100)]
struct Cli {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a store with the given sizes (fails if it exists).
    Init,
    /// Show capacity used and free, file counts, incomplete files and creation settings.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a directory of the store (default /).
    Ls {
        /// Long listing: mode, size, state, chunks in memory/spill, mtime, the levels
        /// holding each file and the protection its dataset gets (the level policy's
        /// choice as dataset_partner_copies applies it), then why, per dataset.
        #[arg(short, long)]
        long: bool,
        /// The long listing as JSON, one object per entry.
        #[arg(long)]
        json: bool,
        /// List subdirectories recursively.
        #[arg(short = 'R', long)]
        recursive: bool,
        /// Store path.
        path: Option<String>,
    },
    /// Write a store file to standard output (checksums verified).
    Cat {
        /// Store path.
        path: String,
    },
    /// Copy a local file into the store.
    Put {
        /// Local file ("-" for standard input).
        src: std::path::PathBuf,
        /// Store path (an existing store directory keeps the file name).
        dst: String,
        /// Create missing parent directories.
        #[arg(short, long)]
        parents: bool,
    },
    /// Copy a store file out (checksums verified first).
    Get {
        /// Store path.
        src: String,
        /// Local path ("-" for standard output; an existing directory keeps the file name).
        dst: std::path::PathBuf,
    },
    /// Remove files (and with -r directories).
    Rm {
        /// Remove directories and their contents.
        #[arg(short, long)]
        recursive: bool,
        /// Store paths.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Create a directory.
    Mkdir {
        /// Create parents as needed, no error if it exists.
        #[arg(short, long)]
        parents: bool,
        /// Store path.
        path: String,
    },
    /// Check the store's metadata and every chunk's checksum; exit 1 if problems remain.
    Fsck {
        /// Repair what can be repaired (leaked chunks, free lists, name index, stale checksums).
        #[arg(long)]
        repair: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete the store. Refused (EBUSY, naming them) while other processes use it (a
    /// FUSE mount, a node daemon, a program under the shim).
    Destroy {
        /// Delete it anyway: its users get ESTALE from their next operation.
        #[arg(long)]
        force: bool,
    },
    /// Print the effective settings and where each came from.
    Config {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a program with its file calls under the mount prefixes served by the store.
    Run(cmd_run::RunArgs),
    /// List the libc file calls a program imports that the preload shim does not cover.
    CheckBinary(cmd_run::CheckBinaryArgs),
    /// Serve the store through FUSE, or aggregate writes into a backend directory (CRFS).
    Mount(cmd_mount::MountArgs),
    /// Unmount a `ckptfs mount` and wait for its daemon to finish.
    Umount(cmd_mount::UmountArgs),
    /// Drain complete checkpoints to the parallel file system in the background.
    Agent(cmd_agent::AgentArgs),
    /// Bring files back into the store from the partners' memory (--from-peers) and the
    /// drain destination (checksums verified).
    Restore(cmd_agent::RestoreArgs),
    /// The per-node daemon: partner copies in other failure domains, heartbeats, drain.
    Node(cmd_node::NodeArgs),
    /// The aggregate memory pool: manager, benefactors, put/get/ls/rm/status/reassemble.
    Pool(cmd_pool::PoolArgs),
    /// Run a benchmark; prints measured figures next to the baselines of the same run.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Checkpoint datasets of the job: begin, complete, list, show, delete, need.
    Ckpt(cmd_ckpt::CkptArgs),
    /// Raise (or --clear) a failure predictor's alarm for a node (read by the level policy).
    Alarm(cmd_ckpt::AlarmArgs),
    /// The cluster map: write a cluster file and secret (`init`), print the partner plan.
    Cluster {
        #[command(subcommand)]
        cmd: cmd_cluster::ClusterCommand,
    },
    /// Checkpoint level policy: adaptive level choice, optimal intervals, failure simulator.
    Policy {
        #[command(subcommand)]
        cmd: ckptfs_policy::cli::PolicyCommand,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// The node store vs memcpy and /dev/shm; chunk-size sweep; spill-over table.
    Store(ckptfs_bench::store::StoreBenchArgs),
    /// One worker process of `bench store` (internal).
    #[command(hide = true)]
    StoreWorker(ckptfs_bench::store::WorkerArgs),
    /// One mdtest-like worker process of `bench fuse` part (d) (internal).
    #[command(hide = true)]
    MdWorker(ckptfs_bench::fuse_md::MdWorkerArgs),
    /// Writes through the LD_PRELOAD shim vs memcpy and /dev/shm; pass-through overhead.
    Preload(ckptfs_bench::preload::PreloadBenchArgs),
    /// CRFS aggregation throughput, the checkpoint write profile, mount vs preload vs /dev/shm.
    Fuse(ckptfs_bench::fuse::BenchArgs),
    /// Dataset completion and restart time per level (local store, PFS).
    Datasets(cmd_ckpt::BenchArgs),
    /// Application-observed write bandwidth (OAB) and drain bandwidth (ASB) vs direct writes.
    Drain(ckptfs_bench::drain::BenchArgs),
    /// Partner copies between two simulated nodes: TCP stream, copy, restore, app writes.
    Partner(bench_partner::PartnerBenchArgs),
    /// Erasure sets: encode throughput vs memcpy, protect and rebuild vs partner copies;
    /// with --links, node daemons on simulated nodes whose links `tc` limits (root).
    Erasure(bench_erasure::BenchArgs),
    /// The part of `bench erasure --links` that runs on a simulated node (internal).
    #[command(hide = true)]
    ErasureWorker(bench_erasure::EraWorkerArgs),
    /// An SCR-style MPI program through libscr.so vs the store through the shim, tmpfs
    /// and disk (mpicc and mpirun; one fresh store per target).
    Scr(bench_scr::BenchArgs),
    /// The part of `bench partner` that runs on a simulated node (internal).
    #[command(hide = true)]
    PartnerWorker(bench_partner::WorkerArgs),
    /// Drain and restore with S3 (a local versitygw) vs the AWS CLI and a plain copy;
    /// zstd ratio and speed on checkpoint data.
    Object(bench_object::BenchArgs),
    /// Aggregate memory pool (stdchk's figures 1-3): OAB/ASB against buffer size per
    /// stripe width, several clients, dedup bytes, next to the wire's rate measured in
    /// the same run; on 127.0.0.1, or with --links on simulated nodes (root) whose links
    /// `tc` limits.
    Pool(bench_pool::PoolBenchArgs),
    /// PyTorch dcp.save stall and load times: ckptfs writer vs FileSystemWriter vs memcpy
    /// (runs scripts/bench-torch.py with the checkout's .venv).
    Torch(ckptfs_bench::torch::TorchBenchArgs),
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        // fuser's own warnings (a foreground mount, `bench fuse`) stay off the terminal
        // unless asked for (-v, RUST_LOG); the mount daemon's log runs with RUST_LOG=info.
        0 => "warn,fuser=error",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour only on a terminal: a daemon's stderr is usually a log file, where escape
    // codes are noise (and a reader's terminal would interpret them).
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn run(cli: Cli) -> Result<i32> {
    // `cluster init/plan` read (or write) the cluster file themselves.
    if let Command::Cluster { cmd } = cli.cmd {
        return cmd_cluster::main(cmd, cli.cluster.cluster);
    }
    let ctx = Ctx::resolve(&cli.store)?.with_cluster(&cli.cluster)?;
    match cli.cmd {
        Command::Init => store_cmds::init(&ctx),
        Command::Status { json } => store_cmds::status(&ctx, json),
        Command::Ls {
            long,
            json,
            recursive,
            path,
        } => cmd_ls::ls(&ctx, path.as_deref().unwrap_or("/"), long, recursive, json),
        Command::Cat { path } => store_cmds::cat(&ctx, &path),
        Command::Put { src, dst, parents } => store_cmds::put(&ctx, &src, &dst, parents),
        Command::Get { src, dst } => store_cmds::get(&ctx, &src, &dst),
        Command::Rm { recursive, paths } => store_cmds::rm(&ctx, &paths, recursive),
        Command::Mkdir { parents, path } => store_cmds::mkdir(&ctx, &path, parents),
        Command::Fsck { repair, json } => store_cmds::fsck(&ctx, repair, json),
        Command::Destroy { force } => store_cmds::destroy(&ctx, force),
        Command::Config { json } => store_cmds::config(&ctx, json),
        Command::Run(a) => cmd_run::main(a, &ctx),
        Command::CheckBinary(a) => cmd_run::check_binary(a, &ctx),
        Command::Agent(a) => cmd_agent::main(a, &ctx),
        Command::Restore(a) => cmd_agent::restore_main(a, &ctx),
        Command::Node(a) => cmd_node::main(a, &ctx),
        Command::Pool(a) => cmd_pool::main(a, &ctx),
        Command::Mount(a) => cmd_mount::main(a, &ctx),
        Command::Umount(a) => cmd_mount::umount(a, &ctx),
        Command::Bench(b) => match b {
            BenchCommand::Store(a) => {
                let json = a.json;
                ckptfs_bench::store::run(a)?.print(json);
                Ok(0)
            }
            BenchCommand::StoreWorker(a) => {
                ckptfs_bench::store::worker(a)?;
                Ok(0)
            }
            BenchCommand::MdWorker(a) => {
                ckptfs_bench::fuse_md::worker(a)?;
                Ok(0)
            }
            BenchCommand::Preload(a) => {
                let json = a.json;
                ckptfs_bench::preload::run(a)?.print(json);
                Ok(0)
            }
            BenchCommand::Drain(a) => {
                let json = a.json;
                ckptfs_bench::drain::run(a)?.print(json);
                Ok(0)
            }
            BenchCommand::Datasets(a) => cmd_ckpt::bench(a),
            BenchCommand::Erasure(a) => bench_erasure::run(a),
            BenchCommand::ErasureWorker(a) => {
                bench_erasure::worker(a)?;
                Ok(0)
            }
            BenchCommand::Scr(a) => bench_scr::run(a),
            BenchCommand::Partner(a) => {
                let json = a.json;
                bench_partner::run(a)?.print(json);
                Ok(0)
            }
            BenchCommand::PartnerWorker(a) => {
                bench_partner::worker(a)?;
                Ok(0)
            }
            BenchCommand::Pool(a) => bench_pool::run(a),
            BenchCommand::Torch(a) => ckptfs_bench::torch::run(a),
            BenchCommand::Object(a) => {
                let json = a.json;
                bench_object::run(a)?.print(json);
                Ok(0)
            }
            BenchCommand::Fuse(a) => {
                let json = a.json;
                ckptfs_bench::fuse::run(a)?.print(json);
                Ok(0)
            }
        },
        Command::Ckpt(a) => cmd_ckpt::main(a, &ctx),
        Command::Alarm(a) => cmd_ckpt::alarm(a, &ctx),
        Command::Cluster { .. } => unreachable!("handled above"),
        Command::Policy { cmd } => {
            ckptfs_policy::cli::run(cmd)?;
            Ok(0)
        }
    }
}

/// Does this command print for a reader that may go away (`ckptfs ls | head`)? Those
/// get the default SIGPIPE action, so a closed pipe ends them quietly as it ends
/// coreutils (Rust ignores SIGPIPE, and `println!` then panics on EPIPE). The daemons
/// (`agent` draining, `mount`) keep SIGPIPE ignored: a reader of their log going away
/// must not kill them in the middle of a copy. Exhaustive on purpose: a new command
/// must choose.
fn quiet_on_broken_pipe(cmd: &Command) -> bool {
    match cmd {
        Command::Agent(a) => a.cmd.is_some(),
        Command::Node(a) => a.cmd.is_some(),
        Command::Mount(_) => false,
        Command::Pool(a) => a.quiet_on_broken_pipe(),
        Command::Init
        | Command::Status { .. }
        | Command::Ls { .. }
        | Command::Cat { .. }
        | Command::Put { .. }
        | Command::Get { .. }
        | Command::Rm { .. }
        | Command::Mkdir { .. }
        | Command::Fsck { .. }
        | Command::Destroy { .. }
        | Command::Config { .. }
        | Command::Run(_)
        | Command::CheckBinary(_)
        | Command::Umount(_)
        | Command::Restore(_)
        | Command::Bench(_)
        | Command::Ckpt(_)
        | Command::Alarm(_)
        | Command::Policy { .. }
        | Command::Cluster { .. } => true,
    }
}

fn main() {
    let cli = Cli::parse();
    if quiet_on_broken_pipe(&cli.cmd) {
        // SAFETY: called before any other thread exists; SIG_DFL installs no handler.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    init_logging(cli.verbose);
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // Errors name store paths: no raw newline or escape sequence from a name.
            eprintln!("ckptfs: error: {}", text::esc(&format!("{e:#}")));
            1
        }
    };
    std::process::exit(code);
}
