//! The frame codec: every message round-trips; the decoder refuses bad input with typed
//! errors and never panics (proptest on arbitrary and mutated bytes, and the kept
//! corpus under tests/corpus/).

use ckptfs_transport::frame::{
    check_path, decode_frame, decode_header, encode_frame, encode_header, Challenge, Hello, MsgType,
    CHUNK_FIXED, DEFAULT_MAX_CHUNK, HEADER_LEN, MAX_CONTROL,
};
use ckptfs_transport::{ChunkHeader, FrameError, ListEntry, Msg, Nack, PutBegin, PutEnd, SegKind, SegPiece};
use proptest::prelude::*;
use std::path::PathBuf;

/// One of every message (the Chunk's data is returned beside it).
fn every_message() -> Vec<(Msg, Vec<u8>)> {
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    vec![
        (
            Msg::Hello(Hello {
                node_id: "node1".into(),
                server_id: "node3".into(),
                job: "job-1".into(),
                nonce: [7; 32],
                mode: 1,
            }),
            vec![],
        ),
        (
            Msg::Challenge(Challenge {
                node_id: "node2".into(),
                nonce: [8; 32],
            }),
            vec![],
        ),
        (Msg::Response { mac: [10; 32] }, vec![]),
        (Msg::AuthOk { mac: [11; 32] }, vec![]),
        (
            Msg::Heartbeat {
                seq: u64::MAX,
                unix_ms: 1_700_000_000_000,
            },
            vec![],
        ),
        (
            Msg::PutBegin(PutBegin {
                src_node: "node1".into(),
                path: "ckpt/step-10/rank0.pt".into(),
                size: 3 << 30,
                chunk_size: 1 << 20,
                mtime_ns: -5,
                generation: 42,
            }),
            vec![],
        ),
        (Msg::Chunk(ChunkHeader::for_data(3, 3 << 20, &data)), data),
        (Msg::Chunk(ChunkHeader::for_data(0, 0, &[])), vec![]),
        (
            Msg::PutEnd(PutEnd {
                generation: 42,
                chunks: 3072,
                size: 3 << 30,
            }),
            vec![],
        ),
        (Msg::Ack { tag: 9 }, vec![]),
        (
            Msg::Nack(Nack {
                tag: 3,
                errno: 28,
                reason: "partner store full: é".into(),
            }),
            vec![],
        ),
        (
            Msg::Delete {
                path: "a/b".into(),
                generation: 1,
            },
            vec![],
        ),
        (
            Msg::List {
                src_node: "node1".into(),
                after: String::new(),
            },
            vec![],
        ),
        (
            Msg::List {
                src_node: "node1".into(),
                after: "a/b".into(),
            },
            vec![],
        ),
        (
            Msg::ListReply {
                entries: vec![
                    ListEntry {
                        path: "a".into(),
                        size: 1,
                        mtime_ns: 2,
                        generation: 3,
                        complete: true,
                        crc32c: Some(7),
                    },
                    ListEntry {
                        path: "b/c".into(),
                        size: 0,
                        mtime_ns: 0,
                        generation: 0,
                        complete: false,
                        crc32c: None,
                    },
                ],
                more: true,
            },
            vec![],
        ),
        (
            Msg::ListReply {
                entries: vec![],
                more: false,
            },
            vec![],
        ),
        (
            Msg::Get {
                src_node: "node3".into(),
                path: "x".into(),
            },
            vec![],
        ),
        (
            Msg::Error {
                errno: 13,
                reason: "no".into(),
            },
            vec![],
        ),
        (Msg::Bye, vec![]),
        (Msg::SegPiece(piece()), vec![]),
        (
            Msg::Erasure {
                body: r#"{"v":1,"op":"headers","set":"set0"}"#.into(),
            },
            vec![],
        ),
    ]
}

