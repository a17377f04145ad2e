//! # ckptfs-erasure: erasure sets across nodes (XOR and Reed-Solomon)
//!
//! A set of `n` nodes protects a dataset together, as SCR's redundancy sets do: each
//! member's *part* (its files of the dataset, concatenated in a recorded order) stays
//! where it is as a data shard; parity is computed across the set and spread over the
//! members, so up to `p` lost members (1 for XOR, `k` for Reed-Solomon) are rebuilt
//! from the survivors, byte for byte, every byte checked against CRCs recorded at
//! encode time.
//!
//! - [`codec`]: the arithmetic (XOR in portable word loops, Reed-Solomon with
//!   `reed-solomon-simd`).
//! - [`layout`]: segments, stripes, parity holders, and the [`Header`] every member
//!   keeps (dataset, set, member order, part sizes and CRCs, every parity shard's CRCs).
//! - [`ErasureSet`]: the set-level protection ([`ckptfs_level::SetProtection`]) over
//!   the members' levels (their node stores): encode, state, recover, rebuild, scrub.
//! - [`MemberFiles`]: one member's files of a dataset as a read-only level, so the
//!   registry and the mover restore them like any level's copies.
//! - [`sets`]: set formation from the cluster's failure-domain map.
//! - [`proto`], [`ring`], [`member`]: what the node daemons of a set say to each other,
//!   the XOR ring's schedule, and one member's share kept in its own node store (crate
//!   `ckptfs-node` runs them over the peer transport).
//! - [`mod@bench`]: encode throughput against memcpy.
//!
//! docs/erasure.md describes the layout, the schedule and the failure cases.
#![deny(missing_docs)]

pub mod bench;
pub mod codec;
mod encode;
pub mod layout;
pub mod member;
pub mod proto;
mod read;
mod recover;
pub mod ring;
mod set;
pub mod sets;

pub use codec::Scheme;
pub use layout::{Header, Layout};
pub use read::MemberFiles;
pub use recover::{parity_again, parity_matches, rebuild_part, segment_of_part, Shards};
pub use set::{component, dataset_dir, ErasureSet, Rebuilt, NAMESPACE, PARITY_CHUNK};
pub use sets::{cluster_sets, form_sets, RedSet, SetPlan, DEFAULT_SET_SIZE};

use ckptfs_level::LevelError;

/// What can go wrong in an erasure set.
#[derive(Debug, thiserror::Error)]
pub enum ErasureError {
    /// The arithmetic refused its input.
    #[error("erasure codec: {0}")]
    Codec(String),
    /// The set or its layout is not possible.
    #[error("erasure layout: {0}")]
    Layout(String),
    /// A header read back is refused.
    #[error("erasure header: {0}")]
    Header(String),
    /// A member's level failed.
    #[error("member {member}: {source}")]
    Member {
        /// The member.
        member: String,
        /// Its level's error.
        #[source]
        source: LevelError,
    },
    /// More members lost (or unreadable) than the scheme tolerates: these parts are gone.
    #[error("set {set}: {} member(s) lost ({}), the scheme tolerates {tolerates}{}", lost.len(), lost.join(", "), if unreadable.is_empty() { String::new() } else { format!("; unreadable: {}", unreadable.join("; ")) })]
    TooManyLost {
        /// The set.
        set: String,
        /// The lost members, by name.
        lost: Vec<String>,
        /// Survivors whose shards could not be read (and why).
        unreadable: Vec<String>,
        /// How many the scheme tolerates.
        tolerates: usize,
    },
    /// A rebuilt part does not match its recorded CRC.
    #[error("erasure verify: {0}")]
    Verify(String),
    /// The dataset is not (or not yet) protected by this set.
    #[error("not protected: {0}")]
    NotProtected(String),
    /// A level error outside any member.
    #[error(transparent)]
    Level(#[from] LevelError),
}

impl ErasureError {
    /// The POSIX errno of this error.
    pub fn errno(&self) -> i32 {
        match self {
            ErasureError::Member { source, .. } | ErasureError::Level(source) => source.errno(),
            ErasureError::TooManyLost { .. } | ErasureError::Verify(_) => libc::EIO,
            ErasureError::NotProtected(_) => libc::ENOENT,
            _ => libc::EINVAL,
        }
    }
}

impl From<ErasureError> for LevelError {
    fn from(e: ErasureError) -> Self {
        match e {
            ErasureError::Level(l) => l,
            e => LevelError::backend(e.errno(), e),
        }
    }
}
