//! CRFS mode: a FUSE mirror of a backend directory whose writes are aggregated into
//! large chunks by the [`engine`] (Ouyang et al., CRFS, section IV).
//!
//! FUSE inode numbers are the backend's inode numbers (the backend root is 1). Each inode
//! the kernel knows is held as an O_PATH descriptor of the backend inode (a table keyed
//! by inode number, dropped at forget), and every backend call is relative to one: by
//! (directory descriptor, name) for namespace calls, through `/proc/self/fd/N` or
//! AT_EMPTY_PATH for the inode itself. So a name removed while another hard link stays
//! keeps working, renames need no bookkeeping, and paths as long as the kernel accepts
//! on the mount work on the backend whatever its own path length. Backend calls made
//! for a request run with the caller's file-system credentials (the private `creds` module).
//! Reads, metadata and directory operations go straight to the backend; before a read,
//! truncate, fallocate or time change of a file with buffered data, its chunks are
//! written first so the backend is current. getattr reports the size including
//! buffered data.

mod backend;
use backend::{check, errno_io, file_type, ts};
pub mod engine;
mod nodes;

pub use engine::{BackendSink, DiscardSink, Engine, EngineStats, FileSink};

use crate::creds::{as_caller, AsCaller};
use crate::dirs::{dot_entries, DirTable, Listing};
use crate::{reply_empty, Counters, IoMode};
use engine::AggFile;
use fuser::{
    Errno, FileAttr, FileType, Filesystem, Generation, INodeNo, KernelConfig, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow,
};
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The CRFS mode settings (`ckptfs mount --backend`).
#[derive(Debug, Clone)]
pub struct CrfsConfig {
    /// Directory mirrored by the mount.
    pub backend: PathBuf,
    /// Buffer pool size in bytes (CRFS default 16 MiB).
    pub pool_size: usize,
    /// Chunk size in bytes (CRFS default 4 MiB).
    pub chunk_size: usize,
    /// IO threads writing chunks to the backend (CRFS default 4).
    pub io_threads: usize,
}

impl CrfsConfig {
    /// CRFS's defaults (pool 16 MiB, chunk 4 MiB, 4 IO threads) over `backend`.
    pub fn new(backend: impl Into<PathBuf>) -> CrfsConfig {
        CrfsConfig {
            backend: backend.into(),
            pool_size: 16 << 20,
            chunk_size: 4 << 20,
            io_threads: 4,
        }
    }
}

// Attributes may be cached briefly: unlike the store, the backend is normally changed only
// through this mount.
const TTL: Duration = Duration::from_secs(1);

struct Handle {
    fd: File,
    agg: Option<Arc<AggFile>>,
    append: bool,
}

/// The CRFS file system.
pub struct CrfsFs {
    root_ino: u64,
    io: IoMode,
    engine: Engine,
    nodes: nodes::Nodes,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    dirs: DirTable<std::ffi::OsString>,
    next_fh: AtomicU64,
    counters: Arc<Counters>,
}

