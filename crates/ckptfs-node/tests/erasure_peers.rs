//! Erasure sets across daemons against hostile peers (issue 32): the new messages are
//! taken only from whom the set's plan says may send them, and a running sum with a
//! wrong size or a wrong CRC32C stops the encoding instead of being stored.
//!
//! Four nodes, sets of two (`set_size = 2`): the test plays the leader (and ring
//! neighbour) of one set with that node's own credentials, so the daemon of the other
//! member is driven piece by piece. Addresses in 127.0.0.1:19400-19439 (this suite's
//! ports).

mod support;

use ckptfs_cluster::{Erasure, Scheme};
use ckptfs_erasure::layout::{ParityRecord, PartRecord, FORMAT};
use ckptfs_erasure::proto::{self, EraMsg, WantFile};
use ckptfs_erasure::{Header, Layout, PARITY_CHUNK};
use ckptfs_transport::{self as tp, ChunkHeader, Msg, SegKind, SegPiece};
use std::time::Duration;
use support::*;

/// Four nodes on ports of this suite's range (19400-19439), bound and kept until the
/// daemons (or the fake peers) take them: a fixed port lies in the kernel's range of
/// ephemeral ports, where another connection of the run may hold it for a while.
fn cluster(tag: &str) -> TestCluster {
    let addrs = (0..4).map(|_| reserve_in(19400..19440)).collect();
    let job = format!("er3-{tag}-{}", std::process::id());
    let mut tc = TestCluster::with_job(&job, addrs, Scheme::Ring, 1).patient();
    tc.cluster.redundancy.erasure = Some(Erasure::Xor);
    tc.cluster.redundancy.set_size = 2;
    std::fs::write(&tc.file, tc.cluster.to_toml()).unwrap();
    tc
}

/// (leader, other member, a node of another set).
fn roles(tc: &TestCluster) -> (String, String, String) {
    let plan = ckptfs_erasure::cluster_sets(&tc.cluster).unwrap().unwrap();
    let s = &plan.sets[0];
    assert_eq!(s.members.len(), 2, "{plan:?}");
    let other = plan.sets[1].members[0].clone();
    (s.members[0].clone(), s.members[1].clone(), other)
}

fn start(tc: &TestCluster, id: &str) -> Daemon {
    let mut cfg = tc.config(id);
    cfg.erasure = ckptfs_node::ErasureConfig::of(&tc.cluster, id, "j").unwrap();
    assert!(cfg.erasure.is_some());
    Daemon::start(cfg)
}

async fn send(c: &mut tp::Conn, m: &EraMsg) {
    c.send(&Msg::Erasure {
        body: proto::encode(m).unwrap(),
    })
    .await
    .unwrap();
}

async fn answer(c: &mut tp::Conn) -> EraMsg {
    match tokio::time::timeout(Duration::from_secs(60), c.recv())
        .await
        .unwrap()
        .unwrap()
    {
        Msg::Erasure { body } => proto::parse(&body).unwrap(),
        m => panic!("{m:?}"),
    }
}

/// Whether the daemon ended the connection (a protocol error on its side).
async fn closed(c: &mut tp::Conn) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(30), c.recv()).await,
        Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_plans_only_members_read_and_nobody_sends_as_another() {
    let tc = cluster("era-who");
    let (leader, member, stranger) = roles(&tc);
    let d = start(&tc, &member);
    let s = tc.store(&member);
    write(&s, "/ckpt/a", &bytes(1000, 1));
    let want = vec![WantFile {
        path: "/ckpt/a".into(),
        size: 1000,
        crc32c: tp::crc32c(&bytes(1000, 1)),
    }];
    // A member that is not the leader may not ask for parts.
    let mut c = client(&tc, &stranger, &member).await;
    send(
        &mut c,
        &EraMsg::PartOf {
            set: "set0".into(),
            dataset: "j.1".into(),
            files: want.clone(),
        },
    )
    .await;
    assert!(matches!(answer(&mut c).await, EraMsg::Fail { errno, .. } if errno == libc::EACCES));
    // Nor list or read the set's encodings (it is in another set).
    let mut c = client(&tc, &stranger, &member).await;
    send(&mut c, &EraMsg::Headers { set: "set0".into() }).await;
    assert!(matches!(answer(&mut c).await, EraMsg::Fail { errno, .. } if errno == libc::EACCES));
    // The leader may; the answer is the member's own part, every chunk CRC in it.
    let mut c = client(&tc, &leader, &member).await;
    send(
        &mut c,
        &EraMsg::PartOf {
            set: "set0".into(),
            dataset: "j.1".into(),
            files: want,
        },
    )
    .await;
    match answer(&mut c).await {
        EraMsg::Part { part } => {
            assert_eq!(part.member, member);
            assert_eq!(part.size, 1000);
            assert_eq!(part.files[0].chunk_crc32c.len(), 1);
        }
        m => panic!("{m:?}"),
    }
    // A plan outside the part question is refused.
    let mut c = client(&tc, &leader, &member).await;
    send(
        &mut c,
        &EraMsg::Commit {
            header: empty_header(&leader, &member),
        },
    )
    .await;
    assert!(matches!(answer(&mut c).await, EraMsg::Fail { errno, .. } if errno == libc::EACCES));
    // A piece naming another node as its sender: the connection ends.
    let mut c = client(&tc, &stranger, &member).await;
    c.send(&Msg::SegPiece(SegPiece {
        src_node: leader.clone(),
        set: "set0".into(),
        dataset: "j.1".into(),
        epoch: 1,
        stripe: 0,
        row: 0,
        kind: SegKind::Partial,
        offset: 0,
        len: 64,
        seg_size: 64,
    }))
    .await
    .unwrap();
    assert!(closed(&mut c).await, "a piece sent as another node was taken");
    // Running sums from a node that is not the member before this one: refused.
    let mut c = client(&tc, &stranger, &member).await;
    send(
        &mut c,
        &EraMsg::Ring {
            set: "set0".into(),
            dataset: "j.1".into(),
            epoch: 1,
        },
    )
    .await;
    assert!(closed(&mut c).await, "running sums from a stranger were taken");
    d.stop().await;
}

