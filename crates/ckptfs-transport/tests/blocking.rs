//! The blocking client connection against the tokio server side: the same handshake
//! (both protections), every message, chunk frames both ways (a damaged one refused with
//! the connection still in step), a wrong key or an impostor server refused with
//! EACCES, a peer that stops answering timing out with ETIMEDOUT, a connection with
//! no read timeout waiting longer than its handshake's deadline for an answer, and a
//! chunk whose data comes in two parts landing as soon as the second arrives (not at
//! the read timeout).

mod support;

use ckptfs_cluster::{NodeKeys, Secret};
use ckptfs_transport::frame::encode_frame;
use ckptfs_transport::{
    accept, blocking, ChunkHeader, ConnConfig, FrameError, Identity, ListEntry, Msg, Nack, Protection,
    PutBegin, PutEnd, TransportError, REFUSAL,
};
use std::time::{Duration, Instant};
use support::{cfg, VecSink};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

const NODES: [&str; 3] = ["client", "server", "node1"];

fn id(n: &str) -> Identity {
    Identity {
        node_id: n.into(),
        job: "ntjob".into(),
    }
}

fn keys(me: &str, b: u8) -> NodeKeys {
    NodeKeys::derive(&Secret::from_bytes(&[b; 32]).unwrap(), "ntjob", me, NODES)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A listener on a free loopback port, bound in `rt`.
fn listener(rt: &tokio::runtime::Runtime) -> (TcpListener, String) {
    let l = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let a = l.local_addr().unwrap().to_string();
    (l, a)
}

/// Accepts one connection as "server" with keys under secret `b` and hands the tokio
/// connection (or the server's error) to `f`.
fn serve_one<F, Fut>(
    rt: &tokio::runtime::Runtime,
    l: TcpListener,
    b: u8,
    c: ConnConfig,
    f: F,
) -> tokio::task::JoinHandle<Result<(), TransportError>>
where
    F: FnOnce(ckptfs_transport::Conn) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    rt.spawn(async move {
        let (st, _) = l.accept().await.unwrap();
        let conn = accept(st, &id("server"), &keys("server", b), &c).await?;
        f(conn).await;
        Ok(())
    })
}

fn messages() -> Vec<Msg> {
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
        Msg::Query {
            body: "{\"q\":1}".into(),
        },
        Msg::Bye,
    ]
}

#[test]
fn a_blocking_client_authenticates_with_the_async_server_and_every_message_crosses() {
    let rt = rt();
    for protection in [Protection::Integrity, Protection::Encrypted] {
        let c = ConnConfig { protection, ..cfg() };
        let (l, addr) = listener(&rt);
        // The server echoes every message, then sends an Error.
        let srv = serve_one(&rt, l, 1, c.clone(), |mut s| async move {
            assert_eq!(s.peer_id(), "client");
            for m in messages() {
                let got = s.recv().await.unwrap();
                assert_eq!(got, m);
                s.send(&got).await.unwrap();
            }
            s.send(&Msg::Error {
                errno: libc::EIO,
                reason: "boom".into(),
            })
            .await
            .unwrap();
            assert!(matches!(s.recv().await, Err(TransportError::Closed)));
        });
        let mut cl = blocking::Conn::connect(&addr, &id("client"), "server", &keys("client", 1), &c).unwrap();
        assert_eq!(cl.peer_id(), "server");
        for m in &messages() {
            cl.send(m).unwrap();
            assert_eq!(&cl.recv().unwrap(), m, "{protection:?}");
        }
        match cl.recv() {
            Err(e @ TransportError::Peer { .. }) => assert_eq!(e.errno(), libc::EIO),
            r => panic!("{r:?}"),
        }
        drop(cl);
        rt.block_on(srv).unwrap().unwrap();
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8)
        .collect()
}

