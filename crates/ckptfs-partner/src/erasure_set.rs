//! The cluster's erasure sets as set levels ([`ClusterErasureSet`], issue 32): one per
//! set of the cluster file's erasure plan, as node `me` sees it. The survivors' side
//! (their shares, headers and parity) is served by the node daemons; this is the client
//! side of [`crate::set_rebuild`] behind [`SetProtection`]: `locate` is
//! [`set_can_rebuild`], `recover_files` and `recover_member` are
//! [`rebuild_from_set`] of one dataset and of every dataset.

use crate::error::NodeError;
use crate::set_rebuild::{judge_key, rebuild_from_set, set_can_rebuild, survey, whole_shares};
use ckptfs_cluster::Cluster;
use ckptfs_erasure::{RedSet, Scheme};
use ckptfs_level::{
    Level, LevelError, LevelId, MemberFile, MemberRecovery, Part, PartFile, Recovered, SetProtection,
    SetState,
};
use ckptfs_store::level::StoreLevel;
use ckptfs_store::Store;
use std::time::Duration;

/// The kind of the erasure sets' level ids.
pub const KIND: &str = "erasure";

/// One erasure set of the cluster, as node `me` sees it; its rebuilds write into `me`'s
/// store.
pub struct ClusterErasureSet {
    cluster: Cluster,
    me: String,
    store: Store,
    set: RedSet,
    scheme: Scheme,
}

impl ClusterErasureSet {
    /// Every set of `cluster`'s erasure plan (none without one; an erasure plan that
    /// cannot be formed is named in the log and gives none).
    pub fn of_cluster(cluster: &Cluster, me: &str, store: &Store) -> Vec<ClusterErasureSet> {
        let plan = match ckptfs_erasure::cluster_sets(cluster) {
            None => return Vec::new(),
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                tracing::warn!("the cluster's erasure sets cannot be formed: {e}");
                return Vec::new();
            }
        };
        let scheme = cluster
            .redundancy
            .erasure
            .map(Scheme::from)
            .unwrap_or(Scheme::Xor);
        plan.sets
            .iter()
            .map(|set| ClusterErasureSet {
                cluster: cluster.clone(),
                me: me.to_string(),
                store: store.clone(),
                set: set.clone(),
                scheme,
            })
            .collect()
    }

    fn refuse(errno: i32, what: String) -> LevelError {
        LevelError::backend(errno, std::io::Error::other(what))
    }

    /// Only this node's own part, rebuilt into its own store.
    fn check_target(&self, member: &str, into: &dyn Level) -> Result<(), LevelError> {
        if !self.set.members.contains(&self.me) {
            return Err(Self::refuse(
                libc::EINVAL,
                format!("node {} is not a member of {}", self.me, self.id()),
            ));
        }
        if member != self.me {
            return Err(Self::refuse(
                libc::EINVAL,
                format!("node {} rebuilds its own part only, not {member}'s", self.me),
            ));
        }
        let mine = StoreLevel::new(&self.store)?;
        if into.name() != mine.name() {
            return Err(Self::refuse(
                libc::EINVAL,
                format!(
                    "{} rebuilds into this node's store only, not {}",
                    self.id(),
                    into.name()
                ),
            ));
        }
        Ok(())
    }

    /// Rebuild this node's part of `dataset` (kept when it is whole already): the
    /// bytes written.
    fn rebuild_one(&self, dataset: &str) -> Result<u64, LevelError> {
        let rep = rebuild_from_set(&self.cluster, &self.me, &self.store, Some(dataset)).map_err(ne)?;
        if let Some((_, why)) = rep.failed.iter().find(|(d, _)| d == dataset) {
            return Err(Self::refuse(libc::EIO, why.clone()));
        }
        if let Some(p) = rep.rebuilt.iter().find(|r| r.dataset == dataset) {
            return Ok(p.files.iter().map(|(_, n)| n).sum());
        }
        if rep.present.iter().any(|d| d == dataset) {
            return Ok(0);
        }
        Err(Self::refuse(
            libc::ENOENT,
            format!("{} rebuilt nothing of {dataset}", self.id()),
        ))
    }
}

fn ne(e: NodeError) -> LevelError {
    LevelError::backend(e.errno(), std::io::Error::other(e.to_string()))
}

impl SetProtection for ClusterErasureSet {
    fn id(&self) -> LevelId {
        LevelId::new(KIND, self.set.name.clone())
    }

    fn members(&self) -> Vec<String> {
        self.set.members.clone()
    }

    fn tolerates(&self) -> usize {
        self.scheme.parity()
    }

