//! Mounting, signal handling, stale-mount cleanup and unmounting.
//!
//! [`run`] takes its shutdown trigger as a parameter (the binary routes SIGTERM, SIGINT
//! and SIGHUP to it with [`Shutdown::on_signals`]); a dedicated thread turns the trigger
//! into an unmount; the session loop then sees the connection end, the file system is
//! destroyed (CRFS mode writes its remaining chunks first) and `run` returns.

use crate::cache::Poller;
use crate::crfs::{CrfsConfig, CrfsFs};
use crate::{Invalidator, IoMode, PoolFs, StoreFs};
use ckptfs_runtime::Shutdown;
use ckptfs_store::{Store, StoreError, StoreOptions};
use fuser::{Config, MountOption, SessionACL};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Which file system to serve.
#[derive(Debug, Clone)]
pub enum Mode {
    /// The node store (attached, or created with these options).
    Store(StoreOptions),
    /// CRFS aggregation over a backend directory.
    Crfs(CrfsConfig),
    /// The aggregate memory pool, through this client.
    Pool(ckptfs_pool::PoolClient),
}

/// Everything `ckptfs mount` decides.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Store or CRFS mode.
    pub mode: Mode,
    /// Page cache or direct I/O per open.
    pub io: IoMode,
    /// FUSE request threads; 0 takes the mode's default ([`STORE_THREADS`],
    /// [`CRFS_THREADS`]). A CRFS mount gets at least 2 (its close() blocks one while
    /// chunks drain).
    pub threads: usize,
    /// Store mode: kernel attribute/entry caching and its invalidation poller.
    pub cache: crate::CacheConfig,
    /// Store mode: serve requests over io_uring when the kernel offers it
    /// ([`StoreFs::with_io_uring`]).
    pub io_uring: bool,
    /// Store mode, over io_uring: how long a queue thread polls after answering
    /// ([`StoreFs::with_io_uring_spin`]; [`crate::RING_SPIN`] by default).
    pub io_uring_spin: std::time::Duration,
}

/// FUSE request threads of a store mount by default: one. Every request of a store
/// mount is short (no request waits for another one), and on a small VM a request
/// handed to a thread on another CPU costs more than it saves: on a 2-vCPU KVM guest
/// one thread made creates faster than four, at less daemon CPU time per create. More
/// threads help parallel writers that each move large blocks (`ckptfs mount --threads
/// 4`). Figures: docs/benchmarks.md, "Figures behind design choices".
pub const STORE_THREADS: usize = 1;

/// FUSE request threads of a CRFS mount by default (a close() blocks its thread while
/// the file's chunks drain, so other requests need other threads).
pub const CRFS_THREADS: usize = 4;

/// FUSE request threads of a pool mount by default (a close() blocks its thread until
/// every chunk of the file is stored and the version committed).
pub const POOL_THREADS: usize = 4;

/// Errors of mounting and unmounting.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Something is already mounted there.
    #[error("{0} is already a mount point (unmount it first: ckptfs umount {0})")]
    AlreadyMounted(String),
    /// Not a FUSE mount of ours.
    #[error("{0} is not mounted")]
    NotMounted(String),
    /// An operating-system error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl MountError {
    /// The POSIX errno for this error.
    pub fn errno(&self) -> i32 {
        match self {
            MountError::Store(e) => e.errno(),
            MountError::AlreadyMounted(_) => libc::EBUSY,
            MountError::NotMounted(_) => libc::EINVAL,
            MountError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> MountError {
    let context = context.into();
    move |source| MountError::Io { context, source }
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone)]
pub struct MountEntry {
    /// Mount point.
    pub target: PathBuf,
    /// File system type (`fuse.ckptfs` for ours).
    pub fstype: String,
    /// Source (`ckptfs:STORE`, `crfs:DIR` or `pool:MANAGER@ADDR` for ours).
    pub source: String,
    /// Per-mount options (`rw`, `nosuid`, `nodev`, ...).
    pub options: Vec<String>,
}

impl MountEntry {
    /// Is it a ckptfs mount (store or CRFS mode)?
    pub fn is_ckptfs(&self) -> bool {
        self.fstype.starts_with("fuse")
            && (self.source.starts_with("ckptfs:")
                || self.source.starts_with("crfs:")
                || self.source.starts_with("pool:"))
    }
}

/// The mount at exactly `path`, if any (the last one wins when stacked).
pub fn mount_entry(path: &Path) -> Option<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = absolute(path);
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|&x| x == "-")?;
            Some(MountEntry {
                target: PathBuf::from(unescape(f.get(4)?)),
                fstype: f.get(sep + 1)?.to_string(),
                source: unescape(f.get(sep + 2)?),
                options: f.get(5)?.split(',').map(str::to_string).collect(),
            })
        })
        .rfind(|m| m.target == want)
}

