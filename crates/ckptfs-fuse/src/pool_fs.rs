//! Pool mode (`ckptfs mount --pool`): the aggregate memory pool as a file system, so
//! unmodified programs write checkpoints into the benefactors' memory (stdchk, section
//! IV, "Traditional file system API").
//!
//! The tree is the pool's namespace: a file is the newest committed version of a pool
//! file; a directory is a path prefix of some file, or one made with mkdir (kept by
//! this mount only, until a file is written in it). Semantics, as a checkpoint is
//! written once, start to end (docs/pool.md, "The FUSE mount"):
//!
//! * create, or open for writing with O_TRUNC, starts a new version through the pool
//!   client's write buffer; writes must be sequential (a write elsewhere: EINVAL);
//!   opening an existing file for writing without O_TRUNC: EINVAL;
//! * the first close (flush) commits the version (its errors, a lost benefactor
//!   included, are close()'s); a write after it: EBADF; a file dropped without a flush
//!   is aborted and its chunks reclaimed; fsync returns 0 and does nothing (the
//!   version becomes durable in the pool at its commit);
//! * reads fetch chunks from the benefactors (falling back to replicas and drained
//!   files), checked against their BLAKE3 hash and CRC32C; the version read is the
//!   newest one when the file was opened;
//! * unlink removes every version; rename: EXDEV (`mv` then copies and removes);
//!   chmod on a file being written sets the mode committed, otherwise EPERM; times are
//!   the commit's (setting them is accepted and ignored); links, symlinks, mknod,
//!   fallocate, setting xattrs: ENOTSUP (a file has none).

use crate::dirs::{dot_entries, DirTable, Listing};
use crate::{reply_empty, Counters, IoMode};
use ckptfs_pool::msg::FileInfo;
use ckptfs_pool::{PoolClient, PoolError, PoolWrite};
use fuser::{
    Errno, FileAttr, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow,
};
use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Attributes change under the mount (other clients write the pool): short caching.
const TTL: Duration = Duration::from_millis(200);

fn perr(e: &PoolError) -> Errno {
    Errno::from_i32(e.errno())
}

/// A file being written.
struct Writing {
    w: Option<PoolWrite>,
    mode: u32,
    /// The commit's error, answered again to later calls.
    failed: Option<Errno>,
}

/// A file open for reading: its version, connections, the last chunk read.
struct Reading {
    f: FileInfo,
    conns: ckptfs_pool::client::Conns,
    last: Option<(u64, Vec<u8>)>,
}

enum Handle {
    Write(Mutex<Writing>, String),
    Read(Mutex<Reading>),
}

/// The pool as a FUSE file system (see the module documentation).
pub struct PoolFs {
    client: PoolClient,
    uid: u32,
    gid: u32,
    /// Inode → path (never reused while mounted).
    paths: Mutex<(HashMap<u64, String>, HashMap<String, u64>)>,
    next_ino: AtomicU64,
    /// Directories made with mkdir.
    made: Mutex<BTreeSet<String>>,
    /// Files being written: path → bytes taken so far.
    writing: Mutex<HashMap<String, u64>>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    dirs: DirTable<OsString>,
    counters: Counters,
    /// The kernel passes O_TRUNC on to open (FUSE_ATOMIC_O_TRUNC); without it, it
    /// truncates with a setattr after the open, and any open for writing starts a new
    /// version.
    atomic_trunc: bool,
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

impl PoolFs {
    /// Serve the pool `client` talks to.
    pub fn new(client: PoolClient) -> PoolFs {
        let mut by_ino = HashMap::new();
        let mut by_path = HashMap::new();
        by_ino.insert(1, "/".to_string());
        by_path.insert("/".to_string(), 1);
        // SAFETY: geteuid and getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        PoolFs {
            client,
            uid,
            gid,
            paths: Mutex::new((by_ino, by_path)),
            next_ino: AtomicU64::new(2),
            made: Mutex::new(BTreeSet::new()),
            writing: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            dirs: DirTable::new(),
            counters: Counters::default(),
            atomic_trunc: false,
        }
    }

    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        self.paths
            .lock()
            .unwrap()
            .0
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn ino(&self, path: &str) -> u64 {
        let mut p = self.paths.lock().unwrap();
        if let Some(i) = p.1.get(path) {
            return *i;
        }
        let i = self.next_ino.fetch_add(1, Relaxed);
        p.0.insert(i, path.to_string());
        p.1.insert(path.to_string(), i);
        i
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        let name = crate::split_name(name)?;
        if name == "." || name == ".." || name.contains('/') {
            return Err(Errno::EINVAL);
        }
        Ok(join(&self.path(parent)?, name))
    }

