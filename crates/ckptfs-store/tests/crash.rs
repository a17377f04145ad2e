//! Crash semantics of the node store under random SIGKILLs: writer processes are killed at
//! random times, then a process that attaches afterwards checks that (a) every file closed
//! before the kill reads back byte-identical, (b) a file open for writing at the kill is
//! incomplete and readable up to its last completed write, (c) fsck finds nothing but the
//! expected leftovers of a dead writer and repairs them. The store's named crash points,
//! checksums and forks are in `crash_points.rs`.

mod crash_support;
mod support;

use ckptfs_store::{FileKind, Store, WriteState};
use crash_support::*;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};
use support::*;

/// Runs the writer when this executable is spawned as a child (see `support`).
#[test]
fn child_entry() {
    support::child_entry();
}

// ------------------------------------------------------------------ random SIGKILLs

/// What a writer child reported before it was killed.
struct Tracked {
    spec: Spec,
    /// Files reported closed (under their current name) with their size.
    closed: HashMap<String, u64>,
    /// Files reported unlinked.
    unlinked: HashSet<String>,
    /// Size of the held file after its last reported write.
    held: u64,
    /// The file whose unlink may have been under way at the kill (it may be gone).
    pending_unlink: Option<String>,
    /// Its last lines, for failure messages.
    tail: Vec<String>,
}

impl Tracked {
    fn new(spec: Spec, lines: &[String]) -> Tracked {
        let mut t = Tracked {
            spec,
            closed: HashMap::new(),
            unlinked: HashSet::new(),
            held: 0,
            pending_unlink: None,
            tail: lines.iter().rev().take(6).rev().cloned().collect(),
        };
        // After file i reaches its final name, the writer unlinks file i - keep.
        let unlink_next = |t: &mut Tracked, fin: &str| {
            let i: u64 = fin.rsplit("/f").next().unwrap().parse().unwrap();
            if t.spec.keep > 0 && i >= t.spec.keep {
                t.pending_unlink = Some(t.spec.file_path(i - t.spec.keep));
            }
        };
        for l in lines {
            let w: Vec<&str> = l.split(' ').collect();
            match w[0] {
                "closed" => {
                    t.closed.insert(w[1].into(), w[2].parse().unwrap());
                    if !w[1].ends_with(".tmp") && !w[1].ends_with("/held") {
                        unlink_next(&mut t, w[1]);
                    }
                }
                "renamed" => {
                    let s = t.closed.remove(w[1]).expect("renamed a file never closed");
                    t.closed.insert(w[2].into(), s);
                    unlink_next(&mut t, w[2]);
                }
                "unlinked" => {
                    t.closed.remove(w[1]);
                    t.unlinked.insert(w[1].into());
                    t.pending_unlink = None;
                }
                "held" => t.held = w[2].parse().unwrap(),
                "error" => panic!("writer for {} failed: {l}", t.spec.dir),
                _ => {} // test-harness chatter
            }
        }
        t
    }

    /// Check the writer's directory after its death; returns its incomplete files.
    fn check(&self, store: &Store) -> Vec<String> {
        let spec = &self.spec;
        let mut incomplete = Vec::new();
        let entries = match store.read_dir(&spec.dir) {
            Ok(e) => e,
            Err(e) => {
                // Killed before its mkdir returned.
                assert!(self.closed.is_empty(), "{}: {e}", spec.dir);
                return incomplete;
            }
        };
        let names: HashSet<String> = entries.iter().map(|e| e.name.clone()).collect();
        for e in &entries {
            let path = format!("{}/{}", spec.dir, e.name);
            assert_eq!(e.kind, FileKind::File, "{path}");
            let st = store.stat(&path).unwrap();
            if e.name == "held" {
                if st.state == WriteState::Incomplete {
                    let n = assert_prefix_is(store, &path, spec.held_seed(), spec.hold);
                    assert!(
                        n >= self.held,
                        "{path}: {n} bytes, but {} were written",
                        self.held
                    );
                    incomplete.push(path);
                } else {
                    // Killed inside open() before it registered as a writer.
                    assert_eq!(
                        (st.state, st.size, self.held),
                        (WriteState::Complete, 0, 0),
                        "{path}"
                    );
                }
                continue;
            }
            let i: u64 = e.name[1..]
                .trim_end_matches(".tmp")
                .parse()
                .unwrap_or_else(|_| panic!("unexpected file {path}"));
            let (seed, size) = (spec.file_seed(i), spec.file_size(i));
            assert!(!self.unlinked.contains(&path), "{path} was unlinked but exists");
            if let Some(&s) = self.closed.get(&path) {
                assert_eq!(s, size);
                assert_file_is(store, &path, seed, size);
            } else if st.state == WriteState::Complete {
                // Closed (or renamed) without having reported it, or created empty.
                if st.size != 0 {
                    assert_file_is(store, &path, seed, size);
                }
            } else {
                assert_eq!(st.state, WriteState::Incomplete, "{path}");
                assert_prefix_is(store, &path, seed, size);
                incomplete.push(path);
            }
        }
        for p in self.closed.keys() {
            let name = p.rsplit('/').next().unwrap();
            if let Some(fin) = name.strip_suffix(".tmp") {
                // A rename not reported is either not done or done completely.
                assert!(
                    names.contains(name) ^ names.contains(fin),
                    "{p}: exactly one of it and its final name must exist ({names:?})"
                );
            } else {
                assert!(
                    names.contains(name) || self.pending_unlink.as_ref() == Some(p),
                    "{p} was closed but is gone; dir has {names:?}; writer's last lines {:?}",
                    self.tail
                );
            }
        }
        incomplete
    }
}