/// A whole header of two empty parts (it parses and checks; only who sends it is wrong).
fn empty_header(leader: &str, member: &str) -> Header {
    let part = |m: &str| PartRecord {
        member: m.into(),
        size: 0,
        crc32c: 0,
        files: Vec::new(),
    };
    let lay = Layout::new(ckptfs_erasure::Scheme::Xor, 2, 0).unwrap();
    let parity = |s: usize, holder: &str| ParityRecord {
        stripe: s,
        row: 0,
        holder: holder.into(),
        crc32c: 0,
        chunk_crc32c: Vec::new(),
    };
    Header {
        format: FORMAT,
        dataset: "j.1".into(),
        set: "set0".into(),
        epoch: 7,
        scheme: ckptfs_erasure::Scheme::Xor,
        members: vec![leader.into(), member.into()],
        parts: vec![part(leader), part(member)],
        segment: lay.segment,
        chunk_size: PARITY_CHUNK,
        parity: vec![parity(0, leader), parity(1, member)],
    }
}

/// The leader's ring side: accepts the member's connection (it sends its segment of
/// the leader's stripe, read and dropped).
fn fake_successor(tc: &TestCluster, leader: &str) -> tokio::task::JoinHandle<()> {
    let addr = tc.cluster.node(leader).unwrap().addr.clone();
    let keys = tc.cluster.node_keys(leader).unwrap();
    let (id, cfg) = (
        identity(tc, leader),
        ckptfs_partner::peer::conn_config(&tc.cluster),
    );
    tokio::spawn(async move {
        let l = listen(&addr).await;
        loop {
            let Ok((sock, _)) = l.accept().await else { return };
            let (id, keys, cfg) = (id.clone(), keys.clone(), cfg.clone());
            tokio::spawn(async move {
                let Ok(mut c) = tp::accept(sock, &id, &keys, &cfg).await else {
                    return;
                };
                while let Ok(m) = c.recv().await {
                    if let Msg::Chunk(h) = m {
                        let mut b = vec![0u8; h.len as usize];
                        let _ = c.recv_chunk_data(&mut b).await;
                    }
                }
            });
        }
    })
}

