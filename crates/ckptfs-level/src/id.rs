//! Level ids: a level is a run-time instance (`partner:node3`, `pfs:/scratch/run1`,
//! `s3:bucket/prefix`, `erasure:set2`, `pool:mgr1`), not only a kind.

use crate::LevelKind;
use std::fmt;

/// The id of one level instance: its kind's name and, where there are several of that
/// kind, which one (`kind:instance`; `local` alone for the node's own store).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LevelId {
    /// The kind's name (`local`, `partner`, `erasure`, `pool`, `pfs`, `s3`, or a new
    /// level's own name).
    pub kind: String,
    /// Which instance (a node id, a directory, `bucket/prefix`); empty where the kind has
    /// one instance.
    pub instance: String,
}

impl LevelId {
    /// `kind:instance`.
    pub fn new(kind: impl Into<String>, instance: impl Into<String>) -> LevelId {
        LevelId {
            kind: kind.into(),
            instance: instance.into(),
        }
    }

    /// Parse `kind` or `kind:instance` (the instance may itself contain `:`). None for
    /// an empty kind or one with characters other than `[a-z0-9_-]`.
    pub fn parse(s: &str) -> Option<LevelId> {
        let (kind, instance) = s.split_once(':').unwrap_or((s, ""));
        let ok = !kind.is_empty()
            && kind
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        ok.then(|| LevelId::new(kind, instance))
    }

    /// The settings' level kind of this id, where it is one of the known kinds (`s3`
    /// and `object` are object storage).
    pub fn level_kind(&self) -> Option<LevelKind> {
        match self.kind.as_str() {
            "s3" | "gs" | "az" => Some(LevelKind::Object),
            k => LevelKind::ALL.into_iter().find(|l| l.name() == k),
        }
    }

    /// Rank of the kind in the default read order (fastest first: local, partner,
    /// erasure, pool, PFS, object storage; kinds this crate does not know come after).
    pub fn kind_rank(&self) -> usize {
        self.level_kind()
            .and_then(|k| LevelKind::ALL.iter().position(|l| *l == k))
            .unwrap_or(LevelKind::ALL.len())
    }
}

impl fmt::Display for LevelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.instance.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{}:{}", self.kind, self.instance)
        }
    }
}

impl std::str::FromStr for LevelId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LevelId::parse(s).ok_or_else(|| format!("not a level id: {s:?} (expected KIND or KIND:INSTANCE)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_print_and_rank() {
        let p = LevelId::parse("partner:node3").unwrap();
        assert_eq!(p.to_string(), "partner:node3");
        assert_eq!(p.level_kind(), Some(LevelKind::Partner));
        let s = LevelId::parse("s3:bucket/pre:fix").unwrap();
        assert_eq!((s.kind.as_str(), s.instance.as_str()), ("s3", "bucket/pre:fix"));
        assert_eq!(s.level_kind(), Some(LevelKind::Object));
        assert_eq!(LevelId::parse("local").unwrap().to_string(), "local");
        assert!(LevelId::parse("").is_none());
        assert!(LevelId::parse(":x").is_none());
        assert!(LevelId::parse("Bad Kind:x").is_none());
        let dir = LevelId::parse("dir:/tmp/x").unwrap();
        assert!(dir.kind_rank() > s.kind_rank());
        assert!(LevelId::parse("local").unwrap().kind_rank() < p.kind_rank());
    }
}
