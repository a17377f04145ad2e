//! Per-node credentials: one key per pair of nodes, so a node holds only what
//! authenticates itself.
//!
//! The launcher (`ckptfs cluster init`) holds the job's master [`Secret`] and derives
//! from it, for every pair of nodes `{a, b}`, a pair key
//!
//! ```text
//! K(a,b) = HMAC-SHA256(master, "ckptfs-pair-key-v1" | u32 len job | job
//!                              | u32 len lo | lo | u32 len hi | hi)     lo < hi bytewise
//! ```
//!
//! Node `a`'s key file holds `K(a,x)` for every other node `x` of the map, and nothing
//! else. A connection between `a` and `b` is authenticated with `K(a,b)`, which only `a`,
//! `b` and the launcher know: whoever holds `a`'s key file can act as `a` (and only as
//! `a`) toward every node, but cannot act as `b` toward `c`. Key files are written with
//! mode 0600 and read with the secret's checks (the caller's own regular file, no
//! group/other bits, no symlink).
//!
//! Key file (text, one item per line):
//!
//! ```text
//! ckptfs-node-keys 1
//! job <job>
//! node <node id>
//! peer <node id> <64 hex digits>
//! ...
//! ```

use crate::secret::{read_private, write_private};
use crate::{ClusterError, Result, Secret};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::path::Path;

/// Length of a pair key (bytes).
pub const PAIR_KEY_LEN: usize = 32;

/// Largest key file read (bytes): 100,000 peers of about 150 bytes.
const MAX_KEY_FILE: u64 = 16 << 20;

/// A pair key. Its `Debug` never shows the bytes; they are wiped on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct PairKey([u8; PAIR_KEY_LEN]);

impl std::fmt::Debug for PairKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PairKey(<32 bytes>)")
    }
}

impl Drop for PairKey {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference into our own array;
            // the volatile write keeps the wipe from being optimised away.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

impl PairKey {
    /// The key's bytes (the HMAC key of the handshake; never send them).
    pub fn expose(&self) -> &[u8; PAIR_KEY_LEN] {
        &self.0
    }

    /// A key from its bytes (tests, and a refusal path that must not tell an unknown
    /// node from a bad proof).
    pub fn from_bytes(b: [u8; PAIR_KEY_LEN]) -> PairKey {
        PairKey(b)
    }
}

/// The key of the pair `{a, b}` of `job`, derived from the master secret.
pub fn pair_key(master: &Secret, job: &str, a: &str, b: &str) -> PairKey {
    let (lo, hi) = if a.as_bytes() <= b.as_bytes() {
        (a, b)
    } else {
        (b, a)
    };
    // HMAC accepts keys of any length; new_from_slice cannot fail for HMAC.
    let mut m = match Hmac::<Sha256>::new_from_slice(master.expose()) {
        Ok(m) => m,
        Err(_) => Hmac::<Sha256>::new(&Default::default()),
    };
    m.update(b"ckptfs-pair-key-v1");
    for part in [job, lo, hi] {
        m.update(&(part.len() as u32).to_le_bytes());
        m.update(part.as_bytes());
    }
    let mut k = [0u8; PAIR_KEY_LEN];
    k.copy_from_slice(&m.finalize().into_bytes());
    PairKey(k)
}

/// One node's credentials: its id, the job, and its key with each other node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeKeys {
    node: String,
    job: String,
    peers: BTreeMap<String, PairKey>,
}

