//! Staging (orchestration Algorithm 1's stage step): check that a queued file is
//! complete and stable, and take the copy the mover reads from one chunk-list snapshot.

use super::{Fp, Item, Shared};
use crate::error::AgentError;
use ckptfs_level::Stored;
use ckptfs_store::level::{crcs_from_chunks, StoreLevel};
use ckptfs_store::{ChunkInfo, WriteState};

/// A staged file: its identity, chunk list snapshot and the copy the mover will read.
pub(super) struct Plan {
    pub(super) item: Item,
    pub(super) chunks: Vec<ChunkInfo>,
    /// The store copy as staged (version, mode, per-chunk CRCs from the chunk list).
    pub(super) stored: Stored,
}

impl Shared {
    pub(super) fn unchanged(&self, plan: &Plan) -> bool {
        let Ok(st) = self.store.stat(&plan.item.path) else {
            return false;
        };
        if Fp::of(&st) != plan.item.fp || st.state != WriteState::Complete {
            return false;
        }
        let Ok(now) = self.store.chunk_list(&plan.item.path) else {
            return false;
        };
        now.len() == plan.chunks.len()
            && now.iter().zip(&plan.chunks).all(|(a, b)| {
                a.logical == b.logical && a.chunk_id == b.chunk_id && a.written == b.written && a.crc == b.crc
            })
    }

    pub(super) fn stage(&self, item: Item) -> Result<Plan, AgentError> {
        let path = item.path.clone();
        let changed = || AgentError::Changed(path.clone());
        let st = self.store.stat(&item.path)?;
        if Fp::of(&st) != item.fp || st.state != WriteState::Complete {
            return Err(changed());
        }
        let chunks = self.store.chunk_list(&item.path)?;
        let cs = self.cs;
        // Per-chunk CRCs of the content from this snapshot (a stale one: still changing).
        let (_, crcs) = crcs_from_chunks(st.size, cs, &chunks).ok_or_else(changed)?;
        let version = StoreLevel::version_of(&st, &chunks, cs);
        let stored = Stored {
            path: item.path.clone(),
            version,
            mode: st.mode & 0o777,
            chunk_size: cs,
            chunk_crc32c: crcs,
        };
        let plan = Plan { item, chunks, stored };
        if !self.unchanged(&plan) {
            return Err(changed());
        }
        Ok(plan)
    }
}
