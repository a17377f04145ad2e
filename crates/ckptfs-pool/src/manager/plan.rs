//! Striping plans and replica placement.
//!
//! A plan sorts the benefactors alive and trusted by free memory and takes the top
//! `stripe_width` of them for each of `replicas` groups: every chunk goes to one member
//! of each group, so its copies are on distinct benefactors. Groups are formed by
//! failure domain (the map's first domain level; a node without one is its own
//! domain): each domain goes whole to one group, the domains with the most free memory
//! first, so that the copies of a chunk are in distinct domains wherever there are at
//! least as many domains as replicas. With fewer benefactors than replicas, the plan
//! has fewer groups (the manager re-replicates later, when benefactors are back).

use super::{refused, Manager, OpenWrite};
use crate::msg::{Peer, Reply};
use crate::Result;
use std::collections::BTreeMap;

/// A candidate benefactor: node id, domain, free bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cand {
    pub node: String,
    pub domain: String,
    pub free: u64,
}

/// Split `cands` into at most `groups` disjoint groups of at most `width` members, each
/// domain in one group where the domains allow it (see the module documentation).
pub(crate) fn place(mut cands: Vec<Cand>, width: usize, groups: usize) -> Vec<Vec<Cand>> {
    let width = width.max(1);
    let groups = groups.clamp(1, cands.len().max(1));
    cands.sort_by(|a, b| b.free.cmp(&a.free).then_with(|| a.node.cmp(&b.node)));
    // Domains in the order of their best member.
    let mut order: Vec<String> = Vec::new();
    let mut by_domain: BTreeMap<String, Vec<Cand>> = BTreeMap::new();
    for c in cands {
        if !by_domain.contains_key(&c.domain) {
            order.push(c.domain.clone());
        }
        by_domain.entry(c.domain.clone()).or_default().push(c);
    }
    let mut out: Vec<Vec<Cand>> = vec![Vec::new(); groups];
    if order.len() >= groups {
        // Whole domains to groups: the next domain goes to the group with the fewest
        // members (ties: the lowest group); members past the width are left out (a
        // narrower stripe rather than two copies in one domain).
        for d in order {
            let g = (0..groups)
                .min_by_key(|g| (out[*g].len() >= width, out[*g].len(), *g))
                .expect("groups >= 1");
            for c in by_domain.remove(&d).unwrap_or_default() {
                if out[g].len() < width {
                    out[g].push(c);
                }
            }
        }
    } else {
        // Fewer domains than replicas: copies share domains (distinct nodes still);
        // members go round-robin by free memory.
        let mut all: Vec<Cand> = order
            .iter()
            .flat_map(|d| by_domain.remove(d).unwrap_or_default())
            .collect();
        all.sort_by(|a, b| b.free.cmp(&a.free).then_with(|| a.node.cmp(&b.node)));
        for c in all {
            if let Some(g) = (0..groups)
                .filter(|g| out[*g].len() < width)
                .min_by_key(|g| (out[*g].len(), *g))
            {
                out[g].push(c);
            }
        }
    }
    out.retain(|g| !g.is_empty());
    out
}

impl Manager {
    /// The failure domain of `node` (the map's first domain level; else the node).
    pub(super) fn domain_of(&self, node: &str) -> String {
        self.net
            .cluster
            .domains
            .first()
            .and_then(|l| self.net.cluster.node(node).ok()?.domain(l).map(str::to_string))
            .unwrap_or_else(|| node.to_string())
    }

