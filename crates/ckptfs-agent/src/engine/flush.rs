//! Flushing a staged file to the PFS level: a verifier thread checks the memory
//! chunks in place ahead of the IO threads, which hand gathered writes (data-region
//! ranges, spill buffers, zeros) to the temporary file; then the commit (fsync, re-check,
//! rename, manifest, evict).

use super::stage::{Plan, Src};
use super::{lock, Item, Published, Shared};
use crate::dest::{IoPart, DIRECT_ALIGN};
use crate::error::AgentError;
use crate::manifest::Entry;
use crate::pfs::publish::Renamed;
use crate::pfs::PfsPut;
use crate::sys::{self, AlignedBuf};
use ckptfs_level::crc::crc_combine;
use ckptfs_level::{Level, LevelKind, Version};
use ckptfs_store::checksum::{crc32c, crc32c_append_zeros};
use ckptfs_store::fault::crash_point;
use ckptfs_store::region_io::RegionSlice;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};

/// Progress of one file's write phase: units `[0, ready)` are verified, `[0, taken)`
/// handed to IO threads.
#[derive(Default)]
struct Pipe {
    ready: usize,
    taken: usize,
    failed: bool,
}

impl Shared {
    /// The gathered writes of `plan` (see [`split_units`]).
    fn units(&self, plan: &Plan) -> Vec<(usize, usize)> {
        let lens: Vec<usize> = plan.blocks.iter().map(|b| b.len).collect();
        split_units(
            &lens,
            self.cs as usize,
            self.cfg.write_size,
            self.cfg.io_threads,
            self.cfg.direct,
        )
    }

