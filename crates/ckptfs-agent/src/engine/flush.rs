//! Flushing a staged file to the PFS level: the drain's mover moves the bytes (the
//! store level's reader into the PFS level's writer: memory chunks checked in place ahead
//! of the writes, gathered writes of up to `--write-size` bytes by `--io-threads`
//! threads, the data region's ranges handed to the kernel, O_DIRECT where aligned), then
//! the commit (fsync, re-check, rename, manifest, evict).

use super::stage::Plan;
use super::{Item, Published, Shared};
use crate::error::AgentError;
use crate::manifest::Entry;
use crate::pfs::publish::Renamed;
use crate::pfs::{PfsPut, StopFn};
use ckptfs_level::{Level, LevelKind, Mover, Version};
use std::io;

/// A file's bytes written under its temporary name (not yet durable), and the manifest
/// entry it gets when published.
pub(super) type Filled<'a> = (PfsPut<'a>, Entry);

impl Shared {
    pub(super) fn flush(&self, plan: &Plan, mover: &Mover) -> Result<Published, AgentError> {
        let w = self.write_phase(plan, mover)?;
        self.commit_phase(plan, w)
    }

    /// Create the temporary file and move every chunk into it through `mover` (not yet
    /// durable).
    pub(super) fn write_phase(&self, plan: &Plan, mover: &Mover) -> Result<Filled<'_>, AgentError> {
        let path = &plan.item.path;
        if self.stopping() {
            return Err(AgentError::Stopped(path.clone()));
        }
        // Before copying anything: not over a newer version another node drained.
        self.pfs.check_not_older(path, plan.item.fp.mtime_ns, None)?;
        let reader = self.local.get(path)?;
        let now = reader.stored();
        if now.version != plan.stored.version || now.chunk_crc32c != plan.stored.chunk_crc32c {
            return Err(AgentError::Changed(path.clone()));
        }
        let stop: StopFn<'_> = Box::new(|| self.stopping());
        let mut w = self.pfs.writer(&plan.stored, Some(stop))?;
        mover.fill(reader, &mut w)?;
        // No second CRC pass over memory chunks after the writes: a legitimate writer
        // cannot change a file without changing what `unchanged` checks after the fsync,
        // and a stray corruption inside this window is caught at restore, where every
        // chunk is checked against the manifest (docs/agent.md, failure case 9).
        Ok(w.into_parts())
    }

    /// Make the temporary file durable, re-check, publish it and record it.
    fn commit_phase(&self, plan: &Plan, w: Filled<'_>) -> Result<Published, AgentError> {
        let r = self.publish_phase(plan, w)?;
        let (_, res) = self.record(vec![r]).pop().expect("one file recorded");
        res
    }

    /// Make the temporary file durable, re-check the store file, rename it into place
    /// (the PFS level's publish protocol, with the store file's race check).
    pub(super) fn publish_phase(&self, plan: &Plan, w: Filled<'_>) -> Result<(Item, Renamed), AgentError> {
        let (w, entry) = w;
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
