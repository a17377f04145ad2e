//! `ckptfs cluster init` and `ckptfs cluster plan`: write a cluster file and its
//! per-job secret; print the partner plan and what each failure domain's loss destroys.

use anyhow::{bail, Context, Result};
use ckptfs_cluster::{Cluster, HostListOptions, ProcessEnv, Redundancy, Scheme, Secret, Topology};
use clap::{Args, Subcommand};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The `cluster` subcommands.
#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Write a cluster file and a random per-job secret (mode 0600) beside it.
    ///
    /// Nodes come from --local N (node1..nodeN on 127.0.0.1, two per rack), --hosts, or
    /// the launcher's environment (CKPTFS_NODES, else Slurm's SLURM_JOB_NODELIST).
    Init(Box<InitArgs>),
    /// Print each node's partners and, per failure domain, what its loss would destroy.
    Plan(PlanArgs),
}

/// `cluster init` options.
#[derive(Args, Debug)]
pub struct InitArgs {
    /// The cluster file to write.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// N nodes on this machine: node1..nodeN on 127.0.0.1, ports --port.., own stores.
    #[arg(long, value_name = "N", conflicts_with = "hosts")]
    pub local: Option<usize>,
    /// Host list (commas or spaces, Slurm brackets allowed): one node per host.
    #[arg(long, value_name = "LIST")]
    pub hosts: Option<String>,
    /// Topology file giving each host's failure domains (TOML; see docs/cluster.md).
    #[arg(long, value_name = "FILE", conflicts_with = "local")]
    pub topology: Option<PathBuf>,
    /// Job name [default: slurm-$SLURM_JOB_ID under Slurm, else "ckptfs"].
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Daemon port (with --local: the first node's; the others count up).
    #[arg(long, value_name = "PORT", default_value_t = ckptfs_cluster::DEFAULT_PORT)]
    pub port: u16,
    /// Redundancy scheme.
    #[arg(long, value_name = "mirror|ring", default_value = "ring")]
    pub scheme: String,
    /// Partner copies of each file.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub copies: usize,
    /// Redundancy: `partner:K` (K partner copies, as --copies), or erasure sets `xor`
    /// or `rs:K` (parity over sets of --set-size nodes; docs/erasure.md).
    #[arg(long, value_name = "xor|rs:K|partner:K")]
    pub redundancy: Option<String>,
    /// Members per erasure set (fewer when there are fewer nodes).
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub set_size: usize,
    /// Heartbeat interval between daemons (milliseconds).
    #[arg(long, value_name = "MS", default_value_t = ckptfs_cluster::DEFAULT_HEARTBEAT_MS)]
    pub heartbeat_ms: u64,
    /// The secret file [default: the cluster file with extension .secret].
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Replace existing files (the secret and key files too: running daemons must be
    /// restarted).
    #[arg(long)]
    pub force: bool,
    /// Every node on this one address (several slurmd on one machine, docs/slurm.md):
    /// ports --port upwards in node order, each node its own store `<job>.<node>`.
    #[arg(long, value_name = "ADDR", conflicts_with = "local")]
    pub one_host: Option<String>,
    /// Slurm's topology.conf: each node's leaf switch is its failure domain (level
    /// `switch`). Under Slurm (nodes from SLURM_JOB_NODELIST) the topology.conf beside
    /// slurm.conf is used when present and no --topology is given.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["local", "topology"])]
    pub slurm_topology: Option<PathBuf>,
    /// Encrypt peer traffic (AES-256-GCM); without it every frame is authenticated
    /// (keyed BLAKE3) but travels in the clear.
    #[arg(long)]
    pub encrypt: bool,
    /// Memory of each node's store (K/M/G): the size its daemon, `ckptfs --cluster
    /// --node-id` commands and the job's ranks create it with when no flag,
    /// CKPTFS_MEM_SIZE or settings file gives mem_size [default: the settings' 1G].
    #[arg(long, value_name = "SIZE", value_parser = ckptfs_settings::parse_store_size)]
    pub mem: Option<u64>,
    /// The cluster file of the allocation the job's checkpoints were written in (a
    /// requeue, a restart in a new allocation): hosts it lists keep their node ids, a
    /// new host takes the id of a node that is gone, nodes keep its order
    /// (docs/slurm.md, "A node replaced by another host").
    #[arg(long, value_name = "FILE")]
    pub previous: Option<PathBuf>,
    /// Write `HOST NODE_ID` lines (one per node, in file order) here: which node id
    /// each host runs as.
    #[arg(long, value_name = "FILE")]
    pub node_map: Option<PathBuf>,
}

/// `cluster plan` options.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The cluster file: the global `--cluster FILE` [env CKPTFS_CLUSTER].
    #[arg(skip)]
    pub cluster: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `cluster` subcommand.
/// `cluster` is the global `--cluster FILE` option.
pub fn main(cmd: ClusterCommand, cluster: Option<PathBuf>) -> Result<i32> {
    match cmd {
        ClusterCommand::Init(a) => init(*a),
        ClusterCommand::Plan(mut a) => {
            a.cluster = cluster;
            plan(a)
        }
    }
}

fn default_job() -> String {
    match std::env::var("SLURM_JOB_ID") {
        Ok(id) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric()) => {
            format!("slurm-{id}")
        }
        _ => "ckptfs".to_string(),
    }
}

/// The host list `cluster init` takes nodes from (as `Cluster::from_env` does).
fn host_list(a: &InitArgs) -> Option<String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    a.hosts
        .clone()
        .or_else(|| env("CKPTFS_NODES"))
        .or_else(|| env("SLURM_JOB_NODELIST"))
}

