//! POSIX record locks (`fcntl` F_GETLK/F_SETLK/F_SETLKW), open-file-description locks
//! (F_OFD_*), `flock` and `lockf` on store files, with the kernel's semantics between the
//! processes of a node, by taking real kernel locks on a *stand-in*: an empty file per
//! store file in a caller-owned 0700 runtime directory
//! (`$XDG_RUNTIME_DIR/ckptfs-locks`, else `/tmp/ckptfs-locks-UID`), named
//! `STORE.INO.GENERATION` so a reused inode number never shares locks with its
//! predecessor. The kernel then provides conflicts, blocking, deadlock detection
//! (EDEADLK), F_GETLK's holder pid, and release when a holder dies (SIGKILL included).
//!
//! * Process-associated locks (fcntl, lockf) go through one stand-in descriptor per
//!   (process, file), so every descriptor of the file in the process shares them, and
//!   closing any store descriptor of the file releases them (POSIX's rule), done with an
//!   explicit whole-file F_UNLCK.
//! * OFD locks and `flock` go through one stand-in descriptor per open file description
//!   ([`DescLocks`]), shared by dup and fork exactly as the kernel shares the description;
//!   they go when its last descriptor (in every process) is closed.
//! * Ranges relative to SEEK_CUR/SEEK_END are made absolute from the description's
//!   offset and the file's size (the stand-in is empty and never seeks).
//!
//! Stand-in descriptors are the shim's: close-on-exec, moved to high numbers, and kept
//! open by `close`/`close_range` (see [`is_shim_fd`]).

use crate::shimfds::{add_shim_fd, forget_shim_fd, ino_of, lock, raw, still_ours};
use crate::state::{self, Desc, R};
use crate::sys;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

pub use crate::shimfds::{is_shim_fd, shim_fds_in, DescLocks};

/// (inode, generation) of a store file.
type Key = (u64, u32);

/// Process-associated stand-ins: one per locked file in this process.
static POSIX: Mutex<BTreeMap<Key, (i32, u64)>> = Mutex::new(BTreeMap::new());
static POSIX_N: AtomicUsize = AtomicUsize::new(0);
/// The runtime directory, opened and checked: a directory owned by the caller with no
/// group or other access.
fn runtime_dir() -> R<i32> {
    static DIR: OnceLock<R<i32>> = OnceLock::new();
    *DIR.get_or_init(|| {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let xdg = std::env::var("XDG_RUNTIME_DIR")
            .ok()
            .filter(|d| d.starts_with('/'))
            .map(|d| format!("{d}/ckptfs-locks"));
        let path = xdg.unwrap_or_else(|| format!("/tmp/ckptfs-locks-{uid}"));
        let c = CString::new(path.clone()).map_err(|_| libc::EINVAL)?;
        let _ = raw(libc::SYS_mkdirat, libc::AT_FDCWD as _, c.as_ptr() as _, 0o700);
        let fd = raw(
            libc::SYS_openat,
            libc::AT_FDCWD as _,
            c.as_ptr() as _,
            (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) as _,
        )? as i32;
        // SAFETY: all-zero is a valid stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        raw(libc::SYS_fstat, fd as _, &mut st as *mut _ as _, 0)?;
        if st.st_uid != uid || st.st_mode & 0o077 != 0 {
            crate::sys::raw_close(fd);
            eprintln!("ckptfs-preload: lock directory {path} is not a private (0700) directory of uid {uid}: locks unavailable (ENOLCK)");
            return Err(libc::ENOLCK);
        }
        let fd = crate::sys::move_high(fd);
        add_shim_fd(fd);
        Ok(fd)
    })
}

fn key_of(d: &Desc) -> R<Key> {
    let g = d.handle()?;
    let st = g.as_ref().ok_or(libc::EBADF)?.stat();
    Ok((st.ino, st.generation))
}

fn store_name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        state::store()
            .map(|s| s.name().replace('/', "_"))
            .unwrap_or_default()
    })
    .clone()
}

/// Open a new stand-in descriptor for `key` (a new kernel open file description).
fn open_standin(key: Key) -> R<i32> {
    let dir = runtime_dir()?;
    let name = CString::new(format!("{}.{}.{}", store_name(), key.0, key.1)).map_err(|_| libc::EINVAL)?;
    // SAFETY: raw openat of a NUL-terminated name under our directory descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            dir,
            name.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(sys::errno());
    }
    let fd = fd as i32;
    // SAFETY: all-zero is a valid stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if raw(libc::SYS_fstat, fd as _, &mut st as *mut _ as _, 0).is_err()
        || st.st_mode & libc::S_IFMT != libc::S_IFREG
        || st.st_uid != uid
    {
        crate::sys::raw_close(fd);
        return Err(libc::ENOLCK);
    }
    let fd = crate::sys::move_high(fd);
    add_shim_fd(fd);
    Ok(fd)
}

/// The process-associated stand-in of `d`'s file.
fn posix_fd(d: &Desc) -> R<i32> {
    let key = key_of(d)?;
    let mut m = lock(&POSIX);
    if let Some((fd, ino)) = m.get(&key).copied() {
        if still_ours(fd, ino) {
            return Ok(fd);
        }
        // The program dup2'ed onto it: its POSIX locks are gone (the kernel released
        // them when the number was closed); start afresh, leave its descriptor alone.
        forget_shim_fd(fd);
        m.remove(&key);
        POSIX_N.fetch_sub(1, Ordering::Relaxed);
    }
    let fd = open_standin(key)?;
    m.insert(key, (fd, ino_of(fd)));
    POSIX_N.fetch_add(1, Ordering::Relaxed);
    Ok(fd)
}

