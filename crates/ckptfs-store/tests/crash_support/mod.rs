//! Helpers shared by the crash test files (`crash.rs`: random SIGKILLs; `crash_points.rs`:
//! the store's named crash points, checksums, forks, failed writes).
#![allow(dead_code)]

use crate::support::*;
use ckptfs_store::{FsckReport, OpenFlags, Store};
use std::collections::HashSet;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

/// Chunk size of the crash tests' stores.
pub const CHUNK: u64 = 64 << 10;

/// Problems a SIGKILLed writer may legitimately leave behind in the file it had open:
/// a chunk allocated for a write that never reached the size, a chunk count updated after
/// the allocation, a checksum not yet recomputed after an overwrite.
const DEAD_WRITER_LEFTOVERS: &[&str] = &["chunk-past-eof", "bad-chunk-count", "stale-checksum"];

/// Assert that `rep` only lists leftovers of dead writers, each about a file it also
/// lists as incomplete.
pub fn assert_only_dead_writer_leftovers(rep: &FsckReport) {
    for p in &rep.problems {
        assert!(
            DEAD_WRITER_LEFTOVERS.contains(&p.kind),
            "unexpected fsck problem after SIGKILL: {p:?}"
        );
        assert!(
            rep.incomplete
                .iter()
                .any(|f| p.detail.starts_with(&format!("{f}:"))),
            "fsck problem {p:?} is not about a file left incomplete ({:?})",
            rep.incomplete
        );
    }
}

/// fsck(true) repairs everything fsck(false) reported; afterwards the store is clean.
pub fn repair_and_assert_clean(store: &Store) -> FsckReport {
    let before = store.fsck(false);
    let rep = store.fsck(true);
    assert!(rep.is_clean(), "fsck --repair left problems: {:?}", rep.problems);
    assert_eq!(
        rep.problems.iter().map(|p| p.kind).collect::<Vec<_>>(),
        before.problems.iter().map(|p| p.kind).collect::<Vec<_>>(),
        "repair saw other problems than the check"
    );
    let after = store.fsck(false);
    assert!(
        after.problems.is_empty(),
        "problems after repair: {:?}",
        after.problems
    );
    assert_eq!(store.info().state, "clean");
    before
}

/// Write files with a child process (so that later reads verify checksums).
pub fn setup_files(store: &str, dir: &str, count: u64, size: u64, seed: u64) -> Spec {
    let mut s = Spec::new(store, "files");
    s.dir = dir.into();
    s.count = count;
    s.min = size;
    s.size = size;
    s.blocks = vec![40_000];
    s.seed = seed;
    let mut p = Proc::spawn(&s, &[]);
    let st = p
        .wait_timeout(Duration::from_secs(30))
        .expect("setup writer hangs");
    p.assert_no_error();
    assert!(st.success(), "setup writer: {st}");
    s
}

/// Run `op` in a child with `CKPTFS_CRASH_AT=point` and assert it died there.
pub fn crash_at(point: &str, store: &str, op: &str, path: &str, to: &str, size: u64, seed: u64) {
    let mut s = Spec::new(store, "op");
    s.op = op.into();
    s.path = path.into();
    s.to = to.into();
    s.size = size;
    s.seed = seed;
    let mut p = Proc::spawn(&s, &[("CKPTFS_CRASH_AT", point)]);
    let st = p
        .wait_timeout(Duration::from_secs(30))
        .expect("crashing child hangs");
    p.assert_no_error();
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "child should have SIGKILLed itself at {point}: {st}, {:?}",
        p.lines()
    );
}

/// The scenario of one crash point: two files written and closed first (`/keep`), a
/// victim file `/v/f0` of `victim_size` bytes; `op` on the victim dies at `point`. Then a
/// fresh attach must not block, `/keep` must be intact, `check` holds, fsck(true) repairs
/// what fsck(false) reports (only `allowed` kinds), and the store allocates again.
pub fn crash_point_case(
    point: &'static str,
    victim_size: u64,
    op: &str,
    to: &str,
    op_size: u64,
    allowed: &'static [&'static str],
    check: impl FnOnce(&Store, &Spec) + Send + 'static,
) {
    let t = TempStore::new(
        &format!("cp-{point}-{op}-{victim_size}"),
        16 << 20,
        CHUNK,
        64,
        None,
    );
    let keep = setup_files(&t.name, "/keep", 2, 150_000, 11);
    let victim = setup_files(&t.name, "/v", 2, victim_size, 22);
    let target = if to.is_empty() {
        String::new()
    } else {
        victim.file_path(1)
    };
    let path = if op == "create" || op == "symlink" {
        format!("{}/new", victim.dir)
    } else {
        victim.file_path(0)
    };
    crash_at(point, &t.name, op, &path, &target, op_size, victim.file_seed(0));
    let name = t.name.clone();
    with_timeout(30, &format!("attaching after a crash at {point}"), move || {
        let store = Store::attach(&ckptfs_store::StoreOptions::named(&name)).unwrap();
        assert!(store.info().recoveries > 0 || store.info().state == "dirty");
        for i in 0..2 {
            assert_file_is(&store, &keep.file_path(i), keep.file_seed(i), 150_000);
        }
        check(&store, &victim);
        let rep = store.fsck(false);
        for p in &rep.problems {
            assert!(allowed.contains(&p.kind), "crash at {point}: unexpected {p:?}");
        }
        repair_and_assert_clean(&store);
        assert_chunk_accounting(&store);
        // Allocation and naming work again, and new files do not disturb old ones.
        store.mkdir("/after", 0o755).unwrap();
        let mut inos = HashSet::new();
        for i in 0..4 {
            let p = format!("/after/n{i}");
            let mut f = store.open(&p, OpenFlags::CREATE, 0o644).unwrap();
            f.write_all(&pattern(i, 0, 100_000)).unwrap();
            f.close().unwrap();
            assert!(inos.insert(store.stat(&p).unwrap().ino));
            assert_eq!(read_all(&store, &p).unwrap(), pattern(i, 0, 100_000));
        }
        for i in 0..2 {
            assert_file_is(&store, &keep.file_path(i), keep.file_seed(i), 150_000);
        }
        assert!(store.fsck(false).problems.is_empty());
        assert_chunk_accounting(&store);
    });
}
