//! Agent settings and vertical placement (checkpoint orchestration, section II.B): each
//! node's files go to one destination target, chosen by a mapping file or by a
//! balanced assignment of node ids.

use crate::error::AgentError;
use crate::sys::Priority;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A place files can go: a directory (on one I/O server) and, on Lustre, one OST.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Target {
    /// Root directory; a store path `/a/b` is published as `DIR/a/b`.
    pub dir: PathBuf,
    /// Lustre OST index for one-stripe files (`lfs setstripe -c 1 -i OST`).
    pub ost: Option<u32>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ost {
            Some(o) => write!(f, "{} (OST {o})", self.dir.display()),
            None => write!(f, "{}", self.dir.display()),
        }
    }
}

/// Targets from `--dest DIR[,DIR...]` and optional `--ost I[,I...]` (one directory
/// spread over several OSTs: every OST of every directory is a target).
pub fn targets(dirs: &[PathBuf], osts: &[u32]) -> Vec<Target> {
    let mut out = Vec::new();
    for d in dirs {
        if osts.is_empty() {
            out.push(Target {
                dir: d.clone(),
                ost: None,
            });
        }
        for &o in osts {
            out.push(Target {
                dir: d.clone(),
                ost: Some(o),
            });
        }
    }
    out
}

/// Everything the agent needs to know.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Destination targets (at least one).
    pub targets: Vec<Target>,
    /// This node's id (vertical placement, manifest and temporary file names).
    pub node_id: String,
    /// Mapping file: `NODE TARGET` lines (see [`choose_target`]).
    pub map_file: Option<PathBuf>,
    /// IO threads writing one file's blocks in parallel (marshaling on). One sequential
    /// writer is fastest for buffered writes to a local file system; more help with
    /// O_DIRECT or a PFS that serves several requests of one file at once.
    pub io_threads: usize,
    /// Bytes per gathered write call.
    pub write_size: usize,
    /// Write aligned blocks with O_DIRECT straight from the data region.
    pub direct: bool,
    /// Bandwidth cap in bytes per second.
    pub max_bw: Option<f64>,
    /// CPU and IO priority of the agent's threads.
    pub priority: Priority,
    /// Staged marshaling: one file flushed at a time, pipelined with staging the next.
    pub marshal: bool,
    /// Drain only every Nth checkpoint directory (1 = every file).
    pub every: u32,
    /// Unlink the store copy after a verified drain.
    pub evict: bool,
    /// How often the daemon looks for new complete files.
    pub interval: Duration,
    /// Longest wait before retrying a file whose drain failed on the destination.
    pub retry_max: Duration,
    /// The `lfs` program, if Lustre striping should be set.
    pub lfs: Option<PathBuf>,
    /// Which files go to the PFS when the agent is built with [`crate::Agent::new`]
    /// (`ckptfs agent`, the node daemon's drain): None = [`crate::DrainPolicy`] from
    /// `every`/`evict`; `ckptfs_datasets::FlushPolicy` drains only the datasets marked
    /// for flush.
    pub policy: Option<std::sync::Arc<dyn crate::MovePolicy>>,
}

impl AgentConfig {
    /// Defaults for draining into `dirs`, node id from the host name.
    pub fn new(dirs: &[PathBuf]) -> AgentConfig {
        AgentConfig {
            targets: targets(dirs, &[]),
            node_id: hostname_node_id(),
            map_file: None,
            io_threads: 1,
            write_size: 8 << 20,
            direct: false,
            max_bw: None,
            priority: Priority::Low,
            marshal: true,
            every: 1,
            evict: false,
            interval: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            lfs: crate::dest::find_lfs(),
            policy: None,
        }
    }

    /// Check the settings and pick this node's target.
    pub fn target(&self) -> Result<&Target, AgentError> {
        check_node_id(&self.node_id)?;
        if self.targets.is_empty() {
            return Err(AgentError::Config("no destination given".into()));
        }
        if self.io_threads == 0 || self.every == 0 || self.write_size == 0 {
            return Err(AgentError::Config(
                "io threads, --every and write size must be >= 1".into(),
            ));
        }
        if self.targets.iter().any(|t| t.ost.is_some()) && self.lfs.is_none() {
            return Err(AgentError::Config("OST targets need `lfs` on PATH".into()));
        }
        let map = match &self.map_file {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .map_err(|e| AgentError::Config(format!("mapping file {}: {e}", p.display())))?,
            ),
            None => None,
        };
        let i = choose_target(&self.node_id, &self.targets, map.as_deref())?;
        Ok(&self.targets[i])
    }
}

