//! Slurm's `topology.conf` (topology/tree) as ckptfs failure domains: each node's leaf
//! switch (the `SwitchName` whose `Nodes=` lists it) becomes its value of the level
//! `switch` (docs/slurm.md). Switches that list only other switches (`Switches=`) are
//! ignored: the leaf switch is the unit whose loss takes its nodes together.
//!
//! ```text
//! SwitchName=s1 Nodes=c[1-2]
//! SwitchName=s2 Nodes=c[3-4]
//! SwitchName=top Switches=s[1-2]
//! ```

use anyhow::{bail, Context, Result};
use ckptfs_cluster::Topology;
use std::collections::BTreeMap;
use std::path::Path;

/// The failure-domain level name given to Slurm's leaf switches.
pub const LEVEL: &str = "switch";

/// Parse the text of a topology.conf: host -> leaf switch.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut name = None;
        let mut nodes = None;
        for kv in line.split_whitespace() {
            let Some((k, v)) = kv.split_once('=') else {
                bail!("topology.conf line {}: {kv:?} is not KEY=VALUE", no + 1);
            };
            match k.to_ascii_lowercase().as_str() {
                "switchname" => name = Some(v.to_string()),
                "nodes" => nodes = Some(v.to_string()),
                _ => {}
            }
        }
        let Some(name) = name else {
            bail!("topology.conf line {}: no SwitchName", no + 1);
        };
        if let Some(list) = nodes {
            let hosts = ckptfs_cluster::hostlist::expand(&list)
                .with_context(|| format!("topology.conf line {}: Nodes={list}", no + 1))?;
            for h in hosts {
                if let Some(prev) = out.insert(h.clone(), name.clone()) {
                    bail!(
                        "topology.conf line {}: node {h} under switches {prev} and {name}",
                        no + 1
                    );
                }
            }
        }
    }
    Ok(out)
}

/// The ckptfs topology of `hosts` from the topology.conf at `path`; a host the file does
/// not list is a domain of its own (`switch = "none-HOST"`).
pub fn load(path: &Path, hosts: &[String]) -> Result<Topology> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let map = parse(&text).with_context(|| path.display().to_string())?;
    let nodes = hosts
        .iter()
        .map(|h| {
            let sw = map.get(h).cloned().unwrap_or_else(|| format!("none-{h}"));
            (h.clone(), BTreeMap::from([(LEVEL.to_string(), sw)]))
        })
        .collect();
    Ok(Topology {
        levels: vec![LEVEL.to_string()],
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_switches_become_domains_and_unlisted_hosts_their_own() {
        let m = parse("# tree\nSwitchName=s1 Nodes=c[1-2]\nSwitchName=s2 Nodes=c3,c4 LinkSpeed=1\nSwitchName=top Switches=s[1-2]\n").unwrap();
        assert_eq!(m.get("c1").map(String::as_str), Some("s1"));
        assert_eq!(m.get("c4").map(String::as_str), Some("s2"));
        assert_eq!(m.len(), 4);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topology.conf");
        std::fs::write(&p, "SwitchName=s1 Nodes=c[1-2]\n").unwrap();
        let t = load(&p, &["c1".into(), "c9".into()]).unwrap();
        assert_eq!(t.levels, vec!["switch"]);
        assert_eq!(t.nodes["c1"]["switch"], "s1");
        assert_eq!(t.nodes["c9"]["switch"], "none-c9");
    }

    #[test]
    fn a_node_under_two_switches_or_a_line_without_name_is_refused() {
        assert!(parse("SwitchName=a Nodes=c1\nSwitchName=b Nodes=c[1-2]\n").is_err());
        assert!(parse("Nodes=c1\n").is_err());
        assert!(parse("SwitchName=a junk\n").is_err());
    }
}
