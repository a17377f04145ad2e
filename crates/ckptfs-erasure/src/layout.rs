//! Where each byte of a set lives: segments, stripes, parity holders; and the header
//! every member keeps of an encoded dataset.
//!
//! A set has `n` members and a scheme with `p` parity shards per stripe (1 for XOR, `k`
//! for Reed-Solomon). Member `i`'s *part* (its files of the dataset concatenated in the
//! recorded order) is logically padded with zeros to the largest part `L` of the set and
//! cut into `n - p` segments of `S = ceil(L / (n - p))` bytes (rounded up to 64). There
//! are `n` stripes; stripe `s`'s parity is held by members `s, s+1, ..., s+p-1 (mod n)`
//! (row `j` by member `s+j`), its data shards are one segment of each other member.
//! Every member is a data member of exactly `n - p` stripes (its segments in stripe
//! order) and holds `p` parity shards: `p * S ~ p/(n-p)` of the largest part.
//!
//! Losing any `p` members loses at most `p` shards of every stripe (one per member), so
//! every stripe, hence every part, is rebuilt from the survivors.

use crate::codec::Scheme;
use crate::ErasureError;
use ckptfs_level::Stored;
use serde::{Deserialize, Serialize};

/// Segment lengths are rounded up to this (Reed-Solomon wants even lengths; 64 keeps
/// the XOR loop on whole words).
pub const SEGMENT_ALIGN: u64 = 64;
/// Header format version.
pub const FORMAT: u32 = 1;
/// Largest header accepted when reading one back.
pub const MAX_HEADER: u64 = 64 << 20;
/// Most members in a set.
pub const MAX_MEMBERS: usize = 1024;
/// Most files in one member's part.
pub const MAX_FILES: usize = 1 << 20;

/// The shape of one encoded set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Members.
    pub n: usize,
    /// Scheme.
    pub scheme: Scheme,
    /// Segment length in bytes.
    pub segment: u64,
}

impl Layout {
    /// The layout of `n` members whose largest part is `largest` bytes.
    pub fn new(scheme: Scheme, n: usize, largest: u64) -> Result<Layout, ErasureError> {
        if n < scheme.min_members() || n > MAX_MEMBERS {
            return Err(ErasureError::Layout(format!(
                "{scheme} needs between {} and {MAX_MEMBERS} members, the set has {n}",
                scheme.min_members()
            )));
        }
        let d = (n - scheme.parity()) as u64;
        let segment = largest.div_ceil(d).div_ceil(SEGMENT_ALIGN) * SEGMENT_ALIGN;
        Ok(Layout { n, scheme, segment })
    }

    /// Data shards per stripe (`n - p`): also the number of segments of each part.
    pub fn data(&self) -> usize {
        self.n - self.scheme.parity()
    }

    /// The members holding stripe `s`'s parity rows, row 0 first.
    pub fn holders(&self, s: usize) -> Vec<usize> {
        (0..self.scheme.parity()).map(|j| (s + j) % self.n).collect()
    }

    /// The data members of stripe `s`, in shard order.
    pub fn data_members(&self, s: usize) -> Vec<usize> {
        let p = self.scheme.parity();
        (p..self.n).map(|d| (s + d) % self.n).collect()
    }

    /// Which of member `i`'s segments is its data shard in stripe `s` (None when it
    /// holds parity of that stripe).
    pub fn segment_of(&self, i: usize, s: usize) -> Option<usize> {
        let p = self.scheme.parity();
        let off = (i + self.n - s) % self.n;
        if off < p {
            return None;
        }
        // Stripes where i is data, in increasing stripe order.
        Some((0..s).filter(|&t| (i + self.n - t) % self.n >= p).count())
    }

    /// The stripe in which member `i` contributes its segment `t`.
    pub fn stripe_of(&self, i: usize, t: usize) -> usize {
        (0..self.n)
            .filter(|&s| self.segment_of(i, s).is_some())
            .nth(t)
            .expect("segment index below n - p")
    }

    /// `(stripe, row)` of every parity shard member `i` holds.
    pub fn held_by(&self, i: usize) -> Vec<(usize, usize)> {
        let p = self.scheme.parity();
        (0..p).map(|j| ((i + self.n - j) % self.n, j)).collect()
    }
}

