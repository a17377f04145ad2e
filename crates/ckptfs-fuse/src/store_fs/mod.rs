//! Store mode: the node store served through FUSE.
//!
//! FUSE inode numbers are the store's inode numbers (root = [`ROOT_INO`]), so the kernel's
//! view and the preload shim's view are the same files. Path-based store calls take the
//! path from [`Store::path_of`]; open files live in a handle table keyed by the FUSE file
//! handle. The kernel caches attributes and entries for [`CacheConfig::ttl`]; other
//! processes write the same store behind the kernel's back (the preload shim, the C API),
//! so the [`crate::cache`] poller invalidates what they changed.

mod attrs;
mod xattrs;

use crate::cache::{CacheConfig, Invalidator, KernelView};
use crate::dirs::{dot_entries, DirTable, Listing};
use crate::{errno_of, now_ns, reply_empty, split_name, Counters, IoMode};
use attrs::file_type;
use ckptfs_store::{FileHandle, FileKind, OpenFlags, Stat, Store, StoreError, ROOT_INO};
use fuser::{
    Errno, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The store as a FUSE file system.
pub struct StoreFs {
    store: Store,
    io: IoMode,
    files: Mutex<HashMap<u64, Arc<Mutex<FileHandle>>>>,
    /// Open handles per inode: only a file open through the mount can be unlinked and
    /// still be stat'ed through it (fstat), so only those are checked for nlink 0.
    open_inos: Mutex<HashMap<u64, usize>>,
    dirs: DirTable<String>,
    next_fh: AtomicU64,
    counters: Arc<Counters>,
    cache: CacheConfig,
    view: Arc<KernelView>,
    /// Ask for FUSE-over-io-uring ([`StoreFs::with_io_uring`]).
    ring: bool,
    /// How long a ring thread polls after answering ([`StoreFs::with_io_uring_spin`]).
    ring_spin: std::time::Duration,
}

impl StoreFs {
    /// Serve `store`; `io` decides page cache vs direct I/O per open. Kernel caching
    /// with invalidation is on ([`CacheConfig::DEFAULT`]).
    pub fn new(store: Store, io: IoMode) -> StoreFs {
        StoreFs::with_cache(store, io, CacheConfig::DEFAULT)
    }

    /// Serve `store` with the given kernel caching.
    pub fn with_cache(store: Store, io: IoMode, cache: CacheConfig) -> StoreFs {
        StoreFs {
            view: Arc::new(KernelView::new(cache, store.clone())),
            cache,
            store,
            io,
            files: Mutex::new(HashMap::new()),
            open_inos: Mutex::new(HashMap::new()),
            dirs: DirTable::new(),
            next_fh: AtomicU64::new(1),
            counters: Arc::new(Counters::default()),
            ring: false,
            ring_spin: crate::RING_SPIN,
        }
    }

    /// Serve requests over io_uring (per-CPU queues) when the kernel offers it. Off by default.
    pub fn with_io_uring(mut self, on: bool) -> StoreFs {
        self.ring = on;
        self
    }

    /// Over io_uring: how long each queue's thread keeps polling for the next request
    /// after answering one, yielding its CPU to anything runnable meanwhile, before it
    /// sleeps (default [`crate::RING_SPIN`]; zero sleeps at once). Process-wide.
    pub fn with_io_uring_spin(mut self, d: std::time::Duration) -> StoreFs {
        self.ring_spin = d;
        self
    }

    /// What starts the invalidation poller once the session exists (it needs the
    /// session's notifier). Without it running, caching must be off.
    pub fn invalidator(&self) -> Invalidator {
        Invalidator {
            view: self.view.clone(),
            cache: self.cache,
        }
    }

    /// Request counters (shared with the daemon's status log).
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    fn child_path(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        let name = split_name(name)?;
        let dir = self.store.path_of(parent.0).map_err(|e| errno_of(&e))?;
        if dir.is_empty() {
            return Err(Errno::ENOENT);
        }
        Ok(if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        })
    }

    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        let p = self.store.path_of(ino.0).map_err(|e| errno_of(&e))?;
        if p.is_empty() {
            return Err(Errno::ENOENT); // unlinked, only reachable through an open handle
        }
        Ok(p)
    }

    fn handle(&self, fh: u64) -> Result<Arc<Mutex<FileHandle>>, Errno> {
        self.files.lock().unwrap().get(&fh).cloned().ok_or(Errno::EBADF)
    }

    fn insert(&self, h: FileHandle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Relaxed);
        *self.open_inos.lock().unwrap().entry(h.stat().ino).or_insert(0) += 1;
        self.files.lock().unwrap().insert(fh, Arc::new(Mutex::new(h)));
        fh
    }

    fn forget_open(&self, ino: u64) {
        let mut m = self.open_inos.lock().unwrap();
        if let Some(n) = m.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                m.remove(&ino);
            }
        }
    }

    fn open_flags(&self, posix: i32) -> FopenFlags {
        let f = self.io.fopen_flags_for(posix, true);
        if self.view.enabled() && !f.contains(FopenFlags::FOPEN_DIRECT_IO) {
            // Pages cached by an earlier open stay valid: the poller drops them when
            // another process changes the file's data (size or mtime).
            f | FopenFlags::FOPEN_KEEP_CACHE
        } else {
            f
        }
    }

    /// The inode `name` in `parent` names now, if any.
    fn child_ino(&self, parent: INodeNo, name: &OsStr) -> Option<u64> {
        if !self.view.enabled() {
            return None;
        }
        let name = name.to_str()?;
        self.store.lookup(parent.0, name).ok().map(|st| st.ino)
    }

    /// `child` lost its name in `parent` through the mount (the kernel dropped the
    /// dentry and updates the directory itself).
    fn removed(&self, parent: INodeNo, child: Option<u64>) {
        if let Some(c) = child {
            // The kernel updates the inode's link count itself; an inode with other
            // names (hard links) has its new attributes recorded (a freed slot has none).
            self.view.unlinked(c);
            self.refresh(c);
        }
        self.refresh(parent.0);
    }
}