/// Plays the leader of a two-member set: asks the member for its part, sends the plan,
/// accepts the member's ring connection (its successor is the leader), and sends the
/// one running sum the member keeps, as `tamper` makes it. The member's answer to the
/// plan.
async fn encode_with(
    tc: &TestCluster,
    leader: &str,
    member: &str,
    tamper: fn(&mut SegPiece, &mut ChunkHeader, &mut Vec<u8>),
) -> EraMsg {
    let s = tc.store(member);
    let data = bytes(3000, 5);
    write(&s, "/ckpt/a", &data);
    let mut c = client(tc, leader, member).await;
    send(
        &mut c,
        &EraMsg::PartOf {
            set: "set0".into(),
            dataset: "j.1".into(),
            files: vec![WantFile {
                path: "/ckpt/a".into(),
                size: 3000,
                crc32c: tp::crc32c(&data),
            }],
        },
    )
    .await;
    let part = match answer(&mut c).await {
        EraMsg::Part { part } => part,
        m => panic!("{m:?}"),
    };
    let leader_part = PartRecord {
        member: leader.into(),
        size: 0,
        crc32c: 0,
        files: Vec::new(),
    };
    let lay = Layout::new(ckptfs_erasure::Scheme::Xor, 2, 3000).unwrap();
    let plan = Header {
        format: FORMAT,
        dataset: "j.1".into(),
        set: "set0".into(),
        epoch: 9,
        scheme: ckptfs_erasure::Scheme::Xor,
        members: vec![leader.into(), member.into()],
        parts: vec![leader_part, part],
        segment: lay.segment,
        chunk_size: PARITY_CHUNK,
        parity: Vec::new(),
    };
    send(&mut c, &EraMsg::Encode { plan: plan.clone() }).await;
    // The leader is the member's predecessor: the running sum of the member's stripe
    // (the leader's part is empty: zeros).
    let mut r = client(tc, leader, member).await;
    send(
        &mut r,
        &EraMsg::Ring {
            set: "set0".into(),
            dataset: "j.1".into(),
            epoch: 9,
        },
    )
    .await;
    let mut piece = SegPiece {
        src_node: leader.into(),
        set: "set0".into(),
        dataset: "j.1".into(),
        epoch: 9,
        stripe: 1,
        row: 0,
        kind: SegKind::Partial,
        offset: 0,
        len: plan.segment as u32,
        seg_size: plan.segment,
    };
    let mut body = vec![0u8; plan.segment as usize];
    let mut hdr = ChunkHeader::for_data(0, 0, &body);
    tamper(&mut piece, &mut hdr, &mut body);
    r.send(&Msg::SegPiece(piece)).await.unwrap();
    r.send_chunk(&hdr, &body).await.unwrap();
    answer(&mut c).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_sum_of_the_wrong_size_or_with_a_wrong_crc_stops_the_encoding() {
    let tc = cluster("era-bad");
    let (leader, member, _) = roles(&tc);
    let d = start(&tc, &member);
    let succ = fake_successor(&tc, &leader);
    // The right piece: the member keeps its parity shard and says so.
    match encode_with(&tc, &leader, &member, |_, _, _| {}).await {
        EraMsg::Stored { parity } => {
            assert_eq!(parity.len(), 1);
            assert_eq!(parity[0].holder, member);
        }
        m => panic!("{m:?}"),
    }
    // A piece announcing another segment length.
    match encode_with(&tc, &leader, &member, |p, _, _| p.seg_size += 64).await {
        EraMsg::Fail { message, .. } => assert!(message.contains("out of place"), "{message}"),
        m => panic!("a piece of the wrong size was taken: {m:?}"),
    }
    // A piece whose bytes do not match their CRC32C.
    match encode_with(&tc, &leader, &member, |_, h, _| h.crc32c ^= 1).await {
        EraMsg::Fail { message, .. } => assert!(message.contains("CRC32C"), "{message}"),
        m => panic!("a piece with a wrong CRC was taken: {m:?}"),
    }
    // A piece shorter than announced (its chunk disagrees with the announcement).
    match encode_with(&tc, &leader, &member, |_, h, b| {
        b.truncate(64);
        *h = ChunkHeader::for_data(0, 0, b);
    })
    .await
    {
        EraMsg::Fail { .. } => {}
        m => panic!("a short piece was taken: {m:?}"),
    }
    succ.abort();
    d.stop().await;
}

/// The leader lost in the middle of an encode (its ring connection closes before the
/// running sums are all sent): the member stops at once, answers `fail`, and keeps no
/// header: the set never looks protected (failure case E19).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_lost_in_the_middle_of_an_encode_leaves_no_header() {
    let tc = cluster("era-lost");
    let (leader, member, _) = roles(&tc);
    let d = start(&tc, &member);
    let succ = fake_successor(&tc, &leader);
    let s = tc.store(&member);
    let data = bytes(3000, 5);
    write(&s, "/ckpt/a", &data);
    let mut c = client(&tc, &leader, &member).await;
    send(
        &mut c,
        &EraMsg::PartOf {
            set: "set0".into(),
            dataset: "j.1".into(),
            files: vec![WantFile {
                path: "/ckpt/a".into(),
                size: 3000,
                crc32c: tp::crc32c(&data),
            }],
        },
    )
    .await;
    let part = match answer(&mut c).await {
        EraMsg::Part { part } => part,
        m => panic!("{m:?}"),
    };
    let mut plan = empty_header(&leader, &member);
    plan.parts[1] = part;
    plan.segment = Layout::new(ckptfs_erasure::Scheme::Xor, 2, 3000).unwrap().segment;
    plan.parity.clear();
    send(&mut c, &EraMsg::Encode { plan }).await;
    let mut r = client(&tc, &leader, &member).await;
    send(
        &mut r,
        &EraMsg::Ring {
            set: "set0".into(),
            dataset: "j.1".into(),
            epoch: 7,
        },
    )
    .await;
    // Give the member time to take the ring, then the leader is gone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(r);
    let t = std::time::Instant::now();
    match answer(&mut c).await {
        EraMsg::Fail { message, .. } => assert!(message.contains("closed"), "{message}"),
        m => panic!("{m:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the member waited for pieces"
    );
    let level = ckptfs_store::level::StoreLevel::new(&s).unwrap();
    assert!(ckptfs_erasure::member::header(&level, "j.1", "set0").is_none());
    succ.abort();
    d.stop().await;
}
