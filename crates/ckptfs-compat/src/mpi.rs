//! The collective steps of the libraries, over a duplicate of the application's
//! communicator (`MPI_COMM_WORLD` for SCR, the one given to `VELOC_Init`). The MPI calls
//! themselves are in `csrc/mpi_glue.c`, compiled with the program's MPI compiler wrapper:
//! `MPI_Comm` is a pointer in Open MPI and an int in MPICH, and only C code compiled
//! against the right `mpi.h` handles both. This module is the only one calling it.

use crate::error::{CompatError, Result};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// An `MPI_Comm` as the application passed it (a pointer in Open MPI; MPICH's int
/// arrives in the same register).
pub type RawComm = *mut c_void;

extern "C" {
    fn ckmpi_initialized() -> c_int;
    fn ckmpi_use_world() -> c_int;
    fn ckmpi_use_comm(c: RawComm) -> c_int;
    fn ckmpi_use_self() -> c_int;
    fn ckmpi_active() -> c_int;
    fn ckmpi_release() -> c_int;
    fn ckmpi_rank(r: *mut c_int) -> c_int;
    fn ckmpi_size(s: *mut c_int) -> c_int;
    fn ckmpi_barrier() -> c_int;
    fn ckmpi_allreduce_i64(v: i64, op: c_int, out: *mut i64) -> c_int;
    fn ckmpi_bcast(buf: *mut c_void, len: c_int, root: c_int) -> c_int;
    fn ckmpi_node_rank(rank: *mut c_int, size: *mut c_int) -> c_int;
    fn ckmpi_color_rank(color: c_int, rank: *mut c_int) -> c_int;
}

static RANK: AtomicI64 = AtomicI64::new(-1);
/// No MPI at all (`VELOC_Init_single` in a program that did not initialise MPI): every
/// collective step is this process's own value.
static SOLO: AtomicBool = AtomicBool::new(false);

/// This process's rank in the library's communicator, once attached (for messages).
pub fn cached_rank() -> Option<i64> {
    let r = RANK.load(Ordering::Relaxed);
    (r >= 0).then_some(r)
}

fn ok(rc: c_int, what: &str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(CompatError::Mpi(format!("{what} failed")))
    }
}

/// Which communicator to duplicate.
#[derive(Debug, Clone, Copy)]
pub enum Comm {
    /// `MPI_COMM_WORLD` (SCR).
    World,
    /// The application's communicator (`VELOC_Init`).
    Given(RawComm),
    /// This process alone (`VELOC_Init_single`): MPI_COMM_SELF if MPI is initialised,
    /// else no MPI at all.
    SelfOnly,
}

/// Duplicate the communicator; its rank and size.
pub fn attach(c: Comm) -> Result<(u32, u32)> {
    // SAFETY: checks MPI_Initialized/MPI_Finalized only.
    let initialized = unsafe { ckmpi_initialized() } != 0;
    if !initialized && matches!(c, Comm::SelfOnly) {
        SOLO.store(true, Ordering::Relaxed);
        RANK.store(0, Ordering::Relaxed);
        return Ok((0, 1));
    }
    // SAFETY: MPI is initialised (checked by the glue again); a Given communicator is the
    // application's own handle, passed through unchanged.
    let rc = unsafe {
        if ckmpi_initialized() == 0 {
            return Err(CompatError::Mpi(
                "MPI is not initialized (call MPI_Init first) or already finalized".into(),
            ));
        }
        match c {
            Comm::World => ckmpi_use_world(),
            Comm::Given(h) => ckmpi_use_comm(h),
            Comm::SelfOnly => ckmpi_use_self(),
        }
    };
    ok(rc, "MPI_Comm_dup")?;
    let (mut r, mut s) = (0, 0);
    // SAFETY: the duplicate exists; out pointers are valid locals.
    ok(unsafe { ckmpi_rank(&mut r) }, "MPI_Comm_rank")?;
    // SAFETY: as above.
    ok(unsafe { ckmpi_size(&mut s) }, "MPI_Comm_size")?;
    RANK.store(i64::from(r), Ordering::Relaxed);
    Ok((r as u32, s as u32))
}

