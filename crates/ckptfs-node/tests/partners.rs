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
    let tc = TestCluster::new(tag, 4, scheme, k);
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
        wait_for(&format!("{id}'s levels record"), || {
            let l = Levels::load(&src);
            l.files
                .get("/ckpt/step1/rank.bin")
                .is_some_and(|f| f.partners.len() == k)
        })
        .await;
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
