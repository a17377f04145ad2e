//! Store-side implementations of the intercepted calls, in safe Rust: each returns the
//! value or the errno the kernel would give for the same error.

use crate::state::{self, se, Desc, R};
use ckptfs_store::{FileKind, OpenFlags, Stat, Store};
use std::io::SeekFrom;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Device number reported for store files ("ck" in ASCII), distinct from real devices.
pub const DEV: u64 = 0x636b;

/// Status flags F_SETFL may change (as Linux).
const SETFL_MASK: i32 = libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME;

/// Open `path` in the store and reserve a descriptor for it.
pub fn open(mount: usize, path: &str, flags: i32, mode: u32) -> R<i32> {
    let store = state::store()?;
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(libc::EOPNOTSUPP);
    }
    let opath = flags & libc::O_PATH != 0;
    let mut of = if opath {
        OpenFlags::READ
    } else {
        OpenFlags::from_posix(flags).map_err(se)?
    };
    if opath {
        of.directory = flags & libc::O_DIRECTORY != 0;
    }
    if of.create && of.directory {
        return Err(libc::EINVAL);
    }
    // O_TRUNC without write access: Linux truncates only writable opens.
    of.trunc &= of.write;
    let h = store
        .open(path, of, mode & 0o7777 & !state::umask())
        .map_err(se)?;
    if h.is_dir() && of.create {
        return Err(libc::EISDIR);
    }
    let acc = if opath {
        libc::O_RDONLY
    } else {
        flags & libc::O_ACCMODE
    };
    let fl = (flags & (SETFL_MASK | libc::O_PATH)) as u32;
    let d = Desc::new(h, mount, normalize_store(path), acc, fl)?;
    let fd = state::reserve_fd(flags & libc::O_CLOEXEC != 0)?;
    state::install(fd, Arc::new(d));
    Ok(fd)
}

fn normalize_store(p: &str) -> String {
    crate::paths::normalize(p)
}

fn check_io(d: &Desc, write: bool) -> R<()> {
    if d.slot.flags.load(Ordering::Relaxed) & libc::O_PATH as u32 != 0 {
        return Err(libc::EBADF);
    }
    let ok = match d.acc {
        libc::O_RDONLY => !write,
        libc::O_WRONLY => write,
        _ => true,
    };
    if !ok {
        return Err(libc::EBADF);
    }
    if d.is_dir {
        return Err(libc::EISDIR);
    }
    Ok(())
}

/// read(2) at the shared offset.
pub fn read(d: &Desc, buf: &mut [u8]) -> R<usize> {
    check_io(d, false)?;
    let mut h = d.handle()?;
    let h = h.as_mut().ok_or(libc::EBADF)?;
    let _g = d.slot.lock();
    let off = d.slot.off.load(Ordering::Relaxed);
    let n = h.pread(buf, off).map_err(se)?;
    d.slot.off.store(off + n as u64, Ordering::Relaxed);
    Ok(n)
}

/// readv(2): fills the buffers in order, one read per buffer until a short one.
pub fn readv(d: &Desc, bufs: &mut [&mut [u8]]) -> R<usize> {
    check_io(d, false)?;
    let mut h = d.handle()?;
    let h = h.as_mut().ok_or(libc::EBADF)?;
    let _g = d.slot.lock();
    let off = d.slot.off.load(Ordering::Relaxed);
    let mut total = 0usize;
    for b in bufs.iter_mut() {
        let n = h.pread(b, off + total as u64).map_err(se)?;
        total += n;
        if n < b.len() {
            break;
        }
    }
    d.slot.off.store(off + total as u64, Ordering::Relaxed);
    Ok(total)
}

/// pread(2)/preadv(2).
pub fn preadv(d: &Desc, bufs: &mut [&mut [u8]], off: i64) -> R<usize> {
    check_io(d, false)?;
    if off < 0 {
        return Err(libc::EINVAL);
    }
    let mut h = d.handle()?;
    let h = h.as_mut().ok_or(libc::EBADF)?;
    let mut total = 0usize;
    for b in bufs.iter_mut() {
        let n = h.pread(b, off as u64 + total as u64).map_err(se)?;
        total += n;
        if n < b.len() {
            break;
        }
    }
    Ok(total)
}

