//! Recovery from partners: a replacement node (empty store, same node id) asks every
//! peer daemon for the copies it holds of this node's files (List), fetches each file
//! this store lacks (Get), checks every chunk's CRC32C on arrival, and writes it into
//! the store under a temporary name, renamed into place only when complete. The client
//! side is the partner copies' set level (`ckptfs_partner::partner_set`, re-exported
//! here); the server side of Get (`send_held`) streams the held copy straight from the
//! store.
//!
//! Order of levels (`ckptfs run --restore`, `ckptfs restore --from-peers`): a file
//! already complete in the node's own store is kept; otherwise it comes from the first
//! peer that has it (the plan's partners first); what no peer has comes from the PFS
//! (the drain's restore, run after this one by the caller).

use crate::partner_store;
use crate::source::{FileReader, ReadProblem};
use ckptfs_cluster::Cluster;
use ckptfs_partner::peer::{Conn, Msg};
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::{FileKind, Store};

/// Server side of Get: stream the copy of `path` held for `peer` (PutBegin, Chunk...,
/// PutEnd) straight from the store, each chunk with the CRC32C the store recorded when
/// the copy was received (the requester checks it), or a Nack if there is none.
pub(crate) async fn send_held(store: &Store, peer: &str, path: &str, conn: &mut Conn) -> Result<()> {
    let copy = partner_store::copy_path(peer, path);
    // Only a regular file is a copy: a directory of the partner namespace (`ckpt` when
    // `ckpt/a` is held) is EISDIR, never streamed as an empty file; anything else is no
    // copy.
    if let Ok(st) = store.stat(&copy) {
        let refused = match st.kind {
            FileKind::File => None,
            FileKind::Dir => Some((libc::EISDIR, "a directory, not a copy")),
            _ => Some((libc::ENOENT, "no copy")),
        };
        if let Some((errno, what)) = refused {
            return conn
                .send(Msg::Nack {
                    errno,
                    message: format!("{path}: {what}"),
                })
                .await;
        }
    }
    let reader = match FileReader::open(store, &copy) {
        Ok(r) => r,
        Err(p) => {
            let (errno, what) = match p {
                ReadProblem::Gone => (libc::ENOENT, "no copy".to_string()),
                ReadProblem::Changed => (libc::ENOENT, "no complete copy".to_string()),
                ReadProblem::Corrupt(c) => (libc::EIO, format!("chunk {c} of the copy is damaged")),
                ReadProblem::Failed(e) => (e.errno(), e.to_string()),
            };
            return conn
                .send(Msg::Nack {
                    errno,
                    message: format!("{what} of {path}"),
                })
                .await;
        }
    };
    conn.send(Msg::PutBegin {
        path: path.to_string(),
        size: reader.identity().size,
        chunk_size: u32::try_from(store.chunk_size()).unwrap_or(0),
        mtime_ns: reader.identity().mtime_ns,
        generation: crate::partner_store::generation_of(store, path),
    })
    .await?;
    for (i, c) in reader.chunks().iter().enumerate() {
        conn.send_chunk(c.offset, c.crc, &reader.piece(i)).await?;
    }
    conn.send(Msg::PutEnd).await
}

pub use ckptfs_partner::partner_set::{
    restore_from_peers_blocking, PeerFailure, PeerRestoreReport, PeerRestored, PeerSuperseded,
};

/// Restore this node's files under `prefix` from the peers' memory into `store` (for a
/// caller on a tokio runtime: the levels block, so the work runs on a blocking thread).
pub async fn restore_from_peers(
    cluster: &Cluster,
    node_id: &str,
    store: &Store,
    prefix: &str,
) -> Result<PeerRestoreReport> {
    let (cluster, node_id, store, prefix) = (
        cluster.clone(),
        node_id.to_string(),
        store.clone(),
        prefix.to_string(),
    );
    tokio::task::spawn_blocking(move || restore_from_peers_blocking(&cluster, &node_id, &store, &prefix))
        .await
        .map_err(|e| NodeError::Transport(format!("the restore from peers failed: {e}")))?
}
