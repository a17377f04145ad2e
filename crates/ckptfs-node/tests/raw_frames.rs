//! The receiver refuses what the sender's encoder would never produce: hand-made frames
//! carrying paths with `..`, absolute paths and NUL bytes, sent straight to a daemon on
//! a connection authenticated with the right secret (the handshake done by hand, so no
//! encoder of ours checks the frames after it). Each is refused (the connection is
//! closed, at most an Error frame comes back) and nothing is written: no partner copy,
//! no half copy, no file outside the partner namespace, and a Delete that would leave
//! it removes nothing.

mod support;

use ckptfs_cluster::Scheme;
use ckptfs_transport::frame::{decode_header, encode_header, Msg, MsgType, HEADER_LEN};
use ckptfs_transport::RawConn;
use std::time::Duration;
use support::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// A connection to `to` authenticated as `me` with the cluster's keys, whose frames
/// the test writes by hand (the transport adds each frame's tag, no encoder of ours
/// checks what is in them).
async fn authenticated(tc: &TestCluster, me: &str, to: &str) -> RawConn {
    let keys = tc.cluster.node_keys(me).unwrap();
    let id = ckptfs_transport::Identity {
        node_id: me.into(),
        job: tc.cluster.job.clone(),
    };
    let c = ckptfs_transport::connect(
        &tc.cluster.node(to).unwrap().addr,
        &id,
        to,
        &keys,
        &ckptfs_partner::peer::conn_config(&tc.cluster),
    )
    .await
    .unwrap();
    c.into_raw().unwrap()
}

fn str_field(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s);
}

/// A frame of type `kind` around `payload`, with a valid header (length and CRC).
fn frame(kind: MsgType, payload: &[u8]) -> Vec<u8> {
    let mut f = encode_header(kind, payload.len() as u32).to_vec();
    f.extend_from_slice(payload);
    f
}

/// PutBegin payload: u64 generation | u64 size | i64 mtime_ns | u32 chunk_size |
/// name src_node | path, with `path` as raw bytes.
fn put_begin(src: &str, path: &[u8], size: u64) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&0u64.to_le_bytes());
    p.extend_from_slice(&size.to_le_bytes());
    p.extend_from_slice(&0i64.to_le_bytes());
    p.extend_from_slice(&(64u32 << 10).to_le_bytes());
    str_field(&mut p, src.as_bytes());
    str_field(&mut p, path);
    frame(MsgType::PutBegin, &p)
}

/// Delete payload: u64 generation | path.
fn delete(path: &[u8]) -> Vec<u8> {
    let mut p = u64::MAX.to_le_bytes().to_vec();
    str_field(&mut p, path);
    frame(MsgType::Delete, &p)
}

/// Get payload: name src_node | path.
fn get(src: &str, path: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    str_field(&mut p, src.as_bytes());
    str_field(&mut p, path);
    frame(MsgType::Get, &p)
}

/// Everything the daemon sends until it closes the connection; panics if it keeps it
/// open (the frame was not refused).
async fn until_closed(s: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut rest = Vec::new();
    match tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut rest)).await {
        Ok(_) => rest,
        Err(_) => panic!("{what}: the daemon kept the connection open"),
    }
}

