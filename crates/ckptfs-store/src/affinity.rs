//! The allocator's affinity state of one process (see [`crate::alloc`]): which free
//! memory chunks on the shared stack this process has page tables for. Apart from the
//! allocator, so that the segment can hold it without naming the allocator's code.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// This process's view of its own free chunks on the shared memory stack.
#[derive(Default)]
pub(crate) struct Affinity {
    /// Per memory chunk: this process pushed it on the free stack with page tables
    /// mapped, and has not popped it since.
    pub(crate) mine: Vec<AtomicU64>,
    /// How many bits of `mine` are set (an estimate: other processes may pop those
    /// chunks; a search that finds none resets it to 0).
    pub(crate) freed: AtomicU32,
    /// Stack position of the last one pushed or found (a freed file's other chunks lie
    /// below it).
    pub(crate) hint: AtomicU32,
}

impl Affinity {
    pub(crate) fn new(mem_chunks: u32) -> Affinity {
        Affinity {
            mine: (0..(mem_chunks as usize).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            ..Default::default()
        }
    }

    fn bit(&self, c: u32) -> Option<(&AtomicU64, u64)> {
        self.mine.get(c as usize / 64).map(|w| (w, 1u64 << (c % 64)))
    }

    pub(crate) fn is_mine(&self, c: u32) -> bool {
        self.bit(c).is_some_and(|(w, b)| w.load(Relaxed) & b != 0)
    }

    /// Mark or unmark `c`, keeping the count.
    pub(crate) fn set(&self, c: u32, on: bool) {
        if let Some((w, b)) = self.bit(c) {
            let was = if on {
                w.fetch_or(b, Relaxed)
            } else {
                w.fetch_and(!b, Relaxed)
            } & b
                != 0;
            if on && !was {
                self.freed.fetch_add(1, Relaxed);
            } else if !on && was {
                let _ = self.freed.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
            }
        }
    }
}
