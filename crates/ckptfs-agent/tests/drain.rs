//! Draining: what gets published, how, and what happens on corrupt chunks, a full
//! destination, policies and placement.

mod common;
use ckptfs_agent::manifest::{self, Manifest};
use ckptfs_agent::{status, Agent, AgentError};
use ckptfs_store::{OpenFlags, StoreOptions};
use common::*;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CS: usize = 64 << 10;

fn load_manifest(dir: &std::path::Path) -> Manifest {
    serde_json::from_slice(&std::fs::read(dir.join(manifest::file_name("n0"))).unwrap()).unwrap()
}

#[test]
fn once_publishes_complete_files_byte_identical_with_manifest() {
    let ts = store("once", |_| {});
    let s = &ts.store;
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("/ckpt/step1/rank0", data(1, 3 * CS + 123)),
        ("/ckpt/step1/rank1", data(2, CS)),
        ("/ckpt/step1/empty", Vec::new()),
        ("/top", data(3, 10)),
    ];
    for (p, d) in &files {
        put(s, p, d);
    }
    // A sparse file: a hole chunk, and a chunk written only partly before the end.
    put(s, "/ckpt/step1/sparse", b"");
    let mut f = s
        .open(
            "/ckpt/step1/sparse",
            OpenFlags {
                write: true,
                ..Default::default()
            },
            0,
        )
        .unwrap();
    f.pwrite(b"tail", (2 * CS + 100) as u64).unwrap();
    f.set_len((3 * CS + 7) as u64).unwrap();
    f.close().unwrap();
    let mut sparse = vec![0u8; 3 * CS + 7];
    sparse[2 * CS + 100..2 * CS + 104].copy_from_slice(b"tail");

    let dest = tempfile::tempdir().unwrap();
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    let sum = agent.run_once().unwrap();
    assert!(sum.failed.is_empty(), "{:?}", sum.failed);
    assert_eq!(sum.drained_files, 5);
    for (p, d) in &files {
        assert_eq!(&std::fs::read(dest.path().join(&p[1..])).unwrap(), d, "{p}");
    }
    assert_eq!(
        std::fs::read(dest.path().join("ckpt/step1/sparse")).unwrap(),
        sparse
    );
    let m = load_manifest(&dest.path().join("ckpt/step1"));
    assert_eq!(m.files.len(), 4);
    let e = &m.files["rank0"];
    assert_eq!(e.size, files[0].1.len() as u64);
    assert_eq!(e.crc32c, ckptfs_store::checksum::crc32c(&files[0].1));
    assert_eq!(e.chunk_crc32c.len(), 4);
    assert_eq!(
        e.chunk_crc32c[3],
        ckptfs_store::checksum::crc32c(&files[0].1[3 * CS..])
    );
    assert_eq!(m.files["sparse"].crc32c, ckptfs_store::checksum::crc32c(&sparse));
    assert!(
        dest.path().join(manifest::file_name("n0")).exists(),
        "root manifest for /top"
    );
    // No temporary file is left behind.
    assert!(walk(dest.path())
        .iter()
        .all(|p| !p.to_string_lossy().contains("ckptfs-tmp")));
}

#[test]
fn files_being_written_or_left_incomplete_are_not_drained() {
    let ts = store("open", |_| {});
    let s = &ts.store;
    put(s, "/c/done", &data(1, 1000));
    mkdirs(s, "/c/x");
    let mut w = s.open("/c/writing", OpenFlags::CREATE, 0o644).unwrap();
    w.write_all(&data(2, 5000)).unwrap();
    // A writer that dies with its file open leaves it Incomplete.
    let mut ch = child(
        "incomplete_writer_child",
        &[("CKPTFS_AGENT_TEST_STORE", ts.name.clone())],
    );
    assert!(ch.wait().unwrap().success());
    assert_eq!(
        s.stat("/c/dead").unwrap().state,
        ckptfs_store::WriteState::Incomplete
    );

    let dest = tempfile::tempdir().unwrap();
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 1);
    assert!(dest.path().join("c/done").exists());
    assert!(!dest.path().join("c/writing").exists());
    assert!(!dest.path().join("c/dead").exists());
    w.close().unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 1);
    assert_eq!(
        std::fs::read(dest.path().join("c/writing")).unwrap(),
        data(2, 5000)
    );
    assert!(!dest.path().join("c/dead").exists());
}

