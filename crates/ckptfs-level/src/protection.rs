//! Set-level protection: a level that protects a *set* of nodes' parts of a dataset
//! together (partner copies, erasure sets with XOR or Reed-Solomon, as SCR's redset
//! does), not file by file.
//!
//! A member's *part* of a dataset is its files of that dataset in a recorded order. The
//! scheme keeps redundancy for the set so that the parts of up to
//! [`SetProtection::tolerates`] lost members can be rebuilt from the survivors;
//! [`SetProtection::recover`] writes a lost member's files into a level (the
//! replacement's store) through the mover, each checked against the CRCs recorded when
//! the part was protected.
//!
//! The restore side is driven through the trait alone, whatever the scheme (partner
//! copies, erasure sets, a new kind): a restart asks each set level in turn
//! [`SetProtection::locate`] for the files of a member's part no faster level holds,
//! then [`SetProtection::recover_files`] from the level instance it named; a
//! replacement node's `restore --from-peers` asks [`SetProtection::recover_member`] for
//! everything of its own under a prefix. Nothing outside the implementations names a
//! kind: the level ids say which level (`partner:node3`, `erasure:set0`).

use crate::{Level, LevelError, LevelId, Stored};
use std::collections::BTreeMap;

/// The key of a dataset of a job in a set level (`JOB.ID`, the key erasure headers and
/// partner questions carry across nodes).
pub fn dataset_key(job: &str, id: u64) -> String {
    format!("{job}.{id}")
}

/// One file of a member's part as its record has it: what a set level must bring back
/// exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartFile {
    /// Store path on the member.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC32C of the whole file.
    pub crc32c: u32,
}

/// One file a whole-member recovery brought back.
#[derive(Debug, Clone)]
pub struct MemberFile {
    /// Store path.
    pub path: String,
    /// Bytes written.
    pub size: u64,
    /// The level instance it came from (`partner:node2`, `erasure:set0`): its kind is
    /// the level a report names.
    pub level: LevelId,
    /// Where it came from, as reports show it (the holder node for a copy, the set's id
    /// for a rebuild).
    pub from: String,
    /// Seconds taken.
    pub seconds: f64,
}

/// What [`SetProtection::recover_member`] did.
#[derive(Debug, Clone, Default)]
pub struct MemberRecovery {
    /// Files brought back.
    pub restored: Vec<MemberFile>,
    /// Files already complete on the destination (kept: the fastest level).
    pub present: Vec<String>,
    /// What could not be brought back (a file's path, or a dataset the scheme names),
    /// and why; a later level may still deliver a file named here.
    pub failed: Vec<(String, String)>,
    /// Members or holders that could not be asked: node, why.
    pub unreachable: BTreeMap<String, String>,
    /// Things the caller should be told that are neither failures nor files (an older
    /// copy that was not taken, ...), one sentence each, unescaped (paths as they are:
    /// a terminal's caller escapes them).
    pub notes: Vec<String>,
}

/// One member's part of a dataset: the files, in the order the scheme records.
#[derive(Debug, Clone)]
pub struct Part {
    /// Dataset id.
    pub dataset: String,
    /// The member (node id) whose part this is.
    pub member: String,
    /// Its files, in order.
    pub files: Vec<Stored>,
}

/// Where a dataset's protection stands on one set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetState {
    /// Every member's redundancy is stored and verified.
    Protected,
    /// Protection is being built; nothing can be rebuilt from it yet.
    InProgress,
    /// Some members are lost; their parts can be rebuilt (they are named).
    Degraded(Vec<String>),
    /// More members lost than the scheme tolerates: these parts are gone (named).
    Lost(Vec<String>),
    /// The set holds nothing of this dataset.
    Absent,
}

/// What a recovery wrote.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// Files written, with their copies as stored on the destination.
    pub files: Vec<Stored>,
    /// Bytes written.
    pub bytes: u64,
}

