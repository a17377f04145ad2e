//! The pool's control messages: JSON in the peer transport's Query/QueryReply frames,
//! parsed strictly ([`parse_request`], [`parse_reply`]): unknown fields refused, every
//! string and list bounded, hashes exactly 64 hex digits, paths checked. Chunk data
//! travels in the transport's own PutBegin/Chunk/PutEnd and Get frames.

use serde::{Deserialize, Serialize};

/// Largest control message accepted (bytes of JSON).
pub const MAX_BODY: usize = 1 << 20;
/// Most chunks one file version may have (a 1 MiB message holds this many refs).
pub const MAX_CHUNKS: usize = 8192;
/// Most entries in any other list of a message.
pub const MAX_LIST: usize = 8192;
/// Longest store path.
pub const MAX_PATH: usize = 4096;

/// A chunk's BLAKE3 hash, 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ChunkHash(String);

impl ChunkHash {
    /// The hash of `data`.
    pub fn of(data: &[u8]) -> ChunkHash {
        ChunkHash(blake3::hash(data).to_hex().to_string())
    }
    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// Parse 64 lowercase hex digits.
    pub fn parse(s: &str) -> Option<ChunkHash> {
        (s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| ChunkHash(s.to_string()))
    }
}

impl TryFrom<String> for ChunkHash {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        ChunkHash::parse(&s).ok_or_else(|| "not a chunk hash (64 lowercase hex digits)".into())
    }
}

impl From<ChunkHash> for String {
    fn from(h: ChunkHash) -> String {
        h.0
    }
}

impl std::fmt::Display for ChunkHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A benefactor in a striping plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// Its node id.
    pub node: String,
    /// Where it listens.
    pub addr: String,
    /// Its replica group: every chunk goes to one member of each group of the plan
    /// (groups are disjoint, in distinct failure domains where possible).
    #[serde(default)]
    pub group: u32,
}

/// Most copies of one chunk a chunk map may name.
pub const MAX_REPLICAS: usize = 8;

/// One chunk of a file version: its hash and the benefactors holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkRef {
    /// BLAKE3 of the chunk.
    pub hash: ChunkHash,
    /// The first holder's node id (the one that drains it).
    pub node: String,
    /// The other holders (replicas), if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    /// Chunk length in bytes.
    pub len: u32,
    /// Sent by this write (false: a reference to a chunk the pool already holds).
    #[serde(default)]
    pub sent: bool,
}

/// The drain name of one chunk of a committed version (see [`crate::drain`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkName {
    /// Store path of the file.
    pub path: String,
    /// Its version.
    pub version: u64,
    /// Chunk index.
    pub index: u64,
    /// Chunks in the version.
    pub count: u64,
    /// BLAKE3 of the chunk.
    pub hash: ChunkHash,
    /// This holder drains the chunk (false: a replica, kept in memory only).
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub drain: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

impl ChunkRef {
    /// Every holder, the first one first.
    pub fn holders(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.node).chain(self.also.iter())
    }
}

/// A replica of a chunk as a file listing shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaInfo {
    /// Holder.
    pub node: String,
    /// Its holder is alive.
    pub alive: bool,
}

/// A chunk as a file listing shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkInfo {
    /// BLAKE3 of the chunk.
    pub hash: ChunkHash,
    /// Holder.
    pub node: String,
    /// Length.
    pub len: u32,
    /// Drained to the PFS.
    pub drained: bool,
    /// Its holder is alive.
    pub alive: bool,
    /// The other holders (replicas).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<ReplicaInfo>,
}

impl ChunkInfo {
    /// Every holder with its liveness, the first one first.
    pub fn holders(&self) -> Vec<(&str, bool)> {
        std::iter::once((self.node.as_str(), self.alive))
            .chain(self.replicas.iter().map(|r| (r.node.as_str(), r.alive)))
            .collect()
    }
}

