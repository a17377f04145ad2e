//! The dataset rules, read from the one settings table (`ckptfs-settings`) and the
//! job's environment.

use crate::error::{DatasetError, Result};
use std::path::PathBuf;

/// When a transparent dataset (a directory matching the pattern) is complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteRule {
    /// When N files under it are closed complete.
    Files(u32),
    /// When a file of this name appears in it (written by the application last).
    Marker(String),
}

impl std::str::FromStr for CompleteRule {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let s = s.trim();
        if let Some(n) = s.strip_prefix("files:") {
            return match n.trim().parse::<u32>() {
                Ok(n) if n > 0 => Ok(CompleteRule::Files(n)),
                _ => Err(format!("{s:?}: files:N needs N >= 1")),
            };
        }
        if let Some(m) = s.strip_prefix("marker:") {
            let m = m.trim();
            if m.is_empty() || m.contains('/') || m == "." || m == ".." {
                return Err(format!("{s:?}: marker:NAME needs a file name"));
            }
            return Ok(CompleteRule::Marker(m.to_string()));
        }
        Err(format!("{s:?} is not files:N or marker:NAME"))
    }
}

/// How alarms turn into failure probabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureRule {
    /// REMEM: precision with an alarm, 1 - recall without.
    Remem,
    /// Bayes with the base rate of failures in the next interval (the default).
    Posterior,
}

impl FailureRule {
    /// Its name in settings and records.
    pub fn name(self) -> &'static str {
        match self {
            FailureRule::Remem => "remem",
            FailureRule::Posterior => "posterior",
        }
    }
}

/// Everything the dataset operations need to know.
#[derive(Debug, Clone)]
pub struct Config {
    /// Job the datasets belong to (`CKPTFS_JOB`, default `default`: ids continue across
    /// requeued jobs, as SCR's index does).
    pub job: String,
    /// This participant (rank) (`CKPTFS_RANK`, the MPI launchers' variables, else `0`).
    pub rank: String,
    /// Participants expected per dataset (`CKPTFS_NRANKS`, `OMPI_COMM_WORLD_SIZE`,
    /// `PMI_SIZE`, else 1).
    pub world: u32,
    /// This node's id (alarms): `CKPTFS_NODE_ID`, else the host name.
    pub node: String,
    /// Transparent mode: a store-path glob of dataset directories.
    pub pattern: Option<String>,
    /// Transparent mode: when a matching directory is complete.
    pub complete_rule: Option<CompleteRule>,
    /// Complete datasets kept in node memory (0: all).
    pub keep_memory: u32,
    /// Flush every Nth dataset whatever the policy says (0: policy only).
    pub flush_every: u32,
    /// Flushed datasets kept on the PFS (0: all).
    pub keep_pfs: u32,
    /// `dataset_partner_copies`: the node daemon's partner copies follow the datasets
    /// (true: `complete`, the default, or `decision`) or take every complete file
    /// (`all`).
    pub partner_copies_follow_decision: bool,
    /// `dataset_partner_copies = decision`: a complete dataset is copied only when its
    /// level decision (REMEM's adaptive choice) says `partner`; with `complete` (the
    /// default) every complete dataset is protected beyond its node.
    pub partner_copies_adaptive: bool,
    /// Node MTBF, seconds.
    pub node_mtbf: f64,
    /// Nodes of the job.
    pub job_nodes: u32,
    /// Predictor precision.
    pub precision: f64,
    /// Predictor recall.
    pub recall: f64,
    /// Failure rule.
    pub rule: FailureRule,
    /// The job's checkpoint interval for the policy, seconds (None: measured).
    pub interval: Option<f64>,
    /// PFS bandwidth used until transfers were measured, bytes/s.
    pub pfs_bandwidth: f64,
    /// Drain destinations (PFS level), for levels and restart.
    pub dests: Vec<PathBuf>,
    /// Ranks on this node (`CKPTFS_LOCAL_NRANKS`, `OMPI_COMM_WORLD_LOCAL_SIZE`,
    /// `MPI_LOCALNRANKS`, `SLURM_NTASKS_PER_NODE`); None: ranks / nodes, rounded up.
    pub local_nranks: Option<u32>,
}

fn num(s: &ckptfs_settings::Settings, key: &str) -> Result<f64> {
    let v = s.row(key).map(|r| r.value.clone()).unwrap_or_default();
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| DatasetError::Invalid(format!("setting {key}: {v:?} is not a non-negative number")))
}

/// Strip a mount prefix (`/ckpt/step.*` with mount `/ckpt` is store path `/step.*`).
fn store_pattern(p: &str, mounts: &[String]) -> String {
    for m in mounts {
        if let Some(rest) = p.strip_prefix(m.as_str()) {
            if rest.starts_with('/') {
                return rest.to_string();
            }
        }
    }
    p.to_string()
}

