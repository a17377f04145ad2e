//! Connections over loopback TCP: authentication (success, wrong secret, no secret,
//! replay, unknown node, other job), every message over the wire, chunk data into the
//! caller's buffer, and hostile peers after authentication.

use ckptfs_cluster::Secret;
use ckptfs_transport::auth::{self, Role, Transcript};
use ckptfs_transport::frame::{
    decode_frame, encode_frame, encode_header, Challenge, Hello, MsgType, DEFAULT_MAX_CHUNK,
};
use ckptfs_transport::{
    accept, connect, ChunkHeader, ConnConfig, FrameError, Identity, ListEntry, Msg, Nack, PutBegin, PutEnd,
    TransportError,
};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn id(n: &str) -> Identity {
    Identity {
        node_id: n.into(),
        job: "hcjob".into(),
    }
}

fn cfg() -> ConnConfig {
    ConnConfig {
        // Generous: the machine is loaded; no test waits for a timeout to pass.
        read_timeout: Some(Duration::from_secs(60)),
        write_timeout: Duration::from_secs(60),
        handshake_timeout: Duration::from_secs(60),
        ..ConnConfig::default()
    }
}

fn secret(b: u8) -> Secret {
    Secret::from_bytes(&[b; 32]).unwrap()
}

async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap().to_string();
    (l, a)
}

