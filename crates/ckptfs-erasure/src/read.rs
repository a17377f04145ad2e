//! One member's files of a dataset as a read-only level (`erasure:SET/MEMBER`), so the
//! registry and the mover can restore them like any level's copies: `list`/`stat` from
//! the set's header, `get` from the member's part, rebuilt from the survivors when the
//! member is lost (kept in memory for the files that follow), every chunk checked
//! against the CRCs recorded at encode time. `put` and `delete` are refused (EROFS).

use crate::layout::PartRecord;
use crate::set::ErasureSet;
use crate::ErasureError;
use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, IoPart, Level, LevelError, LevelId, LevelKind, Stored, Version,
};
use std::sync::{Arc, Mutex};

/// A member's files of one dataset, read through its erasure set.
pub struct MemberFiles {
    set: Arc<ErasureSet>,
    dataset: String,
    member: String,
    part: Mutex<Option<(PartRecord, Arc<Vec<u8>>)>>,
    meter: CostMeter,
}

impl MemberFiles {
    /// `member`'s files of `dataset` in `set`.
    pub fn new(set: Arc<ErasureSet>, dataset: &str, member: &str) -> MemberFiles {
        MemberFiles {
            set,
            dataset: dataset.to_string(),
            member: member.to_string(),
            part: Mutex::new(None),
            meter: CostMeter::new(),
        }
    }

    fn part(&self) -> Result<(PartRecord, Arc<Vec<u8>>), LevelError> {
        let mut g = self.part.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((r, b)) = &*g {
            return Ok((r.clone(), b.clone()));
        }
        let (r, b) = self
            .set
            .part_of(&self.dataset, &self.member)
            .map_err(LevelError::from)?;
        let b = Arc::new(b);
        *g = Some((r.clone(), b.clone()));
        Ok((r, b))
    }

    fn record(&self) -> Result<PartRecord, LevelError> {
        if let Some((r, _)) = &*self.part.lock().unwrap_or_else(|p| p.into_inner()) {
            return Ok(r.clone());
        }
        // The files as recorded, without reading them.
        self.part().map(|(r, _)| r)
    }
}

fn read_only(what: &str) -> LevelError {
    LevelError::backend(
        libc::EROFS,
        ErasureError::Layout(format!("{what}: an erasure set is read through only")),
    )
}

struct PartReader {
    stored: Stored,
    bytes: Arc<Vec<u8>>,
    at: usize,
    level: String,
}

impl ChunkReader for PartReader {
    fn stored(&self) -> &Stored {
        &self.stored
    }

    fn read_chunk(
        &mut self,
        i: u64,
        sink: &mut dyn FnMut(&[IoPart<'_>]) -> Result<(), LevelError>,
    ) -> Result<(), LevelError> {
        let cs = self.stored.chunk_size.max(1);
        let size = self.stored.version.size;
        let (a, b) = ((i * cs).min(size) as usize, ((i + 1) * cs).min(size) as usize);
        let chunk = &self.bytes[self.at + a..self.at + b];
        self.stored.check_chunk(&self.level, i, chunk)?;
        sink(&[IoPart::Buf(chunk)])
    }

    fn finish(self: Box<Self>) -> Result<(), LevelError> {
        Ok(())
    }
}

impl Level for MemberFiles {
    fn kind(&self) -> LevelKind {
        LevelKind::Erasure
    }

    fn name(&self) -> String {
        format!("erasure:{}/{}", self.set.name(), self.member)
    }

    fn id(&self) -> LevelId {
        LevelId::new("erasure", format!("{}/{}", self.set.name(), self.member))
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError> {
        let p = prefix.trim_end_matches('/');
        Ok(self
            .record()?
            .files
            .iter()
            .filter(|f| p.is_empty() || f.path == p || f.path.starts_with(&format!("{p}/")))
            .map(|f| f.stored())
            .collect())
    }

    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError> {
        Ok(self
            .record()?
            .files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.stored()))
    }

    fn get<'a>(&'a self, path: &str) -> Result<Box<dyn ChunkReader + 'a>, LevelError> {
        let (rec, bytes) = self.part()?;
        let mut at = 0usize;
        for f in &rec.files {
            if f.path == path {
                return Ok(Box::new(PartReader {
                    stored: f.stored(),
                    bytes,
                    at,
                    level: self.name(),
                }));
            }
            at += f.size as usize;
        }
        Err(LevelError::NotFound {
            level: self.name(),
            path: path.to_string(),
        })
    }

    fn put<'a>(&'a self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'a>, LevelError> {
        Err(read_only(&src.path))
    }

    fn delete(&self, path: &str, _want: &Version) -> Result<bool, LevelError> {
        Err(read_only(path))
    }

    fn meter(&self) -> &CostMeter {
        &self.meter
    }
}
