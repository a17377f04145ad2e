//! Which levels hold each file of this node: the record the node daemon keeps of the
//! partner copies its partners acknowledged, read by `ckptfs ls -l`, `ckptfs status` and
//! the C API (`ckptfs_file_levels`).
//!
//! The record's types, its reader and its writer live in
//! [`ckptfs_datasets::levels_record`] (a crate without tokio, so that the C API can read
//! the record without depending on the daemon); this module re-exports them. The daemon
//! is the record's only writer ([`Levels::save`]).

pub use ckptfs_datasets::levels_record::{
    Dropping, FileLevels, Identity, Levels, LevelsView, SaveError, Where, LEVELS_PATH,
};
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::{Store, StoreError};

/// Remove the record (a missing one is fine).
pub fn remove(store: &Store) -> Result<()> {
    match store.unlink(LEVELS_PATH) {
        Ok(()) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(NodeError::store("remove the levels record", e)),
    }
}