fn reply_entry(reply: ReplyEntry, r: Result<FileAttr, Errno>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

impl CrfsFs {
    /// Mirror `config.backend`, writing chunks to the backend files.
    pub fn new(config: CrfsConfig, io: IoMode) -> io::Result<CrfsFs> {
        Self::with_sink(config, io, Arc::new(FileSink))
    }

    /// Same, with chunks going to `sink` (a discarding sink for benchmarks, a faulty one
    /// for tests).
    pub fn with_sink(config: CrfsConfig, io: IoMode, sink: Arc<dyn BackendSink>) -> io::Result<CrfsFs> {
        let backend = config.backend.canonicalize()?;
        let meta = std::fs::metadata(&backend)?;
        if !meta.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        if config.chunk_size == 0 || config.pool_size < config.chunk_size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the pool must hold at least one chunk",
            ));
        }
        let root = backend::open_root(&backend)?;
        Ok(CrfsFs {
            engine: Engine::new(config.pool_size, config.chunk_size, config.io_threads, sink),
            root_ino: meta.ino(),
            io,
            nodes: nodes::Nodes::new(root),
            handles: Mutex::new(HashMap::new()),
            dirs: DirTable::new(),
            next_fh: AtomicU64::new(1),
            counters: Arc::new(Counters::default()),
        })
    }

    /// The aggregation engine (for its counters).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Request counters.
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    fn fuse_ino(&self, backend_ino: u64) -> u64 {
        if backend_ino == self.root_ino {
            1
        } else {
            backend_ino
        }
    }

    /// The O_PATH descriptor of an inode the kernel knows.
    fn node(&self, ino: INodeNo) -> Result<Arc<OwnedFd>, Errno> {
        self.nodes.get(ino)
    }

    /// The directory descriptor and the checked name of `name` in `parent`.
    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<(Arc<OwnedFd>, CString), Errno> {
        // Any bytes but '/' and NUL, as on the backend (not only UTF-8 like the store).
        if name.len() > 255 {
            return Err(Errno::from_i32(libc::ENAMETOOLONG));
        }
        if name == "." || name == ".." || name.as_bytes().contains(&b'/') {
            return Err(Errno::EINVAL);
        }
        let c = CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)?;
        Ok((self.node(parent)?, c))
    }

    fn attr(&self, m: &Metadata) -> FileAttr {
        let mut size = m.size();
        if m.is_file() {
            if let Some(f) = self.engine.lookup((m.dev(), m.ino())) {
                size = size.max(f.size_hint());
            }
        }
        FileAttr {
            ino: INodeNo(self.fuse_ino(m.ino())),
            size,
            blocks: m.blocks(),
            atime: ts(m.atime(), m.atime_nsec()),
            mtime: ts(m.mtime(), m.mtime_nsec()),
            ctime: ts(m.ctime(), m.ctime_nsec()),
            crtime: ts(m.ctime(), m.ctime_nsec()),
            kind: file_type(m),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: m.blksize() as u32,
            flags: 0,
        }
    }

    /// Take `fd` (an O_PATH descriptor of a backend inode) as the kernel's node for its
    /// inode (one more kernel lookup); an inode already known keeps its descriptor.
    fn remember_fd(&self, fd: OwnedFd) -> Result<FileAttr, Errno> {
        let m = backend::fstat(fd.as_fd())?;
        let attr = self.attr(&m);
        self.nodes.remember(attr.ino.0, fd);
        Ok(attr)
    }

    /// Look `name` up in `dir` and remember it.
    fn remember(&self, dir: BorrowedFd, name: &std::ffi::CStr) -> Result<FileAttr, Errno> {
        self.remember_fd(backend::open_node(dir, name)?)
    }

    fn stat_ino(&self, ino: INodeNo) -> Result<Metadata, Errno> {
        backend::fstat(self.node(ino)?.as_fd())
    }

    fn handle(&self, fh: u64) -> Result<Arc<Handle>, Errno> {
        self.handles.lock().unwrap().get(&fh).cloned().ok_or(Errno::EBADF)
    }

    /// Register the backend file of a FUSE open/create as a handle.
    fn add_handle(&self, fd: File, flags: i32) -> Result<(u64, Metadata), Errno> {
        let acc = flags & libc::O_ACCMODE;
        let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        let m = fd.metadata().map_err(errno_io)?;
        let agg = if writable && m.is_file() {
            let key = (m.dev(), m.ino());
            let f = self
                .engine
                .attach(key, || {
                    // The chunks go through a duplicate of this open's descriptor: a
                    // second open could be refused (a new file of mode 0444).
                    let w = fd.try_clone()?;
                    Ok((w, m.len()))
                })
                .map_err(errno_io)?;
            if flags & libc::O_TRUNC != 0 {
                self.engine.drain(&f);
                f.set_end(0);
            }
            Some(f)
        } else {
            None
        };
        let fh = self.next_fh.fetch_add(1, Relaxed);
        self.handles.lock().unwrap().insert(
            fh,
            Arc::new(Handle {
                fd,
                agg,
                append: flags & libc::O_APPEND != 0,
            }),
        );
        Ok((fh, m))
    }

    /// Write out the buffered chunks of the backend file `m`, if it has any.
    fn drain_file(&self, m: &Metadata) {
        if let Some(f) = self.engine.lookup((m.dev(), m.ino())) {
            self.engine.drain(&f);
        }
    }

    /// getxattr/listxattr: `f(node, is_symlink, reply)` as the caller.
    fn xattr_read(
        &self,
        req: &Request,
        ino: INodeNo,
        reply: ReplyXattr,
        f: impl FnOnce(BorrowedFd, bool, ReplyXattr),
    ) {
        let r = self
            .node(ino)
            .and_then(|n| Ok((backend::fstat(n.as_fd())?.file_type().is_symlink(), n)));
        match r.and_then(|(link, n)| Ok((AsCaller::enter(req)?, link, n))) {
            Ok((_guard, link, n)) => f(n.as_fd(), link, reply),
            Err(e) => reply.error(e),
        }
    }

    fn reply_attr(&self, reply: ReplyAttr, r: Result<Metadata, Errno>) {
        match r {
            Ok(m) => reply.attr(&TTL, &self.attr(&m)),
            Err(e) => reply.error(e),
        }
    }
}