/// write(2)/writev(2) at the shared offset (or the end with O_APPEND).
pub fn writev(d: &Desc, bufs: &[&[u8]]) -> R<usize> {
    check_io(d, true)?;
    let mut h = d.handle()?;
    let h = h.as_mut().ok_or(libc::EBADF)?;
    let _g = d.slot.lock();
    h.set_append(d.slot.flags.load(Ordering::Relaxed) & libc::O_APPEND as u32 != 0);
    let off = d.slot.off.load(Ordering::Relaxed);
    h.seek(SeekFrom::Start(off)).map_err(se)?;
    let mut total = 0usize;
    for b in bufs {
        if b.is_empty() {
            continue;
        }
        match h.write(b) {
            Ok(n) => {
                total += n;
                if n < b.len() {
                    break;
                }
            }
            Err(e) if total > 0 => {
                let _ = e;
                break;
            }
            Err(e) => {
                return Err(se(e));
            }
        }
    }
    if total > 0 || bufs.iter().all(|b| b.is_empty()) {
        d.slot.off.store(h.position(), Ordering::Relaxed);
    }
    Ok(total)
}

/// pwrite(2)/pwritev(2). Like Linux, O_APPEND makes pwrite append.
pub fn pwritev(d: &Desc, bufs: &[&[u8]], off: i64) -> R<usize> {
    check_io(d, true)?;
    if off < 0 {
        return Err(libc::EINVAL);
    }
    let mut h = d.handle()?;
    let h = h.as_mut().ok_or(libc::EBADF)?;
    h.set_append(d.slot.flags.load(Ordering::Relaxed) & libc::O_APPEND as u32 != 0);
    let mut total = 0usize;
    for b in bufs {
        match h.pwrite(b, off as u64 + total as u64) {
            Ok(n) => {
                total += n;
                if n < b.len() {
                    break;
                }
            }
            Err(_) if total > 0 => break,
            Err(e) => return Err(se(e)),
        }
    }
    Ok(total)
}

/// lseek(2), with SEEK_DATA/SEEK_HOLE (the store has no holes before the size).
pub fn lseek(d: &Desc, off: i64, whence: i32) -> R<i64> {
    if d.slot.flags.load(Ordering::Relaxed) & libc::O_PATH as u32 != 0 {
        return Err(libc::EBADF);
    }
    let mut h = d.handle()?;
    let h = h.as_mut().ok_or(libc::EBADF)?;
    let _g = d.slot.lock();
    let cur = d.slot.off.load(Ordering::Relaxed) as i128;
    let size = if d.is_dir { 0 } else { h.size() as i128 };
    let new: i128 = match whence {
        libc::SEEK_SET => off as i128,
        libc::SEEK_CUR => cur + off as i128,
        libc::SEEK_END => size + off as i128,
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            if off < 0 || off as i128 >= size {
                return Err(libc::ENXIO);
            }
            if whence == libc::SEEK_DATA {
                off as i128
            } else {
                size
            }
        }
        _ => return Err(libc::EINVAL),
    };
    if !(0..=i64::MAX as i128).contains(&new) {
        return Err(libc::EINVAL);
    }
    d.slot.off.store(new as u64, Ordering::Relaxed);
    Ok(new as i64)
}

/// Attributes of an open description.
pub fn fstat(d: &Desc) -> R<(Stat, u64)> {
    let h = d.handle()?;
    let h = h.as_ref().ok_or(libc::EBADF)?;
    let st = h.stat();
    let nlink = nlink(h.store(), &st, || h.read_dir().ok());
    Ok((st, nlink))
}

/// Attributes of a store path.
pub fn stat(path: &str) -> R<(Stat, u64)> {
    let store = state::store()?;
    let st = store.stat(path).map_err(se)?;
    let nlink = nlink(store, &st, || store.read_dir(path).ok());
    Ok((st, nlink))
}

fn nlink(_s: &Store, st: &Stat, entries: impl FnOnce() -> Option<Vec<ckptfs_store::DirEntry>>) -> u64 {
    match st.kind {
        FileKind::File => 1,
        FileKind::Dir => {
            2 + entries().map_or(0, |v| v.iter().filter(|e| e.kind == FileKind::Dir).count() as u64)
        }
    }
}

/// `st_mode` of a store object.
pub fn mode_of(st: &Stat) -> u32 {
    let t = match st.kind {
        FileKind::File => libc::S_IFREG,
        FileKind::Dir => libc::S_IFDIR,
    };
    t | (st.mode & 0o7777)
}

/// Directories report 4096 bytes, as ext4 and xfs do for small ones (du, ls -l agree).
fn size_of(st: &Stat) -> u64 {
    match st.kind {
        FileKind::Dir => 4096,
        FileKind::File => st.size,
    }
}

fn blocks_of(st: &Stat) -> u64 {
    match st.kind {
        FileKind::Dir => 8,
        FileKind::File => st.allocated / 512,
    }
}

