//! Single-node dataset tests: the state machine's failure cases (docs/datasets.md D1-D6),
//! transparent mode, restart from the newest wholly recoverable dataset against a model
//! (with SIGKILLed ranks), retention, and the level policy's record.

use ckptfs_datasets::{DatasetError, Datasets, State};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::collections::BTreeMap;
use std::process::Command;
mod common;
use common::*;

#[test]
fn complete_twice_is_ealready_and_keeps_the_dataset_complete() {
    let fx = fixture();
    let ds = Datasets::single_node(fx.store.clone(), cfg("0"));
    let id = ds.begin("step1", None).unwrap();
    write(&fx.store, "/ckpt.0", b"zero");
    let d = ds.complete(Some(id), true).unwrap();
    assert_eq!(d.state, State::Complete);
    let e = ds.complete(Some(id), true).unwrap_err();
    assert!(matches!(e, DatasetError::AlreadyCompleted { .. }), "{e}");
    assert_eq!(e.errno(), libc::EALREADY);
    assert_eq!(ds.show(id).unwrap().state, State::Complete);
    // With no id: nothing open for this rank.
    assert_eq!(ds.complete(None, true).unwrap_err().errno(), libc::ENOENT);
}

#[test]
fn complete_never_begun_is_enoent() {
    let fx = fixture();
    let ds = Datasets::single_node(fx.store.clone(), cfg("0"));
    let e = ds.complete(Some(42), true).unwrap_err();
    assert!(matches!(e, DatasetError::NotFound(42)), "{e}");
    assert_eq!(e.errno(), libc::ENOENT);
    // Begun by rank 0 only: rank 1 completing it is refused, the dataset unchanged.
    let mut c = cfg("0");
    c.world = 2;
    let id = Datasets::single_node(fx.store.clone(), c.clone())
        .begin("s", None)
        .unwrap();
    c.rank = "1".into();
    let e = Datasets::single_node(fx.store.clone(), c)
        .complete(Some(id), true)
        .unwrap_err();
    assert!(matches!(e, DatasetError::NotBegun { .. }), "{e}");
    assert_eq!(ds.show(id).unwrap().state, State::Open);
}

#[test]
fn ids_are_monotonic_even_after_deleting_the_newest() {
    let fx = fixture();
    let ds = Datasets::single_node(fx.store.clone(), cfg("0"));
    let a = ds.begin("a", None).unwrap();
    ds.complete(None, true).unwrap();
    let b = ds.begin("b", None).unwrap();
    ds.complete(None, true).unwrap();
    ds.delete(b).unwrap();
    let c = ds.begin("c", None).unwrap();
    assert!(a < b && b < c, "{a} {b} {c}");
    assert_eq!(ds.show(b).unwrap_err().errno(), libc::ENOENT);
}

#[test]
fn all_ranks_must_complete_and_one_invalid_part_invalidates() {
    let fx = fixture();
    let mk = |r: &str| {
        let mut c = cfg(r);
        c.world = 2;
        Datasets::single_node(fx.store.clone(), c)
    };
    let (r0, r1) = (mk("0"), mk("1"));
    let id = r0.begin("s1", None).unwrap();
    assert_eq!(
        r1.begin("s1", None).unwrap(),
        id,
        "rank 1 joins the open dataset of that name"
    );
    write(&fx.store, "/r0", b"a");
    write(&fx.store, "/r1", b"b");
    assert_eq!(r0.complete(None, true).unwrap().state, State::Open);
    let d = r1.complete(None, true).unwrap();
    assert_eq!(d.state, State::Complete);
    assert!(d.files.contains_key("/r0") && d.files.contains_key("/r1"));
    let id2 = r0.begin("s2", None).unwrap();
    r1.begin("s2", None).unwrap();
    r0.complete(None, false).unwrap();
    let d = r1.show(id2).unwrap();
    assert_eq!(d.state, State::Invalid, "{d:?}");
}

