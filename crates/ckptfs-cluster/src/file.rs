//! The cluster file: TOML, read with serde, validated with errors that name the node
//! and the field.

use crate::{check_name, invalid, ClusterError, NodeKeys, Result, Secret};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Default heartbeat interval between daemons, in milliseconds.
pub const DEFAULT_HEARTBEAT_MS: u64 = 1000;
/// Default number of missed heartbeats after which a peer is considered down.
pub const DEFAULT_HEARTBEAT_MISSES: u32 = 3;
/// Default TCP port of a node daemon when a host list gives only host names.
pub const DEFAULT_PORT: u16 = 7460;
/// Largest cluster file read (bytes).
pub const MAX_FILE: u64 = 16 << 20;

/// How partner copies are placed (REMEM III-C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Nodes in groups of `copies + 1` that back each other up (pairs for k = 1).
    Mirror,
    /// Each node backs up to the next `copies` eligible nodes of a ring.
    #[default]
    Ring,
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scheme::Mirror => "mirror",
            Scheme::Ring => "ring",
        })
    }
}

impl std::str::FromStr for Scheme {
    type Err = ClusterError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "mirror" => Ok(Scheme::Mirror),
            "ring" => Ok(Scheme::Ring),
            _ => Err(invalid(format!(
                "redundancy.scheme {s:?}: expected \"mirror\" or \"ring\""
            ))),
        }
    }
}

/// The redundancy section: scheme and number of partner copies per file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Redundancy {
    /// Mirror or ring (default ring).
    #[serde(default)]
    pub scheme: Scheme,
    /// Partner copies of each file, k >= 1 (default 1).
    #[serde(default = "one")]
    pub copies: usize,
    /// Erasure sets (`"xor"` or `"rs:K"`; none by default): the nodes are grouped into
    /// sets of `set_size` that protect each dataset with parity (crate ckptfs-erasure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erasure: Option<Erasure>,
    /// Members per erasure set (default 8; fewer when the cluster has fewer nodes).
    #[serde(default = "eight")]
    pub set_size: usize,
}

fn one() -> usize {
    1
}

fn eight() -> usize {
    8
}

/// The erasure scheme of the cluster's sets (`xor`, `rs:K`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Erasure {
    /// One parity shard per stripe: a set survives one lost member.
    Xor,
    /// Reed-Solomon with K parity shards per stripe: a set survives K lost members.
    Rs(u16),
}

impl Erasure {
    /// Members a set may lose.
    pub fn tolerates(&self) -> usize {
        match self {
            Erasure::Xor => 1,
            Erasure::Rs(k) => *k as usize,
        }
    }
}

impl std::fmt::Display for Erasure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Erasure::Xor => f.write_str("xor"),
            Erasure::Rs(k) => write!(f, "rs:{k}"),
        }
    }
}

impl std::str::FromStr for Erasure {
    type Err = ClusterError;
    fn from_str(s: &str) -> Result<Self> {
        let k = s.strip_prefix("rs:").map(|k| k.parse::<u16>());
        match (s, k) {
            ("xor", _) => Ok(Erasure::Xor),
            (_, Some(Ok(k))) if (1..=255).contains(&k) => Ok(Erasure::Rs(k)),
            _ => Err(invalid(format!(
                "redundancy.erasure {s:?}: expected \"xor\" or \"rs:K\" (K from 1 to 255)"
            ))),
        }
    }
}

impl TryFrom<String> for Erasure {
    type Error = ClusterError;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<Erasure> for String {
    fn from(e: Erasure) -> String {
        e.to_string()
    }
}

impl Default for Redundancy {
    fn default() -> Self {
        Redundancy {
            scheme: Scheme::Ring,
            copies: 1,
            erasure: None,
            set_size: eight(),
        }
    }
}

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Unique node id (letters, digits, `.`, `_`, `-`).
    pub id: String,
    /// `host:port` the node's daemon listens on and is reached at.
    pub addr: String,
    /// Name of the node's store (`/dev/shm/ckptfs.<store>`); distinct for nodes on one host.
    pub store: String,
    /// Failure domains of the node: level name -> value (`rack = "r1"`).
    #[serde(default)]
    pub domains: BTreeMap<String, String>,
}