/// A valid erasure piece announcement.
fn piece() -> SegPiece {
    SegPiece {
        src_node: "node2".into(),
        set: "set0".into(),
        dataset: "job-1.7".into(),
        epoch: 1_700_000_000_000_000_000,
        stripe: 3,
        row: 1,
        kind: SegKind::Parity,
        offset: 1 << 20,
        len: 4096,
        seg_size: (1 << 20) + 4096,
    }
}

#[test]
fn every_message_round_trips_through_the_codec() {
    let mut kinds = std::collections::BTreeSet::new();
    for (msg, data) in every_message() {
        let bytes = encode_frame(&msg, &data).unwrap();
        let (back, got, used) = decode_frame(&bytes, DEFAULT_MAX_CHUNK).unwrap().unwrap();
        assert_eq!(back, msg);
        assert_eq!(got, &data[..]);
        assert_eq!(used, bytes.len());
        // Every strict prefix is "not yet a frame", never an error or a wrong message.
        for cut in [0, 1, HEADER_LEN - 1, HEADER_LEN, bytes.len() - 1] {
            if cut < bytes.len() {
                assert_eq!(decode_frame(&bytes[..cut], DEFAULT_MAX_CHUNK).unwrap(), None);
            }
        }
        kinds.insert(msg.kind() as u8);
    }
    assert_eq!(kinds.len(), 18, "a message type has no round-trip case");
}

#[test]
fn long_reasons_are_cut_at_a_char_boundary_not_refused() {
    let msg = Msg::Error {
        errno: 5,
        reason: "é".repeat(2000),
    };
    let bytes = encode_frame(&msg, &[]).unwrap();
    let (back, _, _) = decode_frame(&bytes, DEFAULT_MAX_CHUNK).unwrap().unwrap();
    let Msg::Error { reason, .. } = back else {
        panic!("not an Error")
    };
    assert_eq!(reason.len(), 1024);
}

#[test]
fn paths_leaving_the_partner_namespace_are_refused() {
    let long = "a/".repeat(2100) + "a";
    let comp = "x".repeat(256);
    for bad in [
        "",
        "/etc/passwd",
        "../x",
        "a/../../x",
        "a/..",
        "./a",
        "a//b",
        "a/",
        "a\0b",
        &long,
        &comp,
    ] {
        assert!(
            matches!(check_path(bad), Err(FrameError::BadPath { .. })),
            "{bad:?} accepted"
        );
    }
    for good in ["a", "a/b/c", "..a", "a..", ".hidden/x", "é/ü"] {
        check_path(good).unwrap();
    }
    // The encoder refuses them too, so a daemon cannot send one by mistake.
    let put = |path: &str| {
        Msg::PutBegin(PutBegin {
            src_node: "n".into(),
            path: path.into(),
            size: 0,
            chunk_size: 0,
            mtime_ns: 0,
            generation: 0,
        })
    };
    assert!(matches!(
        encode_frame(&put("../x"), &[]),
        Err(FrameError::BadPath { .. })
    ));
}

/// A PutBegin payload with any path bytes (the encoder would refuse bad ones).
pub fn raw_put_begin(path: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&1u64.to_le_bytes());
    p.extend_from_slice(&10u64.to_le_bytes());
    p.extend_from_slice(&0i64.to_le_bytes());
    p.extend_from_slice(&(1u32 << 20).to_le_bytes());
    p.extend_from_slice(&5u16.to_le_bytes());
    p.extend_from_slice(b"node1");
    p.extend_from_slice(&(path.len() as u16).to_le_bytes());
    p.extend_from_slice(path);
    let mut f = encode_header(MsgType::PutBegin, p.len() as u32).to_vec();
    f.extend_from_slice(&p);
    f
}