    fn memory_overhead(&self) -> f64 {
        let p = self.scheme.parity() as f64;
        p / (self.set.members.len() as f64 - p)
    }

    /// The set's leader daemon encodes complete datasets: refused (ENOTSUP).
    fn protect(&self, _part: &Part) -> Result<(), LevelError> {
        Err(Self::refuse(
            libc::ENOTSUP,
            format!("{}: the leader's daemon encodes complete datasets", self.id()),
        ))
    }

    /// As the members answer now: the newest encoding's lost members (those not holding
    /// their whole share, or not answering), against what the scheme tolerates.
    fn state(&self, dataset: &str) -> Result<SetState, LevelError> {
        let timeout = Duration::from_secs(10);
        let (mut listed, _) = survey(&self.cluster, &self.me, &self.set, timeout);
        if self.set.members.contains(&self.me) {
            listed.insert(
                self.me.clone(),
                whole_shares(&self.store, &self.set.name, &self.me),
            );
        }
        if !listed.values().flatten().any(|(d, _)| d == dataset) {
            return Ok(SetState::Absent);
        }
        let (h, lost) = judge_key(&self.cluster, &self.me, &self.set, dataset, &listed, timeout)
            .map_err(|e| Self::refuse(libc::EIO, e))?;
        let names: Vec<String> = lost.iter().map(|&i| h.members[i].clone()).collect();
        Ok(if names.is_empty() {
            SetState::Protected
        } else if names.len() <= h.scheme.parity() {
            SetState::Degraded(names)
        } else {
            SetState::Lost(names)
        })
    }

    fn recover(&self, dataset: &str, member: &str, into: &dyn Level) -> Result<Recovered, LevelError> {
        self.check_target(member, into)?;
        let bytes = self.rebuild_one(dataset)?;
        Ok(Recovered {
            files: Vec::new(),
            bytes,
        })
    }

    /// The set's id for every file when the newest encoding records them all with this
    /// content and no more members are lost than the scheme tolerates; None for each
    /// when `member` is not in this set; Err(why) else.
    fn locate(
        &self,
        dataset: &str,
        member: &str,
        files: &[PartFile],
    ) -> Result<Vec<Option<LevelId>>, String> {
        if !self.set.members.iter().any(|m| m == member) {
            return Ok(vec![None; files.len()]);
        }
        let want: Vec<(String, u64, u32)> =
            files.iter().map(|f| (f.path.clone(), f.size, f.crc32c)).collect();
        set_can_rebuild(&self.cluster, &self.me, &self.store, member, dataset, &want)?;
        Ok(vec![Some(self.id()); files.len()])
    }

    /// The whole part is rebuilt at once (every CRC checked end to end), then each file
    /// asked for is checked in the store against its size and CRC32C.
    fn recover_files(
        &self,
        dataset: &str,
        member: &str,
        files: &[PartFile],
        from: &LevelId,
        into: &dyn Level,
    ) -> Result<Recovered, LevelError> {
        self.serves(from)?;
        self.check_target(member, into)?;
        let bytes = self.rebuild_one(dataset)?;
        let mut out = Recovered {
            files: Vec::new(),
            bytes,
        };
        for f in files {
            match into.stat(&f.path)? {
                Some(s) if s.version.size == f.size && s.version.crc32c == Some(f.crc32c) => {
                    out.files.push(s)
                }
                _ => return Err(LevelError::Changed(f.path.clone())),
            }
        }
        Ok(out)
    }

    /// Every encoding of the set this node lacks its share of, rebuilt (whatever the
    /// prefix: a part is rebuilt whole); a dataset that cannot be is named as
    /// `dataset KEY (erasure:SET)`.
    fn recover_member(
        &self,
        member: &str,
        _prefix: &str,
        into: &dyn Level,
    ) -> Result<MemberRecovery, LevelError> {
        if !self.set.members.contains(&self.me) {
            // Another set's members rebuild their parts from it.
            return Ok(MemberRecovery::default());
        }
        self.check_target(member, into)?;
        let e = rebuild_from_set(&self.cluster, &self.me, &self.store, None).map_err(ne)?;
        let id = self.id();
        let mut out = MemberRecovery {
            unreachable: e.unreachable,
            ..Default::default()
        };
        for p in e.rebuilt {
            for (path, size) in p.files {
                out.restored.push(MemberFile {
                    path,
                    size,
                    level: id.clone(),
                    from: p.level.clone(),
                    seconds: p.seconds,
                });
            }
        }
        for (dataset, why) in e.failed {
            out.failed.push((format!("dataset {dataset} ({})", e.level), why));
        }
        Ok(out)
    }
}
