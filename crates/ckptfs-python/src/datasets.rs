//! `ckptfs._native.Datasets`: the checkpoint datasets of a job in a node store (the
//! dataset API of `ckptfs-datasets`, the same the C ABI's `ckptfs_ckpt_*` calls use).
//!
//! Records cross into Python as JSON text (the record format of docs/datasets.md);
//! `python/ckptfs/datasets.py` parses them into dicts.

use crate::store::{resolve_settings, PyStore};
use ckptfs_datasets::protection::PartnerCopies;
use ckptfs_datasets::{Config, Dataset, DatasetError, Datasets, State};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use std::collections::HashMap;

/// `OSError(errno, message)` for a dataset error (ENOENT never begun, EALREADY completed
/// already, EINVAL a bad name or setting, ...).
fn derr(e: DatasetError) -> PyErr {
    PyOSError::new_err((e.errno(), e.to_string()))
}

fn json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v)
        .map_err(|e| PyOSError::new_err((libc::EIO, format!("encoding a dataset record: {e}"))))
}

/// The datasets of one job in a node store, seen as one rank.
#[pyclass(module = "ckptfs._native", name = "Datasets", frozen)]
pub struct PyDatasets {
    ds: Datasets,
    /// `(cluster file, node)` in cluster mode.
    cluster: Option<(String, String)>,
    /// The protection a complete dataset gets beyond its node under the cluster file
    /// (`ckptfs_partner::protection_mode`, as `ckptfs ls -l` and `ckpt list`).
    mode: ckptfs_datasets::protection::PartnerCopies,
}

/// Whether dataset name `name` is `prefix` or below it (`/run1` holds `/run1/step5`).
fn under(name: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || name == p || name.strip_prefix(p).is_some_and(|r| r.starts_with('/'))
}

/// One outcome of [`PyDatasets::latest_restartable`].
#[derive(serde::Serialize)]
struct Latest<'a> {
    chosen: Option<&'a Dataset>,
    restored: Vec<(String, u64)>,
    skipped: Vec<ckptfs_datasets::Skipped>,
}

/// The level kinds the bindings open from a `[levels]` entry (`local`, `partner` and
/// `pfs` without a directory are read by the dataset restart's own steps; the memory
/// pool's level is the CLI's only).
const FACTORIES: [&dyn ckptfs_level::LevelFactory; 3] = [
    &ckptfs_object::factory::ObjectFactory,
    &ckptfs_agent::PfsFactory,
    &ckptfs_dirlevel::DirFactory,
];


