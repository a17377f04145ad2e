//! Job-wide agreement that a dataset is complete: the one step that differs between a
//! single node and a cluster.
//!
//! Each participant records its own part in its node's record ([`crate::Datasets::complete`]).
//! Whether *all* parts are in is asked of a [`Completion`]: [`SingleNode`] looks at
//! this node's record alone (every rank of the job writes to this node's store); the node
//! daemon's implementation (when its peer transport is merged) asks every node of the
//! cluster for its parts and answers complete only when all of them are.

use crate::record::{Dataset, State};

/// The agreement on a dataset's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agreement {
    /// Every expected part is complete and valid.
    AllComplete,
    /// A part was completed invalid (the reason names it).
    Invalid(String),
    /// Parts are still missing.
    Waiting {
        /// Parts complete so far.
        have: u32,
        /// Parts expected.
        expected: u32,
    },
}

/// Decides whether every part of a dataset is in.
pub trait Completion {
    /// The agreement on `ds`'s parts, as far as this implementation can see.
    fn agree(&self, ds: &Dataset) -> Agreement;
}

/// Every participant writes to this node's store: the record holds all parts.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleNode;

impl Completion for SingleNode {
    fn agree(&self, ds: &Dataset) -> Agreement {
        if let Some((rank, _)) = ds.parts.iter().find(|(_, p)| p.state == State::Invalid) {
            return Agreement::Invalid(format!("rank {rank} completed it as invalid"));
        }
        let have = ds.parts.values().filter(|p| p.state == State::Complete).count() as u32;
        if have >= ds.parts_expected {
            Agreement::AllComplete
        } else {
            Agreement::Waiting {
                have,
                expected: ds.parts_expected,
            }
        }
    }
}