    fn attr(&self, path: &str, kind: FileType, size: u64, mode: u32, mtime_ns: u64) -> FileAttr {
        let t = crate::system_time(mtime_ns);
        FileAttr {
            ino: INodeNo(self.ino(path)),
            size,
            blocks: size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm: (mode & 0o7777) as u16,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 1 << 20,
            flags: 0,
        }
    }

    fn dir_attr(&self, path: &str) -> FileAttr {
        self.attr(path, FileType::Directory, 0, 0o755, 0)
    }

    fn file_attr(&self, f: &FileInfo) -> FileAttr {
        let mode = if f.mode & 0o7777 == 0 { 0o644 } else { f.mode };
        self.attr(&f.path, FileType::RegularFile, f.size, mode, f.mtime_ns)
    }

    /// What is at `path`: a file being written, a committed file, a directory.
    fn stat(&self, path: &str) -> Result<FileAttr, Errno> {
        if path == "/" {
            return Ok(self.dir_attr(path));
        }
        if let Some(n) = self.writing.lock().unwrap().get(path) {
            return Ok(self.attr(path, FileType::RegularFile, *n, 0o644, crate::now_ns()));
        }
        if let Some(f) = self.client.stat(path).map_err(|e| perr(&e))? {
            return Ok(self.file_attr(&f));
        }
        if self.made.lock().unwrap().contains(path) || self.is_prefix(path)? {
            return Ok(self.dir_attr(path));
        }
        Err(Errno::ENOENT)
    }

    fn is_prefix(&self, path: &str) -> Result<bool, Errno> {
        let pre = format!("{path}/");
        if self.writing.lock().unwrap().keys().any(|p| p.starts_with(&pre)) {
            return Ok(true);
        }
        Ok(!self.client.list(path).map_err(|e| perr(&e))?.is_empty())
    }

    fn add(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Relaxed);
        self.handles.lock().unwrap().insert(fh, Arc::new(h));
        fh
    }

    fn handle(&self, fh: u64) -> Result<Arc<Handle>, Errno> {
        self.handles.lock().unwrap().get(&fh).cloned().ok_or(Errno::EBADF)
    }

    /// Start a new version of `path`.
    fn start_write(&self, path: &str, mode: u32) -> Result<(u64, FileAttr), Errno> {
        ckptfs_pool::msg::check_path(path).map_err(|_| Errno::EINVAL)?;
        {
            let mut w = self.writing.lock().unwrap();
            if w.contains_key(path) {
                // One writer per file at a time.
                return Err(Errno::from_i32(libc::ETXTBSY));
            }
            w.insert(path.to_string(), 0);
        }
        match self.client.create(path, None) {
            Ok(w) => {
                let fh = self.add(Handle::Write(
                    Mutex::new(Writing {
                        w: Some(w),
                        mode,
                        failed: None,
                    }),
                    path.to_string(),
                ));
                Ok((
                    fh,
                    self.attr(path, FileType::RegularFile, 0, mode, crate::now_ns()),
                ))
            }
            Err(e) => {
                self.writing.lock().unwrap().remove(path);
                Err(perr(&e))
            }
        }
    }

    /// Commit a file being written (its first flush).
    fn commit(&self, w: &mut Writing, path: &str) -> Result<(), Errno> {
        if let Some(e) = w.failed {
            return Err(e);
        }
        let Some(pw) = w.w.take() else {
            return Ok(());
        };
        let r = pw.commit(crate::now_ns(), w.mode, None);
        self.writing.lock().unwrap().remove(path);
        match r {
            Ok(rep) => {
                tracing::info!(
                    path,
                    version = rep.version,
                    bytes = rep.size,
                    oab_mb_s = rep.oab / 1e6,
                    asb_mb_s = rep.asb / 1e6,
                    "committed"
                );
                Ok(())
            }
            Err(e) => {
                tracing::error!(path, error = %e, "commit failed");
                w.failed = Some(perr(&e));
                Err(perr(&e))
            }
        }
    }

    fn read_at(&self, r: &mut Reading, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let end = (offset + size as u64).min(r.f.size);
        let cs = r.f.chunk_size.max(1);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut pos = offset;
        while pos < end {
            let i = pos / cs;
            if r.last.as_ref().is_none_or(|(k, _)| *k != i) {
                let d = self
                    .client
                    .read_chunk(&r.f, i, &mut r.conns)
                    .map_err(|e| perr(&e))?;
                r.last = Some((i, d));
            }
            let (_, d) = r.last.as_ref().expect("read");
            let from = (pos - i * cs) as usize;
            let to = ((end - i * cs) as usize).min(d.len());
            if from >= to {
                return Err(Errno::EIO);
            }
            out.extend_from_slice(&d[from..to]);
            pos += (to - from) as u64;
        }
        Ok(out)
    }
}

