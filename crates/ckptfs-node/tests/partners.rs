//! Partner copies between daemons on 127.0.0.1 (in this process): placement by the
//! plan, byte-identical copies, rewrite and delete following, levels record, restore
//! from peers into an empty store.

mod support;

use ckptfs_cluster::Scheme;
use ckptfs_node::levels::Levels;
use support::*;

/// Ring and mirror, k = 1 and 2: every node's file lands on exactly its planned
/// partners, byte-identical, and nowhere else; the source records the partners.
async fn copies_land_on_planned_partners(tag: &str, scheme: Scheme, k: usize) {
    let tc = TestCluster::new(tag, 4, scheme, k).patient();
    let ids: Vec<String> = tc.cluster.nodes.iter().map(|n| n.id.clone()).collect();
    let daemons: Vec<Daemon> = ids.iter().map(|id| Daemon::start(tc.config(id))).collect();
    let mut data = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        // Not a multiple of the chunk size, several chunks.
        let d = bytes(200_000 + i * 70_001, i as u32);
        write(&tc.store(id), "/ckpt/step1/rank.bin", &d);
        data.push(d);
    }
    for (i, id) in ids.iter().enumerate() {
        let partners = tc.partners_of(id);
        assert_eq!(partners.len(), k);
        for p in &partners {
            let s = tc.store(p);
            wait_for(&format!("copy of {id}'s file on {p}"), || {
                copy_on(&s, id, "/ckpt/step1/rank.bin").is_some()
            })
            .await;
            assert_eq!(
                copy_on(&s, id, "/ckpt/step1/rank.bin").unwrap(),
                data[i],
                "{id} on {p}"
            );
        }
        let src = tc.store(id);
        let t = std::time::Instant::now();
        while Levels::load(&src)
            .files
            .get("/ckpt/step1/rank.bin")
            .is_none_or(|f| f.partners.len() != k)
        {
            if t.elapsed().as_secs() > 90 {
                // What the record holds (a partner too many: a heartbeat was missed).
                let rec = Levels::load(&src).files.get("/ckpt/step1/rank.bin").cloned();
                panic!("timed out waiting for {id}'s levels record to name {k} partners: {rec:?}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let mut rec = Levels::load(&src).files["/ckpt/step1/rank.bin"].partners.clone();
        rec.sort();
        let mut want = partners.clone();
        want.sort();
        assert_eq!(rec, want);
    }
    // Nobody else holds a copy, and applications do not see the copies.
    for id in &ids {
        let s = tc.store(id);
        for src in &ids {
            let held = copy_on(&s, src, "/ckpt/step1/rank.bin").is_some();
            assert_eq!(held, tc.partners_of(src).contains(id), "{src}'s copy on {id}");
        }
        let names: Vec<String> = s.read_dir("/").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec!["ckpt"]);
    }
    for d in daemons {
        d.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_k1_copies_land_on_planned_partners() {
    copies_land_on_planned_partners("ring1", Scheme::Ring, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_k2_copies_land_on_planned_partners() {
    copies_land_on_planned_partners("ring2", Scheme::Ring, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_k1_copies_land_on_planned_partners() {
    copies_land_on_planned_partners("mir1", Scheme::Mirror, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_k3_copies_land_on_planned_partners() {
    copies_land_on_planned_partners("mir3", Scheme::Mirror, 3).await;
}

/// A rewrite on the source replaces the partner copy (never a mix of versions); a
/// delete drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_updates_and_delete_drops_the_partner_copy() {
    let tc = TestCluster::new("rw", 2, Scheme::Ring, 1).patient();
    let d1 = Daemon::start(tc.config("node1"));
    let d2 = Daemon::start(tc.config("node2"));
    let (s1, s2) = (tc.store("node1"), tc.store("node2"));
    let v1 = bytes(150_000, 1);
    write(&s1, "/ckpt/a", &v1);
    write(&s1, "/ckpt/b", &bytes(10, 2));
    wait_for("first version on node2", || {
        copy_on(&s2, "node1", "/ckpt/a") == Some(v1.clone())
    })
    .await;
    let v2 = bytes(90_000, 3);
    write(&s1, "/ckpt/a", &v2);
    wait_for("second version on node2", || {
        copy_on(&s2, "node1", "/ckpt/a") == Some(v2.clone())
    })
    .await;
    wait_for("copy of b", || copy_on(&s2, "node1", "/ckpt/b").is_some()).await;
    s1.unlink("/ckpt/b").unwrap();
    wait_for("b's copy dropped", || copy_on(&s2, "node1", "/ckpt/b").is_none()).await;
    // The source saves its record once the partner acknowledged the drop, just after
    // the partner dropped the copy.
    wait_for("b gone from node1's levels record", || {
        !Levels::load(&s1).files.contains_key("/ckpt/b")
    })
    .await;
    assert_eq!(copy_on(&s2, "node1", "/ckpt/a"), Some(v2));
    d1.stop().await;
    d2.stop().await;
}

/// A partner that gives no more room answers ENOSPC: the source records "no partner
/// copy" for it (shown by `ls -l`), never a silent loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_partner_answers_enospc_and_the_source_records_no_copy() {
    let tc = TestCluster::new("full", 2, Scheme::Ring, 1);
    let d1 = Daemon::start(tc.config("node1"));
    let mut c2 = tc.config("node2");
    c2.partner_limit = Some(256 << 10);
    let d2 = Daemon::start(c2);
    let s1 = tc.store("node1");
    write(&s1, "/ckpt/small", &bytes(100_000, 1));
    write(&s1, "/ckpt/big", &bytes(1 << 20, 2));
    wait_for("both files decided", || {
        let l = Levels::load(&s1);
        l.files
            .get("/ckpt/small")
            .is_some_and(|f| f.partners == ["node2"])
            && l.files
                .get("/ckpt/big")
                .is_some_and(|f| f.refused.contains_key("node2"))
    })
    .await;
    let view = ckptfs_node::LevelsView::load(&s1);
    let st = s1.stat("/ckpt/big").unwrap();
    let w = view.of("/ckpt/big", &st);
    assert!(w.partners.is_empty());
    assert!(
        w.refused["node2"].contains("No space") || w.refused["node2"].contains("no space"),
        "{:?}",
        w.refused
    );
    assert_eq!(w.summary(), "local, no copy on node2");
    assert!(copy_on(&tc.store("node2"), "node1", "/ckpt/big").is_none());
    d1.stop().await;
    d2.stop().await;
}

/// A whole rack lost (node1 and node2 of r1: daemons stopped, stores destroyed): the
/// replacements get every file back from the other rack's memory, byte-identical, and
/// re-establish their partner copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_rack_lost_every_file_comes_back_from_the_other_rack() {
    let tc = TestCluster::new("rack", 4, Scheme::Ring, 1);
    assert!(tc.cluster.plan().unwrap().survives_every_domain());
    let ids = ["node1", "node2", "node3", "node4"];
    let mut daemons: Vec<Option<Daemon>> = ids.iter().map(|id| Some(Daemon::start(tc.config(id)))).collect();
    let mut data = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let d = bytes(100_000 + i * 33_333, 10 + i as u32);
        write(&tc.store(id), "/ckpt/s9/part", &d);
        write(&tc.store(id), "/ckpt/s9/meta", &bytes(100, i as u32));
        data.push(d);
    }
    for id in ids {
        let s = tc.store(id);
        // At least one partner each (on a loaded machine a late heartbeat can make a
        // node take the next eligible partner too, which is in the other rack as well).
        wait_for(&format!("{id}'s copies acknowledged"), || {
            Levels::load(&s)
                .files
                .values()
                .filter(|f| !f.partners.is_empty())
                .count()
                == 2
        })
        .await;
    }
    // Rack r1 goes: node1 and node2.
    for i in 0..2 {
        daemons[i].take().unwrap().stop().await;
        ckptfs_store::Store::destroy(&tc.store_opts(ids[i]).name).unwrap();
    }
    for i in 0..2 {
        let s = tc.store(ids[i]);
        assert!(s.read_dir("/").unwrap().is_empty());
        let rep = ckptfs_node::restore_from_peers(&tc.cluster, ids[i], &s, "/")
            .await
            .unwrap();
        assert!(rep.failed.is_empty(), "{rep:?}");
        assert_eq!(rep.restored.len(), 2, "{rep:?}");
        assert!(
            rep.restored
                .iter()
                .all(|r| r.from == "node3" || r.from == "node4"),
            "{rep:?}"
        );
        assert_eq!(read(&s, "/ckpt/s9/part").unwrap(), data[i]);
        assert_eq!(read(&s, "/ckpt/s9/meta").unwrap(), bytes(100, i as u32));
        // A second restore keeps what the store has.
        let again = ckptfs_node::restore_from_peers(&tc.cluster, ids[i], &s, "/")
            .await
            .unwrap();
        assert!(again.restored.is_empty() && again.present.len() == 2, "{again:?}");
        daemons[i] = Some(Daemon::start(tc.config(ids[i])));
    }
    // The replacements copy their files out again.
    for i in 0..2 {
        let p = &tc.partners_of(ids[i])[0];
        let s = tc.store(p);
        wait_for("copies re-established", || {
            copy_on(&s, ids[i], "/ckpt/s9/part") == Some(data[i].clone())
        })
        .await;
        let src = tc.store(ids[i]);
        wait_for("levels rebuilt", || {
            Levels::load(&src)
                .files
                .values()
                .filter(|f| f.partners.len() == 1)
                .count()
                == 2
        })
        .await;
    }
    for d in daemons.into_iter().flatten() {
        d.stop().await;
    }
}

/// The partner stops in the middle of a transfer (throttled to make it long): its half
/// copy is never listed, and when it is back the copy is completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partner_stopped_mid_transfer_lists_no_half_copy_and_gets_it_later() {
    let tc = TestCluster::new("mid", 2, Scheme::Ring, 1);
    let mut c1 = tc.config("node1");
    c1.max_bw = Some(2e6);
    let d1 = Daemon::start(c1);
    let d2 = Daemon::start(tc.config("node2"));
    let s1 = tc.store("node1");
    let s2 = tc.store("node2");
    let data = bytes(3 << 20, 5);
    write(&s1, "/ckpt/long", &data);
    let name1 = tc.store_opts("node1").name;
    wait_for("the copy in flight", || {
        ckptfs_node::status(&name1).is_some_and(|s| s.in_flight.iter().any(|f| f.done > 0))
    })
    .await;
    d2.stop().await;
    assert!(ckptfs_node::partner_store::list(&s2, "node1").is_empty());
    assert!(s2.stat("/.ckptfs/partners/node1/ckpt/long").is_err());
    let acked = Levels::load(&s1)
        .files
        .get("/ckpt/long")
        .map(|f| f.partners.clone());
    assert!(acked.unwrap_or_default().is_empty(), "a half copy acknowledged");
    let d2 = Daemon::start(tc.config("node2"));
    wait_for("the copy completed", || {
        copy_on(&s2, "node1", "/ckpt/long").is_some()
    })
    .await;
    assert_eq!(copy_on(&s2, "node1", "/ckpt/long").unwrap(), data);
    d1.stop().await;
    d2.stop().await;
}

/// A partner that is down is replaced by the next eligible node of the plan, so the
/// file still gets its copy; the daemon's status shows the peer down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_partner_is_replaced_by_the_next_eligible_node() {
    let tc = TestCluster::new("repl", 4, Scheme::Ring, 1);
    let partner = tc.partners_of("node1")[0].clone();
    let plan = tc.cluster.plan().unwrap();
    let replacement = plan.node("node1").unwrap().replacements[0].clone();
    assert_ne!(partner, replacement);
    let daemons: Vec<Daemon> = ["node1", "node2", "node3", "node4"]
        .iter()
        .filter(|id| **id != partner)
        .map(|id| Daemon::start(tc.config(id)))
        .collect();
    let data = bytes(123_456, 9);
    write(&tc.store("node1"), "/ckpt/f", &data);
    let s = tc.store(&replacement);
    wait_for("the copy on the replacement", || {
        copy_on(&s, "node1", "/ckpt/f").is_some()
    })
    .await;
    assert_eq!(copy_on(&s, "node1", "/ckpt/f").unwrap(), data);
    let name1 = tc.store_opts("node1").name;
    wait_for("node1's status to show the partner down", || {
        ckptfs_node::status(&name1).is_some_and(|st| {
            !st.peers[&partner].up && st.peers[&replacement].up && st.partners == vec![replacement.clone()]
        })
    })
    .await;
    for d in daemons {
        d.stop().await;
    }
}

/// The daemon hosts the drain to the PFS (the agent engine): complete files are
/// published to the destination, and their levels show `pfs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_drain_publishes_to_the_pfs_and_levels_show_it() {
    let tc = TestCluster::new("drain", 2, Scheme::Ring, 1);
    let pfs = tempfile::tempdir().unwrap();
    let mut c1 = tc.config("node1");
    let mut agent = ckptfs_agent::AgentConfig::new(&[pfs.path().to_path_buf()]);
    agent.node_id = "node1".into();
    agent.interval = std::time::Duration::from_millis(50);
    c1.drain = Some(agent);
    let d1 = Daemon::start(c1);
    let d2 = Daemon::start(tc.config("node2"));
    let s1 = tc.store("node1");
    let data = bytes(200_000, 4);
    write(&s1, "/ckpt/d", &data);
    wait_for("drained and copied", || {
        let st = s1.stat("/ckpt/d").unwrap();
        let w = ckptfs_node::LevelsView::load(&s1).of("/ckpt/d", &st);
        w.pfs && w.partners == ["node2"]
    })
    .await;
    assert_eq!(std::fs::read(pfs.path().join("ckpt/d")).unwrap(), data);
    let st = s1.stat("/ckpt/d").unwrap();
    let w = ckptfs_node::LevelsView::load(&s1).of("/ckpt/d", &st);
    let pfs_id = format!("pfs:{}", pfs.path().display());
    assert_eq!(
        w.levels,
        ["local".to_string(), "partner:node2".into(), pfs_id.clone()]
    );
    assert_eq!(w.summary(), format!("local, partner:node2, {pfs_id}"));
    d1.stop().await;
    d2.stop().await;
    ckptfs_agent::status::remove_status(&tc.store_opts("node1").name);
}

/// A partner whose store fills up in the middle of a copy (no `--partner-max`, a small
/// store): it answers ENOSPC, drops the rest of the copy and its half copy; the source
/// records "no partner copy", never a silent loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partner_store_full_mid_copy_answers_enospc_and_keeps_no_half_copy() {
    let tc = TestCluster::new("fullmid", 2, Scheme::Ring, 1);
    let d1 = Daemon::start(tc.config("node1"));
    let mut c2 = tc.config("node2");
    c2.store.mem_size = Some(4 << 20);
    let d2 = Daemon::start(c2);
    let s1 = tc.store("node1");
    write(&s1, "/ckpt/big", &bytes(6 << 20, 8));
    wait_for("node1 to record no copy on node2", || {
        Levels::load(&s1)
            .files
            .get("/ckpt/big")
            .is_some_and(|f| f.refused.contains_key("node2"))
    })
    .await;
    let l = Levels::load(&s1);
    assert!(l.files["/ckpt/big"].partners.is_empty());
    let why = &l.files["/ckpt/big"].refused["node2"];
    assert!(why.to_lowercase().contains("no space"), "{why}");
    // node2: nothing listed, no half copy left, its own store usable.
    let name2 = tc.store_opts("node2").name;
    let s2 = ckptfs_store::Store::attach(&ckptfs_store::StoreOptions::named(name2.clone())).unwrap();
    wait_for("node2's half copy to go", || {
        s2.list_all_system().iter().all(|(p, _)| {
            !p.starts_with(ckptfs_node::partner_store::INCOMING_DIR)
                || p == ckptfs_node::partner_store::INCOMING_DIR
        })
    })
    .await;
    assert!(ckptfs_node::partner_store::list(&s2, "node1").is_empty());
    let st = ckptfs_node::status(&name2).unwrap();
    assert_eq!(st.copies_received, 0);
    drop(s2);
    d1.stop().await;
    d2.stop().await;
}
