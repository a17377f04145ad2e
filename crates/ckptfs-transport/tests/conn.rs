//! Connections over loopback TCP: authentication with pair keys (success, wrong key, no
//! key, replay, unknown node, other job, the node's own id, an impostor server, one
//! refusal for every cause), every message over the wire with its frame tag, chunk data
//! into the caller's buffer, frames changed on the way, and hostile peers after
//! authentication.

mod support;

use ckptfs_cluster::{pair_key, NodeKeys, Secret};
use ckptfs_transport::auth::{self, Role, Transcript};
use ckptfs_transport::frame::{decode_frame, encode_frame, encode_header, Hello, MsgType, DEFAULT_MAX_CHUNK};
use ckptfs_transport::{
    accept, connect, ChunkHeader, ConnConfig, FrameError, Identity, ListEntry, Msg, Nack, Protection,
    PutBegin, PutEnd, RawConn, TransportError, REFUSAL,
};
use std::time::Duration;
use support::{cfg, VecSink};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NODES: [&str; 5] = ["client", "server", "node1", "node2", "node9"];

fn id(n: &str) -> Identity {
    Identity {
        node_id: n.into(),
        job: "hcjob".into(),
    }
}

fn secret(b: u8) -> Secret {
    Secret::from_bytes(&[b; 32]).unwrap()
}

/// Node `me`'s keys in job "hcjob" under master secret `b`.
fn keys(me: &str, b: u8) -> NodeKeys {
    NodeKeys::derive(&secret(b), "hcjob", me, NODES)
}

async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap().to_string();
    (l, a)
}

/// Accepts one connection and runs the server handshake as "server" with `k`.
fn serve_one(
    l: TcpListener,
    k: NodeKeys,
    c: ConnConfig,
) -> tokio::task::JoinHandle<Result<ckptfs_transport::Conn, TransportError>> {
    tokio::spawn(async move {
        let (st, _) = l.accept().await.unwrap();
        accept(st, &id("server"), &k, &c).await
    })
}

async fn read_frame(st: &mut TcpStream) -> Msg {
    let mut buf = Vec::new();
    loop {
        if let Some((m, _, _)) = decode_frame(&buf, DEFAULT_MAX_CHUNK).unwrap() {
            return m;
        }
        let mut b = [0u8; 4096];
        let n = st.read(&mut b).await.unwrap();
        assert!(n > 0, "peer closed before a whole frame");
        buf.extend_from_slice(&b[..n]);
    }
}

fn hello(me: &str, to: &str, job: &str, nonce: [u8; 32]) -> Vec<u8> {
    encode_frame(
        &Msg::Hello(Hello {
            node_id: me.into(),
            server_id: to.into(),
            job: job.into(),
            nonce,
            mode: 0,
        }),
        &[],
    )
    .unwrap()
}

/// Runs the client side of the handshake by hand as "client" with pair key `k`;
/// returns the stream and the bytes of the Response frame it sent (what an eavesdropper
/// would record).
async fn raw_client(addr: &str, k: &[u8], nonce: [u8; 32]) -> (TcpStream, Vec<u8>) {
    let mut st = TcpStream::connect(addr).await.unwrap();
    st.write_all(&hello("client", "server", "hcjob", nonce))
        .await
        .unwrap();
    let Msg::Challenge(ch) = read_frame(&mut st).await else {
        panic!("no Challenge")
    };
    let t = Transcript {
        job: "hcjob",
        client_nonce: &nonce,
        server_nonce: &ch.nonce,
        client_id: "client",
        server_id: &ch.node_id,
        mode: 0,
    };
    let resp = encode_frame(
        &Msg::Response {
            mac: auth::prove(k, Role::Client, &t),
        },
        &[],
    )
    .unwrap();
    st.write_all(&resp).await.unwrap();
    (st, resp)
}

/// A client ("client") and the server's side of one authenticated connection.
async fn pair(b: u8, c: ConnConfig) -> (ckptfs_transport::Conn, ckptfs_transport::Conn) {
    let (l, addr) = listener().await;
    let srv = serve_one(l, keys("server", b), c.clone());
    let cl = connect(&addr, &id("client"), "server", &keys("client", b), &c)
        .await
        .unwrap();
    (cl, srv.await.unwrap().unwrap())
}