#[test]
fn decoder_refuses_escaping_paths_sent_by_a_hostile_peer() {
    for bad in [&b"../../etc/passwd"[..], b"/abs", b"a/./b", b"a\0", b"\xff\xfe"] {
        let e = decode_frame(&raw_put_begin(bad), DEFAULT_MAX_CHUNK).unwrap_err();
        assert!(
            matches!(e, FrameError::BadPath { .. } | FrameError::Malformed { .. }),
            "{bad:?}: {e:?}"
        );
    }
    decode_frame(&raw_put_begin(b"ok/path"), DEFAULT_MAX_CHUNK)
        .unwrap()
        .unwrap();
}

#[test]
fn oversized_lengths_are_refused_from_the_header_alone() {
    // Nothing but the 16-byte header: the decoder must refuse without wanting more.
    let h = encode_header(MsgType::Chunk, u32::MAX);
    assert!(matches!(
        decode_header(&h, DEFAULT_MAX_CHUNK),
        Err(FrameError::TooLong { len: u32::MAX, .. })
    ));
    assert!(matches!(
        decode_frame(&h, DEFAULT_MAX_CHUNK),
        Err(FrameError::TooLong { .. })
    ));
    let h = encode_header(MsgType::ListReply, MAX_CONTROL + 1);
    assert!(matches!(
        decode_header(&h, DEFAULT_MAX_CHUNK),
        Err(FrameError::TooLong { .. })
    ));
    let h = encode_header(MsgType::Hello, 1 << 20);
    assert!(matches!(
        decode_header(&h, DEFAULT_MAX_CHUNK),
        Err(FrameError::TooLong { .. })
    ));
    // A smaller configured chunk limit applies.
    let h = encode_header(MsgType::Chunk, (CHUNK_FIXED + 4097) as u32);
    assert!(matches!(decode_header(&h, 4096), Err(FrameError::TooLong { .. })));
    // A ListReply claiming more entries than its payload can hold.
    let mut p = vec![0u8];
    p.extend_from_slice(&4000u32.to_le_bytes());
    let mut f = encode_header(MsgType::ListReply, p.len() as u32).to_vec();
    f.extend_from_slice(&p);
    assert!(matches!(
        decode_frame(&f, DEFAULT_MAX_CHUNK),
        Err(FrameError::Malformed { .. })
    ));
}

#[test]
fn header_damage_is_caught() {
    let good = encode_frame(&Msg::Ack { tag: 1 }, &[]).unwrap();
    let mut b = good.clone();
    b[0] = b'X';
    assert_eq!(
        decode_frame(&b, DEFAULT_MAX_CHUNK).unwrap_err(),
        FrameError::BadMagic
    );
    let mut b = good.clone();
    b[9] ^= 1; // length
    assert_eq!(
        decode_frame(&b, DEFAULT_MAX_CHUNK).unwrap_err(),
        FrameError::HeaderCrc
    );
    let mut b = good.clone();
    b[14] ^= 1; // the CRC itself
    assert_eq!(
        decode_frame(&b, DEFAULT_MAX_CHUNK).unwrap_err(),
        FrameError::HeaderCrc
    );
    let mut h = encode_header(MsgType::Ack, 8);
    h[5] = 99;
    let crc = ckptfs_transport::crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        decode_header(&h, DEFAULT_MAX_CHUNK).unwrap_err(),
        FrameError::UnknownType(99)
    );
    // Trailing bytes inside a payload are refused.
    let mut p = 1u64.to_le_bytes().to_vec();
    p.push(0);
    let mut f = encode_header(MsgType::Ack, p.len() as u32).to_vec();
    f.extend_from_slice(&p);
    assert!(matches!(
        decode_frame(&f, DEFAULT_MAX_CHUNK),
        Err(FrameError::Malformed { .. })
    ));
}

