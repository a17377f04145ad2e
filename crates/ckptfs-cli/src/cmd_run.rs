//! `ckptfs run` (run a program with the preload shim on the store) and
//! `ckptfs check-binary` (which libc file calls of a program the shim does not cover).

use crate::config::Ctx;
use crate::elf::elf_dynamic_symbols;
use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Arguments of `ckptfs run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The shim library [env CKPTFS_PRELOAD_LIB; default: libckptfs_preload.so next to
    /// the ckptfs binary, then $CKPTFS_BIN_DIR]
    #[arg(long, value_name = "FILE")]
    pub preload_lib: Option<PathBuf>,
    /// Before starting the command, bring back every file under PATH [default: /] that
    /// the store does not hold from the levels of the settings' read order (`--levels`,
    /// CKPTFS_LEVELS, `[levels]`; default: partners in a cluster, then the drain
    /// destination --dest / $CKPTFS_DEST), checking every checksum: the restart after a
    /// reboot or `ckptfs destroy` then finds its checkpoints in memory. Files that fail
    /// the check are reported and left out; the command still runs.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "/", value_parser = store_path)]
    pub restore: Option<String>,
    /// Restart from the newest wholly recoverable dataset (`ckptfs ckpt`): bring its
    /// missing files back (store, then --dest, CRC checked) and run the command with
    /// CKPTFS_RESTART=<its name> (unset when there is none). Datasets with a file lost on
    /// every level are skipped with the reason.
    #[arg(long)]
    pub restart: bool,
    /// Where drained files are (used with --restore and --restart).
    #[command(flatten)]
    pub dest: crate::cmd_agent::DestArgs,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub cmd: Vec<OsString>,
}

/// Arguments of `ckptfs check-binary`.
#[derive(clap::Args, Debug)]
pub struct CheckBinaryArgs {
    /// Also list the imported file calls the shim covers.
    #[arg(long)]
    pub all: bool,
    /// The shim library (as for `ckptfs run`).
    #[arg(long, value_name = "FILE")]
    pub preload_lib: Option<PathBuf>,
    /// Program (a path, or a name looked up in PATH) or shared library.
    pub program: PathBuf,
}

/// Find `libckptfs_preload.so`.
pub fn find_preload_lib(explicit: Option<&Path>) -> Result<PathBuf> {
    const NAME: &str = "libckptfs_preload.so";
    let mut tried = Vec::new();
    let mut cands: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        cands.push(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("CKPTFS_PRELOAD_LIB").filter(|v| !v.is_empty()) {
        cands.push(p.into());
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        cands.push(dir.join(NAME));
    }
    if let Some(d) = std::env::var_os("CKPTFS_BIN_DIR").filter(|v| !v.is_empty()) {
        cands.push(PathBuf::from(d).join(NAME));
    }
    for c in cands {
        if c.is_file() {
            return Ok(std::fs::canonicalize(&c).unwrap_or(c));
        }
        tried.push(c.display().to_string());
    }
    bail!(
        "cannot find {NAME} (tried {}); build it with `cargo build --release -p ckptfs-preload` \
         or pass --preload-lib",
        tried.join(", ")
    )
}

/// `ckptfs run`: create or attach the store, then exec the command with the shim loaded
/// and the resolved settings in its environment. The command replaces this process, so
/// its exit status (or the signal that killed it) is the status of `ckptfs run`.
pub fn main(args: RunArgs, ctx: &Ctx) -> Result<i32> {
    let lib = find_preload_lib(args.preload_lib.as_deref())?;
    if ctx.store.private && args.restore.is_some() {
        bail!("--restore needs a shared store (with --private each rank restores its own files: use the native API)");
    }
    // In a cluster (--cluster and --node-id) the partners' memory is tried before the
    // PFS, and --dest is optional.
    let peers = ctx.cluster.is_some() && ctx.node_id.is_some();
    // The levels are read in the settings' `[levels]` order (default local, partner,
    // pfs); `--dest` gives the drain destinations its `pfs` step reads.
    let restore = match &args.restore {
        None => None,
        Some(prefix) => {
            let order = crate::levels::read_order(ctx).context("--restore")?;
            let pfs = if args.dest.dest.is_empty() {
                let partners = peers && order.reads(&ckptfs_level::Step::Partner);
                if !partners && order.registry.levels().is_empty() {
                    bail!(
                        "--restore: nothing to read: give --dest DIR[,DIR...] (CKPTFS_DEST), a cluster \
                         (--cluster, --node-id), or levels to read (setting levels.order, CKPTFS_LEVELS)"
                    );
                }
                None
            } else {
                Some(args.dest.config(ctx.node_id.as_deref()).context("--restore")?)
            };
            Some((prefix, pfs, order))
        }
    };
    if !ctx.store.private {
        // Create it here with the requested sizes, so that a bad setting is reported
        // before the program starts, and the program's first open attaches at once.
        let store = ckptfs_store::Store::open_or_create(&ctx.store)
            .with_context(|| format!("creating or attaching store {}", ctx.store.name))?;
        if let Some((prefix, c, order)) = &restore {
            restore_before_run(&store, ctx, peers, c.as_ref(), prefix, order)?;
        }
    }
    if ctx.store.private && args.restart {
        bail!("--restart needs a shared store (datasets are kept in the node store)");
    }
    let restart = if args.restart {
        Some(crate::cmd_ckpt::restart_before_run(ctx, &args.dest.dest)?)
    } else {
        None
    };
    let mut cmd = std::process::Command::new(&args.cmd[0]);
    cmd.args(&args.cmd[1..]);
    match restart {
        Some(Some(name)) => {
            cmd.env("CKPTFS_RESTART", name);
        }
        Some(None) => {
            cmd.env_remove("CKPTFS_RESTART");
        }
        None => {}
    }
    for (k, v) in ctx.child_env() {
        cmd.env(k, v);
    }
    cmd.env("CKPTFS_STORE", &ctx.store.name);
    // The C ABI's dataset calls in the command act for this node, job-wide.
    if let (Some(file), Some(node)) = (&ctx.cluster_file, &ctx.node_id) {
        cmd.env("CKPTFS_CLUSTER", file).env("CKPTFS_NODE_ID", node);
    }
    let mounts: Vec<String> = ctx.mounts.iter().map(|m| m.display().to_string()).collect();
    cmd.env("CKPTFS_MOUNT", mounts.join(":"));
    let mut preload = OsString::from(&lib);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        if !old
            .to_string_lossy()
            .split([':', ' '])
            .any(|p| Path::new(p) == lib)
        {
            preload.push(":");
            preload.push(old);
        }
    }
    cmd.env("LD_PRELOAD", preload);
    let err = cmd.exec();
    bail!("cannot run {}: {err}", Path::new(&args.cmd[0]).display())
}

/// A store path for `--restore` (so that `--restore ./app` is an error, not a path).
fn store_path(s: &str) -> Result<String, String> {
    if s.starts_with('/') {
        Ok(s.to_string())
    } else {
        Err(format!(
            "a store path starts with / (got {s:?}; put the command after --)"
        ))
    }
}

/// `ckptfs run --restore`: the multi-level read at job start (as SCR fetches the last
/// checkpoint from the parallel file system when the cache does not have it).
fn restore_before_run(
    store: &ckptfs_store::Store,
    ctx: &Ctx,
    peers: bool,
    c: Option<&ckptfs_agent::AgentConfig>,
    prefix: &str,
    order: &ckptfs_level::ReadOrder,
) -> Result<()> {
    // This node's own drained files (a shared PFS directory holds every node's).
    let own = c.map(|c| vec![c.node_id.clone()]);
    let rep = crate::cmd_node::multi_level_restore(store, ctx, prefix, peers, c, own.as_deref(), order)
        .with_context(|| format!("restore {prefix} before running the command"))?;
    rep.print("ckptfs run: ");
    Ok(())
}

/// libc calls that take a path or a descriptor of a file (what the shim would have to
/// intercept). Stdio calls on a `FILE*` are listed in [`VIA_STDIO`].
const FILE_CALLS: &[&str] = &[
    "open",
    "open64",
    "openat",
    "openat64",
    "creat",
    "creat64",
    "__open_2",
    "__open64_2",
    "__openat_2",
    "__openat64_2",
    "openat2",
    "name_to_handle_at",
    "open_by_handle_at",
    "read",
    "write",
    "pread",
    "pread64",
    "pwrite",
    "pwrite64",
    "readv",
    "writev",
    "preadv",
    "preadv64",
    "pwritev",
    "pwritev64",
    "preadv2",
    "pwritev2",
    "preadv64v2",
    "pwritev64v2",
    "__read_chk",
    "__pread_chk",
    "__pread64_chk",
    "lseek",
    "lseek64",
    "close",
    "close_range",
    "closefrom",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "fcntl64",
    "flock",
    "lockf",
    "lockf64",
    "fsync",
    "fdatasync",
    "syncfs",
    "sync_file_range",
    "ftruncate",
    "ftruncate64",
    "truncate",
    "truncate64",
    "fallocate",
    "fallocate64",
    "posix_fallocate",
    "posix_fallocate64",
    "posix_fadvise",
    "posix_fadvise64",
    "readahead",
    "stat",
    "stat64",
    "lstat",
    "lstat64",
    "fstat",
    "fstat64",
    "fstatat",
    "fstatat64",
    "statx",
    "__xstat",
    "__xstat64",
    "__lxstat",
    "__lxstat64",
    "__fxstat",
    "__fxstat64",
    "__fxstatat",
    "__fxstatat64",
    "statfs",
    "statfs64",
    "fstatfs",
    "fstatfs64",
    "statvfs",
    "statvfs64",
    "fstatvfs",
    "fstatvfs64",
    "access",
    "faccessat",
    "euidaccess",
    "eaccess",
    "unlink",
    "unlinkat",
    "remove",
    "rename",
    "renameat",
    "renameat2",
    "mkdir",
    "mkdirat",
    "rmdir",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "readlink",
    "readlinkat",
    "__readlink_chk",
    "__readlinkat_chk",
    "mknod",
    "mknodat",
    "mkfifo",
    "mkfifoat",
    "chmod",
    "fchmod",
    "fchmodat",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "lutimes",
    "futimes",
    "futimesat",
    "utimensat",
    "futimens",
    "chdir",
    "fchdir",
    "getcwd",
    "__getcwd_chk",
    "get_current_dir_name",
    "getwd",
    "realpath",
    "__realpath_chk",
    "canonicalize_file_name",
    "opendir",
    "fdopendir",
    "readdir",
    "readdir64",
    "readdir_r",
    "readdir64_r",
    "rewinddir",
    "closedir",
    "dirfd",
    "telldir",
    "seekdir",
    "scandir",
    "scandir64",
    "scandirat",
    "scandirat64",
    "getdents64",
    "ftw",
    "ftw64",
    "nftw",
    "nftw64",
    "glob",
    "glob64",
    "fts_open",
    "fts_read",
    "mkstemp",
    "mkstemp64",
    "mkostemp",
    "mkostemp64",
    "mkstemps",
    "mkostemps",
    "mkdtemp",
    "tmpfile",
    "tmpfile64",
    "fopen",
    "fopen64",
    "freopen",
    "freopen64",
    "fdopen",
    "fileno",
    "fileno_unlocked",
    "fclose",
    "fcloseall",
    "popen",
    "mmap",
    "mmap64",
    "copy_file_range",
    "sendfile",
    "sendfile64",
    "splice",
    "tee",
    "vmsplice",
    "ioctl",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "aio_read",
    "aio_write",
    "aio_read64",
    "aio_write64",
    "lio_listio",
    "execve",
    "execv",
    "execvp",
    "execvpe",
    "execl",
    "execlp",
    "execle",
    "fexecve",
    "posix_spawn",
    "posix_spawnp",
    "_exit",
    "_Exit",
    "inotify_add_watch",
    "fanotify_mark",
    "chroot",
    "truncate",
];

/// Stdio calls that work on store streams without their own hook: glibc drives the
/// `fopencookie` stream of a store file through the shim's callbacks.
const VIA_STDIO: &[&str] = &[
    "fread",
    "fwrite",
    "fread_unlocked",
    "fwrite_unlocked",
    "fgets",
    "fgets_unlocked",
    "fputs",
    "fputs_unlocked",
    "fgetc",
    "fputc",
    "getc",
    "putc",
    "_IO_getc",
    "_IO_putc",
    "getc_unlocked",
    "putc_unlocked",
    "fgetc_unlocked",
    "fputc_unlocked",
    "ungetc",
    "getline",
    "getdelim",
    "__getdelim",
    "fprintf",
    "vfprintf",
    "__fprintf_chk",
    "__vfprintf_chk",
    "fscanf",
    "vfscanf",
    "__isoc99_fscanf",
    "__isoc99_vfscanf",
    "__isoc23_fscanf",
    "fseek",
    "fseeko",
    "fseeko64",
    "ftell",
    "ftello",
    "ftello64",
    "rewind",
    "fgetpos",
    "fgetpos64",
    "fsetpos",
    "fsetpos64",
    "fflush",
    "fflush_unlocked",
    "feof",
    "ferror",
    "clearerr",
    "feof_unlocked",
    "ferror_unlocked",
    "clearerr_unlocked",
    "setvbuf",
    "setbuf",
    "setbuffer",
    "setlinebuf",
    "__fread_chk",
    "__fgets_chk",
    "__fread_unlocked_chk",
    "fputws",
    "fgetws",
    "fwprintf",
    "fwide",
    "__uflow",
    "__overflow",
    "flockfile",
    "funlockfile",
    "ftrylockfile",
];

/// Calls deliberately not intercepted, with what they do on a store path or descriptor.
const DOCUMENTED: &[(&str, &str)] = &[
    (
        "scandir",
        "ENOENT: glibc opens the directory internally (use opendir/readdir)",
    ),
    ("nftw", "ENOENT: glibc walks with internal calls"),
    ("ftw", "ENOENT: glibc walks with internal calls"),
    ("tmpfile", "never in the store (creates in /tmp)"),
    ("tmpfile64", "never in the store (creates in /tmp)"),
    ("getdents64", "EBADF: store descriptors are O_PATH descriptors"),
    ("splice", "EBADF: store descriptors are O_PATH descriptors"),
    ("ioctl", "EBADF: store descriptors are O_PATH descriptors"),
    (
        "execl",
        "store files stay leased until exit (exec via execve/execv/execvp is hooked)",
    ),
    (
        "posix_spawn",
        "the child does not inherit store descriptors (they are released at exec)",
    ),
];

fn which(p: &Path) -> Option<PathBuf> {
    if p.components().count() > 1 || p.exists() {
        return Some(p.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(p))
            .find(|c| c.is_file())
    })
}

/// `ckptfs check-binary`: list the libc file calls PROGRAM imports that the shim does not
/// cover. Exit status 0 if all are covered, 2 if some are not.
pub fn check_binary(args: CheckBinaryArgs, _ctx: &Ctx) -> Result<i32> {
    let prog = which(&args.program).with_context(|| format!("{} not found", args.program.display()))?;
    let lib = find_preload_lib(args.preload_lib.as_deref())?;
    let (_, hooks) = elf_dynamic_symbols(&lib)?;
    // The program and every shared library it loads: the shim interposes on the calls of
    // all of them (libgfortran's remove(), libstdc++'s filesystem calls ...).
    let (libs, unfound) = crate::elf::libraries(&prog)?;
    let file_calls: BTreeSet<&str> = FILE_CALLS.iter().copied().collect();
    let mut covered: BTreeSet<String> = BTreeSet::new();
    // name -> the objects importing it
    let mut missing: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for obj in std::iter::once(&prog).chain(libs.iter()) {
        let (imports, _) = elf_dynamic_symbols(obj)?;
        let short = if obj == &prog {
            "the program".to_string()
        } else {
            obj.file_name()
                .map_or_else(|| obj.display().to_string(), |n| n.to_string_lossy().to_string())
        };
        for s in &imports {
            let base = s.split('@').next().unwrap_or(s);
            if hooks.contains(base) || VIA_STDIO.contains(&base) {
                if file_calls.contains(base) || VIA_STDIO.contains(&base) {
                    covered.insert(base.to_string());
                }
            } else if file_calls.contains(base) {
                let v = missing.entry(base.to_string()).or_default();
                if !v.contains(&short) {
                    v.push(short.clone());
                }
            }
        }
    }
    println!(
        "{}: {} file calls imported by it and {} shared libraries, {} not covered by the shim",
        prog.display(),
        covered.len() + missing.len(),
        libs.len(),
        missing.len()
    );
    for (m, by) in &missing {
        let why = DOCUMENTED.iter().find(|d| d.0 == m.as_str()).map_or("not intercepted: on a store path it fails with the kernel's ENOENT; on a store descriptor with EBADF", |d| d.1);
        println!("  NOT COVERED  {m:<24} {why} (imported by {})", by.join(", "));
    }
    for n in &unfound {
        println!("  warning: shared library {n} not found: its imports are not checked");
    }
    if args.all {
        for l in &libs {
            println!("  library      {}", l.display());
        }
        for c in &covered {
            println!("  covered      {c}");
        }
    }
    Ok(if missing.is_empty() { 0 } else { 2 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_dynamic_symbols_of_a_system_binary() {
        let ls = which(Path::new("ls")).expect("ls in PATH");
        let (imports, _) = elf_dynamic_symbols(&ls).unwrap();
        assert!(imports.iter().any(|s| s.starts_with("opendir")), "{imports:?}");
        assert!(elf_dynamic_symbols(Path::new("/etc/hostname")).is_err());
    }
}