/// A raw client (frames by hand, tags added) and the server's side.
async fn raw_pair(b: u8) -> (RawConn, ckptfs_transport::Conn) {
    let (c, s) = pair(b, cfg()).await;
    (c.into_raw().unwrap(), s)
}

fn all_messages() -> Vec<Msg> {
    vec![
        Msg::Heartbeat { seq: 1, unix_ms: 2 },
        Msg::PutBegin(PutBegin {
            src_node: "client".into(),
            path: "ckpt/a".into(),
            size: 10,
            chunk_size: 65536,
            mtime_ns: 3,
            generation: 4,
        }),
        Msg::PutEnd(PutEnd {
            generation: 4,
            chunks: 1,
            size: 10,
        }),
        Msg::Ack { tag: 5 },
        Msg::Nack(Nack {
            tag: 6,
            errno: libc::ENOSPC,
            reason: "full".into(),
        }),
        Msg::Delete {
            path: "ckpt/a".into(),
            generation: 4,
        },
        Msg::List {
            src_node: "client".into(),
            after: "".into(),
        },
        Msg::ListReply {
            entries: vec![ListEntry {
                path: "ckpt/a".into(),
                size: 10,
                mtime_ns: 3,
                generation: 4,
                complete: true,
                crc32c: Some(0xdead_beef),
            }],
            more: false,
        },
        Msg::Get {
            src_node: "client".into(),
            path: "ckpt/a".into(),
        },
        Msg::Bye,
    ]
}

#[tokio::test]
async fn pair_keys_authenticate_both_ways_and_every_message_crosses() {
    for protection in [Protection::Integrity, Protection::Encrypted] {
        let c = ConnConfig { protection, ..cfg() };
        let (mut c, mut s) = pair(1, c).await;
        assert_eq!(c.peer_id(), "server");
        assert_eq!(s.peer_id(), "client");
        for m in &all_messages() {
            c.send(m).await.unwrap();
            assert_eq!(&s.recv().await.unwrap(), m);
            s.send(m).await.unwrap();
            assert_eq!(&c.recv().await.unwrap(), m);
        }
        // Error arrives as TransportError::Peer.
        s.send(&Msg::Error {
            errno: libc::EIO,
            reason: "boom".into(),
        })
        .await
        .unwrap();
        match c.recv().await {
            Err(e @ TransportError::Peer { .. }) => assert_eq!(e.errno(), libc::EIO),
            r => panic!("{r:?}"),
        }
    }
}

#[tokio::test]
async fn chunk_data_goes_out_in_one_frame_and_lands_in_the_callers_buffer() {
    for protection in [Protection::Integrity, Protection::Encrypted] {
        let (c, s) = pair(2, ConnConfig { protection, ..cfg() }).await;
        let (_cr, mut cw) = c.into_split();
        let (mut sr, _sw) = s.into_split();
        let data: Vec<u8> = (0..(3 << 20) + 17).map(|i: u32| (i % 251) as u8).collect();
        let chunks: Vec<Vec<u8>> = data.chunks(1 << 20).map(|c| c.to_vec()).collect();
        let sender = tokio::spawn({
            let data = data.clone();
            async move {
                for (i, ch) in data.chunks(1 << 20).enumerate() {
                    let h = ChunkHeader::for_data(i as u64, (i << 20) as u64, ch);
                    cw.send_chunk(&h, ch).await.unwrap();
                }
                // Misuse is refused, not sent: a Chunk without data, a length mismatch.
                let h = ChunkHeader::for_data(9, 0, b"abc");
                assert!(cw.send(&Msg::Chunk(h)).await.is_err());
                assert!(cw.send_chunk(&h, b"ab").await.is_err());
                cw.send(&Msg::Bye).await.unwrap();
            }
        });
        // The receiver's "store chunks": one buffer, each chunk read in place.
        let mut store = vec![0u8; data.len()];
        for (i, ch) in chunks.iter().enumerate() {
            let Msg::Chunk(h) = sr.recv().await.unwrap() else {
                panic!("not a chunk")
            };
            assert_eq!(h.index, i as u64);
            let at = h.offset as usize;
            sr.recv_chunk_data(&mut store[at..at + h.len as usize])
                .await
                .unwrap();
            assert_eq!(h.len as usize, ch.len());
        }
        assert_eq!(sr.recv().await.unwrap(), Msg::Bye);
        sender.await.unwrap();
        assert!(store == data, "bytes differ ({protection:?})");
    }
}

