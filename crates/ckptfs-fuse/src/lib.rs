//! # ckptfs-fuse: the node store and the CRFS aggregation mode as FUSE mounts
//!
//! Two file systems built on the [`fuser`] crate:
//!
//! * [`StoreFs`] (store mode) serves a ckptfs node store, the same shared-memory segment
//!   the preload shim and the C API use, so common tools (cp, tar, rsync, mmap...) work on
//!   checkpoints and a file written under `ckptfs run` reads back through the mount.
//!   The daemon keeps no data of its own: if it is SIGKILLed, the store keeps every byte
//!   and a new mount attaches again.
//! * [`CrfsFs`] (CRFS mode, Ouyang et al., "CRFS: a lightweight user-level filesystem for
//!   generic checkpoint/restart", section IV) mirrors a backend directory. Writes are
//!   copied into chunks taken from a fixed buffer pool, coalesced per file, queued, and
//!   written by a pool of IO threads with one large write each; close() waits for the
//!   file's outstanding chunks and reports any backend error.
//! * [`PoolFs`] (pool mode) serves the aggregate memory pool (`ckptfs-pool`): files are
//!   written into the benefactors' memory through the pool client's write buffer and
//!   committed at close (docs/pool.md).
//!
//! [`mount::run`] mounts any of them, unmounts when its shutdown trigger fires, cleans a stale
//! mount left by a killed daemon, and returns when the file system is unmounted.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod cache;
mod creds;
pub mod crfs;
mod dirs;
pub mod mount;
mod pool_fs;
mod store_fs;

pub use cache::CacheConfig;
pub use cache::Invalidator;
pub use crfs::{BackendSink, CrfsConfig, CrfsFs, DiscardSink, FileSink};
pub use mount::{Mode, MountConfig, MountError};
pub use pool_fs::PoolFs;
pub use store_fs::StoreFs;

use fuser::{Errno, FopenFlags, InitFlags, KernelConfig, ReplyEmpty};
use std::cell::RefCell;
use std::ffi::OsStr;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

/// Largest FUSE write and read request we ask the kernel for (FUSE_MAX_PAGES).
pub const MAX_WRITE: u32 = 1 << 20;

/// How file data moves between the kernel and the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// Write-only opens use direct I/O (no page cache copy, 1 MiB requests, parallel
    /// writers), and in store mode read-only opens too (one request per `read()` of up
    /// to 1 MiB, copied straight into the caller's buffer: faster than the page-cache
    /// path with read-ahead, docs/benchmarks.md); read-write opens (and CRFS read-only opens) use the page
    /// cache, so read-ahead and shared writable mmap work as on a local file system.
    /// mmap of a direct-I/O open still works (FUSE_DIRECT_IO_ALLOW_MMAP).
    #[default]
    Auto,
    /// Every open through the page cache (write-through: each write is still a request).
    Cached,
    /// Every open with direct I/O; mmap is still allowed (FUSE_DIRECT_IO_ALLOW_MMAP).
    Direct,
    /// The kernel's writeback cache (FUSE_WRITEBACK_CACHE): small writes gather in the
    /// page cache and reach the daemon as large writes; close() and fsync() write the
    /// dirty pages back first, so their errors still reach the application.
    Writeback,
}

impl std::str::FromStr for IoMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(IoMode::Auto),
            "cached" => Ok(IoMode::Cached),
            "direct" => Ok(IoMode::Direct),
            "writeback" => Ok(IoMode::Writeback),
            _ => Err(format!(
                "io mode {s:?}: expected auto, cached, direct or writeback"
            )),
        }
    }
}

impl IoMode {
    pub(crate) fn fopen_flags(self, posix_flags: i32) -> FopenFlags {
        self.fopen_flags_for(posix_flags, false)
    }

    /// `direct_reads`: [`IoMode::Auto`] opens read-only files with direct I/O too.
    pub(crate) fn fopen_flags_for(self, posix_flags: i32, direct_reads: bool) -> FopenFlags {
        let direct = match self {
            IoMode::Auto => match posix_flags & libc::O_ACCMODE {
                libc::O_WRONLY => true,
                libc::O_RDONLY => direct_reads,
                _ => false,
            },
            IoMode::Cached | IoMode::Writeback => false,
            IoMode::Direct => true,
        };
        if direct {
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        } else {
            FopenFlags::empty()
        }
    }
}

/// Request counters, logged when the file system is unmounted.
#[derive(Debug, Default)]
pub struct Counters {
    /// Read requests.
    pub reads: AtomicU64,
    /// Write requests.
    pub writes: AtomicU64,
    /// Bytes read.
    pub read_bytes: AtomicU64,
    /// Bytes written.
    pub write_bytes: AtomicU64,
    /// Metadata requests (lookup, getattr, create, mkdir, ...).
    pub meta: AtomicU64,
}

/// How long a store mount's io_uring queue threads keep polling for the next request
/// after answering one (yielding their CPU to anything runnable meanwhile) before they
/// sleep. A thread that sleeps at once lets its vCPU halt, and on the development VM
/// the scheduler then wakes the application on that halted vCPU for the next reply
/// (one process's creates, alternated with and without polling: docs/benchmarks.md,
/// "Round 2 session 8").
pub const RING_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Does this kernel hand FUSE requests over io_uring to servers that ask
/// (`/sys/module/fuse/parameters/enable_uring`)? None: the parameter does not exist
/// (a kernel before 6.14, or built without it).
pub fn io_uring_enabled() -> Option<bool> {
    let v = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").ok()?;
    Some(v.trim() == "Y")
}

