//! Connections of the pool's roles over the authenticated peer transport: who a role
//! is, and the client's requests over the blocking connection
//! ([`ckptfs_transport::blocking`]). What a request and its answer are is written once,
//! here ([`query`], [`answer`], [`get_msg`], [`got_begin`], [`put_msgs`], [`put_answer`]);
//! the servers' tokio side (`net_server`, feature `server`) sends and reads the same.

use crate::msg::{parse_reply, ChunkHash, Reply, Request};
use crate::{PoolError, Result};
use ckptfs_cluster::{pair_key, Cluster, NodeKeys, PoolMap};
use ckptfs_transport::blocking::Conn;
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
    pub(crate) keys: NodeKeys,
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

    pub(crate) fn identity(&self) -> Identity {
        Identity {
            node_id: self.me.clone(),
            job: self.cluster.job.clone(),
        }
    }

    /// Connect to node `peer` at `addr` (blocking).
    pub fn dial(&self, addr: &str, peer: &str) -> Result<Conn> {
        Conn::connect(addr, &self.identity(), peer, &self.keys, &self.config())
            .map_err(|e| peer_down(peer, addr, e))
    }

    /// Connect to the manager (blocking).
    pub fn dial_manager(&self) -> Result<Conn> {
        Conn::connect(
            &self.pool.addr,
            &self.identity(),
            &self.pool.manager,
            &self.keys,
            &self.config(),
        )
        .map_err(|e| self.manager_down(e))
    }

    pub(crate) fn manager_down(&self, e: tp::TransportError) -> PoolError {
        PoolError::ManagerDown {
            addr: self.pool.addr.clone(),
            why: e.to_string(),
        }
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

pub(crate) fn peer_down(peer: &str, addr: &str, e: tp::TransportError) -> PoolError {
    PoolError::Peer {
        peer: format!("{peer} ({addr})"),
        why: e.to_string(),
        errno: e.errno(),
    }
}

/// A transport error on the connection to `peer`.
pub(crate) fn terr(peer: &str) -> impl Fn(tp::TransportError) -> PoolError + '_ {
    move |e| PoolError::Peer {
        peer: peer.to_string(),
        why: e.to_string(),
        errno: e.errno(),
    }
}

pub(crate) fn proto(peer: &str, why: impl Into<String>) -> PoolError {
    PoolError::Peer {
        peer: peer.to_string(),
        why: why.into(),
        errno: libc::EPROTO,
    }
}

/// A request as the message that carries it.
pub(crate) fn query(req: &Request) -> Result<Msg> {
    let body = serde_json::to_string(req).map_err(|e| PoolError::Meta(e.to_string()))?;
    Ok(Msg::Query { body })
}

/// The answer to a request, from the message that came back.
pub(crate) fn answer(peer: &str, m: Msg) -> Result<Reply> {
    match m {
        Msg::QueryReply { body } => match parse_reply(&body) {
            Ok(Reply::Err { errno, reason }) => Err(PoolError::Refused { errno, reason }),
            Ok(r) => Ok(r),
            Err(why) => Err(proto(peer, why)),
        },
        m => Err(proto(peer, format!("unexpected {:?}", m.kind()))),
    }
}

/// Send a request, read its reply.
pub(crate) fn ask(conn: &mut Conn, req: &Request) -> Result<Reply> {
    let peer = conn.peer_id().to_string();
    conn.send(&query(req)?).map_err(terr(&peer))?;
    let m = conn.recv().map_err(terr(&peer))?;
    answer(&peer, m)
}

/// The request for chunk `hash`: `Get c/<hash>`.
pub(crate) fn get_msg(me: &str, hash: &ChunkHash) -> Msg {
    Msg::Get {
        src_node: me.to_string(),
        path: format!("c/{hash}"),
    }
}

