//! Erasure sets over real node stores (shared-memory segments, `StoreLevel`), several in
//! one process: parity lands under /.ckptfs/erasure in each member's store; lost
//! members are destroyed stores replaced by new empty ones of the same name.

use ckptfs_erasure::{ErasureSet, Scheme, NAMESPACE};
use ckptfs_level::{Level, Part, SetProtection, SetState};
use ckptfs_store::level::StoreLevel;
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::sync::Arc;

const CS: u64 = 64 << 10;

struct Node {
    name: String,
    store: Store,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
    }
}

fn node(tag: &str, i: usize) -> Node {
    let name = format!("ers-{tag}-{}-node{}", std::process::id(), i + 1);
    let _ = Store::destroy(&name);
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(32 << 20);
    o.chunk_size = Some(CS);
    Node {
        store: Store::create(&o).expect("create store"),
        name,
    }
}

fn bytes(seed: u64, n: usize) -> Vec<u8> {
    ckptfs_testsupport::seeded_bytes(seed, n)
}

fn write(s: &Store, path: &str, b: &[u8]) {
    let _ = s.mkdir("/ckpt", 0o755);
    let mut f = s.open(path, OpenFlags::CREATE, 0o640).unwrap();
    f.write_all(b).unwrap();
    f.close().unwrap();
}

fn read(s: &Store, path: &str) -> Vec<u8> {
    let mut f = s.open(path, OpenFlags::READ, 0).unwrap();
    let mut v = vec![0u8; f.size() as usize];
    assert_eq!(f.read_full(&mut v).unwrap(), v.len());
    v
}

#[test]
fn rs2_over_six_node_stores_two_lost_rebuilt_byte_identical() {
    let sizes: [&[usize]; 6] = [
        &[300_000, 17],
        &[1_000_000],
        &[],
        &[65_536, 65_537],
        &[1],
        &[250_000],
    ];
    let mut nodes: Vec<Node> = (0..6).map(|i| node("rs2", i)).collect();
    let mut want = Vec::new();
    for (i, sz) in sizes.iter().enumerate() {
        for (j, &n) in sz.iter().enumerate() {
            let p = format!("/ckpt/r{i}.{j}");
            let b = bytes((i * 10 + j) as u64, n);
            write(&nodes[i].store, &p, &b);
            want.push((i, p, b));
        }
    }
    let levels: Vec<Arc<dyn Level>> = nodes
        .iter()
        .map(|n| Arc::new(StoreLevel::new(&n.store).unwrap()) as Arc<dyn Level>)
        .collect();
    let members = (0..6)
        .map(|i| (format!("node{}", i + 1), levels[i].clone()))
        .collect();
    let set = ErasureSet::new("set0", Scheme::Rs(2), members).unwrap();
    for (i, l) in levels.iter().enumerate() {
        let part = Part {
            dataset: "step-100".into(),
            member: format!("node{}", i + 1),
            files: l.list("/ckpt").unwrap(),
        };
        set.protect(&part).unwrap();
    }
    assert_eq!(set.state("step-100").unwrap(), SetState::Protected);
    // Each member holds 2 parity shards of ~1/4 of the largest part (1 MB).
    let parity: u64 = levels[0]
        .list(NAMESPACE)
        .unwrap()
        .iter()
        .filter(|s| s.path.contains("/p."))
        .map(|s| s.version.size)
        .sum();
    assert!(parity <= 2 * (1_000_000 / 4 + 64), "{parity}");
    // node2 and node5 (racks r1 and r3 of Cluster::local) are lost at once.
    for i in [1usize, 4] {
        // The old node's store is destroyed (Drop); a new empty one replaces it.
        drop(std::mem::replace(&mut nodes[i], node("rs2-new", i)));
        let l: Arc<dyn Level> = Arc::new(StoreLevel::new(&nodes[i].store).unwrap());
        set.replace(&format!("node{}", i + 1), l).unwrap();
    }
    assert_eq!(
        set.state("step-100").unwrap(),
        SetState::Degraded(vec!["node2".into(), "node5".into()])
    );
    let r = set.rebuild("step-100").unwrap();
    assert_eq!(r.members.len(), 2);
    for (i, p, b) in &want {
        assert_eq!(&read(&nodes[*i].store, p), b, "node{} {p}", i + 1);
    }
    assert_eq!(set.state("step-100").unwrap(), SetState::Protected);
    assert!(set.scrub("step-100").unwrap().is_empty());
}
