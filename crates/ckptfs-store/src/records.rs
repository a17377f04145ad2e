//! The checksummed metadata records of a segment (format version 3 and later): how
//! each record's CRC32C is computed and sealed, for the store's checks
//! ([`crate::integrity`]), the allocator and the segment's creation.
//!
//! Three records carry a CRC32C of their own, each written by whoever changes the record
//! while holding the lock that protects it:
//!
//! | record | fields covered | lock | checked by |
//! |---|---|---|---|
//! | inode namespace record (`ns_crc`) | file id, kind, ORPHAN flag, parent, mode, uid, gid, name, link target, nlink, rdev | namespace | open, stat, lookup, fsck |
//! | inode data record (`data_crc`) | file id, size, chunk count, small-file run | file | open, stat, every read and write, fsck |
//! | chunk entry (`meta`) | chunk id, owner, logical index | allocation (stored before `owner`) | every chunk-map rebuild, fsck |
//!
//! A reader holding the lock sees either the old or the new record with its matching CRC.
//! A writer killed between a field and its CRC leaves a mismatch, but always while holding
//! the lock, so the next locker gets `EOWNERDEAD` and reseals (the inode's data record;
//! every namespace record) before trusting them: damage that coincides with such a crash
//! is adopted, which is the documented limit. Chunk entries have no such window: `meta`
//! is stored before the `owner` store that commits the allocation.
//!
//! The per-chunk data CRC (`sum`) protects itself: a changed length or CRC is a mismatch
//! on verification, and a stale flag nobody explains is EIO.

use crate::checksum::crc32c;
use crate::layout::*;
use crate::segment::Segment;
use ckptfs_settings::now_ns;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// CRC of inode `fid`'s namespace record as it would be with kind `k`.
///
/// Callers hold the namespace lock (names change only under it) or own the segment
/// exclusively (creation).
pub(crate) fn ns_crc_with_kind(seg: &Segment, fid: u32, k: u32) -> u32 {
    let ino = seg.inode(fid);
    let len = ino.name_len.load(Relaxed);
    let mut b = [0u8; 44 + 256];
    // The ORPHAN flag is part of the record (set under the namespace lock): a stray
    // ORPHAN bit must not get a named file freed.
    let k = k | (ino.flags.load(Relaxed) & iflag::ORPHAN) << 16;
    for (i, v) in [
        fid,
        k,
        ino.parent.load(Relaxed),
        ino.mode.load(Relaxed),
        ino.uid.load(Relaxed),
        ino.gid.load(Relaxed),
        len,
        ino.target.load(Relaxed),
        ino.nlink.load(Relaxed),
    ]
    .into_iter()
    .enumerate()
    {
        b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    b[36..44].copy_from_slice(&ino.rdev.load(Relaxed).to_le_bytes());
    let n = (len as usize).min(256);
    // SAFETY: the name cell is only written under the namespace lock, which the caller
    // holds (or the caller has exclusive access during creation).
    b[44..44 + n].copy_from_slice(unsafe { &(&*ino.name.get())[..n] });
    crc32c(&b[..44 + n])
}

/// Store the namespace CRC of `fid` for its current fields. Namespace lock held.
pub(crate) fn seal_ns(seg: &Segment, fid: u32) {
    let k = seg.inode(fid).kind.load(Relaxed);
    seg.inode(fid)
        .ns_crc
        .store(ns_crc_with_kind(seg, fid, k), Release);
}

/// Does `fid`'s namespace record match its CRC? Namespace lock held.
pub(crate) fn ns_ok(seg: &Segment, fid: u32) -> bool {
    let ino = seg.inode(fid);
    ino.ns_crc.load(Acquire) == ns_crc_with_kind(seg, fid, ino.kind.load(Acquire))
}

fn data_crc_of(seg: &Segment, fid: u32) -> u32 {
    let ino = seg.inode(fid);
    let mut b = [0u8; 24];
    b[..4].copy_from_slice(&fid.to_le_bytes());
    b[4..8].copy_from_slice(&ino.nchunks.load(Relaxed).to_le_bytes());
    b[8..16].copy_from_slice(&ino.size.load(Relaxed).to_le_bytes());
    b[16..].copy_from_slice(&ino.srun.load(Relaxed).to_le_bytes());
    crc32c(&b)
}

/// Store the data-record CRC of `fid` (size, chunk count, small run). File lock held.
pub(crate) fn seal_data(seg: &Segment, fid: u32) {
    seg.inode(fid).data_crc.store(data_crc_of(seg, fid), Release);
}

/// Does `fid`'s data record match its CRC? File lock held.
pub(crate) fn data_ok(seg: &Segment, fid: u32) -> bool {
    seg.inode(fid).data_crc.load(Acquire) == data_crc_of(seg, fid)
}

/// The `meta` CRC of chunk `c` owned by `owner` (file id + 1) at `logical`.
pub(crate) fn chunk_meta(c: u32, owner: u32, logical: u32) -> u32 {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&c.to_le_bytes());
    b[4..8].copy_from_slice(&owner.to_le_bytes());
    b[8..].copy_from_slice(&logical.to_le_bytes());
    crc32c(&b)
}

/// Does owned chunk `c`'s entry match its `meta` CRC?
pub(crate) fn chunk_ok(seg: &Segment, c: u32) -> bool {
    let e = seg.chunk(c);
    e.meta.load(Acquire) == chunk_meta(c, e.owner.load(Acquire), e.logical.load(Relaxed))
}

/// Effective uid and gid of the calling process.
pub(crate) fn caller_ids() -> (u32, u32) {
    // SAFETY: geteuid/getegid have no preconditions.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Is `fid` a valid file id (not NONE, inside the table)?
pub(crate) fn fid_ok(seg: &Segment, fid: u32) -> bool {
    fid < seg.layout.max_files
}

/// Make the root directory's inode of a fresh segment, with its checksummed records
/// (`CreateParams::init_root`).
pub(crate) fn init_root(seg: &Segment) {
    let root = seg.inode(ROOT);
    let (uid, gid) = caller_ids();
    root.uid.store(uid, std::sync::atomic::Ordering::Relaxed);
    root.gid.store(gid, std::sync::atomic::Ordering::Relaxed);
    root.mode.store(0o755, std::sync::atomic::Ordering::Relaxed);
    root.target.store(NONE, std::sync::atomic::Ordering::Relaxed);
    root.mtime_ns
        .store(now_ns(), std::sync::atomic::Ordering::Relaxed);
    root.ctime_ns
        .store(now_ns(), std::sync::atomic::Ordering::Relaxed);
    root.ns_crc.store(
        ns_crc_with_kind(seg, ROOT, kind::DIR),
        std::sync::atomic::Ordering::Relaxed,
    );
    seal_data(seg, ROOT);
    root.kind.store(kind::DIR, std::sync::atomic::Ordering::Release);
}