    /// `len` bytes at offset `off` of the data region (a chunk list entry that points
    /// outside it is refused as a store error, never read).
    fn region_slice(&self, off: u64, len: usize) -> Result<RegionSlice<'_>, AgentError> {
        self.local.region().slice(off, len).ok_or_else(|| {
            AgentError::Store(ckptfs_store::StoreError::Invalid(format!(
                "chunk bytes {off}+{len} lie outside the {}-byte data region",
                self.local.region().len()
            )))
        })
    }

    /// Verify a unit's memory chunks in place (the verifier thread, ahead of the writers).
    fn verify_mem(&self, plan: &Plan, range: (usize, usize)) -> Result<(), AgentError> {
        if self.stopping() {
            return Err(AgentError::Stopped(plan.item.path.clone()));
        }
        for b in &plan.blocks[range.0..range.1] {
            if let Src::Mem { off, written, crc } = b.src {
                let data = self.region_slice(off, written)?;
                data.populate();
                let got = data.crc32c();
                if got != crc {
                    return Err(self.mismatch(plan, b.logical, crc, got));
                }
                let content = if written <= b.len {
                    crc32c_append_zeros(got, b.len - written)
                } else {
                    data.prefix(b.len).crc32c()
                };
                lock(&plan.content)[b.logical as usize] = content;
            }
        }
        Ok(())
    }

    /// Write one unit whose memory chunks `verify_mem` has checked; its spill chunks are
    /// read and checked here.
    fn write_unit(&self, plan: &Plan, put: &PfsPut<'_>, range: (usize, usize)) -> Result<(), AgentError> {
        if self.stopping() {
            return Err(AgentError::Stopped(plan.item.path.clone()));
        }
        let blocks = &plan.blocks[range.0..range.1];
        let mut bufs: Vec<AlignedBuf> = Vec::new();
        // Read (and verify) spill chunks first: the slices below borrow the buffers.
        for b in blocks {
            if let Src::Spill { off, written, crc } = b.src {
                let mut buf = AlignedBuf::zeroed(self.cs as usize);
                let spill = self.local.spill().expect("spill chunk without a spill file");
                crate::dest::pread_exact(spill, &mut buf[..written], off)
                    .map_err(|e| AgentError::dest("read spill file", "spill", e))?;
                let got = crc32c(&buf[..written]);
                if got != crc {
                    return Err(self.mismatch(plan, b.logical, crc, got));
                }
                lock(&plan.content)[b.logical as usize] = content_crc(got, &buf[..written], b.len);
                bufs.push(buf);
            }
        }
        // The memory chunks' ranges first: the pieces below borrow them.
        let mut regions = Vec::with_capacity(blocks.len());
        for b in blocks {
            if let Src::Mem { off, written, .. } = b.src {
                regions.push(self.region_slice(off, written.min(b.len))?);
            }
        }
        let mut iov: Vec<IoPart<'_>> = Vec::with_capacity(blocks.len() * 2);
        let mut spill_bufs = bufs.iter();
        let mut mem_slices = regions.iter();
        let mut total = 0;
        for b in blocks {
            let data: IoPart<'_> = match b.src {
                Src::Mem { .. } => IoPart::Shared(mem_slices.next().expect("one range per memory block")),
                Src::Spill { written, .. } => {
                    IoPart::Buf(&spill_bufs.next().expect("one buffer per spill block")[..written.min(b.len)])
                }
                Src::Hole => IoPart::Buf(&[]),
            };
            let n = data.len();
            if n > 0 {
                iov.push(data);
            }
            if n < b.len {
                iov.push(IoPart::Buf(&self.zeros[..b.len - n]));
            }
            total += b.len;
        }
        if let Some(t) = &self.throttle {
            t.acquire(total);
        }
        let off = blocks[0].logical as u64 * self.cs;
        put.write_at(&iov, off)?;
        crash_point("agent-mid-write");
        // No second CRC pass over memory chunks here: a legitimate writer cannot
        // change a file without changing what `unchanged` checks after the fsync, and
        // a stray corruption inside this window is caught at restore, where every
        // chunk is checked against the manifest (docs/agent.md, failure case 9).
        plan.done.fetch_add(total as u64, Ordering::Relaxed);
        Ok(())
    }

    pub(super) fn flush(&self, plan: &Plan, threads: usize) -> Result<Published, AgentError> {
        let w = self.write_phase(plan, threads)?;
        self.commit_phase(plan, w)
    }

    /// Create the temporary file and write every block into it (not yet durable).
    pub(super) fn write_phase(&self, plan: &Plan, threads: usize) -> Result<PfsPut<'_>, AgentError> {
        if self.stopping() {
            return Err(AgentError::Stopped(plan.item.path.clone()));
        }
        // Before copying anything: not over a newer version another node drained.
        self.pfs
            .check_not_older(&plan.item.path, plan.item.fp.mtime_ns, None)?;
        let put = self.pfs.begin(&plan.item.path, plan.mode, plan.item.fp.size)?;
        let units = self.units(plan);
        // One verifier thread checks the memory chunks of unit i+1.. while the IO
        // threads write units ..i, so that every IO thread goes from one write straight
        // to the next (the check inside the IO thread left the disk with one write
        // in flight instead of `threads` for ~3 ms of every ~16 ms). A unit is written only
        // after it passed; the verifier runs at most `n` units ahead of the writers,
        // which keeps the window between a check and its write short.
        let n = threads.min(units.len()).max(1);
        let pipe = Mutex::new(Pipe::default());
        let moved = Condvar::new();
        let first_err: Mutex<Option<AgentError>> = Mutex::new(None);
        let fail = |e: AgentError| {
            lock(&first_err).get_or_insert(e);
            lock(&pipe).failed = true;
            moved.notify_all();
        };
        let verify = || {
            for (i, &u) in units.iter().enumerate() {
                let mut g = lock(&pipe);
                while !g.failed && i >= g.taken + n {
                    g = moved.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                if g.failed {
                    return;
                }
                drop(g);
                if let Err(e) = self.verify_mem(plan, u) {
                    return fail(e);
                }
                lock(&pipe).ready = i + 1;
                moved.notify_all();
            }
        };
        let write = || loop {
            let mut g = lock(&pipe);
            while !g.failed && g.taken < units.len() && g.taken >= g.ready {
                g = moved.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            if g.failed || g.taken >= units.len() {
                return;
            }
            let u = units[g.taken];
            g.taken += 1;
            drop(g);
            moved.notify_all();
            if let Err(e) = self.write_unit(plan, &put, u) {
                return fail(e);
            }
        };
        std::thread::scope(|sc| {
            for _ in 0..n {
                sc.spawn(|| {
                    let _ = sys::set_priority(self.cfg.priority);
                    write()
                });
            }
            verify();
        });
        if let Some(e) = lock(&first_err).take() {
            return Err(e);
        }
        Ok(put)
    }

    /// Make the temporary file durable, re-check, publish it and record it.
    fn commit_phase(&self, plan: &Plan, w: PfsPut<'_>) -> Result<Published, AgentError> {
        let r = self.publish_phase(plan, w)?;
        let (_, res) = self.record(vec![r]).pop().expect("one file recorded");
        res
    }

    /// Make the temporary file durable, re-check the store file, rename it into place
    /// (the PFS level's publish protocol, with the store file's race check).
    pub(super) fn publish_phase(&self, plan: &Plan, w: PfsPut<'_>) -> Result<(Item, Renamed), AgentError> {
        let content = lock(&plan.content).clone();
        let mut crc = 0;
        for (b, c) in plan.blocks.iter().zip(&content) {
            crc = crc_combine(crc, *c, b.len as u64);
        }
        let entry = Entry {
            store_path: plan.item.path.clone(),
            size: plan.item.fp.size,
            crc32c: crc,
            chunk_size: self.cs,
            chunk_crc32c: content,
            mode: plan.mode,
            mtime_ns: plan.item.fp.mtime_ns,
            drained_ns: 0,
        };
        let r = self.pfs.publish(w, entry, || {
            if self.unchanged(plan) {
                Ok(())
            } else {
                Err(AgentError::Changed(plan.item.path.clone()))
            }
        })?;
        Ok((plan.item.clone(), r))
    }

    /// Add renamed files of one directory to its manifest with one atomic save, then
    /// evict them if the policy says so. Returns each file's outcome.
    fn record(&self, batch: Vec<(Item, Renamed)>) -> Vec<(Item, Result<Published, AgentError>)> {
        let Some(dir) = batch.first().map(|b| b.1.dir.clone()) else {
            return Vec::new();
        };
        let (items, renamed): (Vec<Item>, Vec<Renamed>) = batch.into_iter().unzip();
        let mut first_err = self.pfs.record(&renamed).err();
        let errno = first_err.as_ref().map(|e| e.errno());
        let evict = self.policy.release_source(LevelKind::Local, LevelKind::Pfs);
        items
            .into_iter()
            .zip(renamed)
            .map(|(item, b)| {
                if let Some(errno) = errno {
                    let e = first_err.take().unwrap_or_else(|| {
                        AgentError::dest("save manifest in", &dir, io::Error::from_raw_os_error(errno))
                    });
                    return (item, Err(e));
                }
                let mut evicted = false;
                if evict {
                    let v = Version {
                        ino: item.fp.ino,
                        generation: item.fp.generation,
                        size: item.fp.size,
                        mtime_ns: item.fp.mtime_ns,
                        crc32c: Some(b.entry.crc32c),
                        serial: 0,
                    };
                    // Only if it is still the version that was drained.
                    match self.local.delete(&item.path, &v) {
                        Ok(d) => evicted = d,
                        Err(e) => return (item, Err(e.into())),
                    }
                }
                let p = Published {
                    dest: b.dest,
                    seconds: b.t0.elapsed().as_secs_f64(),
                    evicted,
                };
                (item, Ok(p))
            })
            .collect()
    }

    pub(super) fn finish_batch(&self, batch: Vec<(Item, Renamed)>) {
        for (item, r) in self.record(batch) {
            self.finish(&item, r);
        }
    }
}

