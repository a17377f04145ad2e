//! Reading a file of a job's checkpoint that another node holds: the file of a dataset
//! that node's ranks wrote (its own store), or a partner copy it holds of a third
//! node's file. Used by readers that need every node's files of one checkpoint (a DCP
//! load on any node needs the coordinator's `.metadata` and, when resharding or for
//! replicated tensors, other ranks' shards).
//!
//! The question is one `Query` frame, JSON [`ReadFile`] (`op = "read_file"`), on the
//! authenticated peer connection; the answer is the file streamed as a Get's answer is
//! (PutBegin, Chunk..., PutEnd: every chunk with the CRC32C the holder's store recorded,
//! checked on arrival), or a Nack. The holder answers only for what the `holds`
//! question would say it holds ([`ckptfs_partner::holds`]: a file of its own dataset records with
//! exactly that size and CRC32C, or its partner copy of `owner`'s file with them); any
//! other path is "not held", so no other file of the store can be read this way. The
//! reader checks the whole file's CRC32C against the one it asked for.
//!
//! [`read_job_file`] is the one call a reader makes ("bring me `owner`'s file `path` of
//! this content"): it tries this node's own store (a partner copy held here), then the
//! owner's daemon, then the owner's partners, then every other node; it is the place a
//! level registry takes over the order.

use crate::partner_store::{self, check_rel_path};
use crate::source::{FileReader, ReadProblem};
use ckptfs_cluster::Cluster;
use ckptfs_datasets::Want;
use ckptfs_level::crc::crc_combine;
use ckptfs_partner::peer::{Conn, Msg};
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::{OpenFlags, Store};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The question: `owner`'s file `path` with exactly `size` bytes and CRC32C `crc32c`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReadFile {
    /// Always "read_file".
    pub op: String,
    /// The node whose ranks wrote the file.
    pub owner: String,
    /// Its path in the owner's store.
    pub path: String,
    /// Its size.
    pub size: u64,
    /// Its CRC32C.
    pub crc32c: u32,
}

const OP: &str = "read_file";

/// Most bytes one file read this way may have (the reader holds it in memory).
pub const MAX_READ: u64 = 64 << 30;

impl ReadFile {
    /// The question for `owner`'s file `w`.
    pub fn new(owner: &str, w: &Want) -> ReadFile {
        ReadFile {
            op: OP.into(),
            owner: owner.into(),
            path: w.path.clone(),
            size: w.size,
            crc32c: w.crc32c,
        }
    }

    fn want(&self) -> Want {
        Want {
            path: self.path.clone(),
            size: self.size,
            crc32c: self.crc32c,
        }
    }
}

/// The question in a `Query` body, if it is one (other bodies are dataset questions).
pub(crate) fn parse(body: &str) -> Option<ReadFile> {
    if !body.contains(OP) {
        return None;
    }
    serde_json::from_str::<ReadFile>(body).ok().filter(|r| r.op == OP)
}

/// Whether `owner` can name a node (one path component, no dots of its own).
fn owner_ok(owner: &str) -> bool {
    !owner.is_empty() && owner.len() <= 255 && !owner.contains('/') && owner != "." && owner != ".."
}

/// Where node `me`'s store keeps `owner`'s file `path`: the file itself when `me` is the
/// owner, else the partner copy.
fn local_path(me: &str, owner: &str, path: &str) -> String {
    if owner == me {
        path.to_string()
    } else {
        partner_store::copy_path(owner, path)
    }
}

