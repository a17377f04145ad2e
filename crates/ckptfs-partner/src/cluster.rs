//! Datasets across nodes: [`ClusterNodes`] asks other nodes' daemons dataset questions
//! (the node daemon answers them: `ckptfs_node::datasets`) (the [`JobNodes`] of `ckptfs-datasets`, used by `ckptfs
//! ckpt ...` and `ckptfs run --restart` with `--cluster/--node-id`).
//!
//! A question is one `Query` frame (JSON, [`Request`]) answered by one `QueryReply`
//! ([`Reply`]) on the authenticated peer connection:
//!
//! - `records {job}`: this node's dataset records of the job, each file's levels
//!   refreshed (local: the store holds that version complete; partner: a partner
//!   acknowledged a copy of it; pfs: this node's drain published it);
//! - `restarts {job}`: this node's restart rounds of the job (failure case D9: the
//!   later ranks of one job restart adopt the first rank's choice);
//! - `holds {owner, files}`: for each file (path, size, CRC32C), whether this node holds
//!   exactly that content: a file of its dataset records when `owner` is this node, else
//!   its partner copy of `owner`'s file; never any other file of the store. Each
//!   distinct file once, its CRC32C combined from the store's chunk records, at most
//!   [`crate::holds::MAX_HOLDS_FILES`] files a question ([`crate::holds`]).
//! - `floors`: the next dataset id this node would give, per job it knows; `floor {job,
//!   next_id}` raises this node's floor of the job (never lowers it). A `begin` tells
//!   every node its new floor, and each daemon asks its peers for theirs at start and
//!   every 2 s (failure case D10: ids never go back, also after every node lost its
//!   memory one after the other).
//!
//! - `unrecorded {job, root}`: the checkpoint directories under `root` whose
//!   `.metadata` no dataset record of the job on this node lists (saves made without the
//!   ckptfs Writer; [`crate::unrecorded`]).
//!
//! All only read, except `agreed` and `floor` (which only add). Any authenticated node
//! of the cluster (its own key with this node) may ask.

use crate::ask::{holders, Asker};
use crate::error::Result;
use ckptfs_cluster::Cluster;
use ckptfs_datasets::levels_record::LevelsView;
use ckptfs_datasets::{Dataset, JobNodes, NodeRecords, Want};
use ckptfs_level::SetProtection;
use ckptfs_store::Store;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use crate::ask::{Reply, Request};

/// Whether `store` (of node `me`) holds `owner`'s file `w` with exactly its content: a
/// file of this node's dataset records when `owner` is `me`, else `owner`'s partner
/// copy ([`crate::holds`]: never another file of the store).
pub fn holds(store: &Store, me: &str, owner: &str, w: &Want) -> bool {
    crate::holds::holds_copy(store, me, owner, w)
}

/// This node's records of `job`, with each file's levels as this node sees them.
pub fn records(store: &Store, job: &str, dests: &[PathBuf]) -> std::result::Result<Vec<Dataset>, String> {
    ckptfs_datasets::check_component("job", job).map_err(|e| e.to_string())?;
    let (all, _) = ckptfs_datasets::record::load_all(store, job).map_err(|e| e.to_string())?;
    let mut all =
        ckptfs_datasets::record::with_verdicts(all, ckptfs_datasets::record::load_verdicts(store, job));
    // A rank of this node that died with its part open: incomplete, as this node's
    // next locked look will record it (the asking node cannot see this node's processes).
    all = ckptfs_datasets::record::with_dead_ranks(all);
    fill_levels(store, &mut all, dests);
    Ok(all)
}

/// Set each file's levels as this node sees them now: local (this version complete in
/// the store), partner (a partner acknowledged a copy of this version), pfs (the drain
/// published it, or a destination's manifest lists the same size and CRC32C).
pub fn fill_levels(store: &Store, all: &mut [Dataset], dests: &[PathBuf]) {
    let view = LevelsView::load(store);
    for d in all.iter_mut() {
        for (path, f) in d.files.iter_mut() {
            let mut l = Vec::new();
            if let Ok(st) = store.stat(path) {
                if st.size == f.size && st.mtime_ns == f.mtime_ns {
                    let w = view.of(path, &st);
                    if w.local {
                        l.push("local".to_string());
                    }
                    if !w.partners.is_empty() {
                        l.push("partner".to_string());
                    }
                    if w.levels.iter().any(|x| x.starts_with("erasure:")) {
                        l.push("erasure".to_string());
                    }
                    if w.pfs {
                        l.push("pfs".to_string());
                    }
                }
            }
            if !l.iter().any(|x| x == "pfs") && ckptfs_datasets::pfs_holds(dests, path, f.size, f.crc32c) {
                l.push("pfs".to_string());
            }
            f.levels = l;
        }
    }
}

/// The other nodes of the job, asked through their daemons.
pub struct ClusterNodes {
    asker: Arc<Asker>,
    store: Store,
    set_levels: Vec<Arc<dyn SetProtection>>,
}

impl ClusterNodes {
    /// Node `me` of `cluster`, whose store is `store`. A node that does not accept a
    /// connection within `connect_timeout` counts as lost (failure case D7). Its set
    /// levels are the cluster file's ([`crate::set_levels::set_levels`]: partner copies,
    /// then the erasure sets).
    pub fn new(cluster: Cluster, me: &str, store: Store, connect_timeout: Duration) -> Result<ClusterNodes> {
        let asker = Arc::new(Asker::new(cluster, me, connect_timeout)?);
        let set_levels = crate::set_levels::of_asker(&asker, &store);
        Ok(ClusterNodes {
            asker,
            store,
            set_levels,
        })
    }

