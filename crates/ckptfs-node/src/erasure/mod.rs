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

use crate::erasure_state::PieceIn;
pub use crate::erasure_state::{DatasetErasure, ErasureStatus, HEADERS_FRESH};
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
    record_levels, recv_era, send_era, set_can_rebuild, survey, whole_shares, ErasureConfig, NetShards,
    RebuiltPart, SetRebuildReport, Survey,
};
use ckptfs_partner::{NodeError, Result};
use ckptfs_store::Store;
use ckptfs_transport::SegKind;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How long a member waits for the next piece of a running sum (or for the encoding a
/// predecessor's ring connection names to start here).
pub const PIECE_TIMEOUT: Duration = Duration::from_secs(60);
/// After a failed encode, the leader tries the same dataset again after this long.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

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

mod gather;
mod leader;
mod outgoing;
mod ring_member;
mod serve;
#[allow(unused_imports)]
use gather::*;
pub use leader::*;
use outgoing::*;
#[allow(unused_imports)]
use ring_member::*;
pub(crate) use serve::*;