/// A checkpoint whose writer got ENOSPC (and closed it anyway) is `failed`: the agent
/// never drains it as if it were a good checkpoint.
#[test]
fn file_closed_after_a_failed_write_is_not_drained() {
    let ts = store("enospc", |o| o.mem_size = Some(8 << 16));
    let s = &ts.store;
    put(s, "/c/done", &data(1, 1000));
    let mut f = s.open("/c/truncated", OpenFlags::CREATE, 0o644).unwrap();
    let err = f.write_all(&data(2, 1 << 20)).unwrap_err();
    assert_eq!(err.errno(), libc::ENOSPC);
    f.close().unwrap();
    assert_eq!(
        s.stat("/c/truncated").unwrap().state,
        ckptfs_store::WriteState::Failed
    );
    let dest = tempfile::tempdir().unwrap();
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 1);
    assert!(dest.path().join("c/done").exists());
    assert!(!dest.path().join("c/truncated").exists());
}

/// Child of the test above: open a file for writing and die without closing it.
#[test]
fn incomplete_writer_child() {
    let Ok(name) = std::env::var("CKPTFS_AGENT_TEST_STORE") else {
        return;
    };
    let s = ckptfs_store::Store::attach(&StoreOptions::named(name)).unwrap();
    let mut f = s.open("/c/dead", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&data(3, 3000)).unwrap();
    std::mem::forget(f);
    // SAFETY: _exit skips destructors: the file stays open in the store's view.
    unsafe { libc::_exit(0) };
}

#[test]
fn restarted_agent_skips_published_files_and_redrains_changed_ones() {
    let ts = store("skip", |_| {});
    let s = &ts.store;
    put(s, "/d/a", &data(1, 2 * CS));
    put(s, "/d/b", &data(2, 100));
    let dest = tempfile::tempdir().unwrap();
    {
        let agent = Agent::new(s, cfg(dest.path())).unwrap();
        assert_eq!(agent.run_once().unwrap().drained_files, 2);
    }
    let before = std::fs::metadata(dest.path().join("d/a"))
        .unwrap()
        .modified()
        .unwrap();
    put(s, "/d/b", &data(9, 300)); // rewritten after the drain
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    let sum = agent.run_once().unwrap();
    assert_eq!((sum.drained_files, sum.already_drained), (1, 1));
    assert_eq!(
        std::fs::metadata(dest.path().join("d/a"))
            .unwrap()
            .modified()
            .unwrap(),
        before
    );
    assert_eq!(std::fs::read(dest.path().join("d/b")).unwrap(), data(9, 300));
    assert_eq!(load_manifest(&dest.path().join("d")).files["b"].size, 300);
    // A published file that disappeared from the destination is drained again.
    std::fs::remove_file(dest.path().join("d/a")).unwrap();
    drop(agent);
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 1);
    assert_eq!(std::fs::read(dest.path().join("d/a")).unwrap(), data(1, 2 * CS));
}

#[test]
fn flipped_byte_in_memory_is_refused_and_reported_with_file_and_chunk() {
    let ts = store("flip", |_| {});
    let s = &ts.store;
    put(s, "/e/good", &data(1, CS));
    put(s, "/e/bad", &data(2, 3 * CS));
    let chunks = s.chunk_list("/e/bad").unwrap();
    let c2 = chunks.iter().find(|c| c.logical == 2).unwrap();
    let ckptfs_store::ChunkLocation::Memory(off) = c2.location else {
        panic!("spilled")
    };
    let region = s.data_region();
    // SAFETY: off + 17 is inside the data region of our own test store.
    unsafe { *(region.base as *mut u8).add(off as usize + 17) ^= 0x40 };

    let dest = tempfile::tempdir().unwrap();
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    let sum = agent.run_once().unwrap();
    assert_eq!(sum.drained_files, 1);
    assert_eq!(sum.failed.len(), 1);
    let f = &sum.failed[0];
    assert_eq!(f.path, "/e/bad");
    assert_eq!(f.chunk, Some(2));
    assert_eq!(f.errno, libc::EIO);
    assert!(!f.will_retry);
    assert!(
        f.error.contains("/e/bad") && f.error.contains("chunk 2"),
        "{}",
        f.error
    );
    assert!(!dest.path().join("e/bad").exists());
    assert!(!load_manifest(&dest.path().join("e")).files.contains_key("bad"));
    assert!(walk(dest.path())
        .iter()
        .all(|p| !p.to_string_lossy().contains("ckptfs-tmp")));
    let st = status::status(&ts.name).unwrap();
    assert_eq!(st.failed.len(), 1);
    assert_eq!(st.failed[0].chunk, Some(2));
    // The memory copy is kept, and a second pass does not retry the same bad version.
    assert!(s.stat("/e/bad").is_ok());
    assert_eq!(agent.run_once().unwrap().failed.len(), 1);
    assert_eq!(agent.status().failed[0].attempts, 1);
}

