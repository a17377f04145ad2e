//! In-process erasure sets: each member's store is a directory level; losing a member is
//! replacing its level with an empty one (its replacement node) or with one that fails.

use ckptfs_dirlevel::DirLevel;
use ckptfs_erasure::{ErasureError, ErasureSet, Scheme};
use ckptfs_level::conformance::{get_bytes, put_bytes};
use ckptfs_level::{
    ChunkReader, ChunkWriter, CostMeter, Level, LevelError, LevelId, LevelKind, Part, PartFile,
    SetProtection, SetState, Stored, Version,
};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const DS: &str = "ckpt-7";

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("ers-").tempdir().unwrap()
}

fn data(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| {
            (i.wrapping_add(seed.wrapping_mul(7919))
                .wrapping_mul(2_654_435_761)
                >> 11) as u8
        })
        .collect()
}

struct Cluster {
    dir: PathBuf,
    set: ErasureSet,
    /// Per member: its files (path, bytes).
    files: Vec<Vec<(String, Vec<u8>)>>,
    names: Vec<String>,
    fresh: AtomicUsize,
}

impl Cluster {
    /// `sizes[i]`: member i's file sizes (empty: a member with no files).
    fn new(dir: &Path, scheme: Scheme, sizes: &[Vec<usize>]) -> Cluster {
        let names: Vec<String> = (0..sizes.len()).map(|i| format!("node{}", i + 1)).collect();
        let mut members: Vec<(String, Arc<dyn Level>)> = Vec::new();
        let mut files = Vec::new();
        for (i, sz) in sizes.iter().enumerate() {
            let lvl: Arc<dyn Level> = Arc::new(DirLevel::new(dir.join(format!("m{i}"))).unwrap());
            let mut mine = Vec::new();
            for (j, &n) in sz.iter().enumerate() {
                let path = format!("/{DS}/rank{i}/f{j}");
                let b = data(n, (i * 100 + j) as u32);
                put_bytes(&*lvl, &path, &b, 4096, 1).unwrap();
                mine.push((path, b));
            }
            files.push(mine);
            members.push((names[i].clone(), lvl));
        }
        let set = ErasureSet::new("set0", scheme, members).unwrap();
        Cluster {
            dir: dir.to_path_buf(),
            set,
            files,
            names,
            fresh: AtomicUsize::new(0),
        }
    }

    fn level_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("m{i}"))
    }

    fn parts(&self) -> Vec<Part> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, fs)| {
                let lvl = DirLevel::new(self.level_dir(i)).unwrap();
                Part {
                    dataset: DS.into(),
                    member: self.names[i].clone(),
                    files: fs.iter().map(|(p, _)| lvl.stat(p).unwrap().unwrap()).collect(),
                }
            })
            .collect()
    }

    /// Every member calls protect (the last one encodes).
    fn protect(&self) {
        for p in self.parts() {
            self.set.protect(&p).unwrap();
        }
    }

    /// Member `i` is lost; an empty store takes its place.
    fn lose(&self, i: usize) {
        let k = self.fresh.fetch_add(1, Ordering::Relaxed);
        let lvl: Arc<dyn Level> = Arc::new(DirLevel::new(self.dir.join(format!("new{k}-m{i}"))).unwrap());
        self.set.replace(&self.names[i], lvl).unwrap();
        // Where later reads of member i go.
        std::fs::write(self.dir.join(format!("m{i}.moved")), format!("new{k}-m{i}")).unwrap();
    }

    fn current_dir(&self, i: usize) -> PathBuf {
        match std::fs::read_to_string(self.dir.join(format!("m{i}.moved"))) {
            Ok(d) => self.dir.join(d),
            Err(_) => self.level_dir(i),
        }
    }

    /// Every member's files are byte-identical to what was written.
    fn check_all(&self) {
        for (i, fs) in self.files.iter().enumerate() {
            let lvl = DirLevel::new(self.current_dir(i)).unwrap();
            for (p, b) in fs {
                assert_eq!(&get_bytes(&lvl, p).unwrap(), b, "member {i} file {p}");
            }
        }
    }
}

fn flip_last_byte(file: &Path) {
    let mut b = std::fs::read(file).unwrap();
    let n = b.len();
    b[n - 1] ^= 0x5a;
    std::fs::write(file, b).unwrap();
}

fn find(dir: &Path, suffix: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()? {
        let p = e.ok()?.path();
        if p.is_dir() {
            if let Some(f) = find(&p, suffix) {
                return Some(f);
            }
        } else if p.to_string_lossy().ends_with(suffix) {
            return Some(p);
        }
    }
    None
}