/// A committed version of a pool file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileInfo {
    /// Store path.
    pub path: String,
    /// Version (1, 2, ...).
    pub version: u64,
    /// Size in bytes.
    pub size: u64,
    /// Chunk size.
    pub chunk_size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: u64,
    /// Permission bits.
    pub mode: u32,
    /// CRC32C of the content.
    pub crc32c: u32,
    /// CRC32C of each chunk.
    pub chunk_crc32c: Vec<u32>,
    /// The chunks.
    pub chunks: Vec<ChunkInfo>,
    /// Commit time, ms since the epoch.
    pub committed_ms: u64,
    /// `ok` (every chunk has its replicas, all alive), `degraded` (every chunk can be
    /// read, from a live holder or its drained file, but some chunk has fewer live
    /// holders than the replication factor) or `lost` (some chunk has neither).
    pub state: String,
    /// Other versions still kept, oldest first.
    pub older: Vec<u64>,
}

/// A benefactor as `pool status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenefactorInfo {
    /// Node id.
    pub node: String,
    /// Address.
    pub addr: String,
    /// Memory lent, bytes.
    pub mem: u64,
    /// Memory used, bytes.
    pub used: u64,
    /// Refreshed within the death timeout.
    pub alive: bool,
    /// Milliseconds since its last refresh.
    pub silent_ms: u64,
    /// Chunks the pool's metadata places there.
    pub chunks: u64,
    /// Why the manager no longer trusts it (lied about its memory), if it does not.
    #[serde(default)]
    pub suspect: Option<String>,
}

/// A request to the manager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// A benefactor declares itself (soft state).
    Register {
        /// Memory lent.
        mem: u64,
        /// Memory used.
        used: u64,
        /// Where it listens.
        addr: String,
    },
    /// A benefactor's periodic refresh.
    Refresh {
        /// Memory used.
        used: u64,
        /// Chunks held but not yet named by a commit, with the write that sent them.
        uncommitted: Vec<(u64, ChunkHash)>,
        /// Chunks drained since the last refresh.
        drained: Vec<ChunkHash>,
    },
    /// A client starts writing `path`.
    Open {
        /// Store path.
        path: String,
        /// Expected size (0: unknown).
        size: u64,
    },
    /// The striping plan ran out (members lost or full): more benefactors, excluding
    /// those named.
    Extend {
        /// The write.
        write_id: u64,
        /// Members not to use.
        exclude: Vec<String>,
    },
    /// Publish a written version.
    Commit {
        /// The write.
        write_id: u64,
        /// Size.
        size: u64,
        /// Chunk size.
        chunk_size: u64,
        /// mtime ns.
        mtime_ns: u64,
        /// Mode.
        mode: u32,
        /// Whole CRC32C.
        crc32c: u32,
        /// Chunk CRC32Cs.
        chunk_crc32c: Vec<u32>,
        /// The chunk map.
        chunks: Vec<ChunkRef>,
    },
    /// Give up a write (its chunks are reclaimed).
    Abort {
        /// The write.
        write_id: u64,
    },
    /// The newest committed version of `path`.
    Stat {
        /// Store path.
        path: String,
    },
    /// Every file under `prefix` (newest versions).
    List {
        /// Store path prefix (`/` for all).
        prefix: String,
    },
    /// Remove versions of `path`: one (`version`), or all.
    Delete {
        /// Store path.
        path: String,
        /// Only this version.
        version: Option<u64>,
        /// Only if its CRC32C is this.
        crc32c: Option<u32>,
    },
    /// Longevity of files under `prefix`: keep at most `versions`, none older than
    /// `seconds`.
    Keep {
        /// Store path prefix.
        prefix: String,
        /// Versions kept.
        versions: Option<u32>,
        /// Seconds kept.
        seconds: Option<u64>,
    },
    /// Benefactors, memory lent and used.
    Status,
}