#[pymethods]
impl PyDatasets {
    /// The datasets of job `job` (default `$CKPTFS_JOB`, else "default") in `store`,
    /// as rank `rank` (default `$CKPTFS_RANK` or the launcher's) of `world` ranks
    /// writing into this store (default `$CKPTFS_NRANKS`, ..., else 1). `dests`: the
    /// drain destinations (PFS directories) a restart may take files from (default
    /// `$CKPTFS_DEST`). The policy and retention settings come from the settings file
    /// and `CKPTFS_*` variables as for the CLI.
    #[new]
    #[pyo3(signature = (store, job=None, rank=None, world=None, dests=None, node=None, config=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        store: &PyStore,
        job: Option<String>,
        rank: Option<String>,
        world: Option<u32>,
        dests: Option<Vec<String>>,
        node: Option<String>,
        config: Option<String>,
    ) -> PyResult<PyDatasets> {
        let mut over: HashMap<&str, String> = HashMap::new();
        if let Some(j) = job {
            over.insert("CKPTFS_JOB", j);
        }
        if let Some(r) = rank {
            over.insert("CKPTFS_RANK", r);
        }
        if let Some(w) = world {
            if w == 0 {
                return Err(crate::einval("world must be at least 1"));
            }
            over.insert("CKPTFS_NRANKS", w.to_string());
        }
        if let Some(d) = dests {
            over.insert("CKPTFS_DEST", d.join(","));
        }
        if let Some(n) = node {
            over.insert("CKPTFS_NODE_ID", n);
        }
        let env = |k: &str| {
            over.get(k)
                .cloned()
                .or_else(|| std::env::var(k).ok().filter(|v| !v.is_empty()))
        };
        let settings = resolve_settings(&HashMap::new(), config, &env)?;
        let mut cfg = Config::from_settings(&settings, &env).map_err(derr)?;
        // The levels a restart reads, in the settings' `[levels]` order (CKPTFS_LEVELS).
        let mut extra = std::collections::BTreeMap::new();
        if let Some(n) = env("CKPTFS_NODE_ID") {
            extra.insert("node".to_string(), n);
        }
        let order = py
            .allow_threads(|| ckptfs_level::open_levels(&settings.levels, &FACTORIES, &extra))
            .map_err(|e| PyOSError::new_err((e.errno(), format!("setting levels.order: {e}"))))?;
        let Some((file, node)) = crate::cluster::cluster_of(&env) else {
            let mode = ckptfs_partner::protection_mode(None, PartnerCopies::of(&cfg));
            return Ok(PyDatasets {
                ds: Datasets::single_node(store.store.clone(), cfg).with_levels(order),
                cluster: None,
                mode,
            });
        };
        // Cluster mode: completeness, ids and restart are job-wide (the other nodes'
        // daemons are asked), as for `ckptfs ckpt` and the C API.
        let cluster = crate::cluster::load(&file, &node)?;
        let mode = ckptfs_partner::protection_mode(Some(&cluster), PartnerCopies::of(&cfg));
        cfg.node = node.clone();
        let timeout = crate::cluster::node_timeout(&env);
        let st = store.store.clone();
        let nodes = py
            .allow_threads(|| ckptfs_partner::ClusterNodes::new(cluster, &node, st, timeout))
            .map_err(|e| crate::einval(format!("cluster {file}: {e}")))?;
        Ok(PyDatasets {
            ds: Datasets::new(store.store.clone(), cfg, Box::new(nodes)).with_levels(order),
            cluster: Some((file, node)),
            mode,
        })
    }

    /// `(cluster file, node)` in cluster mode, else None.
    #[getter]
    fn cluster(&self) -> Option<(String, String)> {
        self.cluster.clone()
    }

    /// Every dataset of the job as the whole job sees it (cluster mode: every node's
    /// records through its daemon, judged job-wide; one node: this store's records),
    /// oldest first, as JSON: `id name state reason parts {node: {ranks, files}}
    /// created_ns closed_ns unreachable`.
    fn job_list(&self, py: Python<'_>) -> PyResult<String> {
        // With the registry levels of the read order (object storage, ...) that hold
        // each node's files added, by id, as `ckptfs ckpt list --cluster` shows them.
        let all = py
            .allow_threads(|| {
                self.ds.job_list().map(|mut all| {
                    for d in all.iter_mut() {
                        self.ds.refresh_job_levels(d);
                    }
                    all
                })
            })
            .map_err(derr)?;
        json(&all)
    }

    /// The protection dataset record `record` (JSON) gets beyond this node: the level
    /// policy's choice as this configuration's `dataset_partner_copies` applies it under
    /// the cluster file (erasure sets when it names a scheme; `ckptfs_datasets::protection`
    /// and `ckptfs_partner::protection_mode`, what `ckptfs ls -l` and `ckpt list` show),
    /// as JSON: `chosen short policy node_local_by_choice partner_copies note ...`.
    fn protection(&self, record: String) -> PyResult<String> {
        let d: Dataset =
            serde_json::from_str(&record).map_err(|e| crate::einval(format!("not a dataset record: {e}")))?;
        json(&ckptfs_datasets::protection::of(&d, self.mode))
    }

    /// The job id.
    #[getter]
    fn job(&self) -> &str {
        &self.ds.config().job
    }

    /// This caller's rank.
    #[getter]
    fn rank(&self) -> &str {
        &self.ds.config().rank
    }

    /// Ranks writing each dataset into this store.
    #[getter]
    fn world(&self) -> u32 {
        self.ds.config().world
    }

    /// The drain destinations a restart may take files from.
    #[getter]
    fn dests(&self) -> Vec<String> {
        self.ds
            .config()
            .dests
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    /// Begin dataset `name` for this rank (joining an open one of that name another
    /// rank began); returns its id. This process is recorded as the rank's: if it dies
    /// before completing, the dataset becomes incomplete (docs/datasets.md, D3).
    fn begin(&self, py: Python<'_>, name: String) -> PyResult<u64> {
        py.allow_threads(|| self.ds.begin(&name, Some(ckptfs_store::process::me())))
            .map_err(derr)
    }

    /// Complete this rank's part of dataset `id` (None: its newest open one), valid or
    /// not; the record after the change as JSON. The last part checks and checksums
    /// every file and makes the dataset complete.
    #[pyo3(signature = (id=None, valid=true))]
    fn complete(&self, py: Python<'_>, id: Option<u64>, valid: bool) -> PyResult<String> {
        let d = py.allow_threads(|| self.ds.complete(id, valid)).map_err(derr)?;
        json(&d)
    }

    /// Every dataset of the job, oldest first, as a JSON list of records (dead ranks
    /// noticed and transparent directories judged first, as `ckptfs ckpt list` does).
    fn list(&self, py: Python<'_>) -> PyResult<String> {
        let (mut all, _) = py.allow_threads(|| self.ds.list()).map_err(derr)?;
        for d in all.iter_mut() {
            self.ds.refresh_levels(d);
        }
        json(&all)
    }

    /// One dataset's record as JSON (ENOENT if there is none).
    fn show(&self, py: Python<'_>, id: u64) -> PyResult<String> {
        let mut d = py.allow_threads(|| self.ds.show(id)).map_err(derr)?;
        self.ds.refresh_levels(&mut d);
        json(&d)
    }

    /// Delete dataset `id`: its record and its local files still holding its content.
    fn delete(&self, py: Python<'_>, id: u64) -> PyResult<()> {
        py.allow_threads(|| self.ds.delete(id)).map_err(derr)
    }

    /// The newest dataset wholly recoverable from some level (its files in this store
    /// with the recorded size and CRC32C, or on a level of the settings' `[levels]` read
    /// order: a drain destination's manifest, object storage, ...), among those whose
    /// name is `prefix` or below it (None: all). With `restore`, files the store lacks
    /// are brought back into it from the first level holding them (every chunk and the
    /// whole file CRC-checked) before it is returned; a dataset whose restore fails (a
    /// damaged copy) is skipped. JSON: `{"chosen": record or
    /// null, "restored": [[path, bytes]...], "skipped": [{"id", "name", "reason"}...]}`.
    #[pyo3(signature = (prefix=None, restore=true))]
    fn latest_restartable(&self, py: Python<'_>, prefix: Option<String>, restore: bool) -> PyResult<String> {
        let (all, _) = py.allow_threads(|| self.ds.list()).map_err(derr)?;
        let mut skipped = Vec::new();
        for d in all.iter().rev() {
            if prefix.as_deref().is_some_and(|p| !under(&d.name, p)) || d.state == State::Open {
                continue;
            }
            let srcs = match self.ds.sources(d) {
                Ok(s) => s,
                Err(reason) => {
                    skipped.push(ckptfs_datasets::Skipped {
                        id: d.id,
                        name: d.name.clone(),
                        reason,
                    });
                    continue;
                }
            };
            let restored = if restore {
                match py.allow_threads(|| self.ds.restore_sources(d, &srcs)) {
                    Ok(r) => r,
                    Err(reason) => {
                        skipped.push(ckptfs_datasets::Skipped {
                            id: d.id,
                            name: d.name.clone(),
                            reason,
                        });
                        continue;
                    }
                }
            } else {
                Vec::new()
            };
            return json(&Latest {
                chosen: Some(d),
                restored,
                skipped,
            });
        }
        json(&Latest {
            chosen: None,
            restored: Vec::new(),
            skipped,
        })
    }

    fn __repr__(&self) -> String {
        let c = self.ds.config();
        format!(
            "<ckptfs._native.Datasets job={:?} rank={:?} world={} store={:?}>",
            c.job,
            c.rank,
            c.world,
            self.ds.store().name()
        )
    }
}