fn unescape(s: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn absolute(p: &Path) -> PathBuf {
    // canonicalize fails on a dead FUSE mount (ENOTCONN): canonicalize the parent instead.
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => absolute(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
        .join(name),
        _ => p.to_path_buf(),
    }
}

/// Is `path` a FUSE mount whose daemon is gone ("Transport endpoint is not connected")?
/// statfs always reaches the file system (stat may be answered from the attribute cache).
pub fn is_stale(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data; c is a valid path; both outlive the call.
    let r = unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut s)
    };
    r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOTCONN)
}

/// Unmount `path`: umount2 as root, else `fusermount3 -u`. `lazy` detaches it even while
/// files are open (MNT_DETACH / `-z`); the daemon exits when the last one is closed.
pub fn unmount(path: &Path, lazy: bool) -> Result<(), MountError> {
    let target = absolute(path);
    let c = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| MountError::NotMounted(target.display().to_string()))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: c is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL) => return Err(MountError::NotMounted(target.display().to_string())),
        Some(libc::EPERM) => {}
        _ => return Err(io_err(format!("unmount {}", target.display()))(e)),
    }
    let out = std::process::Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg(&target)
        .output()
        .map_err(io_err(
            "run fusermount3 (install Debian's fuse3: scripts/setup-fuse.sh)",
        ))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(MountError::Io {
            context: format!("fusermount3 -u {}", target.display()),
            source: io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        })
    }
}

