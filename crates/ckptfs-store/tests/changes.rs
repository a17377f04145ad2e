//! The change counters a cache outside the segment (the FUSE daemon) polls: every change
//! moves `change_seq`, and `changed_since` names the inodes and directory entries changed.

mod support;

use ckptfs_store::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use support::*;

/// Runs the writer when this executable is spawned as a child (see `support`).
#[test]
fn child_entry() {
    support::child_entry();
}

fn inos(c: &Changes) -> HashSet<u64> {
    c.inodes.iter().map(|i| i.ino).collect()
}

fn names(c: &Changes) -> Vec<(u64, String)> {
    c.names.iter().map(|n| (n.parent_ino, n.name.clone())).collect()
}

#[test]
fn every_namespace_and_data_change_moves_the_sequence_and_is_listed() {
    let t = TempStore::new("chg-ops", 4 << 20, 64 << 10, 64, None);
    let s = t.attach();
    // Another mapping, as another process would have.
    let other = t.attach();
    let mut seen = other.change_seq();
    let mut step = |what: &str| -> Changes {
        let c = other.changed_since(seen);
        assert!(c.seq > seen, "{what} did not move the change sequence");
        assert!(c.complete, "{what}: {c:?}");
        seen = c.seq;
        assert_eq!(other.changed_since(seen).inodes.len(), 0, "{what}: nothing after");
        c
    };

    let d = s.mkdir("/d", 0o755).unwrap();
    let c = step("mkdir");
    assert_eq!(inos(&c), HashSet::from([ROOT_INO, d.ino]));
    assert_eq!(names(&c), vec![(ROOT_INO, "d".to_string())]);

    let mut f = s.open("/d/f", OpenFlags::CREATE, 0o644).unwrap();
    let fino = f.ino();
    let c = step("create");
    assert_eq!(inos(&c), HashSet::from([d.ino, fino]));
    assert_eq!(names(&c), vec![(d.ino, "f".to_string())]);

    f.write_all(&pattern(1, 0, 5)).unwrap();
    let c = step("write");
    assert_eq!(inos(&c), HashSet::from([fino]));
    assert!(c.names.is_empty());
    f.close().unwrap();

    // An overwrite that keeps the size is a change too (page caches hold the old bytes).
    let mut f = s
        .open(
            "/d/f",
            OpenFlags {
                write: true,
                ..Default::default()
            },
            0,
        )
        .unwrap();
    f.write_all(b"J").unwrap();
    f.close().unwrap();
    assert_eq!(inos(&step("overwrite")), HashSet::from([fino]));

    s.truncate("/d/f", 2).unwrap();
    assert_eq!(inos(&step("truncate")), HashSet::from([fino]));
    s.chmod("/d/f", 0o600).unwrap();
    assert_eq!(inos(&step("chmod")), HashSet::from([fino]));
    s.set_times("/d/f", 1, 2).unwrap();
    assert_eq!(inos(&step("set_times")), HashSet::from([fino]));
    s.chown("/d/f", 0, 0).unwrap();
    assert_eq!(inos(&step("chown")), HashSet::from([fino]));
    let o = s.open("/d/f", OpenFlags::CREATE, 0).unwrap();
    assert_eq!(inos(&step("O_TRUNC")), HashSet::from([fino]));
    o.close().unwrap();

    // Rename over an existing file: the old name, the new name and the replaced file.
    let v = s.open("/victim", OpenFlags::CREATE, 0o644).unwrap();
    let vino = v.ino();
    v.close().unwrap();
    step("create victim");
    s.rename("/d/f", "/victim").unwrap();
    let c = step("rename");
    let n = names(&c);
    assert!(n.contains(&(d.ino, "f".to_string())), "{n:?}");
    assert!(n.contains(&(ROOT_INO, "victim".to_string())), "{n:?}");
    assert!(inos(&c).is_superset(&HashSet::from([ROOT_INO, d.ino, fino, vino])));
    let gone = c.inodes.iter().find(|i| i.ino == vino).unwrap();
    assert!(!gone.exists, "the replaced inode is reported freed: {gone:?}");

    s.unlink("/victim").unwrap();
    let c = step("unlink");
    assert_eq!(names(&c), vec![(ROOT_INO, "victim".to_string())]);
    assert!(inos(&c).contains(&fino));
    s.rmdir("/d").unwrap();
    let c = step("rmdir");
    assert_eq!(names(&c), vec![(ROOT_INO, "d".to_string())]);

    // Reads and stats change nothing.
    let before = s.change_seq();
    let _ = s.stat("/");
    let _ = s.read_dir("/");
    assert_eq!(s.change_seq(), before);
}

