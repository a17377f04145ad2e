//! Job-wide agreement that a dataset is complete: the one step that differs between a
//! single node and a cluster.
//!
//! Each participant records its own part in its node's record ([`crate::Datasets::complete`]).
//! Whether *all* parts are in is asked of a [`Completion`]: [`SingleNode`] looks at
//! this node's record alone (every rank of the job writes to this node's store); across
//! nodes, [`Completion::job_nodes`] gives the other nodes ([`JobNodes`], implemented by
//! `ckptfs_partner::ClusterNodes` over the daemons' transport) and the job-wide
//! rules of `jobwide` decide.

use crate::record::{Dataset, State};
use crate::rounds::Round;

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
    /// The job's other nodes, when the parts are spread over a cluster: then the
    /// job-wide rules (docs/datasets.md, "Across nodes") are used instead of [`Self::agree`].
    fn job_nodes(&self) -> Option<&dyn JobNodes> {
        None
    }
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

/// A file of some node's part, as the record has it (what a holder must match).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Want {
    /// Store path on the owning node.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC32C of the whole file.
    pub crc32c: u32,
}

impl From<&ckptfs_level::PartFile> for Want {
    fn from(f: &ckptfs_level::PartFile) -> Want {
        Want {
            path: f.path.clone(),
            size: f.size,
            crc32c: f.crc32c,
        }
    }
}

/// Another node's answer to "your records of this job".
pub type NodeRecords = std::result::Result<Vec<Dataset>, String>;

/// The other nodes of a job, reached through their node daemons (the implementation is
/// `ckptfs_partner::ClusterNodes`; tests use an in-memory one). Every method asks
/// only; the job-wide rules over the answers are in this crate (`jobwide`), so that
/// every rank, on any node, computes the same result from the same answers.
pub trait JobNodes: Send + Sync {
    /// This node's id.
    fn me(&self) -> &str;
    /// Every node of the cluster, this one included, in the cluster file's order.
    fn nodes(&self) -> Vec<String>;
    /// Every other node's dataset records of `job` (an error text when a node could not
    /// be asked: unreachable, refused).
    fn records(&self, job: &str) -> std::collections::BTreeMap<String, NodeRecords>;
    /// For each node of `ask` (this node excluded), which of `files` of node `owner` it
    /// holds with exactly this content (size and CRC32C). Asked of the owner only, for
    /// its own store (a restart's `local` level of another node's part): copies on other
    /// nodes are the set levels' ([`JobNodes::set_levels`]). Nodes that cannot be asked
    /// are left out.
    fn holders(
        &self,
        owner: &str,
        files: &[Want],
        ask: &[String],
    ) -> std::collections::BTreeMap<String, Vec<bool>>;
    /// Set the levels of this node's own records' files as this node sees them now
    /// (local, partner, pfs), the same way its daemon answers other nodes.
    fn fill_levels(&self, local: &mut [Dataset], dests: &[std::path::PathBuf]);
    /// Every other node's restart rounds of `job` (failure case D9); nodes that cannot
    /// be asked, or whose daemon does not know the question, are left out.
    fn restarts(&self, job: &str) -> std::collections::BTreeMap<String, Vec<Round>> {
        let _ = job;
        std::collections::BTreeMap::new()
    }
    /// Tell every other node that dataset `ds` of `job` is complete job-wide, with
    /// every node's part (`ds.nodes`): they keep the verdict, so it survives the loss of
    /// the nodes that reached it (failure case D7b). Best effort: a node that cannot be
    /// told is left out.
    fn announce(&self, job: &str, ds: &Dataset) {
        let _ = (job, ds);
    }
    /// Every other node's id floor of `job`: the next id it would give (failure case
    /// D10); nodes that cannot be asked, or that do not know the question, are left out.
    fn floors(&self, job: &str) -> std::collections::BTreeMap<String, u64> {
        let _ = job;
        std::collections::BTreeMap::new()
    }
    /// Tell every other node that `job`'s ids continue at `next_id` (they raise their
    /// floor; failure case D10). Best effort.
    fn raise_floor(&self, job: &str, next_id: u64) {
        let _ = (job, next_id);
    }
    /// The set-level protections ([`ckptfs_level::SetProtection`]: partner copies,
    /// erasure sets, ...) a part of this job's datasets can be recovered from, in read
    /// order. A restart asks each in turn, by its level id, never by kind
    /// (`ckptfs_partner::set_levels` gives the cluster file's). None: no set level.
    fn set_levels(&self) -> Vec<std::sync::Arc<dyn ckptfs_level::SetProtection>> {
        Vec::new()
    }
}
