//! The questions asked of other nodes' daemons ([`Request`], answered by one
//! [`Reply`]; the list is in the `cluster` module's documentation) and the asker that
//! connects, authenticates and asks, one node or several at once: shared by the job's
//! other nodes (`ClusterNodes`) and the set levels that ask (the partner copies).

use crate::error::{NodeError, Result};
use crate::peer::blocking::{Conn, Within};
use crate::peer::Msg;
use ckptfs_cluster::{Cluster, NodeKeys};
use ckptfs_datasets::{Dataset, Want};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A question to another node's daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Its dataset records of `job`.
    Records {
        /// Job id.
        job: String,
    },
    /// Its restart rounds of `job` (failure case D9).
    Restarts {
        /// Job id.
        job: String,
    },
    /// Keep this job-wide verdict: `dataset` is complete, with every node's part
    /// (failure case D7b: the verdict survives the loss of the nodes that reached it).
    Agreed {
        /// The dataset, complete, with `nodes`.
        dataset: Box<Dataset>,
    },
    /// Its id floor of every job it knows (failure case D10).
    Floors,
    /// Raise its id floor of `job` to at least `next_id` (failure case D10).
    Floor {
        /// Job id.
        job: String,
        /// The next id the job may give.
        next_id: u64,
    },
    /// Which of `owner`'s `files` it holds with exactly that content.
    Holds {
        /// Node whose files these are.
        owner: String,
        /// The files.
        files: Vec<Want>,
    },
    /// Its checkpoint directories under `root` that no record of `job` lists.
    Unrecorded {
        /// Job id.
        job: String,
        /// Store directory to look under.
        root: String,
    },
}

/// An answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reply {
    /// Answer to `records`.
    Records(Vec<Dataset>),
    /// Answer to `holds`: one flag per file asked.
    Holds(Vec<bool>),
    /// Answer to `restarts`.
    Restarts(Vec<ckptfs_datasets::restart_round::Round>),
    /// Answer to `floors`: per job, the next id this node would give.
    Floors(BTreeMap<String, u64>),
    /// Answer to `unrecorded`.
    Unrecorded(Vec<crate::unrecorded::Unrecorded>),
    /// The verdict (or floor) is kept.
    Kept,
    /// The question could not be answered.
    Error(String),
}

/// What a question to a peer needs (shared with the threads that ask, and with the set
/// levels that ask).
pub(crate) struct Asker {
    pub(crate) cluster: Cluster,
    pub(crate) me: String,
    keys: NodeKeys,
    pub(crate) connect_timeout: Duration,
    answer_timeout: Duration,
}

impl Asker {
    /// Node `me` of `cluster`, asking with its own key; a node that does not accept a
    /// connection within `connect_timeout` counts as lost.
    pub(crate) fn new(cluster: Cluster, me: &str, connect_timeout: Duration) -> Result<Asker> {
        cluster.node(me).map_err(|e| NodeError::Cluster(e.to_string()))?;
        let keys = cluster
            .node_keys(me)
            .map_err(|e| NodeError::Cluster(e.to_string()))?;
        Ok(Asker {
            cluster,
            me: me.to_string(),
            keys,
            connect_timeout,
            answer_timeout: Duration::from_secs(300),
        })
    }

    /// Connect and authenticate. A refused connection fails at once (no daemon there);
    /// a slow one (a loaded node) is tried once more with twice the time before the
    /// node counts as lost.
    fn connect(&self, node: &str) -> std::result::Result<Conn, String> {
        let addr = self.cluster.node(node).map_err(|e| e.to_string())?.addr.clone();
        // The transport's own bound on a connection and its handshake.
        let shake = crate::peer::conn_config(&self.cluster).handshake_timeout;
        let mut wait = self.connect_timeout;
        for attempt in 0..2 {
            match Conn::dial(&addr, &self.me, node, &self.keys, &self.cluster, wait) {
                Ok(c) => return Ok(c),
                // Not connected within the wait: once more with twice the time.
                Err(ckptfs_transport::TransportError::Timeout { .. }) if wait <= shake => {
                    if attempt == 0 {
                        wait *= 2;
                    }
                }
                Err(e) => return Err(format!("{addr}: {}", crate::peer::dial_error(node, &addr, e))),
            }
        }
        Err(format!(
            "{addr}: no answer in {:?} and then {wait:?}",
            self.connect_timeout
        ))
    }

