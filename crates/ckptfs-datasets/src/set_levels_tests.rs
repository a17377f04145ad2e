//! Set levels through the trait alone: a restart across two nodes takes a lost file from
//! set levels of a made-up kind (`mirror`), by the level id each names, in the order
//! the job's nodes give them; no code of this crate names the kind.

use crate::completion::{Agreement, Completion, JobNodes, NodeRecords, SingleNode, Want};
use crate::filecrc::file_crc;
use crate::record::{self, Dataset};
use crate::{Config, Datasets};
use ckptfs_level::{Level, LevelError, LevelId, Part, PartFile, Recovered, SetProtection, SetState};
use ckptfs_store::level::StoreLevel;
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Set level `mirror:NAME`: copies of the nodes' files in a store of its own.
struct Mirror {
    name: String,
    copies: Store,
    /// What it was asked: `locate ID DATASET MEMBER` and `recover ID FROM`.
    asked: Arc<Mutex<Vec<String>>>,
}

impl Mirror {
    fn holds(&self, f: &PartFile) -> bool {
        matches!(file_crc(&self.copies, &f.path), Ok((n, c)) if n == f.size && c == f.crc32c)
    }
}

fn unsupported() -> LevelError {
    LevelError::backend(libc::ENOTSUP, std::io::Error::other("not in this test"))
}

impl SetProtection for Mirror {
    fn id(&self) -> LevelId {
        LevelId::new("mirror", self.name.clone())
    }
    fn members(&self) -> Vec<String> {
        vec!["a".into(), "b".into()]
    }
    fn tolerates(&self) -> usize {
        1
    }
    fn memory_overhead(&self) -> f64 {
        1.0
    }
    fn protect(&self, _: &Part) -> Result<(), LevelError> {
        Err(unsupported())
    }
    fn state(&self, _: &str) -> Result<SetState, LevelError> {
        Err(unsupported())
    }
    fn recover(&self, _: &str, _: &str, _: &dyn Level) -> Result<Recovered, LevelError> {
        Err(unsupported())
    }
    fn locate(
        &self,
        dataset: &str,
        member: &str,
        files: &[PartFile],
    ) -> Result<Vec<Option<LevelId>>, String> {
        self.asked
            .lock()
            .unwrap()
            .push(format!("locate {} {dataset} {member}", self.id()));
        Ok(files.iter().map(|f| self.holds(f).then(|| self.id())).collect())
    }
    fn recover_files(
        &self,
        _: &str,
        _: &str,
        files: &[PartFile],
        from: &LevelId,
        into: &dyn Level,
    ) -> Result<Recovered, LevelError> {
        self.asked
            .lock()
            .unwrap()
            .push(format!("recover {} {from}", self.id()));
        let src = StoreLevel::new(&self.copies)?;
        let mut out = Recovered::default();
        for f in files {
            let t = ckptfs_level::copy(&src, into, &f.path)?;
            out.bytes += t.bytes;
            out.files.push(t.stored);
        }
        Ok(out)
    }
}

