//! CRFS mode: a FUSE mirror of a backend directory whose writes are aggregated into
//! large chunks by the [`engine`] (Ouyang et al., CRFS, section IV).
//!
//! FUSE inode numbers are the backend's inode numbers (the backend root is 1); a table
//! maps each inode the kernel knows to its backend path, kept current across renames.
//! Reads, metadata and directory operations go straight to the backend; before a read,
//! truncate or fallocate of a file with buffered data, its chunks are written first so
//! the backend is current. getattr reports the size including buffered data.

mod backend;
pub mod engine;

pub use engine::{BackendSink, DiscardSink, Engine, EngineStats, FileSink};

use crate::creds::as_caller;
use crate::dirs::{dot_entries, DirTable, Listing};
use crate::{io_errno, reply_empty, split_name, Counters, IoMode};
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
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
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

struct Node {
    path: PathBuf,
    lookups: u64,
}

struct Handle {
    fd: File,
    agg: Option<Arc<AggFile>>,
    append: bool,
}

/// The CRFS file system.
pub struct CrfsFs {
    backend: PathBuf,
    root_ino: u64,
    io: IoMode,
    engine: Engine,
    nodes: Mutex<HashMap<u64, Node>>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    dirs: DirTable<std::ffi::OsString>,
    next_fh: AtomicU64,
    counters: Arc<Counters>,
}

fn errno_io(e: io::Error) -> Errno {
    io_errno(&e)
}

fn cpath(p: &Path) -> Result<CString, Errno> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)
}

fn check(r: libc::c_int) -> Result<(), Errno> {
    if r < 0 {
        Err(errno_io(io::Error::last_os_error()))
    } else {
        Ok(())
    }
}

fn reply_entry(reply: ReplyEntry, r: Result<FileAttr, Errno>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn file_type(m: &Metadata) -> FileType {
    FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile)
}