    pub(crate) fn ask(&self, node: &str, req: &Request) -> std::result::Result<Reply, String> {
        let t0 = Instant::now();
        let mut c = self.connect(node)?;
        let body = serde_json::to_string(req).map_err(|e| e.to_string())?;
        let late = || format!("no answer in {:?}", self.answer_timeout);
        c.send(Msg::Query(body)).map_err(|e| e.to_string())?;
        let left = self
            .answer_timeout
            .checked_sub(t0.elapsed())
            .filter(|d| !d.is_zero())
            .ok_or_else(late)?;
        let r = match c.recv_within(left).map_err(|e| e.to_string())? {
            Within::Msg(Msg::QueryReply(text)) => {
                serde_json::from_str::<Reply>(&text).map_err(|e| e.to_string())
            }
            Within::Msg(other) => Err(format!("answered {}", other.name())),
            Within::Closed => Err("closed the connection".into()),
            Within::Late => Err(late()),
        };
        match r? {
            Reply::Error(e) => Err(e),
            ok => Ok(ok),
        }
    }

    /// Ask `nodes` (never this one) the same question at once: one thread per node,
    /// each within the connect and answer timeouts. A thread that cannot be started
    /// leaves its node out, as does one that panicked.
    pub(crate) fn ask_nodes(
        &self,
        nodes: &[String],
        req: &Request,
    ) -> BTreeMap<String, std::result::Result<Reply, String>> {
        let others: Vec<&String> = nodes.iter().filter(|n| **n != self.me).collect();
        let asker = self;
        std::thread::scope(|s| {
            let asking: Vec<_> = others
                .into_iter()
                .filter_map(|n| {
                    let t = std::thread::Builder::new()
                        .name("ckptfs-ask".into())
                        .spawn_scoped(s, move || asker.ask(n, req));
                    match t {
                        Ok(t) => Some((n, t)),
                        Err(e) => {
                            tracing::warn!("cannot start a thread to ask {n}: {e}");
                            None
                        }
                    }
                })
                .collect();
            asking
                .into_iter()
                .filter_map(|(n, t)| t.join().ok().map(|r| (n.clone(), r)))
                .collect()
        })
    }
}

/// Which of `files` of node `owner` each node of `ask` holds with exactly this content,
/// asked in questions of at most [`crate::holds::MAX_HOLDS_FILES`] files; a node that
/// fails one is left out.
pub(crate) fn holders(
    asker: &Asker,
    owner: &str,
    files: &[Want],
    ask: &[String],
) -> BTreeMap<String, Vec<bool>> {
    let mut out: BTreeMap<String, Vec<bool>> = BTreeMap::new();
    let mut failed = std::collections::BTreeSet::new();
    let mut batches: Vec<&[Want]> = files.chunks(crate::holds::MAX_HOLDS_FILES).collect();
    if batches.is_empty() {
        batches.push(files);
    }
    for batch in batches {
        let req = Request::Holds {
            owner: owner.to_string(),
            files: batch.to_vec(),
        };
        for (n, r) in asker.ask_nodes(ask, &req) {
            match r {
                Ok(Reply::Holds(v)) if v.len() == batch.len() => out.entry(n).or_default().extend(v),
                _ => {
                    failed.insert(n);
                }
            }
        }
    }
    out.retain(|n, v| !failed.contains(n) && v.len() == files.len());
    out
}