#[test]
fn xor_one_lost_member_is_rebuilt_and_reencoded() {
    let t = tmp();
    let c = Cluster::new(
        t.path(),
        Scheme::Xor,
        &[
            vec![10_000, 3],
            vec![70_000],
            vec![],
            vec![1, 0, 4097],
            vec![33_333, 33_333],
        ],
    );
    assert_eq!(c.set.state(DS).unwrap(), SetState::Absent);
    c.set.protect(&c.parts()[0]).unwrap();
    assert_eq!(c.set.state(DS).unwrap(), SetState::InProgress);
    c.protect();
    assert_eq!(c.set.state(DS).unwrap(), SetState::Protected);
    assert!((c.set.memory_overhead() - 0.25).abs() < 1e-9);
    c.lose(1);
    assert_eq!(c.set.state(DS).unwrap(), SetState::Degraded(vec!["node2".into()]));
    let r = c.set.rebuild(DS).unwrap();
    assert_eq!(r.members.len(), 1);
    assert_eq!(r.members[0].1.bytes, 70_000);
    c.check_all();
    assert_eq!(c.set.state(DS).unwrap(), SetState::Protected);
    assert!(c.set.scrub(DS).unwrap().is_empty());
    // Parity stays in the namespace applications do not see.
    let lvl = DirLevel::new(c.current_dir(1)).unwrap();
    assert!(lvl
        .list("/.ckptfs/erasure")
        .unwrap()
        .iter()
        .any(|s| s.path.contains("/p.")));
}

#[test]
fn rs2_two_lost_at_once_recover_into_a_replacement() {
    let t = tmp();
    let c = Cluster::new(
        t.path(),
        Scheme::Rs(2),
        &[
            vec![5000],
            vec![9000, 12],
            vec![100_000],
            vec![0],
            vec![64],
            vec![77_777],
        ],
    );
    c.protect();
    assert_eq!(c.set.state(DS).unwrap(), SetState::Protected);
    c.lose(2);
    c.lose(5);
    assert_eq!(
        c.set.state(DS).unwrap(),
        SetState::Degraded(vec!["node3".into(), "node6".into()])
    );
    // recover() writes one member's files into any level.
    let elsewhere = DirLevel::new(t.path().join("elsewhere")).unwrap();
    let r = c.set.recover(DS, "node3", &elsewhere).unwrap();
    assert_eq!(r.bytes, 100_000);
    assert_eq!(get_bytes(&elsewhere, &c.files[2][0].0).unwrap(), c.files[2][0].1);
    c.set.rebuild(DS).unwrap();
    c.check_all();
    assert_eq!(c.set.state(DS).unwrap(), SetState::Protected);
}

#[test]
fn k_plus_one_lost_is_reported_by_name() {
    let t = tmp();
    let c = Cluster::new(
        t.path(),
        Scheme::Rs(2),
        &[vec![5000], vec![9000], vec![100], vec![1], vec![64]],
    );
    c.protect();
    for i in [0, 3, 4] {
        c.lose(i);
    }
    let want: Vec<String> = vec!["node1".into(), "node4".into(), "node5".into()];
    assert_eq!(c.set.state(DS).unwrap(), SetState::Lost(want.clone()));
    match c.set.rebuild(DS) {
        Err(ErasureError::TooManyLost { lost, tolerates, .. }) => {
            assert_eq!(lost, want);
            assert_eq!(tolerates, 2);
        }
        other => panic!("expected TooManyLost, got {other:?}"),
    }
    let e = c
        .set
        .recover(DS, "node1", &DirLevel::new(t.path().join("x")).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("node1, node4, node5"), "{e}");
}