/// Options of every ckptfs mount. `nosuid` and `nodev`: a file an unprivileged user
/// creates with mode 4755 (or a device node) must not become a setuid program (or a
/// device) for others, whatever owner the mount shows (design.md, "Threat model").
fn base_options() -> Vec<MountOption> {
    vec![
        MountOption::Subtype("ckptfs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoSuid,
        MountOption::NoDev,
    ]
}

/// Mount and serve until unmounted (by `ckptfs umount`, fusermount3 -u, or `shutdown`
/// firing). `on_ready` runs once the kernel has accepted the mount.
pub fn run(cfg: &MountConfig, shutdown: &Shutdown, on_ready: impl FnOnce()) -> Result<(), MountError> {
    let sigs = shutdown.clone();
    let mp = &cfg.mountpoint;
    if is_stale(mp) {
        tracing::warn!(mountpoint = %mp.display(), "removing a stale mount left by a dead daemon");
        unmount(mp, true)?;
    }
    if !mp.is_dir() {
        return Err(MountError::Io {
            context: format!("mount point {}", mp.display()),
            source: io::Error::from_raw_os_error(libc::ENOTDIR),
        });
    }
    if mount_entry(mp).is_some_and(|m| m.fstype.starts_with("fuse")) {
        return Err(MountError::AlreadyMounted(mp.display().to_string()));
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut options = base_options();
    let mut config = Config::default();
    config.n_threads = Some(match (&cfg.mode, cfg.threads) {
        (Mode::Store(_), 0) => STORE_THREADS,
        (Mode::Store(_), n) => n,
        (Mode::Crfs(_), 0) => CRFS_THREADS,
        (Mode::Crfs(_), n) => n.max(2),
        (Mode::Pool(_), 0) => POOL_THREADS,
        (Mode::Pool(_), n) => n.max(2),
    });
    config.clone_fd = true;
    // As root, let every user's job use the mount (permissions are still checked).
    config.acl = if root { SessionACL::All } else { SessionACL::Owner };
    match &cfg.mode {
        Mode::Store(_) if cfg.io == IoMode::Writeback => Err(MountError::Io {
            context:
                "--io-mode writeback in store mode (the kernel would hold data the preload shim cannot see)"
                    .into(),
            source: io::Error::from_raw_os_error(libc::EINVAL),
        }),
        Mode::Store(opts) => {
            let store = Store::open_or_create(opts)?;
            options.push(MountOption::FSName(format!("ckptfs:{}", store.name())));
            config.mount_options = options;
            let fs = StoreFs::with_cache(store, cfg.io, cfg.cache)
                .with_io_uring(cfg.io_uring)
                .with_io_uring_spin(cfg.io_uring_spin);
            let inval = fs.invalidator();
            serve(fs, mp, &config, sigs, Some(inval), on_ready)
        }
        Mode::Crfs(c) => {
            let fs =
                CrfsFs::new(c.clone(), cfg.io).map_err(io_err(format!("backend {}", c.backend.display())))?;
            options.push(MountOption::FSName(format!("crfs:{}", c.backend.display())));
            config.mount_options = options;
            serve(fs, mp, &config, sigs, None, on_ready)
        }
        Mode::Pool(client) => {
            let net = client.net();
            options.push(MountOption::FSName(format!(
                "pool:{}@{}",
                net.pool.manager, net.pool.addr
            )));
            config.mount_options = options;
            serve(PoolFs::new(client.clone()), mp, &config, sigs, None, on_ready)
        }
    }
}

fn serve<FS: fuser::Filesystem>(
    fs: FS,
    mp: &Path,
    config: &Config,
    shutdown: Shutdown,
    inval: Option<Invalidator>,
    on_ready: impl FnOnce(),
) -> Result<(), MountError> {
    let mut session =
        fuser::Session::new(fs, mp, config).map_err(io_err(format!("mount {}", mp.display())))?;
    // Stopped (dropped) when serve returns, after the session has ended.
    let _poller = match inval {
        Some(i) => i
            .start(session.notifier())
            .map_err(io_err("spawn the invalidation thread"))?,
        None => None,
    };
    let mut unmounter = session.unmount_callable();
    let target = mp.to_path_buf();
    // The kernel's number for this connection (/sys/fs/fuse/connections/N), read from
    // mountinfo now: a stat of the mount point would wait for this daemon.
    let conn = connection_of(mp);
    // Ends the watcher once the session is over, whoever unmounted.
    let ended = std::sync::Arc::new(AtomicBool::new(false));
    let ended2 = ended.clone();
    let watcher = std::thread::Builder::new()
        .name("ckptfs-shutdown".into())
        .spawn(move || {
            while !shutdown.wait_timeout(Duration::from_millis(200)) {
                if ended2.load(Ordering::SeqCst) {
                    return;
                }
            }
            if ended2.load(Ordering::SeqCst) {
                return;
            }
            tracing::info!(signal = shutdown.signal(), "unmounting on shutdown");
            // Not in this mount namespace any more (`ckptfs umount` ran) but the session
            // goes on: a copy of the mount lives in another namespace (a process that
            // unshared its namespace while it was mounted) and would keep it forever.
            let here = conn.is_none_or(mounted_here);
            if here {
                if let Err(e) = unmounter.unmount() {
                    // Busy (a process has its cwd or a file there): detach now; the kernel
                    // ends the session when the last user goes away.
                    tracing::warn!(error = %e, "unmount failed; detaching lazily");
                    if let Err(e) = unmount(&target, true) {
                        tracing::error!(error = %e, "lazy unmount failed");
                    }
                    return;
                }
            }
            // Unmounted here, or gone already: the session should end at once. If it
            // does not, another namespace still holds the mount: abort the connection.
            let t0 = std::time::Instant::now();
            while t0.elapsed() < ABORT_GRACE {
                if ended2.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Some(c) = conn {
                abort_connection(c);
            }
        })
        .map_err(io_err("spawn shutdown thread"))?;
    tracing::info!(mountpoint = %mp.display(), "mounted");
    on_ready();
    let r = session.run();
    ended.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    match r {
        Ok(()) => {}
        // When the kernel tears the connection down at unmount while a reader thread has
        // just taken a request (a FORGET or RELEASE sent by the last close), that thread
        // reads ECONNABORTED instead of ENODEV. Once our mount is gone this is an
        // ordinary end; with the mount still in place the connection was aborted from
        // outside (/sys/fs/fuse/connections/N/abort), which is an error.
        Err(e) if ended_by_unmount(&e, mp) => {
            tracing::debug!("connection ended with ECONNABORTED after unmount");
        }
        Err(e) => return Err(io_err("FUSE session")(e)),
    }
    tracing::info!(mountpoint = %mp.display(), "unmounted");
    Ok(())
}

/// How long a session may go on after its mount left this namespace before the
/// connection is aborted (another namespace holds a copy of the mount).
const ABORT_GRACE: Duration = Duration::from_secs(2);

/// The FUSE connection number of the mount at `mp` (the minor device number shown in
/// mountinfo), without touching the mount itself.
fn connection_of(mp: &Path) -> Option<u32> {
    let want = match (mp.parent(), mp.file_name()) {
        (Some(d), Some(n)) => absolute(if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            d
        })
        .join(n),
        _ => absolute(mp),
    };
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|&x| x == "-")?;
        let fuse = f.get(sep + 1)?.starts_with("fuse");
        let at = Path::new(&unescape(f.get(4)?)) == want;
        let (major, minor) = f.get(2)?.split_once(':')?;
        (fuse && at && major == "0").then(|| minor.parse().ok())?
    })
}

/// Is FUSE connection `conn` mounted anywhere in this mount namespace?
fn mounted_here(conn: u32) -> bool {
    let dev = format!("0:{conn}");
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|t| {
        t.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|&x| x == "-");
            f.get(2) == Some(&dev.as_str())
                && sep
                    .and_then(|s| f.get(s + 1))
                    .is_some_and(|t| t.starts_with("fuse"))
        })
    })
}

