//! The job and process identity and the other environment a process reads besides the
//! settings table, in one place: this process's rank and the job's size (the
//! launchers' variables), the job name, the node id and cluster file, the drain
//! destinations, the timeout of questions to other nodes, and the switches kept for
//! measurements. Like the table, no I/O: callers pass the environment as a lookup.
//!
//! docs/design.md ("Every environment variable") lists each variable once.

use std::path::PathBuf;
use std::time::Duration;

/// This process's rank, first one set: ckptfs's own, then Open MPI, MPICH/Hydra (PMI),
/// PMIx, Slurm, torchrun.
pub const RANK_VARS: &[&str] = &[
    "CKPTFS_RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
    "RANK",
];
/// The job's number of ranks, first one set.
pub const WORLD_VARS: &[&str] = &["CKPTFS_NRANKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"];
/// The number of ranks on this node, first one set.
pub const LOCAL_NRANKS_VARS: &[&str] = &[
    "CKPTFS_LOCAL_NRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
    "SLURM_NTASKS_PER_NODE",
];
/// The job's name (datasets belong to a job).
pub const JOB_VAR: &str = "CKPTFS_JOB";
/// This node's id in the cluster file (default: the host name).
pub const NODE_ID_VAR: &str = "CKPTFS_NODE_ID";
/// The cluster file.
pub const CLUSTER_VAR: &str = "CKPTFS_CLUSTER";
/// Drain destinations, comma-separated directories.
pub const DEST_VAR: &str = "CKPTFS_DEST";
/// Milliseconds to wait for another node's daemon to answer a dataset question.
pub const NODE_TIMEOUT_VAR: &str = "CKPTFS_NODE_TIMEOUT_MS";
/// Default of [`NODE_TIMEOUT_VAR`]: 3 s.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(3);
/// Measurement switch: partner copies send memory chunks by `sendfile` (`=1`).
pub const PARTNER_SENDFILE_VAR: &str = "CKPTFS_PARTNER_SENDFILE";
/// Measurement switch: peer connections leave `SO_RCVLOWAT` at 1 (`=1`).
pub const NO_RCVLOWAT_VAR: &str = "CKPTFS_NO_RCVLOWAT";
/// Measurement switch: the store's allocator ignores which chunks this process touched
/// before (`=1`).
pub const NO_AFFINITY_VAR: &str = "CKPTFS_NO_AFFINITY";

/// The first of `vars` that is set and not blank, trimmed.
pub fn first_env(env: &dyn Fn(&str) -> Option<String>, vars: &[&str]) -> Option<String> {
    vars.iter()
        .find_map(|v| env(v).map(|s| s.trim().to_string()).filter(|s| !s.is_empty()))
}

fn positive(env: &dyn Fn(&str) -> Option<String>, vars: &[&str]) -> Option<u32> {
    first_env(env, vars)
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| *n > 0)
}

/// Who this process is in its job, from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobIdentity {
    /// The job's name ([`JOB_VAR`]; `default` when not set).
    pub job: String,
    /// This process's rank ([`RANK_VARS`]), as text; `None` when no launcher set one.
    pub rank: Option<String>,
    /// The job's number of ranks ([`WORLD_VARS`], a positive number); `None`: not set.
    pub world: Option<u32>,
    /// Ranks on this node ([`LOCAL_NRANKS_VARS`], a positive number); `None`: not set.
    pub local_nranks: Option<u32>,
    /// This node's id ([`NODE_ID_VAR`]); `None`: not set (callers use the host name).
    pub node_id: Option<String>,
    /// Drain destinations ([`DEST_VAR`]), in order.
    pub dests: Vec<PathBuf>,
}

