//! The PFS directory and the node store behind the level interface, and the agent as
//! the mover between them: copies in both directions are byte-identical and checked,
//! the policy decides what moves, and the drain measures the levels' costs.

mod common;
use ckptfs_agent::dest::PosixDest;
use ckptfs_agent::manifest::{self, Manifest};
use ckptfs_agent::{fill, status, Agent, AgentError, DrainPolicy, PfsLevel, Target};
use ckptfs_level::{copy, Level, LevelKind};
use ckptfs_store::level::StoreLevel;
use common::*;
use std::path::Path;
use std::sync::Arc;

const CS: usize = 64 << 10;

fn pfs(dest: &Path, store: &str) -> PfsLevel {
    let t = Target {
        dir: dest.to_path_buf(),
        ost: None,
    };
    PfsLevel::new(t, Arc::new(PosixDest::default()), "n0", store, false)
}

fn manifest_in(dir: &Path) -> Manifest {
    serde_json::from_slice(&std::fs::read(dir.join(manifest::file_name("n0"))).unwrap()).unwrap()
}

fn read_store(s: &ckptfs_store::Store, path: &str) -> Vec<u8> {
    let mut f = s.open(path, ckptfs_store::OpenFlags::READ, 0).unwrap();
    let mut v = vec![0u8; f.size() as usize];
    assert_eq!(f.read_full(&mut v).unwrap(), v.len());
    v
}

#[test]
fn pfs_level_put_get_list_verify_delete_through_the_level_interface() {
    let ts = store("lvl", |_| {});
    let back = store("lvlback", |_| {});
    let files = vec![
        ("/c/s1/r0", data(1, 3 * CS + 5)),
        ("/c/s1/r1", data(2, CS)),
        ("/top", data(3, 9)),
    ];
    for (p, d) in &files {
        put(&ts.store, p, d);
    }
    let dest = tempfile::tempdir().unwrap();
    let local = StoreLevel::new(&ts.store).unwrap();
    let p = pfs(dest.path(), &ts.name);
    assert_eq!(p.kind(), LevelKind::Pfs);
    // store -> PFS through put: the publish protocol, with a manifest entry.
    for (path, d) in &files {
        let t = copy(&local, &p, path).unwrap();
        assert_eq!(t.bytes, d.len() as u64);
        assert_eq!(&std::fs::read(dest.path().join(&path[1..])).unwrap(), d);
    }
    let m = manifest_in(&dest.path().join("c/s1"));
    assert_eq!(m.files["r0"].crc32c, ckptfs_store::checksum::crc32c(&files[0].1));
    assert_eq!(m.files["r0"].chunk_crc32c.len(), 4);
    assert!(walk(dest.path())
        .iter()
        .all(|f| !f.to_string_lossy().contains("ckptfs-tmp")));
    // list / stat see the same content as the store.
    let listed = p.list("/").unwrap();
    assert_eq!(listed.len(), 3);
    for s in &listed {
        let l = local.stat(&s.path).unwrap().unwrap();
        assert!(s.version.same_content(&l.version), "{}", s.path);
        assert_eq!(s.version.mtime_ns, l.version.mtime_ns);
    }
    assert!(p.stat("/c/s1/none").unwrap().is_none());
    assert_eq!(p.get("/c/s1/none").err().unwrap().errno(), libc::ENOENT);
    // PFS -> another store through get: byte-identical, mtime kept.
    let lb = StoreLevel::new(&back.store).unwrap();
    for (path, d) in &files {
        copy(&p, &lb, path).unwrap();
        assert_eq!(&read_store(&back.store, path), d);
        assert_eq!(
            back.store.stat(path).unwrap().mtime_ns,
            ts.store.stat(path).unwrap().mtime_ns
        );
    }
    assert_eq!((p.cost().puts, p.cost().gets), (3, 3));
    // A flipped byte on the PFS: verify and get fail with EIO naming file and chunk.
    let f = dest.path().join("c/s1/r0");
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[2 * CS + 1] ^= 1;
    std::fs::write(&f, &bytes).unwrap();
    let v = p.stat("/c/s1/r0").unwrap().unwrap().version;
    let e = p.verify("/c/s1/r0", &v).unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    match AgentError::from(e) {
        AgentError::Mismatch { chunk, .. } => assert_eq!(chunk, 2),
        other => panic!("{other}"),
    }
    p.verify("/c/s1/r1", &p.stat("/c/s1/r1").unwrap().unwrap().version)
        .unwrap();
    // delete: only the content given; the manifest entry goes with the file.
    let r1 = p.stat("/c/s1/r1").unwrap().unwrap().version;
    let other = ckptfs_level::Version {
        crc32c: Some(r1.crc32c.unwrap() ^ 1),
        ..r1
    };
    assert!(!p.delete("/c/s1/r1", &other).unwrap());
    assert!(dest.path().join("c/s1/r1").exists());
    assert!(p.delete("/c/s1/r1", &r1).unwrap());
    assert!(!dest.path().join("c/s1/r1").exists());
    assert!(!manifest_in(&dest.path().join("c/s1")).files.contains_key("r1"));
    assert!(p.stat("/c/s1/r1").unwrap().is_none());
}