fn random_writer_spec(store: &str, dir: String, rng: &mut Rng, small: bool) -> Spec {
    let mut s = Spec::new(store, "files");
    s.dir = dir;
    s.count = 0; // until killed
    if small {
        // Small files (runs of 4 KiB blocks up to 16 KiB with 64 KiB chunks), many growing
        // past that into chunks, in small writes.
        s.size = 40_000;
        s.blocks = vec![100, 512, 3000, 4096, 9000];
    } else {
        s.size = 300_000;
        s.blocks = vec![512, 4096, 65536, 100_000];
    }
    s.seed = rng.next();
    s.tmp = rng.next().is_multiple_of(2);
    s.keep = rng.range(1, 4);
    s.hold = if rng.next().is_multiple_of(3) { 0 } else { 1 << 20 };
    s
}

#[test]
fn sigkilled_writers_keep_closed_files_intact_and_open_files_incomplete() {
    let t = TempStore::new("crash-random", 32 << 20, CHUNK, 512, None);
    random_kills(&t, 14, 0x0c4a_54f5, false);
}

#[test]
fn sigkilled_small_file_writers_keep_closed_files_intact_and_open_files_incomplete() {
    let t = TempStore::new("crash-random-small", 16 << 20, CHUNK, 2048, None);
    random_kills(&t, 14, 0x5a11, true);
}

#[test]
fn sigkilled_writers_keep_spilled_files_intact_and_open_files_incomplete() {
    // 4 MiB of memory, 32 MiB of spill: most chunks of most files live in the spill file.
    let dir = tempfile::tempdir().unwrap();
    let t = TempStore::new(
        "crash-random-spill",
        4 << 20,
        CHUNK,
        512,
        Some((dir.path(), 32 << 20)),
    );
    random_kills(&t, 6, 0x5b111, false);
}

/// The data region on huge pages (a tmpfs mounted with `huge=always`, the `shm_dir`
/// setting): the same SIGKILL sweep, and the mapping really uses 2 MiB entries.
#[test]
fn sigkilled_writers_on_a_huge_page_tmpfs_keep_closed_files_intact_and_open_files_incomplete() {
    let Some(h) = HugeTmpfs::mount(128 << 20) else {
        return;
    };
    let t = TempStore::new_in(Some(h.path()), "crash-random-huge", 32 << 20, CHUNK, 512, None);
    {
        let store = t.attach();
        let info = store.info();
        assert!(info.huge_pages.enabled, "{:?}", info.huge_pages);
        assert_eq!(info.segment.parent(), Some(h.path()));
        // A fresh mapping that writes and reads a file maps its chunks with huge pages.
        let data: Vec<u8> = (0..(8u32 << 20)).map(|i| (i * 7 + 3) as u8).collect();
        let mut f = store
            .open("/huge", ckptfs_store::OpenFlags::CREATE, 0o644)
            .unwrap();
        f.write_all(&data).unwrap();
        f.close().unwrap();
        let fresh = t.attach();
        let mut back = vec![0u8; data.len()];
        let mut r = fresh.open("/huge", ckptfs_store::OpenFlags::READ, 0).unwrap();
        assert_eq!(r.pread(&mut back, 0).unwrap(), data.len());
        assert!(back == data, "bytes read back differ");
        assert!(
            pmd_mapped_kb(&info.segment) >= 2048,
            "no 2 MiB mapping of {} in /proc/self/smaps",
            info.segment.display()
        );
        drop(r);
        fresh.unlink("/huge").unwrap();
    }
    random_kills(&t, 8, 0x4a9e_9a6e, false);
}