/// Accepts one connection and runs the server handshake with `s`.
fn serve_one(
    l: TcpListener,
    s: Secret,
    c: ConnConfig,
) -> tokio::task::JoinHandle<Result<ckptfs_transport::Conn, TransportError>> {
    tokio::spawn(async move {
        let (st, _) = l.accept().await.unwrap();
        accept(st, &id("server"), &s, &c).await
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

/// Runs the client side of the handshake by hand; returns the stream and the bytes of
/// the Response frame it sent (what an eavesdropper would record).
async fn raw_client(addr: &str, s: &Secret, nonce: [u8; 32]) -> (TcpStream, Vec<u8>) {
    let mut st = TcpStream::connect(addr).await.unwrap();
    let hello = Msg::Hello(Hello {
        node_id: "client".into(),
        job: "hcjob".into(),
        nonce,
    });
    st.write_all(&encode_frame(&hello, &[]).unwrap()).await.unwrap();
    let Msg::Challenge(ch) = read_frame(&mut st).await else {
        panic!("no Challenge")
    };
    let t = Transcript {
        job: "hcjob",
        client_nonce: &nonce,
        server_nonce: &ch.nonce,
        client_id: "client",
        server_id: &ch.node_id,
    };
    let resp = encode_frame(
        &Msg::Response {
            mac: auth::prove(s.expose(), Role::Client, &t),
        },
        &[],
    )
    .unwrap();
    st.write_all(&resp).await.unwrap();
    (st, resp)
}

#[tokio::test]
async fn right_secret_authenticates_both_ways_and_every_message_crosses() {
    let (l, addr) = listener().await;
    let srv = serve_one(l, secret(1), cfg());
    let mut c = connect(&addr, &id("client"), &secret(1), &cfg()).await.unwrap();
    let mut s = srv.await.unwrap().unwrap();
    assert_eq!(c.peer_id(), "server");
    assert_eq!(s.peer_id(), "client");
    let msgs = vec![
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
    ];
    for m in &msgs {
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

#[tokio::test]
async fn chunk_data_goes_out_in_one_frame_and_lands_in_the_callers_buffer() {
    let (l, addr) = listener().await;
    let srv = serve_one(l, secret(2), cfg());
    let c = connect(&addr, &id("client"), &secret(2), &cfg()).await.unwrap();
    let s = srv.await.unwrap().unwrap();
    let (_cr, mut cw) = c.into_split();
    let (mut sr, _sw) = s.into_split();
    let data: Vec<u8> = (0..(3 << 20) + 17).map(|i: u32| (i % 251) as u8).collect();
    let chunks: Vec<&[u8]> = data.chunks(1 << 20).collect();
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
    assert!(store == data, "bytes differ");
}

#[tokio::test]
async fn wrong_secret_is_refused_on_both_sides_before_any_data() {
    let (l, addr) = listener().await;
    let srv = serve_one(l, secret(3), cfg());
    let e = connect(&addr, &id("client"), &secret(4), &cfg())
        .await
        .unwrap_err();
    // The client finds out first: the server's proof does not verify with its secret.
    assert!(matches!(e, TransportError::Auth(_)), "{e}");
    assert_eq!(e.errno(), libc::EACCES);
    let se = srv.await.unwrap().unwrap_err();
    assert!(
        matches!(se, TransportError::Auth(_) | TransportError::Closed),
        "server: {se}"
    );
}

#[tokio::test]
async fn a_client_without_the_secret_gets_no_further_than_the_challenge() {
    let (l, addr) = listener().await;
    let srv = serve_one(l, secret(5), cfg());
    let mut st = TcpStream::connect(&addr).await.unwrap();
    let hello = Msg::Hello(Hello {
        node_id: "intruder".into(),
        job: "hcjob".into(),
        nonce: [0; 32],
    });
    st.write_all(&encode_frame(&hello, &[]).unwrap()).await.unwrap();
    assert!(matches!(read_frame(&mut st).await, Msg::Challenge(_)));
    // A guessed proof, then data right behind it: nothing is accepted.
    st.write_all(&encode_frame(&Msg::Response { mac: [0x42; 32] }, &[]).unwrap())
        .await
        .unwrap();
    let put = Msg::PutBegin(PutBegin {
        src_node: "intruder".into(),
        path: "x".into(),
        size: 1,
        chunk_size: 1,
        mtime_ns: 0,
        generation: 1,
    });
    let _ = st.write_all(&encode_frame(&put, &[]).unwrap()).await;
    let e = srv.await.unwrap().unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("did not prove")),
        "{e}"
    );
    // The server said why, then closed.
    match read_frame(&mut st).await {
        Msg::Error { errno, .. } => assert_eq!(errno, libc::EACCES),
        m => panic!("{m:?}"),
    }
}

#[tokio::test]
async fn data_frames_before_authentication_are_refused() {
    let (l, addr) = listener().await;
    let srv = serve_one(l, secret(6), cfg());
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
        let srv = serve_one(l, secret(7), cfg());
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
    let (l, addr) = listener().await;
    let s = secret(8);
    let srv = serve_one(l, s.clone(), cfg());
    // A legitimate handshake, recorded.
    let nonce = [0x11; 32];
    let (mut st, recorded) = raw_client(&addr, &s, nonce).await;
    assert_eq!(read_frame(&mut st).await, Msg::AuthOk);
    srv.await.unwrap().unwrap();
    // The eavesdropper (no secret) replays the same Hello and the recorded Response.
    let (l, addr) = listener().await;
    let srv = serve_one(l, s.clone(), cfg());
    let mut st = TcpStream::connect(&addr).await.unwrap();
    let hello = Msg::Hello(Hello {
        node_id: "client".into(),
        job: "hcjob".into(),
        nonce,
    });
    st.write_all(&encode_frame(&hello, &[]).unwrap()).await.unwrap();
    let Msg::Challenge(Challenge { .. }) = read_frame(&mut st).await else {
        panic!("no Challenge")
    };
    st.write_all(&recorded).await.unwrap();
    let e = srv.await.unwrap().unwrap_err();
    assert!(matches!(e, TransportError::Auth(_)), "{e}");
}

#[tokio::test]
async fn unknown_nodes_other_jobs_and_impostor_servers_are_refused() {
    // A node not in the map.
    let (l, addr) = listener().await;
    let mut c = cfg();
    c.allowed_peers = Some(["node1".to_string()].into());
    let srv = serve_one(l, secret(9), c);
    let e = connect(&addr, &id("node9"), &secret(9), &cfg())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("not in the cluster map")),
        "{e}"
    );
    assert!(srv.await.unwrap().is_err());
    // Another job.
    let (l, addr) = listener().await;
    let srv = serve_one(l, secret(9), cfg());
    let other = Identity {
        node_id: "client".into(),
        job: "otherjob".into(),
    };
    let e = connect(&addr, &other, &secret(9), &cfg()).await.unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("job")),
        "{e}"
    );
    assert!(srv.await.unwrap().is_err());
    // The client expects node2 but reaches "server".
    let (l, addr) = listener().await;
    let srv = serve_one(l, secret(9), cfg());
    let mut c = cfg();
    c.expect_peer = Some("node2".into());
    let e = connect(&addr, &id("client"), &secret(9), &c).await.unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("expected")),
        "{e}"
    );
    assert!(srv.await.unwrap().is_err());
}