#[test]
fn a_writer_process_changes_are_seen_by_a_poller_in_another_process() {
    let t = TempStore::new("chg-proc", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let start = s.change_seq();
    let mut spec = Spec::new(&t.name, "files");
    spec.dir = "/w".into();
    spec.count = 3;
    spec.min = 10_000;
    spec.size = 10_000;
    spec.blocks = vec![4096];
    let mut p = Proc::spawn(&spec, &[]);
    let st = p
        .wait_timeout(std::time::Duration::from_secs(30))
        .expect("writer hangs");
    p.assert_no_error();
    assert!(st.success());
    let c = s.changed_since(start);
    assert!(c.complete);
    for j in 0..3 {
        let path = spec.file_path(j);
        let ino = s.stat(&path).unwrap().ino;
        assert!(inos(&c).contains(&ino), "{path} not reported: {c:?}");
        let name = path.rsplit('/').next().unwrap().to_string();
        assert!(c.names.iter().any(|n| n.name == name && n.ino == ino), "{path}");
    }
}

#[test]
fn a_poller_left_behind_by_the_ring_or_a_repair_is_told_to_drop_everything() {
    let t = TempStore::new("chg-ring", 4 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let old = s.change_seq();
    s.open("/x", OpenFlags::CREATE, 0o644).unwrap().close().unwrap();
    let recent = s.change_seq();
    // Enough name changes to overwrite the whole ring.
    for _ in 0..(ckptfs_store::layout::CHANGE_LOG / 2 + 1) {
        s.rename("/x", "/y").unwrap();
        s.rename("/y", "/x").unwrap();
    }
    assert!(!s.changed_since(old).complete);
    assert!(!s.changed_since(recent).complete);
    let now = s.change_seq();
    s.mkdir("/z", 0o755).unwrap();
    let c = s.changed_since(now);
    assert!(c.complete);
    assert_eq!(names(&c), vec![(ROOT_INO, "z".to_string())]);
    // A repair may change the namespace without logging: pollers start over.
    let now = s.change_seq();
    s.fsck(true);
    assert!(!s.changed_since(now).complete);
}

/// A writer thread and a poller race. A write started after the poller had finished P0
/// polls and completed before it had finished P1 + 1 (poll P1 may have read the sequence
/// before the write) is reported by one of polls P0 to P1 + 1: the first poll that reads
/// the sequence after the write's change reports it. Never lost between polls.
#[test]
fn concurrent_writes_are_never_missed_between_two_polls() {
    let t = TempStore::new("chg-race", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let files: Vec<u64> = (0..8)
        .map(|i| {
            let f = s.open(&format!("/f{i}"), OpenFlags::CREATE, 0o644).unwrap();
            f.ino()
        })
        .collect();
    // Taken before the writer starts: its first write may come before the first poll.
    let mut seq = s.change_seq();
    let polls_done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, polls_done, stop) = (t.attach(), polls_done.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut hs: Vec<FileHandle> = (0..8)
                .map(|i| {
                    let w = OpenFlags {
                        write: true,
                        ..Default::default()
                    };
                    s.open(&format!("/f{i}"), w, 0).unwrap()
                })
                .collect();
            let mut writes = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let i = (n * 7 % 8) as usize;
                let p0 = polls_done.load(Ordering::SeqCst);
                hs[i].pwrite(&n.to_le_bytes(), 0).unwrap();
                let p1 = polls_done.load(Ordering::SeqCst);
                writes.push((i, p0, p1));
                n += 1;
            }
            writes
        })
    };
    let mut reports: Vec<HashSet<u64>> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(700);
    while std::time::Instant::now() < deadline || reports.len() < 20 {
        let c = s.changed_since(seq);
        assert!(c.complete);
        reports.push(inos(&c));
        polls_done.fetch_add(1, Ordering::SeqCst);
        seq = c.seq;
    }
    stop.store(true, Ordering::SeqCst);
    let writes = writer.join().unwrap();
    // One more poll: writes that completed after the last one are reported by it.
    reports.push(inos(&s.changed_since(seq)));
    assert!(writes.len() > 100, "{} writes", writes.len());
    for &(i, p0, p1) in &writes {
        assert!(
            reports[p0..=(p1 + 1).min(reports.len() - 1)]
                .iter()
                .any(|r| r.contains(&files[i])),
            "a write to /f{i} done during polls {p0} to {p1} was reported by none of polls {p0} to {}",
            p1 + 1
        );
    }
}

