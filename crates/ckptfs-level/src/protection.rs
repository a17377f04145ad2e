//! Set-level protection: a level that protects a *set* of nodes' parts of a dataset
//! together (partner copies, erasure sets with XOR or Reed-Solomon, as SCR's redset
//! does), not file by file.
//!
//! A member's *part* of a dataset is its files of that dataset in a recorded order. The
//! scheme keeps redundancy for the set so that the parts of up to
//! [`SetProtection::tolerates`] lost members can be rebuilt from the survivors;
//! [`SetProtection::recover`] writes a lost member's files into a level (the
//! replacement's store) through the mover, each checked against the CRCs recorded when
//! the part was protected.

use crate::{Level, LevelError, LevelId, Stored};

/// One member's part of a dataset: the files, in the order the scheme records.
#[derive(Debug, Clone)]
pub struct Part {
    /// Dataset id.
    pub dataset: String,
    /// The member (node id) whose part this is.
    pub member: String,
    /// Its files, in order.
    pub files: Vec<Stored>,
}

/// Where a dataset's protection stands on one set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetState {
    /// Every member's redundancy is stored and verified.
    Protected,
    /// Protection is being built; nothing can be rebuilt from it yet.
    InProgress,
    /// Some members are lost; their parts can be rebuilt (they are named).
    Degraded(Vec<String>),
    /// More members lost than the scheme tolerates: these parts are gone (named).
    Lost(Vec<String>),
    /// The set holds nothing of this dataset.
    Absent,
}

/// What a recovery wrote.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// Files written, with their copies as stored on the destination.
    pub files: Vec<Stored>,
    /// Bytes written.
    pub bytes: u64,
}

/// A protection scheme over a set of nodes (see the module documentation).
pub trait SetProtection: Send + Sync {
    /// The scheme's level id (`partner:node3`, `erasure:set2`).
    fn id(&self) -> LevelId;
    /// The set's members (node ids), in set order.
    fn members(&self) -> Vec<String>;
    /// How many members of the set may be lost at once with every part still rebuilt.
    fn tolerates(&self) -> usize;
    /// Extra memory on the set per byte of a part (1.0 for a partner copy, 1/(N-1) for
    /// XOR over N members, k/(N-k) for Reed-Solomon with k parity members).
    fn memory_overhead(&self) -> f64;
    /// Protect this member's part (called on every member once the dataset is complete).
    fn protect(&self, part: &Part) -> Result<(), LevelError>;
    /// Where the dataset's protection stands.
    fn state(&self, dataset: &str) -> Result<SetState, LevelError>;
    /// Rebuild `member`'s part of `dataset` into `into`.
    fn recover(&self, dataset: &str, member: &str, into: &dyn Level) -> Result<Recovered, LevelError>;
}