#[test]
fn fill_moves_what_the_policy_routes_and_leaves_present_copies_alone() {
    let ts = store("fill", |_| {});
    let back = store("fillback", |_| {});
    for (i, dir) in ["/c/1", "/c/2", "/c/3", "/c/4"].iter().enumerate() {
        put(&ts.store, &format!("{dir}/a"), &data(i as u64, CS + i));
        put(&ts.store, &format!("{dir}/b"), &data(10 + i as u64, 2 * CS));
    }
    let dest = tempfile::tempdir().unwrap();
    let local = StoreLevel::new(&ts.store).unwrap();
    let p = pfs(dest.path(), &ts.name);
    // Every 2nd checkpoint directory: /c/2 and /c/4.
    let every2 = DrainPolicy {
        every: 2,
        evict: false,
    };
    let rep = fill(&local, &p, "/", Some(&every2)).unwrap();
    assert!(rep.failed.is_empty(), "{:?}", rep.failed);
    let mut copied = rep.copied.clone();
    copied.sort();
    assert_eq!(copied, ["/c/2/a", "/c/2/b", "/c/4/a", "/c/4/b"]);
    assert_eq!(rep.skipped.len(), 4);
    assert!(dest.path().join("c/2/a").exists() && !dest.path().join("c/1/a").exists());
    // No policy: everything the PFS lacks; what it holds is left alone.
    let rep = fill(&local, &p, "/", None).unwrap();
    assert_eq!(rep.copied.len(), 4);
    assert_eq!(rep.present.len(), 4);
    // The other direction, into an empty store: the generic restore.
    let lb = StoreLevel::new(&back.store).unwrap();
    let rep = fill(&p, &lb, "/c/3", None).unwrap();
    assert_eq!(rep.copied, ["/c/3/a", "/c/3/b"]);
    assert_eq!(read_store(&back.store, "/c/3/a"), data(2, CS + 2));
    assert!(back.store.stat("/c/1/a").is_err());
    // evict: the store copy is freed once its PFS copy is published.
    put(&ts.store, "/c/5/a", &data(20, CS));
    let evict = DrainPolicy {
        every: 1,
        evict: true,
    };
    let rep = fill(&local, &p, "/c/5", Some(&evict)).unwrap();
    assert_eq!(rep.released, ["/c/5/a"]);
    assert!(ts.store.stat("/c/5/a").is_err());
    assert_eq!(std::fs::read(dest.path().join("c/5/a")).unwrap(), data(20, CS));
}

#[test]
fn drain_measures_the_levels_costs_and_publishes_them_in_the_status() {
    let ts = store("cost", |_| {});
    let mut total = 0;
    for i in 0..3 {
        let d = data(i, 4 * CS + 100 * i as usize);
        total += d.len() as u64;
        put(&ts.store, &format!("/k/f{i}"), &d);
    }
    let dest = tempfile::tempdir().unwrap();
    let agent = Agent::new(&ts.store, cfg(dest.path())).unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 3);
    let (local, p) = agent.levels();
    assert_eq!((local.cost().gets, local.cost().get_bytes), (3, total));
    assert_eq!((p.cost().puts, p.cost().put_bytes), (3, total));
    let st = status::status(&ts.name).unwrap();
    assert_eq!(st.levels.len(), 2);
    assert_eq!(
        (st.levels[0].level.as_str(), st.levels[1].level.as_str()),
        ("local", "pfs")
    );
    assert_eq!(st.levels[1].puts, 3);
}

#[test]
fn the_pfs_level_passes_the_level_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let level = pfs(dir.path(), "conf");
    ckptfs_level::conformance::run(&ckptfs_level::conformance::Harness::new(
        &level, CS as u64, "/conf",
    ))
    .unwrap();
}