#[tokio::test]
async fn a_wrong_key_is_refused_on_both_sides_before_any_data() {
    let (l, addr) = listener().await;
    let srv = serve_one(l, keys("server", 3), cfg());
    let e = connect(&addr, &id("client"), "server", &keys("client", 4), &cfg())
        .await
        .unwrap_err();
    // The server refuses the client's proof, with the one refusal.
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains(REFUSAL)),
        "{e}"
    );
    assert_eq!(e.errno(), libc::EACCES);
    let se = srv.await.unwrap().unwrap_err();
    assert!(
        matches!(se, TransportError::Auth(ref m) if m.contains("bad proof")),
        "server: {se}"
    );
}

/// The server proves nothing before the client has: its Challenge carries only its id
/// and a nonce, and a client that cannot prove the key gets the one refusal.
#[tokio::test]
async fn a_client_without_the_key_gets_no_proof_and_no_further_than_the_challenge() {
    let (l, addr) = listener().await;
    let srv = serve_one(l, keys("server", 5), cfg());
    let mut st = TcpStream::connect(&addr).await.unwrap();
    st.write_all(&hello("node9", "server", "hcjob", [0; 32]))
        .await
        .unwrap();
    let mut raw = vec![0u8; 16];
    st.read_exact(&mut raw).await.unwrap();
    let len = u32::from_le_bytes(raw[8..12].try_into().unwrap()) as usize;
    // name "server" (2 + 6) and a 32-byte nonce: no MAC.
    assert_eq!((raw[5], len), (MsgType::Challenge as u8, 2 + 6 + 32));
    let mut p = vec![0u8; len];
    st.read_exact(&mut p).await.unwrap();
    // A guessed proof, then data right behind it: nothing is accepted.
    st.write_all(&encode_frame(&Msg::Response { mac: [0x42; 32] }, &[]).unwrap())
        .await
        .unwrap();
    let put = Msg::PutBegin(PutBegin {
        src_node: "node9".into(),
        path: "x".into(),
        size: 1,
        chunk_size: 1,
        mtime_ns: 0,
        generation: 1,
    });
    let _ = st.write_all(&encode_frame(&put, &[]).unwrap()).await;
    let e = srv.await.unwrap().unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("bad proof")),
        "{e}"
    );
    match read_frame(&mut st).await {
        Msg::Error { errno, reason } => assert_eq!((errno, reason.as_str()), (libc::EACCES, REFUSAL)),
        m => panic!("{m:?}"),
    }
}

/// Wrong job, a node outside the map, the server's own id, a Hello meant for another
/// node, another frame protection, a bad proof: the client hears the same words for
/// each, after its Response (the server's log says which).
#[tokio::test]
async fn every_refusal_looks_the_same_to_the_client() {
    let master = secret(6);
    let cases: [(&str, &str, &str, &str, u8, bool); 6] = [
        ("wrong job", "client", "server", "otherjob", 0, true),
        ("not in the map", "node9", "server", "hcjob", 0, true),
        ("its own id", "server", "server", "hcjob", 0, true),
        ("meant for another node", "client", "node1", "hcjob", 0, true),
        ("other protection", "client", "server", "hcjob", 1, true),
        ("bad proof", "client", "server", "hcjob", 0, false),
    ];
    let mut answers = Vec::new();
    for (what, me, to, job, mode, good_proof) in cases {
        let (l, addr) = listener().await;
        let mut c = cfg();
        c.allowed_peers = Some(["client".to_string(), "server".to_string()].into());
        let srv = serve_one(l, keys("server", 6), c);
        let mut st = TcpStream::connect(&addr).await.unwrap();
        let nonce = [7u8; 32];
        let h = Msg::Hello(Hello {
            node_id: me.into(),
            server_id: to.into(),
            job: job.into(),
            nonce,
            mode,
        });
        st.write_all(&encode_frame(&h, &[]).unwrap()).await.unwrap();
        let Msg::Challenge(ch) = read_frame(&mut st).await else {
            panic!("{what}: no Challenge")
        };
        let t = Transcript {
            job,
            client_nonce: &nonce,
            server_nonce: &ch.nonce,
            client_id: me,
            server_id: to,
            mode,
        };
        let k = pair_key(&master, job, me, to);
        let mac = if good_proof {
            auth::prove(k.expose(), Role::Client, &t)
        } else {
            [1; 32]
        };
        st.write_all(&encode_frame(&Msg::Response { mac }, &[]).unwrap())
            .await
            .unwrap();
        answers.push((what, read_frame(&mut st).await));
        assert!(srv.await.unwrap().is_err(), "{what}: accepted");
    }
    for (what, a) in &answers {
        assert_eq!(
            a,
            &Msg::Error {
                errno: libc::EACCES,
                reason: REFUSAL.into()
            },
            "{what}"
        );
    }
}

