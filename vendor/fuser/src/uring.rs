//! FUSE-over-io-uring (ckptfs patch to fuser 0.18; see `CKPTFS-PATCH.md`).
//!
//! Linux 6.14 and later can hand FUSE requests to the server through io_uring instead of
//! `read(2)`/`write(2)` on `/dev/fuse`, when the `fuse` module's `enable_uring` parameter
//! is set and the server asks for `FUSE_OVER_IO_URING` in its INIT reply. The kernel keeps
//! one queue per possible CPU and puts a request on the queue of the CPU the application
//! made it on. Each queue here is served by one thread bound to that CPU, so a request and
//! its reply wake nothing on another CPU: on a VM where waking an idle vCPU costs tens of
//! microseconds, that is most of a metadata call's cost.
//!
//! Per queue, `DEPTH` entries, each two buffers registered once with the kernel
//! (`FUSE_IO_URING_CMD_REGISTER`, an iovec pair in the SQE's `addr`/`len`):
//! - the header, `fuse_uring_req_header`: `in_out` (128 bytes: the `fuse_in_header` of a
//!   request, the `fuse_out_header` of its reply), `op_in` (128 bytes: the opcode's fixed
//!   argument struct), `ring_ent_in_out` (flags u64, commit_id u64, payload_sz u32,
//!   padding u32, reserved u64);
//! - the payload: every further argument (names, write data) of a request, every reply
//!   argument of its reply.
//!
//! A completion means the kernel wrote a request into an entry. It is rebuilt into the
//! `/dev/fuse` layout (`fuse_in_header`, the fixed struct, the rest: the struct's size is
//! `in.len - 40 - payload_sz`, as the kernel sets `len` for both transports) and
//! dispatched exactly as a request read from the device. Its reply is copied into the same
//! entry and committed with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH` (the `commit_id` the
//! kernel gave), which also hands the entry back for the next request. Interrupts,
//! forgets and notifications still use `/dev/fuse`, so the classic threads keep running.
//!
//! Failure cases:
//! 1. The kernel does not offer io_uring (module parameter off, kernel too old): INIT
//!    does not grant the flag and no ring is started.
//! 2. A queue fails to register (no io_uring, memory): the kernel uses the ring only once
//!    every queue has registered, so requests keep going through `/dev/fuse`.
//! 3. A completion with `-EINTR`/`-EAGAIN`: the entry's last command is submitted again.
//! 4. A malformed entry (lengths that do not add up): answered with EIO, logged.
//! 5. Unmount: the kernel ends every command (`-ENOTCONN`); the thread returns. The
//!    session also stops the threads through their eventfd once the device is gone.
//! 6. A handler panics: caught, the request answered EIO (by its reply object's drop),
//!    the queue served on; a dead queue thread would leave its CPU's requests waiting.

use std::alloc::Layout;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::thread::ThreadId;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::error;
use log::warn;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::channel::ChannelSender;
use crate::dev_fuse::DevFuse;
use crate::ll;
use crate::reply::Reply;
use crate::reply::ReplyEmpty;
use crate::reply::ReplyRaw;
use crate::reply::ReplySender;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `fuse_uring_req_header` offsets.
const OP_IN: usize = 128;
const ENT_IN_OUT: usize = 256;
const COMMIT_ID: usize = ENT_IN_OUT + 8;
const PAYLOAD_SZ: usize = ENT_IN_OUT + 16;
const HEADER_LEN: usize = ENT_IN_OUT + 32;
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;
/// Entries per queue.
const DEPTH: usize = 8;
/// user_data of the eventfd poll.
const WAKE: u64 = u64::MAX;
/// Byte offset of `len` in an SQE.
const SQE_LEN: usize = 24;

/// One page-aligned buffer the kernel reads and writes through its registered address.
struct Buf {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the buffer is plain memory; who may touch it when is the entry protocol
// (the kernel between a submitted command and its completion, else the queue's threads).
unsafe impl Send for Buf {}
// SAFETY: as above.
unsafe impl Sync for Buf {}

impl Buf {
    fn new(len: usize) -> io::Result<Buf> {
        let layout = Layout::from_size_align(len.max(4096), 4096).map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOMEM));
        }
        Ok(Buf { ptr, layout })
    }

    fn len(&self) -> usize {
        self.layout.size()
    }

    /// # Safety
    /// The entry must be in user space (completed, not yet committed).
    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() bytes; the caller owns the entry.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }

    /// # Safety
    /// As `bytes`, and no other reference into the buffer is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as above; the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// One per-CPU queue.