/// The manager's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// Done.
    Ok,
    /// Refused.
    Err {
        /// errno.
        errno: i32,
        /// Why.
        reason: String,
    },
    /// To a refresh: work for the benefactor.
    Refreshed {
        /// False: the manager does not know this benefactor (restarted): register.
        known: bool,
        /// Committed chunks to drain, in commit order.
        commit: Vec<ChunkName>,
        /// Chunks to drop (no longer referenced, or their write died).
        drop: Vec<ChunkHash>,
    },
    /// To Open/Extend: the plan.
    Opened {
        /// The write's id.
        write_id: u64,
        /// Chunk size to use.
        chunk_size: u64,
        /// Benefactors to stripe over (sorted by free memory).
        stripe: Vec<Peer>,
        /// Chunks of the newest committed version (for incremental writes).
        prev: Vec<ChunkRef>,
    },
    /// To Commit.
    Committed {
        /// The version published.
        version: u64,
    },
    /// To Stat.
    File(Option<FileInfo>),
    /// To List.
    Files(Vec<FileInfo>),
    /// To Delete: versions removed.
    Deleted(u64),
    /// To Status.
    Status(Vec<BenefactorInfo>),
}

fn bad(why: impl Into<String>) -> String {
    why.into()
}

/// Check a pool store path: absolute, at most [`MAX_PATH`] bytes, components without
/// `.`/`..`/empty/NUL.
pub fn check_path(p: &str) -> Result<(), String> {
    let Some(rel) = p.strip_prefix('/') else {
        return Err(bad("not an absolute store path"));
    };
    if p.len() > MAX_PATH || rel.is_empty() {
        return Err(bad("store path empty or too long"));
    }
    ckptfs_transport::frame::check_path(rel).map_err(|e| e.to_string())
}

fn check_prefix(p: &str) -> Result<(), String> {
    if p == "/" {
        Ok(())
    } else {
        check_path(p.trim_end_matches('/'))
    }
}

fn check_name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    ok.then_some(()).ok_or_else(|| bad("bad node name"))
}

fn check_len<T>(v: &[T], max: usize, what: &str) -> Result<(), String> {
    (v.len() <= max)
        .then_some(())
        .ok_or_else(|| format!("{what}: more than {max} entries"))
}

fn check_refs(v: &[ChunkRef]) -> Result<(), String> {
    check_len(v, MAX_CHUNKS, "chunks")?;
    v.iter().try_for_each(|c| {
        check_len(&c.also, MAX_REPLICAS - 1, "replicas")?;
        c.holders().try_for_each(|n| check_name(n))?;
        let mut seen: Vec<&String> = c.holders().collect();
        seen.sort();
        seen.dedup();
        (seen.len() == 1 + c.also.len())
            .then_some(())
            .ok_or_else(|| bad("a chunk names one holder twice"))
    })
}

impl Request {
    /// Every bound of the message.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Request::Register { addr, .. } => (addr.len() <= 256)
                .then_some(())
                .ok_or_else(|| bad("addr too long")),
            Request::Refresh {
                uncommitted, drained, ..
            } => {
                check_len(uncommitted, MAX_LIST, "uncommitted")?;
                check_len(drained, MAX_LIST, "drained")
            }
            Request::Open { path, .. } | Request::Stat { path } | Request::Delete { path, .. } => {
                check_path(path)
            }
            Request::Extend { exclude, .. } => {
                check_len(exclude, MAX_LIST, "exclude")?;
                exclude.iter().try_for_each(|n| check_name(n))
            }
            Request::Commit {
                chunk_crc32c,
                chunks,
                size,
                chunk_size,
                ..
            } => {
                check_len(chunk_crc32c, MAX_CHUNKS, "chunk_crc32c")?;
                check_refs(chunks)?;
                if *chunk_size == 0 || size.div_ceil(*chunk_size) != chunks.len() as u64 {
                    return Err(bad("chunk map does not cover the size"));
                }
                if chunk_crc32c.len() != chunks.len() {
                    return Err(bad("one CRC per chunk"));
                }
                Ok(())
            }
            Request::List { prefix } | Request::Keep { prefix, .. } => check_prefix(prefix),
            Request::Abort { .. } | Request::Status => Ok(()),
        }
    }
}

