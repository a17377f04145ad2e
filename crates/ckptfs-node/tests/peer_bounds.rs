//! What a node accepts from an authenticated peer is bounded (issue 29): a Get naming a
//! directory of the partner namespace is EISDIR, not an empty file.

mod support;

use ckptfs_cluster::Scheme;
use ckptfs_node::partner_store::copy_path;
use ckptfs_transport::{self as tp, ConnConfig, Identity};
use std::time::{Duration, Instant};
use support::*;

async fn client(tc: &TestCluster, me: &str, to: &str) -> tp::Conn {
    let secret = tc.cluster.secret().unwrap();
    let id = Identity {
        node_id: me.to_string(),
        job: tc.cluster.job.clone(),
    };
    let addr = tc.cluster.node(to).unwrap().addr.clone();
    let t = Instant::now();
    loop {
        match tp::connect(&addr, &id, &secret, &ConnConfig::default()).await {
            Ok(c) => return c,
            Err(e) if t.elapsed() > Duration::from_secs(60) => panic!("{to} never came up: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn get(path: &str) -> tp::Msg {
    tp::Msg::Get {
        src_node: "node1".into(),
        path: path.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_naming_a_directory_of_the_partner_namespace_is_eisdir_not_an_empty_file() {
    let tc = TestCluster::new("bnd-dir", 2, Scheme::Ring, 1);
    let s2 = tc.store("node2");
    let data = bytes(100_000, 3);
    write(&s2, &copy_path("node1", "/ckpt/sub/x"), &data);
    let d = Daemon::start(tc.config("node2"));
    let mut c = client(&tc, "node1", "node2").await;
    for dir in ["ckpt", "ckpt/sub"] {
        c.send(&get(dir)).await.unwrap();
        match c.recv().await.unwrap() {
            tp::Msg::Nack(n) => assert_eq!(n.errno, libc::EISDIR, "Get {dir}: {n:?}"),
            m => panic!("Get {dir} answered {m:?}"),
        }
    }
    // The connection is still in step: the file itself is served whole.
    c.send(&get("ckpt/sub/x")).await.unwrap();
    match c.recv().await.unwrap() {
        tp::Msg::PutBegin(b) => assert_eq!(b.size, data.len() as u64),
        m => panic!("Get of the copy answered {m:?}"),
    }
    let mut got = Vec::new();
    loop {
        match c.recv().await.unwrap() {
            tp::Msg::Chunk(h) => {
                let mut buf = vec![0u8; h.len as usize];
                c.recv_chunk_data(&mut buf).await.unwrap();
                got.extend_from_slice(&buf);
            }
            tp::Msg::PutEnd(_) => break,
            m => panic!("in the copy: {m:?}"),
        }
    }
    assert_eq!(got, data);
    d.stop().await;
}
