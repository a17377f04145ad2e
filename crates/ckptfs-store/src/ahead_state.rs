//! The state of one attached store's populate helper (see [`crate::ahead`]), apart
//! from the helper's code so that the segment can hold it without naming that code.

use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::OnceLock;

/// Free chunks populated ahead per request.
pub(crate) const AHEAD: u32 = 8;

/// The helper thread of one attached store in this process, started on first use.
#[derive(Default)]
pub(crate) struct Ahead {
    pub(crate) thread: OnceLock<Option<(u32, std::thread::Thread)>>,
    /// Chunks a reader will read next (`u32::MAX`: empty slot).
    pub(crate) wanted: [AtomicU32; AHEAD as usize],
    /// A writer asked for the top of the free stack.
    pub(crate) free_stack: AtomicBool,
}