#[test]
fn chunk_frames_cross_both_ways_and_a_damaged_one_is_refused_in_step() {
    let rt = rt();
    for protection in [Protection::Integrity, Protection::Encrypted] {
        let c = ConnConfig { protection, ..cfg() };
        let (l, addr) = listener(&rt);
        let up = pattern((3 << 20) + 17, 1);
        let down = pattern((2 << 20) + 5, 7);
        let (up2, down2) = (up.clone(), down.clone());
        let srv = serve_one(&rt, l, 2, c.clone(), move |mut s| async move {
            // Receives the client's chunks in place.
            let mut store = vec![0u8; up2.len()];
            loop {
                match s.recv().await.unwrap() {
                    Msg::Chunk(h) => {
                        let at = h.offset as usize;
                        s.recv_chunk_data(&mut store[at..at + h.len as usize])
                            .await
                            .unwrap();
                    }
                    Msg::PutEnd(_) => break,
                    m => panic!("{m:?}"),
                }
            }
            assert!(store == up2, "upload differs");
            // Sends its chunks back, one with a CRC that does not match its data, one
            // the client skips, then Bye.
            for (i, ch) in down2.chunks(1 << 20).enumerate() {
                let h = ChunkHeader::for_data(i as u64, (i << 20) as u64, ch);
                s.send_chunk(&h, ch).await.unwrap();
            }
            let mut bad = ChunkHeader::for_data(7, 0, b"damaged");
            bad.crc32c ^= 1;
            s.send_chunk(&bad, b"damaged").await.unwrap();
            s.send_chunk(&ChunkHeader::for_data(8, 0, b"skipped"), b"skipped")
                .await
                .unwrap();
            s.send(&Msg::Bye).await.unwrap();
        });
        let mut cl = blocking::Conn::connect(&addr, &id("client"), "server", &keys("client", 2), &c).unwrap();
        for (i, ch) in up.chunks(1 << 20).enumerate() {
            let h = ChunkHeader::for_data(i as u64, (i << 20) as u64, ch);
            cl.send_chunk(&h, ch).unwrap();
        }
        // Misuse is refused, not sent: a Chunk without data, a length mismatch.
        let h = ChunkHeader::for_data(9, 0, b"abc");
        assert!(matches!(
            cl.send(&Msg::Chunk(h)),
            Err(TransportError::Protocol(_))
        ));
        assert!(matches!(
            cl.send_chunk(&h, b"ab"),
            Err(TransportError::Protocol(_))
        ));
        cl.send(&Msg::PutEnd(PutEnd {
            generation: 0,
            chunks: 4,
            size: up.len() as u64,
        }))
        .unwrap();
        let mut got = vec![0u8; down.len()];
        for _ in 0..down.chunks(1 << 20).count() {
            let Msg::Chunk(h) = cl.recv().unwrap() else {
                panic!("not a chunk")
            };
            // A message before the data is read is refused.
            assert!(matches!(cl.recv(), Err(TransportError::Protocol(_))));
            let at = h.offset as usize;
            cl.recv_chunk_data(&mut got[at..at + h.len as usize]).unwrap();
        }
        assert!(got == down, "download differs ({protection:?})");
        let Msg::Chunk(h) = cl.recv().unwrap() else {
            panic!("not a chunk")
        };
        let mut b = vec![0u8; h.len as usize];
        let e = cl.recv_chunk_data(&mut b).unwrap_err();
        assert!(
            matches!(e, TransportError::Frame(FrameError::ChunkCrc { index: 7 })),
            "{e}"
        );
        assert_eq!(e.errno(), libc::EBADMSG);
        // Still in step: the next chunk, skipped, and the Bye behind it.
        assert!(matches!(cl.recv().unwrap(), Msg::Chunk(h) if h.index == 8));
        cl.skip_chunk_data().unwrap();
        assert_eq!(cl.recv().unwrap(), Msg::Bye);
        rt.block_on(srv).unwrap().unwrap();
    }
}