/// Fill a `struct stat` (same layout as stat64 on 64-bit Linux).
pub fn fill_stat(st: &Stat, nlink: u64, out: &mut libc::stat) {
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let chunk = state::store().map(|s| s.chunk_size()).unwrap_or(1 << 20);
    // SAFETY: libc::stat is plain old data; zero is a valid value for every field.
    *out = unsafe { std::mem::zeroed() };
    out.st_dev = DEV;
    out.st_ino = st.ino;
    out.st_nlink = nlink as _;
    out.st_mode = mode_of(st);
    out.st_uid = uid;
    out.st_gid = gid;
    out.st_size = size_of(st) as i64;
    out.st_blksize = chunk as _;
    out.st_blocks = (blocks_of(st)) as i64;
    let (ms, mn) = (
        (st.mtime_ns / 1_000_000_000) as i64,
        (st.mtime_ns % 1_000_000_000) as i64,
    );
    let (cs, cn) = (
        (st.ctime_ns / 1_000_000_000) as i64,
        (st.ctime_ns % 1_000_000_000) as i64,
    );
    out.st_atime = ms;
    out.st_atime_nsec = mn;
    out.st_mtime = ms;
    out.st_mtime_nsec = mn;
    out.st_ctime = cs;
    out.st_ctime_nsec = cn;
}

/// Fill a `struct statx`.
pub fn fill_statx(st: &Stat, nlink: u64, out: &mut libc::statx) {
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let chunk = state::store().map(|s| s.chunk_size()).unwrap_or(1 << 20);
    // SAFETY: libc::statx is plain old data.
    *out = unsafe { std::mem::zeroed() };
    out.stx_mask = libc::STATX_BASIC_STATS;
    out.stx_blksize = chunk as u32;
    out.stx_nlink = nlink as u32;
    out.stx_uid = uid;
    out.stx_gid = gid;
    out.stx_mode = mode_of(st) as u16;
    out.stx_ino = st.ino;
    out.stx_size = size_of(st);
    out.stx_blocks = blocks_of(st);
    let ts = |ns: u64| {
        // SAFETY: plain old data.
        let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        t.tv_sec = (ns / 1_000_000_000) as i64;
        t.tv_nsec = (ns % 1_000_000_000) as u32;
        t
    };
    out.stx_atime = ts(st.mtime_ns);
    out.stx_mtime = ts(st.mtime_ns);
    out.stx_ctime = ts(st.ctime_ns);
    out.stx_dev_major = (DEV >> 8) as u32;
    out.stx_dev_minor = (DEV & 0xff) as u32;
}

/// ftruncate(2).
pub fn ftruncate(d: &Desc, len: i64) -> R<()> {
    if len < 0 {
        return Err(libc::EINVAL);
    }
    if d.is_dir || d.acc == libc::O_RDONLY {
        return Err(libc::EINVAL);
    }
    let mut h = d.handle()?;
    h.as_mut().ok_or(libc::EBADF)?.set_len(len as u64).map_err(se)
}

/// truncate(2).
pub fn truncate(path: &str, len: i64) -> R<()> {
    if len < 0 {
        return Err(libc::EINVAL);
    }
    let s = state::store()?;
    if s.stat(path).map_err(se)?.kind == FileKind::Dir {
        return Err(libc::EISDIR);
    }
    s.truncate(path, len as u64).map_err(se)
}

/// fsync(2)/fdatasync(2).
pub fn fsync(d: &Desc) -> R<()> {
    let mut h = d.handle()?;
    h.as_mut().ok_or(libc::EBADF)?.sync().map_err(se)
}

/// fallocate(2): mode 0 grows the file; KEEP_SIZE is accepted (chunks are taken at
/// write time); punching or collapsing is EOPNOTSUPP.
pub fn fallocate(d: &Desc, mode: i32, off: i64, len: i64) -> R<()> {
    if off < 0 || len <= 0 {
        return Err(libc::EINVAL);
    }
    if d.is_dir {
        return Err(libc::EISDIR);
    }
    if d.acc == libc::O_RDONLY {
        return Err(libc::EBADF);
    }
    let end = off.checked_add(len).ok_or(libc::EFBIG)? as u64;
    match mode {
        0 => {
            let mut h = d.handle()?;
            let h = h.as_mut().ok_or(libc::EBADF)?;
            if end > h.size() {
                h.set_len(end).map_err(se)?;
            }
            Ok(())
        }
        libc::FALLOC_FL_KEEP_SIZE => Ok(()),
        _ => Err(libc::EOPNOTSUPP),
    }
}

