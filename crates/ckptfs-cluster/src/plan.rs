//! Node matching (REMEM section III-C): who keeps the partner copies of whose files.
//!
//! * **Ring**: the nodes are put in a ring that interleaves the top-level domains
//!   (one node of each domain in turn, biggest domain first, ties by first appearance
//!   in the map). Node `p` sends its copies to the first `k` nodes after it in the ring
//!   that are outside its top-level domain. When fewer than `k` nodes are outside it,
//!   all of them are taken, then for each lower level (in order) that no partner yet
//!   covers, the next node outside the node's domain at that level, then the best
//!   separated remaining nodes: as far as `k` allows, the node's checkpoints survive
//!   the loss of any one domain at every level. Each such node gets a line in
//!   [`Plan::warnings`].
//! * **Mirror**: the nodes form groups of `k + 1` that back each other up (mutual
//!   pairs for k = 1). The nodes are sorted by domain (biggest first) and dealt to the
//!   `n / (k + 1)` groups in turn, so no group holds two nodes of one domain when no
//!   domain has more nodes than there are groups; otherwise the first level where that
//!   holds is used (with a warning per node), else only "distinct nodes". `n` must be a
//!   multiple of `k + 1`.
//!
//! A node's checkpoints are lost with a domain only when the node and all its partners
//! are inside it; [`Plan::domain_loss`] lists, for every domain of the map, whose
//! checkpoints that would be (ideally nobody's).
//!
//! Everything is a pure function of the map's order and contents: every node computes
//! the same plan from the same file.

use crate::file::{Cluster, Scheme};
use crate::{ClusterError, Result};
use serde::Serialize;
use std::collections::BTreeMap;

/// The plan of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodePlan {
    /// Node id.
    pub id: String,
    /// The most important level at which every partner is outside this node's domain
    /// (None when no level separates all of them; see [`Plan::domain_loss`] for what
    /// that costs).
    pub separated_at: Option<String>,
    /// The `k` partners that keep copies of this node's files, in order.
    pub partners: Vec<String>,
    /// Who takes over when a partner is down: the other nodes, those outside this
    /// node's domain at a more important level first, ring order among equals.
    pub replacements: Vec<String>,
    /// The nodes whose files this node keeps copies of (it is their partner).
    pub holds_for: Vec<String>,
}

/// What the loss of one failure domain destroys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DomainLoss {
    /// Level, e.g. `rack`.
    pub level: String,
    /// Value, e.g. `r1`.
    pub value: String,
    /// The nodes in this domain.
    pub nodes: Vec<String>,
    /// Nodes whose checkpoints would be lost with it: the node and all its partners
    /// are inside the domain (ideally none).
    pub destroyed: Vec<String>,
}

/// The partner plan of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Mirror or ring.
    pub scheme: Scheme,
    /// Partner copies per file.
    pub copies: usize,
    /// Domain levels, most important first.
    pub levels: Vec<String>,
    /// One entry per node, in map order.
    pub nodes: Vec<NodePlan>,
    /// Fall-backs from the top level, one line each (empty when none was needed).
    pub warnings: Vec<String>,
    /// For every (level, value) of the map, what its loss would destroy.
    pub domain_loss: Vec<DomainLoss>,
}

impl Plan {
    /// The plan of node `id`.
    pub fn node(&self, id: &str) -> Option<&NodePlan> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The partners of node `id`.
    pub fn partners_of(&self, id: &str) -> Option<&[String]> {
        self.node(id).map(|n| n.partners.as_slice())
    }

    /// The nodes whose copies node `id` keeps.
    pub fn holds_for(&self, id: &str) -> Option<&[String]> {
        self.node(id).map(|n| n.holds_for.as_slice())
    }

    /// The partners node `id` should send to now: its partners that `is_up`, topped
    /// up from its replacements that `is_up` until there are `copies` (fewer if not
    /// enough nodes are up).
    pub fn effective_partners(&self, id: &str, is_up: impl Fn(&str) -> bool) -> Vec<String> {
        let Some(n) = self.node(id) else {
            return Vec::new();
        };
        n.partners
            .iter()
            .chain(n.replacements.iter())
            .filter(|p| is_up(p))
            .take(self.copies)
            .cloned()
            .collect()
    }

    /// Is there no failure domain whose loss would destroy a checkpoint?
    pub fn survives_every_domain(&self) -> bool {
        self.domain_loss.iter().all(|d| d.destroyed.is_empty())
    }
}

