//! Store mode: the node store served through FUSE.
//!
//! FUSE inode numbers are the store's inode numbers (root = [`ROOT_INO`]), so the kernel's
//! view and the preload shim's view are the same files. Path-based store calls take the
//! path from [`Store::path_of`]; open files live in a handle table keyed by the FUSE file
//! handle. Attributes and entries are never cached by the kernel (TTL 0) because other
//! processes write the same store through the preload shim behind the kernel's back.

use crate::dirs::{dot_entries, DirTable, Listing};
use crate::{errno_of, now_ns, reply_empty, split_name, system_time, Counters, IoMode};
use ckptfs_store::{FileHandle, FileKind, OpenFlags, Stat, Store, StoreError, ROOT_INO};
use fuser::{
    Errno, FileAttr, FileType, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const TTL: Duration = Duration::ZERO;

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
}

impl StoreFs {
    /// Serve `store`; `io` decides page cache vs direct I/O per open.
    pub fn new(store: Store, io: IoMode) -> StoreFs {
        StoreFs {
            store,
            io,
            files: Mutex::new(HashMap::new()),
            open_inos: Mutex::new(HashMap::new()),
            dirs: DirTable::new(),
            next_fh: AtomicU64::new(1),
            counters: Arc::new(Counters::default()),
        }
    }

    /// Request counters (shared with the daemon's status log).
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// The link count: a directory has 2 + one per subdirectory (their ".."); a file 1,
    /// or 0 once unlinked while still open (the store has no hard links). Counting
    /// subdirectories walks the directory, so only getattr/setattr replies (`exact`) do
    /// it; entry replies of lookups, made at every step of every path walk, say 2 (the
    /// kernel asks getattr before it shows a stat, the attributes having TTL 0).
    fn nlink(&self, st: &Stat, exact: bool) -> u32 {
        match st.kind {
            FileKind::Dir if !exact => 2,
            FileKind::Dir => {
                let subdirs = self
                    .store
                    .read_dir_ino(st.ino)
                    .map(|l| l.iter().filter(|e| e.kind == FileKind::Dir).count())
                    .unwrap_or(0);
                2 + subdirs as u32
            }
            FileKind::File => {
                let open = self.open_inos.lock().unwrap().contains_key(&st.ino);
                if open && self.store.path_of(st.ino).is_ok_and(|p| p.is_empty()) {
                    0
                } else {
                    1
                }
            }
        }
    }

    fn attr(&self, st: &Stat) -> FileAttr {
        self.attr_of(st, false)
    }

    /// Attributes for a getattr/setattr reply (exact directory link count).
    fn attr_exact(&self, st: &Stat) -> FileAttr {
        self.attr_of(st, true)
    }

    fn attr_of(&self, st: &Stat, exact: bool) -> FileAttr {
        let nlink = self.nlink(st, exact);
        let kind = file_type(st.kind);
        let perm = (st.mode & 0o7777) as u16;
        let mtime = system_time(st.mtime_ns);
        FileAttr {
            ino: INodeNo(st.ino),
            size: st.size,
            // du shows what the file really occupies: whole chunks.
            blocks: st.allocated / 512,
            atime: system_time(st.atime_ns),
            mtime,
            ctime: system_time(st.ctime_ns),
            crtime: system_time(st.ctime_ns),
            kind,
            perm,
            nlink,
            uid: st.uid,
            gid: st.gid,
            rdev: 0,
            blksize: 1 << 20,
            flags: 0,
        }
    }

    /// A file or directory just created at `path` in `parent` belongs to the caller:
    /// uid = the caller's fsuid, gid = the parent's when it is setgid (a new directory
    /// then also gets the setgid bit), else the caller's fsgid.
    fn give_to_caller(&self, req: &Request, parent: INodeNo, path: &str, st: Stat) -> Result<Stat, Errno> {
        let pst = self.store.stat_ino(parent.0).map_err(store_err)?;
        let setgid_dir = pst.mode & libc::S_ISGID != 0;
        let gid = if setgid_dir { pst.gid } else { req.gid() };
        let mut changed = false;
        if (st.uid, st.gid) != (req.uid(), gid) {
            self.store.chown(path, req.uid(), gid).map_err(store_err)?;
            changed = true;
        }
        if st.kind == FileKind::Dir && setgid_dir && st.mode & libc::S_ISGID == 0 {
            self.store
                .chmod(path, st.mode | libc::S_ISGID)
                .map_err(store_err)?;
            changed = true;
        }
        if changed {
            self.store.stat(path).map_err(store_err)
        } else {
            Ok(st)
        }
    }