/// Server side: stream the file asked for, or a Nack (ENOENT: not held with that content).
pub(crate) async fn serve(store: &Store, me: &str, req: &ReadFile, conn: &mut Conn) -> Result<()> {
    let nack = |errno: i32, message: String| Msg::Nack { errno, message };
    let path_ok = check_rel_path(&req.path).is_ok_and(|p| p == req.path);
    if !path_ok || !owner_ok(&req.owner) {
        return conn
            .send(nack(
                libc::EINVAL,
                format!("{:?} of {:?}: not a file name", req.path, req.owner),
            ))
            .await;
    }
    let w = req.want();
    let held = {
        let (store, me, owner) = (store.clone(), me.to_string(), req.owner.clone());
        tokio::task::spawn_blocking(move || ckptfs_partner::holds::holds_copy(&store, &me, &owner, &w))
            .await
            .unwrap_or(false)
    };
    if !held {
        return conn
            .send(nack(
                libc::ENOENT,
                format!(
                    "{me} holds no file {} of {} with that size and CRC32C",
                    req.path, req.owner
                ),
            ))
            .await;
    }
    let src = local_path(me, &req.owner, &req.path);
    let reader = match FileReader::open(store, &src) {
        Ok(r) => r,
        Err(p) => {
            let (errno, what) = match p {
                ReadProblem::Gone | ReadProblem::Changed => (libc::ENOENT, "no complete file".to_string()),
                ReadProblem::Corrupt(c) => (libc::EIO, format!("chunk {c} is damaged")),
                ReadProblem::Failed(e) => (e.errno(), e.to_string()),
            };
            return conn
                .send(nack(errno, format!("{what}: {} of {}", req.path, req.owner)))
                .await;
        }
    };
    conn.send(Msg::PutBegin {
        path: req.path.clone(),
        size: reader.identity().size,
        chunk_size: u32::try_from(store.chunk_size()).unwrap_or(0),
        mtime_ns: reader.identity().mtime_ns,
        generation: 0,
    })
    .await?;
    for (i, c) in reader.chunks().iter().enumerate() {
        conn.send_chunk(c.offset, c.crc, &reader.piece(i)).await?;
    }
    conn.send(Msg::PutEnd).await
}

fn err(node: &str, what: impl std::fmt::Display) -> NodeError {
    NodeError::Protocol {
        peer: node.to_string(),
        what: what.to_string(),
    }
}

/// Ask `node`'s daemon for `req` (node `me` of `cluster`); the file's bytes, every chunk
/// and the whole CRC32C checked.
pub fn read_from_node(
    cluster: &Cluster,
    me: &str,
    node: &str,
    req: &ReadFile,
    timeout: Duration,
) -> Result<Vec<u8>> {
    if req.size > MAX_READ {
        return Err(err(
            node,
            format!("{}: {} bytes, more than a read brings", req.path, req.size),
        ));
    }
    let (addr, keys) = ckptfs_partner::peer::dial_target(cluster, me, node)?;
    let body = serde_json::to_string(req).map_err(|e| err(node, e))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| NodeError::io("start the runtime", e))?;
    rt.block_on(async {
        let mut c = tokio::time::timeout(timeout, Conn::connect(&addr, me, node, &keys, cluster))
            .await
            .map_err(|_| err(node, format!("{addr}: no answer in {timeout:?}")))??;
        c.send(Msg::Query(body)).await?;
        let size = match c.recv().await? {
            Some(Msg::PutBegin { path, size, .. }) if path == req.path && size == req.size => size,
            Some(Msg::PutBegin { path, size, .. }) => {
                return Err(err(
                    node,
                    format!("answered {path} of {size} bytes for {} of {}", req.path, req.size),
                ))
            }
            Some(Msg::Nack { errno, message }) => {
                return Err(NodeError::Refused {
                    peer: node.to_string(),
                    what: message,
                    errno,
                })
            }
            other => {
                return Err(err(
                    node,
                    format!(
                        "answered {}",
                        other.as_ref().map(|m| m.name()).unwrap_or("nothing")
                    ),
                ))
            }
        };
        let mut buf = vec![0u8; size as usize];
        let (mut next, mut crc) = (0u64, 0u32);
        while next < size {
            let (offset, chunk_crc, len) = match c.recv().await? {
                Some(Msg::Chunk { offset, crc, len }) => (offset, crc, len),
                other => {
                    return Err(err(
                        node,
                        format!(
                            "expected the chunk at {next} of {}, got {}",
                            req.path,
                            other.as_ref().map(|m| m.name()).unwrap_or("the end")
                        ),
                    ))
                }
            };
            let end = offset.checked_add(len as u64).filter(|e| *e <= size);
            let Some(end) = end.filter(|_| offset == next && len > 0) else {
                return Err(err(
                    node,
                    format!("chunk at {offset} (+{len}) of {}, expected {next}", req.path),
                ));
            };
            if !c.chunk_data(&mut buf[offset as usize..end as usize]).await? {
                return Err(err(
                    node,
                    format!("the chunk at {offset} of {} failed its CRC32C check", req.path),
                ));
            }
            crc = crc_combine(crc, chunk_crc, len as u64);
            next = end;
        }
        match c.recv().await? {
            Some(Msg::PutEnd) => {}
            other => {
                return Err(err(
                    node,
                    format!(
                        "expected the end of {}, got {}",
                        req.path,
                        other.as_ref().map(|m| m.name()).unwrap_or("the end")
                    ),
                ))
            }
        }
        if crc != req.crc32c {
            return Err(err(
                node,
                format!(
                    "{}: CRC32C {crc:08x}, the checkpoint recorded {:08x}",
                    req.path, req.crc32c
                ),
            ));
        }
        Ok(buf)
    })
}

