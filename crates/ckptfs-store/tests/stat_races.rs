//! Readers racing with unlink: stat by inode, stat by path, lookup, directory listings,
//! paths and the whole-store listing, run while other threads create and remove files and
//! directories. A reader may see a name exist or not (success or ENOENT, and ENOTDIR for
//! a directory call on an inode that is a file); it must never take a slot freed under it
//! for a damaged record (EIO, "record checksum mismatch"), which is what a reader that
//! checked the slot before taking the namespace lock used to do.

mod support;

use ckptfs_store::{FileKind, OpenFlags, Store, StoreError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

/// Runs the writer when this executable is spawned as a child (see `support`); unused here.
#[test]
fn child_entry() {
    support::child_entry();
}

const MAX_FILES: u32 = 64;

/// Create and remove files and directories under `/d` until `stop`.
fn churn(store: Store, k: u32, stop: Arc<AtomicBool>) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let f = format!("/d/f{k}-{}", i % 4);
        let mut h = store.open(&f, OpenFlags::CREATE, 0o644).unwrap();
        h.write_all(&pattern(i, 0, 10)).unwrap();
        h.close().unwrap();
        let d = format!("/d/s{k}-{}", i % 4);
        store.mkdir(&d, 0o755).unwrap();
        store.unlink(&f).unwrap();
        store.rmdir(&d).unwrap();
        i += 1;
    }
}

/// What the readers saw: successes and ENOENTs of `stat_ino` (both must occur for the
/// test to have raced at all).
#[derive(Default)]
struct Seen {
    ok: AtomicU64,
    enoent: AtomicU64,
}

fn allowed(what: &str, r: Result<(), StoreError>, also: &[i32]) -> Option<i32> {
    match r {
        Ok(()) => None,
        Err(e) if e.errno() == libc::ENOENT || also.contains(&e.errno()) => Some(e.errno()),
        Err(e) => panic!(
            "{what}: {e} (errno {}): only success or ENOENT may race with unlink",
            e.errno()
        ),
    }
}

fn read_all(store: Store, stop: Arc<AtomicBool>, seen: Arc<Seen>) {
    while !stop.load(Ordering::Relaxed) {
        for ino in 2..=MAX_FILES as u64 {
            match allowed("stat_ino", store.stat_ino(ino).map(|_| ()), &[]) {
                None => seen.ok.fetch_add(1, Ordering::Relaxed),
                Some(_) => seen.enoent.fetch_add(1, Ordering::Relaxed),
            };
            allowed("lookup", store.lookup(ino, "f0-0").map(|_| ()), &[libc::ENOTDIR]);
            allowed(
                "read_dir_ino",
                store.read_dir_ino(ino).map(|_| ()),
                &[libc::ENOTDIR],
            );
            allowed("path_of", store.path_of(ino).map(|_| ()), &[]);
        }
        for k in 0..2 {
            for j in 0..4 {
                allowed("stat", store.stat(&format!("/d/f{k}-{j}")).map(|_| ()), &[]);
                allowed("stat", store.stat(&format!("/d/s{k}-{j}")).map(|_| ()), &[]);
            }
        }
        for (p, st) in store.list_all() {
            let dir = p.starts_with("/d/s") || p == "/d";
            assert_eq!(
                st.kind == FileKind::Dir,
                dir,
                "list_all: {p} listed as {:?}",
                st.kind
            );
        }
    }
}

#[test]
fn stat_lookup_and_listings_racing_with_unlink_see_success_or_enoent() {
    let t = TempStore::new("statrace", 16 << 20, 64 << 10, MAX_FILES, None);
    t.attach().mkdir("/d", 0o755).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let mut threads = Vec::new();
    for k in 0..2 {
        let (s, stop) = (t.attach(), stop.clone());
        threads.push(std::thread::spawn(move || churn(s, k, stop)));
    }
    for _ in 0..2 {
        let (s, stop, seen) = (t.attach(), stop.clone(), seen.clone());
        threads.push(std::thread::spawn(move || read_all(s, stop, seen)));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) && !threads.iter().any(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for h in threads {
        if let Err(p) = h.join() {
            std::panic::resume_unwind(p);
        }
    }
    let (ok, enoent) = (
        seen.ok.load(Ordering::Relaxed),
        seen.enoent.load(Ordering::Relaxed),
    );
    assert!(
        ok > 0 && enoent > 0,
        "the readers never raced (ok {ok}, ENOENT {enoent})"
    );
    // Nothing was left behind and nothing is damaged.
    let s = t.attach();
    assert!(s.read_dir("/d").unwrap().is_empty());
    let rep = s.fsck(false);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
}
