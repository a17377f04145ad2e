//! The control messages between the node daemons of a set (one `Erasure` frame of the
//! peer transport each, JSON, at most 1 MiB): an envelope `{"v": 1, "msg": {...}}`
//! read with `deny_unknown_fields`, a version another than [`PROTO_VERSION`] refused,
//! every name, count and header checked before use ([`parse`]).
//!
//! The data itself (segments, running sums, parity shards) travels as `SegPiece`
//! frames, each followed by a Chunk frame with the piece's bytes and their CRC32C, never
//! inside these messages. The schedule is in [`crate::ring`]; docs/erasure.md tells the
//! whole exchange and its failure cases.

use crate::layout::{Header, ParityRecord, PartRecord};
use serde::{Deserialize, Serialize};

/// Version of these messages (the envelope's `v`).
pub const PROTO_VERSION: u32 = 1;
/// Most files a part may list in one message.
pub const MAX_PART_FILES: usize = 4096;
/// Most datasets one `Headers` answer lists.
pub const MAX_LISTED: usize = 4096;
/// Largest message body (one frame).
pub const MAX_BODY: usize = 1 << 20;

/// One file of a part as the agreed dataset record lists it (what the member must hold).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WantFile {
    /// Store path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Whole-file CRC32C.
    pub crc32c: u32,
}

/// A request or answer between the daemons of one set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum EraMsg {
    /// Leader to member: describe your part of `dataset` (its files as the agreed record
    /// lists them, in this order), with every chunk CRC: answered by `Part`.
    PartOf {
        /// Set name.
        set: String,
        /// Dataset key.
        dataset: String,
        /// The files the member must hold, in part order.
        files: Vec<WantFile>,
    },
    /// A member's part.
    Part {
        /// The record (its `member` must be the sender).
        part: PartRecord,
    },
    /// Leader to member: take your place in the ring for this plan (a header whose
    /// `parity` is empty); answered by `Stored` once your parity shards are stored and
    /// read back checked.
    Encode {
        /// The plan.
        plan: Header,
    },
    /// Predecessor to member: the running sums of `plan` that follow on this
    /// connection (`SegPiece` + Chunk, in the ring's order).
    Ring {
        /// Set name.
        set: String,
        /// Dataset key.
        dataset: String,
        /// Encoding generation.
        epoch: u64,
    },
    /// A member's parity shards, stored and verified.
    Stored {
        /// One per shard it holds.
        parity: Vec<ParityRecord>,
    },
    /// Leader to member: the encoding is whole; keep its header.
    Commit {
        /// The header (parity records of every member).
        header: Header,
    },
    /// Which datasets do you hold a header of, for `set`: answered by `Listed`.
    Headers {
        /// Set name.
        set: String,
    },
    /// Dataset keys and epochs.
    Listed {
        /// (dataset key, epoch).
        datasets: Vec<(String, u64)>,
    },
    /// Send your header of `dataset`: answered by `Head`.
    HeaderOf {
        /// Set name.
        set: String,
        /// Dataset key.
        dataset: String,
    },
    /// A header.
    Head {
        /// It.
        header: Header,
    },
    /// Send your data segment of stripe `stripe` (`parity` false) or the parity shard
    /// (`stripe`, `row`) of encoding `epoch`: answered by its pieces, then `Done`.
    Read {
        /// Set name.
        set: String,
        /// Dataset key.
        dataset: String,
        /// Encoding generation.
        epoch: u64,
        /// Stripe.
        stripe: u32,
        /// Parity row (parity only).
        row: u16,
        /// A parity shard, else a data segment.
        parity: bool,
    },
    /// All pieces sent; or a request done.
    Done,
    /// Refused or failed (errno and why).
    Fail {
        /// POSIX errno.
        errno: i32,
        /// Why.
        message: String,
    },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    v: u32,
    msg: EraMsg,
}