/// The restore side through the trait alone: `locate` names the set for each file its
/// encoding records with that size and CRC32C (None for other content), `recover_files`
/// brings them back byte-identical from the id `locate` gave and refuses another id,
/// and too many lost members are named.
#[test]
fn locate_names_the_set_and_recover_files_brings_the_located_files_back() {
    let t = tmp();
    let c = Cluster::new(t.path(), Scheme::Xor, &[vec![5000], vec![9000, 12], vec![700]]);
    c.protect();
    c.lose(1);
    let lvl = DirLevel::new(c.level_dir(1)).unwrap();
    let files: Vec<PartFile> = c.files[1]
        .iter()
        .map(|(p, _)| {
            let s = lvl.stat(p).unwrap().unwrap();
            PartFile {
                path: p.clone(),
                size: s.version.size,
                crc32c: s.version.crc32c.unwrap(),
            }
        })
        .collect();
    let mut asked = files.clone();
    asked.push(PartFile {
        crc32c: files[0].crc32c ^ 1,
        ..files[0].clone()
    });
    let id = LevelId::new("erasure", "set0");
    assert_eq!(
        c.set.locate(DS, "node2", &asked).unwrap(),
        vec![Some(id.clone()), Some(id.clone()), None]
    );
    assert!(c.set.covers(&id) && !c.set.covers(&LevelId::new("erasure", "set1")));
    let into = DirLevel::new(t.path().join("back")).unwrap();
    let e = c
        .set
        .recover_files(DS, "node2", &files, &LevelId::new("erasure", "set1"), &into)
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    let r = c.set.recover_files(DS, "node2", &files, &id, &into).unwrap();
    assert_eq!(r.bytes, 9012);
    for (p, b) in &c.files[1] {
        assert_eq!(&get_bytes(&into, p).unwrap(), b, "{p}");
    }
    // A whole-member recovery needs a list of datasets this set does not keep.
    assert_eq!(
        c.set.recover_member("node2", "/", &into).unwrap_err().errno(),
        libc::ENOTSUP
    );
    c.lose(0);
    let e = c.set.locate(DS, "node2", &files).unwrap_err();
    assert!(e.contains("node1, node2"), "{e}");
}

#[test]
fn corrupted_parity_chunk_is_detected_and_never_used() {
    let t = tmp();
    let c = Cluster::new(
        t.path(),
        Scheme::Rs(2),
        &[
            vec![50_000],
            vec![40_000],
            vec![30_000],
            vec![20_000],
            vec![10_000],
        ],
    );
    c.protect();
    // Damage every parity shard member 2 holds.
    let p = find(&c.level_dir(2), "/p.2.0").expect("member 2 holds stripe 2 row 0");
    flip_last_byte(&p);
    let bad = c.set.scrub(DS).unwrap();
    assert!(bad.iter().any(|b| b.starts_with("node3: parity 2.0")), "{bad:?}");
    // One member lost: the stripe still has enough good shards; the damaged one is skipped.
    c.lose(0);
    c.set.rebuild(DS).unwrap();
    c.check_all();
    assert!(c.set.scrub(DS).unwrap().is_empty());
}

#[test]
fn corrupted_data_chunk_is_detected_and_never_served() {
    let t = tmp();
    let c = Cluster::new(
        t.path(),
        Scheme::Xor,
        &[vec![50_000], vec![40_000], vec![30_000], vec![20_000]],
    );
    c.protect();
    let f = c.level_dir(3).join(&c.files[3][0].0[1..]);
    flip_last_byte(&f);
    let bad = c.set.scrub(DS).unwrap();
    assert!(bad.iter().any(|b| b.starts_with("node4:")), "{bad:?}");
    // XOR with a second member lost: member 4's damaged chunk cannot stand in; the
    // rebuild of the stripes that need it fails, naming both.
    c.lose(0);
    let e = c.set.rebuild(DS).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("node1") && msg.contains("node4"), "{msg}");
    // Nothing was written for node1.
    let lvl = DirLevel::new(c.current_dir(0)).unwrap();
    assert!(lvl.stat(&c.files[0][0].0).unwrap().is_none());
}

/// A member's store that fails every write after `ok` of them (a node killed during
/// encoding).
struct Dying {
    inner: DirLevel,
    ok: AtomicUsize,
}

impl Level for Dying {
    fn kind(&self) -> LevelKind {
        self.inner.kind()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
    fn list(&self, prefix: &str) -> Result<Vec<Stored>, LevelError> {
        self.inner.list(prefix)
    }
    fn stat(&self, path: &str) -> Result<Option<Stored>, LevelError> {
        self.inner.stat(path)
    }
    fn get<'a>(&'a self, path: &str) -> Result<Box<dyn ChunkReader + 'a>, LevelError> {
        self.inner.get(path)
    }
    fn put<'a>(&'a self, src: &Stored) -> Result<Box<dyn ChunkWriter + 'a>, LevelError> {
        if self.ok.fetch_sub(1, Ordering::Relaxed) == 0 {
            self.ok.store(0, Ordering::Relaxed);
            return Err(LevelError::io(
                "put",
                src.path.clone(),
                std::io::Error::from_raw_os_error(libc_econnreset()),
            ));
        }
        self.inner.put(src)
    }
    fn delete(&self, path: &str, want: &Version) -> Result<bool, LevelError> {
        self.inner.delete(path, want)
    }
    fn meter(&self) -> &CostMeter {
        self.inner.meter()
    }
}