fn proc_start(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &s[s.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[test]
fn rank_killed_before_completing_makes_the_dataset_incomplete() {
    let fx = fixture();
    let mut child = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = child.id();
    let p = ckptfs_store::process::ProcId {
        pid,
        start: proc_start(pid),
    };
    let mut c = cfg("0");
    c.world = 2;
    let r0 = Datasets::single_node(fx.store.clone(), c.clone());
    let id = r0.begin("s", Some(p)).unwrap();
    c.rank = "1".into();
    let r1 = Datasets::single_node(fx.store.clone(), c);
    r1.begin("s", None).unwrap();
    r1.complete(None, true).unwrap();
    assert_eq!(
        r1.show(id).unwrap().state,
        State::Open,
        "rank 0 alive: still open"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let d = r1.show(id).unwrap();
    assert_eq!(d.state, State::Incomplete);
    assert!(
        d.reason.as_deref().unwrap().contains("died before completing"),
        "{d:?}"
    );
    // Its late completion is refused.
    assert_eq!(r0.complete(Some(id), true).unwrap_err().errno(), libc::EALREADY);
}

#[test]
fn rank_that_begins_again_without_completing_leaves_the_old_dataset_incomplete() {
    let fx = fixture();
    let ds = Datasets::single_node(fx.store.clone(), cfg("0"));
    let a = ds.begin("a", None).unwrap();
    let b = ds.begin("b", None).unwrap();
    assert_eq!(ds.show(a).unwrap().state, State::Incomplete);
    assert_eq!(ds.show(b).unwrap().state, State::Open);
}

fn transparent(fx: &Fx, rule: &str) -> Datasets {
    let mut c = cfg("0");
    c.pattern = Some("/step.*".into());
    c.complete_rule = Some(rule.parse().unwrap());
    Datasets::single_node(fx.store.clone(), c)
}

#[test]
fn transparent_files_rule_completes_when_n_files_are_closed() {
    let fx = fixture();
    let ds = transparent(&fx, "files:2");
    fx.store.mkdir("/step.1", 0o755).unwrap();
    write(&fx.store, "/step.1/a", b"a");
    let (all, _) = ds.list().unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].state, State::Open);
    let mut f = fx.store.open("/step.1/b", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(b"bb").unwrap();
    assert_eq!(
        ds.list().unwrap().0[0].state,
        State::Open,
        "b still being written"
    );
    f.close().unwrap();
    let d = &ds.list().unwrap().0[0];
    assert_eq!(d.state, State::Complete);
    assert_eq!(d.files.len(), 2);
    assert_eq!(d.dir.as_deref(), Some("/step.1"));
    assert!(fx
        .store
        .read_dir("/")
        .unwrap()
        .iter()
        .all(|e| e.name != "step.1" || e.kind == ckptfs_store::FileKind::Dir));
}

#[test]
fn transparent_marker_before_files_closed_marks_incomplete() {
    let fx = fixture();
    let ds = transparent(&fx, "marker:done");
    fx.store.mkdir("/step.1", 0o755).unwrap();
    let mut f = fx.store.open("/step.1/a", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(b"half").unwrap();
    write(&fx.store, "/step.1/done", b"");
    let d = &ds.list().unwrap().0[0];
    assert_eq!(d.state, State::Incomplete, "{d:?}");
    assert!(
        d.reason
            .as_deref()
            .unwrap()
            .contains("marker done appeared before /step.1/a"),
        "{d:?}"
    );
    f.close().unwrap();
    // Closing later does not revive it: the marker came first.
    assert_eq!(ds.list().unwrap().0[0].state, State::Incomplete);
    // The right order completes.
    fx.store.mkdir("/step.2", 0o755).unwrap();
    write(&fx.store, "/step.2/a", b"whole");
    write(&fx.store, "/step.2/done", b"");
    let all = ds.list().unwrap().0;
    let d2 = all.iter().find(|d| d.dir.as_deref() == Some("/step.2")).unwrap();
    assert_eq!(d2.state, State::Complete, "{d2:?}");
    assert!(d2.id > all[0].id);
}

#[test]
fn clock_skew_orders_by_id_not_by_time() {
    let fx = fixture();
    let ds = Datasets::single_node(fx.store.clone(), cfg("0"));
    for s in 1..=2u64 {
        ds.begin(&format!("s{s}"), None).unwrap();
        write(&fx.store, &format!("/f{s}"), &content(s, 0));
        ds.complete(None, true).unwrap();
    }
    // Dataset 1's completion stamped an hour in the future (a clock stepped back since).
    let mut d1 = ds.show(1).unwrap();
    d1.closed_ns = Some(d1.closed_ns.unwrap() + 3_600_000_000_000);
    d1.created_ns += 3_600_000_000_000;
    ckptfs_datasets::record::save(&fx.store, &d1).unwrap();
    let r = ds.restart().unwrap();
    assert_eq!(
        r.chosen.unwrap().id,
        2,
        "the newest id wins whatever the clocks say"
    );
    let need = ckptfs_datasets::policy::need(&ds).unwrap();
    assert_eq!(
        need.since_s,
        Some(0.0),
        "a completion in the future counts as just now"
    );
}

/// What the test knows of each dataset: is every file intact somewhere?
#[derive(Default)]
struct Model {
    recoverable: BTreeMap<u64, bool>,
    content: BTreeMap<u64, BTreeMap<String, Vec<u8>>>,
}

/// Worker process of `restart_picks_the_newest...` (run by it with `--ignored`): begin,
/// write, then complete or hang until killed.
#[test]
#[ignore = "a worker process started by restart_picks_the_newest_wholly_recoverable_dataset_with_killed_ranks"]
fn worker_entry() {
    let Ok(store_name) = std::env::var("HD_WORKER_STORE") else {
        return;
    };
    let step: u64 = std::env::var("HD_WORKER_STEP").unwrap().parse().unwrap();
    let rank = std::env::var("HD_WORKER_RANK").unwrap();
    let hang = std::env::var("HD_WORKER_HANG").is_ok();
    let store = Store::attach(&StoreOptions::named(&store_name)).unwrap();
    let mut c = cfg(&rank);
    c.world = 2;
    let ds = Datasets::single_node(store.clone(), c);
    ds.begin(&format!("step{step}"), Some(ckptfs_store::process::me()))
        .unwrap();
    let path = format!("/ckpt/{step}/rank{rank}");
    let _ = store.mkdir("/ckpt", 0o755);
    let _ = store.mkdir(&format!("/ckpt/{step}"), 0o755);
    let mut f = store.open(&path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&content(step, rank.parse().unwrap())).unwrap();
    if hang {
        println!("READY");
        std::thread::sleep(std::time::Duration::from_secs(600));
    }
    f.close().unwrap();
    ds.complete(None, true).unwrap();
}

#[test]
fn restart_picks_the_newest_wholly_recoverable_dataset_with_killed_ranks() {
    let fx = fixture();
    let exe = std::env::current_exe().unwrap();
    let ds = Datasets::single_node(fx.store.clone(), {
        let mut c = cfg("0");
        c.world = 2;
        c
    });
    let mut model = Model::default();
    // Deterministic "random" pattern of SIGKILLs: step s kills rank (s % 2) when s % 3 == 2.
    for step in 1..=8u64 {
        let kill = step % 3 == 2;
        let mut kids = Vec::new();
        for rank in 0..2u32 {
            let hang = kill && rank == (step % 2) as u32;
            let mut cmd = Command::new(&exe);
            cmd.args([
                "--exact",
                "worker_entry",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HD_WORKER_STORE", &fx.name)
            .env("HD_WORKER_STEP", step.to_string())
            .env("HD_WORKER_RANK", rank.to_string())
            .stdout(std::process::Stdio::piped());
            if hang {
                cmd.env("HD_WORKER_HANG", "1");
            }
            kids.push((cmd.spawn().unwrap(), hang));
        }
        // The rank that lives completes first, so both have begun before the kill.
        kids.sort_by_key(|(_, hang)| *hang);
        for (mut k, hang) in kids {
            if hang {
                use std::io::BufRead;
                let out = k.stdout.take().unwrap();
                let mut lines = std::io::BufReader::new(out).lines();
                while let Some(Ok(l)) = lines.next() {
                    if l.contains("READY") {
                        break;
                    }
                }
                k.kill().unwrap();
            }
            let st = k.wait().unwrap();
            assert!(hang || st.success(), "worker failed: {st:?}");
        }
        model.recoverable.insert(step, !kill);
        let files: BTreeMap<String, Vec<u8>> = (0..2)
            .map(|r| (format!("/ckpt/{step}/rank{r}"), content(step, r)))
            .collect();
        model.content.insert(step, files);
    }
    // Damage the newest complete dataset's file (step 7): a bit flipped in memory is
    // modelled by rewriting it with other bytes.
    write(&fx.store, "/ckpt/7/rank1", b"garbage");
    model.recoverable.insert(7, false);
    let (all, _) = ds.list().unwrap();
    for d in &all {
        eprintln!(
            "{} {} {:?} {:?} {:?}",
            d.id,
            d.name,
            d.state,
            d.reason,
            d.parts.keys().collect::<Vec<_>>()
        );
    }
    for d in &all {
        let step: u64 = d.name.trim_start_matches("step").parse().unwrap();
        let want = if step % 3 == 2 {
            State::Incomplete
        } else {
            State::Complete
        };
        assert_eq!(d.state, want, "{d:?}");
    }
    let expect = *model.recoverable.iter().rev().find(|(_, ok)| **ok).unwrap().0;
    let r = ds.restart().unwrap();
    let chosen = r.chosen.expect("a dataset is recoverable");
    assert_eq!(chosen.name, format!("step{expect}"));
    for (p, bytes) in &model.content[&expect] {
        assert_eq!(&read(&fx.store, p), bytes, "{p} byte-identical");
    }
    let reasons: Vec<String> = r
        .skipped
        .iter()
        .map(|s| format!("{}: {}", s.name, s.reason))
        .collect();
    assert!(
        reasons
            .iter()
            .any(|s| s.starts_with("step8:") && s.contains("incomplete")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|s| s.starts_with("step7:") && s.contains("damaged or lost on every level")),
        "{reasons:?}"
    );
}

#[test]
fn restart_brings_lost_files_back_from_the_pfs_crc_checked() {
    let fx = fixture();
    let dest = tempfile::tempdir().unwrap();
    let mut c = cfg("0");
    c.dests = vec![dest.path().to_path_buf()];
    let ds = Datasets::single_node(fx.store.clone(), c);
    for s in 1..=3u64 {
        ds.begin(&format!("s{s}"), None).unwrap();
        write(&fx.store, &format!("/d{s}/a"), &content(s, 0));
        write(&fx.store, &format!("/d{s}/b"), &content(s, 1));
        ds.complete(None, true).unwrap();
    }
    // Drain everything, then lose dataset 3's file b in memory and dataset 2's a everywhere.
    let mut acfg = ckptfs_agent::AgentConfig::new(&[dest.path().to_path_buf()]);
    acfg.node_id = "n0".into();
    let agent = ckptfs_agent::Agent::new(&fx.store, acfg).unwrap();
    agent.run_once().unwrap();
    let mut d = ds.show(3).unwrap();
    ds.refresh_levels(&mut d);
    assert_eq!(d.levels(), vec!["local".to_string(), "pfs".to_string()]);
    fx.store.unlink("/d3/b").unwrap();
    // Damage the PFS copy of /d3/a and remove its local one: dataset 3 is lost.
    fx.store.unlink("/d3/a").unwrap();
    std::fs::write(dest.path().join("d3/a"), b"corrupt").unwrap();
    let r = ds.restart().unwrap();
    let chosen = r.chosen.unwrap();
    // /d3/a's PFS copy fails its checksum while being restored: dataset 3 is skipped.
    assert_eq!(chosen.id, 2, "{:?}", r.skipped);
    assert!(
        r.skipped.iter().any(|s| s.id == 3 && s.reason.contains("/d3/")),
        "{:?}",
        r.skipped
    );
    assert_eq!(read(&fx.store, "/d2/a"), content(2, 0));
    // Now lose dataset 2's local copy too: it comes back from the PFS byte-identical.
    fx.store.unlink("/d2/a").unwrap();
    let r = ds.restart().unwrap();
    assert_eq!(r.chosen.unwrap().id, 2);
    assert_eq!(
        r.restored.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(),
        vec!["/d2/a"]
    );
    assert_eq!(read(&fx.store, "/d2/a"), content(2, 0));
}

/// The settings' `[levels]` read order: a PFS directory named as a registry level
/// (`pfs:/DIR`, no drain destination given) is where the restart finds the files the
/// store lost, brings them back through the level interface (each chunk checked) and
/// lists them by the level's id; a damaged copy there skips the dataset naming the file
/// and the level; without the level in the order the datasets are on no level.
#[test]
fn restart_reads_a_registry_level_of_the_levels_order() {
    let fx = fixture();
    let dest = tempfile::tempdir().unwrap();
    let ds = Datasets::single_node(fx.store.clone(), cfg("0"));
    for s in 1..=2u64 {
        ds.begin(&format!("s{s}"), None).unwrap();
        write(&fx.store, &format!("/l{s}/a"), &content(s, 0));
        write(&fx.store, &format!("/l{s}/b"), &content(s, 1));
        ds.complete(None, true).unwrap();
    }
    let mut acfg = ckptfs_agent::AgentConfig::new(&[dest.path().to_path_buf()]);
    acfg.node_id = "n0".into();
    ckptfs_agent::Agent::new(&fx.store, acfg)
        .unwrap()
        .run_once()
        .unwrap();
    for s in 1..=2u64 {
        fx.store.unlink(&format!("/l{s}/a")).unwrap();
        fx.store.unlink(&format!("/l{s}/b")).unwrap();
    }
    let id = format!("pfs:{}", dest.path().display());
    let order = |v: &str| {
        let levels = ckptfs_settings::LevelsSettings {
            order: ckptfs_settings::levels::parse_order(v).unwrap(),
        };
        ckptfs_level::open_levels(&levels, &[&ckptfs_agent::PfsFactory], &BTreeMap::new()).unwrap()
    };
    // Not in the order (and no destination given): on no level.
    let plain = Datasets::single_node(fx.store.clone(), cfg("0")).with_levels(order("local,pfs"));
    let r = plain.restart().unwrap();
    assert!(r.chosen.is_none(), "{:?}", r.skipped);
    assert!(
        r.skipped.iter().all(|s| s.reason.contains("lost on every level")),
        "{:?}",
        r.skipped
    );
    // In the order: listed by its id, and the restart brings dataset 2 back from it.
    let ds = Datasets::single_node(fx.store.clone(), cfg("0")).with_levels(order(&format!("local,{id}")));
    let mut d = ds.show(2).unwrap();
    ds.refresh_levels(&mut d);
    assert_eq!(d.levels(), vec![id.clone()]);
    let r = ds.restart().unwrap();
    assert_eq!(r.chosen.as_ref().map(|c| c.id), Some(2), "{:?}", r.skipped);
    assert_eq!(r.restored.len(), 2);
    assert_eq!(r.sources.get("/l2/a"), Some(&id));
    assert_eq!(read(&fx.store, "/l2/a"), content(2, 0));
    assert_eq!(read(&fx.store, "/l2/b"), content(2, 1));
    // Damaged on the level: dataset 2 is skipped naming the file and the level, and
    // dataset 1 comes back instead.
    fx.store.unlink("/l2/a").unwrap();
    fx.store.unlink("/l2/b").unwrap();
    let mut bad = content(2, 0);
    bad[10] ^= 1;
    std::fs::write(dest.path().join("l2/a"), &bad).unwrap();
    let r = ds.restart().unwrap();
    assert_eq!(r.chosen.as_ref().map(|c| c.id), Some(1), "{:?}", r.skipped);
    assert!(
        r.skipped
            .iter()
            .any(|s| s.id == 2 && s.reason.contains("/l2/a") && s.reason.contains(&id)),
        "{:?}",
        r.skipped
    );
    assert!(
        fx.store.stat("/l2/a").is_err(),
        "nothing of the damaged copy is published"
    );
    assert_eq!(read(&fx.store, "/l1/b"), content(1, 1));
}

#[test]
fn leftover_temporary_and_unreadable_records_do_not_break_listing() {
    let fx = fixture();
    let ds = Datasets::single_node(fx.store.clone(), cfg("0"));
    ds.begin("a", None).unwrap();
    write(&fx.store, "/a", b"a");
    ds.complete(None, true).unwrap();
    // A writer SIGKILLed mid-write leaves a temporary (pid 4194303: not running), and a
    // record damaged by hand.
    let dir = ckptfs_datasets::record::job_dir("t");
    write(
        &fx.store,
        &format!("{dir}/.tmp.4194303.00000000000000000002.json"),
        b"{\"format\": \"ckptfs-data",
    );
    write(
        &fx.store,
        &format!("{dir}/00000000000000000009.json"),
        b"not json",
    );
    let (all, bad) = ds.list().unwrap();
    assert_eq!(all.iter().map(|d| d.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].0.ends_with("00000000000000000009.json"));
    // The next begin removes the dead writer's temporary; ids come from next_id and the
    // readable records (the unreadable one is left for a person to look at).
    let id = ds.begin("b", None).unwrap();
    assert_eq!(id, 2);
    let names: Vec<String> = fx
        .store
        .read_dir(&dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(!names.iter().any(|n| n.starts_with(".tmp.4194303.")), "{names:?}");
}

/// Worker process of `sigkill_during_record_writes_leaves_every_record_readable`.
#[test]
#[ignore = "a worker process started by sigkill_during_record_writes_leaves_every_record_readable"]
fn loop_worker_entry() {
    let Ok(store_name) = std::env::var("HD_LOOP_STORE") else {
        return;
    };
    let store = Store::attach(&StoreOptions::named(&store_name)).unwrap();
    let ds = Datasets::single_node(store.clone(), cfg("0"));
    println!("READY");
    for i in 0.. {
        ds.begin(&format!("s{i}"), None).unwrap();
        write(&store, &format!("/l{}", i % 4), &content(i, 0));
        ds.complete(None, true).unwrap();
    }
}

#[test]
fn sigkill_during_record_writes_leaves_every_record_readable() {
    let fx = fixture();
    let exe = std::env::current_exe().unwrap();
    let mut before = 0;
    for round in 0..4u64 {
        let mut k = Command::new(&exe)
            .args([
                "--exact",
                "loop_worker_entry",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HD_LOOP_STORE", &fx.name)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::BufRead;
            let out = k.stdout.take().unwrap();
            let mut lines = std::io::BufReader::new(out).lines();
            while let Some(Ok(l)) = lines.next() {
                if l.contains("READY") {
                    break;
                }
            }
        }
        // Wait until it has completed a dataset (generous: a loaded machine), then let it
        // run a varying while more and kill it wherever it is.
        let t0 = std::time::Instant::now();
        while ckptfs_datasets::record::load_all(&fx.store, "t").unwrap().0.len() <= before + 1 {
            assert!(t0.elapsed().as_secs() < 120, "the worker made no progress");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(30 + 40 * round));
        k.kill().unwrap();
        k.wait().unwrap();
        let ds = Datasets::single_node(fx.store.clone(), cfg("0"));
        let (all, bad) = ds.list().expect("the lock is free again after the kill");
        assert!(bad.is_empty(), "round {round}: {bad:?}");
        assert!(all.len() > before + 1, "round {round}: the worker wrote records");
        let ids: Vec<u64> = all.iter().map(|d| d.id).collect();
        let mut sorted = ids.clone();
        sorted.dedup();
        assert_eq!(ids, sorted, "ids unique and ascending");
        assert!(
            all.iter()
                .all(|d| d.state != State::Open || d.id == *ids.last().unwrap()),
            "only the newest can be open"
        );
        // The killed writer's open part is given up when this rank begins again.
        let id = ds.begin("after", None).unwrap();
        assert!(id > *ids.last().unwrap_or(&0));
        ds.complete(None, true).unwrap();
        before = all.len() + 1;
    }
}

#[test]
fn d9_a_rank_deciding_after_a_faster_rank_deleted_its_files_gets_the_same_dataset() {
    // Failure case D9 on one node (two ranks sharing its store): rank 0 restarts first,
    // resumes and deletes its file of the chosen dataset (as an application that cleans
    // up after itself does); rank 1 decides only then.
    let fx = fixture();
    let rank = |r: &str| {
        let mut c = cfg(r);
        c.world = 2;
        Datasets::single_node(fx.store.clone(), c)
    };
    let (r0, r1) = (rank("0"), rank("1"));
    let step = |s: u64| {
        r0.begin(&format!("step{s}"), None).unwrap();
        r1.begin(&format!("step{s}"), None).unwrap();
        for r in 0..2 {
            write(&fx.store, &format!("/ck{s}/rank{r}"), &content(s, r));
        }
        r0.complete(None, true).unwrap();
        assert_eq!(r1.complete(None, true).unwrap().state, State::Complete);
    };
    step(1);
    step(2);
    let fast = r0.restart().unwrap();
    assert_eq!(fast.chosen.as_ref().unwrap().name, "step2");
    assert_eq!((fast.round, fast.adopted), (Some(1), false));
    fx.store.unlink("/ck2/rank0").unwrap();
    // The race is real: step2 is no longer wholly recoverable, a search on its own
    // would now take step1.
    let d2 = r1.show(2).unwrap();
    assert!(r1.sources(&d2).is_err(), "step2 lost a file");
    assert_eq!(r1.have_restart().unwrap().map(|x| x.1).as_deref(), Some("step2"));
    let slow = r1.restart().unwrap();
    assert_eq!(slow.chosen.as_ref().unwrap().name, "step2", "{:?}", slow.skipped);
    assert_eq!((slow.round, slow.adopted), (Some(1), true));
    assert_eq!(slow.missing, vec!["/ck2/rank0".to_string()]);
    assert_eq!(
        read(&fx.store, "/ck2/rank1"),
        content(2, 1),
        "rank 1's file intact"
    );
    // Both ranks took part: the round is over. The next job restart searches afresh
    // (step2 lost a file for good: step1), and its later rank adopts that.
    let again = r1.restart().unwrap();
    assert_eq!(again.chosen.as_ref().unwrap().name, "step1");
    assert_eq!((again.round, again.adopted), (Some(2), false));
    // Rank 0 never joins round 2: the job checkpointed again (step3 complete job-wide),
    // so the round is over and rank 0's next restart searches afresh.
    step(3);
    let later = r0.restart().unwrap();
    assert_eq!(later.chosen.as_ref().unwrap().name, "step3");
    assert_eq!((later.round, later.adopted), (Some(3), false));
    // A round whose dataset lost every file of this node is not adopted: rank 1 falls
    // back to its own search, with the reason.
    for r in 0..2 {
        fx.store.unlink(&format!("/ck3/rank{r}")).unwrap();
    }
    let fallback = r1.restart().unwrap();
    assert_eq!(fallback.chosen.as_ref().unwrap().name, "step1");
    assert!(
        fallback
            .skipped
            .iter()
            .any(|s| s.reason.contains("restart round 3 chose it")),
        "{:?}",
        fallback.skipped
    );
}