/// A store path an application may own: absolute, no empty, `.` or `..` component, at
/// most 4096 bytes, and not under the system namespace `/.ckptfs` (a header read back
/// from a store never makes a rebuild write there).
pub fn app_path(p: &str) -> bool {
    let Some(rel) = p.strip_prefix('/') else {
        return false;
    };
    p.len() <= 4096
        && !rel.is_empty()
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
        && rel.split('/').next() != Some(".ckptfs")
}

/// One file of a member's part, as recorded when the set was encoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRecord {
    /// Store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Whole-file CRC32C.
    pub crc32c: u32,
    /// Permission bits.
    pub mode: u32,
    /// Modification time (ns since the epoch).
    pub mtime_ns: u64,
    /// The source's copy serial.
    pub serial: u64,
    /// Chunk size of `chunk_crc32c`.
    pub chunk_size: u64,
    /// CRC32C of every chunk.
    pub chunk_crc32c: Vec<u32>,
}

impl FileRecord {
    /// The record of a copy (None when its CRCs are unknown).
    pub fn of(s: &Stored) -> Option<FileRecord> {
        let crc = s.version.crc32c?;
        let cs = s.chunk_size.max(1);
        if s.chunk_crc32c.len() as u64 != s.version.size.div_ceil(cs) {
            return None;
        }
        Some(FileRecord {
            path: s.path.clone(),
            size: s.version.size,
            crc32c: crc,
            mode: s.mode,
            mtime_ns: s.version.mtime_ns,
            serial: s.version.serial,
            chunk_size: cs,
            chunk_crc32c: s.chunk_crc32c.clone(),
        })
    }

    /// The copy this record describes (no inode).
    pub fn stored(&self) -> Stored {
        Stored {
            path: self.path.clone(),
            version: ckptfs_level::Version {
                size: self.size,
                mtime_ns: self.mtime_ns,
                crc32c: Some(self.crc32c),
                serial: self.serial,
                ..Default::default()
            },
            mode: self.mode,
            chunk_size: self.chunk_size,
            chunk_crc32c: self.chunk_crc32c.clone(),
        }
    }
}

/// One member's part as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartRecord {
    /// Member (node id).
    pub member: String,
    /// Bytes in the part (sum of its files).
    pub size: u64,
    /// CRC32C of the whole part (its files concatenated in order).
    pub crc32c: u32,
    /// Its files, in part order.
    pub files: Vec<FileRecord>,
}

/// One parity shard as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParityRecord {
    /// Stripe.
    pub stripe: usize,
    /// Row (0..p).
    pub row: usize,
    /// The member holding it.
    pub holder: String,
    /// Whole-shard CRC32C.
    pub crc32c: u32,
    /// Chunk CRC32Cs (the header's `chunk_size`).
    pub chunk_crc32c: Vec<u32>,
}

/// What every member keeps of an encoded dataset: enough to prove what a rebuild made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// [`FORMAT`].
    pub format: u32,
    /// Dataset id.
    pub dataset: String,
    /// Set name.
    pub set: String,
    /// Encoding generation (a re-encode writes a new one; the newest whole one counts).
    pub epoch: u64,
    /// Scheme.
    pub scheme: Scheme,
    /// Members in set order.
    pub members: Vec<String>,
    /// One per member, in member order.
    pub parts: Vec<PartRecord>,
    /// Segment length.
    pub segment: u64,
    /// Chunk size of the parity shards' CRCs.
    pub chunk_size: u64,
    /// Every parity shard of the set.
    pub parity: Vec<ParityRecord>,
}

impl Header {
    /// The layout the header describes.
    pub fn layout(&self) -> Layout {
        Layout {
            n: self.members.len(),
            scheme: self.scheme,
            segment: self.segment,
        }
    }

    /// Parse and check a header read back from a store: bounded sizes, consistent
    /// counts (a header that does not add up is refused, never half-used).
    pub fn parse(bytes: &[u8]) -> Result<Header, ErasureError> {
        if bytes.len() as u64 > MAX_HEADER {
            return Err(ErasureError::Header("header too long".into()));
        }
        let h: Header = serde_json::from_slice(bytes)
            .map_err(|e| ErasureError::Header(format!("unreadable header: {e}")))?;
        h.check()?;
        Ok(h)
    }

    /// Consistency checks (see [`Header::parse`]).
    pub fn check(&self) -> Result<(), ErasureError> {
        self.check_plan()?;
        self.check_parity()
    }

