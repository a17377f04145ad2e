//! A partner's memory as a level (`PartnerLevel`), against a real peer daemon: the same
//! behaviour the store and PFS levels are held to (crates/ckptfs-level/tests,
//! crates/ckptfs-agent/tests/levels.rs). Copies go both ways byte-identical and
//! metered, the listing carries each copy's CRC32C (so a second fill finds the same
//! content present), a damaged copy is EIO with nothing published, an uncommitted
//! writer leaves nothing listed, delete removes only the version given.
//!
//! The level is synchronous (it runs its own runtime): the tests call it from
//! `spawn_blocking`, as the daemon does.

mod support;

use ckptfs_agent::mover::fill;
use ckptfs_cluster::Scheme;
use ckptfs_level::{copy, IoPart, Level, LevelError, Version};
use ckptfs_node::{partner_store, PartnerLevel};
use ckptfs_store::level::StoreLevel;
use ckptfs_store::Store;
use std::sync::Arc;
use support::*;

const CS: usize = 64 << 10;

/// Flip one byte of chunk `logical` of `path` in `s` (a damaged copy).
fn flip(s: &Store, path: &str, logical: u32) {
    let c = s
        .chunk_list(path)
        .unwrap()
        .into_iter()
        .find(|c| c.logical == logical)
        .unwrap();
    let ckptfs_store::ChunkLocation::Memory(off) = c.location else {
        panic!("spilled")
    };
    let region = s.data_region();
    // SAFETY: off + 9 lies inside the data region of this test's own store (the chunk
    // list says so); the daemon holding it is idle (the copy is complete, nothing reads
    // or writes it now).
    unsafe { *(region.base as *mut u8).add(off as usize + 9) ^= 0x20 };
}

/// Every file name in `s`, system namespace included.
fn all_files(s: &Store) -> Vec<String> {
    s.list_all_system()
        .into_iter()
        .filter(|(_, st)| st.kind == ckptfs_store::FileKind::File)
        .map(|(p, _)| p)
        .collect()
}

async fn up(tc: &TestCluster, id: &str) {
    wait_for("the daemon's status", || {
        ckptfs_node::status(&tc.store_opts(id).name).is_some()
    })
    .await;
}