#[tokio::test]
async fn data_frames_before_authentication_are_refused() {
    let (l, addr) = listener().await;
    let srv = serve_one(l, keys("server", 6), cfg());
    let mut st = TcpStream::connect(&addr).await.unwrap();
    let data = b"payload";
    st.write_all(&encode_frame(&Msg::Chunk(ChunkHeader::for_data(0, 0, data)), data).unwrap())
        .await
        .unwrap();
    let e = srv.await.unwrap().unwrap_err();
    assert!(matches!(e, TransportError::Auth(_)), "{e}");
}

#[tokio::test]
async fn a_garbage_sending_peer_is_refused() {
    for garbage in [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        vec![0xff; 64],
        encode_header(MsgType::Hello, u32::MAX).to_vec(),
        // A valid header announcing a payload bigger than the handshake allows.
        encode_header(MsgType::Hello, 100_000).to_vec(),
    ] {
        let (l, addr) = listener().await;
        let srv = serve_one(l, keys("server", 7), cfg());
        let mut st = TcpStream::connect(&addr).await.unwrap();
        st.write_all(&garbage).await.unwrap();
        // The server refuses from the header alone: it does not wait for the
        // announced payload (the test would hang on the 60 s timeout otherwise).
        let e = srv.await.unwrap().unwrap_err();
        assert!(
            matches!(e, TransportError::Auth(ref m) if m.contains("not a ckptfs peer")),
            "{e}"
        );
    }
}

#[tokio::test]
async fn a_replayed_response_is_refused_because_nonces_are_fresh() {
    let k = pair_key(&secret(8), "hcjob", "client", "server");
    let (l, addr) = listener().await;
    let srv = serve_one(l, keys("server", 8), cfg());
    // A legitimate handshake, recorded.
    let nonce = [0x11; 32];
    let (mut st, recorded) = raw_client(&addr, k.expose(), nonce).await;
    assert!(matches!(read_frame(&mut st).await, Msg::AuthOk { .. }));
    srv.await.unwrap().unwrap();
    // The eavesdropper (no key) replays the same Hello and the recorded Response.
    let (l, addr) = listener().await;
    let srv = serve_one(l, keys("server", 8), cfg());
    let mut st = TcpStream::connect(&addr).await.unwrap();
    st.write_all(&hello("client", "server", "hcjob", nonce))
        .await
        .unwrap();
    let Msg::Challenge(_) = read_frame(&mut st).await else {
        panic!("no Challenge")
    };
    st.write_all(&recorded).await.unwrap();
    let e = srv.await.unwrap().unwrap_err();
    assert!(matches!(e, TransportError::Auth(_)), "{e}");
}

/// A client reaches a server that is not the node it dialled (a relay to another
/// daemon, or a stranger on the port): refused before it proves anything.
#[tokio::test]
async fn an_impostor_server_is_refused_by_the_client() {
    // The daemon at the address is "server"; the client dialled "node1".
    let (l, addr) = listener().await;
    let srv = serve_one(l, keys("server", 9), cfg());
    let e = connect(&addr, &id("client"), "node1", &keys("client", 9), &cfg())
        .await
        .unwrap_err();
    assert!(matches!(e, TransportError::Auth(_)), "{e}");
    assert!(srv.await.unwrap().is_err());
    // A stranger that answers as "server" but does not hold the key: it cannot prove it.
    let (l, addr) = listener().await;
    let fake = tokio::spawn(async move {
        let (mut st, _) = l.accept().await.unwrap();
        assert!(matches!(read_frame(&mut st).await, Msg::Hello(_)));
        let ch = Msg::Challenge(ckptfs_transport::frame::Challenge {
            node_id: "server".into(),
            nonce: [5; 32],
        });
        st.write_all(&encode_frame(&ch, &[]).unwrap()).await.unwrap();
        assert!(matches!(read_frame(&mut st).await, Msg::Response { .. }));
        let ok = Msg::AuthOk { mac: [9; 32] };
        st.write_all(&encode_frame(&ok, &[]).unwrap()).await.unwrap();
        let mut rest = Vec::new();
        let _ = st.read_to_end(&mut rest).await;
    });
    let e = connect(&addr, &id("client"), "server", &keys("client", 9), &cfg())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("did not prove")),
        "{e}"
    );
    fake.await.unwrap();
    // No key for the node dialled at all: refused before connecting.
    let e = connect(&addr, &id("client"), "nobody", &keys("client", 9), &cfg())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("no key")),
        "{e}"
    );
}