/// `ring`: ask for FUSE-over-io-uring (store mode; docs/fuse.md, "Requests over
/// io_uring"), with the queue threads polling this long after each answer. The kernel
/// grants it only when its `fuse` module has `enable_uring` set; otherwise requests
/// keep coming through `/dev/fuse`, as without.
pub(crate) fn configure_kernel(config: &mut KernelConfig, io: IoMode, ring: Option<std::time::Duration>) {
    if let Err(max) = config.set_max_write(MAX_WRITE) {
        let _ = config.set_max_write(max);
    }
    if let Err(max) = config.set_max_readahead(MAX_WRITE) {
        let _ = config.set_max_readahead(max);
    }
    let _ = config.set_max_background(64);
    let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
    // The daemon clears set-user-ID/set-group-ID on a user's write itself (the kernel's
    // own attempt is a chmod request on page-cache writes only, and none on direct I/O).
    let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV);
    if io == IoMode::Writeback {
        let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
    }
    if matches!(io, IoMode::Auto | IoMode::Direct) {
        // mmap of a direct-I/O open (kernel >= 6.6); without it mmap there is ENODEV.
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
    }
    if let Some(spin) = ring {
        match config.add_capabilities(InitFlags::FUSE_OVER_IO_URING) {
            Ok(()) => {
                fuser::set_io_uring_spin(spin);
                tracing::info!(
                    "requests over io_uring: one queue per CPU, answered on that CPU; a queue \
                     polls {} us after answering",
                    spin.as_micros()
                )
            }
            Err(_) => tracing::info!(
                "requests over /dev/fuse: the kernel does not offer io_uring (Linux 6.14+ with \
                 /sys/module/fuse/parameters/enable_uring = Y)"
            ),
        }
    }
    tracing::info!(caps = ?config.capabilities(), "FUSE connection initialised");
}

/// The mode bits a write by an unprivileged user clears: set-user-ID, and
/// set-group-ID when group execute is set (without it, it marks mandatory locking).
pub(crate) fn killed_mode(mode: u32) -> Option<u32> {
    let mut kill = 0;
    if mode & libc::S_ISUID != 0 {
        kill |= libc::S_ISUID;
    }
    if mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 {
        kill |= libc::S_ISGID;
    }
    (kill != 0).then_some(mode & 0o7777 & !kill)
}

pub(crate) fn errno_of(e: &ckptfs_store::StoreError) -> Errno {
    Errno::from_i32(e.errno())
}

pub(crate) fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Reply to a request that returns no data: success, or the error.
pub(crate) fn reply_empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

pub(crate) fn split_name(name: &OsStr) -> Result<&str, Errno> {
    let s = name.to_str().ok_or(Errno::EINVAL)?;
    if s.len() > 255 {
        return Err(Errno::from_i32(libc::ENAMETOOLONG));
    }
    Ok(s)
}

pub(crate) fn system_time(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)
}

pub(crate) use ckptfs_settings::now_ns;

thread_local! {
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` with a per-thread buffer of `len` bytes (reads reuse it instead of allocating).
pub(crate) fn with_buffer<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    READ_BUF.with(|b| {
        let mut b = b.borrow_mut();
        if b.len() < len {
            b.resize(len, 0);
        }
        f(&mut b[..len])
    })
}

/// The `Filesystem` calls neither mode serves, answered without fuser's "[Not
/// Implemented]" warning (which would reach a foreground daemon's or a benchmark's
/// terminal): ioctl ENOTTY (as a plain file); poll, lseek, copy_file_range and bmap
/// ENOSYS, after which the kernel uses its generic code (always-ready poll,
/// generic_file_llseek, a read/write copy) and stops asking.
#[macro_export]
#[doc(hidden)]
macro_rules! quiet_defaults {
    () => {
        fn ioctl(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _fh: fuser::FileHandle,
            _flags: fuser::IoctlFlags,
            _cmd: u32,
            _in_data: &[u8],
            _out_size: u32,
            reply: fuser::ReplyIoctl,
        ) {
            reply.error(fuser::Errno::ENOTTY);
        }

        fn poll(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _fh: fuser::FileHandle,
            _ph: fuser::PollNotifier,
            _events: fuser::PollEvents,
            _flags: fuser::PollFlags,
            reply: fuser::ReplyPoll,
        ) {
            reply.error(fuser::Errno::ENOSYS);
        }

        fn lseek(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _fh: fuser::FileHandle,
            _offset: i64,
            _whence: i32,
            reply: fuser::ReplyLseek,
        ) {
            reply.error(fuser::Errno::ENOSYS);
        }

        fn copy_file_range(
            &self,
            _req: &fuser::Request,
            _ino_in: fuser::INodeNo,
            _fh_in: fuser::FileHandle,
            _offset_in: u64,
            _ino_out: fuser::INodeNo,
            _fh_out: fuser::FileHandle,
            _offset_out: u64,
            _len: u64,
            _flags: fuser::CopyFileRangeFlags,
            reply: fuser::ReplyWrite,
        ) {
            reply.error(fuser::Errno::ENOSYS);
        }

        fn bmap(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _blocksize: u32,
            _idx: u64,
            reply: fuser::ReplyBmap,
        ) {
            reply.error(fuser::Errno::ENOSYS);
        }
    };
}