fn libc_econnreset() -> i32 {
    104
}

#[test]
fn a_member_killed_during_encoding_leaves_no_set_that_looks_complete() {
    let t = tmp();
    let c = Cluster::new(
        t.path(),
        Scheme::Xor,
        &[vec![20_000], vec![20_000], vec![20_000], vec![20_000]],
    );
    // Member 2 dies after storing its first parity shard.
    let dying: Arc<dyn Level> = Arc::new(Dying {
        inner: DirLevel::new(c.level_dir(2)).unwrap(),
        ok: AtomicUsize::new(1),
    });
    c.set.replace("node3", dying).unwrap();
    let e = c.set.encode(DS, &c.parts()).unwrap_err();
    assert!(e.to_string().contains("node3"), "{e}");
    let st = c.set.state(DS).unwrap();
    assert!(matches!(st, SetState::Absent | SetState::InProgress), "{st:?}");
    assert!(c.set.rebuild(DS).is_err());
    // The node comes back: a new encode protects the dataset.
    c.set
        .replace("node3", Arc::new(DirLevel::new(c.level_dir(2)).unwrap()))
        .unwrap();
    c.set.encode(DS, &c.parts()).unwrap();
    assert_eq!(c.set.state(DS).unwrap(), SetState::Protected);
}

#[test]
fn a_member_lost_while_headers_are_written_is_not_protected_but_rebuilds() {
    let t = tmp();
    let c = Cluster::new(t.path(), Scheme::Xor, &[vec![9_000], vec![9_000], vec![9_000]]);
    // Member 3 stores its encoding marker and its parity shard (2 puts), then dies
    // before its header: members 1 and 2 have theirs.
    let dying: Arc<dyn Level> = Arc::new(Dying {
        inner: DirLevel::new(c.level_dir(2)).unwrap(),
        ok: AtomicUsize::new(2),
    });
    c.set.replace("node3", dying).unwrap();
    assert!(c.set.encode(DS, &c.parts()).is_err());
    assert_eq!(c.set.state(DS).unwrap(), SetState::InProgress);
    // The parity is whole: a member lost now can still be rebuilt.
    c.lose(0);
    assert_eq!(c.set.state(DS).unwrap(), SetState::Degraded(vec!["node1".into()]));
    c.set
        .replace("node3", Arc::new(DirLevel::new(c.level_dir(2)).unwrap()))
        .unwrap();
    c.set.rebuild(DS).unwrap();
    c.check_all();
    assert_eq!(c.set.state(DS).unwrap(), SetState::Protected);
}

