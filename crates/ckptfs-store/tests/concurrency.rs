//! Many writers on one store at once: threads of this process and separate processes,
//! each writing its own files (as checkpointing ranks do), peers dying while they hold the
//! store's locks, the store filling up (ENOSPC), and private per-rank segments.

mod support;

use ckptfs_store::{OpenFlags, Store, StoreError, StoreOptions, WriteState};
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use support::*;

/// Runs the writer when this executable is spawned as a child (see `support`).
#[test]
fn child_entry() {
    support::child_entry();
}

const CHUNK: u64 = 64 << 10;

fn files_spec(store: &str, dir: &str, count: u64, seed: u64) -> Spec {
    let mut s = Spec::new(store, "files");
    s.dir = dir.into();
    s.count = count;
    s.min = 1;
    s.size = 400_000;
    s.blocks = vec![1000, 4096, 65536, 150_000];
    s.seed = seed;
    s
}

/// Write the files of `spec` from this process (a thread), like the writer child does.
fn write_files_here(store: &Store, spec: &Spec) {
    match store.mkdir(&spec.dir, 0o755) {
        Ok(_) | Err(StoreError::Exists(_)) => {}
        Err(e) => panic!("{e}"),
    }
    for i in 0..spec.count {
        let mut f = store.open(&spec.file_path(i), OpenFlags::CREATE, 0o644).unwrap();
        let size = spec.file_size(i);
        let mut off = 0;
        while off < size {
            let n = (spec.block_size(i) as u64).min(size - off);
            f.write_all(&pattern(spec.file_seed(i), off, n as usize)).unwrap();
            off += n;
        }
        f.close().unwrap();
    }
}

fn check_files(store: &Store, spec: &Spec) {
    for i in 0..spec.count {
        assert_file_is(store, &spec.file_path(i), spec.file_seed(i), spec.file_size(i));
    }
}

