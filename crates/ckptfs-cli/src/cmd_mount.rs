//! `ckptfs mount` and `ckptfs umount`: the node store (or a CRFS aggregation mirror of a
//! backend directory) as a FUSE file system.
//!
//! Without `--foreground` the command starts itself again as the daemon (own process
//! group, stdin closed, stdout/stderr appended to the log file), waits until the daemon
//! has written its pid file after the kernel accepted the mount (or has exited with an
//! error, whose log tail it prints) and returns. The pid file also lets `ckptfs
//! umount` wait for it to finish writing buffered chunks and exit.
//!
//! The pid file and the default log live in the caller's runtime directory
//! (`ckptfs_runtime`: owned by the caller, mode 0700), never in a shared /tmp; a log
//! file given with `--log-file` is opened without following symbolic links and must
//! belong to the caller.

use crate::config::Ctx;
use anyhow::{bail, Context, Result};
use ckptfs_fuse::mount::{self, MountConfig};
use ckptfs_fuse::{CrfsConfig, IoMode, Mode};
use ckptfs_runtime::RuntimeDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `ckptfs mount MOUNTPOINT`: serve the store (or `--backend DIR` in CRFS mode).
#[derive(clap::Args, Debug)]
pub struct MountArgs {
    /// Directory to mount on (must exist).
    pub mountpoint: PathBuf,
    /// CRFS mode: mirror DIR and aggregate writes into large chunks written by IO
    /// threads. `--chunk-size` is then the aggregation chunk size (default 4M).
    #[arg(long, value_name = "DIR")]
    pub backend: Option<PathBuf>,
    /// Pool mode: serve the aggregate memory pool whose manager is MANAGER (its node id
    /// or address in the cluster map given with --cluster); files written there are
    /// committed to the pool at close (docs/pool.md, "The FUSE mount").
    #[arg(long, value_name = "MANAGER", conflicts_with = "backend")]
    pub pool: Option<String>,
    /// Pool mode: the client's write buffer (K/M/G).
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = crate::config::parse_size)]
    pub pool_buffer: u64,
    /// CRFS buffer pool size (K/M/G).
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = crate::config::parse_size)]
    pub pool_size: u64,
    /// CRFS IO threads writing chunks to the backend.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub io_threads: usize,
    /// Page cache or direct I/O: auto (direct for write-only opens, and in store mode
    /// read-only ones; the page cache for read-write opens), cached, direct.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub io_mode: IoMode,
    /// Threads serving FUSE requests [default: 1 in store mode (measured fastest on
    /// small VMs; more help parallel writers of large blocks), 4 in CRFS mode (at least
    /// 2)].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Store mode: how long the kernel may cache attributes and names (seconds; 0 turns
    /// caching off). Changes made outside the mount (preload shim, C API, agent) are
    /// invalidated by a poller of the store's change counter.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub cache_ttl: f64,
    /// Store mode: how often the invalidation poller reads the store's change counter
    /// (milliseconds): the delay before a change made outside the mount shows through it.
    #[arg(long, value_name = "MS", default_value_t = 2)]
    pub cache_poll_ms: u64,
    /// Store mode: serve FUSE requests over io_uring when the kernel offers it (auto), or
    /// only through /dev/fuse (off). The kernel keeps one request queue per CPU and each
    /// is answered by a thread on that CPU, so a call wakes no other CPU (a higher
    /// create/remove rate: docs/benchmarks.md). Needs Linux 6.14+ with
    /// /sys/module/fuse/parameters/enable_uring set to Y (root, before mounting); the
    /// daemon's log says which transport the mount got (docs/fuse.md).
    #[arg(long, value_name = "auto|off", default_value = "auto", value_parser = ["auto", "off"])]
    pub io_uring: String,
    /// Store mode, over io_uring: how long (microseconds) each queue's thread keeps
    /// polling for the next request after answering one, giving its CPU to anything
    /// runnable meanwhile, before it sleeps; 0 sleeps at once. Keeps an idle vCPU from
    /// halting between the calls of a metadata burst (on the development VM one process
    /// creates about 1.5-2x as many files per second with the default).
    #[arg(long, value_name = "US", default_value_t = 50)]
    pub io_uring_spin_us: u64,
    /// Stay in the foreground and log to stderr (debugging).
    #[arg(long)]
    pub foreground: bool,
    /// Daemon log file, opened without following links, owned by the caller [default:
    /// RUNTIME_DIR/mount-MOUNTPOINT.log, RUNTIME_DIR = $XDG_RUNTIME_DIR/ckptfs or
    /// /run/user/UID/ckptfs or /dev/shm/ckptfs-UID].
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
}

