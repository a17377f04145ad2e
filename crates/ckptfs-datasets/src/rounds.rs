//! Restart rounds as each node records them (failure case D9; what they mean and how
//! ranks use them: [`crate::restart_round`]): `/.ckptfs/datasets/JOB/restarts.json`,
//! read by every rank and, through the node daemons, by every other node.

use crate::record::{self, job_dir};
use serde::{Deserialize, Serialize};

/// One restart round as one node recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    /// Round number (one past the largest any node reported when it was opened).
    pub round: u64,
    /// The dataset chosen (0: none was recoverable).
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Ranks of this node that restarted from it in this round.
    pub ranks: Vec<String>,
    /// Ranks expected (the job's `world`).
    pub world: u32,
    /// The largest dataset id any node knew when the round was opened.
    pub max_id: u64,
    /// When this node's entry was last changed (this node's clock; informative).
    pub at_ns: u64,
}

pub(crate) fn rounds_path(job: &str) -> String {
    format!("{}/restarts.json", job_dir(job))
}

/// This node's restart rounds of `job` (none when the file is missing or unreadable).
pub fn load_rounds(store: &ckptfs_store::Store, job: &str) -> Vec<Round> {
    record::read_file(store, &rounds_path(job))
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<Round>>(&b).ok())
        .unwrap_or_default()
}