/// Node `me`'s view of the other node, whose store it reads directly, and its set levels.
struct Peer {
    me: String,
    other: String,
    other_store: Store,
    levels: Vec<Arc<dyn SetProtection>>,
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
    /// The other node's own store, as its daemon would answer.
    fn holders(&self, owner: &str, files: &[Want], ask: &[String]) -> BTreeMap<String, Vec<bool>> {
        if owner != self.other || !ask.contains(&self.other) {
            return BTreeMap::new();
        }
        let v = files
            .iter()
            .map(|w| matches!(file_crc(&self.other_store, &w.path), Ok((n, c)) if n == w.size && c == w.crc32c))
            .collect();
        [(self.other.clone(), v)].into()
    }
    fn fill_levels(&self, _: &mut [Dataset], _: &[std::path::PathBuf]) {}
    fn floors(&self, job: &str) -> BTreeMap<String, u64> {
        [(self.other.clone(), crate::id_floor::floor(&self.other_store, job))].into()
    }
    fn raise_floor(&self, job: &str, next_id: u64) {
        let _ = crate::id_floor::raise(&self.other_store, job, next_id);
    }
    fn set_levels(&self) -> Vec<Arc<dyn SetProtection>> {
        self.levels.clone()
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
    let _ = Store::destroy(name);
    let mut o = StoreOptions::named(name);
    o.mem_size = Some(8 << 20);
    o.chunk_size = Some(64 << 10);
    Store::create(&o).unwrap()
}

fn write(store: &Store, path: &str, bytes: &[u8]) {
    if let Some((dir, _)) = path.rsplit_once('/') {
        if !dir.is_empty() {
            let _ = store.mkdir(dir, 0o755);
        }
    }
    let mut f = store.open(path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(bytes).unwrap();
    f.close().unwrap();
}

fn read(store: &Store, path: &str) -> Vec<u8> {
    let mut f = store.open(path, OpenFlags::READ, 0).unwrap();
    let mut b = vec![0; f.size() as usize];
    f.read_full(&mut b).unwrap();
    b
}

fn node(
    me: &str,
    rank: &str,
    own: &Store,
    other: &str,
    other_store: &Store,
    levels: Vec<Arc<dyn SetProtection>>,
) -> Datasets {
    let mut cfg = Config::for_job("t");
    cfg.rank = rank.into();
    cfg.world = 2;
    cfg.node = me.into();
    let peer = Peer {
        me: me.into(),
        other: other.into(),
        other_store: other_store.clone(),
        levels,
    };
    Datasets::new(own.clone(), cfg, Box::new(Cluster(peer)))
}

/// Dataset 1 complete job-wide over nodes a (`/a/f`) and b (`/b/f`); each mirror store
/// holds a copy of `/a/f` as `copies` says (None: no copy; Some(bytes): these bytes).
/// Returns node a's sources and restored files after `/a/f` is lost on a, with what the
/// mirrors were asked; `order` gives the mirrors' order in node a's set levels.
fn lose_and_restart(
    tag: &str,
    copies: [Option<&[u8]>; 2],
    order: [usize; 2],
) -> (crate::Restart, Vec<String>, Option<Vec<u8>>) {
    let pid = std::process::id();
    let names: Vec<String> = ["a", "b", "m1", "m2"]
        .iter()
        .map(|n| format!("sl-{tag}-{n}-{pid}"))
        .collect();
    let stores: Vec<Store> = names.iter().map(|n| store(n)).collect();
    let (sa, sb) = (&stores[0], &stores[1]);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let mirrors: Vec<Arc<dyn SetProtection>> = ["one", "two"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if let Some(b) = copies[i] {
                write(&stores[2 + i], "/a/f", b);
            }
            Arc::new(Mirror {
                name: n.to_string(),
                copies: stores[2 + i].clone(),
                asked: asked.clone(),
            }) as Arc<dyn SetProtection>
        })
        .collect();
    let levels = order.iter().map(|&i| mirrors[i].clone()).collect();
    let b = node("b", "1", sb, "a", sa, Vec::new());
    let a = node("a", "0", sa, "b", sb, levels);
    let id = a.begin("s", None).unwrap();
    assert_eq!(b.begin("s", None).unwrap(), id);
    write(sa, "/a/f", b"node a's state");
    write(sb, "/b/f", b"node b's state");
    b.complete(Some(id), true).unwrap();
    a.complete(Some(id), true).unwrap();
    sa.unlink("/a/f").unwrap();
    let nodes = a.completion.job_nodes().unwrap();
    let r = a.restart_cluster(nodes, None).unwrap().into_restart();
    let back = sa.stat("/a/f").ok().map(|_| read(sa, "/a/f"));
    let asked = asked.lock().unwrap().clone();
    drop((a, b));
    for n in &names {
        let _ = Store::destroy(n);
        crate::remove_lock(n);
    }
    (r, asked, back)
}

#[test]
fn a_lost_file_comes_back_from_the_first_set_level_that_locates_it_by_its_id() {
    let good: &[u8] = b"node a's state";
    // Both mirrors hold it: the first in the set levels' order gives it.
    let (r, asked, back) = lose_and_restart("both", [Some(good), Some(good)], [0, 1]);
    assert_eq!(r.chosen.as_ref().map(|d| d.id), Some(1), "{:?}", r.skipped);
    assert_eq!(r.sources["/a/f"], "mirror:one");
    // Only this node's part is brought back (node b's own store holds its file).
    assert_eq!(r.sources.len(), 1, "{:?}", r.sources);
    assert_eq!(r.restored, vec![("/a/f".to_string(), good.len() as u64)]);
    assert_eq!(back.as_deref(), Some(good));
    assert_eq!(
        asked,
        vec!["locate mirror:one t.1 a", "recover mirror:one mirror:one"]
    );
    // The other order: the second mirror is asked first and gives it.
    let (r, asked, back) = lose_and_restart("order", [Some(good), Some(good)], [1, 0]);
    assert_eq!(r.sources["/a/f"], "mirror:two");
    assert_eq!(back.as_deref(), Some(good));
    assert_eq!(
        asked,
        vec!["locate mirror:two t.1 a", "recover mirror:two mirror:two"]
    );
}

#[test]
fn a_set_level_without_the_content_is_passed_for_the_next_and_none_skips_the_dataset() {
    let good: &[u8] = b"node a's state";
    // The first mirror holds other bytes under the name: the second gives the file.
    let (r, asked, back) = lose_and_restart("next", [Some(b"other bytes!!!"), Some(good)], [0, 1]);
    assert_eq!(r.sources["/a/f"], "mirror:two");
    assert_eq!(back.as_deref(), Some(good));
    assert_eq!(
        asked,
        vec![
            "locate mirror:one t.1 a",
            "locate mirror:two t.1 a",
            "recover mirror:two mirror:two"
        ]
    );
    // Neither holds it: the dataset is skipped, every set level asked named.
    let (r, _, back) = lose_and_restart("none", [None, None], [0, 1]);
    assert!(r.chosen.is_none());
    assert!(back.is_none());
    let why = &r.skipped[0].reason;
    assert!(
        why.contains("file /a/f of node a") && why.contains("(local, mirror:one, mirror:two"),
        "{why}"
    );
}