impl Config {
    /// From resolved settings and the environment.
    pub fn from_settings(
        s: &ckptfs_settings::Settings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        let text = |k: &str| {
            s.row(k)
                .map(|r| r.value.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let pattern = text("dataset_pattern").map(|p| store_pattern(&p, &s.mounts));
        if let Some(p) = &pattern {
            if !p.starts_with('/') {
                return Err(DatasetError::Invalid(format!(
                    "setting dataset_pattern: {p:?} is not an absolute path glob"
                )));
            }
        }
        let complete_rule = match text("dataset_complete") {
            Some(t) => Some(
                t.parse::<CompleteRule>()
                    .map_err(|e| DatasetError::Invalid(format!("setting dataset_complete: {e}")))?,
            ),
            None => None,
        };
        if pattern.is_some() && complete_rule.is_none() {
            return Err(DatasetError::Invalid(
                "setting dataset_pattern needs dataset_complete (files:N or marker:NAME)".into(),
            ));
        }
        let rule = match text("failure_rule").as_deref() {
            None | Some("posterior") => FailureRule::Posterior,
            Some("remem") => FailureRule::Remem,
            Some(o) => {
                return Err(DatasetError::Invalid(format!(
                    "setting failure_rule: {o:?} is not posterior or remem"
                )))
            }
        };
        let precision = num(s, "predictor_precision")?;
        let recall = num(s, "predictor_recall")?;
        if precision > 1.0 || recall > 1.0 {
            return Err(DatasetError::Invalid(
                "predictor precision and recall are in 0..1".into(),
            ));
        }
        let node_mtbf = num(s, "node_mtbf")?;
        if node_mtbf <= 0.0 {
            return Err(DatasetError::Invalid("setting node_mtbf must be > 0".into()));
        }
        let count = |k: &str| num(s, k).map(|x| x as u32);
        // Job identity: read in one place (ckptfs_settings::job).
        let id = ckptfs_settings::job::JobIdentity::from_env(env);
        let world = id.world.unwrap_or(1);
        let job = id.job;
        check_component("CKPTFS_JOB", &job)?;
        let rank = id.rank.unwrap_or_else(|| "0".into());
        check_component("rank", &rank)?;
        let node = id.node_id.unwrap_or_else(ckptfs_agent::config::hostname_node_id);
        let dests = id.dests;
        Ok(Config {
            job,
            rank,
            world,
            node,
            pattern,
            complete_rule,
            keep_memory: count("dataset_keep_memory")?,
            flush_every: count("dataset_flush_every")?,
            keep_pfs: count("dataset_keep_pfs")?,
            partner_copies_follow_decision: match text("dataset_partner_copies").as_deref() {
                None | Some("complete") | Some("decision") => true,
                Some("all") => false,
                Some(other) => {
                    return Err(DatasetError::Invalid(format!(
                        "setting dataset_partner_copies: {other:?} is not complete, decision or all"
                    )))
                }
            },
            partner_copies_adaptive: text("dataset_partner_copies").as_deref() == Some("decision"),
            node_mtbf,
            job_nodes: count("job_nodes")?.max(1),
            precision,
            recall,
            rule,
            interval: Some(num(s, "checkpoint_interval")?).filter(|t| *t > 0.0),
            pfs_bandwidth: num(s, "pfs_bandwidth")?.max(1.0),
            dests,
            local_nranks: id.local_nranks,
        })
    }

    /// Ranks expected on this node of a cluster of `nodes` nodes.
    pub fn local_ranks(&self, nodes: usize) -> u32 {
        self.local_nranks
            .unwrap_or_else(|| self.world.div_ceil((nodes as u32).max(1)))
            .max(1)
    }

    /// Defaults with the given job (tests, tools).
    pub fn for_job(job: &str) -> Config {
        let s = ckptfs_settings::from_env(&|_| None).expect("default settings resolve");
        let mut c = Config::from_settings(&s, &|_| None).expect("default settings are valid");
        c.job = job.to_string();
        c
    }
}

/// A job id, rank or node id used as one path component.
pub fn check_component(what: &str, v: &str) -> Result<()> {
    let ok = !v.is_empty()
        && v.len() <= 64
        && v != "."
        && v != ".."
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(DatasetError::Invalid(format!(
            "{what} {v:?}: use 1-64 letters, digits, '.', '_' or '-'"
        )))
    }
}

/// Glob match of a whole path: `*` and `?` do not cross `/`.
pub fn glob_match(pat: &str, s: &str) -> bool {
    fn m(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => m(&p[1..], s) || (!s.is_empty() && s[0] != b'/' && m(p, &s[1..])),
            (Some(b'?'), Some(c)) if *c != b'/' => m(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => m(&p[1..], &s[1..]),
            _ => false,
        }
    }
    m(pat.as_bytes(), s.as_bytes())
}