impl Node {
    /// The host part of `addr` (brackets of an IPv6 literal removed).
    pub fn host(&self) -> &str {
        split_addr(&self.addr)
            .map(|(h, _)| h)
            .unwrap_or(self.addr.as_str())
    }

    /// The port of `addr`.
    pub fn port(&self) -> u16 {
        split_addr(&self.addr).map(|(_, p)| p).unwrap_or(0)
    }

    /// The node's value at domain level `level`.
    pub fn domain(&self, level: &str) -> Option<&str> {
        self.domains.get(level).map(String::as_str)
    }
}

/// Splits `host:port` / `[v6]:port`; None unless the port is a number 1..=65535.
pub(crate) fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = if let Some(h) = host.strip_prefix('[') {
        h.strip_suffix(']')?
    } else {
        if host.contains(':') {
            return None;
        }
        host
    };
    let port: u16 = port.parse().ok()?;
    (port != 0 && !host.is_empty()).then_some((host, port))
}

/// The cluster map: job, secret, heartbeat, redundancy, domain levels and nodes.
///
/// ```toml
/// job = "demo"
/// secret_file = "c.secret"         # relative to this file's directory (the launcher's)
/// keys_dir = "c.keys"              # per-node key files, <node>.key (each node's own)
/// heartbeat_ms = 1000
/// # mem_size = 4294967296        # each node's store memory (bytes), `cluster init --mem`
/// domains = ["rack"]               # levels, most important first
/// [redundancy]
/// scheme = "ring"                  # or "mirror"
/// copies = 1
/// # erasure = "rs:2"               # erasure sets (or "xor"); none by default
/// # set_size = 8                   # members per erasure set
/// [[node]]
/// id = "node1"
/// addr = "127.0.0.1:7460"
/// store = "demo.node1"
/// domains = { rack = "r1" }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Job name (letters, digits, `.`, `_`, `-`).
    pub job: String,
    /// Path of the secret file; a relative path is relative to the cluster file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// Inline secret (hex); refused unless the cluster file is the caller's and mode 0600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Directory of the per-node key files (`<node id>.key`, [`crate::NodeKeys`]); a
    /// relative path is relative to the cluster file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys_dir: Option<PathBuf>,
    /// Encrypt peer traffic (AES-256-GCM) instead of only authenticating every frame;
    /// every node of the map must agree (it is part of the handshake).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encrypt: bool,
    /// Heartbeat interval between daemons, milliseconds.
    #[serde(default = "default_hb")]
    pub heartbeat_ms: u64,
    /// Missed heartbeats after which a peer is down.
    #[serde(default = "default_misses")]
    pub heartbeat_misses: u32,
    /// Redundancy scheme and copies.
    #[serde(default)]
    pub redundancy: Redundancy,
    /// Failure-domain levels, most important first (`["rack", "switch", "psu"]`).
    #[serde(default)]
    pub domains: Vec<String>,
    /// Memory of each node's store in bytes (`cluster init --mem`): the size a node's
    /// store is created with by its daemon, `ckptfs --cluster --node-id` commands and
    /// ranks in cluster mode, when no flag, `CKPTFS_MEM_SIZE` or settings file gives
    /// `mem_size`. None: the settings' default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_size: Option<u64>,
    /// The nodes, in the order that defines the plan.
    #[serde(rename = "node", default)]
    pub nodes: Vec<Node>,
    /// The aggregate memory pool (`[pool]`): its manager node and address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolMap>,
    /// The file this map was read from (resolves a relative `secret_file`).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// The `[pool]` section: where the aggregate memory pool's manager runs and how the
/// pool behaves (docs/pool.md).
///
/// ```toml
/// [pool]
/// manager = "node1"            # a node id of the map (the manager's identity)
/// addr = "127.0.0.1:17270"     # where the manager listens
/// benefactor_port_offset = 200 # a benefactor listens on its node's port + this
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolMap {
    /// Node id of the manager (its transport identity).
    pub manager: String,
    /// Address the manager listens on (host:port).
    pub addr: String,
    /// A benefactor listens on its node's host at its node's port plus this.
    #[serde(default = "default_pool_offset")]
    pub benefactor_port_offset: u16,
    /// Pool chunk size in bytes.
    #[serde(default = "default_pool_chunk")]
    pub chunk_size: u32,
    /// Benefactors a file is striped over.
    #[serde(default = "default_pool_width")]
    pub stripe_width: u32,
    /// Soft-state refresh interval of a benefactor, milliseconds.
    #[serde(default = "default_pool_refresh")]
    pub refresh_ms: u64,
    /// A benefactor silent this long is declared dead, milliseconds.
    #[serde(default = "default_pool_death")]
    pub death_ms: u64,
    /// Directory (on the PFS) the benefactors drain chunk files into; none: no drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_dir: Option<PathBuf>,
    /// Manager metadata directory (its redb file); relative to the cluster file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_dir: Option<PathBuf>,
}