/// Whether `s` is a plain name (set, dataset key): 1-255 letters, digits, `.`, `_`,
/// `-`, not starting with `.`.
pub fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The body of a message.
pub fn encode(msg: &EraMsg) -> Result<String, String> {
    let s = serde_json::to_string(&Envelope {
        v: PROTO_VERSION,
        msg: msg.clone(),
    })
    .map_err(|e| e.to_string())?;
    if s.len() > MAX_BODY {
        return Err(format!(
            "{} bytes, more than one frame carries ({MAX_BODY})",
            s.len()
        ));
    }
    Ok(s)
}

/// Parse and check a message read from a peer: the version, every name, the counts,
/// and every header or plan it carries (refused unless it adds up). Never panics.
pub fn parse(body: &str) -> Result<EraMsg, String> {
    if body.len() > MAX_BODY {
        return Err("message too long".into());
    }
    let e: Envelope = serde_json::from_str(body).map_err(|e| format!("unreadable erasure message: {e}"))?;
    if e.v != PROTO_VERSION {
        return Err(format!(
            "erasure protocol version {}, this node speaks {PROTO_VERSION}",
            e.v
        ));
    }
    let names = |set: &str, dataset: &str| -> Result<(), String> {
        if plain(set) && plain(dataset) {
            Ok(())
        } else {
            Err("a set or dataset name that is not plain".into())
        }
    };
    match &e.msg {
        EraMsg::PartOf { set, dataset, files } => {
            names(set, dataset)?;
            if files.len() > MAX_PART_FILES {
                return Err(format!("{} files, at most {MAX_PART_FILES}", files.len()));
            }
            if !files.iter().all(|f| crate::layout::app_path(&f.path)) {
                return Err("a file that is not an application store path".into());
            }
        }
        EraMsg::Part { part } => {
            if part.files.len() > MAX_PART_FILES {
                return Err(format!("{} files, at most {MAX_PART_FILES}", part.files.len()));
            }
            let sum = part.files.iter().try_fold(0u64, |a, f| a.checked_add(f.size));
            if sum != Some(part.size) {
                return Err("part size does not add up".into());
            }
            for f in &part.files {
                if !crate::layout::app_path(&f.path)
                    || f.chunk_size == 0
                    || f.chunk_crc32c.len() as u64 != f.size.div_ceil(f.chunk_size)
                {
                    return Err(format!("file {:?}: refused", f.path));
                }
            }
        }
        EraMsg::Encode { plan } => {
            names(&plan.set, &plan.dataset)?;
            if !plan.parity.is_empty() {
                return Err("a plan carries no parity records".into());
            }
            plan.check_plan().map_err(|e| e.to_string())?;
        }
        EraMsg::Commit { header } | EraMsg::Head { header } => {
            names(&header.set, &header.dataset)?;
            header.check().map_err(|e| e.to_string())?;
        }
        EraMsg::Ring { set, dataset, .. }
        | EraMsg::HeaderOf { set, dataset }
        | EraMsg::Read { set, dataset, .. } => names(set, dataset)?,
        EraMsg::Headers { set } => {
            if !plain(set) {
                return Err("a set name that is not plain".into());
            }
        }
        EraMsg::Listed { datasets } => {
            if datasets.len() > MAX_LISTED || !datasets.iter().all(|(d, _)| plain(d)) {
                return Err("a listing that is too long or names a dataset that is not plain".into());
            }
        }
        EraMsg::Stored { parity } => {
            if parity.len() > crate::layout::MAX_MEMBERS {
                return Err("too many parity records".into());
            }
        }
        EraMsg::Done | EraMsg::Fail { .. } => {}
    }
    Ok(e.msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_round_trip_and_other_versions_are_refused() {
        let m = EraMsg::Read {
            set: "set0".into(),
            dataset: "job.3".into(),
            epoch: 7,
            stripe: 2,
            row: 0,
            parity: true,
        };
        assert_eq!(parse(&encode(&m).unwrap()).unwrap(), m);
        let b = encode(&m).unwrap().replace("\"v\":1", "\"v\":2");
        assert!(parse(&b).unwrap_err().contains("version 2"));
        // Unknown fields, names that could leave the namespace.
        let b = encode(&m).unwrap().replace("\"row\":0", "\"row\":0,\"x\":1");
        assert!(parse(&b).is_err());
        let bad = EraMsg::HeaderOf {
            set: "set0".into(),
            dataset: "../x".into(),
        };
        assert!(parse(&encode(&bad).unwrap()).is_err());
    }

    /// A hostile member's answers: a part whose size does not add up, whose chunk CRCs
    /// do not cover its files, or that names a system path; a plan that carries parity
    /// or whose segment does not follow from its largest part (a leader making members
    /// allocate more than the parts need).
    #[test]
    fn parts_and_plans_that_do_not_add_up_are_refused() {
        use crate::layout::{FileRecord, PartRecord};
        let file = FileRecord {
            path: "/ckpt/a".into(),
            size: 3,
            crc32c: 1,
            mode: 0o644,
            mtime_ns: 1,
            serial: 0,
            chunk_size: 1 << 20,
            chunk_crc32c: vec![1],
        };
        let part = |size: u64, f: FileRecord| EraMsg::Part {
            part: PartRecord {
                member: "node2".into(),
                size,
                crc32c: 0,
                files: vec![f],
            },
        };
        assert!(parse(&encode(&part(3, file.clone())).unwrap()).is_ok());
        assert!(parse(&encode(&part(4, file.clone())).unwrap()).is_err());
        let no_crcs = FileRecord {
            chunk_crc32c: vec![],
            ..file.clone()
        };
        assert!(parse(&encode(&part(3, no_crcs)).unwrap()).is_err());
        let system = FileRecord {
            path: "/.ckptfs/partners/node1/x".into(),
            ..file.clone()
        };
        assert!(parse(&encode(&part(3, system)).unwrap()).is_err());
        let rec = PartRecord {
            member: "node1".into(),
            size: 3,
            crc32c: 0,
            files: vec![file],
        };
        let empty = PartRecord {
            member: "node2".into(),
            size: 0,
            crc32c: 0,
            files: vec![],
        };
        let plan = Header {
            format: crate::layout::FORMAT,
            dataset: "j.1".into(),
            set: "set0".into(),
            epoch: 1,
            scheme: crate::Scheme::Xor,
            members: vec!["node1".into(), "node2".into()],
            parts: vec![rec, empty],
            segment: 64,
            chunk_size: 1 << 20,
            parity: vec![],
        };
        assert!(parse(&encode(&EraMsg::Encode { plan: plan.clone() }).unwrap()).is_ok());
        let huge = Header {
            segment: 1 << 40,
            ..plan.clone()
        };
        assert!(parse(&encode(&EraMsg::Encode { plan: huge }).unwrap()).is_err());
        let with_parity = Header {
            parity: vec![ParityRecord {
                stripe: 0,
                row: 0,
                holder: "node1".into(),
                crc32c: 0,
                chunk_crc32c: vec![0],
            }],
            ..plan
        };
        assert!(parse(&encode(&EraMsg::Encode { plan: with_parity }).unwrap()).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

        #[test]
        fn arbitrary_bodies_never_panic_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse(&String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn mutated_messages_parse_to_checked_ones_or_fail(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<char>()), 1..4),
        ) {
            let m = EraMsg::PartOf {
                set: "set0".into(),
                dataset: "j.1".into(),
                files: vec![WantFile { path: "/ckpt/a".into(), size: 3, crc32c: 9 }],
            };
            let mut chars: Vec<char> = encode(&m).unwrap().chars().collect();
            for (i, c) in flips {
                let i = i.index(chars.len());
                chars[i] = c;
            }
            let body: String = chars.into_iter().collect();
            if let Ok(EraMsg::PartOf { set, dataset, files }) = parse(&body) {
                prop_assert!(plain(&set) && plain(&dataset));
                prop_assert!(files.iter().all(|f| crate::layout::app_path(&f.path)));
            }
        }
    }
}