    pub(super) fn plan(
        &self,
        conn: u64,
        extend: Option<u64>,
        path: &str,
        exclude: &[String],
    ) -> Result<Reply> {
        let mut st = self.st.lock().unwrap();
        let cands: Vec<Cand> = st
            .bens
            .iter()
            .filter(|(n, b)| b.last.elapsed() < self.death() && b.suspect.is_none() && !exclude.contains(n))
            .map(|(n, b)| Cand {
                node: n.clone(),
                domain: self.domain_of(n),
                free: b.mem.saturating_sub(b.used),
            })
            .collect();
        let groups = place(
            cands,
            self.net.pool.stripe_width as usize,
            self.net.pool.replicas as usize,
        );
        let mut stripe: Vec<Peer> = Vec::new();
        for (g, members) in groups.iter().enumerate() {
            for c in members {
                stripe.push(Peer {
                    node: c.node.clone(),
                    addr: st.bens[&c.node].addr.clone(),
                    group: g as u32,
                });
            }
        }
        if stripe.is_empty() {
            return Ok(refused(libc::ENOSPC, "no benefactor alive with memory to lend"));
        }
        let write_id = match extend {
            Some(w) => {
                if st.open.get(&w).is_none_or(|o| o.conn != conn) {
                    return Ok(refused(libc::EBADF, "no such open write"));
                }
                w
            }
            None => {
                let w = super::rand_u64();
                st.open.insert(
                    w,
                    OpenWrite {
                        conn,
                        path: path.to_string(),
                    },
                );
                w
            }
        };
        drop(st);
        let prev = if extend.is_none() {
            self.file(path)?
                .and_then(|f| f.versions.last().cloned())
                .map(|v| {
                    v.chunks
                        .into_iter()
                        .map(|mut c| {
                            c.sent = false;
                            c
                        })
                        .collect()
                })
                .unwrap_or_default()
        } else {
            vec![]
        };
        Ok(Reply::Opened {
            write_id,
            chunk_size: self.net.pool.chunk_size as u64,
            stripe,
            prev,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(node: &str, domain: &str, free: u64) -> Cand {
        Cand {
            node: node.into(),
            domain: domain.into(),
            free,
        }
    }

    fn nodes(g: &[Vec<Cand>]) -> Vec<Vec<&str>> {
        g.iter()
            .map(|m| m.iter().map(|c| c.node.as_str()).collect())
            .collect()
    }

    #[test]
    fn one_replica_takes_the_top_width_by_free_memory() {
        let g = place(vec![c("a", "a", 1), c("b", "b", 3), c("c", "c", 2)], 2, 1);
        assert_eq!(nodes(&g), vec![vec!["b", "c"]]);
    }

    #[test]
    fn replicas_go_to_distinct_domains_where_possible() {
        let cands = vec![
            c("n2", "r1", 10),
            c("n3", "r1", 9),
            c("n4", "r2", 8),
            c("n5", "r2", 7),
        ];
        let g = place(cands.clone(), 2, 2);
        assert_eq!(nodes(&g), vec![vec!["n2", "n3"], vec!["n4", "n5"]]);
        // Width 1: still one member of each rack.
        let g = place(cands.clone(), 1, 2);
        assert_eq!(nodes(&g), vec![vec!["n2"], vec!["n4"]]);
        // One domain only: distinct nodes still.
        let one: Vec<Cand> = cands.iter().map(|x| c(&x.node, "r1", x.free)).collect();
        let g = place(one, 1, 2);
        assert_eq!(nodes(&g), vec![vec!["n2"], vec!["n3"]]);
    }

    #[test]
    fn fewer_benefactors_than_replicas_gives_fewer_groups() {
        let g = place(vec![c("n2", "n2", 1)], 2, 3);
        assert_eq!(nodes(&g), vec![vec!["n2"]]);
        assert!(place(vec![], 2, 2).is_empty());
    }

    #[test]
    fn groups_are_disjoint_and_bounded() {
        for n in 1..9usize {
            for w in 1..4 {
                for r in 1..4 {
                    let cands: Vec<Cand> = (0..n)
                        .map(|i| c(&format!("n{i}"), &format!("d{}", i % 3), (i * 7 % 5) as u64))
                        .collect();
                    let g = place(cands, w, r);
                    let mut all: Vec<&str> = g.iter().flatten().map(|c| c.node.as_str()).collect();
                    let total = all.len();
                    all.sort();
                    all.dedup();
                    assert_eq!(all.len(), total);
                    assert_eq!(g.len(), r.min(n));
                    assert!(g.iter().all(|m| !m.is_empty() && m.len() <= w));
                }
            }
        }
    }
}