/// Abort FUSE connection `conn` through the fusectl file system (mounted on
/// /sys/fs/fuse/connections first if it is not, which needs root); every session thread
/// then reads ENODEV and the session ends. A connection fusectl does not list is gone
/// already (the session is finishing). Without fusectl it logs why and goes on.
fn abort_connection(conn: u32) {
    let base = Path::new("/sys/fs/fuse/connections");
    let file = base.join(conn.to_string()).join("abort");
    if !file.exists() {
        let c = c"/sys/fs/fuse/connections";
        // SAFETY: the strings are valid NUL-terminated strings for the call's duration;
        // data is null (fusectl takes no options).
        let r = unsafe {
            libc::mount(
                c"fusectl".as_ptr(),
                c.as_ptr(),
                c"fusectl".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if r != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "mount fusectl");
        }
    }
    let fusectl = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|t| {
        t.lines()
            .any(|l| l.contains(" /sys/fs/fuse/connections ") && l.contains(" - fusectl "))
    });
    if fusectl && !file.exists() {
        // The connection is gone already (the session is finishing, e.g. CRFS writing
        // its last chunks in destroy).
        return;
    }
    tracing::warn!(
        connection = conn,
        "the session goes on after the unmount (another mount namespace holds the mount): aborting the connection"
    );
    if let Err(e) = std::fs::write(&file, b"1") {
        // Without fusectl there is no telling a connection held elsewhere from a
        // session still finishing its work (CRFS writing its last chunks): no exit.
        tracing::error!(
            error = %e,
            file = %file.display(),
            "cannot abort the FUSE connection (mount fusectl on /sys/fs/fuse/connections, or SIGKILL the daemon)"
        );
    }
}

/// Unmount a [`spawn`]ed session and wait for its threads, treating the kernel's
/// ECONNABORTED shutdown race (see `serve`) as the ordinary end it is.
pub fn unmount_spawned(session: fuser::BackgroundSession, mp: &Path) -> io::Result<()> {
    match session.umount_and_join() {
        Err(e) if ended_by_unmount(&e, mp) => Ok(()),
        r => r,
    }
}

/// `e` ended a session whose mount at `mp` is gone: the kernel's ECONNABORTED race at
/// unmount (see [`serve`]), an ordinary end.
fn ended_by_unmount(e: &io::Error, mp: &Path) -> bool {
    e.raw_os_error() == Some(libc::ECONNABORTED) && !mount_entry(mp).is_some_and(|m| m.is_ckptfs())
}

/// Mount `fs` at `mp` served by `threads` background threads (at least 2: CRFS needs
/// them; benchmarks and tests in one process); unmount with [`unmount_spawned`]. For a
/// [`StoreFs`] use [`spawn_store`], which also runs the invalidation poller its kernel
/// caching relies on.
pub fn spawn<FS: fuser::Filesystem>(
    fs: FS,
    mp: &Path,
    fsname: &str,
    threads: usize,
) -> io::Result<fuser::BackgroundSession> {
    spawn_threads(fs, mp, fsname, threads.max(2))
}

fn spawn_threads<FS: fuser::Filesystem>(
    fs: FS,
    mp: &Path,
    fsname: &str,
    threads: usize,
) -> io::Result<fuser::BackgroundSession> {
    let mut config = Config::default();
    config.n_threads = Some(threads.max(1));
    config.clone_fd = true;
    config.mount_options = base_options();
    config.mount_options.push(MountOption::FSName(fsname.into()));
    fuser::spawn_mount(fs, mp, &config)
}

/// A store mount served by background threads, with its invalidation poller.
pub struct StoreSession {
    session: fuser::BackgroundSession,
    poller: Option<Poller>,
}

impl StoreSession {
    /// Unmount and wait for the session's threads and the poller.
    pub fn unmount(self, mp: &Path) -> io::Result<()> {
        let r = unmount_spawned(self.session, mp);
        drop(self.poller);
        r
    }
}

/// Mount a store file system at `mp` served by `threads` background threads (0:
/// [`STORE_THREADS`]), with its invalidation poller running (benchmarks and tests in
/// one process).
pub fn spawn_store(fs: StoreFs, mp: &Path, fsname: &str, threads: usize) -> io::Result<StoreSession> {
    let inval = fs.invalidator();
    let n = if threads == 0 { STORE_THREADS } else { threads };
    let session = spawn_threads(fs, mp, fsname, n)?;
    let poller = inval.start(session.notifier())?;
    Ok(StoreSession { session, poller })
}