/// `ckptfs umount MOUNTPOINT`.
#[derive(clap::Args, Debug)]
pub struct UmountArgs {
    /// The mount point.
    pub mountpoint: PathBuf,
    /// Detach even if files are open there; the daemon exits when they are closed.
    #[arg(short = 'z', long)]
    pub lazy: bool,
    /// Seconds to wait for the daemon to write its buffered chunks and exit.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub wait: u64,
}

const DEFAULT_CRFS_CHUNK: u64 = 4 << 20;

fn key_of(mp: &Path) -> String {
    let abs = mp.canonicalize().unwrap_or_else(|_| mp.to_path_buf());
    abs.to_string_lossy().trim_start_matches('/').replace('/', "_")
}

/// Name of the daemon's pid file in the runtime directory.
fn pid_name(mp: &Path) -> String {
    format!("mount-{}.pid", key_of(mp))
}

/// Name of the daemon's default log file in the runtime directory.
fn log_name(mp: &Path) -> String {
    format!("mount-{}.log", key_of(mp))
}

fn runtime_dir() -> Result<RuntimeDir> {
    RuntimeDir::for_caller().context("the runtime directory for the mount daemon's pid and log files")
}

/// Run `ckptfs mount`.
pub fn main(args: MountArgs, ctx: &Ctx) -> Result<i32> {
    if !args.mountpoint.is_dir() && !mount::is_stale(&args.mountpoint) {
        bail!("mount point {} is not a directory", args.mountpoint.display());
    }
    if args.foreground {
        return serve(&args, ctx);
    }
    let rt = runtime_dir()?;
    let (log, out) = match &args.log_file {
        Some(p) => (p.clone(), ckptfs_runtime::open_log_file(p)?),
        None => {
            let name = log_name(&args.mountpoint);
            (rt.file_path(&name), rt.open_log(&name)?)
        }
    };
    let start_len = out.metadata().map(|m| m.len()).unwrap_or(0);
    // Read the daemon's error back through our own descriptor, not by path.
    let reader = out.try_clone()?;
    // The daemon writes its pid file once the kernel accepted the mount: that (not the
    // mount table, which may still list a stale mount) tells us it is ready.
    let pid = pid_name(&args.mountpoint);
    rt.remove(&pid)?;
    let exe = std::env::current_exe().context("find the ckptfs executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .arg("--foreground")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info");
    }
    cmd.env("NO_COLOR", "1");
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().context("start the mount daemon")?;
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let tail = read_from(&reader, start_len);
            eprint!("{tail}");
            bail!("the mount daemon exited ({status}); log: {}", log.display());
        }
        let ready = rt
            .read(&pid)
            .ok()
            .flatten()
            .is_some_and(|s| String::from_utf8_lossy(&s).trim() == child.id().to_string());
        if ready {
            println!(
                "mounted {} (daemon pid {}, log {})",
                args.mountpoint.display(),
                child.id(),
                log.display()
            );
            return Ok(0);
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("the mount did not appear within 30 s; see {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pool client of a pool mount: this node's (--node-id, else the manager's node).
fn pool_client(manager: &str, buffer: u64, ctx: &Ctx) -> Result<ckptfs_pool::PoolClient> {
    let cluster = ctx
        .cluster
        .as_ref()
        .context("ckptfs mount --pool needs --cluster FILE (or CKPTFS_CLUSTER)")?;
    let pool = cluster
        .pool
        .as_ref()
        .context("the cluster file has no [pool] section")?;
    if manager != pool.manager && manager != pool.addr {
        bail!(
            "--pool {manager}: the cluster map's pool manager is {} at {}",
            pool.manager,
            pool.addr
        );
    }
    let me = ctx.node_id.clone().unwrap_or_else(|| pool.manager.clone());
    let net = ckptfs_pool::PoolNet::client(cluster, &me)?;
    Ok(ckptfs_pool::PoolClient::new(net, buffer)?)
}

fn serve(args: &MountArgs, ctx: &Ctx) -> Result<i32> {
    let mode = match (&args.backend, &args.pool) {
        (Some(dir), _) => Mode::Crfs(CrfsConfig {
            backend: dir.clone(),
            pool_size: args.pool_size as usize,
            chunk_size: ctx.store.chunk_size.unwrap_or(DEFAULT_CRFS_CHUNK) as usize,
            io_threads: args.io_threads,
        }),
        (None, Some(m)) => Mode::Pool(pool_client(m, args.pool_buffer, ctx)?),
        (None, None) => Mode::Store(ctx.store.clone()),
    };
    if args.backend.is_some() {
        // The backend gets exactly the modes the application asked for.
        // SAFETY: umask has no preconditions.
        unsafe { libc::umask(0) };
    }
    let cfg = MountConfig {
        mountpoint: args.mountpoint.clone(),
        mode,
        io: args.io_mode,
        threads: args.threads.unwrap_or(0),
        cache: ckptfs_fuse::CacheConfig {
            ttl: Duration::from_secs_f64(args.cache_ttl.max(0.0)),
            poll: Duration::from_millis(args.cache_poll_ms.max(1)),
        },
        io_uring: args.io_uring == "auto",
        io_uring_spin: Duration::from_micros(args.io_uring_spin_us),
    };
    let pid = pid_name(&args.mountpoint);
    let rt = runtime_dir()?;
    // Only the binary installs signal handlers; the mount gets the trigger.
    let shutdown = ckptfs_runtime::Shutdown::on_signals(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])?;
    mount::run(&cfg, &shutdown, || {
        if let Err(e) = rt.write_atomic(&pid, format!("{}\n", std::process::id()).as_bytes()) {
            tracing::warn!(error = %e, "cannot write pid file");
        }
    })
    .with_context(|| format!("mount {}", args.mountpoint.display()))?;
    let _ = rt.remove(&pid);
    Ok(0)
}

/// What the daemon appended to its log after offset `from` (at most the last 64 KiB).
fn read_from(f: &std::fs::File, from: u64) -> String {
    let end = f.metadata().map(|m| m.len()).unwrap_or(from);
    let from = from.max(end.saturating_sub(64 << 10));
    let mut buf = vec![0u8; end.saturating_sub(from) as usize];
    let n = f.read_at(&mut buf, from).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// How long `ckptfs umount` waits after the unmount before it sends the daemon SIGTERM.
const UMOUNT_NUDGE: Duration = Duration::from_secs(3);

/// Run `ckptfs umount`.
pub fn umount(args: UmountArgs, _ctx: &Ctx) -> Result<i32> {
    let mp = &args.mountpoint;
    // Best effort: without a usable runtime directory, unmount without waiting.
    let pid = RuntimeDir::for_caller()
        .ok()
        .and_then(|rt| rt.read(&pid_name(mp)).ok().flatten())
        .and_then(|s| String::from_utf8_lossy(&s).trim().parse::<i32>().ok())
        .filter(|&p| p > 0);
    if mount::is_stale(mp) {
        mount::unmount(mp, true).context("remove the stale mount")?;
        println!("removed stale mount {} (its daemon had died)", mp.display());
        return Ok(0);
    }
    match mount::mount_entry(mp) {
        Some(m) if m.is_ckptfs() => {}
        Some(m) => bail!("{} is a {} mount, not a ckptfs one", mp.display(), m.fstype),
        None => bail!("{} is not mounted", mp.display()),
    }
    mount::unmount(mp, args.lazy).with_context(|| format!("unmount {}", mp.display()))?;
    if let Some(pid) = pid {
        let t0 = Instant::now();
        let mut asked = args.lazy;
        // SAFETY: kill with signal 0 only checks that the process exists.
        while unsafe { libc::kill(pid, 0) } == 0 {
            if t0.elapsed() > Duration::from_secs(args.wait) {
                bail!("daemon {pid} still running after {} s", args.wait);
            }
            // Unmounted here, yet the daemon goes on after a few seconds: another mount
            // namespace may hold a copy of the mount (docs/fuse.md, failure case 5a).
            // SIGTERM makes it abort such a connection; a session still finishing its
            // work (CRFS chunks) is left to finish.
            if !asked && t0.elapsed() > UMOUNT_NUDGE {
                asked = true;
                eprintln!(
                    "ckptfs umount: daemon {pid} still running {} s after the unmount (another mount namespace may hold the mount); sending SIGTERM",
                    UMOUNT_NUDGE.as_secs()
                );
                // SAFETY: kill has no memory preconditions; pid is the daemon's from its pid file.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(0)
}