impl Filesystem for CrfsFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // CRFS closes block their request thread while chunks drain: /dev/fuse threads only.
        crate::configure_kernel(config, self.io, None);
        Ok(())
    }

    fn destroy(&mut self) {
        self.engine.shutdown();
        let st = self.engine.stats();
        tracing::info!(
            chunks = st.chunks.load(Relaxed),
            bytes = st.bytes.load(Relaxed),
            partial = st.partial.load(Relaxed),
            errors = st.errors.load(Relaxed),
            "CRFS file system destroyed"
        );
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self
            .child(parent, name)
            .and_then(|(d, n)| self.remember(d.as_fd(), &n));
        reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.nodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<fuser::FileHandle>, reply: ReplyAttr) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = match fh.and_then(|f| self.handle(f.0).ok()) {
            Some(h) => h.fd.metadata().map_err(errno_io),
            None => self.stat_ino(ino),
        };
        self.reply_attr(reply, r);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
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
            let node = self.node(ino)?;
            let fd = node.as_fd();
            as_caller(req, || {
                if uid.is_some() || gid.is_some() {
                    backend::chown(fd, uid, gid)?;
                }
                if let Some(m) = mode {
                    backend::chmod(fd, m)?;
                }
                if let Some(len) = size {
                    let m = backend::fstat(fd)?;
                    let agg = self.engine.lookup((m.dev(), m.ino()));
                    if let Some(f) = &agg {
                        self.engine.drain(f);
                    }
                    match fh.and_then(|f| self.handle(f.0).ok()).and_then(|h| h.agg.clone()) {
                        Some(f) => f.fd().set_len(len).map_err(errno_io)?,
                        None => backend::truncate(fd, len)?,
                    }
                    if let Some(f) = agg {
                        f.set_end(len);
                    }
                }
                if atime.is_some() || mtime.is_some() {
                    // Times set before close (cp -p, tar -x) win over the buffered
                    // chunks: write those out first, so their pwrite cannot move mtime
                    // afterwards.
                    self.drain_file(&backend::fstat(fd)?);
                    backend::set_times(fd, atime, mtime)?;
                }
                Ok(())
            })?;
            backend::fstat(fd)
        })();
        self.reply_attr(reply, r);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.node(ino).and_then(|n| backend::readlink(n.as_fd())) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = self.child(parent, name).and_then(|(d, n)| {
            as_caller(req, || backend::mknod_at(d.as_fd(), &n, mode & !umask, rdev))?;
            self.remember(d.as_fd(), &n)
        });
        reply_entry(reply, r);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self.child(parent, name).and_then(|(d, n)| {
            as_caller(req, || backend::mkdir_at(d.as_fd(), &n, mode & !umask))?;
            self.remember(d.as_fd(), &n)
        });
        reply_entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self
            .child(parent, name)
            .and_then(|(d, n)| as_caller(req, || backend::unlink_at(d.as_fd(), &n, 0)));
        reply_empty(reply, r);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self
            .child(parent, name)
            .and_then(|(d, n)| as_caller(req, || backend::unlink_at(d.as_fd(), &n, libc::AT_REMOVEDIR)));
        reply_empty(reply, r);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let r = self.child(parent, link_name).and_then(|(d, n)| {
            as_caller(req, || backend::symlink_at(target, d.as_fd(), &n))?;
            self.remember(d.as_fd(), &n)
        });
        reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = (|| {
            let (from, n) = self.child(parent, name)?;
            let (to, nn) = self.child(newparent, newname)?;
            as_caller(req, || {
                backend::rename_at(from.as_fd(), &n, to.as_fd(), &nn, flags.bits())
            })
        })();
        reply_empty(reply, r);
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let node = self.node(ino)?;
            let (d, n) = self.child(newparent, newname)?;
            as_caller(req, || backend::link(node.as_fd(), d.as_fd(), &n))?;
            let attr = self.attr(&backend::fstat(node.as_fd())?);
            self.nodes.add_lookup(ino.0);
            Ok(attr)
        })();
        reply_entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self.node(ino).and_then(|node| {
            let fd = as_caller(req, || backend::reopen(node.as_fd(), flags.0))?;
            self.add_handle(fd, flags.0)
        });
        match r {
            Ok((fh, _)) => reply.opened(fuser::FileHandle(fh), self.io.fopen_flags(flags.0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self.child(parent, name).and_then(|(d, n)| {
            let fd = as_caller(req, || {
                backend::create_at(d.as_fd(), &n, flags, mode & !umask & 0o7777)
            })?;
            let (fh, _) = self.add_handle(fd, flags)?;
            match self.remember(d.as_fd(), &n) {
                Ok(a) => Ok((fh, a)),
                Err(e) => {
                    self.handles.lock().unwrap().remove(&fh);
                    Err(e)
                }
            }
        });
        match r {
            Ok((fh, a)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                fuser::FileHandle(fh),
                self.io.fopen_flags(flags),
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
        let h = match self.handle(fh.0) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        // Reads see every byte written through the mount: write out buffered chunks first.
        let key = h.fd.metadata().ok().map(|m| (m.dev(), m.ino()));
        if let Some(f) = h.agg.clone().or_else(|| key.and_then(|k| self.engine.lookup(k))) {
            self.engine.drain(&f);
        }
        crate::with_buffer(size as usize, |buf| {
            let mut n = 0;
            while n < buf.len() {
                match h.fd.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return reply.error(errno_io(e)),
                }
            }
            self.counters.read_bytes.fetch_add(n as u64, Relaxed);
            reply.data(&buf[..n]);
        });
    }

    fn write(
        &self,
        req: &Request,
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
        let h = match self.handle(fh.0) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        let Some(f) = &h.agg else {
            return reply.error(Errno::EBADF);
        };
        // FUSE_HANDLE_KILLPRIV: a write by a user without CAP_FSETID clears set-user-ID
        // (and set-group-ID with group execute), as the backend would for that user;
        // the chunks themselves are written by the daemon (root), which keeps them.
        if crate::creds::switching() && req.uid() != 0 {
            if let Err(e) = backend::kill_suid(&h.fd) {
                return reply.error(e);
            }
        }
        let off = if h.append { f.size_hint() } else { offset };
        match self.engine.write(f, off, data) {
            Ok(n) => {
                self.counters.write_bytes.fetch_add(n as u64, Relaxed);
                reply.written(n as u32)
            }
            Err(e) => reply.error(Errno::from_i32(e)),
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
        // close(): wait until every chunk of the file is written (CRFS IV-C).
        let r = self.handle(fh.0).and_then(|h| match &h.agg {
            Some(f) => self.engine.flush(f).map_err(Errno::from_i32),
            None => Ok(()),
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
        let Some(h) = h else {
            return reply.error(Errno::EBADF);
        };
        let mut r = Ok(());
        if let Some(f) = &h.agg {
            r = self.engine.flush(f).map_err(Errno::from_i32);
            if let Err(e) = r {
                tracing::error!(
                    errno = e.code(),
                    "backend error at release (after the last close)"
                );
            }
            let f = f.clone();
            drop(h);
            self.engine.detach(&f);
        }
        reply_empty(reply, r);
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: fuser::FileHandle, datasync: bool, reply: ReplyEmpty) {
        let r = self.handle(fh.0).and_then(|h| {
            let fd = match &h.agg {
                Some(f) => {
                    self.engine.flush(f).map_err(Errno::from_i32)?;
                    f.fd()
                }
                None => &h.fd,
            };
            if datasync { fd.sync_data() } else { fd.sync_all() }.map_err(errno_io)
        });
        reply_empty(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = (|| {
            let dir = backend::open_dir(self.node(ino)?.as_fd())?;
            let mut list: Listing<std::ffi::OsString> = dot_entries(ino.0, 1);
            for e in std::fs::read_dir(backend::dir_path(&dir)).map_err(errno_io)? {
                let e = e.map_err(errno_io)?;
                let kind = e
                    .file_type()
                    .ok()
                    .and_then(FileType::from_std)
                    .unwrap_or(FileType::RegularFile);
                use std::os::unix::fs::DirEntryExt;
                list.push((self.fuse_ino(e.ino()), kind, e.file_name()));
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

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: fuser::FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self
            .node(ino)
            .and_then(|n| backend::open_dir(n.as_fd()))
            .and_then(|d| d.sync_all().map_err(errno_io));
        reply_empty(reply, r);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.node(INodeNo(1)).and_then(|n| backend::statvfs(n.as_fd())) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply_empty(reply, self.stat_ino(ino).map(|_| ()));
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.handle(fh.0).and_then(|h| {
            let Some(f) = &h.agg else { return Err(Errno::EBADF) };
            self.engine.drain(f);
            use std::os::fd::AsRawFd;
            // SAFETY: a valid open fd; fallocate reads only its arguments.
            check(unsafe {
                libc::fallocate(
                    f.fd().as_raw_fd(),
                    mode,
                    offset as libc::off_t,
                    length as libc::off_t,
                )
            })?;
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
                let end = f.size_hint().max(offset + length);
                f.set_end(end);
            }
            Ok(())
        });
        reply_empty(reply, r);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = self.node(ino).and_then(|n| {
            let link = backend::fstat(n.as_fd())?.file_type().is_symlink();
            as_caller(req, || backend::setxattr(n.as_fd(), link, name, value, flags))
        });
        reply_empty(reply, r);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.xattr_read(req, ino, reply, |fd, link, reply| {
            backend::getxattr(fd, link, name, size, reply)
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.xattr_read(req, ino, reply, |fd, link, reply| {
            backend::listxattr(fd, link, size, reply)
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.node(ino).and_then(|n| {
            let link = backend::fstat(n.as_fd())?.file_type().is_symlink();
            as_caller(req, || backend::removexattr(n.as_fd(), link, name))
        });
        reply_empty(reply, r);
    }

    crate::quiet_defaults!();
}