    /// Recover from these set levels instead of the cluster file's (in read order).
    pub fn with_set_levels(mut self, levels: Vec<Arc<dyn SetProtection>>) -> ClusterNodes {
        self.set_levels = levels;
        self
    }

    /// Ask every other node the same question at once.
    fn ask_all(&self, req: &Request) -> BTreeMap<String, std::result::Result<Reply, String>> {
        let others: Vec<String> = self
            .asker
            .cluster
            .nodes
            .iter()
            .filter(|n| n.id != self.asker.me)
            .map(|n| n.id.clone())
            .collect();
        self.ask(&others, req)
    }

    fn ask(&self, nodes: &[String], req: &Request) -> BTreeMap<String, std::result::Result<Reply, String>> {
        self.asker.ask_nodes(nodes, req)
    }
}

impl ClusterNodes {
    /// Every node's checkpoint directories under `root` that none of its records of
    /// `job` lists (this node's read here, the others' through their daemons): node ->
    /// its answer, or why it gave none.
    pub fn unrecorded(
        &self,
        job: &str,
        root: &str,
    ) -> BTreeMap<String, std::result::Result<Vec<crate::unrecorded::Unrecorded>, String>> {
        let req = Request::Unrecorded {
            job: job.to_string(),
            root: root.to_string(),
        };
        let mut out: BTreeMap<_, _> = self
            .ask_all(&req)
            .into_iter()
            .map(|(n, r)| {
                let v = match r {
                    Ok(Reply::Unrecorded(v)) => Ok(v),
                    Ok(_) => Err("answered something else".to_string()),
                    Err(e) => Err(e),
                };
                (n, v)
            })
            .collect();
        out.insert(
            self.asker.me.clone(),
            crate::unrecorded::scan(&self.store, job, root),
        );
        out
    }
}

impl JobNodes for ClusterNodes {
    fn me(&self) -> &str {
        &self.asker.me
    }

    fn nodes(&self) -> Vec<String> {
        self.asker.cluster.nodes.iter().map(|n| n.id.clone()).collect()
    }

    fn records(&self, job: &str) -> BTreeMap<String, NodeRecords> {
        self.ask_all(&Request::Records { job: job.to_string() })
            .into_iter()
            .map(|(n, r)| {
                let v = match r {
                    Ok(Reply::Records(v)) => Ok(v),
                    Ok(_) => Err("answered something else".to_string()),
                    Err(e) => Err(e),
                };
                (n, v)
            })
            .collect()
    }

    fn holders(&self, owner: &str, files: &[Want], ask: &[String]) -> BTreeMap<String, Vec<bool>> {
        holders(&self.asker, owner, files, ask)
    }

    fn set_levels(&self) -> Vec<Arc<dyn SetProtection>> {
        self.set_levels.clone()
    }

    fn restarts(&self, job: &str) -> BTreeMap<String, Vec<ckptfs_datasets::restart_round::Round>> {
        self.ask_all(&Request::Restarts { job: job.to_string() })
            .into_iter()
            .filter_map(|(n, r)| match r {
                Ok(Reply::Restarts(v)) => Some((n, v)),
                _ => None,
            })
            .collect()
    }

    fn fill_levels(&self, local: &mut [Dataset], dests: &[PathBuf]) {
        fill_levels(&self.store, local, dests)
    }

    fn announce(&self, job: &str, ds: &Dataset) {
        let req = Request::Agreed {
            dataset: Box::new(ds.clone()),
        };
        for (n, r) in self.ask_all(&req) {
            match r {
                Ok(Reply::Kept) => {}
                Ok(Reply::Error(e)) => {
                    tracing::warn!("{n} did not keep the verdict on dataset {} of {job}: {e}", ds.id)
                }
                Ok(_) => tracing::warn!("{n} did not keep the verdict on dataset {} of {job}", ds.id),
                Err(e) => tracing::debug!(
                    "{n} could not be told dataset {} of {job} is complete: {e}",
                    ds.id
                ),
            }
        }
    }

    fn floors(&self, job: &str) -> BTreeMap<String, u64> {
        self.ask_all(&Request::Floors)
            .into_iter()
            .filter_map(|(n, r)| match r {
                Ok(Reply::Floors(m)) => m
                    .get(job)
                    .map(|&f| (n, f.min(ckptfs_datasets::id_floor::MAX_FLOOR))),
                _ => None,
            })
            .collect()
    }

    fn raise_floor(&self, job: &str, next_id: u64) {
        let req = Request::Floor {
            job: job.to_string(),
            next_id,
        };
        for (n, r) in self.ask_all(&req) {
            if let Err(e) = r {
                tracing::debug!("{n} could not be told the id floor {next_id} of {job}: {e}");
            }
        }
    }
}

impl ckptfs_datasets::Completion for ClusterNodes {
    fn agree(&self, ds: &Dataset) -> ckptfs_datasets::Agreement {
        // Not used while job_nodes() is Some (the job-wide rules decide); kept true.
        ckptfs_datasets::SingleNode.agree(ds)
    }

    fn job_nodes(&self) -> Option<&dyn JobNodes> {
        Some(self)
    }
}
