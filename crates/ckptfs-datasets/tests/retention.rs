//! Single-node dataset tests of retention: how many datasets stay in memory and on the
//! PFS, when memory copies go, and the level policy's record of each decision.

mod common;
use ckptfs_datasets::Datasets;
use common::*;

#[test]
fn retention_keeps_k_datasets_in_memory_and_flushes_every_nth() {
    let fx = fixture();
    let mut c = cfg("0");
    c.keep_memory = 2;
    c.flush_every = 3;
    let ds = Datasets::single_node(fx.store.clone(), c);
    for s in 1..=4u64 {
        ds.begin(&format!("s{s}"), None).unwrap();
        write(&fx.store, &format!("/r{s}"), &content(s, 0));
        ds.complete(None, true).unwrap();
    }
    let (all, _) = ds.list().unwrap();
    let evicted: Vec<u64> = all.iter().filter(|d| d.evicted).map(|d| d.id).collect();
    assert_eq!(evicted, vec![1, 2]);
    assert!(fx.store.stat("/r1").is_err() && fx.store.stat("/r2").is_err());
    assert_eq!(read(&fx.store, "/r3"), content(3, 0));
    assert!(all[2].flush, "every 3rd dataset is flushed");
    assert_eq!(ds.next_evictions(&all), vec![3]);
}

#[test]
fn every_decision_is_recorded_with_inputs_and_reason() {
    let fx = fixture();
    let mut c = cfg("0");
    c.rule = ckptfs_datasets::FailureRule::Remem;
    c.interval = Some(100.0);
    c.pfs_bandwidth = 10_000.0;
    let ds = Datasets::single_node(fx.store.clone(), c);
    let mut levels = Vec::new();
    for s in 1..=4u64 {
        ds.begin(&format!("s{s}"), None).unwrap();
        write(&fx.store, &format!("/p{s}"), &vec![7u8; 100_000]);
        let d = ds.complete(None, true).unwrap();
        let dec = d.decision.unwrap();
        assert!(dec.reason.contains("lowest expected overhead"), "{}", dec.reason);
        assert_eq!(dec.input["tau"], 100.0);
        levels.push(dec.level);
    }
    // REMEM's rule with recall 0.7: memory first, then the PFS once a fallback costs more.
    assert_eq!(levels, vec!["local", "pfs", "local", "pfs"]);
    // An alarm on this node: posterior rule and the alarm are recorded.
    ckptfs_datasets::policy::set_alarm(&fx.store, "n0", true).unwrap();
    ds.begin("s5", None).unwrap();
    write(&fx.store, "/p5", &vec![7u8; 100_000]);
    let d = ds.complete(None, true).unwrap();
    assert!(d.decision.unwrap().alarm);
    ckptfs_datasets::policy::set_alarm(&fx.store, "n0", false).unwrap();
}

#[test]
fn keep_pfs_keeps_the_newest_m_datasets_on_the_pfs_and_says_which_go_next() {
    let fx = fixture();
    let dest = tempfile::tempdir().unwrap();
    let mut c = cfg("0");
    c.dests = vec![dest.path().to_path_buf()];
    c.keep_pfs = 2;
    c.keep_memory = 1;
    let ds = Datasets::single_node(fx.store.clone(), c);
    let mut acfg = ckptfs_agent::AgentConfig::new(&[dest.path().to_path_buf()]);
    acfg.node_id = "n0".into();
    let agent = ckptfs_agent::Agent::new(&fx.store, acfg).unwrap();
    for s in 1..=4u64 {
        ds.begin(&format!("s{s}"), None).unwrap();
        write(&fx.store, &format!("/p{s}/a"), &content(s, 0));
        ds.complete(None, true).unwrap();
        agent.run_once().unwrap();
        let (all, _) = ds.list().unwrap();
        // After each look at most M datasets are wholly on the PFS.
        let on: Vec<u64> = all
            .iter()
            .filter(|d| !d.pfs_pruned && dest.path().join(format!("p{}/a", d.id)).exists())
            .map(|d| d.id)
            .collect();
        assert!(on.len() <= 2, "{on:?}");
        if s >= 2 {
            // The oldest still on the PFS goes when the next one arrives.
            assert_eq!(ds.next_pfs_prunes(&all), vec![s - 1], "after s{s}");
        }
    }
    let (all, _) = ds.list().unwrap();
    let pruned: Vec<u64> = all.iter().filter(|d| d.pfs_pruned).map(|d| d.id).collect();
    assert_eq!(pruned, vec![1, 2]);
    // Their PFS files and manifest entries are gone; the kept ones are intact.
    for s in 1..=2u64 {
        assert!(!dest.path().join(format!("p{s}/a")).exists());
        let m = std::fs::read_to_string(dest.path().join(format!("p{s}/.ckptfs-manifest.n0.json"))).unwrap();
        assert!(!m.contains("\"a\""), "{m}");
    }
    assert_eq!(std::fs::read(dest.path().join("p3/a")).unwrap(), content(3, 0));
    // Dataset 3 (evicted from memory, kept on the PFS) is still a restart candidate:
    // lose dataset 4 everywhere and restart brings 3 back from the PFS.
    fx.store.unlink("/p4/a").unwrap();
    std::fs::remove_file(dest.path().join("p4/a")).unwrap();
    let r = ds.restart().unwrap();
    assert_eq!(r.chosen.unwrap().id, 3, "{:?}", r.skipped);
    assert_eq!(read(&fx.store, "/p3/a"), content(3, 0));
    // Datasets 1 and 2 are on no level any more.
    assert!(r.skipped.iter().all(|s| s.id == 4));
}

#[test]
fn memory_copies_go_only_once_a_newer_dataset_is_protected() {
    let fx = fixture();
    let dest = tempfile::tempdir().unwrap();
    let mut c = cfg("0");
    c.dests = vec![dest.path().to_path_buf()];
    c.keep_memory = 1;
    let ds = Datasets::single_node(fx.store.clone(), c);
    for s in 1..=2u64 {
        ds.begin(&format!("s{s}"), None).unwrap();
        write(&fx.store, &format!("/m{s}"), &content(s, 0));
        ds.complete(None, true).unwrap();
    }
    // Dataset 2 is complete but only in memory: dataset 1 stays.
    let (all, _) = ds.list().unwrap();
    assert!(!all[0].evicted && fx.store.stat("/m1").is_ok());
    // Once dataset 2 is on the PFS, dataset 1 leaves memory.
    let mut acfg = ckptfs_agent::AgentConfig::new(&[dest.path().to_path_buf()]);
    acfg.node_id = "n0".into();
    ckptfs_agent::Agent::new(&fx.store, acfg)
        .unwrap()
        .run_once()
        .unwrap();
    let (all, _) = ds.list().unwrap();
    assert!(all[0].evicted && !all[1].evicted);
    assert!(fx.store.stat("/m1").is_err());
    assert_eq!(read(&fx.store, "/m2"), content(2, 0));
}
