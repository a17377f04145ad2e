//! The dataset question `holds` (issue 29, failure case 36 of docs/cluster.md): an
//! authenticated peer learns only about its own copies, a third node's partner copies
//! and the answering node's dataset files; never about an application file or anything
//! under `/.ckptfs` (no size/CRC oracle). A question naming one 32 MiB file 1,000 times
//! is answered from the chunk records, each distinct file once: it costs little CPU.
//! One test only in this binary, so the process CPU time it measures is its own.

mod support;

use ckptfs_cluster::Scheme;
use ckptfs_datasets::Want;
use ckptfs_node::datasets::{Reply, Request};
use ckptfs_node::partner_store::copy_path;
use ckptfs_store::checksum::crc32c_append;
use ckptfs_transport as tp;
use support::*;

fn want(path: &str, data: &[u8]) -> Want {
    Want {
        path: path.into(),
        size: data.len() as u64,
        crc32c: crc32c_append(0, data),
    }
}

/// Ask `holds {owner, files}` on `c`; the flags, or the error text.
async fn holds(c: &mut tp::Conn, owner: &str, files: Vec<Want>) -> Result<Vec<bool>, String> {
    let body = serde_json::to_string(&Request::Holds {
        owner: owner.into(),
        files,
    })
    .unwrap();
    c.send(&tp::Msg::Query { body }).await.unwrap();
    match c.recv().await.unwrap() {
        tp::Msg::QueryReply { body } => match serde_json::from_str::<Reply>(&body).unwrap() {
            Reply::Holds(v) => Ok(v),
            Reply::Error(e) => Err(e),
            r => panic!("answered {r:?}"),
        },
        m => panic!("answered {m:?}"),
    }
}

/// CPU time of this process (user + system), seconds.
fn cpu_seconds() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the zeroed buffer given, which lives
    // across the call; RUSAGE_SELF is a valid target.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    assert_eq!(rc, 0);
    // SAFETY: getrusage succeeded, so it initialized the struct (and a zeroed rusage is
    // a valid value anyway).
    let ru = unsafe { ru.assume_init() };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_answers_only_for_own_copies_and_dataset_files_and_duplicates_cost_little() {
    let tc = TestCluster::new("bnd-holds", 3, Scheme::Ring, 1);
    let s2 = tc.store("node2");
    // node2's application file, node3's copy, node1's big copy, node2's dataset file.
    let app = bytes(50_000, 1);
    write(&s2, "/app/secret", &app);
    let c3 = bytes(30_000, 2);
    write(&s2, &copy_path("node3", "/ckpt/c"), &c3);
    let big = bytes(32 << 20, 3);
    write(&s2, &copy_path("node1", "/ckpt/big"), &big);
    let ds = bytes(40_000, 4);
    write(&s2, "/ds/f", &ds);
    let w = want("/ds/f", &ds);
    let rec: ckptfs_datasets::Dataset = serde_json::from_value(serde_json::json!({
        "format": ckptfs_datasets::record::FORMAT, "id": 1, "name": "s1", "job": "j",
        "state": "complete", "reason": null, "created_ns": 1, "closed_ns": 2,
        "parts_expected": 1, "parts": {}, "dir": null,
        "files": {"/ds/f": {"size": w.size, "crc32c": w.crc32c, "mtime_ns": 0, "levels": []}},
        "decision": null, "flush": false, "evicted": false
    }))
    .unwrap();
    ckptfs_datasets::record::save(&s2, &rec).unwrap();
    let d = Daemon::start(tc.config("node2"));
    let mut c = client(&tc, "node1", "node2").await;

    // No oracle: node2's application file, another node's copy by its internal path,
    // node2's internal records, asked with their exact size and CRC32C.
    let rec_path = "/.ckptfs/datasets/j/00000000000000000001.json";
    let rec_bytes = read(&s2, rec_path).unwrap();
    let oracle = vec![
        want("/app/secret", &app),
        want(&copy_path("node3", "/ckpt/c"), &c3),
        want(rec_path, &rec_bytes),
    ];
    assert_eq!(
        holds(&mut c, "node2", oracle).await.unwrap(),
        [false, false, false]
    );
    // Nor through another owner's name: only that owner's partner copies are looked at.
    let via = vec![want("/app/secret", &app), want("/../app/secret", &app)];
    assert_eq!(holds(&mut c, "node3", via).await.unwrap(), [false, false]);
    // The legitimate answers still come: node2's dataset file (its record's content
    // only), node3's partner copy (a restart checking node3's part), node1's own copy.
    let mut stale = w.clone();
    stale.crc32c ^= 1;
    assert_eq!(
        holds(&mut c, "node2", vec![w.clone(), stale]).await.unwrap(),
        [true, false]
    );
    assert_eq!(
        holds(&mut c, "node3", vec![want("/ckpt/c", &c3)]).await.unwrap(),
        [true]
    );

    // One 32 MiB copy named 1,000 times, plus once with a wrong CRC: the right flags, for
    // little CPU (the code before read the file 1,001 times: seconds of CPU).
    let wb = want("/ckpt/big", &big);
    let mut wrong = wb.clone();
    wrong.crc32c ^= 1;
    let mut files = vec![wb; 1000];
    files.push(wrong);
    let cpu0 = cpu_seconds();
    let got = holds(&mut c, "node1", files).await.unwrap();
    let cpu = cpu_seconds() - cpu0;
    assert_eq!(got.len(), 1001);
    assert!(got[..1000].iter().all(|&b| b) && !got[1000], "wrong flags");
    assert!(cpu < 1.0, "the duplicate question cost {cpu:.2} s of CPU");

    // Too many files in one question: an error, not an answer.
    let many = vec![want("/ckpt/big", b"x"); 5000];
    let e = holds(&mut c, "node1", many).await.unwrap_err();
    assert!(e.contains("at most"), "{e}");
    d.stop().await;
}