/// Run `f` off the async threads (the level blocks).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_to_and_from_a_partner_are_byte_identical_listed_with_their_crc_and_metered() {
    let tc = Arc::new(TestCluster::new("hpv-io", 2, Scheme::Ring, 1));
    let d = Daemon::start(tc.config("node2"));
    up(&tc, "node2").await;
    let a = bytes(3 * CS + 12_345, 1);
    let b = bytes(CS, 2);
    let s1 = tc.store("node1");
    write(&s1, "/ckpt/1/a", &a);
    write(&s1, "/ckpt/1/b", &b);
    write(&s1, "/other/c", &bytes(10, 3));
    let t = tc.clone();
    blocking(move || {
        let s1 = t.store("node1");
        let local = StoreLevel::new(&s1).unwrap();
        let p = PartnerLevel::new(&t.cluster, "node1", "node2").unwrap();
        assert_eq!(p.name(), "partner:node2");
        // Out: store -> partner, by the mover.
        let rep = fill(&local, &p, "/ckpt", None).unwrap();
        assert_eq!(rep.copied, ["/ckpt/1/a", "/ckpt/1/b"], "{rep:?}");
        assert!(rep.failed.is_empty(), "{rep:?}");
        let s2 = t.store("node2");
        assert_eq!(copy_on(&s2, "node1", "/ckpt/1/a").unwrap(), a);
        assert_eq!(copy_on(&s2, "node1", "/ckpt/1/b").unwrap(), b);
        assert!(copy_on(&s2, "node1", "/other/c").is_none());
        // The listing carries each copy's whole-file CRC32C, computed by the holder:
        // the same content as the source, so a second pass copies nothing.
        let listed = p.list("/").unwrap();
        assert_eq!(listed.len(), 2);
        for s in &listed {
            let here = local.stat(&s.path).unwrap().unwrap();
            assert!(s.version.crc32c.is_some(), "{s:?}");
            assert!(s.version.same_content(&here.version), "{s:?} vs {here:?}");
        }
        let rep = fill(&local, &p, "/ckpt", None).unwrap();
        assert!(rep.copied.is_empty() && rep.present.len() == 2, "{rep:?}");
        assert_eq!(p.cost().puts, 2);
        assert_eq!(p.cost().put_bytes, (a.len() + b.len()) as u64);
        // verify reads the copy back and checks every chunk.
        let want = local.stat("/ckpt/1/a").unwrap().unwrap().version;
        let v = p.verify("/ckpt/1/a", &want).unwrap();
        assert!(v.version.same_content(&want));
        // In: the node loses its files, they come back from the partner.
        s1.unlink("/ckpt/1/a").unwrap();
        s1.unlink("/ckpt/1/b").unwrap();
        let rep = fill(&p, &local, "/", None).unwrap();
        assert_eq!(rep.copied, ["/ckpt/1/a", "/ckpt/1/b"], "{rep:?}");
        assert_eq!(read(&s1, "/ckpt/1/a").unwrap(), a);
        assert_eq!(read(&s1, "/ckpt/1/b").unwrap(), b);
        assert_eq!(s1.stat("/ckpt/1/a").unwrap().mode & 0o777, 0o644);
        assert_eq!(p.cost().gets, 2);
        assert_eq!(local.cost().puts, 2);
        // No temporary left on either side.
        assert!(all_files(&s1).iter().all(|n| !n.contains(".ckptfs-restore")));
        assert!(all_files(&s2)
            .iter()
            .all(|n| !n.starts_with(partner_store::INCOMING_DIR)));
        // A file the partner does not hold: ENOENT.
        let e = p.get("/ckpt/none").err().expect("no such copy");
        assert_eq!(e.errno(), libc::ENOENT, "{e}");
    })
    .await;
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_partner_copy_is_eio_and_nothing_is_published() {
    let tc = Arc::new(TestCluster::new("hpv-bad", 2, Scheme::Ring, 1));
    let d = Daemon::start(tc.config("node2"));
    up(&tc, "node2").await;
    let a = bytes(3 * CS, 4);
    write(&tc.store("node1"), "/ckpt/bad", &a);
    write(&tc.store("node1"), "/ckpt/good", &bytes(1000, 5));
    let t = tc.clone();
    blocking(move || {
        let s1 = t.store("node1");
        let local = StoreLevel::new(&s1).unwrap();
        let p = PartnerLevel::new(&t.cluster, "node1", "node2").unwrap();
        let rep = fill(&local, &p, "/", None).unwrap();
        assert_eq!(rep.copied.len(), 2, "{rep:?}");
        let want = local.stat("/ckpt/bad").unwrap().unwrap().version;
        let s2 = t.store("node2");
        flip(&s2, &partner_store::copy_path("node1", "/ckpt/bad"), 1);
        s1.unlink("/ckpt/bad").unwrap();
        let e = copy(&p, &local, "/ckpt/bad").unwrap_err();
        assert!(matches!(e, LevelError::Corrupt { chunk: 1, .. }), "{e}");
        assert_eq!(e.errno(), libc::EIO);
        assert!(
            e.to_string().contains("/ckpt/bad") && e.to_string().contains("partner:node2"),
            "{e}"
        );
        // Nothing under the final name, no temporary, nothing measured.
        assert!(s1.stat("/ckpt/bad").is_err());
        assert!(
            all_files(&s1).iter().all(|n| !n.contains(".ckptfs-restore")),
            "{:?}",
            all_files(&s1)
        );
        assert_eq!(local.cost().puts, 0);
        let e = p.verify("/ckpt/bad", &want).unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "{e}");
        // The level reconnects after the broken read: the good copy still comes back.
        s1.unlink("/ckpt/good").unwrap();
        copy(&p, &local, "/ckpt/good").unwrap();
        assert_eq!(read(&s1, "/ckpt/good").unwrap(), bytes(1000, 5));
    })
    .await;
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncommitted_writer_leaves_nothing_and_delete_removes_only_the_version_given() {
    let tc = Arc::new(TestCluster::new("hpv-del", 2, Scheme::Ring, 1));
    let d = Daemon::start(tc.config("node2"));
    up(&tc, "node2").await;
    write(&tc.store("node1"), "/x/f", &bytes(CS + 1, 7));
    let t = tc.clone();
    blocking(move || {
        let local = StoreLevel::new(&t.store("node1")).unwrap();
        let p = PartnerLevel::new(&t.cluster, "node1", "node2").unwrap();
        let s = local.stat("/x/f").unwrap().unwrap();
        // A writer dropped before commit: nothing listed (the partner drops its half copy).
        {
            let mut w = p.put(&s).unwrap();
            w.write_at(&[IoPart::Buf(b"partial")], 0).unwrap();
        }
        assert!(p.list("/").unwrap().is_empty());
        assert!(p.stat("/x/f").unwrap().is_none());
        copy(&local, &p, "/x/f").unwrap();
        // Another content is not deleted.
        let other = Version {
            crc32c: s.version.crc32c.map(|c| c ^ 1),
            ..s.version
        };
        assert!(!p.delete("/x/f", &other).unwrap());
        assert!(copy_on(&t.store("node2"), "node1", "/x/f").is_some());
        assert!(p.delete("/x/f", &s.version).unwrap());
        assert!(copy_on(&t.store("node2"), "node1", "/x/f").is_none());
        assert!(!p.delete("/x/f", &s.version).unwrap());
        assert!(p.stat("/x/f").unwrap().is_none());
    })
    .await;
    // The half copy of the dropped writer is gone too.
    let s2 = tc.store("node2");
    wait_for("the half copy to go", || {
        all_files(&s2)
            .iter()
            .all(|n| !n.starts_with(partner_store::INCOMING_DIR))
    })
    .await;
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partner_level_passes_the_level_conformance_suite() {
    let tc = Arc::new(TestCluster::new("hpv-conf", 2, Scheme::Ring, 1));
    let d = Daemon::start(tc.config("node2"));
    up(&tc, "node2").await;
    let t = tc.clone();
    blocking(move || {
        let p = PartnerLevel::new(&t.cluster, "node1", "node2").unwrap();
        let s2 = t.store("node2");
        // Damage: one byte of the holder's copy, in the partner's own store.
        let damage = |path: &str| -> std::io::Result<()> {
            flip(&s2, &partner_store::copy_path("node1", path), 1);
            Ok(())
        };
        let mut h = ckptfs_level::conformance::Harness::new(&p, CS as u64, "/conf");
        h.damage = Some(&damage);
        ckptfs_level::conformance::run(&h).unwrap();
    })
    .await;
    d.stop().await;
}
