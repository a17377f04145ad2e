//! Set formation from the cluster's failure-domain map.
//!
//! The nodes are grouped into `g = ceil(n / size)` sets (fewer when a set would have
//! fewer members than the scheme needs), of sizes differing by at most one. The nodes
//! are sorted by their top-level domain (biggest domain first, ties by first appearance
//! in the map; map order inside a domain) and dealt to the sets in turn, so a set holds
//! two nodes of one domain only when that domain has more nodes than there are sets.
//! [`SetPlan::domain_loss`] says, for every domain of the map, whose parts its loss
//! would destroy: those of a set that loses more members than the scheme tolerates.
//! A pure function of the map: every node computes the same sets.

use crate::codec::Scheme;
use crate::ErasureError;
use ckptfs_cluster::Cluster;
use serde::Serialize;
use std::collections::BTreeMap;

/// Default set size (members per set).
pub const DEFAULT_SET_SIZE: usize = 8;

/// One redundancy set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedSet {
    /// Its name (`set0`, `set1`, ...): the instance of its level id `erasure:setN`.
    pub name: String,
    /// Members (node ids), set order.
    pub members: Vec<String>,
}

/// What the loss of one failure domain destroys under erasure sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetDomainLoss {
    /// Level (`rack`).
    pub level: String,
    /// Value (`r1`).
    pub value: String,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// The nodes whose parts would be lost (their set loses more than it tolerates).
    pub destroyed: Vec<String>,
}

/// The erasure sets of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetPlan {
    /// Scheme (`xor`, `rs:2`).
    pub scheme: String,
    /// Members a set may lose.
    pub tolerates: usize,
    /// The set size asked for.
    pub size: usize,
    /// The sets.
    pub sets: Vec<RedSet>,
    /// Sets that hold more nodes of one top-level domain than the scheme tolerates.
    pub warnings: Vec<String>,
    /// Per domain of the map, what its loss destroys (ideally nothing).
    pub domain_loss: Vec<SetDomainLoss>,
}

impl SetPlan {
    /// The set node `id` belongs to.
    pub fn set_of(&self, id: &str) -> Option<&RedSet> {
        self.sets.iter().find(|s| s.members.iter().any(|m| m == id))
    }

    /// Does every domain's loss leave every part rebuildable?
    pub fn survives_every_domain(&self) -> bool {
        self.domain_loss.iter().all(|d| d.destroyed.is_empty())
    }
}

/// The sets of a cluster file's `[redundancy] erasure` and `set_size` (None when the
/// cluster has no erasure sets).
pub fn cluster_sets(cluster: &Cluster) -> Option<Result<SetPlan, ErasureError>> {
    let e = cluster.redundancy.erasure?;
    Some(form_sets(cluster, e.into(), cluster.redundancy.set_size))
}

