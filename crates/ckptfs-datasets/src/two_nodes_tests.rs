//! Two nodes in one process (each its own store; the other node asked directly, not
//! through a daemon): the orders of the questions a `begin` asks across nodes.

use crate::completion::{Agreement, Completion, JobNodes, NodeRecords, SingleNode, Want};
use crate::record::{self, Dataset};
use crate::{Config, Datasets};
use ckptfs_store::{Store, StoreOptions};
use std::collections::BTreeMap;
use std::sync::Mutex;

type Hook = Box<dyn FnOnce() + Send>;

/// Node `me`'s view of the one other node `other`, whose store it reads directly.
struct Peer {
    me: String,
    other: String,
    other_store: Store,
    /// Run once, at the first question for the other node's id floor.
    on_floors: Mutex<Option<Hook>>,
}

impl JobNodes for Peer {
    fn me(&self) -> &str {
        &self.me
    }
    fn nodes(&self) -> Vec<String> {
        let mut v = vec![self.me.clone(), self.other.clone()];
        v.sort();
        v
    }
    fn records(&self, job: &str) -> BTreeMap<String, NodeRecords> {
        let r = record::load_all(&self.other_store, job)
            .map(|(a, _)| a)
            .map_err(|e| e.to_string());
        [(self.other.clone(), r)].into()
    }
    fn holders(&self, _: &str, _: &[Want], _: &[String]) -> BTreeMap<String, Vec<bool>> {
        BTreeMap::new()
    }
    fn fill_levels(&self, _: &mut [Dataset], _: &[std::path::PathBuf]) {}
    fn floors(&self, job: &str) -> BTreeMap<String, u64> {
        if let Some(hook) = self.on_floors.lock().unwrap().take() {
            hook();
        }
        [(self.other.clone(), crate::id_floor::floor(&self.other_store, job))].into()
    }
    fn raise_floor(&self, job: &str, next_id: u64) {
        let _ = crate::id_floor::raise(&self.other_store, job, next_id);
    }
}

struct Cluster(Peer);

impl Completion for Cluster {
    fn agree(&self, ds: &Dataset) -> Agreement {
        SingleNode.agree(ds)
    }
    fn job_nodes(&self) -> Option<&dyn JobNodes> {
        Some(&self.0)
    }
}

fn store(name: &str) -> Store {
    let mut o = StoreOptions::named(name);
    o.mem_size = Some(8 << 20);
    o.chunk_size = Some(64 << 10);
    Store::create(&o).unwrap()
}

fn node(me: &str, rank: &str, own: &Store, other: &str, other_store: &Store, hook: Option<Hook>) -> Datasets {
    let mut cfg = Config::for_job("t");
    cfg.rank = rank.into();
    cfg.world = 2;
    cfg.node = me.into();
    let peer = Peer {
        me: me.into(),
        other: other.into(),
        other_store: other_store.clone(),
        on_floors: Mutex::new(hook),
    };
    Datasets::new(own.clone(), cfg, Box::new(Cluster(peer)))
}

/// Node b's rank begins dataset "s" in full between node a's questions for the floors
/// and for the records. Node a must still join b's dataset: it asks the floors first, so
/// a floor past b's id comes with b's record (b records its floor only after its
/// record). Asked the other way round (records, then floors), a saw no record and a
/// floor past it, and took id 2 for the same dataset: ranks on two nodes then wrote
/// one checkpoint under two ids, and neither ever completed.
#[test]
fn a_rank_beginning_between_the_floor_and_the_records_is_joined() {
    let pid = std::process::id();
    let (na, nb) = (format!("hd-race-a-{pid}"), format!("hd-race-b-{pid}"));
    let (sa, sb) = (store(&na), store(&nb));
    let b = node("b", "1", &sb, "a", &sa, None);
    let hook: Hook = Box::new(move || {
        assert_eq!(b.begin("s", None).unwrap(), 1, "b begins first: id 1");
    });
    let a = node("a", "0", &sa, "b", &sb, Some(hook));
    assert_eq!(a.begin("s", None).unwrap(), 1, "a joins b's dataset");
    // Both nodes' next dataset continues at 2.
    assert_eq!(crate::id_floor::floor(&sa, "t"), 2);
    assert_eq!(crate::id_floor::floor(&sb, "t"), 2);
    drop(a);
    for n in [&na, &nb] {
        let _ = Store::destroy(n);
        crate::remove_lock(n);
    }
}