fn store_err(e: StoreError) -> Errno {
    errno_of(&e)
}

impl Filesystem for StoreFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        crate::configure_kernel(config, self.io, self.ring.then_some(self.ring_spin));
        if self.view.enabled() {
            // A getattr that shows a new size or mtime also drops the cached pages.
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        let files: Vec<_> = self.files.lock().unwrap().drain().collect();
        for (_, h) in files {
            if let Ok(m) = Arc::try_unwrap(h) {
                if let Err(e) = m.into_inner().unwrap().close() {
                    tracing::warn!(error = %e, "closing a store file at unmount");
                }
            }
        }
        tracing::info!("store file system destroyed");
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.counters.meta.fetch_add(1, Relaxed);
        let name = match split_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let seq = self.view.seq();
        let r = self.store.lookup(parent.0, name).map_err(store_err);
        let ino = r.as_ref().map(|st| st.ino).ok();
        self.reply_entry(reply, parent, OsStr::new(name), r);
        if let Some(ino) = ino {
            self.view.settle(seq, ino);
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.view.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<fuser::FileHandle>, reply: ReplyAttr) {
        self.counters.meta.fetch_add(1, Relaxed);
        let seq = self.view.seq();
        if let Some(fh) = fh {
            if let Ok(h) = self.handle(fh.0) {
                let st = h.lock().unwrap().stat();
                self.reply_attr(reply, Ok(st));
                return self.view.settle(seq, ino.0);
            }
        }
        self.reply_attr(reply, self.store.stat_ino(ino.0).map_err(store_err));
        self.view.settle(seq, ino.0);
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
        let r = (|| -> Result<Stat, Errno> {
            let path = self.path(ino)?;
            let cur = self.store.stat_ino(ino.0).map_err(store_err)?;
            // The kernel has checked who may chown, chmod, truncate and set times
            // (default_permissions); the store records what it is told.
            if uid.is_some() || gid.is_some() {
                let (u, g) = (uid.unwrap_or(cur.uid), gid.unwrap_or(cur.gid));
                self.store.chown(&path, u, g).map_err(store_err)?;
                // FUSE_HANDLE_KILLPRIV: chown of anything but a directory clears its
                // set-id bits, whoever calls (Linux's chown_common: regular files, FIFOs,
                // sockets and device nodes alike; tmpfs does the same).
                if cur.kind != FileKind::Dir && mode.is_none() {
                    let mut m = crate::killed_mode(cur.mode).unwrap_or(cur.mode & 0o7777);
                    // set-group-ID without group execute goes too when the caller is
                    // not in the file's group (the kernel's setattr_should_drop_sgid).
                    if m & libc::S_ISGID != 0 && !crate::creds::in_group(req, cur.gid) {
                        m &= !libc::S_ISGID;
                    }
                    if m != cur.mode & 0o7777 {
                        self.store.chmod(&path, m).map_err(store_err)?;
                    }
                }
            }
            if let Some(len) = size {
                match fh.and_then(|f| self.handle(f.0).ok()) {
                    Some(h) if h.lock().unwrap().flags().write => {
                        h.lock().unwrap().set_len(len).map_err(store_err)?
                    }
                    _ => self.store.truncate(&path, len).map_err(store_err)?,
                }
                // truncate sets mtime and ctime; a user's truncate clears set-id bits.
                let now = now_ns();
                self.store
                    .set_times(&path, cur.atime_ns, now)
                    .map_err(store_err)?;
                if req.uid() != 0 && mode.is_none() {
                    if let Some(m) = crate::killed_mode(cur.mode) {
                        self.store.chmod(&path, m).map_err(store_err)?;
                    }
                }
            }
            if let Some(m) = mode {
                self.store.chmod(&path, m).map_err(store_err)?;
            }
            if atime.is_some() || mtime.is_some() {
                let cur = self.store.stat_ino(ino.0).map_err(store_err)?;
                let ns = |t: TimeOrNow| match t {
                    TimeOrNow::Now => now_ns(),
                    TimeOrNow::SpecificTime(t) => t
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map(|d| d.as_nanos() as u64)
                        .unwrap_or(0),
                };
                let a = atime.map(ns).unwrap_or(cur.atime_ns);
                let m = mtime.map(ns).unwrap_or(cur.mtime_ns);
                self.store.set_times(&path, a, m).map_err(store_err)?;
            }
            self.store.stat_ino(ino.0).map_err(store_err)
        })();
        self.reply_attr(reply, r);
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
        self.counters.meta.fetch_add(1, Relaxed);
        let kind = match FileKind::from_mode(mode) {
            // mknod(2) with no type bits makes a regular file.
            None if mode & libc::S_IFMT == 0 => FileKind::File,
            Some(k) if k != FileKind::Dir && k != FileKind::Symlink => k,
            _ => return reply.error(Errno::EINVAL),
        };
        if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) && req.uid() != 0 {
            // As tmpfs: device nodes need CAP_MKNOD (the kernel checks it before the
            // request is sent; this is the daemon's own guard).
            return reply.error(Errno::EPERM);
        }
        if kind != FileKind::File {
            return self.mknod_special(req, parent, name, kind, mode & !umask & 0o7777, rdev, reply);
        }
        let r = (|| {
            let path = self.child_path(parent, name)?;
            let flags = OpenFlags {
                write: true,
                create: true,
                excl: true,
                ..Default::default()
            };
            let h = self
                .store
                .open(&path, flags, mode & !umask & 0o7777)
                .map_err(store_err)?;
            let st = h.stat();
            h.close().map_err(store_err)?;
            self.give_to_caller(req, parent, &path, st)
        })();
        self.reply_entry(reply, parent, name, r);
        self.refresh(parent.0);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self.child_path(parent, name).and_then(|p| {
            let st = self.store.mkdir(&p, mode & !umask & 0o7777).map_err(store_err)?;
            self.view.drop_subdirs(parent.0);
            self.give_to_caller(req, parent, &p, st)
        });
        self.reply_entry(reply, parent, name, r);
        self.refresh(parent.0);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        let child = self.child_ino(parent, name);
        let r = self
            .child_path(parent, name)
            .and_then(|p| self.store.unlink(&p).map_err(store_err));
        if r.is_ok() {
            self.touch_dir(parent);
            self.removed(parent, child);
        }
        reply_empty(reply, r);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        let child = self.child_ino(parent, name);
        let r = self
            .child_path(parent, name)
            .and_then(|p| self.store.rmdir(&p).map_err(store_err));
        self.view.drop_subdirs(parent.0);
        if r.is_ok() {
            self.touch_dir(parent);
            self.removed(parent, child);
        }
        reply_empty(reply, r);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        use std::os::unix::ffi::OsStrExt;
        self.counters.meta.fetch_add(1, Relaxed);
        // The store keeps the target; the kernel follows it (the store never does).
        let r = self.child_path(parent, name).and_then(|p| {
            let st = self
                .store
                .symlink(target.as_os_str().as_bytes(), &p)
                .map_err(store_err)?;
            self.give_to_caller(req, parent, &p, st)
        });
        self.reply_entry(reply, parent, name, r);
        self.refresh(parent.0);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.counters.meta.fetch_add(1, Relaxed);
        match self.store.readlink_ino(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(store_err(e)),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.hard_link(ino, newparent, newname, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = (|| {
            let from = self.child_path(parent, name)?;
            let to = self.child_path(newparent, newname)?;
            if flags.contains(fuser::RenameFlags::RENAME_EXCHANGE) {
                return Err(Errno::EINVAL);
            }
            if flags.contains(fuser::RenameFlags::RENAME_NOREPLACE) {
                self.store.stat(&from).map_err(store_err)?;
                if self.store.stat(&to).is_ok() {
                    return Err(Errno::EEXIST);
                }
            }
            let moved = self.child_ino(parent, name);
            let victim = self.child_ino(newparent, newname);
            let r = self.store.rename(&from, &to).map_err(store_err);
            self.view.drop_subdirs(parent.0);
            self.view.drop_subdirs(newparent.0);
            r?;
            Ok((moved, victim))
        })();
        if let Ok((moved, victim)) = &r {
            if let Some(v) = victim {
                self.view.unlinked(*v);
            }
            if let (Some(m), Some(n)) = (moved, newname.to_str()) {
                self.view.renamed(*m, newparent.0, n);
                self.refresh(*m);
            }
            self.refresh(parent.0);
            self.refresh(newparent.0);
        }
        reply_empty(reply, r.map(|_| ()));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = (|| {
            let mut of = OpenFlags::from_posix(flags.0).map_err(store_err)?;
            of.create = false;
            of.excl = false;
            let path = self.path(ino)?;
            let h = self.store.open(&path, of, 0).map_err(store_err)?;
            let changed = self.view.changed_at_open(&h.stat());
            Ok::<_, Errno>((self.insert(h), changed))
        })();
        match r {
            Ok((fh, changed)) => {
                let mut f = self.open_flags(flags.0);
                if changed {
                    f.remove(FopenFlags::FOPEN_KEEP_CACHE);
                }
                reply.opened(fuser::FileHandle(fh), f)
            }
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
        let r = (|| {
            let path = self.child_path(parent, name)?;
            let mut of = OpenFlags::from_posix(flags).map_err(store_err)?;
            of.create = true;
            // One hash lookup (the path walk is the open's).
            let existed = name
                .to_str()
                .is_some_and(|n| self.store.lookup(parent.0, n).is_ok());
            let h = self
                .store
                .open(&path, of, mode & !umask & 0o7777)
                .map_err(store_err)?;
            let mut st = h.stat();
            if !existed {
                st = self.give_to_caller(req, parent, &path, st)?;
            }
            Ok::<_, Errno>((self.insert(h), st))
        })();
        if let (Ok((_, st)), Some(n)) = (&r, name.to_str()) {
            self.view.entry(parent.0, n, st);
        }
        match r {
            Ok((fh, st)) => reply.created(
                &self.cache.ttl,
                &self.attr(&st),
                Generation(st.generation as u64),
                fuser::FileHandle(fh),
                self.open_flags(flags),
            ),
            Err(e) => reply.error(e),
        }
        self.refresh(parent.0);
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
        crate::with_buffer(size as usize, |buf| {
            let r = h.lock().unwrap().pread(buf, offset);
            match r {
                Ok(n) => {
                    self.counters.read_bytes.fetch_add(n as u64, Relaxed);
                    reply.data(&buf[..n])
                }
                Err(e) => reply.error(store_err(e)),
            }
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
        // FUSE_HANDLE_KILLPRIV: a write by a user other than root (without CAP_FSETID)
        // clears set-user-ID (and set-group-ID with group execute), as a local file
        // system does, the owner's own writes included.
        if req.uid() != 0 {
            let st = h.lock().unwrap().stat();
            if let Some(mode) = crate::killed_mode(st.mode) {
                if let Ok(p) = self.path(INodeNo(st.ino)) {
                    if let Err(e) = self.store.chmod(&p, mode) {
                        return reply.error(store_err(e));
                    }
                }
            }
        }
        let r = {
            let mut h = h.lock().unwrap();
            let r = h.pwrite(data, offset);
            if r.is_ok() && self.view.enabled() {
                // The kernel updates the size itself and refreshes mtime on its own.
                self.view.attr(&h.stat());
            }
            r
        };
        match r {
            Ok(n) => {
                self.counters.write_bytes.fetch_add(n as u64, Relaxed);
                reply.written(n as u32)
            }
            Err(e) => reply.error(store_err(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: fuser::FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // Data is in the store as soon as write() returns; nothing is buffered here.
        // ENOSYS: the kernel stops sending FLUSH at every close (one request less).
        reply.error(Errno::ENOSYS);
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
        let h = self.files.lock().unwrap().remove(&fh.0);
        let Some(h) = h else {
            return reply.error(Errno::EBADF);
        };
        let ino = h.lock().unwrap().stat().ino;
        self.forget_open(ino);
        // Another request may still hold the Arc for a moment; the last holder closes.
        match Arc::try_unwrap(h) {
            Ok(m) => match m.into_inner().unwrap().close() {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(store_err(e)),
            },
            Err(_) => reply.ok(),
        }
        self.refresh(ino);
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: fuser::FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self
            .handle(fh.0)
            .and_then(|h| h.lock().unwrap().sync().map_err(store_err));
        reply_empty(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.counters.meta.fetch_add(1, Relaxed);
        // Snapshot the listing so that readdir offsets stay valid while entries change.
        let r = (|| {
            let st = self.store.stat_ino(ino.0).map_err(store_err)?;
            if st.kind != FileKind::Dir {
                return Err(Errno::ENOTDIR);
            }
            let parent = match self.store.lookup(ino.0, "..") {
                Ok(p) => p.ino,
                Err(_) => ROOT_INO,
            };
            let mut list: Listing<String> = dot_entries(ino.0, parent);
            for e in self.store.read_dir_ino(ino.0).map_err(store_err)? {
                list.push((e.ino, file_type(e.kind), e.name));
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

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: fuser::FileHandle, _d: bool, reply: ReplyEmpty) {
        // Namespace changes are in the store (shared memory) as soon as they return.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let i = self.store.info();
        let per = i.chunk_size / 4096;
        let total = (i.mem_chunks as u64 + i.spill_chunks as u64) * per;
        let free = (i.mem_free_chunks as u64 + i.spill_free_chunks as u64) * per;
        let used_files = (i.files + i.dirs + i.orphans) as u64;
        reply.statfs(
            total,
            free,
            free,
            i.max_files as u64,
            (i.max_files as u64).saturating_sub(used_files),
            4096,
            255,
            4096,
        );
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // Permission checks are the kernel's (default_permissions); this only checks existence.
        reply_empty(reply, self.store.stat_ino(ino.0).map(|_| ()).map_err(store_err));
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
        // Plain allocation only: grow the size (the new range reads as zeros).
        if mode != 0 {
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        let r = self.handle(fh.0).and_then(|h| {
            let mut h = h.lock().unwrap();
            let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
            if end > h.size() {
                h.set_len(end).map_err(store_err)?;
                // A size change sets mtime and ctime (unlinked: nothing to name).
                let st = h.stat();
                if let Ok(p) = self.path(INodeNo(st.ino)) {
                    self.store
                        .set_times(&p, st.atime_ns, now_ns())
                        .map_err(store_err)?;
                }
                self.refresh(st.ino);
            }
            Ok(())
        });
        reply_empty(reply, r);
    }

    // Extended attributes kept by the store (format 5): `xattrs.rs`.
    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.xattr_set(ino, name, value, flags));
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: fuser::ReplyXattr) {
        self.xattr_get(ino, name, size, reply);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        self.xattr_list(req, ino, size, reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.xattr_remove(ino, name));
    }

    crate::quiet_defaults!();
}