fn wait_done(p: &mut Proc, what: &str) {
    let st = p
        .wait_timeout(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{what} hangs"));
    p.assert_no_error();
    assert!(st.success(), "{what}: {st}");
}

#[test]
fn threads_and_processes_write_distinct_files_into_one_store() {
    let t = TempStore::new("conc-mix", 64 << 20, CHUNK, 256, None);
    let procs_specs: Vec<Spec> = (0..3)
        .map(|k| files_spec(&t.name, &format!("/p{k}"), 6, k))
        .collect();
    let thread_specs: Vec<Spec> = (0..3)
        .map(|k| files_spec(&t.name, &format!("/t{k}"), 6, 100 + k))
        .collect();
    let mut procs: Vec<Proc> = procs_specs.iter().map(|s| Proc::spawn(s, &[])).collect();
    let threads: Vec<_> = thread_specs
        .iter()
        .cloned()
        .map(|s| {
            let store = t.attach();
            std::thread::spawn(move || write_files_here(&store, &s))
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    for (k, p) in procs.iter_mut().enumerate() {
        wait_done(p, &format!("writer process {k}"));
    }
    let store = t.attach();
    for s in procs_specs.iter().chain(&thread_specs) {
        check_files(&store, s);
    }
    assert_eq!(store.info().files, 36);
    let rep = store.fsck(false);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_chunk_accounting(&store);
}

#[test]
fn fsck_and_repair_while_writers_run_find_nothing_and_change_nothing() {
    let t = TempStore::new("conc-fsck", 32 << 20, CHUNK, 256, None);
    let store = t.attach();
    let mut round = 0;
    // On a loaded machine the writers may finish before many checks ran: then another
    // batch of writers starts, until at least 4 checks overlapped live writers.
    for batch in 0..20 {
        let these: Vec<Spec> = (0..2)
            .map(|k| {
                let mut s = files_spec(&t.name, &format!("/b{batch}/p{k}"), 30, 7 + k + 2 * batch);
                s.blocks = vec![3000, 70_000];
                s
            })
            .collect();
        let mut procs: Vec<Proc> = these.iter().map(|s| Proc::spawn(s, &[])).collect();
        while !procs.iter().all(|p| p.lines().iter().any(|l| l == "done")) {
            // A check must not mistake a live writer's allocations for damage, and a
            // repair must not "fix" them.
            let rep = store.fsck(round % 2 == 1);
            assert!(rep.problems.is_empty(), "round {round}: {:?}", rep.problems);
            round += 1;
            assert!(round < 100_000, "writers do not finish");
        }
        for (k, p) in procs.iter_mut().enumerate() {
            wait_done(p, &format!("batch {batch} writer {k}"));
        }
        for s in &these {
            check_files(&store, s);
        }
        assert_chunk_accounting(&store);
        if round > 3 {
            break;
        }
        // Make room for the next batch.
        for s in &these {
            for i in 0..s.count {
                store.unlink(&s.file_path(i)).unwrap();
            }
        }
    }
    assert!(
        round > 3,
        "fsck ran only {round} times while 20 batches of writers ran"
    );
}

#[test]
fn survivors_finish_while_peers_are_sigkilled_at_random() {
    let t = TempStore::new("conc-random", 32 << 20, CHUNK, 512, None);
    let mut rng = Rng::from_env(0x5eed);
    // The survivors write their last files only once this gate exists, which the test
    // creates after peers were killed while they ran: on a loaded machine, spawning
    // victims can otherwise take longer than the survivors' whole run.
    let gate_dir = tempfile::tempdir().unwrap();
    let gate = gate_dir.path().join("go");
    let survivors: Vec<Spec> = (0..2)
        .map(|k| {
            let mut s = files_spec(&t.name, &format!("/s{k}"), 800, 70 + k);
            s.size = 100_000;
            s.blocks = vec![512, 4096];
            s.tmp = true;
            s.keep = 3;
            s.gate = gate.display().to_string();
            s
        })
        .collect();
    let mut procs: Vec<Proc> = survivors.iter().map(|s| Proc::spawn(s, &[])).collect();
    // Victims churning (create, write, rename, unlink) in the same store, SIGKILLed at
    // random moments, generation after generation until the survivors are done.
    let running = |procs: &[Proc]| procs.iter().any(|p| !p.lines().iter().any(|l| l == "done"));
    let (mut gen, mut killed_meanwhile) = (0, 0);
    while running(&procs) {
        let mut victims: Vec<Proc> = (0..2)
            .map(|k| {
                let mut s = files_spec(&t.name, &format!("/v{gen}-{k}"), 0, rng.next());
                s.size = 100_000;
                s.blocks = vec![512, 4096, 65536];
                s.keep = 1;
                s.tmp = true;
                Proc::spawn(&s, &[])
            })
            .collect();
        for v in victims.iter_mut() {
            std::thread::sleep(Duration::from_millis(rng.range(5, 50)));
            v.kill();
            v.assert_no_error();
            killed_meanwhile += running(&procs) as u32;
        }
        if killed_meanwhile >= 4 && !gate.exists() {
            std::fs::write(&gate, b"").unwrap();
        }
        gen += 1;
    }
    eprintln!("{killed_meanwhile} peers SIGKILLed while the survivors wrote");
    assert!(
        killed_meanwhile >= 2,
        "only {killed_meanwhile} peers died while the survivors wrote"
    );
    for (k, p) in procs.iter_mut().enumerate() {
        wait_done(p, &format!("surviving writer {k}"));
    }
    let name = t.name.clone();
    with_timeout(30, "checking after peers were killed", move || {
        let store = Store::attach(&StoreOptions::named(&name)).unwrap();
        for s in &survivors {
            // The last `keep` files remain; the writer unlinked the others.
            let mut names: Vec<String> = store
                .read_dir(&s.dir)
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            names.sort();
            assert_eq!(names, vec!["f797", "f798", "f799"]);
            for i in 797..800 {
                assert_file_is(&store, &s.file_path(i), s.file_seed(i), s.file_size(i));
            }
        }
        let rep = store.fsck(true);
        assert!(rep.is_clean(), "{:?}", rep.problems);
        assert!(store.fsck(false).problems.is_empty());
        assert_chunk_accounting(&store);
    });
}

#[test]
fn survivors_finish_when_peers_die_holding_store_locks() {
    let t = TempStore::new("conc-survive", 32 << 20, CHUNK, 512, None);
    let survivors: Vec<Spec> = (0..3)
        .map(|k| {
            let mut s = files_spec(&t.name, &format!("/s{k}"), 25, 50 + k);
            s.size = 150_000;
            s.blocks = vec![512, 4096]; // many allocations and lock round trips
            s
        })
        .collect();
    let mut procs: Vec<Proc> = survivors.iter().map(|s| Proc::spawn(s, &[])).collect();
    // Peers that SIGKILL themselves holding the allocation lock (and a file lock), the
    // namespace lock (mkdir, unlink, rename).
    let mut crashers = Vec::new();
    for (k, point) in [
        "alloc-after-owner",
        "inode-after-kind",
        "free-after-owner",
        "rename-after-intent",
    ]
    .iter()
    .enumerate()
    {
        let mut s = files_spec(&t.name, &format!("/c{k}"), 5, 90 + k as u64);
        s.keep = 1;
        s.tmp = true;
        std::thread::sleep(Duration::from_millis(20));
        crashers.push(Proc::spawn(&s, &[("CKPTFS_CRASH_AT", point)]));
    }
    for (k, c) in crashers.iter_mut().enumerate() {
        let st = c.wait_timeout(Duration::from_secs(60)).expect("crasher hangs");
        assert_eq!(
            st.signal(),
            Some(libc::SIGKILL),
            "crasher {k} did not die at its point: {st}"
        );
    }
    for (k, p) in procs.iter_mut().enumerate() {
        wait_done(p, &format!("surviving writer {k}"));
    }
    let name = t.name.clone();
    with_timeout(30, "checking after peers died", move || {
        let store = Store::attach(&StoreOptions::named(&name)).unwrap();
        for s in &survivors {
            check_files(&store, s);
        }
        let rep = store.fsck(true);
        assert!(rep.is_clean(), "{:?}", rep.problems);
        assert!(store.fsck(false).problems.is_empty());
        assert_chunk_accounting(&store);
    });
}

#[test]
fn enospc_when_memory_and_spill_are_full_gives_short_write_and_keeps_files() {
    let dir = tempfile::tempdir().unwrap();
    // 16 memory chunks + 16 spill chunks.
    let t = TempStore::new("conc-full", 16 * CHUNK, CHUNK, 64, Some((dir.path(), 16 * CHUNK)));
    let keep = setup(&t.name);
    let mut fill_specs = Vec::new();
    let mut procs = Vec::new();
    for k in 0..2 {
        let mut s = Spec::new(&t.name, "fill");
        s.dir = format!("/fp{k}");
        s.blocks = vec![100_000];
        s.seed = 300 + k;
        procs.push(Proc::spawn(&s, &[]));
        fill_specs.push(s);
    }
    // Two threads fill too, concurrently with the processes.
    let threads: Vec<_> = (0..2u64)
        .map(|k| {
            let store = t.attach();
            std::thread::spawn(move || {
                store.mkdir(&format!("/ft{k}"), 0o755).unwrap();
                let mut f = store
                    .open(&format!("/ft{k}/fill"), OpenFlags::CREATE, 0o644)
                    .unwrap();
                let (mut size, mut short) = (0u64, false);
                loop {
                    match f.write(&pattern(400 + k, size, 100_000)) {
                        Ok(n) => {
                            size += n as u64;
                            short |= n < 100_000;
                        }
                        Err(e) => {
                            assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                            break;
                        }
                    }
                }
                f.close().unwrap();
                (size, short)
            })
        })
        .collect();
    let mut sizes = Vec::new();
    for th in threads {
        let (size, short) = th.join().unwrap();
        assert!(
            short || size % CHUNK == 0,
            "ENOSPC without a short write first at {size}"
        );
        sizes.push(size);
    }
    for (k, p) in procs.iter_mut().enumerate() {
        wait_done(p, &format!("fill process {k}"));
        let lines = p.lines();
        let enospc: Vec<&String> = lines.iter().filter(|l| l.starts_with("enospc")).collect();
        assert_eq!(enospc.len(), 1, "{lines:?}");
        let size: u64 = enospc[0].rsplit(' ').next().unwrap().parse().unwrap();
        if !size.is_multiple_of(CHUNK) {
            assert!(lines.iter().any(|l| l.starts_with("short")), "{lines:?}");
        }
        sizes.push(size);
    }
    let store = t.attach();
    let info = store.info();
    assert_eq!(
        (info.mem_free_chunks, info.spill_free_chunks),
        (0, 0),
        "store is full: {info:?}"
    );
    // Every byte that write() accepted is there; the files written before are intact.
    // They saw a failed write, so they are `failed`, never `complete`.
    for (k, s) in fill_specs.iter().enumerate() {
        let p = format!("{}/fill", s.dir);
        assert_eq!(store.stat(&p).unwrap().state, WriteState::Failed, "{p}");
        let data = read_all(&store, &p).unwrap();
        assert_eq!(data.len() as u64, sizes[2 + k]);
        assert_eq!(first_mismatch(s.seed, 0, &data), None);
    }
    assert_eq!(store.info().failed, 4);
    for k in 0..2u64 {
        let data = read_all(&store, &format!("/ft{k}/fill")).unwrap();
        assert_eq!(data.len() as u64, sizes[k as usize]);
        assert_eq!(first_mismatch(400 + k, 0, &data), None);
    }
    check_files(&store, &keep);
    let total: u64 = sizes.iter().sum::<u64>() + (0..keep.count).map(|i| keep.file_size(i)).sum::<u64>();
    assert!(total > 26 * CHUNK, "only {total} bytes fitted into 32 chunks");
    assert!(store.fsck(false).problems.is_empty());
    assert_chunk_accounting(&store);
    // Freeing space makes writes succeed again.
    for k in 0..2 {
        store.unlink(&format!("/fp{k}/fill")).unwrap();
        store.unlink(&format!("/ft{k}/fill")).unwrap();
    }
    let mut f = store.open("/again", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(1, 0, 500_000)).unwrap();
    f.close().unwrap();
    check_files(&store, &keep);
    assert!(store.fsck(false).problems.is_empty());
    assert_chunk_accounting(&store);
}

fn setup(store: &str) -> Spec {
    let mut s = files_spec(store, "/keep", 3, 9);
    s.min = 100_000;
    s.size = 100_000;
    let mut p = Proc::spawn(&s, &[]);
    wait_done(&mut p, "setup writer");
    s
}

#[test]
fn private_segments_per_rank_are_separate() {
    let base = format!("t-conc-priv-{}", std::process::id());
    let mut procs = Vec::new();
    let mut specs = Vec::new();
    for rank in 0..2u64 {
        let _ = Store::destroy(&format!("{base}.{rank}"));
        let mut s = files_spec(&base, "/ckpt", 2, 500 + rank);
        s.private = true;
        s.mem = Some(4 << 20);
        s.chunk = Some(CHUNK);
        procs.push(Proc::spawn(&s, &[("CKPTFS_RANK", &rank.to_string())]));
        specs.push(s);
    }
    for (k, p) in procs.iter_mut().enumerate() {
        wait_done(p, &format!("rank {k}"));
    }
    // The shared name was never created; each rank has its own segment with its own data
    // under the same paths.
    assert!(matches!(
        Store::attach(&StoreOptions::named(&base)).err(),
        Some(StoreError::NoStore(_))
    ));
    for (rank, s) in specs.iter().enumerate() {
        let name = format!("{base}.{rank}");
        let store = Store::attach(&StoreOptions::named(&name)).unwrap();
        check_files(&store, s);
        assert_eq!(store.info().files, 2);
        drop(store);
        Store::destroy(&name).unwrap();
    }
}

#[test]
fn threads_racing_to_create_one_store_all_get_it() {
    for round in 0..6 {
        let name = format!("t-conc-race-{}-{round}", std::process::id());
        let _ = Store::destroy(&name);
        let barrier = Arc::new(Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|k| {
                let (name, barrier) = (name.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let opts = StoreOptions {
                        mem_size: Some(4 << 20),
                        chunk_size: Some(CHUNK),
                        ..StoreOptions::named(&name)
                    };
                    barrier.wait();
                    let store = Store::open_or_create(&opts).map_err(|e| e.to_string())?;
                    let mut f = store
                        .open(&format!("/f{k}"), OpenFlags::CREATE, 0o644)
                        .map_err(|e| e.to_string())?;
                    f.write_all(&pattern(k, 0, 1000)).map_err(|e| e.to_string())?;
                    f.close().map_err(|e| e.to_string())
                })
            })
            .collect();
        let results: Vec<Result<(), String>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let store = Store::attach(&StoreOptions::named(&name));
        let _ = Store::destroy(&name);
        for (k, r) in results.iter().enumerate() {
            assert!(
                r.is_ok(),
                "round {round}, thread {k}: open_or_create failed: {r:?}"
            );
        }
        // All four wrote into the same segment.
        assert_eq!(store.unwrap().info().files, 4, "round {round}");
    }
}

/// The lease table: LEASES distinct processes may hold one file open at once (a node's
/// ranks reading a shared restart file); the next one gets EMFILE without side effects,
/// and a killed holder's slot is reaped by the next open.
#[test]
fn lease_table_full_gives_emfile_until_a_holder_dies() {
    let t = TempStore::new("conc-leases", 8 << 20, CHUNK, 64, None);
    let store = t.attach();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let mut f = store.open("/shared", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&data).unwrap();
    f.close().unwrap();
    let mut spec = Spec::new(&t.name, "op");
    spec.op = "hold".into();
    spec.path = "/shared".into();
    let mut holders: Vec<Proc> = Vec::new();
    for i in 0..ckptfs_store::layout::LEASES {
        let p = Proc::spawn(&spec, &[]);
        assert!(
            p.wait_for(
                |l| l == "opened" || l.starts_with("error"),
                Duration::from_secs(60)
            ),
            "holder {i} did not start"
        );
        p.assert_no_error();
        holders.push(p);
    }
    // One more process: EMFILE, and the file is untouched.
    let extra = Proc::spawn(&spec, &[]);
    assert!(extra.wait_for(|l| l.starts_with("error"), Duration::from_secs(60)));
    let err = extra
        .lines()
        .into_iter()
        .find(|l| l.starts_with("error"))
        .unwrap();
    assert!(err.contains("errno 24"), "{err}");
    let e = store.open("/shared", OpenFlags::READ, 0).err().map(|e| e.errno());
    assert_eq!(e, Some(libc::EMFILE), "this process is one more opener");
    assert_eq!(
        read_all(&store, "/shared").err().map(|e| e.errno()),
        Some(libc::EMFILE)
    );
    // A holder dies: its lease is reaped at the next open, which then succeeds.
    holders[7].kill();
    assert_eq!(read_all(&store, "/shared").unwrap(), data);
    for mut p in holders {
        p.kill();
    }
}
