//! Property tests of node matching on random clusters.

use ckptfs_cluster::{Cluster, Node, Plan, Redundancy, Scheme};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn arb_cluster() -> impl Strategy<Value = Cluster> {
    (2usize..20, 0usize..4, any::<bool>(), 1usize..4)
        .prop_flat_map(|(n, levels, mirror, k)| {
            let k = k.min(n - 1);
            // Domain values per level per node: few values so domains collide often.
            let doms = proptest::collection::vec(proptest::collection::vec(0u8..4, levels), n);
            (Just((n, levels, mirror, k)), doms)
        })
        .prop_map(|((n, levels, mirror, k), doms)| {
            let names: Vec<String> = ["rack", "switch", "psu"][..levels]
                .iter()
                .map(|s| s.to_string())
                .collect();
            Cluster {
                job: "p".into(),
                secret_file: None,
                secret: None,
                keys_dir: None,
                encrypt: false,
                heartbeat_ms: 1000,
                heartbeat_misses: 3,
                redundancy: Redundancy {
                    scheme: if mirror { Scheme::Mirror } else { Scheme::Ring },
                    copies: k,
                    ..Redundancy::default()
                },
                domains: names.clone(),
                mem_size: None,
                nodes: (0..n)
                    .map(|i| Node {
                        id: format!("n{i}"),
                        addr: format!("10.0.0.{i}:7000"),
                        store: "s".into(),
                        domains: names
                            .iter()
                            .zip(&doms[i])
                            .map(|(l, v)| (l.clone(), format!("{l}{v}")))
                            .collect::<BTreeMap<_, _>>(),
                    })
                    .collect(),
                pool: None,
                source: None,
            }
        })
}

fn top(c: &Cluster, id: &str) -> Option<String> {
    let l = c.domains.first()?;
    c.node(id).ok()?.domain(l).map(str::to_string)
}

fn check(c: &Cluster, p: &Plan) {
    let n = c.nodes.len();
    let k = c.redundancy.copies;
    for np in &p.nodes {
        let set: BTreeSet<&String> = np.partners.iter().collect();
        assert_eq!(
            set.len(),
            k,
            "{}: {} distinct partners, want {k}",
            np.id,
            set.len()
        );
        assert!(!set.contains(&np.id), "{} is its own partner", np.id);
        // Replacements: every other node exactly once, with the partners.
        let all: BTreeSet<&String> = np.partners.iter().chain(&np.replacements).collect();
        assert_eq!(all.len(), n - 1);
        assert_eq!(np.partners.len() + np.replacements.len(), n - 1);
        for h in &np.holds_for {
            assert!(p.partners_of(h).unwrap().contains(&np.id));
        }
    }
    if let Some(level) = c.domains.first() {
        let size = |v: &str| c.nodes.iter().filter(|x| x.domain(level) == Some(v)).count();
        let groups = n / (k + 1);
        let mirror_avoidable = c.nodes.iter().all(|x| size(x.domain(level).unwrap()) <= groups);
        for np in &p.nodes {
            let mine = top(c, &np.id);
            let outside_total = c.nodes.iter().filter(|x| top(c, &x.id) != mine).count();
            let outside = np.partners.iter().filter(|x| top(c, x) != mine).count();
            match c.redundancy.scheme {
                Scheme::Ring => {
                    if outside_total >= k {
                        // Avoidable: every partner is outside the top-level domain.
                        assert_eq!(outside, k, "{}: {:?}", np.id, p);
                        assert_eq!(np.separated_at.as_deref(), Some(level.as_str()));
                    } else {
                        // Not avoidable: every node outside the domain is a partner.
                        assert_eq!(outside, outside_total, "{}: {:?}", np.id, p);
                    }
                }
                Scheme::Mirror => {
                    if mirror_avoidable {
                        assert_eq!(outside, k, "{}: avoidable but shares {level}", np.id);
                    }
                }
            }
            if outside < k && c.redundancy.scheme == Scheme::Ring {
                assert!(
                    p.warnings
                        .iter()
                        .any(|w| w.contains(&format!("node {:?}", np.id))),
                    "fallback of {} not reported",
                    np.id
                );
            }
        }
    }
    if c.redundancy.scheme == Scheme::Mirror {
        for np in &p.nodes {
            for q in &np.partners {
                assert!(
                    p.partners_of(q).unwrap().contains(&np.id),
                    "{} -> {q} not mutual",
                    np.id
                );
            }
        }
    }
    // The loss analysis agrees with its definition.
    for d in &p.domain_loss {
        let inside: BTreeSet<&str> = d.nodes.iter().map(String::as_str).collect();
        for id in &d.nodes {
            let all_in = p
                .partners_of(id)
                .unwrap()
                .iter()
                .all(|q| inside.contains(q.as_str()));
            assert_eq!(d.destroyed.contains(id), all_in, "{}={} {id}", d.level, d.value);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, .. ProptestConfig::default() })]

    #[test]
    fn random_clusters_get_k_distinct_partners_outside_the_top_domain_when_avoidable(c in arb_cluster()) {
        let n = c.nodes.len();
        let k = c.redundancy.copies;
        match c.plan() {
            Ok(p) => check(&c, &p),
            Err(e) => {
                prop_assert!(c.redundancy.scheme == Scheme::Mirror && n % (k + 1) != 0, "{e}");
            }
        }
    }

    #[test]
    fn the_plan_is_the_same_on_every_node(c in arb_cluster()) {
        let again = Cluster::from_toml_str(&c.to_toml(), "copy").unwrap();
        let (a, b) = (c.plan().ok(), again.plan().ok());
        prop_assert_eq!(a, b);
    }

    #[test]
    fn replacements_keep_k_live_distinct_partners(c in arb_cluster(), down in proptest::collection::vec(any::<bool>(), 20)) {
        if let Ok(p) = c.plan() {
            let is_up = |id: &str| {
                let i: usize = id[1..].parse().unwrap();
                !down[i]
            };
            for np in &p.nodes {
                let eff = p.effective_partners(&np.id, is_up);
                let up_others = c.nodes.iter().filter(|x| x.id != np.id && is_up(&x.id)).count();
                prop_assert_eq!(eff.len(), c.redundancy.copies.min(up_others));
                prop_assert!(eff.iter().all(|x| is_up(x) && *x != np.id));
                prop_assert_eq!(eff.iter().collect::<BTreeSet<_>>().len(), eff.len());
                if np.partners.iter().all(|x| is_up(x)) {
                    prop_assert_eq!(&eff, &np.partners);
                }
            }
        }
    }
}
