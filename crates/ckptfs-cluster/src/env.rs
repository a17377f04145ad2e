//! Cluster maps from a launcher's environment: Slurm (`SLURM_JOB_NODELIST`,
//! `SLURM_NODEID`), a plain host list (`CKPTFS_NODES`), and failure domains from an
//! optional topology file.

use crate::check_name;
use crate::file::{Cluster, Node, Redundancy};
use crate::{hostlist, invalid, ClusterError, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where environment variables come from (the process, or a map in tests).
pub trait EnvSource {
    /// The value of variable `name`, if set.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl EnvSource for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

impl EnvSource for std::collections::HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// A topology file: the domain levels and each host's domains.
///
/// ```toml
/// levels = ["rack", "psu"]
/// [nodes]
/// n1 = { rack = "r1", psu = "p1" }
/// n2 = { rack = "r2", psu = "p1" }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Levels, most important first.
    pub levels: Vec<String>,
    /// Host -> level -> value.
    #[serde(default)]
    pub nodes: BTreeMap<String, BTreeMap<String, String>>,
}

impl Topology {
    /// Parses a topology file's text.
    pub fn parse(text: &str, origin: &str) -> Result<Topology> {
        toml::from_str(text).map_err(|e| ClusterError::Parse {
            path: origin.to_string(),
            msg: e.to_string(),
        })
    }

    /// Reads a topology file.
    pub fn load(path: &Path) -> Result<Topology> {
        let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Topology::parse(&text, &path.display().to_string())
    }
}

/// Settings for a map built from host names (Slurm or a host list).
#[derive(Debug, Clone)]
pub struct HostListOptions {
    /// Job name.
    pub job: String,
    /// Port every daemon listens on.
    pub port: u16,
    /// Store name on every node (default: the job name).
    pub store: Option<String>,
    /// Failure domains of the hosts (default: none, so only distinct nodes).
    pub topology: Option<Topology>,
    /// Scheme and copies.
    pub redundancy: Redundancy,
    /// Secret file written next to the map.
    pub secret_file: Option<PathBuf>,
}

impl Cluster {
    /// A map from host names: node id = host name, `addr = host:port`.
    pub fn from_hosts(hosts: &[String], opts: &HostListOptions) -> Result<Cluster> {
        check_name("job", &opts.job)?;
        let store = opts.store.clone().unwrap_or_else(|| opts.job.clone());
        let levels = opts
            .topology
            .as_ref()
            .map(|t| t.levels.clone())
            .unwrap_or_default();
        let mut nodes = Vec::with_capacity(hosts.len());
        for h in hosts {
            let domains = match &opts.topology {
                None => BTreeMap::new(),
                Some(t) => t
                    .nodes
                    .get(h)
                    .cloned()
                    .ok_or_else(|| invalid(format!("node {h:?}: not in the topology file")))?,
            };
            nodes.push(Node {
                id: h.clone(),
                addr: if h.contains(':') {
                    format!("[{h}]:{}", opts.port)
                } else {
                    format!("{h}:{}", opts.port)
                },
                store: store.clone(),
                domains,
            });
        }
        let c = Cluster {
            job: opts.job.clone(),
            secret_file: opts.secret_file.clone(),
            secret: None,
            keys_dir: None,
            encrypt: false,
            heartbeat_ms: crate::DEFAULT_HEARTBEAT_MS,
            heartbeat_misses: crate::file::DEFAULT_HEARTBEAT_MISSES,
            redundancy: opts.redundancy,
            domains: levels,
            mem_size: None,
            nodes,
            pool: None,
            source: None,
        };
        c.validate()?;
        Ok(c)
    }

    /// A map from a host list (`CKPTFS_NODES` style: commas or spaces; Slurm brackets
    /// allowed).
    pub fn from_host_list(list: &str, opts: &HostListOptions) -> Result<Cluster> {
        Cluster::from_hosts(&hostlist::expand(list)?, opts)
    }

    /// A map from Slurm's environment: `SLURM_JOB_NODELIST` (or `SLURM_NODELIST`).
    pub fn from_slurm(env: &dyn EnvSource, opts: &HostListOptions) -> Result<Cluster> {
        let list = env
            .var("SLURM_JOB_NODELIST")
            .or_else(|| env.var("SLURM_NODELIST"))
            .ok_or_else(|| ClusterError::Env("SLURM_JOB_NODELIST is not set".into()))?;
        Cluster::from_host_list(&list, opts)
    }

    /// A map from the launcher's environment: `CKPTFS_NODES` if set, else Slurm's.
    pub fn from_env(env: &dyn EnvSource, opts: &HostListOptions) -> Result<Cluster> {
        match env.var("CKPTFS_NODES") {
            Some(list) => Cluster::from_host_list(&list, opts),
            None => Cluster::from_slurm(env, opts).map_err(|e| match e {
                ClusterError::Env(_) => ClusterError::Env(
                    "neither CKPTFS_NODES nor SLURM_JOB_NODELIST is set (or use --hosts / --local)".into(),
                ),
                e => e,
            }),
        }
    }

    /// Which node of the map this process runs on: `explicit` (`--node-id`), else
    /// `CKPTFS_NODE_ID`, else `SLURM_NODEID` (index into the node list), else the node
    /// whose id or address host is this machine's host name.
    pub fn self_node(&self, explicit: Option<&str>, env: &dyn EnvSource) -> Result<&Node> {
        if let Some(id) = explicit.map(str::to_string).or_else(|| env.var("CKPTFS_NODE_ID")) {
            return self.node(&id);
        }
        if let Some(i) = env.var("SLURM_NODEID") {
            let i: usize = i
                .trim()
                .parse()
                .map_err(|_| ClusterError::Env(format!("SLURM_NODEID {i:?} is not a number")))?;
            return self.nodes.get(i).ok_or_else(|| {
                ClusterError::Env(format!(
                    "SLURM_NODEID {i} but the map has {} nodes",
                    self.nodes.len()
                ))
            });
        }
        let host = hostname();
        let short = host.split('.').next().unwrap_or(&host).to_string();
        self.nodes
            .iter()
            .find(|n| n.id == host || n.id == short || n.host() == host || n.host() == short)
            .ok_or_else(|| {
                ClusterError::Env(format!(
                    "no --node-id, CKPTFS_NODE_ID or SLURM_NODEID, and host name {host:?} is no node of the map"
                ))
            })
    }
}

/// This machine's host name.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname NUL-terminates within it
    // (or truncates, which we handle by the explicit last byte).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(topology: Option<Topology>) -> HostListOptions {
        HostListOptions {
            job: "j".into(),
            port: 7460,
            store: None,
            topology,
            redundancy: Redundancy::default(),
            secret_file: None,
        }
    }

    #[test]
    fn slurm_nodelist_and_nodeid_pick_the_nodes_and_self() {
        let env = BTreeMap::from([
            ("SLURM_JOB_NODELIST".to_string(), "n[1-3],m01".to_string()),
            ("SLURM_NODEID".to_string(), "2".to_string()),
        ]);
        let c = Cluster::from_env(&env, &opts(None)).unwrap();
        let ids: Vec<_> = c.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["n1", "n2", "n3", "m01"]);
        assert_eq!(c.nodes[3].addr, "m01:7460");
        assert_eq!(c.self_node(None, &env).unwrap().id, "n3");
        assert_eq!(c.self_node(Some("m01"), &env).unwrap().id, "m01");
    }

    #[test]
    fn ckptfs_nodes_wins_and_topology_gives_domains() {
        let t = Topology::parse(
            "levels = [\"rack\"]\n[nodes]\na = { rack = \"r1\" }\nb = { rack = \"r2\" }\nc = { rack = \"r1\" }\n",
            "t",
        )
        .unwrap();
        let env = BTreeMap::from([
            ("CKPTFS_NODES".to_string(), "a b,c".to_string()),
            ("SLURM_JOB_NODELIST".to_string(), "x[1-9]".to_string()),
        ]);
        let c = Cluster::from_env(&env, &opts(Some(t))).unwrap();
        assert_eq!(c.domains, ["rack"]);
        assert_eq!(c.node("c").unwrap().domain("rack"), Some("r1"));
    }

    #[test]
    fn host_missing_from_topology_is_named() {
        let t = Topology::parse("levels = [\"rack\"]\n[nodes]\na = { rack = \"r1\" }\n", "t").unwrap();
        let e = Cluster::from_host_list("a,b", &opts(Some(t))).unwrap_err();
        assert!(e.to_string().contains("\"b\""), "{e}");
    }
}
