//! Loopback throughput of the peer transport against a plain TCP stream, same run.
//!
//! `cargo run --release -p ckptfs-transport --example loopback [MiB] [chunk KiB]`
//! (defaults 1024 MiB in 1024 KiB chunks). Prints both figures and their ratio; the
//! transport sends each chunk with one `writev` and receives it into one buffer with its
//! CRC32C checked.

use ckptfs_cluster::{NodeKeys, Secret};
use ckptfs_transport::{accept, connect, ChunkHeader, ConnConfig, Identity, Msg, Protection};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let total_mib: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(1024);
    let chunk_kib: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1024);
    let chunk = chunk_kib << 10;
    let n = (total_mib << 20) / chunk;
    let data: Vec<u8> = (0..chunk).map(|i| (i * 31 % 251) as u8).collect();

    // Plain TCP.
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let rx = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; chunk];
        for _ in 0..n {
            s.read_exact(&mut buf).await.unwrap();
        }
    });
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let t = Instant::now();
    for _ in 0..n {
        s.write_all(&data).await?;
    }
    rx.await?;
    let plain = (n * chunk) as f64 / t.elapsed().as_secs_f64() / 1e9;

    println!("loopback, {total_mib} MiB in {chunk_kib} KiB chunks");
    println!("plain TCP stream       {plain:6.2} GB/s");
    // The transport, with each frame protection.
    let secret = Secret::generate()?;
    for protection in [Protection::Integrity, Protection::Encrypted] {
        let cfg = ConnConfig {
            protection,
            ..ConnConfig::default()
        };
        let l = TcpListener::bind("127.0.0.1:0").await?;
        let addr = l.local_addr()?.to_string();
        let kb = NodeKeys::derive(&secret, "bench", "b", ["a", "b"]);
        let ka = NodeKeys::derive(&secret, "bench", "a", ["a", "b"]);
        let cfg2 = cfg.clone();
        let rx = tokio::spawn(async move {
            let (st, _) = l.accept().await.unwrap();
            let me = Identity {
                node_id: "b".into(),
                job: "bench".into(),
            };
            let mut c = accept(st, &me, &kb, &cfg2).await.unwrap();
            let mut buf = vec![0u8; chunk];
            for _ in 0..n {
                let Ok(Msg::Chunk(h)) = c.recv().await else {
                    panic!("expected a chunk")
                };
                c.recv_chunk_data(&mut buf[..h.len as usize]).await.unwrap();
            }
        });
        let me = Identity {
            node_id: "a".into(),
            job: "bench".into(),
        };
        let mut c = connect(&addr, &me, "b", &ka, &cfg).await?;
        let t = Instant::now();
        for i in 0..n {
            let h = ChunkHeader::for_data(i as u64, (i * chunk) as u64, &data);
            c.send_chunk(&h, &data).await?;
        }
        rx.await?;
        let framed = (n * chunk) as f64 / t.elapsed().as_secs_f64() / 1e9;
        println!(
            "ckptfs-transport {:<10} {framed:6.2} GB/s  ({:.2}x; CRC32C and the frame tag computed by sender and receiver)",
            format!("{protection:?}").to_lowercase(),
            framed / plain
        );
    }
    Ok(())
}
