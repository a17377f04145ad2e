//! `cluster init --previous FILE`: a job restarted in a new allocation (a requeue, or a
//! new job continuing an old one) keeps the node ids of the allocation its checkpoints
//! were written in. A host it gets again keeps its id (its memory holds that node's
//! files); a host that replaces a lost one takes the lost node's id, so that the
//! datasets' parts, the partner copies (kept under the writer's node id) and the ranks
//! of that node are found under the same name; other new hosts keep their own names.
//! The nodes are listed in the previous file's order, so that rank blocks placed in
//! node order land where they were (the job script places ranks by the node map).

use ckptfs_cluster::Node;

/// One node of the new cluster file: the host it runs on and its node id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The host (the allocation's node name).
    pub host: String,
    /// The node id in the cluster file.
    pub id: String,
}

/// Give `nodes` (ids = the allocation's host names, in allocation order) the ids of
/// `previous` (the ids of the old cluster file, in its order), as the module says; the
/// nodes are reordered: the previous file's order first, then new hosts. Returns where
/// each node runs, in the new order.
pub fn remap(previous: &[String], nodes: &mut [Node]) -> Vec<Placed> {
    let hosts: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
    let lost: Vec<&String> = previous.iter().filter(|p| !hosts.contains(p)).collect();
    let mut fresh = hosts.iter().filter(|h| !previous.contains(h));
    let mut placed: Vec<(usize, Placed)> = Vec::new();
    let mut taken = std::collections::BTreeMap::new();
    for l in &lost {
        if let Some(h) = fresh.next() {
            taken.insert(h.clone(), (*l).clone());
        }
    }
    for n in nodes.iter_mut() {
        let host = n.id.clone();
        if let Some(id) = taken.get(&host) {
            n.id = id.clone();
        }
        let rank = previous
            .iter()
            .position(|p| *p == n.id)
            .unwrap_or(previous.len() + hosts.iter().position(|h| *h == host).unwrap_or(0));
        placed.push((
            rank,
            Placed {
                host,
                id: n.id.clone(),
            },
        ));
    }
    nodes.sort_by_key(|n| {
        placed
            .iter()
            .find(|(_, p)| p.id == n.id)
            .map_or(usize::MAX, |(r, _)| *r)
    });
    placed.sort_by_key(|(r, _)| *r);
    placed.into_iter().map(|(_, p)| p).collect()
}

/// The node map file: one `HOST NODE_ID` line per node, in cluster file order.
pub fn render(placed: &[Placed]) -> String {
    placed.iter().map(|p| format!("{} {}\n", p.host, p.id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(hosts: &[&str]) -> Vec<Node> {
        hosts
            .iter()
            .map(|h| Node {
                id: h.to_string(),
                addr: format!("{h}:7000"),
                store: "job".into(),
                domains: [("switch".to_string(), format!("s-{h}"))].into(),
            })
            .collect()
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_same_hosts_keep_their_ids_and_order() {
        let mut n = nodes(&["c1", "c2", "c3", "c4"]);
        let p = remap(&ids(&["c1", "c2", "c3", "c4"]), &mut n);
        assert_eq!(render(&p), "c1 c1\nc2 c2\nc3 c3\nc4 c4\n");
        assert_eq!(
            n.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
            ["c1", "c2", "c3", "c4"]
        );
    }

    #[test]
    fn a_replacement_host_takes_the_lost_nodes_id_and_place() {
        // c3 lost; the new allocation is c1, c2, c4, c5.
        let mut n = nodes(&["c1", "c2", "c4", "c5"]);
        let p = remap(&ids(&["c1", "c2", "c3", "c4"]), &mut n);
        assert_eq!(render(&p), "c1 c1\nc2 c2\nc5 c3\nc4 c4\n");
        assert_eq!(
            n.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
            ["c1", "c2", "c3", "c4"]
        );
        // The host's own address and failure domain stay with it.
        assert_eq!(n[2].addr, "c5:7000");
        assert_eq!(n[2].domains["switch"], "s-c5");
    }

    #[test]
    fn extra_hosts_keep_their_names_after_the_previous_nodes() {
        let mut n = nodes(&["a", "x", "b", "y"]);
        let p = remap(&ids(&["a", "b", "c"]), &mut n);
        assert_eq!(render(&p), "a a\nb b\nx c\ny y\n");
        // No previous file entry in common: every host replaces one in order.
        let mut n = nodes(&["p", "q"]);
        let p = remap(&ids(&["a", "b", "c"]), &mut n);
        assert_eq!(render(&p), "p a\nq b\n");
    }
}