#[test]
fn a_wrong_key_or_an_impostor_server_is_refused_with_eacces() {
    let rt = rt();
    let (l, addr) = listener(&rt);
    let srv = serve_one(&rt, l, 3, cfg(), |_| async {});
    let e = blocking::Conn::connect(&addr, &id("client"), "server", &keys("client", 4), &cfg()).unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains(REFUSAL)),
        "{e}"
    );
    assert_eq!(e.errno(), libc::EACCES);
    let se = rt.block_on(srv).unwrap().unwrap_err();
    assert!(
        matches!(se, TransportError::Auth(ref m) if m.contains("bad proof")),
        "server: {se}"
    );

    // The daemon at the address is "server"; the client dialled "node1": the client
    // refuses it (and tells it why) before proving anything.
    let (l, addr) = listener(&rt);
    let srv = serve_one(&rt, l, 3, cfg(), |_| async {});
    let e = blocking::Conn::connect(&addr, &id("client"), "node1", &keys("client", 3), &cfg()).unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("not \"node1\"")),
        "{e}"
    );
    assert_eq!(e.errno(), libc::EACCES);
    let se = rt.block_on(srv).unwrap().unwrap_err();
    assert!(matches!(se, TransportError::Auth(_)), "server: {se}");

    // No key for the node dialled: refused before connecting.
    let e = blocking::Conn::connect(&addr, &id("client"), "nobody", &keys("client", 3), &cfg()).unwrap_err();
    assert!(
        matches!(e, TransportError::Auth(ref m) if m.contains("no key")),
        "{e}"
    );
}

#[test]
fn a_peer_that_stops_answering_times_out_with_etimedout() {
    let rt = rt();
    // A listener that accepts and never speaks: the handshake times out.
    let (l, addr) = listener(&rt);
    let idle = rt.spawn(async move {
        let (st, _) = l.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(st);
    });
    let c = ConnConfig {
        handshake_timeout: Duration::from_millis(300),
        ..cfg()
    };
    let t = Instant::now();
    let e = blocking::Conn::connect(&addr, &id("client"), "server", &keys("client", 5), &c).unwrap_err();
    assert!(matches!(e, TransportError::Timeout { .. }), "{e}");
    assert_eq!(e.errno(), libc::ETIMEDOUT);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "waited for the peer to close"
    );
    idle.abort();

    // An authenticated server that reads a request and never answers.
    let (l, addr) = listener(&rt);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let srv = serve_one(&rt, l, 5, cfg(), move |mut s| async move {
        assert!(matches!(s.recv().await.unwrap(), Msg::Query { .. }));
        // Holds the connection open until the client has given up.
        let _ = tokio::task::spawn_blocking(move || rx.recv()).await;
        drop(s);
    });
    let c = ConnConfig {
        read_timeout: Some(Duration::from_millis(300)),
        ..cfg()
    };
    let mut cl = blocking::Conn::connect(&addr, &id("client"), "server", &keys("client", 5), &c).unwrap();
    cl.send(&Msg::Query { body: "{}".into() }).unwrap();
    let e = cl.recv().unwrap_err();
    assert!(matches!(e, TransportError::Timeout { .. }), "{e}");
    assert_eq!(e.errno(), libc::ETIMEDOUT);
    tx.send(()).unwrap();
    rt.block_on(srv).unwrap().unwrap();
    // Closed by the peer between frames: Closed.
    assert!(matches!(cl.recv(), Err(TransportError::Closed)));
}