#[test]
fn full_destination_reports_keeps_memory_copy_and_resumes_when_space_returns() {
    let ts = store("full", |_| {});
    let s = &ts.store;
    put(s, "/f/small", &data(1, 1000));
    put(s, "/f/big", &data(2, 8 * CS));
    let dest = tempfile::tempdir().unwrap();
    let io = SmallDest::new(4 * CS as u64);
    let mut c = cfg(dest.path());
    c.write_size = CS;
    c.evict = true; // even with --evict, nothing is freed unless published
    let agent = Arc::new(Agent::with_dest(s, c, io.clone()).unwrap());
    let stop = agent.stop_handle();
    let a2 = agent.clone();
    let th = std::thread::spawn(move || a2.run(&ckptfs_runtime::Shutdown::new()));
    // The error shows up in the status, and the memory copy stays.
    let t0 = Instant::now();
    let failed = loop {
        let st = status::status(&ts.name).unwrap_or_default();
        if let Some(f) = st.failed.iter().find(|f| f.path == "/f/big") {
            break f.clone();
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no failure reported");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(failed.errno, libc::ENOSPC);
    assert!(failed.will_retry);
    assert!(status::status(&ts.name).unwrap().running);
    assert_eq!(get(s, "/f/big"), data(2, 8 * CS));
    assert!(!dest.path().join("f/big").exists());
    assert!(s.stat("/f/small").is_err(), "the small file fit and was evicted");
    // Space returns: the daemon retries by itself.
    io.cap.store(u64::MAX, Ordering::SeqCst);
    let t0 = Instant::now();
    while !dest.path().join("f/big").exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "drain did not resume");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.stop();
    th.join().unwrap().unwrap();
    assert_eq!(std::fs::read(dest.path().join("f/big")).unwrap(), data(2, 8 * CS));
    assert!(agent.status().failed.is_empty());
    drop(agent);
    assert!(!status::status(&ts.name).unwrap().running);
}

#[test]
fn full_tmpfs_destination_then_space_returns() {
    let ts = store("tmpfs", |_| {});
    let s = &ts.store;
    put(s, "/g/a", &data(1, 20 * CS));
    let mnt = tempfile::tempdir().unwrap();
    let m = mnt.path().to_str().unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs", m])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        ckptfs_testsupport::skip_root_only("cannot mount a tmpfs here (not root?)");
        return;
    }
    let r = std::panic::catch_unwind(|| {
        let agent = Agent::new(s, cfg(mnt.path())).unwrap();
        let sum = agent.run_once().unwrap();
        assert_eq!(sum.failed.len(), 1);
        assert_eq!(sum.failed[0].errno, libc::ENOSPC, "{}", sum.failed[0].error);
        assert!(walk(mnt.path())
            .iter()
            .all(|p| !p.to_string_lossy().contains("ckptfs-tmp")));
        assert!(!mnt.path().join("g/a").exists());
        assert!(std::process::Command::new("mount")
            .args(["-o", "remount,size=8m", m])
            .status()
            .unwrap()
            .success());
        drop(agent);
        let agent = Agent::new(s, cfg(mnt.path())).unwrap();
        assert_eq!(agent.run_once().unwrap().drained_files, 1);
        assert_eq!(std::fs::read(mnt.path().join("g/a")).unwrap(), data(1, 20 * CS));
    });
    let _ = std::process::Command::new("umount").arg(m).status();
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn every_nth_checkpoint_directory_in_fifo_order() {
    let ts = store("every", |_| {});
    let s = &ts.store;
    for i in 1..=4 {
        put(s, &format!("/ck/step{i}/r0"), &data(i, 100));
        std::thread::sleep(Duration::from_millis(2));
    }
    let dest = tempfile::tempdir().unwrap();
    let mut c = cfg(dest.path());
    c.every = 2;
    let agent = Agent::new(s, c.clone()).unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 2);
    assert!(dest.path().join("ck/step2/r0").exists() && dest.path().join("ck/step4/r0").exists());
    assert!(!dest.path().join("ck/step1").exists() && !dest.path().join("ck/step3").exists());
    assert_eq!(agent.status().skipped_by_policy, 2);
    let order: Vec<String> = agent.status().recent.iter().map(|d| d.path.clone()).collect();
    assert_eq!(order, ["/ck/step2/r0", "/ck/step4/r0"]);
    drop(agent);
    // Ordinals persist: after a restart step5 is 5th (skipped), step6 is drained.
    put(s, "/ck/step5/r0", &data(5, 100));
    std::thread::sleep(Duration::from_millis(2));
    put(s, "/ck/step6/r0", &data(6, 100));
    let agent = Agent::new(s, c).unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 1);
    assert!(dest.path().join("ck/step6/r0").exists() && !dest.path().join("ck/step5").exists());
}

