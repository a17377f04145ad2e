//! Random damage to the segment's metadata, many seeds (the targeted cases, one field
//! each, are in `corrupt.rs`): every read returns the exact bytes written or an error,
//! nothing panics or hangs, fsck and repair run to the end.

mod corrupt_support;
mod support;

use ckptfs_store::layout::{Superblock, CHUNK_ENTRY_SIZE, INODE_SIZE, LEASE_SLOT_SIZE};
use corrupt_support::*;
use std::mem::offset_of;

#[test]
fn child_entry() {
    support::child_entry();
}

/// A small deterministic generator (splitmix64), so that a failing seed can be re-run.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One to six random edits of seed `seed`: each picks a metadata structure of the
/// segment (superblock, the inodes of /, /d, /d/a and /d/b, the chunk entries of both
/// files, the free stacks, the name hash, the lease slots, the change map), a random
/// offset in it and a random change (a flipped bit, zero, all ones, a small number, a
/// random 32- or 64-bit value).
fn random_damage(c: &Ctx, seed: u64) -> Vec<(u64, Edit)> {
    let l = &c.layout;
    let mut r = Mix(seed);
    let fids = [0, c.d, c.a, c.b];
    let mut edits = Vec::new();
    println!(
        "seed {seed}: chunk table at {}, /d/a's chunks {:?}; inodes at {}: / 0, /d {}, /d/a {}, /d/b {}",
        l.chunk_off, c.a_chunks, l.inode_off, c.d, c.a, c.b
    );
    for _ in 0..1 + r.below(6) {
        let (start, len) = match r.below(9) {
            0 => (0, l.inode_off),
            1 | 2 => (c.inode(fids[r.below(4) as usize], 0), INODE_SIZE),
            3 | 4 => {
                let chunk = if r.below(2) == 0 {
                    c.a_chunks[r.below(c.a_chunks.len() as u64) as usize]
                } else {
                    r.below(u64::from(c.mem_top) + 2) as u32
                };
                (c.chunk(chunk, 0), CHUNK_ENTRY_SIZE)
            }
            5 => (l.mem_stack_off, l.hash_off - l.mem_stack_off),
            6 => (l.hash_off, l.change_off - l.hash_off),
            7 => (l.lease_off, LEASE_SLOT_SIZE * u64::from(l.lease_slots)),
            _ => (l.change_off, l.data_off - l.change_off),
        };
        let mut off = start + r.below(len.saturating_sub(8));
        if r.below(4) != 0 {
            off &= !3;
        }
        // Not the file and namespace locks: a lock whose holder died means "it died in
        // the middle of an update", and recovery adopts the records it guards as they
        // stand (design.md, "Threat model: damaged segments"), so damage to those
        // records in the same event cannot be told from that crash. The lock words
        // alone are the targeted cases above (dead and unrelated live owners).
        let in_lock = |at: u64| {
            let ns = offset_of!(Superblock, ns_lock) as u64;
            let inode = at.checked_sub(l.inode_off).map(|d| d % INODE_SIZE);
            (ns..ns + 64).contains(&(at + 7))
                || (ns..ns + 64).contains(&at)
                || (at >= l.inode_off
                    && at < l.inode_off + u64::from(l.max_files) * INODE_SIZE
                    && inode.is_some_and(|d| d < 64 || d + 8 > INODE_SIZE))
        };
        if in_lock(off) {
            continue;
        }
        let edit = match r.below(6) {
            0 => Edit::Xor32(1 << r.below(32)),
            1 => Edit::Set32(0),
            2 => Edit::Set32(u32::MAX),
            3 => Edit::Set32(r.below(16) as u32),
            4 => Edit::Set32(r.next() as u32),
            _ => Edit::Set64(r.next()),
        };
        // Shown with a failure (the test harness prints a failing test's output).
        println!("seed {seed}: region at {start} ({len} B): {edit:?} at offset {off}");
        edits.push((off, edit));
    }
    edits
}

/// Random damage to the segment's metadata, many seeds: every read returns the exact
/// bytes written or an error, nothing panics or hangs, fsck and repair run to the end.
/// `CKPTFS_CORRUPT_SEEDS=N` runs N seeds (from `CKPTFS_CORRUPT_SEED_FROM`, default 0);
/// `CKPTFS_CORRUPT_SEED=S` runs only seed S.
#[test]
fn random_metadata_damage_never_returns_wrong_bytes() {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match var("CKPTFS_CORRUPT_SEED") {
        Some(s) => vec![s],
        None => {
            let from = var("CKPTFS_CORRUPT_SEED_FROM").unwrap_or(0);
            (from..from + var("CKPTFS_CORRUPT_SEEDS").unwrap_or(256)).collect()
        }
    };
    for seed in seeds {
        let case = format!("random.{seed}");
        run_damaged(&case, |c| (0, Edit::Multi(random_damage(c, seed))), false, false);
    }
}