fn reply_entry(reply: ReplyEntry, r: Result<FileAttr, Errno>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for PoolFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        crate::configure_kernel(config, IoMode::Direct, None);
        self.atomic_trunc = config
            .add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC)
            .is_ok();
        Ok(())
    }

    fn destroy(&mut self) {
        tracing::info!(
            reads = self.counters.reads.load(Relaxed),
            writes = self.counters.writes.load(Relaxed),
            read_bytes = self.counters.read_bytes.load(Relaxed),
            write_bytes = self.counters.write_bytes.load(Relaxed),
            "pool file system destroyed"
        );
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.counters.meta.fetch_add(1, Relaxed);
        reply_entry(reply, self.child(parent, name).and_then(|p| self.stat(&p)));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<fuser::FileHandle>, reply: ReplyAttr) {
        self.counters.meta.fetch_add(1, Relaxed);
        match self.path(ino).and_then(|p| self.stat(&p)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<fuser::FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = (|| {
            let path = self.path(ino)?;
            if uid.is_some() || gid.is_some() {
                return Err(Errno::EPERM);
            }
            let writing = self.writing.lock().unwrap().get(&path).copied();
            if let Some(len) = size {
                // Only the truncation of a file being written, to what it holds.
                if writing != Some(len) {
                    return Err(Errno::EINVAL);
                }
            }
            if let Some(m) = mode {
                let h = fh.and_then(|f| self.handle(f.0).ok());
                match h.as_deref() {
                    Some(Handle::Write(w, _)) => w.lock().unwrap().mode = m & 0o7777,
                    _ => return Err(Errno::EPERM),
                }
            }
            self.stat(&path)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self.child(parent, name).and_then(|p| {
            ckptfs_pool::msg::check_path(&p).map_err(|_| Errno::EINVAL)?;
            if self.stat(&p).is_ok() {
                return Err(Errno::EEXIST);
            }
            self.made.lock().unwrap().insert(p.clone());
            Ok(self.dir_attr(&p))
        });
        reply_entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self.child(parent, name).and_then(|p| {
            match self.client.remove(&p, None, None).map_err(|e| perr(&e))? {
                0 => Err(Errno::ENOENT),
                _ => Ok(()),
            }
        });
        reply_empty(reply, r);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self.child(parent, name).and_then(|p| {
            if self.is_prefix(&p)? {
                return Err(Errno::ENOTEMPTY);
            }
            if self.made.lock().unwrap().remove(&p) {
                Ok(())
            } else {
                Err(Errno::ENOENT)
            }
        });
        reply_empty(reply, r);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        // The pool has no rename: mv copies and removes instead.
        reply.error(Errno::from_i32(libc::EXDEV));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = (|| {
            let path = self.path(ino)?;
            if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                if self.atomic_trunc && flags.0 & libc::O_TRUNC == 0 {
                    return Err(Errno::EINVAL);
                }
                let mode = self.stat(&path).map(|a| a.perm as u32).unwrap_or(0o644);
                return self.start_write(&path, mode).map(|(fh, _)| fh);
            }
            let f = self
                .client
                .stat(&path)
                .map_err(|e| perr(&e))?
                .ok_or(Errno::ENOENT)?;
            Ok(self.add(Handle::Read(Mutex::new(Reading {
                f,
                conns: HashMap::new(),
                last: None,
            }))))
        })();
        match r {
            Ok(fh) => reply.opened(fuser::FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self
            .child(parent, name)
            .and_then(|p| self.start_write(&p, mode & !umask & 0o7777));
        match r {
            Ok((fh, a)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                fuser::FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        size: u32,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        self.counters.reads.fetch_add(1, Relaxed);
        let r = self.handle(fh.0).and_then(|h| match &*h {
            Handle::Read(r) => self.read_at(&mut r.lock().unwrap(), offset, size),
            Handle::Write(..) => Err(Errno::EBADF),
        });
        match r {
            Ok(d) => {
                self.counters.read_bytes.fetch_add(d.len() as u64, Relaxed);
                reply.data(&d)
            }
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        self.counters.writes.fetch_add(1, Relaxed);
        let r = self.handle(fh.0).and_then(|h| match &*h {
            Handle::Write(w, path) => {
                let mut w = w.lock().unwrap();
                if let Some(e) = w.failed {
                    return Err(e);
                }
                let pw = w.w.as_mut().ok_or(Errno::EBADF)?;
                if offset != pw.written() {
                    return Err(Errno::EINVAL);
                }
                if let Err(e) = pw.write(data) {
                    w.failed = Some(perr(&e));
                    return Err(perr(&e));
                }
                let n = pw.written();
                self.writing.lock().unwrap().insert(path.clone(), n);
                Ok(data.len())
            }
            Handle::Read(_) => Err(Errno::EBADF),
        });
        match r {
            Ok(n) => {
                self.counters.write_bytes.fetch_add(n as u64, Relaxed);
                reply.written(n as u32)
            }
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        let r = self.handle(fh.0).and_then(|h| match &*h {
            Handle::Write(w, path) => self.commit(&mut w.lock().unwrap(), path),
            Handle::Read(_) => Ok(()),
        });
        reply_empty(reply, r);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let h = self.handles.lock().unwrap().remove(&fh.0);
        if let Some(h) = h {
            if let Handle::Write(w, path) = &*h {
                // Never flushed: dropped, the write is aborted.
                if w.lock().unwrap().w.take().is_some() {
                    tracing::warn!(path, "released without a flush: not committed");
                }
                self.writing.lock().unwrap().remove(path);
            }
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // A version becomes durable in the pool at its commit (the first close).
        reply_empty(reply, self.handle(fh.0).map(|_| ()));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = (|| {
            let path = self.path(ino)?;
            let parent = match path.rfind('/') {
                Some(0) | None => 1,
                Some(k) => self.ino(&path[..k]),
            };
            let mut list: Listing<OsString> = dot_entries(ino.0, parent);
            let pre = if path == "/" {
                "/".to_string()
            } else {
                format!("{path}/")
            };
            let mut seen: BTreeSet<(String, bool)> = BTreeSet::new();
            let mut add = |p: &str, is_file: bool| {
                if let Some(rest) = p.strip_prefix(&pre) {
                    match rest.split_once('/') {
                        Some((d, _)) => seen.insert((d.to_string(), false)),
                        None if !rest.is_empty() => seen.insert((rest.to_string(), is_file)),
                        None => false,
                    };
                }
            };
            for f in self.client.list(&path).map_err(|e| perr(&e))? {
                add(&f.path, true);
            }
            for p in self.writing.lock().unwrap().keys() {
                add(p, true);
            }
            for p in self.made.lock().unwrap().iter() {
                add(p, false);
            }
            for (name, is_file) in seen {
                let kind = if is_file {
                    FileType::RegularFile
                } else {
                    FileType::Directory
                };
                list.push((self.ino(&join(&path, &name)), kind, OsString::from(name)));
            }
            Ok(list)
        })();
        self.dirs.open(&self.next_fh, r, reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.dirs.readdir(fh, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _f: fuser::OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.release(fh, reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.client.status() {
            Ok(bens) => {
                let live = bens.iter().filter(|b| b.alive);
                let (lent, used) = live.fold((0u64, 0u64), |(l, u), b| (l + b.mem, u + b.used));
                let bs = 1u64 << 20;
                reply.statfs(
                    lent / bs,
                    lent.saturating_sub(used) / bs,
                    lent.saturating_sub(used) / bs,
                    0,
                    0,
                    bs as u32,
                    255,
                    bs as u32,
                )
            }
            Err(e) => reply.error(perr(&e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply_empty(reply, self.path(ino).and_then(|p| self.stat(&p)).map(|_| ()));
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn link(&self, _req: &Request, _ino: INodeNo, _newparent: INodeNo, _newname: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOTSUP);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOTSUP);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        // No attributes: an empty list.
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOTSUP);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: fuser::FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    crate::quiet_defaults!();
}
