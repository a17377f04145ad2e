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
    // O_TRUNC asks for write access even with O_RDONLY (Linux): EISDIR on a directory.
    if h.is_dir() && (of.create || flags & libc::O_TRUNC != 0) {
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
    let mut nlink = nlink(h.store(), &st, || h.read_dir().ok());
    // An unlinked file still open has no name left: link count 0, as the kernel says.
    if st.kind == FileKind::File && h.store().path_of(st.ino).is_ok_and(|p| p.is_empty()) {
        nlink = 0;
    }
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
        FileKind::Dir => {
            2 + entries().map_or(0, |v| v.iter().filter(|e| e.kind == FileKind::Dir).count() as u64)
        }
        _ => 1,
    }
}

/// `st_mode` of a store object.
pub fn mode_of(st: &Stat) -> u32 {
    st.kind.mode_bits() | (st.mode & 0o7777)
}

/// Directories report 4096 bytes, as ext4 and xfs do for small ones (du, ls -l agree).
fn size_of(st: &Stat) -> u64 {
    match st.kind {
        FileKind::Dir => 4096,
        _ => st.size,
    }
}

fn blocks_of(st: &Stat) -> u64 {
    match st.kind {
        FileKind::Dir => 8,
        _ => st.allocated / 512,
    }
}

/// Fill a `struct stat` (same layout as stat64 on 64-bit Linux).
pub fn fill_stat(st: &Stat, nlink: u64, out: &mut libc::stat) {
    let (uid, gid) = (st.uid, st.gid);
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
    out.st_atime = (st.atime_ns / 1_000_000_000) as i64;
    out.st_atime_nsec = (st.atime_ns % 1_000_000_000) as i64;
    out.st_mtime = ms;
    out.st_mtime_nsec = mn;
    out.st_ctime = cs;
    out.st_ctime_nsec = cn;
}

/// Fill a `struct statx`.
pub fn fill_statx(st: &Stat, nlink: u64, out: &mut libc::statx) {
    let (uid, gid) = (st.uid, st.gid);
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
    out.stx_atime = ts(st.atime_ns);
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
    let h = h.as_mut().ok_or(libc::EBADF)?;
    h.set_len(len as u64).map_err(se)?;
    touch_handle(h);
    Ok(())
}