fn default_pool_offset() -> u16 {
    200
}
fn default_pool_chunk() -> u32 {
    1 << 20
}
fn default_pool_width() -> u32 {
    2
}
fn default_pool_refresh() -> u64 {
    1000
}
fn default_pool_death() -> u64 {
    5000
}

impl PoolMap {
    /// A pool section with the defaults: `manager` at `addr`.
    pub fn new(manager: &str, addr: &str) -> PoolMap {
        PoolMap {
            manager: manager.to_string(),
            addr: addr.to_string(),
            benefactor_port_offset: default_pool_offset(),
            chunk_size: default_pool_chunk(),
            stripe_width: default_pool_width(),
            refresh_ms: default_pool_refresh(),
            death_ms: default_pool_death(),
            drain_dir: None,
            meta_dir: None,
        }
    }
}

fn default_hb() -> u64 {
    DEFAULT_HEARTBEAT_MS
}
fn default_misses() -> u32 {
    DEFAULT_HEARTBEAT_MISSES
}

impl Cluster {
    /// Parses and validates a cluster map from TOML text (`origin` names it in errors).
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Cluster> {
        let c: Cluster = toml::from_str(text).map_err(|e| ClusterError::Parse {
            path: origin.to_string(),
            msg: e.to_string(),
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Reads and validates a cluster file. An inline `secret` is refused unless the
    /// file is owned by the caller and has no group/other permission bits.
    pub fn load(path: &Path) -> Result<Cluster> {
        let io = |source| ClusterError::Io {
            path: path.to_path_buf(),
            source,
        };
        let f = std::fs::File::open(path).map_err(io)?;
        let meta = f.metadata().map_err(io)?;
        let mut text = String::new();
        // Bounded read: a cluster file is small; a device or a huge file is refused.
        std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_FILE + 1), &mut text).map_err(io)?;
        if text.len() as u64 > MAX_FILE {
            return Err(invalid(format!(
                "{}: larger than {MAX_FILE} bytes, not a cluster file",
                path.display()
            )));
        }
        let mut c = Cluster::from_toml_str(&text, &path.display().to_string())?;
        if c.secret.is_some() {
            // SAFETY: geteuid has no preconditions.
            let euid = unsafe { libc::geteuid() };
            if meta.uid() != euid || meta.mode() & 0o077 != 0 {
                return Err(ClusterError::Secret {
                    path: path.to_path_buf(),
                    why: format!(
                        "an inline secret needs the cluster file to be yours and mode 0600 (it is uid {} mode {:o}); use secret_file",
                        meta.uid(),
                        meta.mode() & 0o7777
                    ),
                });
            }
        }
        c.source = Some(path.to_path_buf());
        Ok(c)
    }

    /// Checks every rule of the map; the error names the node and field at fault.
    pub fn validate(&self) -> Result<()> {
        check_name("job", &self.job)?;
        if self.heartbeat_ms == 0 {
            return Err(invalid("heartbeat_ms must be > 0"));
        }
        if self.heartbeat_misses == 0 {
            return Err(invalid("heartbeat_misses must be > 0"));
        }
        if self.mem_size == Some(0) {
            return Err(invalid(
                "mem_size must be > 0 (bytes of each node's store memory)",
            ));
        }
        if self.secret.is_some() && self.secret_file.is_some() {
            return Err(invalid("give either secret or secret_file, not both"));
        }
        if let Some(s) = &self.secret {
            Secret::from_hex(s).map_err(|why| invalid(format!("secret: {why}")))?;
        }
        let mut levels = BTreeSet::new();
        for l in &self.domains {
            check_name("domain level", l)?;
            if !levels.insert(l.as_str()) {
                return Err(invalid(format!("domain level {l:?} listed twice")));
            }
        }
        if self.nodes.is_empty() {
            return Err(invalid("no [[node]] entries"));
        }
        let mut ids = BTreeSet::new();
        let mut addrs = BTreeMap::new();
        let mut stores = BTreeMap::new();
        for n in &self.nodes {
            check_name("node id", &n.id)?;
            let at = |field: &str, why: String| invalid(format!("node {:?}: {field} {why}", n.id));
            if !ids.insert(n.id.as_str()) {
                return Err(at("id", "is used by two nodes".into()));
            }
            let Some((host, _)) = split_addr(&n.addr) else {
                return Err(at(
                    "addr",
                    format!("{:?} is not host:port (port 1-65535)", n.addr),
                ));
            };
            if let Some(other) = addrs.insert(n.addr.as_str(), n.id.as_str()) {
                return Err(at("addr", format!("{:?} is also node {other:?}'s", n.addr)));
            }
            check_name(&format!("node {:?}: store", n.id), &n.store)?;
            if let Some(other) = stores.insert((host, n.store.as_str()), n.id.as_str()) {
                return Err(at(
                    "store",
                    format!("{:?} is also node {other:?}'s on host {host}", n.store),
                ));
            }
            for (level, value) in &n.domains {
                if !levels.contains(level.as_str()) {
                    return Err(at(
                        "domains",
                        format!("level {level:?} is not in domains = {:?}", self.domains),
                    ));
                }
                check_name(&format!("node {:?}: domains.{level}", n.id), value)?;
            }
            for l in &self.domains {
                if !n.domains.contains_key(l) {
                    return Err(at("domains", format!("has no value for level {l:?}")));
                }
            }
        }
        if let Some(p) = &self.pool {
            if !ids.contains(p.manager.as_str()) {
                return Err(invalid(format!(
                    "pool.manager {:?} is not a node of the map",
                    p.manager
                )));
            }
            if split_addr(&p.addr).is_none() {
                return Err(invalid(format!("pool.addr {:?} is not host:port", p.addr)));
            }
            if p.chunk_size < 4096 || p.chunk_size > 64 << 20 {
                return Err(invalid("pool.chunk_size must be 4 KiB to 64 MiB"));
            }
            if p.stripe_width == 0 || p.refresh_ms == 0 || p.death_ms <= p.refresh_ms {
                return Err(invalid(
                    "pool: stripe_width and refresh_ms must be > 0, death_ms > refresh_ms",
                ));
            }
        }
        let k = self.redundancy.copies;
        if k == 0 {
            return Err(invalid("redundancy.copies must be >= 1"));
        }
        if k >= self.nodes.len() {
            return Err(invalid(format!(
                "redundancy.copies = {k} needs at least {} nodes (the map has {})",
                k + 1,
                self.nodes.len()
            )));
        }
        if let Some(e) = self.redundancy.erasure {
            let need = e.tolerates() + 1;
            if self.redundancy.set_size < need || self.nodes.len() < need {
                return Err(invalid(format!(
                    "redundancy.erasure = \"{e}\" needs sets of at least {need} members (set_size = {}, {} nodes)",
                    self.redundancy.set_size,
                    self.nodes.len()
                )));
            }
        }
        Ok(())
    }

    /// The node with id `id`.
    pub fn node(&self, id: &str) -> Result<&Node> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| ClusterError::UnknownNode(id.to_string()))
    }

    /// Index of node `id` in [`Cluster::nodes`].
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }

    /// A path of the map (`secret_file`, `pool.drain_dir`...) resolved against the
    /// cluster file's directory.
    pub fn resolve_path(&self, p: &Path) -> PathBuf {
        self.resolve(p).unwrap_or_else(|| p.to_path_buf())
    }

    /// Path of the secret file, resolved against the cluster file's directory.
    pub fn secret_path(&self) -> Option<PathBuf> {
        self.resolve(self.secret_file.as_ref()?)
    }

    /// Path of node `id`'s key file (`keys_dir/<id>.key`), resolved against the cluster
    /// file's directory.
    pub fn key_path(&self, id: &str) -> Option<PathBuf> {
        Some(self.resolve(self.keys_dir.as_ref()?)?.join(format!("{id}.key")))
    }

    fn resolve(&self, p: &Path) -> Option<PathBuf> {
        if p.is_absolute() {
            return Some(p.to_path_buf());
        }
        let dir = self
            .source
            .as_deref()
            .and_then(Path::parent)
            .filter(|d| !d.as_os_str().is_empty());
        Some(match dir {
            Some(d) => d.join(p),
            None => p.to_path_buf(),
        })
    }

    /// The per-job secret (inline, or read from `secret_file` with its checks).
    pub fn secret(&self) -> Result<Secret> {
        if let Some(hex) = &self.secret {
            return Secret::from_hex(hex).map_err(|why| ClusterError::Secret {
                path: self.source.clone().unwrap_or_default(),
                why,
            });
        }
        match self.secret_path() {
            Some(p) => Secret::load(&p),
            None => Err(ClusterError::Secret {
                path: self.source.clone().unwrap_or_default(),
                why: "the cluster map names no secret_file".into(),
            }),
        }
    }

    /// Node `id`'s credentials: its key file (`keys_dir/<id>.key`) when the map names a
    /// keys directory and the file is there; otherwise derived from the job's master
    /// secret, when this process can read it (the launcher, or a single-user cluster
    /// where every node shares one file system). A key file that exists but is refused
    /// (owner, mode, form, another node's or job's) is an error, never skipped.
    pub fn node_keys(&self, id: &str) -> Result<NodeKeys> {
        self.node(id)?;
        if let Some(p) = self.key_path(id) {
            match std::fs::symlink_metadata(&p) {
                Ok(_) => {
                    let k = NodeKeys::load(&p)?;
                    if k.node() != id || k.job() != self.job {
                        return Err(ClusterError::Secret {
                            path: p,
                            why: format!(
                                "holds the keys of node {:?} of job {:?}, not of node {id:?} of job {:?}",
                                k.node(),
                                k.job(),
                                self.job
                            ),
                        });
                    }
                    return Ok(k);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ClusterError::Io { path: p, source: e }),
            }
        }
        let master = self.secret().map_err(|e| match (self.key_path(id), e) {
            (Some(p), ClusterError::Secret { path, why }) => ClusterError::Secret {
                path,
                why: format!("{why}; and no key file {} for node {id:?}", p.display()),
            },
            (_, e) => e,
        })?;
        Ok(NodeKeys::derive(
            &master,
            &self.job,
            id,
            self.nodes.iter().map(|n| n.id.as_str()),
        ))
    }

    /// Writes every node's key file into `keys_dir` (created mode 0700 if missing),
    /// derived from `master` (the launcher's `cluster init`).
    pub fn write_node_keys(&self, master: &Secret, force: bool) -> Result<Vec<PathBuf>> {
        let Some(dir) = self.keys_dir.as_ref().and_then(|d| self.resolve(d)) else {
            return Err(invalid("the cluster map names no keys_dir"));
        };
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ClusterError::Io { path: dir, source: e }),
        }
        let mut out = Vec::new();
        for n in &self.nodes {
            let p = dir.join(format!("{}.key", n.id));
            NodeKeys::derive(master, &self.job, &n.id, self.nodes.iter().map(|n| n.id.as_str()))
                .create(&p, force)?;
            out.push(p);
        }
        Ok(out)
    }

    /// A map for `n` nodes on 127.0.0.1: `node1..nodeN`, ports `base_port..`, stores
    /// `<job>.nodeI`, two nodes per rack (`node1, node2` in `r1`, `node3, node4` in `r2`)
    /// from 4 nodes on; 2 or 3 nodes each get a rack of their own (`rI`), so the plan
    /// survives the loss of any one rack.
    pub fn local(n: usize, job: &str, base_port: u16) -> Result<Cluster> {
        if n < 2 {
            return Err(invalid(format!("--local {n}: a cluster needs at least 2 nodes")));
        }
        if base_port == 0 || base_port as usize + n - 1 > u16::MAX as usize {
            return Err(invalid(format!(
                "base port {base_port}: ports {base_port}..{} do not fit in 1-65535",
                base_port as usize + n - 1
            )));
        }
        let nodes = (1..=n)
            .map(|i| Node {
                id: format!("node{i}"),
                addr: format!("127.0.0.1:{}", base_port as usize + i - 1),
                store: format!("{job}.node{i}"),
                // Two nodes per rack from 4 nodes on; with fewer, each node its own rack
                // (two in one rack would make that rack's loss destroy everything).
                domains: BTreeMap::from([(
                    "rack".to_string(),
                    format!("r{}", if n < 4 { i } else { i.div_ceil(2) }),
                )]),
            })
            .collect();
        let c = Cluster {
            job: job.to_string(),
            secret_file: None,
            secret: None,
            keys_dir: None,
            encrypt: false,
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            heartbeat_misses: DEFAULT_HEARTBEAT_MISSES,
            redundancy: Redundancy::default(),
            domains: vec!["rack".into()],
            mem_size: None,
            nodes,
            pool: None,
            source: None,
        };
        c.validate()?;
        Ok(c)
    }

    /// The map as a cluster file (TOML), readable by [`Cluster::from_toml_str`].
    pub fn to_toml(&self) -> String {
        use std::fmt::Write;
        let q = |s: &str| toml::Value::String(s.to_string()).to_string();
        let mut o = String::new();
        let _ = writeln!(o, "# ckptfs cluster map (docs/cluster.md)");
        let _ = writeln!(o, "job = {}", q(&self.job));
        if let Some(p) = &self.secret_file {
            let _ = writeln!(o, "secret_file = {}", q(&p.to_string_lossy()));
        }
        if let Some(p) = &self.keys_dir {
            let _ = writeln!(o, "keys_dir = {}", q(&p.to_string_lossy()));
        }
        if self.encrypt {
            let _ = writeln!(o, "encrypt = true");
        }
        if let Some(s) = &self.secret {
            let _ = writeln!(o, "secret = {}", q(s));
        }
        let _ = writeln!(o, "heartbeat_ms = {}", self.heartbeat_ms);
        let _ = writeln!(o, "heartbeat_misses = {}", self.heartbeat_misses);
        if let Some(m) = self.mem_size {
            let _ = writeln!(o, "# memory of each node's store, bytes ({} MiB)", m >> 20);
            let _ = writeln!(o, "mem_size = {m}");
        }
        let levels: Vec<String> = self.domains.iter().map(|l| q(l)).collect();
        let _ = writeln!(o, "# failure-domain levels, most important first");
        let _ = writeln!(o, "domains = [{}]", levels.join(", "));
        let _ = writeln!(o, "\n[redundancy]");
        let _ = writeln!(o, "scheme = \"{}\"", self.redundancy.scheme);
        let _ = writeln!(o, "copies = {}", self.redundancy.copies);
        if let Some(e) = self.redundancy.erasure {
            let _ = writeln!(o, "erasure = \"{e}\"");
            let _ = writeln!(o, "set_size = {}", self.redundancy.set_size);
        }
        for n in &self.nodes {
            let _ = writeln!(o, "\n[[node]]");
            let _ = writeln!(o, "id = {}", q(&n.id));
            let _ = writeln!(o, "addr = {}", q(&n.addr));
            let _ = writeln!(o, "store = {}", q(&n.store));
            let d: Vec<String> = n
                .domains
                .iter()
                .map(|(k, v)| {
                    let bare = k
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                    let k = if bare { k.clone() } else { q(k) };
                    format!("{k} = {}", q(v))
                })
                .collect();
            let _ = writeln!(o, "domains = {{ {} }}", d.join(", "));
        }
        if let Some(p) = &self.pool {
            let _ = writeln!(o, "\n# aggregate memory pool (docs/pool.md)\n[pool]");
            let _ = writeln!(o, "manager = {}", q(&p.manager));
            let _ = writeln!(o, "addr = {}", q(&p.addr));
            let _ = writeln!(o, "benefactor_port_offset = {}", p.benefactor_port_offset);
            let _ = writeln!(o, "chunk_size = {}", p.chunk_size);
            let _ = writeln!(o, "stripe_width = {}", p.stripe_width);
            let _ = writeln!(o, "refresh_ms = {}", p.refresh_ms);
            let _ = writeln!(o, "death_ms = {}", p.death_ms);
            if let Some(d) = &p.drain_dir {
                let _ = writeln!(o, "drain_dir = {}", q(&d.to_string_lossy()));
            }
            if let Some(d) = &p.meta_dir {
                let _ = writeln!(o, "meta_dir = {}", q(&d.to_string_lossy()));
            }
        }
        o
    }
}