/// Slurm's topology.conf to take failure domains from: the one given, else, when the
/// nodes come from Slurm's allocation and no --topology is given, the topology.conf
/// beside slurm.conf (SLURM_CONF's directory, else /etc/slurm) if there is one.
fn slurm_topology_file(a: &InitArgs) -> Option<PathBuf> {
    if let Some(p) = &a.slurm_topology {
        return Some(p.clone());
    }
    let from_slurm = a.hosts.is_none()
        && std::env::var("CKPTFS_NODES").map_or(true, |v| v.trim().is_empty())
        && std::env::var("SLURM_JOB_NODELIST").is_ok_and(|v| !v.trim().is_empty());
    if !from_slurm || a.topology.is_some() {
        return None;
    }
    let dir = std::env::var_os("SLURM_CONF")
        .map(PathBuf::from)
        .and_then(|c| c.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/etc/slurm"));
    Some(dir.join("topology.conf")).filter(|p| p.is_file())
}

fn init(a: InitArgs) -> Result<i32> {
    let job = a.job.clone().unwrap_or_else(default_job);
    let mut redundancy = Redundancy {
        scheme: a.scheme.parse::<Scheme>()?,
        copies: a.copies,
        set_size: a.set_size,
        ..Redundancy::default()
    };
    // Erasure sets (issue 32): --redundancy xor|rs:K|partner:K.
    match a.redundancy.as_deref() {
        None => {}
        Some(r) if r.starts_with("partner:") => {
            redundancy.copies = r["partner:".len()..]
                .parse()
                .with_context(|| format!("--redundancy {r}: expected partner:K"))?;
        }
        Some(r) => redundancy.erasure = Some(r.parse()?),
    }
    let secret_path = a
        .secret_file
        .clone()
        .unwrap_or_else(|| a.out.with_extension("secret"));
    // In the file: the bare name when the secret sits beside the cluster file
    // (resolved relative to it), else the path as given.
    let out_dir = a.out.parent().filter(|d| !d.as_os_str().is_empty());
    let secret_dir = secret_path.parent().filter(|d| !d.as_os_str().is_empty());
    let secret_ref = match (out_dir, secret_dir, secret_path.file_name()) {
        (a, b, Some(name)) if a == b => PathBuf::from(name),
        _ => std::path::absolute(&secret_path).unwrap_or(secret_path.clone()),
    };
    let mut cluster = if let Some(n) = a.local {
        Cluster::local(n, &job, a.port)?
    } else {
        let opts = HostListOptions {
            job: job.clone(),
            port: a.port,
            store: None,
            topology: match (&a.topology, slurm_topology_file(&a)) {
                (Some(p), _) => Some(Topology::load(p)?),
                (None, Some(p)) => {
                    let hosts = ckptfs_cluster::hostlist::expand(&host_list(&a).unwrap_or_default())?;
                    eprintln!("cluster init: failure domains from Slurm's {}", p.display());
                    Some(crate::slurm_topology::load(&p, &hosts)?)
                }
                (None, None) => None,
            },
            redundancy,
            secret_file: None,
        };
        match &a.hosts {
            Some(list) => Cluster::from_host_list(list, &opts)?,
            None => Cluster::from_env(&ProcessEnv, &opts)?,
        }
    };
    // The allocation's host names, before any node takes a previous node's id.
    let placed = match &a.previous {
        Some(p) => {
            let prev = Cluster::load(p).with_context(|| format!("--previous {}", p.display()))?;
            let ids: Vec<String> = prev.nodes.iter().map(|n| n.id.clone()).collect();
            let placed = crate::cluster_remap::remap(&ids, &mut cluster.nodes);
            for m in placed.iter().filter(|m| m.host != m.id) {
                eprintln!(
                    "cluster init: host {} takes the place of node {} (not in this allocation)",
                    m.host, m.id
                );
            }
            placed
        }
        None => cluster
            .nodes
            .iter()
            .map(|n| crate::cluster_remap::Placed {
                host: n.id.clone(),
                id: n.id.clone(),
            })
            .collect(),
    };
    if let Some(host) = &a.one_host {
        for (i, n) in cluster.nodes.iter_mut().enumerate() {
            let port = a.port as usize + i;
            if port > u16::MAX as usize {
                bail!("--one-host: {} nodes from port {} pass 65535", i + 1, a.port);
            }
            n.addr = format!("{host}:{port}");
            n.store = format!("{job}.{}", n.id);
        }
    }
    if cluster.pool.is_none() {
        // The pool manager: the first node, on its host at the daemon port + 100;
        // metadata and drained chunks beside the cluster file (docs/pool.md).
        let first = &cluster.nodes[0];
        let port = first.port() as usize + 100;
        let addr = format!("{}:{port}", first.host());
        if port <= u16::MAX as usize && cluster.nodes.iter().all(|n| n.addr != addr) {
            let mut p = ckptfs_cluster::PoolMap::new(&first.id, &addr);
            let stem = a
                .out
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            p.meta_dir = Some(PathBuf::from(format!("{stem}.pool-meta")));
            p.drain_dir = Some(PathBuf::from(format!("{stem}.pool-drain")));
            cluster.pool = Some(p);
        }
    }
    cluster.redundancy = redundancy;
    cluster.heartbeat_ms = a.heartbeat_ms;
    cluster.secret_file = Some(secret_ref);
    cluster.encrypt = a.encrypt;
    cluster.mem_size = a.mem;
    // Per-node key files beside the cluster file: `<out>.keys/<node>.key`.
    let keys_dir = a.out.with_extension("keys");
    cluster.keys_dir = keys_dir.file_name().map(PathBuf::from);
    cluster.validate()?;
    // Refuse a plan that cannot work before writing anything.
    let plan = cluster.plan()?;
    let sets = ckptfs_erasure::cluster_sets(&cluster).transpose()?;
    for p in [&a.out, &secret_path] {
        if !a.force && std::fs::symlink_metadata(p).is_ok() {
            bail!("{} exists; not overwritten (use --force)", p.display());
        }
    }
    let master = Secret::generate()?;
    master.create(&secret_path, a.force)?;
    write_new(&a.out, cluster.to_toml().as_bytes(), a.force)
        .with_context(|| format!("writing {}", a.out.display()))?;
    if let Some(m) = &a.node_map {
        write_new(m, crate::cluster_remap::render(&placed).as_bytes(), true)
            .with_context(|| format!("writing {}", m.display()))?;
    }
    // Loaded back so relative paths resolve against the file just written.
    let mut written = cluster.clone();
    written.source = Some(a.out.clone());
    written.write_node_keys(&master, a.force)?;
    println!(
        "wrote {} ({} nodes, {} with {} partner cop{} per file), the job secret {} and one key \
         file per node in {}/ (mode 0600; give each node only its own <node>.key)",
        a.out.display(),
        cluster.nodes.len(),
        plan.scheme,
        plan.copies,
        if plan.copies == 1 { "y" } else { "ies" },
        secret_path.display(),
        keys_dir.display()
    );
    if let Some(m) = cluster.mem_size {
        println!(
            "each node's store: {} of memory (mem_size in the file; a flag, CKPTFS_MEM_SIZE or a \
             settings file overrides it)",
            crate::agent_args::human(m)
        );
    }
    for w in &plan.warnings {
        println!("warning: {w}");
    }
    if let Some(sets) = sets {
        println!(
            "erasure sets: {}, {} set(s) of up to {} nodes (ckptfs cluster plan shows them)",
            sets.scheme,
            sets.sets.len(),
            sets.size
        );
        for w in &sets.warnings {
            println!("warning: {w}");
        }
    }
    Ok(0)
}

/// Writes a new file (O_EXCL|O_NOFOLLOW, mode 0644); with `force` unlinks first.
fn write_new(path: &Path, bytes: &[u8], force: bool) -> std::io::Result<()> {
    if force {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn plan(a: PlanArgs) -> Result<i32> {
    let Some(path) = a.cluster else {
        bail!("cluster plan needs --cluster FILE (or CKPTFS_CLUSTER)");
    };
    let cluster = Cluster::load(&path)?;
    let plan = cluster.plan()?;
    let sets = ckptfs_erasure::cluster_sets(&cluster).transpose()?;
    if a.json {
        let v = serde_json::json!({
            "job": cluster.job,
            "cluster_file": path,
            "plan": plan,
            "survives_every_domain": plan.survives_every_domain(),
            "erasure": sets,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    print!("{}", render(&cluster, &plan));
    if let Some(sets) = &sets {
        print!("{}", render_sets(sets));
    }
    Ok(0)
}

/// The erasure sets as text: members, then what each domain's loss destroys.
fn render_sets(p: &ckptfs_erasure::SetPlan) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\nerasure sets: {} over sets of at most {} nodes (each set survives {} lost member{})\n",
        p.scheme,
        p.size,
        p.tolerates,
        if p.tolerates == 1 { "" } else { "s" }
    );
    let mut rows = vec![vec!["set".to_string(), "level id".into(), "members".into()]];
    for s in &p.sets {
        rows.push(vec![
            s.name.clone(),
            format!("erasure:{}", s.name),
            s.members.join(","),
        ]);
    }
    table(&mut o, &rows);
    for w in &p.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    if !p.domain_loss.is_empty() {
        let _ = writeln!(o);
        let mut rows = vec![vec![
            "failure domain".to_string(),
            "nodes".into(),
            "its loss destroys the parts of".into(),
        ]];
        for d in &p.domain_loss {
            rows.push(vec![
                format!("{}={}", d.level, d.value),
                d.nodes.join(","),
                if d.destroyed.is_empty() {
                    "nothing".into()
                } else {
                    d.destroyed.join(",")
                },
            ]);
        }
        table(&mut o, &rows);
    }
    let _ = writeln!(
        o,
        "\n{}",
        if p.survives_every_domain() {
            "with erasure sets, every part survives the loss of any one failure domain"
        } else {
            "with erasure sets, some failure domain's loss destroys parts (see above)"
        }
    );
    o
}

/// The plan as text tables.
fn render(c: &Cluster, plan: &ckptfs_cluster::Plan) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let copies = if plan.copies == 1 { "copy" } else { "copies" };
    let levels = if c.domains.is_empty() {
        "none (each node is its own domain)".to_string()
    } else {
        c.domains.join(" > ")
    };
    let _ = writeln!(
        o,
        "cluster {}: {} nodes, {} with {} partner {copies} per file; failure domains: {levels}\n",
        c.job,
        c.nodes.len(),
        plan.scheme,
        plan.copies
    );
    let mut rows = vec![vec![
        "node".to_string(),
        "addr".into(),
        "domains".into(),
        "partners".into(),
        "keeps copies of".into(),
        "all partners outside its".into(),
        "if a partner is down".into(),
    ]];
    for (n, p) in c.nodes.iter().zip(&plan.nodes) {
        let doms: Vec<String> = c
            .domains
            .iter()
            .map(|l| format!("{l}={}", n.domain(l).unwrap_or("?")))
            .collect();
        rows.push(vec![
            n.id.clone(),
            n.addr.clone(),
            if doms.is_empty() {
                "-".into()
            } else {
                doms.join(",")
            },
            p.partners.join(","),
            if p.holds_for.is_empty() {
                "-".into()
            } else {
                p.holds_for.join(",")
            },
            p.separated_at.clone().unwrap_or_else(|| "node".into()),
            p.replacements
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join(","),
        ]);
    }
    table(&mut o, &rows);
    if !plan.warnings.is_empty() {
        let _ = writeln!(o);
        for w in &plan.warnings {
            let _ = writeln!(o, "warning: {w}");
        }
    }
    if !plan.domain_loss.is_empty() {
        let _ = writeln!(o);
        let mut rows = vec![vec![
            "failure domain".to_string(),
            "nodes".into(),
            "its loss destroys the checkpoints of".into(),
        ]];
        for d in &plan.domain_loss {
            rows.push(vec![
                format!("{}={}", d.level, d.value),
                d.nodes.join(","),
                if d.destroyed.is_empty() {
                    "nothing".into()
                } else {
                    d.destroyed.join(",")
                },
            ]);
        }
        table(&mut o, &rows);
    }
    let _ = writeln!(
        o,
        "\n{}",
        if plan.survives_every_domain() {
            "every checkpoint survives the loss of any one failure domain (and of any one node)"
        } else {
            "some failure domain's loss destroys checkpoints (see above); they are safe only once drained"
        }
    );
    o
}

fn table(o: &mut String, rows: &[Vec<String>]) {
    use std::fmt::Write;
    let cols = rows[0].len();
    let w: Vec<usize> = (0..cols)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        let _ = writeln!(o, "{}", line.join("  ").trim_end());
    }
}