/// truncate(2).
pub fn truncate(path: &str, len: i64) -> R<()> {
    if len < 0 {
        return Err(libc::EINVAL);
    }
    let s = state::store()?;
    let st = s.stat(path).map_err(se)?;
    if st.kind == FileKind::Dir {
        return Err(libc::EISDIR);
    }
    if st.kind == FileKind::Symlink {
        return Err(libc::ELOOP); // followed by the hook (links.rs)
    }
    if !crate::perms::may_write(&st) {
        return Err(libc::EACCES);
    }
    s.truncate(path, len as u64).map_err(se)?;
    if let Ok(st) = s.stat(path) {
        let _ = s.set_times(path, st.atime_ns, now_ns());
    }
    Ok(())
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
                touch_handle(h);
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

/// faccessat(2) permission check by the caller's effective ids and the file's owner,
/// group and mode (the store keeps them; the shim checks them only here and in chown).
pub fn access(path: &str, amode: i32) -> R<()> {
    let (st, _) = stat(path)?;
    if st.kind == FileKind::Symlink {
        return Err(libc::ELOOP); // followed by the hook (links.rs)
    }
    if amode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let m = st.mode;
    let bits = crate::perms::class_bits(&st);
    let ok = |bit: u32| root || bits & bit != 0;
    if amode & libc::R_OK != 0 && !ok(4) || amode & libc::W_OK != 0 && !ok(2) {
        return Err(libc::EACCES);
    }
    if amode & libc::X_OK != 0 && (root && m & 0o111 == 0 || !root && bits & 1 == 0) {
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
    state::store()?.rmdir(path).map_err(se)?;
    touch_dir(&parent_of(path));
    Ok(())
}

/// unlink(2).
pub fn unlink(path: &str) -> R<()> {
    if path == "/" {
        return Err(libc::EISDIR);
    }
    let store = state::store()?;
    let key = store.stat(path).ok().map(|s| (s.ino, s.generation));
    store.unlink(path).map_err(se)?;
    touch_dir(&parent_of(path));
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
    if !crate::perms::is_root() {
        for p in [from, to] {
            crate::perms::check_dir_write(&s.stat(&parent_of(p)).map_err(se)?)?;
        }
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

/// chmod(2): the owner or root (EPERM); a caller outside the file's group loses the
/// set-group-id bit it asks for, as on Linux.
pub fn chmod(path: &str, mode: u32) -> R<()> {
    let s = state::store()?;
    let st = s.stat(path).map_err(se)?;
    if st.kind == FileKind::Symlink {
        // Followed by the hook (links.rs); a symlink's own mode cannot change (Linux).
        return Err(libc::ELOOP);
    }
    crate::perms::check_owner(&st)?;
    let mut mode = mode;
    if !crate::perms::is_root() && !crate::perms::in_groups(st.gid) {
        mode &= !0o2000;
    }
    s.chmod(path, mode).map_err(se)
}

/// chown(2) with the kernel's rules: root changes anything; the owner may set the group
/// to one of its groups and the owner to itself; anyone else is EPERM. A regular file
/// loses its set-user-id bit (and set-group-id if group-executable), as on Linux.
/// With `follow`, a symlink is ELOOP (the hook follows it); without (lchown), the
/// symlink itself changes owner.
pub fn chown(path: &str, uid: u32, gid: u32, follow: bool) -> R<()> {
    let s = state::store()?;
    let st = s.stat(path).map_err(se)?;
    if follow && st.kind == FileKind::Symlink {
        return Err(libc::ELOOP);
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let new_uid = if uid == u32::MAX { st.uid } else { uid };
    let new_gid = if gid == u32::MAX { st.gid } else { gid };
    if !root {
        // SAFETY: as above.
        let owner = unsafe { libc::geteuid() } == st.uid;
        if !owner || new_uid != st.uid || new_gid != st.gid && !crate::perms::in_groups(new_gid) {
            return Err(libc::EPERM);
        }
    }
    if uid == u32::MAX && gid == u32::MAX {
        return Ok(());
    }
    s.chown(path, new_uid, new_gid).map_err(se)?;
    if st.kind == FileKind::File && st.mode & 0o6000 != 0 {
        let mut m = st.mode & 0o7777 & !0o4000;
        if m & 0o010 != 0 {
            m &= !0o2000;
        }
        s.chmod(path, m).map_err(se)?;
    }
    Ok(())
}

/// Now, in ns since the epoch.
fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// utimensat(2): access and modification times; UTIME_OMIT keeps one, UTIME_NOW is now.
/// With `follow`, a symlink is ELOOP (the hook follows it); without
/// (AT_SYMLINK_NOFOLLOW), the symlink's own times change.
pub fn utimens(path: &str, times: Option<[libc::timespec; 2]>, follow: bool) -> R<()> {
    let s = state::store()?;
    let st = s.stat(path).map_err(se)?;
    if follow && st.kind == FileKind::Symlink {
        return Err(libc::ELOOP);
    }
    // UTIME_OMIT keeps `cur`.
    let pick = |t: &libc::timespec, cur: u64| -> R<u64> {
        Ok(match t.tv_nsec {
            libc::UTIME_OMIT => cur,
            libc::UTIME_NOW => now_ns(),
            n if !(0..1_000_000_000).contains(&n) => return Err(libc::EINVAL),
            n => (t.tv_sec.max(0) as u64) * 1_000_000_000 + n as u64,
        })
    };
    // Setting given times takes the owner or root (EPERM); setting them to now, write
    // permission (EACCES).
    let to_now = |st: &Stat| {
        if crate::perms::owns(st) || crate::perms::may_write(st) {
            Ok(())
        } else {
            Err(libc::EACCES)
        }
    };
    let (a, m) = match times {
        None => {
            to_now(&st)?;
            (now_ns(), now_ns())
        }
        Some(t) => {
            if t[0].tv_nsec == libc::UTIME_OMIT && t[1].tv_nsec == libc::UTIME_OMIT {
                return Ok(());
            }
            let given = |t: &libc::timespec| !matches!(t.tv_nsec, libc::UTIME_OMIT | libc::UTIME_NOW);
            if given(&t[0]) || given(&t[1]) {
                crate::perms::check_owner(&st)?;
            } else {
                to_now(&st)?;
            }
            (pick(&t[0], st.atime_ns)?, pick(&t[1], st.mtime_ns)?)
        }
    };
    s.set_times(path, a, m).map_err(se)
}

/// After an entry of directory `dir` was added or removed: its mtime (and ctime) are now.
pub fn touch_dir(dir: &str) {
    if let Ok(s) = state::store() {
        if let Ok(st) = s.stat(dir) {
            let _ = s.set_times(dir, st.atime_ns, now_ns());
        }
    }
}

/// A size change through a descriptor: the file's mtime and ctime are now (when its name
/// still leads to it; an unlinked file has nothing to name).
fn touch_handle(h: &ckptfs_store::FileHandle) {
    let s = h.store();
    if let Ok(st) = s.stat(h.path()) {
        if st.ino == h.ino() {
            let _ = s.set_times(h.path(), st.atime_ns, now_ns());
        }
    }
}

/// A name the store cannot hold (symbolic link, FIFO, socket, device node, hard link)
/// is to be created at `path`: the errors the kernel checks first (a component too
/// long (NAME_MAX 255), a missing or non-directory parent, an existing name), then
/// EPERM, as the store mount answers.
pub fn unsupported_create(path: &str) -> R<i32> {
    let s = state::store()?;
    if crate::paths::normalize(path).split('/').any(|c| c.len() > 255) {
        return Err(libc::ENAMETOOLONG);
    }
    if s.stat(&parent_of(path)).map_err(se)?.kind != FileKind::Dir {
        return Err(libc::ENOTDIR);
    }
    match s.stat(path).map_err(se) {
        Ok(_) => Err(libc::EEXIST),
        Err(libc::ENOENT) => Err(libc::EPERM),
        Err(e) => Err(e),
    }
}

/// The parent directory of a store path.
pub fn parent_of(path: &str) -> String {
    let n = crate::paths::normalize(path);
    match n.rfind('/') {
        Some(0) | None => "/".to_string(),
        Some(i) => n[..i].to_string(),
    }
}

// ------------------------------------------------------------------ closing

/// Drop a description this process no longer references through a descriptor: release
/// the process's POSIX locks on the file (closing any descriptor of a file does), then,
/// if it was the last reference, close the store handle and report its error.
pub fn release(d: Arc<Desc>) -> R<()> {
    crate::locks::on_close(&d);
    state::finish(d)
}

/// Close store descriptor `fd` (None if it is not one).
pub fn close_store(fd: i32) -> Option<R<i32>> {
    let d = state::remove(fd)?;
    crate::sys::raw_close(fd);
    Some(release(d).map(|_| 0))
}

/// Called when a pass-through call returned kernel descriptor `fd`: a stale entry (its
/// store descriptor was closed with a raw syscall) must not shadow the new file.
#[inline]
pub fn forget_stale(fd: i32) {
    if state::maybe_store_fd(fd) {
        if let Some(d) = state::remove(fd) {
            let _ = release(d);
        }
    }
}