fn bad(path: &Path, why: impl Into<String>) -> ClusterError {
    ClusterError::Secret {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; PAIR_KEY_LEN]> {
    if s.len() != 2 * PAIR_KEY_LEN || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; PAIR_KEY_LEN];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl NodeKeys {
    /// `node`'s keys with every node in `nodes` (itself excepted), derived from the
    /// job's master secret (what the launcher does).
    pub fn derive<'a>(
        master: &Secret,
        job: &str,
        node: &str,
        nodes: impl IntoIterator<Item = &'a str>,
    ) -> NodeKeys {
        let peers = nodes
            .into_iter()
            .filter(|n| *n != node)
            .map(|n| (n.to_string(), pair_key(master, job, node, n)))
            .collect();
        NodeKeys {
            node: node.to_string(),
            job: job.to_string(),
            peers,
        }
    }

    /// With `key` as the key of the pair (this node, `peer`), where `peer` is not a node
    /// of the map but a role derived from one (the pool's clients, `<node>.client`,
    /// keyed by [`pair_key`] from the job's secret).
    pub fn with_pair(mut self, peer: &str, key: PairKey) -> NodeKeys {
        self.peers.insert(peer.to_string(), key);
        self
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The job.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The key shared with `peer`, if this node has one (None for itself and for a node
    /// outside the map).
    pub fn pair(&self, peer: &str) -> Option<&PairKey> {
        self.peers.get(peer)
    }

    /// The peers this node has a key with.
    pub fn peers(&self) -> impl Iterator<Item = &str> {
        self.peers.keys().map(String::as_str)
    }

    /// The key file's text.
    fn to_text(&self) -> String {
        let mut s = format!("ckptfs-node-keys 1\njob {}\nnode {}\n", self.job, self.node);
        for (p, k) in &self.peers {
            s.push_str(&format!("peer {p} {}\n", hex(k.expose())));
        }
        s
    }

    /// Writes the key file (mode 0600, created exclusively; `force` replaces it).
    pub fn create(&self, path: &Path, force: bool) -> Result<()> {
        write_private(path, self.to_text().as_bytes(), force)
    }

    /// Reads a key file with the secret file's checks (the caller's own regular file,
    /// mode 0600, no symlink) and checks its form.
    pub fn load(path: &Path) -> Result<NodeKeys> {
        let text = read_private(path, MAX_KEY_FILE)?;
        let mut lines = text.lines();
        if lines.next() != Some("ckptfs-node-keys 1") {
            return Err(bad(path, "not a ckptfs node key file (first line)"));
        }
        let mut field = |want: &str| -> Result<String> {
            let l = lines.next().unwrap_or("");
            match l.split_once(' ') {
                Some((k, v)) if k == want => {
                    crate::check_name(want, v).map_err(|e| bad(path, e.to_string()))?;
                    Ok(v.to_string())
                }
                _ => Err(bad(path, format!("expected the line `{want} ...`"))),
            }
        };
        let job = field("job")?;
        let node = field("node")?;
        let mut peers = BTreeMap::new();
        for (i, l) in lines.enumerate() {
            let mut w = l.split(' ');
            let (Some("peer"), Some(id), Some(k), None) = (w.next(), w.next(), w.next(), w.next()) else {
                return Err(bad(path, format!("line {}: expected `peer ID KEY`", i + 4)));
            };
            crate::check_name("peer", id).map_err(|e| bad(path, e.to_string()))?;
            let key =
                unhex(k).ok_or_else(|| bad(path, format!("line {}: the key is not 64 hex digits", i + 4)))?;
            if id == node || peers.insert(id.to_string(), PairKey(key)).is_some() {
                return Err(bad(
                    path,
                    format!("line {}: peer {id:?} repeated or this node", i + 4),
                ));
            }
        }
        Ok(NodeKeys { node, job, peers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_keys_are_symmetric_and_distinct() {
        let m = Secret::from_bytes(&[7u8; 32]).unwrap();
        assert_eq!(pair_key(&m, "j", "a", "b"), pair_key(&m, "j", "b", "a"));
        assert_ne!(pair_key(&m, "j", "a", "b"), pair_key(&m, "j", "a", "c"));
        assert_ne!(pair_key(&m, "j", "a", "b"), pair_key(&m, "k", "a", "b"));
        // Length prefixes: ("ab","c") is not ("a","bc").
        assert_ne!(pair_key(&m, "j", "ab", "c"), pair_key(&m, "j", "a", "bc"));
        let other = Secret::from_bytes(&[8u8; 32]).unwrap();
        assert_ne!(pair_key(&m, "j", "a", "b"), pair_key(&other, "j", "a", "b"));
    }

    #[test]
    fn a_node_holds_only_its_own_pairs_and_the_file_round_trips() {
        let m = Secret::from_bytes(&[1u8; 32]).unwrap();
        let nodes = ["n1", "n2", "n3"];
        let k1 = NodeKeys::derive(&m, "job", "n1", nodes);
        assert!(k1.pair("n1").is_none());
        assert_eq!(k1.peers().collect::<Vec<_>>(), ["n2", "n3"]);
        let k2 = NodeKeys::derive(&m, "job", "n2", nodes);
        assert_eq!(k1.pair("n2"), k2.pair("n1"));
        // n2 cannot hold the key of {n1, n3}.
        assert!(k2.peers().all(|p| p != "n2"));
        assert_ne!(k2.pair("n3"), k1.pair("n3"));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("n1.key");
        k1.create(&p, false).unwrap();
        assert_eq!(NodeKeys::load(&p).unwrap(), k1);
        assert!(k1.create(&p, false).is_err(), "never overwritten without force");
        // Group-readable: refused.
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
        assert!(NodeKeys::load(&p).is_err());
    }

    #[test]
    fn damaged_key_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (i, text) in [
            "",
            "ckptfs-node-keys 2\njob j\nnode a\n",
            "ckptfs-node-keys 1\nnode a\njob j\n",
            "ckptfs-node-keys 1\njob j\nnode a\npeer b 00\n",
            "ckptfs-node-keys 1\njob j\nnode a\npeer a 0000000000000000000000000000000000000000000000000000000000000000\n",
            "ckptfs-node-keys 1\njob j\nnode ../x\n",
            "ckptfs-node-keys 1\njob j\nnode a\npeer b 000000000000000000000000000000000000000000000000000000000000000g\n",
        ]
        .iter()
        .enumerate()
        {
            let p = dir.path().join(format!("{i}.key"));
            write_private(&p, text.as_bytes(), false).unwrap();
            assert!(NodeKeys::load(&p).is_err(), "accepted {text:?}");
        }
    }
}