/// Form the sets of `cluster` for `scheme` with at most `size` members each.
pub fn form_sets(cluster: &Cluster, scheme: Scheme, size: usize) -> Result<SetPlan, ErasureError> {
    let n = cluster.nodes.len();
    let min = scheme.min_members();
    if size < min {
        return Err(ErasureError::Layout(format!(
            "{scheme} needs sets of at least {min} members, asked for {size}"
        )));
    }
    if n < min {
        return Err(ErasureError::Layout(format!(
            "{scheme} needs at least {min} nodes, the cluster has {n}"
        )));
    }
    let mut g = n.div_ceil(size);
    while g > 1 && n / g < min {
        g -= 1;
    }
    let top = cluster.domains.first();
    let dom = |i: usize| top.and_then(|l| cluster.nodes[i].domain(l)).unwrap_or("");
    let mut first: Vec<&str> = Vec::new();
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..n {
        let d = dom(i);
        if !first.contains(&d) {
            first.push(d);
        }
        *count.entry(d).or_default() += 1;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| {
        let d = dom(i);
        (std::cmp::Reverse(count[d]), first.iter().position(|x| *x == d), i)
    });
    let mut sets: Vec<Vec<usize>> = vec![Vec::new(); g];
    for (pos, &i) in order.iter().enumerate() {
        sets[pos % g].push(i);
    }
    let name = |i: usize| cluster.nodes[i].id.clone();
    let mut warnings = Vec::new();
    if let Some(l) = top {
        for (si, s) in sets.iter().enumerate() {
            let mut per: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            s.iter().for_each(|&i| per.entry(dom(i)).or_default().push(i));
            for (d, m) in per {
                if m.len() > scheme.parity() {
                    warnings.push(format!(
                        "set{si}: {} nodes of {l} {d:?} ({}) but {scheme} tolerates {}",
                        m.len(),
                        m.iter().map(|&i| name(i)).collect::<Vec<_>>().join(","),
                        scheme.parity()
                    ));
                }
            }
        }
    }
    let mut domain_loss = Vec::new();
    for l in &cluster.domains {
        let mut values: Vec<&str> = Vec::new();
        for node in &cluster.nodes {
            let v = node.domain(l).unwrap_or("");
            if !values.contains(&v) {
                values.push(v);
            }
        }
        for v in values {
            let inside = |i: usize| cluster.nodes[i].domain(l).unwrap_or("") == v;
            let mut destroyed = Vec::new();
            for s in &sets {
                let gone: Vec<usize> = s.iter().copied().filter(|&i| inside(i)).collect();
                if gone.len() > scheme.parity() {
                    destroyed.extend(gone.iter().map(|&i| name(i)));
                }
            }
            domain_loss.push(SetDomainLoss {
                level: l.clone(),
                value: v.to_string(),
                nodes: (0..n).filter(|&i| inside(i)).map(name).collect(),
                destroyed,
            });
        }
    }
    Ok(SetPlan {
        scheme: scheme.to_string(),
        tolerates: scheme.parity(),
        size,
        sets: sets
            .into_iter()
            .enumerate()
            .map(|(k, s)| RedSet {
                name: format!("set{k}"),
                members: s.into_iter().map(name).collect(),
            })
            .collect(),
        warnings,
        domain_loss,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_six_nodes_one_set_every_rack_loss_survives_with_rs2() {
        let c = Cluster::local(6, "ers", 46100).unwrap();
        let p = form_sets(&c, Scheme::Rs(2), 8).unwrap();
        assert_eq!(p.sets.len(), 1);
        assert_eq!(p.sets[0].members.len(), 6);
        // Cluster::local puts two nodes per rack: RS k=2 survives any rack.
        assert!(p.survives_every_domain(), "{p:?}");
        let x = form_sets(&c, Scheme::Xor, 8).unwrap();
        assert!(!x.survives_every_domain());
        assert!(!x.warnings.is_empty());
    }

    #[test]
    fn the_cluster_file_key_round_trips_and_forms_the_sets() {
        let mut c = Cluster::local(6, "ers", 46100).unwrap();
        assert!(cluster_sets(&c).is_none());
        c.redundancy.erasure = Some("rs:2".parse().unwrap());
        c.redundancy.set_size = 3;
        let text = c.to_toml();
        assert!(
            text.contains("erasure = \"rs:2\"") && text.contains("set_size = 3"),
            "{text}"
        );
        let back = Cluster::from_toml_str(&text, "test").unwrap();
        assert_eq!(back.redundancy, c.redundancy);
        let p = cluster_sets(&back).unwrap().unwrap();
        assert_eq!(p.sets.len(), 2);
        assert!("rs:0".parse::<ckptfs_cluster::Erasure>().is_err());
        let bad = text.replace("erasure = \"rs:2\"", "erasure = \"rs:9\"");
        assert!(Cluster::from_toml_str(&bad, "test")
            .and_then(|c| c.validate())
            .is_err());
    }

    #[test]
    fn sets_are_balanced_and_spread_over_domains() {
        let c = Cluster::local(20, "ers", 46100).unwrap();
        let p = form_sets(&c, Scheme::Xor, 8).unwrap();
        assert_eq!(p.sets.len(), 3);
        let sizes: Vec<usize> = p.sets.iter().map(|s| s.members.len()).collect();
        assert!(sizes.iter().all(|&s| s == 6 || s == 7), "{sizes:?}");
        assert!(p.survives_every_domain(), "{p:?}");
        let mut all: Vec<String> = p.sets.iter().flat_map(|s| s.members.clone()).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 20);
        assert!(form_sets(&Cluster::local(2, "ers", 46100).unwrap(), Scheme::Rs(2), 8).is_err());
        assert_eq!(
            form_sets(&Cluster::local(3, "ers", 46100).unwrap(), Scheme::Rs(2), 2).ok(),
            None
        );
    }
}
