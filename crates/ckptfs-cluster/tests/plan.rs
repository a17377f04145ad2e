//! Node matching: examples with known answers, fall-backs, errors, replacement.

use ckptfs_cluster::{Cluster, Node, Redundancy, Scheme};
use std::collections::BTreeMap;

fn map(nodes: &[(&str, &[(&str, &str)])], levels: &[&str], scheme: Scheme, copies: usize) -> Cluster {
    Cluster {
        job: "j".into(),
        secret_file: None,
        secret: None,
        keys_dir: None,
        encrypt: false,
        heartbeat_ms: 1000,
        heartbeat_misses: 3,
        redundancy: Redundancy {
            scheme,
            copies,
            ..Redundancy::default()
        },
        domains: levels.iter().map(|s| s.to_string()).collect(),
        mem_size: None,
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(i, (id, d))| Node {
                id: id.to_string(),
                addr: format!("127.0.0.1:{}", 7000 + i),
                store: format!("s{i}"),
                domains: d
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            })
            .collect(),
        pool: None,
        source: None,
    }
}

#[test]
fn local_four_ring_sends_each_node_to_the_other_rack() {
    let c = Cluster::local(4, "j", 7000).unwrap();
    let p = c.plan().unwrap();
    assert_eq!(p.partners_of("node1").unwrap(), ["node3"]);
    assert_eq!(p.partners_of("node3").unwrap(), ["node2"]);
    assert_eq!(p.partners_of("node2").unwrap(), ["node4"]);
    assert_eq!(p.partners_of("node4").unwrap(), ["node1"]);
    assert_eq!(p.holds_for("node1").unwrap(), ["node4"]);
    assert!(p.warnings.is_empty());
    assert!(p.survives_every_domain());
}

#[test]
fn local_four_mirror_pairs_across_racks() {
    let mut c = Cluster::local(4, "j", 7000).unwrap();
    c.redundancy.scheme = Scheme::Mirror;
    let p = c.plan().unwrap();
    assert_eq!(p.partners_of("node1").unwrap(), ["node3"]);
    assert_eq!(p.partners_of("node3").unwrap(), ["node1"]);
    assert_eq!(p.partners_of("node2").unwrap(), ["node4"]);
    assert_eq!(p.partners_of("node4").unwrap(), ["node2"]);
    assert!(p.survives_every_domain());
}

#[test]
fn ring_with_two_copies_over_two_racks_keeps_both_copies_in_the_other_rack() {
    let mut c = Cluster::local(4, "j", 7000).unwrap();
    c.redundancy.copies = 2;
    let p = c.plan().unwrap();
    for n in ["node1", "node2"] {
        let mut got = p.partners_of(n).unwrap().to_vec();
        got.sort();
        assert_eq!(got, ["node3", "node4"], "{n}");
    }
    assert!(p.survives_every_domain());
}

#[test]
fn too_big_a_rack_still_gets_a_copy_outside_it_and_lower_levels_are_covered() {
    // Three nodes in r1, one in r2, k = 2: r1's nodes cannot have 2 partners outside
    // r1. Each takes d (the one node outside r1) and, for the psu level, a node outside
    // its own psu: no single rack or psu loss destroys a checkpoint.
    let c = map(
        &[
            ("a", &[("rack", "r1"), ("psu", "p1")]),
            ("b", &[("rack", "r1"), ("psu", "p2")]),
            ("c", &[("rack", "r1"), ("psu", "p2")]),
            ("d", &[("rack", "r2"), ("psu", "p1")]),
        ],
        &["rack", "psu"],
        Scheme::Ring,
        2,
    );
    let p = c.plan().unwrap();
    assert_eq!(p.node("d").unwrap().separated_at.as_deref(), Some("rack"));
    for n in ["a", "b", "c"] {
        let partners = p.partners_of(n).unwrap();
        assert_eq!(partners[0], "d", "{n}: {partners:?}");
    }
    // a (psu p1) also needs a partner outside p1: d shares it, so b or c.
    assert!(["b", "c"].contains(&p.partners_of("a").unwrap()[1].as_str()));
    assert_eq!(p.warnings.len(), 3, "{:?}", p.warnings);
    assert!(p.warnings[0].contains("node \"a\"") && p.warnings[0].contains("only 1 node(s)"));
    assert!(p.survives_every_domain(), "{:?}", p.domain_loss);
}

