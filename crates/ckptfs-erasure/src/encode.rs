//! Encoding a set in one process: every member's part read through its level, each
//! stripe's parity computed and stored at its holder, then the header on every member.

use crate::codec::Encoder;
use crate::layout::{FileRecord, Header, Layout, ParityRecord, PartRecord, FORMAT};
use crate::set::{
    header_path, marker_path, now_ns, parity_path, put_checked, read_range, ErasureSet, PARITY_CHUNK,
};
use crate::ErasureError;
use ckptfs_level::crc::crc_combine;
use ckptfs_level::{Level, LevelError, Part};

impl ErasureSet {
    /// Encode `dataset` from every member's part at once (a member missing from
    /// `parts` has an empty part). Returns the header written to every member.
    pub fn encode(&self, dataset: &str, parts: &[Part]) -> Result<Header, ErasureError> {
        let levels = self.levels();
        let mut records = Vec::with_capacity(self.members.len());
        for m in &self.members {
            let files: Vec<FileRecord> = match parts.iter().find(|p| &p.member == m) {
                Some(p) => p
                    .files
                    .iter()
                    .map(|s| {
                        if !crate::layout::app_path(&s.path) {
                            return Err(ErasureError::Layout(format!(
                                "{:?} is not an application store path",
                                s.path
                            )));
                        }
                        FileRecord::of(s).ok_or_else(|| {
                            ErasureError::Layout(format!(
                                "{}: its CRCs are not known; it cannot be encoded",
                                s.path
                            ))
                        })
                    })
                    .collect::<Result<_, _>>()?,
                None => Vec::new(),
            };
            let size = files.iter().map(|f| f.size).sum();
            let crc32c = files.iter().fold(0u32, |a, f| crc_combine(a, f.crc32c, f.size));
            records.push(PartRecord {
                member: m.clone(),
                size,
                crc32c,
                files,
            });
        }
        if let Some(p) = parts.iter().find(|p| !self.members.contains(&p.member)) {
            return Err(ErasureError::Layout(format!(
                "{:?} is not a member of set {}",
                p.member, self.name
            )));
        }
        let largest = records.iter().map(|r| r.size).max().unwrap_or(0);
        let lay = Layout::new(self.scheme, self.members.len(), largest)?;
        let epoch = now_ns().max(1);
        // What this encoding supersedes: the headers' epochs and any epoch an earlier,
        // interrupted encoding had started (its marker).
        let mut stale: Vec<u64> = self
            .read_headers(dataset)
            .into_iter()
            .flatten()
            .map(|h| h.epoch)
            .collect();
        for l in &levels {
            if let Some(e) = Self::read_marker(&**l, dataset, &self.name) {
                stale.push(e);
            }
        }
        stale.sort_unstable();
        stale.dedup();
        stale.retain(|&e| e != epoch);
        let seg = lay.segment as usize;
        let p = self.scheme.parity();
        let mut enc = Encoder::new(self.scheme, lay.data(), seg)?;
        let mut bufs = vec![vec![0u8; seg]; lay.data()];
        let mut par = vec![Vec::new(); p];
        let mut parity = Vec::with_capacity(lay.n * p);
        let on = |i: usize, e: LevelError| ErasureError::Member {
            member: self.members[i].clone(),
            source: e,
        };
        for (i, l) in levels.iter().enumerate() {
            put_checked(
                &self.mover,
                &**l,
                &marker_path(dataset, &self.name),
                &epoch.to_le_bytes(),
                PARITY_CHUNK,
                epoch,
            )
            .map_err(|e| on(i, e))?;
        }
        for s in 0..lay.n {
            for (d, &i) in lay.data_members(s).iter().enumerate() {
                let t = lay.segment_of(i, s).expect("data member");
                read_range(
                    &*levels[i],
                    &records[i].files,
                    t as u64 * lay.segment,
                    &mut bufs[d],
                )
                .map_err(|e| on(i, e))?;
            }
            let refs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
            enc.encode(&refs, &mut par)?;
            for (j, &h) in lay.holders(s).iter().enumerate() {
                let path = parity_path(dataset, &self.name, epoch, s, j);
                let st = put_checked(&self.mover, &*levels[h], &path, &par[j], PARITY_CHUNK, epoch)
                    .map_err(|e| on(h, e))?;
                parity.push(ParityRecord {
                    stripe: s,
                    row: j,
                    holder: self.members[h].clone(),
                    crc32c: st.version.crc32c.unwrap_or(0),
                    chunk_crc32c: st.chunk_crc32c.clone(),
                });
            }
        }
        let header = Header {
            format: FORMAT,
            dataset: dataset.to_string(),
            set: self.name.clone(),
            epoch,
            scheme: self.scheme,
            members: self.members.clone(),
            parts: records,
            segment: lay.segment,
            chunk_size: PARITY_CHUNK,
            parity,
        };
        header.check()?;
        let bytes = serde_json::to_vec(&header).map_err(|e| ErasureError::Header(e.to_string()))?;
        for (i, l) in levels.iter().enumerate() {
            put_checked(
                &self.mover,
                &**l,
                &header_path(dataset, &self.name),
                &bytes,
                PARITY_CHUNK,
                epoch,
            )
            .map_err(|e| on(i, e))?;
        }
        // Older encodings of this dataset are now superseded (best effort).
        for (i, l) in levels.iter().enumerate() {
            for &e in &stale {
                self.drop_parity(&**l, i, dataset, e);
            }
        }
        Ok(header)
    }

    /// Remove the parity shards member `i` holds for `epoch` (best effort).
    pub(crate) fn drop_parity(&self, level: &dyn Level, i: usize, dataset: &str, epoch: u64) {
        let lay = Layout {
            n: self.members.len(),
            scheme: self.scheme,
            segment: 0,
        };
        for (s, j) in lay.held_by(i) {
            let path = parity_path(dataset, &self.name, epoch, s, j);
            if let Ok(Some(st)) = level.stat(&path) {
                let _ = level.delete(&path, &st.version);
            }
        }
    }
}