/// Group blocks of lengths `lens` into gathered writes (ranges of block indices) of at
/// most `write_size` bytes; with O_DIRECT a block of unaligned length goes alone (it is
/// written through the page cache).
///
/// The writes ramp up and down: the first ones double from one chunk, so the first IO
/// thread starts once one chunk is verified (not a whole `write_size`), and near the end
/// each takes at most 1/`threads` of what is left, so the IO threads finish together
/// instead of leaving the last write alone on the device.
fn split_units(
    lens: &[usize],
    cs: usize,
    write_size: usize,
    threads: usize,
    direct: bool,
) -> Vec<(usize, usize)> {
    let threads = threads.max(1);
    let total: usize = lens.iter().sum();
    let limit = |done: usize| {
        write_size
            .min(done.max(cs))
            .min(((total - done) / threads).max(cs))
    };
    let mut out = Vec::new();
    let (mut start, mut bytes, mut done) = (0, 0, 0);
    let mut lim = limit(0);
    for (i, &len) in lens.iter().enumerate() {
        let odd = direct && !len.is_multiple_of(DIRECT_ALIGN);
        if i > start && (bytes + len > lim || odd) {
            out.push((start, i));
            start = i;
            done += bytes;
            bytes = 0;
            lim = limit(done);
        }
        bytes += len;
    }
    if start < lens.len() {
        out.push((start, lens.len()));
    }
    out
}

/// CRC32C of a block's file content: the checked bytes (`crc` covers `data`) followed
/// by zeros up to `len`, or only the first `len` bytes if more were written.
fn content_crc(crc: u32, data: &[u8], len: usize) -> u32 {
    if data.len() <= len {
        crc32c_append_zeros(crc, len - data.len())
    } else {
        crc32c(&data[..len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes in chunks of each unit.
    fn sizes(lens: &[usize], cs: usize, ws: usize, threads: usize, direct: bool) -> Vec<usize> {
        let units = split_units(lens, cs, ws, threads, direct);
        // The units cover every block once, in order.
        assert_eq!(units.first().map(|u| u.0), Some(0));
        assert!(units.windows(2).all(|w| w[0].1 == w[1].0));
        assert_eq!(units.last().map(|u| u.1), Some(lens.len()));
        units
            .iter()
            .map(|u| lens[u.0..u.1].iter().sum::<usize>() / cs)
            .collect()
    }

    #[test]
    fn writes_ramp_up_from_one_chunk_and_down_so_the_io_threads_end_together() {
        let mb = 1 << 20;
        let lens = vec![mb; 64];
        assert_eq!(
            sizes(&lens, mb, 16 * mb, 2, true),
            [1, 1, 2, 4, 8, 16, 16, 8, 4, 2, 1, 1]
        );
        // One IO thread: nothing to balance at the end.
        assert_eq!(sizes(&lens, mb, 16 * mb, 1, true), [1, 1, 2, 4, 8, 16, 16, 16]);
        // Chunks as large as a write: one chunk per write.
        assert_eq!(sizes(&lens[..4], mb, mb, 2, false), [1, 1, 1, 1]);
        // O_DIRECT: the unaligned last block goes alone.
        let mut odd = vec![mb; 40];
        odd.push(100);
        let u = split_units(&odd, mb, 8 * mb, 2, true);
        assert_eq!(u.last(), Some(&(40, 41)));
        assert!(u.iter().all(|r| odd[r.0..r.1].iter().sum::<usize>() <= 8 * mb));
    }
}