#[tokio::test]
async fn after_authentication_a_path_escape_or_bad_chunk_is_a_typed_error() {
    let (mut raw, mut conn) = raw_pair(10).await;
    // A PutBegin whose path leaves the partner namespace.
    let mut p = Vec::new();
    p.extend_from_slice(&1u64.to_le_bytes());
    p.extend_from_slice(&10u64.to_le_bytes());
    p.extend_from_slice(&0i64.to_le_bytes());
    p.extend_from_slice(&(1u32 << 20).to_le_bytes());
    p.extend_from_slice(&6u16.to_le_bytes());
    p.extend_from_slice(b"client");
    let path = b"../../etc/cron.d/x";
    p.extend_from_slice(&(path.len() as u16).to_le_bytes());
    p.extend_from_slice(path);
    let mut f = encode_header(MsgType::PutBegin, p.len() as u32).to_vec();
    f.extend_from_slice(&p);
    raw.send(&f).await.unwrap();
    let e = conn.recv().await.unwrap_err();
    assert!(
        matches!(e, TransportError::Frame(FrameError::BadPath { .. })),
        "{e}"
    );
    assert_eq!(e.errno(), libc::EINVAL);

    // A fresh connection: a chunk whose data does not match its CRC (damaged before
    // it was tagged: the tag is right, the CRC is not).
    let (mut raw, mut conn) = raw_pair(10).await;
    let mut h = ChunkHeader::for_data(7, 0, b"good data");
    let mut f = encode_frame(&Msg::Chunk(h), b"good data").unwrap();
    let n = f.len();
    f[n - 1] = b'A';
    raw.send(&f).await.unwrap();
    // ... followed by the same chunk sent again intact.
    h = ChunkHeader::for_data(7, 0, b"good data");
    raw.send(&encode_frame(&Msg::Chunk(h), b"good data").unwrap())
        .await
        .unwrap();
    let Msg::Chunk(got) = conn.recv().await.unwrap() else {
        panic!()
    };
    let mut buf = vec![0u8; got.len as usize];
    let e = conn.recv_chunk_data(&mut buf).await.unwrap_err();
    assert!(
        matches!(e, TransportError::Frame(FrameError::ChunkCrc { index: 7 })),
        "{e}"
    );
    // The connection stayed in step: the re-sent chunk is read intact.
    let Msg::Chunk(got) = conn.recv().await.unwrap() else {
        panic!()
    };
    let mut buf = vec![0u8; got.len as usize];
    conn.recv_chunk_data(&mut buf).await.unwrap();
    assert_eq!(buf, b"good data");
    // Reading a message while chunk data is pending is refused, not silently skipped.
    raw.send(&encode_frame(&Msg::Chunk(h), b"good data").unwrap())
        .await
        .unwrap();
    assert!(matches!(conn.recv().await.unwrap(), Msg::Chunk(_)));
    assert!(matches!(conn.recv().await, Err(TransportError::Protocol(_))));
    conn.skip_chunk_data().await.unwrap();
    // An oversized chunk announcement is refused from its header.
    raw.stream()
        .write_all(&encode_header(MsgType::Chunk, u32::MAX))
        .await
        .unwrap();
    let e = conn.recv().await.unwrap_err();
    assert!(
        matches!(e, TransportError::Frame(FrameError::TooLong { .. })),
        "{e}"
    );
}