#[test]
fn evict_frees_the_memory_copy_only_after_a_verified_drain() {
    let ts = store("evict", |_| {});
    let s = &ts.store;
    put(s, "/h/a", &data(1, 5 * CS));
    let free0 = s.info().mem_free_chunks;
    let dest = tempfile::tempdir().unwrap();
    let mut c = cfg(dest.path());
    c.evict = true;
    let agent = Agent::new(s, c).unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 1);
    assert_eq!(s.stat("/h/a").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(s.info().mem_free_chunks, free0 + 5);
    assert!(agent.status().recent[0].evicted);
    assert_eq!(std::fs::read(dest.path().join("h/a")).unwrap(), data(1, 5 * CS));
}

#[test]
fn vertical_placement_by_mapping_file_and_lfs_one_stripe_on_the_chosen_ost() {
    let ts = store("place", |_| {});
    let s = &ts.store;
    put(s, "/p/r0", &data(1, 1000));
    let root = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = (0..3).map(|i| root.path().join(format!("io{i}"))).collect();
    let map = root.path().join("map");
    std::fs::write(&map, format!("# node target\nn0 {}\nn1 0\n", dirs[2].display())).unwrap();
    let mut c = cfg(&dirs[0]);
    c.targets = ckptfs_agent::config::targets(&dirs, &[]);
    c.map_file = Some(map.clone());
    c.lfs = None;
    {
        let agent = Agent::new(s, c.clone()).unwrap();
        assert_eq!(agent.target().dir, dirs[2]);
        agent.run_once().unwrap();
    }
    assert!(dirs[2].join("p/r0").exists() && !dirs[0].join("p").exists());
    // Balanced assignment without a mapping entry: node "n7" -> 7 % 3 = 1.
    c.map_file = None;
    c.node_id = "n7".into();
    assert_eq!(Agent::new(s, c.clone()).unwrap().target().dir, dirs[1]);
    // OST targets: a fake `lfs` records its arguments and creates the file.
    let log = root.path().join("lfs.log");
    let lfs = root.path().join("lfs");
    std::fs::write(
        &lfs,
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\nfor a; do f=$a; done\n: > \"$f\"\n",
            log.display()
        ),
    )
    .unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(&mut std::fs::metadata(&lfs).unwrap().permissions(), 0o755);
    std::fs::set_permissions(&lfs, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let lustre = root.path().join("lustre");
    c.targets = ckptfs_agent::config::targets(std::slice::from_ref(&lustre), &[4, 5, 6, 7]);
    c.node_id = "nid0006".into(); // 6 % 4 = 2 -> OST 6
    c.lfs = Some(lfs);
    put(s, "/p/r1", &data(2, 1000));
    let agent = Agent::new(s, c).unwrap();
    assert_eq!(agent.target().ost, Some(6));
    assert!(agent.run_once().unwrap().failed.is_empty());
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.lines().all(|l| l.starts_with("setstripe -c 1 -i 6 ")),
        "{log}"
    );
    assert!(
        log.contains("ckptfs-tmp"),
        "striping is set on the temporary file: {log}"
    );
    assert_eq!(std::fs::read(lustre.join("p/r1")).unwrap(), data(2, 1000));
    // Without lfs, OST targets are refused.
    let mut c2 = cfg(&lustre);
    c2.targets = ckptfs_agent::config::targets(std::slice::from_ref(&lustre), &[1]);
    c2.lfs = None;
    drop(agent);
    assert!(matches!(Agent::new(s, c2), Err(AgentError::Config(_))));
}