/// Parse and check a request ([`MAX_BODY`] bytes at most).
pub fn parse_request(body: &str) -> Result<Request, String> {
    if body.len() > MAX_BODY {
        return Err(bad("request too long"));
    }
    let r: Request = serde_json::from_str(body).map_err(|e| format!("unreadable request: {e}"))?;
    r.check()?;
    Ok(r)
}

fn check_file(f: &FileInfo) -> Result<(), String> {
    check_path(&f.path)?;
    check_len(&f.chunks, MAX_CHUNKS, "chunks")?;
    f.chunks.iter().try_for_each(|c| {
        check_len(&c.replicas, MAX_REPLICAS - 1, "replicas")?;
        check_name(&c.node)?;
        c.replicas.iter().try_for_each(|r| check_name(&r.node))
    })
}

/// Parse a reply ([`MAX_BODY`] bytes at most; lists bounded).
pub fn parse_reply(body: &str) -> Result<Reply, String> {
    if body.len() > MAX_BODY {
        return Err(bad("reply too long"));
    }
    let r: Reply = serde_json::from_str(body).map_err(|e| format!("unreadable reply: {e}"))?;
    match &r {
        Reply::Refreshed { commit, drop, .. } => {
            check_len(commit, MAX_LIST, "commit")?;
            check_len(drop, MAX_LIST, "drop")?;
            commit.iter().try_for_each(|n| check_path(&n.path))?;
        }
        Reply::Opened { stripe, prev, .. } => {
            check_len(stripe, MAX_LIST, "stripe")?;
            stripe.iter().try_for_each(|p| check_name(&p.node))?;
            check_refs(prev)?;
        }
        Reply::File(Some(f)) => check_file(f)?,
        Reply::Files(v) => {
            check_len(v, MAX_LIST, "files")?;
            v.iter().try_for_each(check_file)?;
        }
        Reply::Status(v) => check_len(v, MAX_LIST, "benefactors")?,
        _ => {}
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        let r = Request::Open {
            path: "/run1/a".into(),
            size: 5,
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(parse_request(&s).unwrap(), r);
        for bad in [
            r#"{"op":"open","path":"/a/../b","size":1}"#,
            r#"{"op":"open","path":"rel","size":1}"#,
            r#"{"op":"open","path":"/a","size":1,"x":1}"#,
            r#"{"op":"refresh","used":1,"uncommitted":[[1,"zz"]],"drained":[]}"#,
            r#"{"op":"nope"}"#,
            r#"{"op":"commit","write_id":1,"size":10,"chunk_size":4,"mtime_ns":0,"mode":0,"crc32c":0,"chunk_crc32c":[],"chunks":[]}"#,
            // One holder named twice.
            r#"{"op":"commit","write_id":1,"size":4,"chunk_size":4,"mtime_ns":0,"mode":0,"crc32c":0,"chunk_crc32c":[1],"chunks":[{"hash":"0000000000000000000000000000000000000000000000000000000000000000","node":"node2","also":["node2"],"len":4}]}"#,
        ] {
            assert!(parse_request(bad).is_err(), "{bad}");
        }
        assert!(parse_request(&" ".repeat(MAX_BODY + 1)).is_err());
    }

    proptest! {
        #[test]
        fn the_parsers_never_panic(s in ".{0,400}") {
            let _ = parse_request(&s);
            let _ = parse_reply(&s);
        }

        #[test]
        fn mutated_requests_never_panic(idx in 0usize..200, b in any::<u8>()) {
            let r = Request::Commit {
                write_id: 3, size: 9, chunk_size: 4, mtime_ns: 1, mode: 0o644, crc32c: 7,
                chunk_crc32c: vec![1, 2, 3],
                chunks: (0..3).map(|i| ChunkRef { hash: ChunkHash::of(&[i]), node: "node2".into(), also: vec!["node3".into()], len: 4, sent: true }).collect(),
            };
            let mut s = serde_json::to_vec(&r).unwrap();
            let i = idx % s.len();
            s[i] = b;
            if let Ok(t) = std::str::from_utf8(&s) {
                let _ = parse_request(t);
            }
        }
    }
}