#[test]
fn chunk_data_damage_is_a_crc_error_not_stored_data() {
    let data = vec![0xabu8; 5000];
    let mut f = encode_frame(&Msg::Chunk(ChunkHeader::for_data(4, 0, &data)), &data).unwrap();
    let last = f.len() - 1;
    f[last] ^= 0x40;
    assert_eq!(
        decode_frame(&f, DEFAULT_MAX_CHUNK).unwrap_err(),
        FrameError::ChunkCrc { index: 4 }
    );
    // A chunk header whose length disagrees with the frame's.
    let mut hdr = ChunkHeader::for_data(0, 0, &data);
    hdr.len = 10;
    let mut f = encode_frame(&Msg::Chunk(hdr), &data[..10]).unwrap();
    // Grow the frame by one byte behind the header's back.
    f.push(0);
    let len = (f.len() - HEADER_LEN) as u32;
    let h = encode_header(MsgType::Chunk, len);
    f[..HEADER_LEN].copy_from_slice(&h);
    assert!(matches!(
        decode_frame(&f, DEFAULT_MAX_CHUNK),
        Err(FrameError::Malformed { .. })
    ));
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Decodes every frame in `buf` until an error or the end; must never panic.
fn decode_all(mut buf: &[u8]) -> Result<usize, FrameError> {
    let mut n = 0;
    while let Some((_, _, used)) = decode_frame(buf, 1 << 20)? {
        buf = &buf[used..];
        n += 1;
    }
    Ok(n)
}

#[test]
fn kept_corpus_decodes_without_panics_and_valid_entries_stay_valid() {
    // CKPTFS_WRITE_CORPUS=1 regenerates the valid entries (the bad ones are hand-made).
    if std::env::var_os("CKPTFS_WRITE_CORPUS").is_some() {
        std::fs::create_dir_all(corpus_dir()).unwrap();
        for (i, (msg, data)) in every_message().iter().enumerate() {
            let f = encode_frame(msg, data).unwrap();
            std::fs::write(corpus_dir().join(format!("valid-{i:02}-{:?}", msg.kind())), f).unwrap();
        }
    }
    let mut seen = 0;
    for e in std::fs::read_dir(corpus_dir()).unwrap() {
        let p = e.unwrap().path();
        let bytes = std::fs::read(&p).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let r = decode_all(&bytes);
        if name.starts_with("valid-") {
            assert_eq!(r, Ok(1), "{name}");
        } else {
            assert!(r.is_err() || r == Ok(0), "{name} decoded: {r:?}");
        }
        // Every single-byte flip of every corpus entry decodes or fails, never panics.
        for i in 0..bytes.len().min(300) {
            let mut m = bytes.clone();
            m[i] ^= 0x5a;
            let _ = decode_all(&m);
        }
        seen += 1;
    }
    assert!(seen >= 20, "corpus has only {seen} entries");
}

fn valid_frames() -> impl Strategy<Value = Vec<u8>> {
    let all: Vec<Vec<u8>> = every_message()
        .iter()
        .map(|(m, d)| encode_frame(m, d).unwrap())
        .collect();
    proptest::sample::select(all)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_all(&bytes);
    }

    #[test]
    fn arbitrary_payloads_behind_a_valid_header_never_panic(kind in 1u8..=20, payload in proptest::collection::vec(any::<u8>(), 0..300)) {
        let kind = MsgType::from_u8(kind).unwrap();
        let mut f = encode_header(kind, payload.len() as u32).to_vec();
        f.extend_from_slice(&payload);
        match decode_frame(&f, DEFAULT_MAX_CHUNK) {
            // Whatever decodes must encode back to the same bytes (canonical form).
            Ok(Some((msg, data, used))) => {
                prop_assert_eq!(used, f.len());
                prop_assert_eq!(encode_frame(&msg, data).unwrap(), f);
            }
            Ok(None) => prop_assert!(false, "a whole frame reported as partial"),
            Err(_) => {}
        }
    }

    #[test]
    fn mutated_valid_frames_fail_cleanly_or_decode_to_a_valid_message(
        frame in valid_frames(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut f = frame.clone();
        for (i, x) in flips {
            let i = i.index(f.len());
            f[i] ^= x;
        }
        if truncate {
            f.truncate(cut.index(f.len() + 1));
        }
        if let Ok(Some((msg, data, used))) = decode_frame(&f, DEFAULT_MAX_CHUNK) {
            // A mutation past the header CRC may yield another valid message: it must
            // re-encode to exactly the bytes it came from.
            prop_assert_eq!(encode_frame(&msg, data).unwrap(), f[..used].to_vec());
        }
    }
}

#[test]
fn query_frames_round_trip_and_are_bounded() {
    for m in [
        Msg::Query {
            body: r#"{"op":"records","job":"j"}"#.into(),
        },
        Msg::QueryReply {
            body: "{\"records\":[]} \u{e9}".into(),
        },
        Msg::Query { body: String::new() },
    ] {
        let b = encode_frame(&m, &[]).unwrap();
        let (got, data, used) = decode_frame(&b, DEFAULT_MAX_CHUNK).unwrap().unwrap();
        assert_eq!(got, m);
        assert!(data.is_empty() && used == b.len());
    }
    // A body longer than one frame carries is refused when encoding.
    let big = Msg::QueryReply {
        body: "x".repeat(MAX_CONTROL as usize),
    };
    assert!(matches!(encode_frame(&big, &[]), Err(FrameError::TooLong { .. })));
    // A length that runs past the payload, and bytes that are not UTF-8, are malformed.
    let mut b = encode_frame(&Msg::Query { body: "abc".into() }, &[]).unwrap();
    b[16] = 200;
    assert!(decode_frame(&b, DEFAULT_MAX_CHUNK).is_err());
    let mut b = encode_frame(&Msg::Query { body: "abc".into() }, &[]).unwrap();
    b[20] = 0xff;
    assert!(matches!(
        decode_frame(&b, DEFAULT_MAX_CHUNK),
        Err(FrameError::Malformed { .. })
    ));
}

#[test]
fn list_reply_entries_carry_the_copys_crc32c_and_an_unknown_one_is_zero_on_the_wire() {
    let entry = |crc32c| ListEntry {
        path: "ckpt/a".into(),
        size: 5,
        mtime_ns: 6,
        generation: 0,
        complete: true,
        crc32c,
    };
    for crc in [Some(0), Some(0xdead_beef), None] {
        let m = Msg::ListReply {
            entries: vec![entry(crc)],
            more: false,
        };
        let f = encode_frame(&m, &[]).unwrap();
        let (back, _, _) = decode_frame(&f, DEFAULT_MAX_CHUNK).unwrap().unwrap();
        assert_eq!(back, m);
    }
    // u8 more | u32 count | u64 size | i64 mtime | u64 generation | u8 complete |
    // u8 crc_known | u32 crc32c | path: an unknown CRC that is not 0 is not canonical.
    let mut p = vec![0u8];
    p.extend_from_slice(&1u32.to_le_bytes());
    p.extend_from_slice(&5u64.to_le_bytes());
    p.extend_from_slice(&6i64.to_le_bytes());
    p.extend_from_slice(&0u64.to_le_bytes());
    p.push(1);
    p.push(0);
    p.extend_from_slice(&7u32.to_le_bytes());
    p.extend_from_slice(&6u16.to_le_bytes());
    p.extend_from_slice(b"ckpt/a");
    let mut f = encode_header(MsgType::ListReply, p.len() as u32).to_vec();
    f.extend_from_slice(&p);
    assert!(matches!(
        decode_frame(&f, DEFAULT_MAX_CHUNK),
        Err(FrameError::Malformed { .. })
    ));
    // The same bytes with the CRC marked known decode to it.
    let at = f.len() - 2 - 6 - 4 - 1;
    f[at] = 1;
    let (back, _, _) = decode_frame(&f, DEFAULT_MAX_CHUNK).unwrap().unwrap();
    let Msg::ListReply { entries, .. } = back else {
        panic!("{back:?}")
    };
    assert_eq!(entries[0].crc32c, Some(7));
}

/// Erasure pieces (issue 32): every field bounded and checked by the decoder, so a
/// hostile peer's announcement cannot make a receiver allocate or write outside the
/// segment it names.
#[test]
fn erasure_pieces_outside_their_segment_or_of_unknown_kind_are_refused() {
    let good = encode_frame(&Msg::SegPiece(piece()), &[]).unwrap();
    decode_frame(&good, DEFAULT_MAX_CHUNK).unwrap().unwrap();
    for bad in [
        SegPiece { len: 0, ..piece() },
        SegPiece {
            offset: piece().seg_size,
            ..piece()
        },
        SegPiece {
            offset: u64::MAX,
            ..piece()
        },
        SegPiece {
            dataset: "a/../b".into(),
            ..piece()
        },
        SegPiece {
            dataset: "x".repeat(256),
            ..piece()
        },
        SegPiece {
            src_node: String::new(),
            ..piece()
        },
    ] {
        assert!(
            matches!(
                encode_frame(&Msg::SegPiece(bad.clone()), &[]),
                Err(FrameError::Malformed { .. })
            ),
            "{bad:?} encoded"
        );
    }
    // The same refusals from raw bytes (a peer that does not use the encoder): an
    // unknown kind, and a piece that runs past its segment.
    let mut f = good.clone();
    f[HEADER_LEN + 14] = 7; // kind
    assert!(matches!(
        decode_frame(&f, DEFAULT_MAX_CHUNK),
        Err(FrameError::Malformed { .. })
    ));
    let mut f = good.clone();
    f[HEADER_LEN + 15..HEADER_LEN + 23].copy_from_slice(&u64::MAX.to_le_bytes()); // offset
    assert!(matches!(
        decode_frame(&f, DEFAULT_MAX_CHUNK),
        Err(FrameError::Malformed { .. })
    ));
    // An erasure request is bounded like a Query.
    let big = Msg::Erasure {
        body: "x".repeat(MAX_CONTROL as usize),
    };
    assert!(matches!(encode_frame(&big, &[]), Err(FrameError::TooLong { .. })));
    let h = encode_header(MsgType::Erasure, MAX_CONTROL + 1);
    assert!(matches!(
        decode_header(&h, DEFAULT_MAX_CHUNK),
        Err(FrameError::TooLong { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, .. ProptestConfig::default() })]

    /// Any piece the encoder accepts decodes to itself; any mutation of its bytes
    /// decodes to a piece that still lies inside its segment, or fails cleanly.
    #[test]
    fn erasure_pieces_round_trip_and_mutations_stay_inside_their_segment(
        epoch in any::<u64>(), stripe in any::<u32>(), row in any::<u16>(), kind in 0u8..3,
        offset in any::<u64>(), len in any::<u32>(), seg_size in any::<u64>(),
        dataset in "[A-Za-z0-9._-]{1,255}",
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..3),
    ) {
        let p = SegPiece {
            src_node: "node1".into(),
            set: "set0".into(),
            dataset,
            epoch,
            stripe,
            row,
            kind: SegKind::from_u8(kind).unwrap(),
            offset,
            len,
            seg_size,
        };
        let Ok(mut f) = encode_frame(&Msg::SegPiece(p.clone()), &[]) else {
            // Refused only when it does not lie inside its segment.
            prop_assert!(len == 0 || offset.checked_add(len as u64).is_none_or(|e| e > seg_size));
            return Ok(());
        };
        let (back, _, _) = decode_frame(&f, DEFAULT_MAX_CHUNK).unwrap().unwrap();
        prop_assert_eq!(back, Msg::SegPiece(p));
        for (i, x) in flips {
            let i = i.index(f.len());
            f[i] ^= x;
        }
        if let Ok(Some((Msg::SegPiece(q), _, _))) = decode_frame(&f, DEFAULT_MAX_CHUNK) {
            prop_assert!(q.len > 0 && q.offset + q.len as u64 <= q.seg_size);
        }
    }
}
