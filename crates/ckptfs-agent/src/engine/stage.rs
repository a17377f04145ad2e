//! Staging (orchestration Algorithm 1's stage step): check that a queued file is
//! complete and stable and build its block plan from one chunk-list snapshot.

use super::{lock, Fp, Item, Shared};
use crate::error::AgentError;
use ckptfs_store::checksum::crc32c_append_zeros;
use ckptfs_store::{ChunkInfo, ChunkLocation, WriteState};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Where a block's bytes come from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Src {
    Mem { off: u64, written: usize, crc: u32 },
    Spill { off: u64, written: usize, crc: u32 },
    Hole,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Block {
    pub(super) logical: u32,
    pub(super) len: usize,
    pub(super) src: Src,
}

/// A staged file: its identity, chunk list snapshot and block plan.
pub(super) struct Plan {
    pub(super) item: Item,
    pub(super) mode: u32,
    pub(super) chunks: Vec<ChunkInfo>,
    pub(super) blocks: Vec<Block>,
    /// CRC32C of each block's file content (spill blocks are filled in at flush time).
    pub(super) content: Mutex<Vec<u32>>,
    pub(super) done: Arc<AtomicU64>,
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

    /// A CRC mismatch is corruption only if the file did not change meanwhile.
    pub(super) fn mismatch(&self, plan: &Plan, logical: u32, stored: u32, computed: u32) -> AgentError {
        if self.unchanged(plan) {
            tracing::error!(path = %plan.item.path, logical, stored, computed, "corrupt chunk in the store");
            AgentError::Corrupt {
                path: plan.item.path.clone(),
                logical,
                stored,
                computed,
            }
        } else {
            AgentError::Changed(plan.item.path.clone())
        }
    }

    pub(super) fn stage(&self, item: Item, done: Arc<AtomicU64>) -> Result<Plan, AgentError> {
        let path = item.path.clone();
        let changed = || AgentError::Changed(path.clone());
        let st = self.store.stat(&item.path)?;
        if Fp::of(&st) != item.fp || st.state != WriteState::Complete {
            return Err(changed());
        }
        let chunks = self.store.chunk_list(&item.path)?;
        let cs = self.cs;
        let size = item.fp.size;
        let by: HashMap<u32, &ChunkInfo> = chunks.iter().map(|c| (c.logical, c)).collect();
        let mut blocks = Vec::new();
        for l in 0..size.div_ceil(cs) {
            let len = (size - l * cs).min(cs) as usize;
            let src = match by.get(&(l as u32)) {
                None => Src::Hole,
                Some(c) => {
                    let Some(crc) = c.crc else { return Err(changed()) };
                    if c.written > cs {
                        return Err(changed());
                    }
                    let written = c.written as usize;
                    match c.location {
                        ChunkLocation::Memory(off) => Src::Mem { off, written, crc },
                        ChunkLocation::Spill(off) => Src::Spill { off, written, crc },
                    }
                }
            };
            blocks.push(Block {
                logical: l as u32,
                len,
                src,
            });
        }
        let plan = Plan {
            mode: st.mode & 0o777,
            content: Mutex::new(vec![0; blocks.len()]),
            item,
            chunks,
            blocks,
            done,
        };
        if !self.unchanged(&plan) {
            return Err(changed());
        }
        // Holes are known now; data chunks get their CRC when verified in write_unit.
        let content: Vec<u32> = plan
            .blocks
            .iter()
            .map(|b| match b.src {
                Src::Hole => crc32c_append_zeros(0, b.len),
                _ => 0,
            })
            .collect();
        *lock(&plan.content) = content;
        Ok(plan)
    }
}