/// Whether a communicator is attached.
pub fn active() -> bool {
    // SAFETY: reads a static of the glue.
    SOLO.load(Ordering::Relaxed) || unsafe { ckmpi_active() != 0 }
}

fn solo() -> bool {
    SOLO.load(Ordering::Relaxed)
}

/// Free the duplicate (before the application's MPI_Finalize).
pub fn detach() -> Result<()> {
    RANK.store(-1, Ordering::Relaxed);
    if SOLO.swap(false, Ordering::Relaxed) {
        return Ok(());
    }
    // SAFETY: frees only the library's own duplicate.
    ok(unsafe { ckmpi_release() }, "MPI_Comm_free")
}

/// Barrier over the communicator.
pub fn barrier() -> Result<()> {
    if solo() {
        return Ok(());
    }
    // SAFETY: collective on the library's duplicate.
    ok(unsafe { ckmpi_barrier() }, "MPI_Barrier")
}

fn allreduce(v: i64, op: c_int) -> Result<i64> {
    if solo() {
        return Ok(v);
    }
    let mut out = 0i64;
    // SAFETY: collective on the library's duplicate; out is a valid local.
    ok(unsafe { ckmpi_allreduce_i64(v, op, &mut out) }, "MPI_Allreduce")?;
    Ok(out)
}

/// The minimum of `v` over the ranks.
pub fn min(v: i64) -> Result<i64> {
    allreduce(v, 0)
}

/// The maximum of `v` over the ranks.
pub fn max(v: i64) -> Result<i64> {
    allreduce(v, 1)
}

/// The sum of `v` over the ranks.
pub fn sum(v: i64) -> Result<i64> {
    allreduce(v, 2)
}

/// Whether every rank says `ok` (a logical AND over the ranks).
pub fn all(ok: bool) -> Result<bool> {
    Ok(min(i64::from(ok))? == 1)
}

/// Rank 0's bytes on every rank (any length up to 1 MiB).
pub fn bcast_bytes(mine: &[u8]) -> Result<Vec<u8>> {
    if solo() {
        return Ok(mine.to_vec());
    }
    let mut len = [mine.len() as u64];
    // SAFETY: collective; the buffer is 8 valid bytes.
    ok(unsafe { ckmpi_bcast(len.as_mut_ptr().cast(), 8, 0) }, "MPI_Bcast")?;
    let n = usize::try_from(len[0]).unwrap_or(usize::MAX).min(1 << 20);
    let mut buf = vec![0u8; n];
    let k = mine.len().min(n);
    buf[..k].copy_from_slice(&mine[..k]);
    // SAFETY: collective; buf holds n bytes (n < 2^31).
    let rc = unsafe { ckmpi_bcast(buf.as_mut_ptr().cast(), n as c_int, 0) };
    ok(rc, "MPI_Bcast")?;
    Ok(buf)
}

/// Rank 0's string on every rank.
pub fn bcast_str(mine: &str) -> Result<String> {
    let b = bcast_bytes(mine.as_bytes())?;
    String::from_utf8(b).map_err(|_| CompatError::Mpi("broadcast string is not UTF-8".into()))
}

/// This process's rank among the processes of its node, and their number.
pub fn node_rank() -> Result<(u32, u32)> {
    if solo() {
        return Ok((0, 1));
    }
    let (mut r, mut s) = (0, 0);
    // SAFETY: collective on the duplicate; out pointers are valid locals.
    ok(unsafe { ckmpi_node_rank(&mut r, &mut s) }, "MPI_Comm_split_type")?;
    Ok((r as u32, s as u32))
}

/// This process's rank among the processes passing the same `color` (collective).
pub fn color_rank(color: u32) -> Result<u32> {
    if solo() {
        return Ok(0);
    }
    let mut r = 0;
    // SAFETY: collective on the duplicate; the out pointer is a valid local.
    let rc = unsafe { ckmpi_color_rank(color as c_int, &mut r) };
    ok(rc, "MPI_Comm_split")?;
    Ok(r as u32)
}