/// A protection scheme over a set of nodes (see the module documentation).
pub trait SetProtection: Send + Sync {
    /// The scheme's level id (`partner:node3`, `erasure:set2`).
    fn id(&self) -> LevelId;
    /// The set's members (node ids), in set order.
    fn members(&self) -> Vec<String>;
    /// How many members of the set may be lost at once with every part still rebuilt.
    fn tolerates(&self) -> usize;
    /// Extra memory on the set per byte of a part (1.0 for a partner copy, 1/(N-1) for
    /// XOR over N members, k/(N-k) for Reed-Solomon with k parity members).
    fn memory_overhead(&self) -> f64;
    /// Protect this member's part (called on every member once the dataset is complete).
    fn protect(&self, part: &Part) -> Result<(), LevelError>;
    /// Where the dataset's protection stands.
    fn state(&self, dataset: &str) -> Result<SetState, LevelError>;
    /// Rebuild `member`'s part of `dataset` into `into`.
    fn recover(&self, dataset: &str, member: &str, into: &dyn Level) -> Result<Recovered, LevelError>;

    /// For each of `files` of `member`'s part of `dataset` (a [`dataset_key`] across
    /// nodes), the level instance this scheme can bring back exactly that content from
    /// (`partner:node3` for a copy on node3, `erasure:set0` when the set can rebuild the
    /// part), or None. Err(why) when the scheme cannot say at all (nothing of the
    /// dataset, too many members lost: named).
    fn locate(&self, dataset: &str, member: &str, files: &[PartFile])
        -> Result<Vec<Option<LevelId>>, String>;

    /// Bring `files` of `member`'s part of `dataset` back into `into` from `from` (an
    /// instance [`SetProtection::locate`] named), every CRC checked; a scheme that
    /// rebuilds a whole part at once may write the part's other files too (they are the
    /// part's bytes). The default rebuilds the part ([`SetProtection::recover`]) and
    /// checks that each file asked for came back with its size and CRC32C.
    fn recover_files(
        &self,
        dataset: &str,
        member: &str,
        files: &[PartFile],
        from: &LevelId,
        into: &dyn Level,
    ) -> Result<Recovered, LevelError> {
        self.serves(from)?;
        let r = self.recover(dataset, member, into)?;
        for f in files {
            let back = r
                .files
                .iter()
                .any(|s| s.path == f.path && s.version.size == f.size && s.version.crc32c == Some(f.crc32c));
            if !back {
                return Err(LevelError::Changed(f.path.clone()));
            }
        }
        Ok(r)
    }

    /// Bring back every file of `member` under `prefix` the scheme protects (any
    /// dataset) into `into`: a replacement node's whole-store recovery. The default
    /// answers ENOTSUP, for a scheme that finds its parts by dataset only.
    fn recover_member(
        &self,
        member: &str,
        prefix: &str,
        into: &dyn Level,
    ) -> Result<MemberRecovery, LevelError> {
        let _ = (member, prefix, into);
        Err(LevelError::backend(
            libc::ENOTSUP,
            std::io::Error::other(format!("{} recovers by dataset only", self.id())),
        ))
    }

    /// EINVAL unless `from` is an instance of this set level ([`SetProtection::covers`]):
    /// the first check of every `recover_files`.
    fn serves(&self, from: &LevelId) -> Result<(), LevelError> {
        if self.covers(from) {
            return Ok(());
        }
        Err(LevelError::backend(
            libc::EINVAL,
            std::io::Error::other(format!("{} does not serve {from}", self.id())),
        ))
    }

    /// Whether `id` is an instance of this set level: its own id, or, when its id has
    /// no instance (`partner`: the cluster's partner copies), any instance of its kind
    /// (`partner:node3`).
    fn covers(&self, id: &LevelId) -> bool {
        let me = self.id();
        me.kind == id.kind && (me.instance.is_empty() || me.instance == id.instance)
    }
}