fn scheme_strategy() -> impl Strategy<Value = (Scheme, usize)> {
    (1usize..=3, 0usize..=4, any::<bool>()).prop_map(|(k, extra, xor)| {
        let s = if k == 1 && xor {
            Scheme::Xor
        } else {
            Scheme::Rs(k as u16)
        };
        (s, k + 1 + extra)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random N, k, part sizes (unequal, empty parts, members with no files): losing any
    /// <= k members rebuilds byte-identical parts; k+1 is reported by name.
    #[test]
    fn any_k_losses_rebuild_byte_identical_parts(
        (scheme, n) in scheme_strategy(),
        sizes in proptest::collection::vec(proptest::collection::vec(0usize..30_000, 0..3), 8),
        pick in proptest::collection::vec(any::<u32>(), 4),
    ) {
        let t = tmp();
        let c = Cluster::new(t.path(), scheme, &sizes[..n]);
        c.protect();
        prop_assert_eq!(c.set.state(DS).unwrap(), SetState::Protected);
        let k = scheme.parity();
        let mut idx: Vec<usize> = (0..n).collect();
        let mut lost = Vec::new();
        for p in pick.iter().take(k) {
            lost.push(idx.remove(*p as usize % idx.len()));
        }
        lost.sort_unstable();
        for &i in &lost {
            c.lose(i);
        }
        let names: Vec<String> = lost.iter().map(|&i| format!("node{}", i + 1)).collect();
        prop_assert_eq!(c.set.state(DS).unwrap(), SetState::Degraded(names));
        c.set.rebuild(DS).unwrap();
        c.check_all();
        prop_assert_eq!(c.set.state(DS).unwrap(), SetState::Protected);
        // k + 1 lost at once: detected and named.
        let mut more = lost.clone();
        more.push(idx[pick[3] as usize % idx.len()]);
        more.sort_unstable();
        for &i in &more {
            c.lose(i);
        }
        let names: Vec<String> = more.iter().map(|&i| format!("node{}", i + 1)).collect();
        let st = c.set.state(DS).unwrap();
        if more.len() == n {
            // Every member lost: no header is left anywhere to name anything.
            prop_assert_eq!(st, SetState::Absent);
            prop_assert!(c.set.rebuild(DS).is_err());
            return Ok(());
        }
        // A member with an empty part that lost nothing but its parity is still lost.
        prop_assert_eq!(st, SetState::Lost(names.clone()));
        match c.set.rebuild(DS) {
            Err(ErasureError::TooManyLost { lost, .. }) => prop_assert_eq!(lost, names),
            other => prop_assert!(false, "expected TooManyLost, got {:?}", other),
        }
    }
}

#[test]
fn an_interrupted_re_encode_keeps_the_older_whole_encoding() {
    let t = tmp();
    let c = Cluster::new(
        t.path(),
        Scheme::Rs(2),
        &[vec![9_000], vec![19_000], vec![29_000], vec![4_000]],
    );
    c.protect();
    let dying: Arc<dyn Level> = Arc::new(Dying {
        inner: DirLevel::new(c.level_dir(1)).unwrap(),
        ok: AtomicUsize::new(1),
    });
    c.set.replace("node2", dying).unwrap();
    assert!(c.set.encode(DS, &c.parts()).is_err());
    c.set
        .replace("node2", Arc::new(DirLevel::new(c.level_dir(1)).unwrap()))
        .unwrap();
    assert_eq!(c.set.state(DS).unwrap(), SetState::Protected);
    c.lose(3);
    c.set.rebuild(DS).unwrap();
    c.check_all();
}

#[test]
fn encoding_is_throttled_by_the_sets_mover() {
    let t = tmp();
    let sizes = [vec![200_000], vec![200_000], vec![200_000]];
    let c = Cluster::new(t.path(), Scheme::Xor, &sizes);
    let parts = c.parts();
    let levels: Vec<(String, Arc<dyn Level>)> = (0..3)
        .map(|i| {
            let l: Arc<dyn Level> = Arc::new(DirLevel::new(c.level_dir(i)).unwrap());
            (format!("node{}", i + 1), l)
        })
        .collect();
    let slow = ErasureSet::new("set1", Scheme::Xor, levels)
        .unwrap()
        .with_mover(ckptfs_level::MoveOptions {
            max_bw: Some(200_000),
            ..Default::default()
        });
    let t0 = std::time::Instant::now();
    slow.encode(DS, &parts).unwrap();
    // 3 parity shards of 100 032 bytes (plus markers and headers) at 200 kB/s, after a
    // burst of one second's worth: at least 0.5 s.
    let took = t0.elapsed().as_secs_f64();
    assert!(took >= 0.4, "{took}");
    assert_eq!(slow.state(DS).unwrap(), SetState::Protected);
}

#[test]
fn a_lost_members_files_are_read_through_the_set_as_a_level() {
    let t = tmp();
    let c = Cluster::new(
        t.path(),
        Scheme::Rs(2),
        &[vec![70_000, 5], vec![9_000], vec![], vec![123_456]],
    );
    c.protect();
    c.lose(3);
    let set = Arc::new(c.set);
    let lvl = ckptfs_erasure::MemberFiles::new(set.clone(), DS, "node4");
    assert_eq!(lvl.id().to_string(), "erasure:set0/node4");
    let listed = lvl.list("/").unwrap();
    assert_eq!(listed.len(), 1);
    // The mover restores it into the replacement's store like any level's copy.
    let dest = DirLevel::new(t.path().join("restored")).unwrap();
    let tr = ckptfs_level::copy(&lvl, &dest, &listed[0].path).unwrap();
    assert_eq!(tr.bytes, 123_456);
    assert_eq!(get_bytes(&dest, &listed[0].path).unwrap(), c.files[3][0].1);
    // A member that is not lost reads from its own level, checked the same way.
    let alive = ckptfs_erasure::MemberFiles::new(set.clone(), DS, "node1");
    assert_eq!(get_bytes(&alive, &c.files[0][1].0).unwrap(), c.files[0][1].1);
    assert!(alive.put(&listed[0]).is_err());
    assert!(lvl.stat("/nope").unwrap().is_none());
}