/// Node ids are used in file names: 1-64 characters from `A-Z a-z 0-9 . _ -`.
pub fn check_node_id(id: &str) -> Result<(), AgentError> {
    if id.is_empty()
        || id.len() > 64
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        || id.starts_with('.')
    {
        return Err(AgentError::Config(format!(
            "node id {id:?}: use 1-64 characters from A-Z a-z 0-9 . _ - (not starting with .)"
        )));
    }
    Ok(())
}

/// The short host name, made safe for file names.
pub fn hostname_node_id() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } == 0;
    let name = if ok {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    let short: String = name
        .split('.')
        .next()
        .unwrap_or("")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if short.is_empty() {
        "node".into()
    } else {
        short
    }
}

/// Index of node `node`'s target.
///
/// Mapping file: one `NODE TARGET` pair per line, `#` starts a comment, `*` as NODE
/// is the default for unlisted nodes; TARGET is a 0-based index into the target list
/// or one of the destination directories (with several OSTs of one directory, use
/// indexes). Nodes the file does not cover get the balanced assignment: the number
/// at the end of the node id (`nid00017` -> 17) modulo the number of targets, so
/// consecutively numbered nodes are spread evenly; ids without a number are hashed.
pub fn choose_target(node: &str, targets: &[Target], map: Option<&str>) -> Result<usize, AgentError> {
    let n = targets.len();
    if n == 0 {
        return Err(AgentError::Config("no destination given".into()));
    }
    if let Some(text) = map {
        let mut default = None;
        for (lineno, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut it = line.split_whitespace();
            let (Some(key), Some(val), None) = (it.next(), it.next(), it.next()) else {
                return Err(AgentError::Config(format!(
                    "mapping file line {}: expected `NODE TARGET`",
                    lineno + 1
                )));
            };
            let idx = match val.parse::<usize>() {
                Ok(i) if i < n => i,
                Ok(i) => {
                    return Err(AgentError::Config(format!(
                        "mapping file line {}: target {i} out of range (0..{n})",
                        lineno + 1
                    )))
                }
                Err(_) => targets
                    .iter()
                    .position(|t| t.dir == Path::new(val))
                    .ok_or_else(|| {
                        AgentError::Config(format!(
                            "mapping file line {}: {val} is not one of the destinations",
                            lineno + 1
                        ))
                    })?,
            };
            if key == node {
                return Ok(idx);
            }
            if key == "*" {
                default = Some(idx);
            }
        }
        if let Some(d) = default {
            return Ok(d);
        }
    }
    Ok(balanced(node, n))
}

fn balanced(node: &str, n: usize) -> usize {
    let digits: String = node
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if let Ok(v) = digits.parse::<u128>() {
        return (v % n as u128) as usize;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % n as u64) as usize
}

impl crate::mover::DrainPolicy {
    /// `--every` and `--evict` of `cfg` (here, not in the mover module: the
    /// configuration names the policy, never the other way round).
    pub fn from_config(cfg: &AgentConfig) -> crate::mover::DrainPolicy {
        crate::mover::DrainPolicy {
            every: cfg.every.max(1),
            evict: cfg.evict,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: usize) -> Vec<Target> {
        targets(
            &(0..n)
                .map(|i| PathBuf::from(format!("/d{i}")))
                .collect::<Vec<_>>(),
            &[],
        )
    }

    #[test]
    fn balanced_spreads_numbered_nodes_evenly() {
        let tg = t(3);
        let mut count = [0; 3];
        for i in 0..12 {
            count[choose_target(&format!("nid{i:05}"), &tg, None).unwrap()] += 1;
        }
        assert_eq!(count, [4, 4, 4]);
    }

    #[test]
    fn mapping_file_by_index_path_and_default() {
        let tg = t(3);
        let map = "# comment\nnodeA 2\nnodeB /d1  # by path\n* 0\n";
        assert_eq!(choose_target("nodeA", &tg, Some(map)).unwrap(), 2);
        assert_eq!(choose_target("nodeB", &tg, Some(map)).unwrap(), 1);
        assert_eq!(choose_target("other7", &tg, Some(map)).unwrap(), 0);
        assert!(choose_target("x", &tg, Some("x 5")).is_err());
        assert!(choose_target("x", &tg, Some("x /nope")).is_err());
        assert!(choose_target("x", &tg, Some("x")).is_err());
        // Not covered and no default: balanced.
        assert_eq!(choose_target("n5", &tg, Some("n1 0")).unwrap(), 2);
    }

    #[test]
    fn osts_multiply_targets() {
        let tg = targets(&[PathBuf::from("/l")], &[3, 7]);
        assert_eq!(tg.len(), 2);
        assert_eq!(tg[1].ost, Some(7));
    }
}