#[test]
fn a_last_writer_closing_a_file_wakes_a_waiter_at_once() {
    let t = TempStore::new("chg-close", 4 << 20, 64 << 10, 64, None);
    let s = t.attach();
    // The node daemon's side: another mapping, as another process would have.
    let waiter = t.attach();
    let seen = waiter.close_seq();
    let (tx, rx) = std::sync::mpsc::channel();
    let th = std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        let now = waiter.wait_for_close(seen, std::time::Duration::from_secs(60));
        tx.send((now, t0.elapsed())).unwrap();
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    // Writes, a reader's close and a second writer's close wake nobody: only the last
    // writer's close does.
    let mut a = s.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    let b = s
        .open("/f", OpenFlags::from_posix(libc::O_WRONLY).unwrap(), 0)
        .unwrap();
    a.write_all(b"data").unwrap();
    s.open("/f", OpenFlags::READ, 0).unwrap().close().unwrap();
    a.close().unwrap();
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(300)).is_err(),
        "woken before the last writer closed"
    );
    assert_eq!(s.close_seq(), seen, "only a last writer's close counts");
    b.close().unwrap();
    // Woken by the close, not by the 60 s timeout.
    let (now, waited) = rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap();
    assert_eq!(now, seen.wrapping_add(1));
    assert!(waited < std::time::Duration::from_secs(30), "{waited:?}");
    th.join().unwrap();
    assert_eq!(s.stat("/f").unwrap().state, WriteState::Complete);
    // Nothing to wait for when it already moved.
    assert_eq!(s.wait_for_close(seen, std::time::Duration::from_secs(60)), now);
}

#[test]
fn changes_among_given_inodes_list_those_and_the_named_ones_only() {
    let t = TempStore::new("chg-among", 4 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let a = s.mkdir("/a", 0o755).unwrap();
    let b = s.mkdir("/b", 0o755).unwrap();
    let mut f = s.open("/a/f", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(1, 0, 5)).unwrap();
    f.close().unwrap();
    let fino = s.stat("/a/f").unwrap().ino;
    let start = s.change_seq();
    // Data of /a/f, mode of /b, a new name in /b.
    let w = OpenFlags {
        write: true,
        ..Default::default()
    };
    let mut f = s.open("/a/f", w, 0).unwrap();
    f.write_all(&pattern(1, 1, 5)).unwrap();
    f.close().unwrap();
    s.chmod("/b", 0o700).unwrap();
    let g = s.mkdir("/b/g", 0o755).unwrap();

    let all = s.changed_since(start);
    assert_eq!(inos(&all), HashSet::from([fino, b.ino, g.ino]));
    // Asked about /a/f only: it, plus the inodes of the changed names (/b and /b/g).
    let some = s.changed_since_among(start, Some(|| vec![fino, a.ino, u64::MAX, 0]));
    assert_eq!(inos(&some), HashSet::from([fino, b.ino, g.ino]));
    assert_eq!(names(&some), names(&all));
    assert_eq!(some.complete, all.complete);
    // Asked about nothing: only what the names refer to.
    let none = s.changed_since_among(start, Some(Vec::new));
    assert_eq!(inos(&none), HashSet::from([b.ino, g.ino]));
    // The same answer for the same inodes as the full scan.
    for c in [&some, &none] {
        for i in &c.inodes {
            assert!(all.inodes.contains(i), "{i:?}");
        }
    }
}