impl Cluster {
    /// Computes the partner plan (deterministic). Errors when some node cannot get
    /// `copies` distinct partners, or mirror's node count is not a multiple of
    /// `copies + 1`.
    pub fn plan(&self) -> Result<Plan> {
        self.validate()?;
        let n = self.nodes.len();
        let k = self.redundancy.copies;
        if k >= n {
            return Err(ClusterError::Plan(format!(
                "copies = {k} needs at least {} nodes (the map has {n})",
                k + 1
            )));
        }
        // dom[l][i]: index of node i's value at level l.
        let dom: Vec<Vec<usize>> = self
            .domains
            .iter()
            .map(|l| {
                let mut values: Vec<&str> = Vec::new();
                self.nodes
                    .iter()
                    .map(|node| {
                        let v = node.domain(l).unwrap_or("");
                        match values.iter().position(|x| *x == v) {
                            Some(p) => p,
                            None => {
                                values.push(v);
                                values.len() - 1
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        let order = ring_order(&dom, n);
        let mut warnings = Vec::new();
        let (partners, levels): (Vec<Vec<usize>>, Vec<Option<usize>>) = match self.redundancy.scheme {
            Scheme::Ring => {
                let mut partners = vec![Vec::new(); n];
                let mut levels = vec![None; n];
                for (pos, &i) in order.iter().enumerate() {
                    partners[i] = ring_partners(&dom, &order, pos, k);
                    levels[i] = (0..dom.len()).find(|&l| partners[i].iter().all(|&j| dom[l][j] != dom[l][i]));
                }
                (partners, levels)
            }
            Scheme::Mirror => {
                if !n.is_multiple_of(k + 1) {
                    return Err(ClusterError::Plan(format!(
                        "mirror with copies = {k} makes groups of {} nodes; the map has {n} nodes, not a multiple of {}",
                        k + 1,
                        k + 1
                    )));
                }
                let groups = n / (k + 1);
                let lvl = (0..dom.len()).find(|&l| {
                    let mut size = BTreeMap::new();
                    dom[l].iter().for_each(|&d| *size.entry(d).or_insert(0usize) += 1);
                    size.values().all(|&s| s <= groups)
                });
                let mut sorted: Vec<usize> = (0..n).collect();
                if let Some(l) = lvl {
                    let mut size = BTreeMap::new();
                    dom[l].iter().for_each(|&d| *size.entry(d).or_insert(0usize) += 1);
                    sorted.sort_by_key(|&i| (std::cmp::Reverse(size[&dom[l][i]]), dom[l][i], i));
                }
                let mut members = vec![Vec::new(); groups];
                for (pos, &i) in sorted.iter().enumerate() {
                    members[pos % groups].push(i);
                }
                let mut partners = vec![Vec::new(); n];
                for g in &members {
                    for &i in g {
                        partners[i] = g.iter().copied().filter(|&j| j != i).collect();
                    }
                }
                (partners, vec![lvl; n])
            }
        };
        for (node, p) in self.nodes.iter().zip(&partners) {
            if p.len() < k {
                return Err(ClusterError::Plan(format!(
                    "node {:?} gets only {} of {k} partners",
                    node.id,
                    p.len()
                )));
            }
        }
        // Warnings: one line per node whose partners are not all outside its top-level
        // domain.
        if let Some(top) = self.domains.first() {
            for (i, node) in self.nodes.iter().enumerate() {
                let inside: Vec<&str> = partners[i]
                    .iter()
                    .filter(|&&j| dom[0][j] == dom[0][i])
                    .map(|&j| self.nodes[j].id.as_str())
                    .collect();
                if inside.is_empty() {
                    continue;
                }
                let mine = node.domain(top).unwrap_or("");
                let why = match self.redundancy.scheme {
                    Scheme::Ring => {
                        let outside = (0..n).filter(|&j| dom[0][j] != dom[0][i]).count();
                        format!("only {outside} node(s) are outside its {top} {mine:?} for {k} copies")
                    }
                    Scheme::Mirror => format!(
                        "some {top} holds more nodes than the {} mirror groups",
                        n / (k + 1)
                    ),
                };
                let got = match levels[i] {
                    Some(l) => format!(
                        "partners are outside its {} {:?} only",
                        self.domains[l],
                        node.domain(&self.domains[l]).unwrap_or("")
                    ),
                    None => format!("partner(s) {} share its {top}", inside.join(",")),
                };
                warnings.push(format!("node {:?}: {why}; {got}", node.id));
            }
        }
        let pos_of: Vec<usize> = {
            let mut p = vec![0; n];
            order.iter().enumerate().for_each(|(pos, &i)| p[i] = pos);
            p
        };
        let mut plans: Vec<NodePlan> = (0..n)
            .map(|i| {
                // The other nodes in ring order, the best separated first.
                let mut first: Vec<usize> = walk(&order, pos_of[i])
                    .filter(|j| !partners[i].contains(j))
                    .collect();
                first.sort_by_key(|&j| first_difference(&dom, i, j));
                NodePlan {
                    id: self.nodes[i].id.clone(),
                    separated_at: levels[i].map(|l| self.domains[l].clone()),
                    partners: partners[i].iter().map(|&j| self.nodes[j].id.clone()).collect(),
                    replacements: first.iter().map(|&j| self.nodes[j].id.clone()).collect(),
                    holds_for: Vec::new(),
                }
            })
            .collect();
        for (node, p) in self.nodes.iter().zip(&partners) {
            for &j in p {
                plans[j].holds_for.push(node.id.clone());
            }
        }
        let mut domain_loss = Vec::new();
        for (l, level) in self.domains.iter().enumerate() {
            let mut values: Vec<usize> = dom[l].clone();
            values.sort_unstable();
            values.dedup();
            for v in values {
                let inside: Vec<usize> = (0..n).filter(|&i| dom[l][i] == v).collect();
                let destroyed = inside
                    .iter()
                    .filter(|&&i| partners[i].iter().all(|&j| dom[l][j] == v))
                    .map(|&i| self.nodes[i].id.clone())
                    .collect();
                domain_loss.push(DomainLoss {
                    level: level.clone(),
                    value: self.nodes[inside[0]].domain(level).unwrap_or("").to_string(),
                    nodes: inside.iter().map(|&i| self.nodes[i].id.clone()).collect(),
                    destroyed,
                });
            }
        }
        Ok(Plan {
            scheme: self.redundancy.scheme,
            copies: k,
            levels: self.domains.clone(),
            nodes: plans,
            warnings,
            domain_loss,
        })
    }
}

/// The `k` partners of the node at ring position `pos`: the nodes outside its top-level
/// domain first (ring order); when there are fewer than `k` of them, for each lower
/// level not yet covered, the next node outside its domain at that level (so its
/// checkpoints survive the loss of that domain too); then the best separated others.
fn ring_partners(dom: &[Vec<usize>], order: &[usize], pos: usize, k: usize) -> Vec<usize> {
    let i = order[pos];
    let mut cands: Vec<usize> = walk(order, pos).collect();
    // Stable: ring order among equally separated nodes.
    cands.sort_by_key(|&j| first_difference(dom, i, j));
    let mut chosen: Vec<usize> = cands
        .iter()
        .copied()
        .filter(|&j| first_difference(dom, i, j) == 0)
        .take(k)
        .collect();
    for level in dom.iter().skip(1) {
        if chosen.len() == k {
            break;
        }
        if chosen.iter().any(|&j| level[j] != level[i]) {
            continue;
        }
        if let Some(&j) = cands
            .iter()
            .find(|&&j| !chosen.contains(&j) && level[j] != level[i])
        {
            chosen.push(j);
        }
    }
    for &j in &cands {
        if chosen.len() == k {
            break;
        }
        if !chosen.contains(&j) {
            chosen.push(j);
        }
    }
    chosen
}

/// The most important level at which nodes `i` and `j` differ (levels.len() if none).
fn first_difference(dom: &[Vec<usize>], i: usize, j: usize) -> usize {
    (0..dom.len())
        .find(|&l| dom[l][i] != dom[l][j])
        .unwrap_or(dom.len())
}

/// The nodes after position `pos` of the ring, once round, without the node itself.
fn walk(order: &[usize], pos: usize) -> impl Iterator<Item = usize> + '_ {
    (1..order.len()).map(move |d| order[(pos + d) % order.len()])
}

/// The ring: one node of each top-level domain in turn, biggest domain first (ties by
/// first appearance), nodes of a domain in map order. Without levels: map order.
fn ring_order(dom: &[Vec<usize>], n: usize) -> Vec<usize> {
    let Some(top) = dom.first() else {
        return (0..n).collect();
    };
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, &d) in top.iter().enumerate().take(n) {
        if groups.len() <= d {
            groups.resize(d + 1, Vec::new());
        }
        groups[d].push(i);
    }
    // Stable sort keeps first appearance among equal sizes.
    groups.sort_by_key(|g| std::cmp::Reverse(g.len()));
    let mut order = Vec::with_capacity(n);
    for round in 0.. {
        let before = order.len();
        order.extend(groups.iter().filter_map(|g| g.get(round).copied()));
        if order.len() == before {
            break;
        }
    }
    order
}
