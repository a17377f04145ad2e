//! Connections of the pool's roles over the authenticated peer transport.

use crate::msg::{parse_reply, parse_request, Reply, Request};
use crate::{PoolError, Result};
use ckptfs_cluster::{pair_key, Cluster, NodeKeys, PoolMap};
use ckptfs_transport::{self as tp, ConnConfig, Identity, Msg, Protection};
use std::collections::BTreeSet;
use std::time::Duration;

/// Who a pool role is and how it reaches the others: its node id, the cluster map, its
/// keys (one per pair of nodes, plus one with itself, so that the client and the
/// manager or a benefactor may share a node).
#[derive(Debug, Clone)]
pub struct PoolNet {
    /// The cluster map.
    pub cluster: Cluster,
    /// Its `[pool]` section.
    pub pool: PoolMap,
    /// This role's node id.
    pub me: String,
    keys: NodeKeys,
}

impl PoolNet {
    /// The pool roles of node `me` of `cluster` (which must have a `[pool]` section).
    pub fn new(cluster: &Cluster, me: &str) -> Result<PoolNet> {
        let pool = cluster
            .pool
            .clone()
            .ok_or_else(|| PoolError::Config("the cluster map has no [pool] section".into()))?;
        let mut keys = cluster
            .node_keys(me)
            .map_err(|e| PoolError::Config(e.to_string()))?;
        if let Ok(master) = cluster.secret() {
            keys = keys.with_pair(me, pair_key(&master, &cluster.job, me, me));
        }
        Ok(PoolNet {
            cluster: cluster.clone(),
            pool,
            me: me.to_string(),
            keys,
        })
    }

    /// Connection settings: only nodes of the map, frames protected as it says.
    pub fn config(&self) -> ConnConfig {
        ConnConfig {
            protection: if self.cluster.encrypt {
                Protection::Encrypted
            } else {
                Protection::Integrity
            },
            allowed_peers: Some(
                self.cluster
                    .nodes
                    .iter()
                    .map(|n| n.id.clone())
                    .collect::<BTreeSet<_>>(),
            ),
            read_timeout: Some(Duration::from_secs(30)),
            handshake_timeout: Duration::from_secs(5),
            ..ConnConfig::default()
        }
    }

    fn identity(&self) -> Identity {
        Identity {
            node_id: self.me.clone(),
            job: self.cluster.job.clone(),
        }
    }

    /// Connect to node `peer` at `addr`.
    pub async fn connect(&self, addr: &str, peer: &str) -> Result<tp::Conn> {
        tp::connect(addr, &self.identity(), peer, &self.keys, &self.config())
            .await
            .map_err(|e| PoolError::Peer {
                peer: format!("{peer} ({addr})"),
                why: e.to_string(),
                errno: e.errno(),
            })
    }

    /// Connect to the manager.
    pub async fn connect_manager(&self) -> Result<tp::Conn> {
        tp::connect(&self.pool.addr, &self.identity(), &self.pool.manager, &self.keys, &self.config())
            .await
            .map_err(|e| PoolError::ManagerDown {
                addr: self.pool.addr.clone(),
                why: e.to_string(),
            })
    }

    /// Authenticate an accepted stream.
    pub async fn accept(&self, s: tokio::net::TcpStream) -> Result<tp::Conn> {
        tp::accept(s, &self.identity(), &self.keys, &self.config())
            .await
            .map_err(|e| PoolError::Peer {
                peer: "incoming".into(),
                why: e.to_string(),
                errno: e.errno(),
            })
    }

    /// Where the benefactor of node `id` listens.
    pub fn benefactor_addr(&self, id: &str) -> Result<String> {
        let n = self
            .cluster
            .node(id)
            .map_err(|e| PoolError::Config(e.to_string()))?;
        let port = n.port() as u32 + self.pool.benefactor_port_offset as u32;
        if port > u16::MAX as u32 {
            return Err(PoolError::Config(format!("{id}: benefactor port {port} out of range")));
        }
        Ok(format!("{}:{port}", n.host()))
    }
}

/// Send a request, read its reply.
pub(crate) async fn ask(conn: &mut tp::Conn, req: &Request) -> Result<Reply> {
    let body = serde_json::to_string(req).map_err(|e| PoolError::Meta(e.to_string()))?;
    let peer = conn.peer_id().to_string();
    let perr = |e: tp::TransportError| PoolError::Peer {
        peer: peer.clone(),
        why: e.to_string(),
        errno: e.errno(),
    };
    conn.send(&Msg::Query { body }).await.map_err(perr)?;
    match conn.recv().await.map_err(perr)? {
        Msg::QueryReply { body } => match parse_reply(&body) {
            Ok(Reply::Err { errno, reason }) => Err(PoolError::Refused { errno, reason }),
            Ok(r) => Ok(r),
            Err(why) => Err(PoolError::Peer {
                peer,
                why,
                errno: libc::EPROTO,
            }),
        },
        m => Err(PoolError::Peer {
            peer,
            why: format!("unexpected {:?}", m.kind()),
            errno: libc::EPROTO,
        }),
    }
}

/// Read the next request on a server connection: None at its end.
pub(crate) async fn next_request(conn: &mut tp::Conn) -> Option<Result<Request, String>> {
    match conn.recv().await {
        Ok(Msg::Query { body }) => Some(parse_request(&body)),
        Ok(Msg::Bye) => None,
        Err(e) => {
            tracing::debug!("pool: {}: {e}", conn.peer_id());
            None
        }
        Ok(m) => Some(Err(format!("unexpected {:?}", m.kind()))),
    }
}

/// Answer a request.
pub(crate) async fn reply(conn: &mut tp::Conn, r: &Reply) -> bool {
    let Ok(body) = serde_json::to_string(r) else {
        return false;
    };
    conn.send(&Msg::QueryReply { body }).await.is_ok()
}
