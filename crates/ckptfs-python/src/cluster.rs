//! A job across nodes from Python: the node's store named by the cluster file, the other
//! nodes' dataset records through their daemons (job-wide completion), and reading a
//! file of a checkpoint that another node holds (`ckptfs_node::job_files`).
//!
//! Cluster mode is `CKPTFS_CLUSTER` (the cluster file) and `CKPTFS_NODE_ID` (this
//! node), as `ckptfs run --cluster` sets them; torchrun users export them per node.

use crate::einval;
use crate::store::PyStore;
use ckptfs_cluster::Cluster;
use ckptfs_datasets::Want;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::Path;
use std::time::Duration;

/// The cluster file and this node's id, when both are set (non-empty).
pub(crate) fn cluster_of(get: &dyn Fn(&str) -> Option<String>) -> Option<(String, String)> {
    let v = |k: &str| get(k).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    Some((v("CKPTFS_CLUSTER")?, v("CKPTFS_NODE_ID")?))
}

/// Load cluster file `file` and check it names node `node`.
pub(crate) fn load(file: &str, node: &str) -> PyResult<Cluster> {
    let c = Cluster::load(Path::new(file)).map_err(|e| einval(format!("cluster file {file}: {e}")))?;
    c.node(node)
        .map_err(|e| einval(format!("node {node} in {file}: {e}")))?;
    Ok(c)
}

/// How long a node's daemon may take to accept a connection (`CKPTFS_NODE_TIMEOUT_MS`,
/// default 3 s), as for `ckptfs ckpt` and the C API.
pub(crate) fn node_timeout(get: &dyn Fn(&str) -> Option<String>) -> Duration {
    get("CKPTFS_NODE_TIMEOUT_MS")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(3))
}

/// The store of node `node` in cluster file `file`.
#[pyfunction]
pub fn cluster_store_name(file: String, node: String) -> PyResult<String> {
    Ok(load(&file, &node)?
        .node(&node)
        .map(|n| n.store.clone())
        .unwrap_or_default())
}

/// Node `node`'s store in cluster file `file`: `(store name, mem_size)`, where
/// `mem_size` is the file's `mem_size` (`cluster init --mem`) when no `CKPTFS_MEM_SIZE`
/// or settings file (`$CKPTFS_CONFIG`) gives one, else None. The caller creates the
/// store with that size when it does not exist yet.
#[pyfunction]
pub fn cluster_store(file: String, node: String) -> PyResult<(String, Option<u64>)> {
    let c = load(&file, &node)?;
    let name = c.node(&node).map(|n| n.store.clone()).unwrap_or_default();
    let Some(m) = c.mem_size else {
        return Ok((name, None));
    };
    let env = |k: &str| std::env::var(k).ok();
    let s = crate::store::resolve_settings(&std::collections::HashMap::new(), None, &env)?;
    let given = s
        .row("mem_size")
        .is_some_and(|r| r.source != ckptfs_settings::Source::Default);
    Ok((name, (!given).then_some(m)))
}

/// The nodes of cluster file `file`, in its order.
#[pyfunction]
pub fn cluster_nodes(file: String) -> PyResult<Vec<String>> {
    let c = Cluster::load(Path::new(&file)).map_err(|e| einval(format!("cluster file {file}: {e}")))?;
    Ok(c.nodes.iter().map(|n| n.id.clone()).collect())
}

/// Read `owner`'s checkpoint file `path` (exactly `size` bytes with CRC32C `crc32c`) as
/// node `me` of cluster file `file` whose store is `store`: from `store` when it holds
/// it (a partner copy), else from the owner's daemon, its partners', any other node's
/// (`ckptfs_node::job_files::read_job_file`). Returns `(node it came from, bytes)`;
/// `OSError(EIO)` naming every node asked when none gave it whole and CRC-checked.
#[pyfunction]
#[pyo3(signature = (store, file, me, owner, path, size, crc32c, timeout_ms=None))]
#[allow(clippy::too_many_arguments)]
pub fn read_job_file<'py>(
    py: Python<'py>,
    store: &PyStore,
    file: String,
    me: String,
    owner: String,
    path: String,
    size: u64,
    crc32c: u32,
    timeout_ms: Option<u64>,
) -> PyResult<(String, Bound<'py, PyBytes>)> {
    let cluster = load(&file, &me)?;
    let timeout = timeout_ms
        .map(Duration::from_millis)
        .unwrap_or_else(|| node_timeout(&|k| std::env::var(k).ok()));
    let w = Want { path, size, crc32c };
    let st = store.store.clone();
    let r = py
        .allow_threads(|| ckptfs_node::job_files::read_job_file(&cluster, &me, &st, &owner, &w, timeout))
        .map_err(|e| PyOSError::new_err((libc::EIO, e)))?;
    Ok((r.from, PyBytes::new(py, &r.bytes)))
}

/// Checkpoint directories under `root` whose `.metadata` no dataset record of `job`
/// lists (saves made without the ckptfs Writer; `ckptfs_partner::unrecorded`): in this
/// store only, or with `file` and `me` (cluster mode) on every node of the cluster,
/// the others asked through their daemons. JSON: `{"dirs": [{"node", "path",
/// "metadata_mtime_ns", "files", "bytes"}], "errors": {node: why}}` (`node` is `me`, or
/// `""` for this store alone).
#[pyfunction]
#[pyo3(signature = (store, job, root, file=None, me=None, timeout_ms=None))]
pub fn unrecorded_checkpoints(
    py: Python<'_>,
    store: &PyStore,
    job: String,
    root: String,
    file: Option<String>,
    me: Option<String>,
    timeout_ms: Option<u64>,
) -> PyResult<String> {
    let st = store.store.clone();
    let answers = match (file, me) {
        (Some(file), Some(me)) => {
            let cluster = load(&file, &me)?;
            let timeout = timeout_ms
                .map(Duration::from_millis)
                .unwrap_or_else(|| node_timeout(&|k| std::env::var(k).ok()));
            py.allow_threads(|| {
                ckptfs_partner::ClusterNodes::new(cluster, &me, st, timeout)
                    .map(|c| c.unrecorded(&job, &root))
            })
            .map_err(|e| einval(format!("cluster {file}: {e}")))?
        }
        _ => {
            let r = py.allow_threads(|| ckptfs_partner::unrecorded::scan(&st, &job, &root));
            std::collections::BTreeMap::from([(String::new(), r)])
        }
    };
    let mut dirs = Vec::new();
    let mut errors = serde_json::Map::new();
    for (node, r) in answers {
        match r {
            Ok(v) => dirs.extend(v.into_iter().map(|u| {
                serde_json::json!({"node": node, "path": u.path, "metadata_mtime_ns": u.metadata_mtime_ns,
                                   "files": u.files, "bytes": u.bytes})
            })),
            Err(e) => {
                errors.insert(node, serde_json::Value::String(e));
            }
        }
    }
    Ok(serde_json::json!({"dirs": dirs, "errors": errors}).to_string())
}
