//! Connections of the pool's roles over the authenticated peer transport.

use crate::msg::{parse_reply, parse_request, ChunkHash, Reply, Request};
use crate::{PoolError, Result};
use ckptfs_cluster::{pair_key, Cluster, NodeKeys, PoolMap};
use ckptfs_transport::{self as tp, ChunkHeader, ConnConfig, Identity, Msg, Protection, PutBegin, PutEnd};
use std::collections::BTreeSet;
use std::time::Duration;

/// Who a pool role is and how it reaches the others.
///
/// The manager and the benefactors are node ids of the map (`node1`); a client is the
/// node id with `.client` appended (`node1.client`), so that a client may run on the
/// manager's or a benefactor's node (the transport refuses a peer claiming the server's
/// own id). Keys are per pair, as for the node daemons: the servers hold their node keys
/// (key file or job secret) plus a key with every node's client, and a client derives
/// its keys with every node; both come from the job's secret (`pair_key`).
#[derive(Debug, Clone)]
pub struct PoolNet {
    /// The cluster map.
    pub cluster: Cluster,
    /// Its `[pool]` section.
    pub pool: PoolMap,
    /// This role's transport id (a node id, or `<node>.client`).
    pub me: String,
    keys: NodeKeys,
}

/// The transport id of node `node`'s pool client.
pub fn client_id(node: &str) -> String {
    format!("{node}.client")
}

fn pool_of(cluster: &Cluster) -> Result<PoolMap> {
    cluster
        .pool
        .clone()
        .ok_or_else(|| PoolError::Config("the cluster map has no [pool] section".into()))
}

impl PoolNet {
    /// The manager or benefactor of node `me`.
    pub fn server(cluster: &Cluster, me: &str) -> Result<PoolNet> {
        let pool = pool_of(cluster)?;
        let mut keys = cluster
            .node_keys(me)
            .map_err(|e| PoolError::Config(e.to_string()))?;
        let master = cluster
            .secret()
            .map_err(|e| PoolError::Config(format!("pool roles need the job secret: {e}")))?;
        for n in &cluster.nodes {
            let c = client_id(&n.id);
            keys = keys.with_pair(&c, pair_key(&master, &cluster.job, me, &c));
        }
        Ok(PoolNet {
            cluster: cluster.clone(),
            pool,
            me: me.to_string(),
            keys,
        })
    }

    /// The pool client of node `node` (transport id `<node>.client`).
    pub fn client(cluster: &Cluster, node: &str) -> Result<PoolNet> {
        let pool = pool_of(cluster)?;
        cluster.node(node).map_err(|e| PoolError::Config(e.to_string()))?;
        let master = cluster
            .secret()
            .map_err(|e| PoolError::Config(format!("pool clients need the job secret: {e}")))?;
        let me = client_id(node);
        let keys = NodeKeys::derive(
            &master,
            &cluster.job,
            &me,
            cluster.nodes.iter().map(|n| n.id.as_str()),
        );
        Ok(PoolNet {
            cluster: cluster.clone(),
            pool,
            me,
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
                    .flat_map(|n| [n.id.clone(), client_id(&n.id)])
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
        tp::connect(
            &self.pool.addr,
            &self.identity(),
            &self.pool.manager,
            &self.keys,
            &self.config(),
        )
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
            return Err(PoolError::Config(format!(
                "{id}: benefactor port {port} out of range"
            )));
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

fn proto(peer: &str, why: impl Into<String>) -> PoolError {
    PoolError::Peer {
        peer: peer.to_string(),
        why: why.into(),
        errno: libc::EPROTO,
    }
}

/// Fetch chunk `hash` from a benefactor: `Get c/<hash>`, answered by PutBegin, one
/// Chunk and PutEnd (or a Nack). The bytes are not checked here.
pub(crate) async fn get_chunk(conn: &mut tp::Conn, me: &str, hash: &ChunkHash) -> Result<Vec<u8>> {
    let peer = conn.peer_id().to_string();
    let terr = |e: tp::TransportError| PoolError::Peer {
        peer: peer.clone(),
        why: e.to_string(),
        errno: e.errno(),
    };
    conn.send(&Msg::Get {
        src_node: me.to_string(),
        path: format!("c/{hash}"),
    })
    .await
    .map_err(terr)?;
    let size = match conn.recv().await.map_err(terr)? {
        Msg::PutBegin(b) if b.size <= MAX_CHUNK => b.size,
        Msg::Nack(n) => {
            return Err(PoolError::Peer {
                peer,
                why: n.reason,
                errno: n.errno,
            })
        }
        m => return Err(proto(&peer, format!("unexpected {:?}", m.kind()))),
    };
    let mut data = vec![0u8; size as usize];
    match conn.recv().await.map_err(terr)? {
        Msg::Chunk(c) if c.len as u64 == size => conn.recv_chunk_data(&mut data).await.map_err(terr)?,
        m => return Err(proto(&peer, format!("unexpected {:?}", m.kind()))),
    }
    match conn.recv().await.map_err(terr)? {
        Msg::PutEnd(e) if e.size == size => Ok(data),
        m => Err(proto(&peer, format!("unexpected {:?}", m.kind()))),
    }
}

/// Largest chunk a benefactor takes or a client accepts.
pub(crate) const MAX_CHUNK: u64 = 64 << 20;

/// Store chunk `hash` (`data`, chunk `index` of write `write_id`) on a benefactor:
/// PutBegin `c/<write id>/<hash>`, one Chunk, PutEnd; waits for its Ack.
pub(crate) async fn put_chunk(
    conn: &mut tp::Conn,
    me: &str,
    write_id: u64,
    index: u64,
    hash: &ChunkHash,
    data: &[u8],
) -> Result<()> {
    let peer = conn.peer_id().to_string();
    let terr = |e: tp::TransportError| PoolError::Peer {
        peer: peer.clone(),
        why: e.to_string(),
        errno: e.errno(),
    };
    let size = data.len() as u64;
    conn.send(&Msg::PutBegin(PutBegin {
        src_node: me.to_string(),
        path: format!("c/{write_id}/{hash}"),
        size,
        chunk_size: size.max(1) as u32,
        mtime_ns: 0,
        generation: index,
    }))
    .await
    .map_err(terr)?;
    conn.send_chunk(&ChunkHeader::for_data(index, 0, data), data)
        .await
        .map_err(terr)?;
    conn.send(&Msg::PutEnd(PutEnd {
        generation: index,
        chunks: 1,
        size,
    }))
    .await
    .map_err(terr)?;
    match conn.recv().await.map_err(terr)? {
        Msg::Ack { .. } => Ok(()),
        Msg::Nack(n) => Err(PoolError::Peer {
            peer,
            why: n.reason,
            errno: n.errno,
        }),
        m => Err(proto(&peer, format!("unexpected {:?}", m.kind()))),
    }
}
