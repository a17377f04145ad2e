//! Recovery from partners: a replacement node (empty store, same node id) asks every
//! peer daemon for the copies it holds of this node's files (List), fetches each file
//! this store lacks (Get), checks every chunk's CRC32C on arrival, and writes it into
//! the store under a temporary name, renamed into place only when complete.
//!
//! Order of levels (`ckptfs run --restore`, `ckptfs restore --from-peers`): a file
//! already complete in the node's own store is kept; otherwise it comes from the first
//! peer that has it (the plan's partners first); what no peer has comes from the PFS
//! (the drain's restore, run after this one by the caller).

use crate::error::{NodeError, Result};
use crate::partner_store::{self, check_rel_path, mkdir_p, HeldFile, Sink, INCOMING_DIR};
use crate::peer::{Conn, Msg};
use crate::source::{FileReader, ReadProblem};
use ckptfs_cluster::{Cluster, Secret};
use ckptfs_store::checksum::crc32c;
use ckptfs_store::netin::Landing;
use ckptfs_store::{OpenFlags, Store, StoreError, WriteState};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Server side of Get: stream the copy of `path` held for `peer` (PutBegin, Chunk...,
/// PutEnd) straight from the store, each chunk with the CRC32C the store recorded when
/// the copy was received (the requester checks it), or a Nack if there is none.
pub(crate) async fn send_held(store: &Store, peer: &str, path: &str, conn: &mut Conn) -> Result<()> {
    let copy = partner_store::copy_path(peer, path);
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
    })
    .await?;
    for (i, c) in reader.chunks().iter().enumerate() {
        conn.send_chunk(c.offset, c.crc, &reader.piece(i)).await?;
    }
    conn.send(Msg::PutEnd).await
}

/// One file brought back.
#[derive(Debug, Clone, Serialize)]
pub struct PeerRestored {
    /// Store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// The node whose memory it came from.
    pub from: String,
    /// Seconds taken.
    pub seconds: f64,
}

/// One file that could not be brought back from any peer.
#[derive(Debug, Clone, Serialize)]
pub struct PeerFailure {
    /// Store path.
    pub path: String,
    /// What went wrong (last peer tried).
    pub error: String,
}

/// What a restore from peers did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerRestoreReport {
    /// Files brought back from a partner's memory.
    pub restored: Vec<PeerRestored>,
    /// Files already complete in this store (kept: the fastest level).
    pub present: Vec<String>,
    /// Files no peer could deliver intact.
    pub failed: Vec<PeerFailure>,
    /// Peers that could not be reached (node: error).
    pub unreachable: BTreeMap<String, String>,
}

/// Restore this node's files under `prefix` from the peers' memory into `store`.
pub async fn restore_from_peers(
    cluster: &Cluster,
    node_id: &str,
    store: &Store,
    prefix: &str,
) -> Result<PeerRestoreReport> {
    let secret = cluster.secret().map_err(|e| NodeError::Cluster(e.to_string()))?;
    cluster
        .node(node_id)
        .map_err(|e| NodeError::Cluster(e.to_string()))?;
    // The plan's partners first, then every other node (a dead partner's replacement).
    let mut order: Vec<String> = match cluster.plan() {
        Ok(p) => p.partners_of(node_id).map(|v| v.to_vec()).unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    for n in &cluster.nodes {
        if n.id != node_id && !order.contains(&n.id) {
            order.push(n.id.clone());
        }
    }
    let prefix = normalize_prefix(prefix);
    let mut rep = PeerRestoreReport::default();
    let mut conns: Vec<(String, Conn, Vec<HeldFile>)> = Vec::new();
    for peer in order {
        let addr = cluster
            .node(&peer)
            .map_err(|e| NodeError::Cluster(e.to_string()))?
            .addr
            .clone();
        match list_peer(&addr, node_id, &secret, cluster).await {
            Ok((conn, files)) => conns.push((peer, conn, files)),
            Err(e) => {
                rep.unreachable.insert(peer, e.to_string());
            }
        }
    }
    let mut wanted: BTreeMap<String, u64> = BTreeMap::new();
    for (_, _, files) in &conns {
        for f in files {
            if under(&f.path, &prefix) {
                wanted.entry(f.path.clone()).or_insert(f.size);
            }
        }
    }
    for (path, _) in wanted {
        if check_rel_path(&path).is_err() {
            continue;
        }
        if let Ok(st) = store.stat(&path) {
            if st.state == WriteState::Complete {
                rep.present.push(path);
                continue;
            }
        }
        let mut last_err = String::from("no peer holds it");
        let mut done = false;
        for (peer, conn, files) in conns.iter_mut() {
            if !files.iter().any(|f| f.path == path) {
                continue;
            }
            let t = Instant::now();
            match fetch(conn, store, &path).await {
                Ok(size) => {
                    rep.restored.push(PeerRestored {
                        path: path.clone(),
                        size,
                        from: peer.clone(),
                        seconds: t.elapsed().as_secs_f64(),
                    });
                    done = true;
                    break;
                }
                Err(e) => last_err = format!("{peer}: {e}"),
            }
        }
        if !done {
            rep.failed.push(PeerFailure {
                path,
                error: last_err,
            });
        }
    }
    Ok(rep)
}

/// [`restore_from_peers`] on a runtime of its own (for the command line).
pub fn restore_from_peers_blocking(
    cluster: &Cluster,
    node_id: &str,
    store: &Store,
    prefix: &str,
) -> Result<PeerRestoreReport> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| NodeError::io("start the runtime", e))?;
    rt.block_on(restore_from_peers(cluster, node_id, store, prefix))
}