fn files(tc: &TestCluster, id: &str) -> Vec<String> {
    let mut v: Vec<String> = tc
        .store(id)
        .list_all_system()
        .into_iter()
        .filter(|(_, st)| st.kind == ckptfs_store::FileKind::File)
        .map(|(p, _)| p)
        // The daemon's own records (levels, datasets) change on their own.
        .filter(|p| {
            !p.starts_with("/.ckptfs/")
                || p.starts_with("/.ckptfs/partners/")
                || p.starts_with("/.ckptfs/incoming/")
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_made_frames_with_escaping_paths_are_refused_by_the_receiver_and_nothing_is_written() {
    let tc = TestCluster::new("hpv-raw", 2, Scheme::Ring, 1);
    let d = Daemon::start(tc.config("node2"));
    wait_for("node2's status", || {
        ckptfs_node::status(&tc.store_opts("node2").name).is_some()
    })
    .await;
    // Files of node2 a Delete or a copy that escaped the namespace could reach.
    let s2 = tc.store("node2");
    write(&s2, "/victim", b"node2's own file");
    write(&s2, "/ckpt/x", b"node2's checkpoint");
    let before = files(&tc, "node2");

    // The handshake by hand works: a well-formed request on it is answered.
    let mut s = authenticated(&tc, "node1", "node2").await;
    s.send(&put_begin("node1", b"ckpt/ok", 0)).await.unwrap();
    assert!(matches!(s.recv().await.unwrap(), Msg::Ack { .. }));
    s.send(&frame(MsgType::PutEnd, &[0u8; 24])).await.unwrap();
    assert!(matches!(s.recv().await.unwrap(), Msg::Ack { .. }));
    drop(s);

    let bad: [(&str, Vec<u8>); 11] = [
        ("PutBegin ../", put_begin("node1", b"../../../victim", 5)),
        ("PutBegin a/../..", put_begin("node1", b"ckpt/../../../../x", 5)),
        ("PutBegin ..", put_begin("node1", b"..", 5)),
        ("PutBegin absolute", put_begin("node1", b"/victim", 5)),
        ("PutBegin //", put_begin("node1", b"//etc/passwd", 5)),
        ("PutBegin NUL", put_begin("node1", b"ckpt/a\0/../../victim", 5)),
        ("PutBegin .", put_begin("node1", b"./ckpt/x", 5)),
        ("Delete ../", delete(b"../../../victim")),
        ("Delete absolute", delete(b"/ckpt/x")),
        ("Delete NUL", delete(b"ckpt/x\0")),
        ("Get ../", get("node1", b"../../../victim")),
    ];
    for (what, f) in &bad {
        let mut s = authenticated(&tc, "node1", "node2").await;
        s.send(f).await.unwrap();
        // Data a receiver that accepted the PutBegin would store.
        let _ = s.send(&frame(MsgType::PutEnd, &[0u8; 24])).await;
        let back = until_closed(s.stream(), what).await;
        // At most an Error frame with the reason; never an Ack or a file's bytes.
        assert!(back.len() < 2048, "{what}: answered with {} bytes", back.len());
        if back.len() >= HEADER_LEN {
            let h: [u8; HEADER_LEN] = back[..HEADER_LEN].try_into().unwrap();
            let kind = decode_header(&h, 1 << 20).unwrap().kind;
            assert_eq!(kind, MsgType::Error, "{what}: answered {kind:?}");
        }
    }
    // Nothing written, nothing removed: node2 holds what it held plus the one copy the
    // well-formed request made.
    let mut want = before.clone();
    want.push("/.ckptfs/partners/node1/ckpt/ok".into());
    want.sort();
    assert_eq!(files(&tc, "node2"), want);
    // The same hand-made Get and Delete frames with proper paths are served (so the
    // refusals above are the paths'): a Get of a copy that is not there is a Nack
    // (ENOENT) on a connection still open, a Delete removes the copy.
    let mut s = authenticated(&tc, "node1", "node2").await;
    s.send(&get("node1", b"ckpt/none")).await.unwrap();
    match s.recv().await.unwrap() {
        Msg::Nack(n) => assert_eq!(n.errno, libc::ENOENT, "{n:?}"),
        m => panic!("Get answered {m:?}"),
    }
    s.send(&delete(b"ckpt/ok")).await.unwrap();
    assert!(matches!(s.recv().await.unwrap(), Msg::Ack { .. }));
    drop(s);
    let after = files(&tc, "node2");
    assert_eq!(after, before);
    assert_eq!(read(&s2, "/victim").unwrap(), b"node2's own file");
    assert_eq!(read(&s2, "/ckpt/x").unwrap(), b"node2's checkpoint");
    // The daemon is still serving.
    let mut s = authenticated(&tc, "node1", "node2").await;
    s.send(&put_begin("node1", b"ckpt/ok2", 0)).await.unwrap();
    assert!(matches!(s.recv().await.unwrap(), Msg::Ack { .. }));
    d.stop().await;
}