/// A relay without the key changes bytes after they were tagged: chunk data changed
/// (and its CRC recomputed to match) is refused as changed on the way, with the
/// connection still in step; a changed control frame ends the connection; a frame
/// replayed or dropped breaks the count and ends it too.
#[tokio::test]
async fn frames_changed_replayed_or_dropped_on_the_way_are_refused() {
    for protection in [Protection::Integrity, Protection::Encrypted] {
        let c = ConnConfig { protection, ..cfg() };
        let (cl, mut conn) = pair(11, c.clone()).await;
        let mut raw = cl.into_raw().unwrap();
        let good = b"the checkpoint's bytes".to_vec();
        let h = ChunkHeader::for_data(1, 0, &good);
        let mut wire = raw.seal(&encode_frame(&Msg::Chunk(h), &good).unwrap());
        // The relay's change: one data byte, and the CRC in the chunk header made to
        // match the new data.
        let (hl, fl) = (16, 24);
        wire[hl + fl] ^= 0x20;
        let forged = ckptfs_transport::crc32c(&wire[hl + fl..hl + fl + good.len()]);
        wire[hl + 20..hl + 24].copy_from_slice(&forged.to_le_bytes());
        raw.stream().write_all(&wire).await.unwrap();
        raw.send(&encode_frame(&Msg::Chunk(h), &good).unwrap())
            .await
            .unwrap();
        let Msg::Chunk(got) = conn.recv().await.unwrap() else {
            panic!()
        };
        let mut buf = vec![0u8; got.len as usize];
        let e = conn.recv_chunk_data(&mut buf).await.unwrap_err();
        assert!(
            matches!(e, TransportError::Frame(FrameError::ChunkAuth { index: 1 })),
            "{protection:?}: {e}"
        );
        assert_eq!(e.errno(), libc::EBADMSG);
        let Msg::Chunk(got) = conn.recv().await.unwrap() else {
            panic!()
        };
        let mut buf = vec![0u8; got.len as usize];
        conn.recv_chunk_data(&mut buf).await.unwrap();
        assert_eq!(buf, good);
        // A control frame changed on the way: the connection ends.
        let mut wire = raw.seal(&encode_frame(&Msg::Ack { tag: 5 }, &[]).unwrap());
        wire[16] ^= 1;
        raw.stream().write_all(&wire).await.unwrap();
        let e = conn.recv().await.unwrap_err();
        assert!(
            matches!(e, TransportError::Frame(FrameError::BadTag { .. })),
            "{protection:?}: {e}"
        );

        // Replay: the same sealed frame twice.
        let (cl, mut conn) = pair(11, c.clone()).await;
        let mut raw = cl.into_raw().unwrap();
        let wire = raw.seal(&encode_frame(&Msg::Ack { tag: 1 }, &[]).unwrap());
        raw.stream().write_all(&wire).await.unwrap();
        raw.stream().write_all(&wire).await.unwrap();
        assert_eq!(conn.recv().await.unwrap(), Msg::Ack { tag: 1 });
        assert!(matches!(
            conn.recv().await,
            Err(TransportError::Frame(FrameError::BadTag { .. }))
        ));
        // Drop: the first of two frames never arrives.
        let (cl, mut conn) = pair(11, c.clone()).await;
        let mut raw = cl.into_raw().unwrap();
        let _dropped = raw.seal(&encode_frame(&Msg::Ack { tag: 1 }, &[]).unwrap());
        raw.send(&encode_frame(&Msg::Ack { tag: 2 }, &[]).unwrap())
            .await
            .unwrap();
        assert!(matches!(
            conn.recv().await,
            Err(TransportError::Frame(FrameError::BadTag { .. }))
        ));
    }
}

/// With encryption the bytes on the wire are not the data.
#[tokio::test]
async fn encrypted_connections_do_not_carry_the_data_in_the_clear() {
    let (l, addr) = listener().await;
    let c = ConnConfig {
        protection: Protection::Encrypted,
        ..cfg()
    };
    // A tap between client and server: it forwards and records the client's bytes.
    let (tap_l, tap_addr) = listener().await;
    let tap = tokio::spawn(async move {
        let (mut a, _) = tap_l.accept().await.unwrap();
        let mut b = TcpStream::connect(&addr).await.unwrap();
        let (mut ar, mut aw) = a.split();
        let (mut br, mut bw) = b.split();
        let mut seen = Vec::new();
        let up = async {
            let mut buf = [0u8; 65536];
            loop {
                let n = ar.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    let _ = bw.shutdown().await;
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                bw.write_all(&buf[..n]).await.unwrap();
            }
        };
        let down = tokio::io::copy(&mut br, &mut aw);
        let _ = tokio::join!(up, down);
        seen
    });
    let srv = serve_one(l, keys("server", 12), c.clone());
    let mut cl = connect(&tap_addr, &id("client"), "server", &keys("client", 12), &c)
        .await
        .unwrap();
    let mut s = srv.await.unwrap().unwrap();
    let secret_data = b"SECRET-CHECKPOINT-BYTES-".repeat(100);
    cl.send_chunk(&ChunkHeader::for_data(0, 0, &secret_data), &secret_data)
        .await
        .unwrap();
    let Msg::Chunk(h) = s.recv().await.unwrap() else {
        panic!()
    };
    let mut buf = vec![0u8; h.len as usize];
    s.recv_chunk_data(&mut buf).await.unwrap();
    assert_eq!(buf, secret_data);
    cl.close().await.unwrap();
    drop(cl);
    drop(s);
    let seen = tap.await.unwrap();
    assert!(seen.len() > secret_data.len());
    assert!(
        !seen.windows(24).any(|w| w == b"SECRET-CHECKPOINT-BYTES-"),
        "the data crossed in the clear"
    );
}