/// The first answer to a Get: its PutBegin gives the chunk's size.
pub(crate) fn got_begin(peer: &str, m: Msg) -> Result<u64> {
    match m {
        Msg::PutBegin(b) if b.size <= MAX_CHUNK => Ok(b.size),
        Msg::Nack(n) => Err(PoolError::Peer {
            peer: peer.to_string(),
            why: n.reason,
            errno: n.errno,
        }),
        m => Err(proto(peer, format!("unexpected {:?}", m.kind()))),
    }
}

/// The chunk frame of a Get's answer, `size` bytes long.
pub(crate) fn got_chunk(peer: &str, m: &Msg, size: u64) -> Result<()> {
    match m {
        Msg::Chunk(c) if c.len as u64 == size => Ok(()),
        m => Err(proto(peer, format!("unexpected {:?}", m.kind()))),
    }
}

/// The last answer to a Get.
pub(crate) fn got_end(peer: &str, m: Msg, size: u64) -> Result<()> {
    match m {
        Msg::PutEnd(e) if e.size == size => Ok(()),
        m => Err(proto(peer, format!("unexpected {:?}", m.kind()))),
    }
}

/// Fetch chunk `hash` from a benefactor: `Get c/<hash>`, answered by PutBegin, one
/// Chunk and PutEnd (or a Nack). The bytes are not checked here.
pub(crate) fn get_chunk(conn: &mut Conn, me: &str, hash: &ChunkHash) -> Result<Vec<u8>> {
    let peer = conn.peer_id().to_string();
    let e = terr(&peer);
    conn.send(&get_msg(me, hash)).map_err(&e)?;
    let size = got_begin(&peer, conn.recv().map_err(&e)?)?;
    let mut data = vec![0u8; size as usize];
    got_chunk(&peer, &conn.recv().map_err(&e)?, size)?;
    conn.recv_chunk_data(&mut data).map_err(&e)?;
    got_end(&peer, conn.recv().map_err(&e)?, size)?;
    Ok(data)
}

/// Largest chunk a benefactor takes or a client accepts.
pub(crate) const MAX_CHUNK: u64 = 64 << 20;

/// The frames that store chunk `hash` (`data`, chunk `index` of write `write_id`):
/// PutBegin `c/<write id>/<hash>`, the Chunk's header, PutEnd.
pub(crate) fn put_msgs(
    me: &str,
    write_id: u64,
    index: u64,
    hash: &ChunkHash,
    data: &[u8],
) -> (Msg, ChunkHeader, Msg) {
    let size = data.len() as u64;
    let begin = Msg::PutBegin(PutBegin {
        src_node: me.to_string(),
        path: format!("c/{write_id}/{hash}"),
        size,
        chunk_size: size.max(1) as u32,
        mtime_ns: 0,
        generation: index,
    });
    let end = Msg::PutEnd(PutEnd {
        generation: index,
        chunks: 1,
        size,
    });
    (begin, ChunkHeader::for_data(index, 0, data), end)
}

/// The benefactor's answer to a stored chunk.
pub(crate) fn put_answer(peer: &str, m: Msg) -> Result<()> {
    match m {
        Msg::Ack { .. } => Ok(()),
        Msg::Nack(n) => Err(PoolError::Peer {
            peer: peer.to_string(),
            why: n.reason,
            errno: n.errno,
        }),
        m => Err(proto(peer, format!("unexpected {:?}", m.kind()))),
    }
}

/// Store chunk `hash` on a benefactor (see [`put_msgs`]); waits for its Ack.
pub(crate) fn put_chunk(
    conn: &mut Conn,
    me: &str,
    write_id: u64,
    index: u64,
    hash: &ChunkHash,
    data: &[u8],
) -> Result<()> {
    let peer = conn.peer_id().to_string();
    let e = terr(&peer);
    let (begin, hdr, end) = put_msgs(me, write_id, index, hash, data);
    conn.send(&begin).map_err(&e)?;
    conn.send_chunk(&hdr, data).map_err(&e)?;
    conn.send(&end).map_err(&e)?;
    put_answer(&peer, conn.recv().map_err(&e)?)
}