/// The OFD/flock stand-in of description `d`.
fn ofd_fd(d: &Desc) -> R<i32> {
    let mut g = lock(&d.locks.ofd);
    if let Some((fd, ino)) = *g {
        if still_ours(fd, ino) {
            return Ok(fd);
        }
        // Replaced by the program's dup2: forget it (its locks went with it).
        forget_shim_fd(fd);
        *g = None;
    }
    let fd = open_standin(key_of(d)?)?;
    *g = Some((fd, ino_of(fd)));
    Ok(fd)
}

/// Make a lock range absolute (SEEK_SET) from the description's offset or the file size,
/// and check the access mode against the lock type as the kernel does.
fn absolute(d: &Desc, fl: &mut libc::flock, setting: bool) -> R<()> {
    let base = match fl.l_whence as i32 {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => d.slot.off.load(Ordering::Relaxed) as i64,
        libc::SEEK_END => {
            let g = d.handle()?;
            g.as_ref().ok_or(libc::EBADF)?.size() as i64
        }
        _ => return Err(libc::EINVAL),
    };
    let start = base.checked_add(fl.l_start).ok_or(libc::EOVERFLOW)?;
    if start < 0 {
        return Err(libc::EINVAL);
    }
    fl.l_start = start;
    fl.l_whence = libc::SEEK_SET as _;
    if setting {
        match fl.l_type as i32 {
            libc::F_RDLCK if d.acc == libc::O_WRONLY => return Err(libc::EBADF),
            libc::F_WRLCK if d.acc == libc::O_RDONLY => return Err(libc::EBADF),
            libc::F_RDLCK | libc::F_WRLCK | libc::F_UNLCK => {}
            _ => return Err(libc::EINVAL),
        }
    }
    Ok(())
}

/// `fcntl` lock commands on store description `d` with the caller's `struct flock`.
/// Called without the descriptor table held: F_SETLKW may block.
pub fn fcntl_lock(d: &Desc, cmd: i32, arg: &mut libc::flock) -> R<i32> {
    let mut fl = *arg;
    let get = cmd == libc::F_GETLK || cmd == libc::F_OFD_GETLK;
    sys::guarded(|| absolute(d, &mut fl, !get))?;
    let ofd = matches!(cmd, libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW);
    let fd = sys::guarded(|| if ofd { ofd_fd(d) } else { posix_fd(d) })?;
    raw(libc::SYS_fcntl, fd as _, cmd as _, &mut fl as *mut _ as _)?;
    if get {
        *arg = fl;
    }
    Ok(0)
}

/// `flock` on store description `d`.
pub fn flock(d: &Desc, op: i32) -> R<i32> {
    let fd = sys::guarded(|| ofd_fd(d))?;
    raw(libc::SYS_flock, fd as _, op as _, 0).map(|_| 0)
}

/// `lockf` on store description `d` (glibc's calls its internal fcntl).
pub fn lockf(d: &Desc, cmd: i32, len: i64) -> R<i32> {
    // SAFETY: all-zero is a valid flock.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_whence = libc::SEEK_CUR as _;
    fl.l_start = 0;
    fl.l_len = len;
    let (c, ty) = match cmd {
        libc::F_LOCK => (libc::F_SETLKW, libc::F_WRLCK),
        libc::F_TLOCK => (libc::F_SETLK, libc::F_WRLCK),
        libc::F_ULOCK => (libc::F_SETLK, libc::F_UNLCK),
        libc::F_TEST => (libc::F_GETLK, libc::F_WRLCK),
        _ => return Err(libc::EINVAL),
    };
    fl.l_type = ty as _;
    match fcntl_lock(d, c, &mut fl) {
        // As glibc: F_TLOCK conflicts are EACCES or EAGAIN (the kernel's); F_TEST reports
        // EACCES when another process holds a lock.
        Ok(_) if cmd == libc::F_TEST => {
            // SAFETY: getpid has no preconditions.
            if fl.l_type as i32 == libc::F_UNLCK || fl.l_pid == unsafe { libc::getpid() } {
                Ok(0)
            } else {
                Err(libc::EACCES)
            }
        }
        r => r,
    }
}

/// A store descriptor of `d`'s file is being closed: release this process's POSIX locks
/// on the file, as closing any descriptor of a file does.
pub fn on_close(d: &Desc) {
    if POSIX_N.load(Ordering::Relaxed) == 0 {
        return;
    }
    let Ok(key) = key_of(d) else { return };
    let fd = lock(&POSIX).get(&key).copied();
    if let Some((fd, ino)) = fd.filter(|(fd, ino)| still_ours(*fd, *ino)) {
        let _ = ino;
        // SAFETY: all-zero is a valid flock; F_UNLCK of the whole file.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_UNLCK as _;
        fl.l_whence = libc::SEEK_SET as _;
        let _ = raw(
            libc::SYS_fcntl,
            fd as _,
            libc::F_SETLK as _,
            &mut fl as *mut _ as _,
        );
    }
}

/// A store file was unlinked: remove its stand-in, if any, so the runtime directory does
/// not fill up. Processes that hold it open keep their locks among themselves (the
/// stand-in inode lives on); a process that starts locking the unlinked-but-open file
/// afterwards gets a new stand-in and does not see those locks (documented).
pub fn unlinked(key: Key) {
    let Ok(dir) = runtime_dir() else { return };
    let Ok(name) = CString::new(format!("{}.{}.{}", store_name(), key.0, key.1)) else {
        return;
    };
    let _ = raw(libc::SYS_unlinkat, dir as _, name.as_ptr() as _, 0);
}
