//! The erasure sets' state in the daemon ([`EraState`], a part of the daemon's shared
//! state): the encodings running here, the status of each dataset, the headers kept.
//! It names nothing of the daemon's shared state, so the erasure tasks (module
//! `erasure`) take the shared state and this module is used by both without a circle.

use ckptfs_partner::peer::Piece;
use ckptfs_partner::set_rebuild::local_headers;
use ckptfs_store::Store;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};

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
pub(crate) type PieceIn = std::result::Result<(String, Piece, Vec<u8>), String>;

/// The daemon's erasure state.
#[derive(Default)]
pub(crate) struct EraState {
    /// Encodings running here, by (dataset, epoch): where the predecessor's pieces go.
    pub(crate) jobs: Mutex<HashMap<(String, u64), mpsc::UnboundedSender<PieceIn>>>,
    pub(crate) registered: Notify,
    pub(crate) status: Mutex<ErasureStatus>,
    /// The headers this store keeps (dataset key, epoch), read again at most every
    /// [`HEADERS_FRESH`] for the status (a rebuild by another process adds some).
    pub(crate) kept: Mutex<Option<Kept>>,
    /// One member role at a time on this node.
    pub(crate) running: tokio::sync::Mutex<()>,
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
    pub(crate) fn refused(&self) {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pieces_refused += 1;
    }

    pub(crate) fn set_state(&self, key: &str, st: DatasetErasure) {
        *self.kept.lock().expect("erasure kept") = None;
        self.status
            .lock()
            .expect("erasure status")
            .datasets
            .insert(key.to_string(), st);
    }
}
