//! The erasure level (`erasure:SET/MEMBER`, [`ckptfs_erasure::MemberFiles`]) passes the
//! read-only conformance suite of the level interface: a lost member's files, rebuilt
//! from the survivors' parts and parity (every CRC checked), answer list/stat/get/holds
//! as any level's copies; `put` and `delete` are refused (EROFS), a set being written
//! by encoding; damage on a survivor's storage is never served.

use ckptfs_dirlevel::DirLevel;
use ckptfs_erasure::{ErasureSet, MemberFiles, Scheme};
use ckptfs_level::conformance::{put_bytes, run_read_only, ReadOnlyHarness};
use ckptfs_level::{Level, Part, SetProtection};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const DS: &str = "ckpt-9";
const CS: u64 = 4096;

/// Sets of four members in directories under one temporary directory: member 4 (node4)
/// holds the suite's files; the others a file each of unequal sizes (node3 none).
struct Sets {
    dir: tempfile::TempDir,
    scheme: Scheme,
    n: AtomicUsize,
    /// The survivors' directories of the set filled last.
    last: Mutex<Vec<PathBuf>>,
}

impl Sets {
    fn fill(&self, files: &[(String, Vec<u8>)]) -> Result<Box<dyn Level>, String> {
        let k = self.n.fetch_add(1, Ordering::Relaxed);
        let names: Vec<String> = (1..=4).map(|i| format!("node{i}")).collect();
        let mut members: Vec<(String, Arc<dyn Level>)> = Vec::new();
        let mut parts = Vec::new();
        let mut dirs = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let d = self.dir.path().join(format!("s{k}-m{i}"));
            let lvl: Arc<dyn Level> = Arc::new(DirLevel::new(&d).map_err(|e| e.to_string())?);
            let mine: Vec<(String, Vec<u8>)> = match i {
                3 => files.to_vec(),
                2 => Vec::new(),
                _ => vec![(
                    format!("/other/rank{i}"),
                    (0..5000 + 777 * i).map(|j| (j * 31 + i) as u8).collect(),
                )],
            };
            let mut stored = Vec::new();
            for (p, b) in &mine {
                stored.push(put_bytes(&*lvl, p, b, CS, 1).map_err(|e| e.to_string())?);
            }
            parts.push(Part {
                dataset: DS.into(),
                member: name.clone(),
                files: stored,
            });
            members.push((name.clone(), lvl));
            dirs.push(d);
        }
        let set = ErasureSet::new("set0", self.scheme, members).map_err(|e| e.to_string())?;
        for p in &parts {
            set.protect(p).map_err(|e| e.to_string())?;
        }
        // node4 lost: an empty store takes its place; its files are read through the set.
        let empty: Arc<dyn Level> =
            Arc::new(DirLevel::new(self.dir.path().join(format!("s{k}-new"))).map_err(|e| e.to_string())?);
        set.replace("node4", empty).map_err(|e| e.to_string())?;
        dirs.truncate(3);
        *self.last.lock().unwrap() = dirs;
        Ok(Box::new(MemberFiles::new(Arc::new(set), DS, "node4")))
    }

    /// Flip the last byte of node1's file (its copy file's data ends it): byte 4999 of
    /// node1's part, in its segment 1 (segments of 2752 bytes: the largest part, node4's
    /// 8192, over three), which is stripe 2's, and node4's segment 2 needs stripe 2 (XOR
    /// over four: no other shard can stand in).
    fn damage(&self) -> std::io::Result<()> {
        let f = self.last.lock().unwrap()[0].join("other/rank0");
        let mut b = std::fs::read(&f)?;
        let n = b.len();
        b[n - 1] ^= 0x5a;
        std::fs::write(&f, b)
    }
}

fn sets(scheme: Scheme) -> Sets {
    Sets {
        dir: tempfile::Builder::new().prefix("erc-").tempdir().unwrap(),
        scheme,
        n: AtomicUsize::new(0),
        last: Mutex::new(Vec::new()),
    }
}

#[test]
fn a_lost_members_files_pass_the_read_only_conformance_suite_xor() {
    let s = sets(Scheme::Xor);
    let fill = |f: &[(String, Vec<u8>)]| s.fill(f);
    let damage = |_: &str| s.damage();
    run_read_only(&ReadOnlyHarness {
        fill: &fill,
        chunk_size: CS,
        prefix: "/conf".into(),
        damage: Some(&damage),
    })
    .unwrap();
}

/// Reed-Solomon `k = 2`: one damaged shard with one member lost still leaves enough, so
/// the damage case does not apply (the suite's other checks do).
#[test]
fn a_lost_members_files_pass_the_read_only_conformance_suite_rs2() {
    let s = sets(Scheme::Rs(2));
    let fill = |f: &[(String, Vec<u8>)]| s.fill(f);
    run_read_only(&ReadOnlyHarness {
        fill: &fill,
        chunk_size: CS,
        prefix: "/conf".into(),
        damage: None,
    })
    .unwrap();
}

/// The suite catches a level that does not refuse a write: a read-only wrapper that
/// lets `delete` through to the store fails the suite.
#[test]
fn the_read_only_suite_fails_a_level_that_accepts_a_delete() {
    struct Leaky(DirLevel);
    impl Level for Leaky {
        fn kind(&self) -> ckptfs_level::LevelKind {
            self.0.kind()
        }
        fn name(&self) -> String {
            self.0.name()
        }
        fn list(&self, p: &str) -> Result<Vec<ckptfs_level::Stored>, ckptfs_level::LevelError> {
            self.0.list(p)
        }
        fn stat(&self, p: &str) -> Result<Option<ckptfs_level::Stored>, ckptfs_level::LevelError> {
            self.0.stat(p)
        }
        fn get<'a>(
            &'a self,
            p: &str,
        ) -> Result<Box<dyn ckptfs_level::ChunkReader + 'a>, ckptfs_level::LevelError> {
            self.0.get(p)
        }
        fn put<'a>(
            &'a self,
            _: &ckptfs_level::Stored,
        ) -> Result<Box<dyn ckptfs_level::ChunkWriter + 'a>, ckptfs_level::LevelError> {
            Err(ckptfs_level::LevelError::backend(
                libc::EROFS,
                std::io::Error::other("read-only"),
            ))
        }
        fn delete(&self, p: &str, v: &ckptfs_level::Version) -> Result<bool, ckptfs_level::LevelError> {
            self.0.delete(p, v)
        }
        fn meter(&self) -> &ckptfs_level::CostMeter {
            self.0.meter()
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let n = AtomicUsize::new(0);
    let fill = |files: &[(String, Vec<u8>)]| -> Result<Box<dyn Level>, String> {
        let d = DirLevel::new(dir.path().join(n.fetch_add(1, Ordering::Relaxed).to_string()))
            .map_err(|e| e.to_string())?;
        for (p, b) in files {
            put_bytes(&d, p, b, CS, 1).map_err(|e| e.to_string())?;
        }
        Ok(Box::new(Leaky(d)))
    };
    let err = run_read_only(&ReadOnlyHarness {
        fill: &fill,
        chunk_size: CS,
        prefix: "/conf".into(),
        damage: None,
    })
    .unwrap_err();
    assert!(
        err.contains("delete refused: accepted by a read-only level"),
        "{err}"
    );
}