pub(crate) struct Queue {
    qid: u16,
    dev: Arc<DevFuse>,
    headers: Vec<Buf>,
    payloads: Vec<Buf>,
    iovs: Box<[[libc::iovec; 2]]>,
    /// Replies written into their entries, to be committed by the queue's thread.
    pending: Mutex<Vec<(usize, u64)>>,
    wake: OwnedFd,
    owner: OnceLock<ThreadId>,
    stop: AtomicBool,
}

// SAFETY: the iovecs only hold the addresses of the queue's own buffers.
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("qid", &self.qid).finish()
    }
}

impl Queue {
    pub(crate) fn new(qid: u16, dev: Arc<DevFuse>, payload: usize) -> io::Result<Arc<Queue>> {
        let mut headers = Vec::with_capacity(DEPTH);
        let mut payloads = Vec::with_capacity(DEPTH);
        for _ in 0..DEPTH {
            headers.push(Buf::new(HEADER_LEN)?);
            payloads.push(Buf::new(payload)?);
        }
        let iovs = headers
            .iter()
            .zip(&payloads)
            .map(|(h, p)| {
                [
                    libc::iovec { iov_base: h.ptr.cast(), iov_len: HEADER_LEN },
                    libc::iovec { iov_base: p.ptr.cast(), iov_len: p.len() },
                ]
            })
            .collect();
        // SAFETY: eventfd has no memory preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Arc::new(Queue {
            qid,
            dev,
            headers,
            payloads,
            iovs,
            pending: Mutex::new(Vec::new()),
            // SAFETY: fd was just created and is owned by nobody else.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
            owner: OnceLock::new(),
            stop: AtomicBool::new(false),
        }))
    }

    /// Ask the queue's thread to return (after the session has ended).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.kick();
    }

    fn kick(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn cmd(&self, commit_id: u64) -> [u8; 80] {
        let mut c = [0u8; 80];
        c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        c[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        c
    }

    fn register_sqe(&self, ent: usize) -> squeue::Entry128 {
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), CMD_REGISTER)
            .cmd(self.cmd(0))
            .addr(Some(self.iovs[ent].as_ptr() as u64))
            .build()
            .user_data(ent as u64);
        // The iovec count goes in the SQE's `len`, which UringCmd80 does not expose.
        let mut raw = [0u8; 128];
        // SAFETY: Entry128 is repr(C), 128 bytes (io_uring checks it in its tests), and
        // every bit pattern of it is a valid byte array and back.
        unsafe {
            std::ptr::copy_nonoverlapping((&sqe as *const squeue::Entry128).cast::<u8>(), raw.as_mut_ptr(), 128);
        }
        raw[SQE_LEN..SQE_LEN + 4].copy_from_slice(&2u32.to_ne_bytes());
        // SAFETY: as above; the bytes came from a valid Entry128 with only `len` changed.
        unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
    }

    fn commit_sqe(&self, ent: usize, commit_id: u64) -> squeue::Entry128 {
        opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), CMD_COMMIT_AND_FETCH)
            .cmd(self.cmd(commit_id))
            .build()
            .user_data(ent as u64)
    }

    fn wake_sqe(&self) -> squeue::Entry128 {
        squeue::Entry128::from(
            opcode::PollAdd::new(types::Fd(self.wake.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(WAKE),
        )
    }

    /// Write a reply (the `/dev/fuse` layout: out header, then its arguments) into entry
    /// `ent` and queue its commit.
    fn reply(&self, ent: usize, commit_id: u64, bufs: &[IoSlice<'_>]) {
        // SAFETY: the entry is in user space until this commit is submitted, and only the
        // one reply of its request writes it.
        let (head, payload) = unsafe { (self.headers[ent].bytes_mut(), self.payloads[ent].bytes_mut()) };
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut out = [0u8; OUT_HEADER];
        let mut n = 0;
        let mut fits = total >= OUT_HEADER && total - OUT_HEADER <= payload.len();
        if fits {
            for b in bufs {
                for &byte in b.iter() {
                    if n < OUT_HEADER {
                        out[n] = byte;
                    }
                    n += 1;
                    if n == OUT_HEADER {
                        break;
                    }
                }
                if n == OUT_HEADER {
                    break;
                }
            }
            let mut at = 0;
            let mut skip = OUT_HEADER;
            for b in bufs {
                let s = &b[skip.min(b.len())..];
                skip -= skip.min(b.len());
                payload[at..at + s.len()].copy_from_slice(s);
                at += s.len();
            }
            fits = at == total - OUT_HEADER;
        }
        let payload_sz = if fits {
            (total - OUT_HEADER) as u32
        } else {
            // A reply larger than the entry (cannot happen with the sizes the kernel
            // asked for): an error instead.
            error!("fuse ring: reply of {total} bytes does not fit the entry; answering EIO");
            let unique = if total >= OUT_HEADER { u64::from_ne_bytes(out[8..16].try_into().unwrap()) } else { 0 };
            out = [0u8; OUT_HEADER];
            out[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
            out[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            out[8..16].copy_from_slice(&unique.to_ne_bytes());
            0
        };
        head[..OUT_HEADER].copy_from_slice(&out);
        head[PAYLOAD_SZ..PAYLOAD_SZ + 4].copy_from_slice(&payload_sz.to_ne_bytes());
        self.pending.lock().push((ent, commit_id));
        if self.owner.get() != Some(&std::thread::current().id()) {
            self.kick();
        }
    }
}

/// The reply path of a request that came through a ring entry.
#[derive(Clone)]
pub(crate) struct RingReply {
    q: Arc<Queue>,
    ent: usize,
    commit_id: u64,
}

impl std::fmt::Debug for RingReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingReply")
            .field("qid", &self.q.qid)
            .field("ent", &self.ent)
            .field("commit_id", &self.commit_id)
            .finish()
    }
}

impl RingReply {
    pub(crate) fn dev(&self) -> &Arc<DevFuse> {
        &self.q.dev
    }

    pub(crate) fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.q.reply(self.ent, self.commit_id, bufs);
        Ok(())
    }
}

/// Bind the calling thread to one CPU.
fn bind_to(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET on a valid set with an index below CPU_SETSIZE (checked).
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The number of queues the kernel keeps: one per possible CPU
/// (`/sys/devices/system/cpu/possible`, "0-3" or "0,2-5").
pub(crate) fn queues() -> usize {
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let last = possible
        .trim()
        .split(',')
        .filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
        .max();
    match last {
        Some(n) => n + 1,
        // SAFETY: sysconf has no preconditions.
        None => (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }).max(1) as usize,
    }
}

/// Serve queue `q` on its CPU until the connection ends or `stop`.
/// Microseconds a queue's thread keeps polling its ring (yielding the CPU to anything
/// runnable) after answering, before it sleeps: see [`set_io_uring_spin`].
static SPIN_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// ckptfs patch: how long each io_uring queue thread polls for the next request after
/// answering one, yielding its CPU (`sched_yield`) to anything runnable meanwhile,
/// before it sleeps in the kernel. Zero (the default) sleeps at once. Process-wide; read
/// before every wait. On a VM that halts an idle vCPU at once, a thread that sleeps
/// lets the vCPU halt, and the scheduler then wakes the application on the halted vCPU
/// (an inter-processor interrupt through the host) for the next reply.
pub fn set_io_uring_spin(d: std::time::Duration) {
    SPIN_US.store(d.as_micros().min(u64::MAX as u128) as u64, Ordering::Relaxed);
}

fn spin_us() -> u64 {
    SPIN_US.load(Ordering::Relaxed)
}

pub(crate) fn serve<FS: Filesystem>(q: Arc<Queue>, se: SessionEventLoop<FS>) -> io::Result<()> {
    let _ = q.owner.set(std::thread::current().id());
    if let Err(e) = bind_to(q.qid as usize) {
        warn!("fuse ring {}: cannot bind to its CPU: {e}", q.qid);
    }
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder()
        .setup_cqsize(4 * DEPTH as u32)
        .build(2 * DEPTH as u32 + 2)?;
    let mut last = vec![(CMD_REGISTER, 0u64); DEPTH];
    {
        let mut sq = ring.submission();
        for ent in 0..DEPTH {
            // SAFETY: the entry's buffers (iovecs and what they point at) live in `q`,
            // which outlives the ring (dropped first, at the end of this function).
            unsafe { sq.push(&q.register_sqe(ent)) }.map_err(io::Error::other)?;
        }
        // SAFETY: the eventfd lives in `q`.
        unsafe { sq.push(&q.wake_sqe()) }.map_err(io::Error::other)?;
    }
    let mut req = Vec::with_capacity(IN_HEADER + OP_IN + q.payloads[0].len());
    let mut done: Vec<(u64, i32)> = Vec::with_capacity(2 * DEPTH);
    loop {
        let commits: Vec<(usize, u64)> = std::mem::take(&mut *q.pending.lock());
        for (ent, id) in commits {
            last[ent] = (CMD_COMMIT_AND_FETCH, id);
            // SAFETY: as for the registration: the entry's buffers live in `q`.
            unsafe { ring.submission().push(&q.commit_sqe(ent, id)) }.map_err(io::Error::other)?;
        }
        if q.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let spin = spin_us();
        if spin > 0 {
            match ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            let t0 = std::time::Instant::now();
            while ring.completion().is_empty() && t0.elapsed().as_micros() < spin as u128 {
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(ud, res) in &done {
            if ud == WAKE {
                let mut v = 0u64;
                // SAFETY: reads 8 bytes into a valid u64 from our non-blocking eventfd.
                let _ = unsafe { libc::read(q.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                // SAFETY: the eventfd lives in `q`.
                unsafe { ring.submission().push(&q.wake_sqe()) }.map_err(io::Error::other)?;
                continue;
            }
            let ent = ud as usize;
            if ent >= DEPTH {
                continue;
            }
            if res < 0 {
                match -res {
                    libc::EINTR | libc::EAGAIN => {
                        let sqe = match last[ent] {
                            (CMD_REGISTER, _) => q.register_sqe(ent),
                            (_, id) => q.commit_sqe(ent, id),
                        };
                        // SAFETY: as above.
                        unsafe { ring.submission().push(&sqe) }.map_err(io::Error::other)?;
                        continue;
                    }
                    libc::ENOTCONN | libc::ENODEV | libc::ECANCELED => return Ok(()),
                    e => {
                        let e = io::Error::from_raw_os_error(e);
                        error!("fuse ring {}: entry {ent}: {e}", q.qid);
                        return Err(e);
                    }
                }
            }
            handle(&q, ent, &mut req, &se);
        }
    }
}

/// Rebuild the request in entry `ent` into the `/dev/fuse` layout and dispatch it.
fn handle<FS: Filesystem>(q: &Arc<Queue>, ent: usize, req: &mut Vec<u8>, se: &SessionEventLoop<FS>) {
    let u32_at = |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap());
    // The entry's buffers are only read inside this block: the reply writes them.
    let (unique, commit_id, ok) = {
        // SAFETY: the kernel completed the entry; it is ours until its commit.
        let (head, payload) = unsafe { (q.headers[ent].bytes(), q.payloads[ent].bytes()) };
        let len = u32_at(head, 0) as usize;
        let payload_sz = u32_at(head, PAYLOAD_SZ) as usize;
        let op = len
            .checked_sub(IN_HEADER + payload_sz)
            .filter(|&op| op <= OP_IN && payload_sz <= payload.len());
        if let Some(op) = op {
            req.clear();
            req.extend_from_slice(&head[..IN_HEADER]);
            req.extend_from_slice(&head[OP_IN..OP_IN + op]);
            req.extend_from_slice(&payload[..payload_sz]);
        } else {
            error!(
                "fuse ring {}: malformed entry (len {len}, payload {payload_sz}); answering EIO",
                q.qid
            );
        }
        (u64_at(head, 8), u64_at(head, COMMIT_ID), op.is_some())
    };
    let sender = ChannelSender::Ring(RingReply { q: q.clone(), ent, commit_id });
    let parsed = if ok { RequestWithSender::new(sender.clone(), req) } else { None };
    match parsed {
        Some(r) => {
            if let Ok(ll::Operation::Destroy(_)) = r.request.operation() {
                r.reply::<ReplyEmpty>().ok();
            } else {
                // A panicking handler must not end the queue's only thread (requests made
                // on its CPU would wait forever): its reply object answers EIO as it is
                // dropped during the unwinding, and the thread goes on.
                let run = std::panic::AssertUnwindSafe(|| r.dispatch(se));
                if std::panic::catch_unwind(run).is_err() {
                    error!("fuse ring {}: a request handler panicked; answered EIO", q.qid);
                }
            }
        }
        None => {
            <ReplyRaw as Reply>::new(ll::RequestId(unique), ReplySender::Channel(sender))
                .send_ll(&ll::ResponseErrno(ll::Errno::EIO));
        }
    }
}