/// Read `owner`'s file `w` from this node's store (`store`, node `me`: a partner copy
/// held here, or the file itself when `me` is the owner), whole and CRC32C-checked.
pub fn read_held_here(store: &Store, me: &str, owner: &str, w: &Want) -> Option<Vec<u8>> {
    if !ckptfs_partner::holds::holds_copy(store, me, owner, w) || w.size > MAX_READ {
        return None;
    }
    let mut f = store
        .open(&local_path(me, owner, &w.path), OpenFlags::READ, 0)
        .ok()?;
    let mut buf = vec![0u8; w.size as usize];
    let mut got = 0usize;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(_) => return None,
        }
    }
    (ckptfs_store::checksum::crc32c_append(0, &buf) == w.crc32c).then_some(buf)
}

/// Where a file was read from, and its bytes.
pub struct Read {
    /// The node whose store gave it (`me` for this node's own store).
    pub from: String,
    /// The file.
    pub bytes: Vec<u8>,
}

/// Read `owner`'s checkpoint file `w` for node `me` (store `store`) of `cluster`: from
/// this node's store when it holds it, else from the owner's daemon, else from the
/// owner's partners in the plan, else from any other node that holds a partner copy.
/// The error names every node asked and its answer.
pub fn read_job_file(
    cluster: &Cluster,
    me: &str,
    store: &Store,
    owner: &str,
    w: &Want,
    timeout: Duration,
) -> std::result::Result<Read, String> {
    if let Some(bytes) = read_held_here(store, me, owner, w) {
        return Ok(Read {
            from: me.into(),
            bytes,
        });
    }
    let mut order: Vec<String> = vec![owner.to_string()];
    if let Ok(plan) = cluster.plan() {
        for p in plan.partners_of(owner).unwrap_or_default() {
            if !order.contains(p) {
                order.push(p.clone());
            }
        }
    }
    for n in &cluster.nodes {
        if !order.contains(&n.id) {
            order.push(n.id.clone());
        }
    }
    let req = ReadFile::new(owner, w);
    let mut why = Vec::new();
    for n in order.iter().filter(|n| n.as_str() != me) {
        match read_from_node(cluster, me, n, &req, timeout) {
            Ok(bytes) => {
                return Ok(Read {
                    from: n.clone(),
                    bytes,
                })
            }
            Err(e) => why.push(format!("{n}: {e}")),
        }
    }
    Err(format!(
        "no node gave {owner}'s file {} ({} bytes, CRC32C {:08x}): {}",
        w.path,
        w.size,
        w.crc32c,
        if why.is_empty() {
            "no other node".to_string()
        } else {
            why.join("; ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_file_question_is_told_apart_from_dataset_questions() {
        let w = Want {
            path: "/ckpt/step4/.metadata".into(),
            size: 1234,
            crc32c: 0xdead_beef,
        };
        let q = ReadFile::new("node1", &w);
        let body = serde_json::to_string(&q).unwrap();
        assert_eq!(parse(&body), Some(q));
        assert_eq!(parse(r#"{"op":"records","job":"read_file"}"#), None);
        assert_eq!(parse(r#"{"op":"holds","owner":"n","files":[]}"#), None);
        assert_eq!(parse("read_file"), None);
    }

    #[test]
    fn owners_and_paths_that_could_leave_the_partner_namespace_are_refused() {
        assert!(owner_ok("node1"));
        for bad in ["", ".", "..", "a/b", "../node1"] {
            assert!(!owner_ok(bad), "{bad:?}");
        }
        assert_eq!(local_path("node2", "node2", "/a/b"), "/a/b");
        assert_eq!(
            local_path("node2", "node1", "/a/b"),
            partner_store::copy_path("node1", "/a/b")
        );
    }
}