#[tokio::test]
async fn after_authentication_a_path_escape_or_bad_chunk_is_a_typed_error() {
    let (l, addr) = listener().await;
    let s = secret(10);
    let srv = serve_one(l, s.clone(), cfg());
    let (mut st, _) = raw_client(&addr, &s, [3; 32]).await;
    assert_eq!(read_frame(&mut st).await, Msg::AuthOk);
    let mut conn = srv.await.unwrap().unwrap();
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
    st.write_all(&f).await.unwrap();
    let e = conn.recv().await.unwrap_err();
    assert!(
        matches!(e, TransportError::Frame(FrameError::BadPath { .. })),
        "{e}"
    );
    assert_eq!(e.errno(), libc::EINVAL);

    // A fresh connection: a chunk whose data does not match its CRC.
    let (l, addr) = listener().await;
    let srv = serve_one(l, s.clone(), cfg());
    let (mut st, _) = raw_client(&addr, &s, [4; 32]).await;
    assert_eq!(read_frame(&mut st).await, Msg::AuthOk);
    let mut conn = srv.await.unwrap().unwrap();
    let mut h = ChunkHeader::for_data(7, 0, b"good data");
    let mut f = encode_frame(&Msg::Chunk(h), b"good data").unwrap();
    let n = f.len();
    f[n - 1] = b'A'; // damaged in flight
    st.write_all(&f).await.unwrap();
    // ... followed by the same chunk sent again intact.
    h = ChunkHeader::for_data(7, 0, b"good data");
    st.write_all(&encode_frame(&Msg::Chunk(h), b"good data").unwrap())
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
    st.write_all(&encode_frame(&Msg::Chunk(h), b"good data").unwrap())
        .await
        .unwrap();
    assert!(matches!(conn.recv().await.unwrap(), Msg::Chunk(_)));
    assert!(matches!(conn.recv().await, Err(TransportError::Protocol(_))));
    conn.skip_chunk_data().await.unwrap();
    // An oversized chunk announcement is refused from its header.
    st.write_all(&encode_header(MsgType::Chunk, u32::MAX))
        .await
        .unwrap();
    let e = conn.recv().await.unwrap_err();
    assert!(
        matches!(e, TransportError::Frame(FrameError::TooLong { .. })),
        "{e}"
    );
}

#[tokio::test]
async fn a_silent_peer_times_out_and_a_closed_one_reports_closed() {
    let (l, addr) = listener().await;
    let mut c = cfg();
    c.handshake_timeout = Duration::from_millis(200);
    let srv = serve_one(l, secret(11), c);
    let _idle = TcpStream::connect(&addr).await.unwrap();
    let e = srv.await.unwrap().unwrap_err();
    assert!(matches!(e, TransportError::Timeout { .. }), "{e}");
    assert_eq!(e.errno(), libc::ETIMEDOUT);

    let (l, addr) = listener().await;
    let srv = serve_one(l, secret(11), cfg());
    let c = connect(&addr, &id("client"), &secret(11), &cfg()).await.unwrap();
    let mut s = srv.await.unwrap().unwrap();
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
    let e = connect(&addr, &id("client"), &secret(12), &cfg())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("refused: xxxx")),
        "{e}"
    );
    server.await.unwrap();
}

/// A sink into a Vec, reading with plain `read` (what the store's landing does with
/// `readv`).
struct VecSink {
    buf: Vec<u8>,
    at: usize,
}

impl ckptfs_transport::ChunkSink for VecSink {
    fn put(&mut self, data: &[u8]) {
        self.buf[self.at..self.at + data.len()].copy_from_slice(data);
        self.at += data.len();
    }
    fn read_from(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<usize> {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        // A second File on the same descriptor, never closed (ManuallyDrop).
        // SAFETY: the descriptor stays open for the call (borrowed); the File is not
        // dropped, so it does not close it.
        let mut f = std::mem::ManuallyDrop::new(unsafe {
            <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd.as_raw_fd())
        });
        let n = f.read(&mut self.buf[self.at..])?;
        self.at += n;
        Ok(n)
    }
    fn crc(&self) -> u32 {
        ckptfs_transport::crc32c(&self.buf[..self.at])
    }
}

#[tokio::test]
async fn a_chunk_that_trickles_in_lands_whole_and_one_cut_short_is_an_error() {
    // The receiver raises SO_RCVLOWAT to wake for large pieces: a peer sending a 1 MiB
    // chunk in 4 KiB pieces with pauses, then one that stops mid-chunk, must still give
    // the right bytes and a clean error, never a hang.
    let s = secret(9);
    let (l, addr) = listener().await;
    let srv = serve_one(l, s.clone(), cfg());
    let (mut st, _) = raw_client(&addr, &s, [9; 32]).await;
    assert_eq!(read_frame(&mut st).await, Msg::AuthOk);
    let mut conn = srv.await.unwrap().unwrap();
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 13 + 5) as u8).collect();
    let frame = |i: u64| encode_frame(&Msg::Chunk(ChunkHeader::for_data(i, 0, &data)), &data).unwrap();
    let (f1, f2, f3) = (frame(1), frame(2), frame(3));
    let writer = tokio::spawn(async move {
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
        drop(st);
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
