//! Two nodes' stores drain into one shared PFS directory (issue "Failures in sequence",
//! item 5): an older version never replaces a newer one another node drained (the
//! drain says which file it skipped and why), and a node's restore takes its own
//! files, the other node's only when asked, and names what it left.

mod common;
use ckptfs_agent::{restore, restore_nodes, Agent};
use common::*;

fn node_cfg(dest: &std::path::Path, node: &str) -> ckptfs_agent::AgentConfig {
    let mut c = cfg(dest);
    c.node_id = node.into();
    c
}

#[test]
fn two_nodes_share_a_pfs_directory_without_overwriting_or_restoring_each_others_files() {
    let a = store("shareA", |_| {});
    let b = store("shareB", |_| {});
    let dest = tempfile::tempdir().unwrap();
    let (old, new) = (data(1, 200_000), data(2, 150_000));
    // nA writes its version of the shared name first; nB's is newer.
    put(&a.store, "/ckpt/shared.bin", &old);
    put(&a.store, "/ckpt/a.bin", &data(3, 1000));
    std::thread::sleep(std::time::Duration::from_millis(20));
    put(&b.store, "/ckpt/shared.bin", &new);
    put(&b.store, "/ckpt/b.bin", &data(4, 1000));

    let sb = Agent::new(&b.store, node_cfg(dest.path(), "nB"))
        .unwrap()
        .run_once()
        .unwrap();
    assert!(sb.failed.is_empty(), "{:?}", sb.failed);
    // nA drains after nB: its older shared.bin must not replace nB's newer one.
    let sa = Agent::new(&a.store, node_cfg(dest.path(), "nA"))
        .unwrap()
        .run_once()
        .unwrap();
    let on_pfs = std::fs::read(dest.path().join("ckpt/shared.bin")).unwrap();
    assert!(
        on_pfs == new,
        "nA's older shared.bin replaced nB's newer one on the PFS"
    );
    assert_eq!(
        std::fs::read(dest.path().join("ckpt/a.bin")).unwrap(),
        data(3, 1000)
    );
    assert_eq!(sa.failed.len(), 1, "{:?}", sa.failed);
    let f = &sa.failed[0];
    assert_eq!(f.path, "/ckpt/shared.bin");
    assert_eq!(f.errno, libc::EEXIST);
    assert!(!f.will_retry);
    assert!(
        f.error.contains("skipped") && f.error.contains("newer version drained by node nB"),
        "{}",
        f.error
    );
    // Drained again (nothing changed): still skipped, the PFS file is nB's.
    let sa = Agent::new(&a.store, node_cfg(dest.path(), "nA"))
        .unwrap()
        .run_once()
        .unwrap();
    assert_eq!(std::fs::read(dest.path().join("ckpt/shared.bin")).unwrap(), new);
    assert!(sa.failed.iter().all(|f| f.path == "/ckpt/shared.bin"));

    // nA restores into an empty store: its own files only; nB's are named as skipped.
    let fresh = store("shareC", |_| {});
    let targets = node_cfg(dest.path(), "nA").targets;
    let r = restore_nodes(&fresh.store, &targets, "/", &["nA".to_string()]).unwrap();
    let got: Vec<&str> = r.restored.iter().map(|x| x.path.as_str()).collect();
    assert_eq!(got, ["/ckpt/a.bin"], "{r:?}");
    let skipped: Vec<(&str, &str)> = r
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), s.node.as_str()))
        .collect();
    assert_eq!(skipped, [("/ckpt/b.bin", "nB"), ("/ckpt/shared.bin", "nB")]);
    assert!(
        fresh.store.stat("/ckpt/b.bin").is_err(),
        "nB's file was restored into nA's store"
    );
    // Asked for nB's files too: everything, nB's shared.bin (the newer one).
    let r = restore_nodes(&fresh.store, &targets, "/", &["nA".to_string(), "nB".to_string()]).unwrap();
    assert!(r.failed.is_empty() && r.skipped.is_empty(), "{r:?}");
    assert_eq!(get(&fresh.store, "/ckpt/shared.bin"), new);
    assert_eq!(get(&fresh.store, "/ckpt/b.bin"), data(4, 1000));
    // `restore` (every node) still takes them all.
    let all = store("shareD", |_| {});
    let r = restore(&all.store, &targets, "/").unwrap();
    assert_eq!(r.restored.len(), 3, "{r:?}");
}