#[tokio::test]
async fn a_silent_peer_times_out_and_a_closed_one_reports_closed() {
    let (l, addr) = listener().await;
    let mut c = cfg();
    c.handshake_timeout = Duration::from_millis(200);
    let srv = serve_one(l, keys("server", 11), c);
    let _idle = TcpStream::connect(&addr).await.unwrap();
    let e = srv.await.unwrap().unwrap_err();
    assert!(matches!(e, TransportError::Timeout { .. }), "{e}");
    assert_eq!(e.errno(), libc::ETIMEDOUT);

    let (c, mut s) = pair(11, cfg()).await;
    drop(c);
    assert!(matches!(s.recv().await, Err(TransportError::Closed)));
}

#[tokio::test]
async fn a_refusal_with_a_long_reason_reaches_the_client_during_the_handshake() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut st, _) = l.accept().await.unwrap();
        assert!(matches!(read_frame(&mut st).await, Msg::Hello(_)));
        let reason = format!("refused: {}", "x".repeat(1000));
        let e = Msg::Error {
            errno: libc::EACCES,
            reason,
        };
        st.write_all(&encode_frame(&e, &[]).unwrap()).await.unwrap();
    });
    let e = connect(&addr, &id("client"), "server", &keys("client", 12), &cfg())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("refused: xxxx")),
        "{e}"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn a_chunk_that_trickles_in_lands_whole_and_one_cut_short_is_an_error() {
    // The receiver raises SO_RCVLOWAT to wake for large pieces: a peer sending a 1 MiB
    // chunk in 4 KiB pieces with pauses, then one that stops mid-chunk, must still give
    // the right bytes and a clean error, never a hang.
    let (mut raw, mut conn) = raw_pair(9).await;
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 13 + 5) as u8).collect();
    let mut frame =
        |i: u64| raw.seal(&encode_frame(&Msg::Chunk(ChunkHeader::for_data(i, 0, &data)), &data).unwrap());
    let (f1, f2, f3) = (frame(1), frame(2), frame(3));
    let writer = tokio::spawn(async move {
        let st = raw.stream();
        for f in [&f1, &f2] {
            for piece in f.chunks(4096) {
                st.write_all(piece).await.unwrap();
                if piece.as_ptr() as usize % (64 << 10) < 4096 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        // The third chunk stops half way and the peer goes away.
        st.write_all(&f3[..f3.len() / 2]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(raw);
    });
    // Into a sink (partner copies) ...
    let Msg::Chunk(h) = conn.recv().await.unwrap() else {
        panic!("no chunk")
    };
    let mut sink = VecSink {
        buf: vec![0u8; h.len as usize],
        at: 0,
    };
    conn.recv_chunk_into(&mut sink).await.unwrap();
    assert!(sink.buf == data, "the trickled chunk landed different bytes");
    // ... and into a buffer (restores).
    let Msg::Chunk(h) = conn.recv().await.unwrap() else {
        panic!("no chunk")
    };
    let mut buf = vec![0u8; h.len as usize];
    conn.recv_chunk_data(&mut buf).await.unwrap();
    assert!(buf == data, "the trickled chunk read different bytes");
    let Msg::Chunk(h) = conn.recv().await.unwrap() else {
        panic!("no chunk")
    };
    let mut buf = vec![0u8; h.len as usize];
    let t0 = std::time::Instant::now();
    let e = conn.recv_chunk_data(&mut buf).await.unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_secs(50),
        "waited for the timeout: {e}"
    );
    assert!(
        matches!(&e, TransportError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof),
        "{e:?}"
    );
    writer.await.unwrap();
}