impl JobIdentity {
    /// Read from the environment lookup `env`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> JobIdentity {
        JobIdentity {
            job: first_env(env, &[JOB_VAR]).unwrap_or_else(|| "default".into()),
            rank: rank(env),
            world: positive(env, WORLD_VARS),
            local_nranks: positive(env, LOCAL_NRANKS_VARS),
            node_id: first_env(env, &[NODE_ID_VAR]),
            dests: first_env(env, &[DEST_VAR])
                .map(|d| {
                    d.split(',')
                        .filter(|x| !x.is_empty())
                        .map(PathBuf::from)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// This process's rank from the launchers' variables ([`RANK_VARS`]).
pub fn rank(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    first_env(env, RANK_VARS)
}

/// The cluster a process acts in, when both the cluster file ([`CLUSTER_VAR`]) and this
/// node's id ([`NODE_ID_VAR`]) are set: (file, node id). `ckptfs --cluster/--node-id`
/// and `ckptfs run` pass them on to the programs they start.
pub fn cluster_wiring(env: &dyn Fn(&str) -> Option<String>) -> Option<(String, String)> {
    Some((first_env(env, &[CLUSTER_VAR])?, first_env(env, &[NODE_ID_VAR])?))
}

/// How long to wait for another node's daemon to answer ([`NODE_TIMEOUT_VAR`], in
/// milliseconds; default [`DEFAULT_NODE_TIMEOUT`]). A value that is not a whole number
/// of milliseconds is an error naming the variable.
pub fn node_timeout(env: &dyn Fn(&str) -> Option<String>) -> Result<Duration, String> {
    match first_env(env, &[NODE_TIMEOUT_VAR]) {
        None => Ok(DEFAULT_NODE_TIMEOUT),
        Some(v) => v
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("{NODE_TIMEOUT_VAR}={v:?} is not a number of milliseconds")),
    }
}

/// Whether a holder sends the memory chunks of a copy it serves (a Get: restores) by
/// `sendfile` ([`PARTNER_SENDFILE_VAR`] `=1`; for measurements, the default is `writev`).
pub fn partner_sendfile(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env(PARTNER_SENDFILE_VAR).is_some_and(|v| v == "1")
}

/// Whether peer connections set `SO_RCVLOWAT` (unless [`NO_RCVLOWAT_VAR`] `=1`).
pub fn rcvlowat(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env(NO_RCVLOWAT_VAR).is_none_or(|v| v != "1")
}

/// Whether the store's allocator's chunk affinity is off ([`NO_AFFINITY_VAR`] `=1`).
pub fn no_affinity(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env(NO_AFFINITY_VAR).is_some_and(|v| v == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn ckptfs_variables_come_before_the_launchers() {
        let e = env_of(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("CKPTFS_RANK", "5"),
            ("PMI_SIZE", "8"),
        ]);
        let id = JobIdentity::from_env(&e);
        assert_eq!(id.rank.as_deref(), Some("5"));
        assert_eq!(id.world, Some(8));
        assert_eq!(id.job, "default");
        let e = env_of(&[
            ("CKPTFS_RANK", " "),
            ("SLURM_PROCID", "2"),
            ("CKPTFS_NRANKS", "0"),
        ]);
        let id = JobIdentity::from_env(&e);
        assert_eq!(id.rank.as_deref(), Some("2"), "blank is not set");
        assert_eq!(id.world, None, "zero ranks is not a size");
        assert_eq!(rank(&env_of(&[])), None);
    }

    #[test]
    fn destinations_cluster_and_timeout() {
        let e = env_of(&[
            ("CKPTFS_DEST", "/a,,/b"),
            ("CKPTFS_CLUSTER", "c.toml"),
            ("CKPTFS_NODE_ID", "n1"),
            ("CKPTFS_NODE_TIMEOUT_MS", "250"),
        ]);
        assert_eq!(
            JobIdentity::from_env(&e).dests,
            [PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(cluster_wiring(&e), Some(("c.toml".into(), "n1".into())));
        assert_eq!(node_timeout(&e), Ok(Duration::from_millis(250)));
        assert_eq!(cluster_wiring(&env_of(&[("CKPTFS_CLUSTER", "c.toml")])), None);
        assert_eq!(node_timeout(&env_of(&[])), Ok(DEFAULT_NODE_TIMEOUT));
        let bad = node_timeout(&env_of(&[("CKPTFS_NODE_TIMEOUT_MS", "3s")])).unwrap_err();
        assert!(bad.contains("CKPTFS_NODE_TIMEOUT_MS"), "{bad}");
    }

    #[test]
    fn measurement_switches() {
        assert!(!partner_sendfile(&env_of(&[])));
        assert!(partner_sendfile(&env_of(&[("CKPTFS_PARTNER_SENDFILE", "1")])));
        assert!(rcvlowat(&env_of(&[])));
        assert!(!rcvlowat(&env_of(&[("CKPTFS_NO_RCVLOWAT", "1")])));
        assert!(no_affinity(&env_of(&[("CKPTFS_NO_AFFINITY", "1")])));
        assert!(!no_affinity(&env_of(&[("CKPTFS_NO_AFFINITY", "0")])));
    }
}