    /// After an entry of `parent` was removed: its mtime and ctime are now.
    fn touch_dir(&self, parent: INodeNo) {
        if let (Ok(p), Ok(st)) = (self.path(parent), self.store.stat_ino(parent.0)) {
            let _ = self.store.set_times(&p, st.atime_ns, now_ns());
        }
    }

    fn reply_attr(&self, reply: ReplyAttr, r: Result<Stat, Errno>) {
        match r {
            Ok(st) => reply.attr(&TTL, &self.attr_exact(&st)),
            Err(e) => reply.error(e),
        }
    }

    fn reply_entry(&self, reply: ReplyEntry, r: Result<Stat, Errno>) {
        match r {
            Ok(st) => reply.entry(&TTL, &self.attr(&st), Generation(st.generation as u64)),
            Err(e) => reply.error(e),
        }
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
        self.io.fopen_flags(posix)
    }
}

fn store_err(e: StoreError) -> Errno {
    errno_of(&e)
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Dir => FileType::Directory,
        FileKind::File => FileType::RegularFile,
    }
}

impl Filesystem for StoreFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        crate::configure_kernel(config, self.io);
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
        self.reply_entry(reply, self.store.lookup(parent.0, name).map_err(store_err));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<fuser::FileHandle>, reply: ReplyAttr) {
        self.counters.meta.fetch_add(1, Relaxed);
        if let Some(fh) = fh {
            if let Ok(h) = self.handle(fh.0) {
                let st = h.lock().unwrap().stat();
                return reply.attr(&TTL, &self.attr_exact(&st));
            }
        }
        self.reply_attr(reply, self.store.stat_ino(ino.0).map_err(store_err));
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
                // FUSE_HANDLE_KILLPRIV: chown of a file clears its set-id bits.
                if cur.kind == FileKind::File && mode.is_none() {
                    if let Some(m) = crate::killed_mode(cur.mode) {
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
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        self.counters.meta.fetch_add(1, Relaxed);
        // Only regular files exist in the store.
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
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
        self.reply_entry(reply, r);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self.child_path(parent, name).and_then(|p| {
            let st = self.store.mkdir(&p, mode & !umask & 0o7777).map_err(store_err)?;
            self.give_to_caller(req, parent, &p, st)
        });
        self.reply_entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self
            .child_path(parent, name)
            .and_then(|p| self.store.unlink(&p).map_err(store_err));
        if r.is_ok() {
            self.touch_dir(parent);
        }
        reply_empty(reply, r);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = self
            .child_path(parent, name)
            .and_then(|p| self.store.rmdir(&p).map_err(store_err));
        if r.is_ok() {
            self.touch_dir(parent);
        }
        reply_empty(reply, r);
    }

    fn symlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _t: &std::path::Path, reply: ReplyEntry) {
        // The store has no symbolic links (documented; same errno as vfat).
        reply.error(Errno::EPERM);
    }

    fn link(&self, _req: &Request, _i: INodeNo, _p: INodeNo, _n: &OsStr, reply: ReplyEntry) {
        // No hard links: every store inode has exactly one name.
        reply.error(Errno::EPERM);
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
            self.store.rename(&from, &to).map_err(store_err)
        })();
        reply_empty(reply, r);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        self.counters.meta.fetch_add(1, Relaxed);
        let r = (|| {
            let mut of = OpenFlags::from_posix(flags.0).map_err(store_err)?;
            of.create = false;
            of.excl = false;
            let path = self.path(ino)?;
            let h = self.store.open(&path, of, 0).map_err(store_err)?;
            Ok::<_, Errno>(self.insert(h))
        })();
        match r {
            Ok(fh) => reply.opened(fuser::FileHandle(fh), self.open_flags(flags.0)),
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
            let existed = self.store.stat(&path).is_ok();
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
        match r {
            Ok((fh, st)) => reply.created(
                &TTL,
                &self.attr(&st),
                Generation(st.generation as u64),
                fuser::FileHandle(fh),
                self.open_flags(flags),
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
        let r = h.lock().unwrap().pwrite(data, offset);
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
        reply.ok();
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
        self.forget_open(h.lock().unwrap().stat().ino);
        // Another request may still hold the Arc for a moment; the last holder closes.
        match Arc::try_unwrap(h) {
            Ok(m) => match m.into_inner().unwrap().close() {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(store_err(e)),
            },
            Err(_) => reply.ok(),
        }
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
            }
            Ok(())
        });
        reply_empty(reply, r);
    }

    // No extended attributes in the store (its inodes have no room for them): ENOSYS,
    // after which the kernel answers EOPNOTSUPP itself and stops asking (it would
    // otherwise ask for security.capability before every write).
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
        reply.error(Errno::ENOSYS);
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    crate::quiet_defaults!();
}
