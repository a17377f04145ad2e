//! The node daemon's files in the caller's runtime directory (`ckptfs_runtime`): its
//! status file and its single-instance lock, named after the store. The daemon writes
//! them (`ckptfs_node::node_status`); a library that destroys a store removes them
//! ([`remove_store_files`]) without linking the daemon.

use ckptfs_runtime::RuntimeDir;

/// Name of the status file of store `store`'s daemon.
pub fn status_name(store: &str) -> String {
    format!("{store}.node.json")
}

/// Name of the single-instance lock of store `store`'s daemon.
pub fn lock_name(store: &str) -> String {
    format!("{store}.node.lock")
}

/// Remove the node daemon's status and lock files of store `name` (after destroying the
/// store).
pub fn remove_status(store_name: &str) {
    if let Ok(dir) = RuntimeDir::for_caller() {
        let _ = dir.remove(&status_name(store_name));
        let _ = dir.remove(&lock_name(store_name));
    }
}

/// Remove every file the node's daemons keep in the caller's runtime directory for store
/// `name` (after destroying the store): the node daemon's and the drain agent's status
/// and lock files, and the datasets lock (unless a process holds it now).
pub fn remove_store_files(store_name: &str) {
    remove_status(store_name);
    ckptfs_agent::status::remove_status(store_name);
    ckptfs_datasets::remove_lock(store_name);
}