#[test]
fn marshal_off_direct_io_spill_and_many_threads_all_give_identical_files() {
    let spill = tempfile::tempdir_in("/work").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let sp = spill.path().to_path_buf();
    let ts = store("modes", |o| {
        o.mem_size = Some(8 * CS as u64);
        o.spill_dir = Some(sp.clone());
        o.spill_size = Some(64 * CS as u64);
    });
    let s = &ts.store;
    let files: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("/m/f{i}"), data(i, 5 * CS + i as usize * 777)))
        .collect();
    for (p, d) in &files {
        put(s, p, d);
    }
    assert!(s.info().spill_free_chunks < 64, "some chunks spilled");
    for (marshal, direct, threads) in [
        (true, false, 1),
        (true, true, 3),
        (false, false, 3),
        (false, true, 2),
    ] {
        let dest = tempfile::tempdir_in("/work").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let mut c = cfg(dest.path());
        c.marshal = marshal;
        c.direct = direct;
        c.io_threads = threads;
        c.write_size = 2 * CS;
        let agent = Agent::new(s, c).unwrap();
        let sum = agent.run_once().unwrap();
        assert!(sum.failed.is_empty(), "{:?}", sum.failed);
        assert_eq!(sum.drained_files, 6);
        for (p, d) in &files {
            assert_eq!(
                &std::fs::read(dest.path().join(&p[1..])).unwrap(),
                d,
                "{p} {marshal} {direct}"
            );
        }
    }
}

#[test]
fn bandwidth_cap_and_low_priority_apply_to_the_io_threads() {
    let ts = store("bw", |_| {});
    let s = &ts.store;
    put(s, "/b/a", &data(1, 16 * CS)); // 1 MiB
    let dest = tempfile::tempdir().unwrap();
    let io = SmallDest::new(u64::MAX);
    let mut c = cfg(dest.path());
    c.max_bw = Some(4e6);
    c.write_size = CS;
    c.priority = ckptfs_agent::sys::Priority::Idle;
    let agent = Agent::with_dest(s, c, io.clone()).unwrap();
    let t0 = Instant::now();
    agent.run_once().unwrap();
    // 1 MiB at 4 MB/s: at least ~0.25 s (a lower bound the cap guarantees).
    assert!(t0.elapsed() >= Duration::from_millis(240), "{:?}", t0.elapsed());
    let (nice, class, _) = io.prio.lock().unwrap().unwrap();
    assert_eq!((nice, class), (19, 3), "nice 19, IOPRIO_CLASS_IDLE");
}