    /// The checks of everything but the parity records (a plan: the header before its
    /// parity is computed).
    pub fn check_plan(&self) -> Result<(), ErasureError> {
        let bad = |m: String| Err(ErasureError::Header(m));
        if self.format != FORMAT {
            return bad(format!("format {} is not {FORMAT}", self.format));
        }
        let n = self.members.len();
        let lay = Layout::new(self.scheme, n, 0)?;
        if self.parts.len() != n || self.parts.iter().zip(&self.members).any(|(p, m)| &p.member != m) {
            return bad("parts do not match the members".into());
        }
        if !self.segment.is_multiple_of(SEGMENT_ALIGN) || self.chunk_size == 0 {
            return bad("bad segment or chunk size".into());
        }
        // The segment follows from the largest part: no larger (nothing allocates more
        // than the parts need).
        let largest = self.parts.iter().map(|p| p.size).max().unwrap_or(0);
        if Layout::new(self.scheme, n, largest)?.segment != self.segment {
            return bad("the segment length does not follow from the largest part".into());
        }
        let cap = self.segment.saturating_mul(lay.data() as u64);
        for p in &self.parts {
            if p.files.len() > MAX_FILES {
                return bad(format!("member {:?}: too many files", p.member));
            }
            let sum = p.files.iter().try_fold(0u64, |a, f| a.checked_add(f.size));
            if sum != Some(p.size) || p.size > cap {
                return bad(format!("member {:?}: part size does not add up", p.member));
            }
            for f in &p.files {
                if !app_path(&f.path) {
                    return bad(format!(
                        "member {:?}: {:?} is not an application store path",
                        p.member, f.path
                    ));
                }
                if f.chunk_size == 0 || f.chunk_crc32c.len() as u64 != f.size.div_ceil(f.chunk_size) {
                    return bad(format!("{}: chunk CRCs do not match its size", f.path));
                }
            }
        }
        Ok(())
    }

    fn check_parity(&self) -> Result<(), ErasureError> {
        let bad = |m: String| Err(ErasureError::Header(m));
        let n = self.members.len();
        let lay = Layout::new(self.scheme, n, 0)?;
        let want_chunks = self.segment.div_ceil(self.chunk_size) as usize;
        if self.parity.len() != n * self.scheme.parity() {
            return bad("wrong number of parity records".into());
        }
        for (i, r) in self.parity.iter().enumerate() {
            let (s, j) = (i / self.scheme.parity(), i % self.scheme.parity());
            if r.stripe != s || r.row != j || r.holder != self.members[lay.holders(s)[j]] {
                return bad(format!("parity record {i} is out of place"));
            }
            if r.chunk_crc32c.len() != want_chunks {
                return bad(format!("parity record {i}: wrong number of chunk CRCs"));
            }
        }
        Ok(())
    }

    /// Index of `member`.
    pub fn index_of(&self, member: &str) -> Option<usize> {
        self.members.iter().position(|m| m == member)
    }

    /// The record of stripe `s`'s parity row `j`.
    pub fn parity_of(&self, s: usize, j: usize) -> &ParityRecord {
        &self.parity[s * self.scheme.parity() + j]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_application_paths_are_accepted() {
        assert!(app_path("/ckpt/a.0"));
        for bad in [
            "",
            "/",
            "ckpt/a",
            "/ckpt//a",
            "/ckpt/../a",
            "/./a",
            "/.ckptfs/partners/x",
            "/.ckptfs",
        ] {
            assert!(!app_path(bad), "{bad:?}");
        }
    }

    #[test]
    fn every_member_holds_p_shards_and_gives_n_minus_p_segments() {
        for (scheme, n) in [
            (Scheme::Xor, 2),
            (Scheme::Xor, 6),
            (Scheme::Rs(2), 3),
            (Scheme::Rs(2), 8),
            (Scheme::Rs(3), 7),
        ] {
            let l = Layout::new(scheme, n, 1000).unwrap();
            for i in 0..n {
                let segs: Vec<usize> = (0..n).filter_map(|s| l.segment_of(i, s)).collect();
                assert_eq!(segs, (0..l.data()).collect::<Vec<_>>());
                for t in 0..l.data() {
                    assert_eq!(l.segment_of(i, l.stripe_of(i, t)), Some(t));
                }
                for (s, j) in l.held_by(i) {
                    assert_eq!(l.holders(s)[j], i);
                }
            }
            for s in 0..n {
                let mut all: Vec<usize> = l.holders(s).into_iter().chain(l.data_members(s)).collect();
                all.sort();
                assert_eq!(all, (0..n).collect::<Vec<_>>());
            }
            assert!(l.segment * l.data() as u64 >= 1000);
        }
    }
}
