//! The registry of set levels: the set-level protections ([`SetProtection`]) a node's
//! cluster file gives, in the order a restore reads them. Partner copies come first
//! ([`crate::partner_set::PartnerCopies`], the cluster's `[redundancy] copies`), then
//! each erasure set of the plan ([`crate::erasure_set::ClusterErasureSet`],
//! `[redundancy] erasure`). Adding a set level is one implementation of
//! [`SetProtection`] and one entry here: the dataset restart, `restore --from-peers`,
//! the C API and Python reach it through this list and its level ids, never by kind.

use crate::ask::Asker;
use crate::erasure_set::ClusterErasureSet;
use crate::error::Result;
use crate::partner_set::PartnerCopies;
use ckptfs_cluster::Cluster;
use ckptfs_datasets::protection::PartnerCopies as CopiesMode;
use ckptfs_level::SetProtection;
use ckptfs_store::Store;
use std::sync::Arc;
use std::time::Duration;

/// Node `me`'s set levels in read order (see the module documentation); `store` is
/// its store (copies held here, rebuilds written here), `connect_timeout` the bound on
/// a connection to another daemon.
pub fn set_levels(
    cluster: &Cluster,
    me: &str,
    store: &Store,
    connect_timeout: Duration,
) -> Result<Vec<Arc<dyn SetProtection>>> {
    let asker = Arc::new(Asker::new(cluster.clone(), me, connect_timeout)?);
    Ok(of_asker(&asker, store))
}

pub(crate) fn of_asker(asker: &Arc<Asker>, store: &Store) -> Vec<Arc<dyn SetProtection>> {
    let mut out: Vec<Arc<dyn SetProtection>> =
        vec![Arc::new(PartnerCopies::new(asker.clone(), store.clone()))];
    for s in ClusterErasureSet::of_cluster(&asker.cluster, &asker.me, store) {
        out.push(Arc::new(s));
    }
    out
}

/// The protection beyond its node a complete dataset gets under `cluster` (what `ls
/// -l`, `status --json`, `ckpt list` and Python's listing show): `mode` (the
/// `dataset_partner_copies` setting), unless the cluster file protects complete
/// datasets with its erasure sets instead of partner copies (issue 32).
pub fn protection_mode(cluster: Option<&Cluster>, mode: CopiesMode) -> CopiesMode {
    match cluster {
        Some(c) if c.redundancy.erasure.is_some() => CopiesMode::Erasure,
        _ => mode,
    }
}