#[test]
fn drained_bytes_pass_through_the_mover() {
    let ts = store("dm-mover", |_| {});
    let s = &ts.store;
    let files = [
        ("/dm/a", data(1, 10 * CS + 5)),
        ("/dm/b", data(2, 3 * CS)),
        ("/dm/c", data(3, CS)),
    ];
    for (p, d) in &files {
        put(s, p, d);
    }
    let total: u64 = files.iter().map(|f| f.1.len() as u64).sum();
    let dest = tempfile::tempdir().unwrap();
    let mut c = cfg(dest.path());
    c.io_threads = 2;
    c.write_size = 4 * CS;
    let rate = 2e6;
    c.max_bw = Some(rate);
    let agent = Agent::new(s, c).unwrap();
    assert_eq!(agent.bytes_moved(), 0);
    let t0 = Instant::now();
    let done = std::sync::atomic::AtomicBool::new(false);
    // Part of a file seen in flight: the status's in-flight bytes are the mover's
    // progress, written after each of its writes.
    let partial = std::thread::scope(|sc| {
        let watch = sc.spawn(|| {
            let mut partial = Vec::new();
            while !done.load(Ordering::SeqCst) {
                for f in agent.status().in_flight {
                    if f.done > 0 && f.done < f.size {
                        partial.push((f.path, f.done, f.size));
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            partial
        });
        let sum = agent.run_once().unwrap();
        done.store(true, Ordering::SeqCst);
        assert!(sum.failed.is_empty(), "{:?}", sum.failed);
        assert_eq!(sum.drained_files, 3);
        watch.join().unwrap()
    });
    let elapsed = t0.elapsed();
    for (p, d) in &files {
        assert_eq!(&std::fs::read(dest.path().join(&p[1..])).unwrap(), d, "{p}");
    }
    // Every drained byte was moved by the agent's mover, once.
    assert_eq!(agent.bytes_moved(), total);
    assert!(!partial.is_empty(), "no partial progress seen");
    // The mover's limiter paced it: the last write (at most 4 chunks) starts only once
    // the bytes before it fit under the cap.
    let floor = (total - 4 * CS as u64) as f64 / rate;
    assert!(elapsed.as_secs_f64() >= floor * 0.95, "{elapsed:?} < {floor} s");
}

#[test]
fn one_agent_per_store_and_status_visible_to_other_processes() {
    let ts = store("busy", |_| {});
    let s = &ts.store;
    put(s, "/s/a", &data(1, 1000));
    let dest = tempfile::tempdir().unwrap();
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    assert_eq!(
        Agent::new(s, cfg(dest.path())).err().map(|e| e.errno()),
        Some(libc::EBUSY)
    );
    agent.run_once().unwrap();
    let st = status::status(&ts.name).unwrap();
    assert!(st.running);
    assert_eq!((st.drained_files, st.drained_bytes), (1, 1000));
    assert_eq!(st.node, "n0");
    assert_eq!(st.mode, "once");
    drop(agent);
    assert!(!status::status(&ts.name).unwrap().running);
    assert!(Agent::new(s, cfg(dest.path())).is_ok());
}

#[test]
fn destination_directory_removed_while_the_daemon_runs_is_recreated() {
    let ts = store("rmdir", |_| {});
    let s = &ts.store;
    put(s, "/q/a", &data(1, 1000));
    let dest = tempfile::tempdir().unwrap();
    let agent = Agent::new(s, cfg(dest.path())).unwrap();
    assert_eq!(agent.run_once().unwrap().drained_files, 1);
    std::fs::remove_dir_all(dest.path().join("q")).unwrap();
    put(s, "/q/b", &data(2, 1000));
    // The first attempt fails (ENOENT: the directory is gone) and is reported.
    let sum = agent.run_once().unwrap();
    assert_eq!(sum.failed.len(), 1);
    assert_eq!(sum.failed[0].errno, libc::ENOENT);
    // The retry (after the backoff) creates the directory again and publishes it.
    std::thread::sleep(Duration::from_millis(250));
    assert!(agent.run_once().unwrap().failed.is_empty());
    assert_eq!(std::fs::read(dest.path().join("q/b")).unwrap(), data(2, 1000));
}

/// A FIFO or a symbolic link planted under the name of the agent's own manifest is an
/// error for the files of that directory, never a hang and never followed; the other
/// directories drain.
#[test]
fn fifo_or_link_planted_as_the_agents_manifest_neither_hangs_nor_is_followed() {
    let ts = store("mfifo", |_| {});
    put(&ts.store, "/p/a", &data(1, 1000));
    put(&ts.store, "/q/b", &data(2, 1000));
    put(&ts.store, "/r/c", &data(3, 1000));
    let dest = tempfile::tempdir().unwrap();
    for d in ["p", "q", "r"] {
        std::fs::create_dir(dest.path().join(d)).unwrap();
    }
    let fifo = dest.path().join("p").join(manifest::file_name("n0"));
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: plain libc call with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.json");
    std::fs::write(&victim, b"not a manifest").unwrap();
    std::os::unix::fs::symlink(&victim, dest.path().join("q").join(manifest::file_name("n0"))).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let name = ts.name.clone();
    let root = dest.path().to_path_buf();
    std::thread::spawn(move || {
        let s = ckptfs_store::Store::attach(&StoreOptions::named(&name)).unwrap();
        let _ = tx.send(Agent::new(&s, cfg(&root)).unwrap().run_once().unwrap());
    });
    let Ok(sum) = rx.recv_timeout(Duration::from_secs(120)) else {
        let _ = std::fs::OpenOptions::new().read(true).write(true).open(&fifo);
        panic!("the drain hangs on a FIFO manifest");
    };
    let mut failed: Vec<&str> = sum.failed.iter().map(|f| f.path.as_str()).collect();
    failed.sort();
    assert_eq!(failed, ["/p/a", "/q/b"], "{:?}", sum.failed);
    assert_eq!(sum.drained_files, 1);
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"not a manifest",
        "link not followed"
    );
    assert_eq!(std::fs::read(dest.path().join("r/c")).unwrap(), data(3, 1000));
}