#[test]
fn a_chunk_whose_second_half_comes_later_lands_without_waiting_for_the_timeout() {
    // The client raises SO_RCVLOWAT to the rest of the chunk. A blocking read that found
    // the first half queued copied it and slept until a whole mark more had arrived,
    // which the second half (the last bytes the server sends before it waits for the
    // next request) never is: the chunk landed only at the read timeout (the restore
    // from a partner that waited 30 s for its last file).
    let rt = rt();
    let (l, addr) = listener(&rt);
    let data = pattern(1 << 20, 3);
    let data2 = data.clone();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let srv = serve_one(&rt, l, 6, cfg(), move |s| async move {
        let mut raw = s.into_raw().unwrap();
        let chunk = |raw: &mut ckptfs_transport::RawConn, i: u64| {
            raw.seal(&encode_frame(&Msg::Chunk(ChunkHeader::for_data(i, 0, &data2)), &data2).unwrap())
        };
        let wait = |rx: std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>| {
            tokio::task::spawn_blocking(move || rx.lock().unwrap().recv().unwrap())
        };
        // A chunk in two halves 300 ms apart, then nothing until the client has it.
        let f = chunk(&mut raw, 1);
        let half = f.len() / 2;
        raw.stream().write_all(&f[..half]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        raw.stream().write_all(&f[half..]).await.unwrap();
        wait(rx.clone()).await.unwrap();
        // A small answer 200 ms later: read at once (the mark is 1 again, the socket
        // blocking again).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let hb = raw.seal(&encode_frame(&Msg::Heartbeat { seq: 9, unix_ms: 1 }, &[]).unwrap());
        raw.stream().write_all(&hb).await.unwrap();
        // Half a chunk, then silence: the client times out.
        let f = chunk(&mut raw, 2);
        raw.stream().write_all(&f[..f.len() / 2]).await.unwrap();
        wait(rx).await.unwrap();
    });
    let c = ConnConfig {
        read_timeout: Some(Duration::from_secs(4)),
        ..cfg()
    };
    let mut cl = blocking::Conn::connect(&addr, &id("client"), "server", &keys("client", 6), &c).unwrap();
    let Msg::Chunk(h) = cl.recv().unwrap() else {
        panic!("not a chunk")
    };
    let t = Instant::now();
    let mut sink = VecSink {
        buf: vec![0u8; h.len as usize],
        at: 0,
    };
    cl.recv_chunk_into(&mut sink).unwrap();
    let took = t.elapsed();
    assert!(sink.buf == data, "the chunk differs");
    assert!(
        took < Duration::from_secs(2),
        "the chunk landed after {took:?}: the read waited for its timeout"
    );
    tx.send(()).unwrap();
    let t = Instant::now();
    assert!(matches!(cl.recv().unwrap(), Msg::Heartbeat { seq: 9, .. }));
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "a small answer read after {took:?}"
    );
    // A chunk cut short: the read timeout, once.
    cl.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let Msg::Chunk(h) = cl.recv().unwrap() else {
        panic!("not a chunk")
    };
    let mut sink = VecSink {
        buf: vec![0u8; h.len as usize],
        at: 0,
    };
    let t = Instant::now();
    let e = cl.recv_chunk_into(&mut sink).unwrap_err();
    assert!(matches!(e, TransportError::Timeout { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    tx.send(()).unwrap();
    rt.block_on(srv).unwrap().unwrap();
}

#[test]
fn without_a_read_timeout_an_answer_later_than_the_handshake_deadline_is_waited_for() {
    // The handshake sets the socket's timeouts to what is left of its deadline; with no
    // read timeout configured, none may stay behind on the socket.
    let rt = rt();
    let (l, addr) = listener(&rt);
    let srv = serve_one(&rt, l, 7, cfg(), |mut s| async move {
        assert!(matches!(s.recv().await.unwrap(), Msg::Query { .. }));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        s.send(&Msg::QueryReply { body: "{}".into() }).await.unwrap();
    });
    let c = ConnConfig {
        read_timeout: None,
        handshake_timeout: Duration::from_secs(1),
        ..cfg()
    };
    let mut cl = blocking::Conn::connect(&addr, &id("client"), "server", &keys("client", 7), &c).unwrap();
    assert_eq!(cl.read_timeout(), None);
    cl.send(&Msg::Query { body: "{}".into() }).unwrap();
    assert!(matches!(cl.recv().unwrap(), Msg::QueryReply { .. }));
    rt.block_on(srv).unwrap().unwrap();
}