/// fcntl(2) on a store descriptor, except the commands handled by the hook itself
/// (F_GETFD/F_SETFD/F_DUPFD*, which act on the kernel descriptor).
pub fn fcntl(d: &Desc, cmd: i32, arg: u64) -> R<i32> {
    match cmd {
        libc::F_GETFL => {
            let f = d.slot.flags.load(Ordering::Relaxed) as i32;
            // O_LARGEFILE as the 64-bit kernel reports it (glibc's header defines it as 0).
            Ok(d.acc | f | 0o100000)
        }
        libc::F_SETFL => {
            let keep = d.slot.flags.load(Ordering::Relaxed) as i32 & !SETFL_MASK;
            d.slot
                .flags
                .store((keep | (arg as i32 & SETFL_MASK)) as u32, Ordering::Relaxed);
            Ok(0)
        }
        // Record locks are not implemented on store files: ENOLCK, as a file system
        // without a lock manager answers.
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => Err(libc::ENOLCK),
        _ => Err(libc::EINVAL),
    }
}

/// faccessat(2) permission check (the effective ids are the file's owner ids).
pub fn access(path: &str, amode: i32) -> R<()> {
    let (st, _) = stat(path)?;
    if amode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let m = st.mode;
    let ok = |bit: u32| root || m & (bit << 6) != 0;
    if amode & libc::R_OK != 0 && !ok(4) || amode & libc::W_OK != 0 && !ok(2) {
        return Err(libc::EACCES);
    }
    if amode & libc::X_OK != 0 && m & (if root { 0o111 } else { 0o100 }) == 0 {
        return Err(libc::EACCES);
    }
    Ok(())
}

/// mkdir(2).
pub fn mkdir(path: &str, mode: u32) -> R<()> {
    state::store()?
        .mkdir(path, mode & 0o7777 & !state::umask())
        .map(|_| ())
        .map_err(se)
}

/// rmdir(2).
pub fn rmdir(path: &str) -> R<()> {
    if path == "/" {
        return Err(libc::EBUSY);
    }
    if path.ends_with("/.") {
        return Err(libc::EINVAL);
    }
    state::store()?.rmdir(path).map_err(se)
}

/// unlink(2).
pub fn unlink(path: &str) -> R<()> {
    if path == "/" {
        return Err(libc::EISDIR);
    }
    let store = state::store()?;
    let key = store.stat(path).ok().map(|s| (s.ino, s.generation));
    store.unlink(path).map_err(se)?;
    if let Some(k) = key {
        crate::locks::unlinked(k);
    }
    Ok(())
}

/// renameat2(2) within the store (RENAME_NOREPLACE supported, RENAME_EXCHANGE not).
pub fn rename(from: &str, to: &str, flags: u32) -> R<()> {
    let s = state::store()?;
    if flags & !libc::RENAME_NOREPLACE != 0 {
        return Err(libc::EINVAL);
    }
    if from == "/" || to == "/" {
        return Err(libc::EBUSY);
    }
    if flags & libc::RENAME_NOREPLACE != 0 {
        s.stat(from).map_err(se)?;
        match s.stat(to) {
            Ok(_) => return Err(libc::EEXIST),
            Err(e) if e.errno() == libc::ENOENT => {}
            Err(e) => return Err(se(e)),
        }
    }
    s.rename(from, to).map_err(se)
}

/// chmod(2).
pub fn chmod(path: &str, mode: u32) -> R<()> {
    state::store()?.chmod(path, mode).map_err(se)
}

/// chown(2): the store keeps no owners; a change to the reported owner (or -1) is a
/// no-op, anything else EPERM.
pub fn chown(path: &str, uid: u32, gid: u32) -> R<()> {
    state::store()?.stat(path).map_err(se)?;
    // SAFETY: geteuid/getegid have no preconditions.
    let (u, g) = unsafe { (libc::geteuid(), libc::getegid()) };
    if (uid == u32::MAX || uid == u) && (gid == u32::MAX || gid == g) {
        Ok(())
    } else {
        Err(libc::EPERM)
    }
}

/// utimensat(2): the store keeps the modification time; UTIME_OMIT leaves it.
pub fn utimens(path: &str, times: Option<[libc::timespec; 2]>) -> R<()> {
    let s = state::store()?;
    s.stat(path).map_err(se)?;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    };
    let ns = match times {
        None => now(),
        Some(t) => match t[1].tv_nsec {
            libc::UTIME_OMIT => return Ok(()),
            libc::UTIME_NOW => now(),
            n if !(0..1_000_000_000).contains(&n) => return Err(libc::EINVAL),
            n => (t[1].tv_sec.max(0) as u64) * 1_000_000_000 + n as u64,
        },
    };
    s.set_mtime(path, ns).map_err(se)
}
