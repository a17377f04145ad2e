//! The erasure messages on the daemon's tokio connection (feature `tokio`): what the node
//! daemon's erasure tasks (`ckptfs-node`, `erasure/`) send and ask of the other members.
//! The client's rebuild speaks the same messages over the blocking connection
//! ([`super`]).

use super::{era_of, err, refused_on_fail};
use crate::peer::{Conn, Msg};
use crate::{NodeError, Result};
use ckptfs_cluster::Cluster;
use ckptfs_erasure::proto::{self, EraMsg};
use std::time::Duration;

/// Send one erasure message.
pub async fn send_era(conn: &mut Conn, m: &EraMsg) -> Result<()> {
    let body = proto::encode(m).map_err(err)?;
    conn.send(Msg::Erasure(body)).await
}

/// Receive one erasure message (a refusal or another kind of message is an error).
pub async fn recv_era(conn: &mut Conn) -> Result<EraMsg> {
    let peer = conn.peer().to_string();
    era_of(peer, conn.recv().await?)
}

/// The answer to a request, or the peer's refusal as an error.
pub async fn ask(conn: &mut Conn, m: &EraMsg, timeout: Duration) -> Result<EraMsg> {
    let peer = conn.peer().to_string();
    send_era(conn, m).await?;
    match tokio::time::timeout(timeout, recv_era(conn)).await {
        Ok(Ok(answer)) => refused_on_fail(peer, answer),
        Ok(r) => r,
        Err(_) => Err(NodeError::Transport(format!("{peer}: no answer in {timeout:?}"))),
    }
}

/// An authenticated connection to member `node` of the set.
pub async fn connect(cluster: &Cluster, me: &str, node: &str, timeout: Duration) -> Result<Conn> {
    let (addr, keys) = crate::peer::dial_target(cluster, me, node)?;
    tokio::time::timeout(timeout, Conn::connect(&addr, me, node, &keys, cluster))
        .await
        .map_err(|_| NodeError::Transport(format!("connect to {node} ({addr}): timed out")))?
}