fn normalize_prefix(p: &str) -> String {
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        "/".into()
    } else if t.starts_with('/') {
        t.into()
    } else {
        format!("/{t}")
    }
}

fn under(path: &str, prefix: &str) -> bool {
    prefix == "/" || path == prefix || path.starts_with(&format!("{prefix}/"))
}

async fn list_peer(
    addr: &str,
    me: &str,
    secret: &Secret,
    cluster: &Cluster,
) -> Result<(Conn, Vec<HeldFile>)> {
    let mut conn = tokio::time::timeout(Duration::from_secs(15), Conn::connect(addr, me, secret, cluster))
        .await
        .map_err(|_| NodeError::Transport(format!("connect to {addr}: timed out")))??;
    let mut all: Vec<HeldFile> = Vec::new();
    loop {
        let after = all.last().map(|f| f.path.clone()).unwrap_or_default();
        conn.send(Msg::List { after }).await?;
        match conn.recv().await? {
            Some(Msg::Listing { files, more }) => {
                let empty = files.is_empty();
                all.extend(files);
                if !more || empty {
                    return Ok((conn, all));
                }
            }
            Some(other) => {
                return Err(NodeError::Protocol {
                    peer: addr.to_string(),
                    what: format!("expected a listing, got {}", other.name()),
                })
            }
            None => return Err(NodeError::Transport(format!("{addr} closed the connection"))),
        }
    }
}

/// Get one file into the store: temporary name, every chunk's CRC checked, rename.
pub(crate) async fn fetch(conn: &mut Conn, store: &Store, path: &str) -> Result<u64> {
    let peer = conn.peer().to_string();
    let bad = |what: String| NodeError::Protocol {
        peer: peer.clone(),
        what,
    };
    conn.send(Msg::Get {
        path: path.to_string(),
    })
    .await?;
    let size = match conn.recv().await? {
        Some(Msg::PutBegin { path: p, size, .. }) if p == path => size,
        Some(Msg::Nack { errno, message }) => {
            return Err(NodeError::Refused {
                peer: peer.clone(),
                what: message,
                errno,
            })
        }
        Some(other) => return Err(bad(format!("expected the file, got {}", other.name()))),
        None => return Err(NodeError::Transport(format!("{peer} closed the connection"))),
    };
    mkdir_p(store, INCOMING_DIR)?;
    let tmp = format!(
        "{INCOMING_DIR}/restore.{}.{}",
        std::process::id(),
        crc32c(path.as_bytes())
    );
    let _ = store.unlink(&tmp);
    let mut f = store
        .open(&tmp, OpenFlags::CREATE, 0o644)
        .map_err(|e| NodeError::store(format!("create {tmp}"), e))?;
    let guard = Unlink { store, path: &tmp };
    let mut off = 0u64;
    loop {
        match conn.recv().await? {
            Some(Msg::Chunk { offset, len, .. }) => {
                if offset != off || off + len as u64 > size {
                    return Err(bad(format!("chunk at {offset} out of order")));
                }
                // Straight into the file's chunks; the CRC32C is checked as it lands and
                // nothing is published unless it matches.
                let mut landing = Landing::begin(&f, offset, len as usize)
                    .map_err(|e| NodeError::store(format!("receive {path}"), e))?;
                if !conn.chunk_into(&mut Sink(&mut landing)).await? {
                    return Err(NodeError::BadChunk {
                        peer: peer.clone(),
                        path: path.to_string(),
                        offset,
                    });
                }
                landing
                    .commit(&mut f)
                    .map_err(|e| NodeError::store(format!("write {path}"), e))?;
                off += len as u64;
            }
            Some(Msg::PutEnd) => break,
            Some(other) => return Err(bad(format!("unexpected {}", other.name()))),
            None => return Err(NodeError::Transport(format!("{peer} closed the connection"))),
        }
    }
    if off != size {
        return Err(bad(format!("{path}: {off} of {size} bytes")));
    }
    f.close()
        .map_err(|e| NodeError::store(format!("close {path}"), e))?;
    if let Some(i) = path.rfind('/') {
        if i > 0 {
            mkdir_p_app(store, &path[..i])?;
        }
    }
    store
        .rename(&tmp, path)
        .map_err(|e| NodeError::store(format!("rename into {path}"), e))?;
    std::mem::forget(guard);
    Ok(size)
}

/// Parents of an application file: mode 0755 like `ckptfs put -p`.
fn mkdir_p_app(store: &Store, dir: &str) -> Result<()> {
    let mut cur = String::new();
    for c in dir.split('/').filter(|c| !c.is_empty()) {
        cur.push('/');
        cur.push_str(c);
        match store.mkdir(&cur, 0o755) {
            Ok(_) | Err(StoreError::Exists(_)) => {}
            Err(e) => return Err(NodeError::store(format!("mkdir {cur}"), e)),
        }
    }
    Ok(())
}

struct Unlink<'a> {
    store: &'a Store,
    path: &'a str,
}

impl Drop for Unlink<'_> {
    fn drop(&mut self) {
        let _ = self.store.unlink(self.path);
    }
}
