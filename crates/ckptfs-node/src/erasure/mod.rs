//! Erasure sets across the node daemons (issue 32; docs/erasure.md, "Across daemons").
//!
//! Each daemon whose cluster file names an erasure scheme is a member of one set
//! ([`ckptfs_erasure::cluster_sets`]). The set's first member leads: when a dataset of
//! the job is complete job-wide (its record carries every node's part), it asks every
//! member for its part (`PartOf` -> `Part`: the files the agreed record lists, with the
//! chunk CRCs its store recorded), sends them all the plan (`Encode`: the header without
//! parity), and every member takes its place in the XOR ring ([`ckptfs_erasure::ring`]):
//! pieces of running sums go from each member to the next (`Ring`, then `SegPiece` +
//! Chunk frames), each holder stores its parity shard and reads it back checked, and
//! answers `Stored` with its records. Only when every member has answered does the
//! leader send the whole header to every member (`Commit`): a header is the proof that
//! its epoch's parity was whole when it was written. A member lost or killed before that
//! leaves no header of the epoch anywhere; the next encode removes its parity (the
//! `encoding` marker names it).
//!
//! Who may say what (the peer security of issue 29: a node acts only as itself): the
//! plan, the part questions and the commit are taken only from the set's leader;
//! running sums only from the member before this one in the ring, for the encoding
//! this member is running, piece after piece in the ring's order (any other stripe,
//! offset, length, kind or size is refused and the encoding fails); a member's part
//! only from that member (a `Part` naming another is refused); reads of segments and
//! shards only by members of the set. Every piece carries its CRC32C (checked on
//! arrival by the transport); a piece that fails it ends the encoding.
//!
//! Rebuild ([`rebuild_from_set`]): a replacement asks the survivors which encodings
//! they hold their share of (`Headers`), takes the header (`HeaderOf`), reads the
//! stripes' surviving data segments and parity shards (`Read`, answered by pieces),
//! decodes its part, checks the whole-part CRC32C, writes its files through the mover
//! (every chunk checked against the header), computes its parity shards again (each
//! must match the header's CRCs) and keeps the header: the set is whole again at the
//! same epoch.

use crate::shared::Shared;
use ckptfs_erasure::layout::{ParityRecord, PartRecord, FORMAT};
use ckptfs_erasure::member;
use ckptfs_erasure::proto::{self, EraMsg, WantFile};
use ckptfs_erasure::ring::{self, Step, PIECE};
use ckptfs_erasure::{Header, Layout, Scheme, PARITY_CHUNK};
use ckptfs_level::Mover;
use ckptfs_partner::peer::{Conn, Msg, Piece};
pub use ckptfs_partner::set_rebuild::{
    ask, connect, dataset_key, err, judge_key, level_of, local_headers, proto_err, rebuild_from_set,
    record_levels, recv_era, send_era, set_can_rebuild, survey, whole_shares, ErasureConfig, ErasureSets,
    NetShards, RebuiltPart, SetRebuildReport, Survey,
};
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::Store;
use ckptfs_transport::SegKind;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};

/// How long a member waits for the next piece of a running sum (or for the encoding a
/// predecessor's ring connection names to start here).
pub const PIECE_TIMEOUT: Duration = Duration::from_secs(60);
/// After a failed encode, the leader tries the same dataset again after this long.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// One dataset's encoding as this node sees it (`ckptfs node status --json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DatasetErasure {
    /// `protected` (this member keeps the header and its share), `encoding`, `failed`.
    pub state: String,
    /// The epoch of the encoding.
    pub epoch: u64,
    /// What went wrong, or whom it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Seconds the encode took (the leader's view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// The erasure part of the node status.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ErasureStatus {
    /// Level id (`erasure:set0`).
    pub level: String,
    /// Scheme.
    pub scheme: String,
    /// Members in set order (the first leads).
    pub members: Vec<String>,
    /// Per dataset key.
    pub datasets: BTreeMap<String, DatasetErasure>,
    /// Bytes of running sums this node sent.
    pub bytes_sent: u64,
    /// Pieces refused (wrong sender, place, size or CRC).
    pub pieces_refused: u64,
}

/// A piece from a neighbour (its sender, the piece, its bytes), or why the stream broke.
type PieceIn = std::result::Result<(String, Piece, Vec<u8>), String>;

/// The daemon's erasure state.
#[derive(Default)]
pub(crate) struct EraState {
    /// Encodings running here, by (dataset, epoch): where the predecessor's pieces go.
    jobs: Mutex<HashMap<(String, u64), mpsc::UnboundedSender<PieceIn>>>,
    registered: Notify,
    status: Mutex<ErasureStatus>,
    /// The headers this store keeps (dataset key, epoch), read again at most every
    /// [`HEADERS_FRESH`] for the status (a rebuild by another process adds some).
    kept: Mutex<Option<Kept>>,
    /// One member role at a time on this node.
    running: tokio::sync::Mutex<()>,
}

/// When the kept headers were read, and they: (dataset key, epoch).
type Kept = (Instant, Vec<(String, u64)>);

/// How long the status's list of kept headers is used before it is read again.
pub const HEADERS_FRESH: Duration = Duration::from_secs(5);

impl EraState {
    pub(crate) fn status(&self) -> ErasureStatus {
        self.status.lock().expect("erasure status").clone()
    }

    /// The headers `store` keeps of `set`: (dataset key, epoch), at most
    /// [`HEADERS_FRESH`] old.
    pub(crate) fn kept(&self, store: &Store, set: &str) -> Vec<(String, u64)> {
        let mut g = self.kept.lock().expect("erasure kept");
        if let Some((t, v)) = &*g {
            if t.elapsed() < HEADERS_FRESH {
                return v.clone();
            }
        }
        let v: Vec<(String, u64)> = local_headers(store, set)
            .into_iter()
            .map(|h| (h.dataset, h.epoch))
            .collect();
        *g = Some((Instant::now(), v.clone()));
        v
    }

    /// Count one refused piece or message (`pieces_refused`). A poisoned lock still
    /// holds a usable count: this never panics in a connection handler.
    fn refused(&self) {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pieces_refused += 1;
    }

    fn set_state(&self, key: &str, st: DatasetErasure) {
        *self.kept.lock().expect("erasure kept") = None;
        self.status
            .lock()
            .expect("erasure status")
            .datasets
            .insert(key.to_string(), st);
    }
}

fn fail(errno: i32, message: impl std::fmt::Display) -> EraMsg {
    EraMsg::Fail {
        errno,
        message: message.to_string(),
    }
}

fn bfail(errno: i32, message: impl std::fmt::Display) -> Box<EraMsg> {
    Box::new(fail(errno, message))
}

/// This member's part of `dataset` as the plan must list it.
fn my_part(store: &Store, me: &str, want: &[WantFile]) -> Result<PartRecord> {
    let level = level_of(store)?;
    member::part_record(&level, me, want).map_err(|e| err(format!("part of {me}: {e}")))
}

mod leader;
mod ring_member;
mod serve;
pub use leader::*;
#[allow(unused_imports)]
use ring_member::*;
pub(crate) use serve::*;