#[test]
fn the_plan_covers_a_lower_level_rather_than_stay_inside_the_rack() {
    // a2 (r1, p2) with k = 2: b1 is the only node outside r1 but shares p2. Taking two
    // r1 nodes outside p2 would lose a2's checkpoints with rack r1; b1 + a p1 node
    // survives any one rack or psu.
    let c = map(
        &[
            ("a1", &[("rack", "r1"), ("psu", "p1")]),
            ("a2", &[("rack", "r1"), ("psu", "p2")]),
            ("a3", &[("rack", "r1"), ("psu", "p1")]),
            ("b1", &[("rack", "r2"), ("psu", "p2")]),
        ],
        &["rack", "psu"],
        Scheme::Ring,
        2,
    );
    let p = c.plan().unwrap();
    assert_eq!(p.partners_of("a2").unwrap()[0], "b1");
    assert!(p.survives_every_domain(), "{:?}", p.domain_loss);
}

#[test]
fn one_domain_everywhere_plans_distinct_nodes_and_says_so() {
    let c = map(
        &[
            ("a", &[("rack", "r1")]),
            ("b", &[("rack", "r1")]),
            ("c", &[("rack", "r1")]),
        ],
        &["rack"],
        Scheme::Ring,
        1,
    );
    let p = c.plan().unwrap();
    assert!(p.nodes.iter().all(|n| n.separated_at.is_none()));
    assert_eq!(p.warnings.len(), 3);
    assert!(
        p.warnings[0].contains("partner(s) b share its rack"),
        "{:?}",
        p.warnings
    );
    assert_eq!(p.partners_of("a").unwrap(), ["b"]);
}

#[test]
fn mirror_needs_a_multiple_of_group_size() {
    let mut c = Cluster::local(5, "j", 7000).unwrap();
    c.redundancy.scheme = Scheme::Mirror;
    let e = c.plan().unwrap_err().to_string();
    assert!(e.contains("not a multiple of 2"), "{e}");
    c.redundancy.copies = 4;
    let p = c.plan().unwrap();
    assert_eq!(p.partners_of("node1").unwrap().len(), 4);
}

#[test]
fn too_many_copies_is_an_error_at_plan_time() {
    let mut c = Cluster::local(3, "j", 7000).unwrap();
    c.redundancy.copies = 3;
    assert!(c
        .plan()
        .unwrap_err()
        .to_string()
        .contains("needs at least 4 nodes"));
}

#[test]
fn a_down_partner_is_replaced_by_the_next_eligible_node() {
    let c = Cluster::local(6, "j", 7000).unwrap();
    let p = c.plan().unwrap();
    let n1 = p.node("node1").unwrap();
    let first = n1.partners[0].clone();
    let all_up = p.effective_partners("node1", |_| true);
    assert_eq!(all_up, std::slice::from_ref(&first));
    let without = p.effective_partners("node1", |n| n != first);
    assert_eq!(without.len(), 1);
    assert_ne!(without[0], first);
    // The replacement is outside rack r1 too (node2 shares it).
    assert_ne!(without[0], "node2");
    assert_eq!(without[0], n1.replacements[0]);
    // Only same-rack nodes left: they are used rather than no copy at all.
    let only_node2 = p.effective_partners("node1", |n| n == "node2");
    assert_eq!(only_node2, ["node2"]);
    assert!(p.effective_partners("node1", |_| false).is_empty());
}

#[test]
fn plan_is_deterministic_for_the_same_map() {
    let c = Cluster::local(7, "j", 7000).unwrap();
    assert_eq!(c.plan().unwrap(), c.plan().unwrap());
    let json1 = serde_json::to_string(&c.plan().unwrap()).unwrap();
    let json2 =
        serde_json::to_string(&Cluster::from_toml_str(&c.to_toml(), "x").unwrap().plan().unwrap()).unwrap();
    assert_eq!(json1, json2);
}