/// Rounds of three writers SIGKILLed at random times, each followed by a full check.
fn random_kills(t: &TempStore, rounds: usize, seed: u64, small: bool) {
    const WRITERS: usize = 3;
    let mut rng = Rng::from_env(seed);
    let start = Instant::now();
    let mut previous: Vec<Tracked> = Vec::new();
    let mut kills = 0;
    for round in 0..rounds {
        let specs: Vec<Spec> = (0..WRITERS)
            .map(|k| random_writer_spec(&t.name, format!("/r{round}w{k}"), &mut rng, small))
            .collect();
        let env = t.child_env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut procs: Vec<Proc> = specs.iter().map(|s| Proc::spawn(s, &env)).collect();
        let spawned = Instant::now();
        let mut delays: Vec<(u64, usize)> = (0..WRITERS).map(|k| (rng.range(15, 300), k)).collect();
        delays.sort();
        for (ms, k) in delays {
            let at = spawned + Duration::from_millis(ms);
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            let st = procs[k].kill();
            assert_eq!(
                st.signal(),
                Some(libc::SIGKILL),
                "writer {k} exited by itself: {st}"
            );
            kills += 1;
        }
        let tracked: Vec<Tracked> = specs
            .into_iter()
            .zip(&procs)
            .map(|(s, p)| Tracked::new(s, &p.lines()))
            .collect();
        let opts = t.options();
        previous = with_timeout(60, "checking the store after SIGKILL", move || {
            let store = Store::attach(&opts).unwrap();
            let mut incomplete = BTreeSet::new();
            // Earlier rounds' files again: later crashes must not have touched them.
            for tr in previous.iter().chain(&tracked) {
                incomplete.extend(tr.check(&store));
            }
            let listed: BTreeSet<String> = store
                .list_all()
                .into_iter()
                .filter(|(_, st)| st.state == WriteState::Incomplete)
                .map(|(p, _)| p)
                .collect();
            assert_eq!(
                listed, incomplete,
                "incomplete files: store vs the writers' reports"
            );
            assert_eq!(store.info().incomplete as usize, incomplete.len());
            let rep = store.fsck(false);
            assert_eq!(
                rep.incomplete.iter().cloned().collect::<BTreeSet<_>>(),
                incomplete
            );
            assert_only_dead_writer_leftovers(&rep);
            repair_and_assert_clean(&store);
            assert_chunk_accounting(&store);
            // Keep one round of history; free the space of older rounds.
            for tr in &previous {
                remove_tree(&store, &tr.spec.dir);
            }
            assert!(store.fsck(false).problems.is_empty());
            assert_chunk_accounting(&store);
            tracked
        });
    }
    let store = t.attach();
    for tr in &previous {
        remove_tree(&store, &tr.spec.dir);
    }
    let info = store.info();
    assert_eq!(
        (info.files, info.mem_free_chunks, info.spill_free_chunks),
        (0, info.mem_chunks, info.spill_chunks),
        "{info:?}"
    );
    eprintln!(
        "{kills} writers SIGKILLed in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

/// Rounds of writers that link, unlink, rename the names of linked files and set their
/// xattrs (links mode), SIGKILLed at random times: every name left reads as its file's
/// only pattern, all names of a file are one inode whose link count is the number of its
/// names, no file lost its last name, and fsck finds nothing (the namespace rebuild the
/// death triggers recounts the links).
#[test]
fn sigkilled_linkers_leave_every_file_whole_under_names_that_match_its_link_count() {
    let t = TempStore::new("crash-links", 16 << 20, CHUNK, 512, None);
    let mut rng = Rng::from_env(0x11c5);
    let mut kills = 0;
    for round in 0..24 {
        let specs: Vec<Spec> = (0..2)
            .map(|k| {
                let mut s = Spec::new(&t.name, "links");
                s.dir = format!("/l{round}w{k}");
                s.count = 3;
                s.size = 70_000 + 1_000 * k;
                s.blocks = vec![65536];
                s.seed = rng.next();
                s
            })
            .collect();
        let mut procs: Vec<Proc> = specs.iter().map(|s| Proc::spawn(s, &[])).collect();
        for p in &procs {
            assert!(
                p.wait_for(|l| l == "ready", Duration::from_secs(30)),
                "{:?}",
                p.lines()
            );
        }
        std::thread::sleep(Duration::from_millis(rng.range(1, 40)));
        for p in &mut procs {
            assert_eq!(p.kill().signal(), Some(libc::SIGKILL), "{:?}", p.lines());
            kills += 1;
        }
        let name = t.name.clone();
        with_timeout(60, "checking after SIGKILL in link changes", move || {
            let store = Store::attach(&ckptfs_store::StoreOptions::named(&name)).unwrap();
            // Only a killed attribute writer's record in progress may be left (an
            // incomplete `.new`, removed with the file's last name).
            assert_only_dead_writer_leftovers(&store.fsck(false));
            let mut inos = BTreeSet::new();
            for s in &specs {
                for j in 0..s.count {
                    let mut names = vec![s.file_path(j)];
                    names.extend((0..3).map(|k| format!("{}/l{j}_{k}", s.dir)));
                    let sts: Vec<_> = names.iter().filter_map(|p| store.stat(p).ok()).collect();
                    assert!(!sts.is_empty(), "{}: file {j} lost every name", s.dir);
                    let ino = sts[0].ino;
                    assert!(inos.insert(ino), "two files share inode {ino}");
                    for (st, p) in sts.iter().zip(names.iter().filter(|p| store.stat(p).is_ok())) {
                        assert_eq!(st.ino, ino, "{p}");
                        assert_eq!(st.nlink as usize, sts.len(), "{p}");
                        let data = read_all(&store, p).unwrap_or_else(|e| panic!("{p}: {e}"));
                        assert_eq!(data.len() as u64, s.size, "{p}");
                        assert_eq!(first_mismatch(s.file_seed(j), 0, &data), None, "{p}");
                    }
                }
            }
            repair_and_assert_clean(&store);
            assert_chunk_accounting(&store);
            for s in &specs {
                remove_tree(&store, &s.dir);
            }
            assert!(store.fsck(false).problems.is_empty());
            assert_eq!(store.info().files, 0);
        });
    }
    let recoveries = t.attach().info().recoveries;
    eprintln!("{kills} linkers SIGKILLed, {recoveries} lock recoveries");
}

/// Rounds of writers that rewrite files with O_TRUNC and shrink them with ftruncate,
/// SIGKILLed at random times: every file must read as a prefix of its only pattern (old
/// content or new state), never zeros that neither had, and fsck must find only a dead
/// writer's leftovers and repair them.
#[test]
fn sigkilled_truncating_writers_never_expose_zeros_neither_state_had() {
    let t = TempStore::new("crash-trunc", 16 << 20, CHUNK, 256, None);
    let mut rng = Rng::from_env(0x7a0c);
    let mut kills = 0;
    for round in 0..12 {
        let specs: Vec<Spec> = (0..2)
            .map(|k| {
                let mut s = Spec::new(&t.name, "trunc");
                s.dir = format!("/t{round}w{k}");
                s.count = 3;
                s.min = 1_000;
                s.size = 5 * CHUNK + 999;
                s.blocks = vec![4096, 65536, 200_000];
                s.seed = rng.next();
                s
            })
            .collect();
        let mut procs: Vec<Proc> = specs.iter().map(|s| Proc::spawn(s, &[])).collect();
        for p in &procs {
            assert!(
                p.wait_for(|l| l.starts_with("shrunk"), Duration::from_secs(30)),
                "{:?}",
                p.lines()
            );
        }
        std::thread::sleep(Duration::from_millis(rng.range(0, 30)));
        for p in &mut procs {
            assert_eq!(p.kill().signal(), Some(libc::SIGKILL));
            kills += 1;
        }
        let name = t.name.clone();
        with_timeout(60, "checking after SIGKILL in truncations", move || {
            let store = Store::attach(&ckptfs_store::StoreOptions::named(&name)).unwrap();
            for s in &specs {
                for j in 0..s.count {
                    let p = s.file_path(j);
                    let Ok(st) = store.stat(&p) else { continue };
                    let data = read_all(&store, &p).unwrap_or_else(|e| panic!("{p}: {e}"));
                    assert_eq!(data.len() as u64, st.size);
                    assert_eq!(
                        first_mismatch(s.file_seed(j), 0, &data),
                        None,
                        "{p} ({:?}) shows bytes neither its old nor its new state had",
                        st.state
                    );
                }
            }
            let rep = store.fsck(false);
            assert_only_dead_writer_leftovers(&rep);
            repair_and_assert_clean(&store);
            assert_chunk_accounting(&store);
            for s in &specs {
                remove_tree(&store, &s.dir);
            }
        });
    }
    eprintln!("{kills} truncating writers SIGKILLed");
}