fn ts(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        SystemTime::UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        SystemTime::UNIX_EPOCH
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
        let mut nodes = HashMap::new();
        nodes.insert(
            1,
            Node {
                path: backend.clone(),
                lookups: 1,
            },
        );
        Ok(CrfsFs {
            engine: Engine::new(config.pool_size, config.chunk_size, config.io_threads, sink),
            backend,
            root_ino: meta.ino(),
            io,
            nodes: Mutex::new(nodes),
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

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.nodes
            .lock()
            .unwrap()
            .get(&ino.0)
            .map(|n| n.path.clone())
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        split_name(name)?;
        if name == "." || name == ".." || name.as_bytes().contains(&b'/') {
            return Err(Errno::EINVAL);
        }
        Ok(self.path(parent)?.join(name))
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

    /// lstat `path` and remember it as the path of its inode (one more kernel lookup).
    fn remember(&self, path: PathBuf) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(&path).map_err(errno_io)?;
        let attr = self.attr(&m);
        let mut nodes = self.nodes.lock().unwrap();
        let n = nodes.entry(attr.ino.0).or_insert(Node {
            path: path.clone(),
            lookups: 0,
        });
        n.path = path;
        n.lookups += 1;
        Ok(attr)
    }

    fn stat_ino(&self, ino: INodeNo) -> Result<Metadata, Errno> {
        let p = self.path(ino)?;
        let m = std::fs::symlink_metadata(&p).map_err(errno_io)?;
        if self.fuse_ino(m.ino()) != ino.0 {
            return Err(Errno::ENOENT); // the name now belongs to another file
        }
        Ok(m)
    }

    fn handle(&self, fh: u64) -> Result<Arc<Handle>, Errno> {
        self.handles.lock().unwrap().get(&fh).cloned().ok_or(Errno::EBADF)
    }

    /// Open the backend file for a FUSE open/create and register the handle.
    fn open_backend(
        &self,
        path: &Path,
        flags: i32,
        create_mode: Option<u32>,
    ) -> Result<(u64, Metadata), Errno> {
        let acc = flags & libc::O_ACCMODE;
        let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        let fd = backend::open(path, flags, create_mode)?;
        let m = fd.metadata().map_err(errno_io)?;
        let agg = if writable && m.is_file() {
            let key = (m.dev(), m.ino());
            let f = self
                .engine
                .attach(key, || {
                    // The chunks go through a duplicate of this open's descriptor: a
                    // second open by path could be refused (a new file of mode 0444).
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

    fn rename_nodes(&self, from: &Path, to: &Path) {
        let mut nodes = self.nodes.lock().unwrap();
        for n in nodes.values_mut() {
            if let Ok(rest) = n.path.strip_prefix(from) {
                n.path = if rest.as_os_str().is_empty() {
                    to.to_path_buf()
                } else {
                    to.join(rest)
                };
            }
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
        crate::configure_kernel(config, self.io);
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
        reply_entry(reply, self.child(parent, name).and_then(|p| self.remember(p)));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if ino.0 == 1 {
            return;
        }
        let mut nodes = self.nodes.lock().unwrap();
        if let Some(n) = nodes.get_mut(&ino.0) {
            n.lookups = n.lookups.saturating_sub(nlookup);
            if n.lookups == 0 {
                nodes.remove(&ino.0);
            }
        }
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
        let r = as_caller(req, || {
            let path = self.path(ino)?;
            let c = cpath(&path)?;
            if let Some(m) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m & 0o7777))
                    .map_err(errno_io)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&path, uid, gid).map_err(errno_io)?;
            }
            if let Some(len) = size {
                let m = std::fs::symlink_metadata(&path).map_err(errno_io)?;
                let agg = self.engine.lookup((m.dev(), m.ino()));
                if let Some(f) = &agg {
                    self.engine.drain(f);
                }
                match fh.and_then(|f| self.handle(f.0).ok()).and_then(|h| h.agg.clone()) {
                    Some(f) => f.fd().set_len(len).map_err(errno_io)?,
                    // SAFETY: c is a valid NUL-terminated path.
                    None => check(unsafe { libc::truncate(c.as_ptr(), len as libc::off_t) })?,
                }
                if let Some(f) = agg {
                    f.set_end(len);
                }
            }
            if atime.is_some() || mtime.is_some() {
                // Times set before close (cp -p, tar -x) win over the buffered chunks:
                // write those out first, so their pwrite cannot move mtime afterwards.
                if let Ok(m) = std::fs::symlink_metadata(&path) {
                    if let Some(f) = self.engine.lookup((m.dev(), m.ino())) {
                        self.engine.drain(&f);
                    }
                }
                backend::set_times(&path, atime, mtime)?;
            }
            std::fs::symlink_metadata(&path).map_err(errno_io)
        });
        self.reply_attr(reply, r);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self
            .path(ino)
            .and_then(|p| std::fs::read_link(p).map_err(errno_io))
        {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
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
        let r = self.child(parent, name).and_then(|p| {
            let c = cpath(&p)?;
            // SAFETY: valid path; mknod reads only its arguments.
            as_caller(req, || {
                check(unsafe { libc::mknod(c.as_ptr(), mode & !umask, rdev as libc::dev_t) })
            })?;
            self.remember(p)
        });
        reply_entry(reply, r);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self.child(parent, name).and_then(|p| {
            let c = cpath(&p)?;
            // SAFETY: valid path.
            as_caller(req, || {
                check(unsafe { libc::mkdir(c.as_ptr(), (mode & !umask & 0o7777) as libc::mode_t) })
            })?;
            self.remember(p)
        });
        reply_entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        reply_empty(
            reply,
            self.child(parent, name)
                .and_then(|p| as_caller(req, || std::fs::remove_file(p).map_err(errno_io))),
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        reply_empty(
            reply,
            self.child(parent, name)
                .and_then(|p| as_caller(req, || std::fs::remove_dir(p).map_err(errno_io))),
        );
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let r = self.child(parent, link_name).and_then(|p| {
            as_caller(req, || std::os::unix::fs::symlink(target, &p).map_err(errno_io))?;
            self.remember(p)
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
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            let (cf, ct) = (cpath(&from)?, cpath(&to)?);
            as_caller(req, || {
                // SAFETY: valid paths; renameat2 with the kernel's own flags.
                check(unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        cf.as_ptr(),
                        libc::AT_FDCWD,
                        ct.as_ptr(),
                        flags.bits(),
                    )
                })
            })?;
            if flags.contains(fuser::RenameFlags::RENAME_EXCHANGE) {
                let tmp = self.backend.join(".crfs-rename-exchange");
                self.rename_nodes(&from, &tmp);
                self.rename_nodes(&to, &from);
                self.rename_nodes(&tmp, &to);
            } else {
                self.rename_nodes(&from, &to);
            }
            Ok(())
        })();
        reply_empty(reply, r);
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let from = self.path(ino)?;
            let to = self.child(newparent, newname)?;
            as_caller(req, || std::fs::hard_link(&from, &to).map_err(errno_io))?;
            let m = std::fs::symlink_metadata(&to).map_err(errno_io)?;
            let attr = self.attr(&m);
            if let Some(n) = self.nodes.lock().unwrap().get_mut(&ino.0) {
                n.lookups += 1;
            }
            Ok(attr)
        })();
        reply_entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self
            .path(ino)
            .and_then(|p| as_caller(req, || self.open_backend(&p, flags.0, None)));
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
        let r = self.child(parent, name).and_then(|p| {
            let (fh, m) = as_caller(req, || self.open_backend(&p, flags, Some(mode & !umask & 0o7777)))?;
            let mut nodes = self.nodes.lock().unwrap();
            let n = nodes.entry(self.fuse_ino(m.ino())).or_insert(Node {
                path: p.clone(),
                lookups: 0,
            });
            n.path = p;
            n.lookups += 1;
            Ok((fh, self.attr(&m)))
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
        let h = match self.handle(fh.0) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        let Some(f) = &h.agg else {
            return reply.error(Errno::EBADF);
        };
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
            let path = self.path(ino)?;
            let mut list: Listing<std::ffi::OsString> = dot_entries(ino.0, 1);
            for e in std::fs::read_dir(&path).map_err(errno_io)? {
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
            .path(ino)
            .and_then(|p| File::open(p).and_then(|d| d.sync_all()).map_err(errno_io));
        reply_empty(reply, r);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let Ok(c) = cpath(&self.backend) else {
            return reply.error(Errno::EINVAL);
        };
        // SAFETY: statvfs is plain data; c is a valid path.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid path and out pointer.
        if let Err(e) = check(unsafe { libc::statvfs(c.as_ptr(), &mut s) }) {
            return reply.error(e);
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        );
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
        let r = self
            .path(ino)
            .and_then(|p| as_caller(req, || backend::setxattr(&p, name, value, flags)));
        reply_empty(reply, r);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.path(ino) {
            Ok(p) => match crate::creds::AsCaller::enter(req) {
                Ok(_g) => backend::getxattr(&p, name, size, reply),
                Err(e) => reply.error(e),
            },
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.path(ino) {
            Ok(p) => match crate::creds::AsCaller::enter(req) {
                Ok(_g) => backend::listxattr(&p, size, reply),
                Err(e) => reply.error(e),
            },
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .path(ino)
            .and_then(|p| as_caller(req, || backend::removexattr(&p, name)));
        reply_empty(reply, r);
    }

    crate::quiet_defaults!();
}
