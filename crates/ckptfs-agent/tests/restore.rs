//! End to end: a separate process writes checkpoints, the agent drains them, the store
//! is destroyed, restore brings them back byte-identical; what an application sees
//! before the restore; a destination file that no longer matches its manifest.

mod common;
use ckptfs_agent::{restore, restore_path, Agent};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use common::*;
use std::path::Path;

const CS: usize = 64 << 10;

fn ckpt_files() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for step in [10, 20] {
        for rank in 0..3u64 {
            let size = (rank as usize + 1) * 3 * CS + 1000 * rank as usize + step;
            v.push((
                format!("/ckpt/step{step}/rank{rank}.bin"),
                data(step as u64 * 100 + rank, size),
            ));
        }
    }
    v.push(("/ckpt/meta.json".into(), b"{\"latest\": 20}".to_vec()));
    v
}

/// Child: the "application", writing its checkpoints through the native store API.
#[test]
fn writer_child() {
    let Ok(name) = std::env::var("CKPTFS_AGENT_TEST_STORE") else {
        return;
    };
    let s = Store::attach(&StoreOptions::named(name)).unwrap();
    for (p, d) in ckpt_files() {
        mkdirs(&s, &p);
        let mut f = s.open(&p, OpenFlags::CREATE, 0o640).unwrap();
        for piece in d.chunks(10_000) {
            f.write_all(piece).unwrap();
        }
        f.close().unwrap();
    }
}

fn preload_lib() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("CKPTFS_BIN_DIR")
        .map(Into::into)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release"));
    let lib = dir.join("libckptfs_preload.so");
    lib.exists().then_some(lib)
}

#[test]
fn writer_process_drain_destroy_restore_byte_identical() {
    let ts = store("e2e", |_| {});
    let mut ch = child("writer_child", &[("CKPTFS_AGENT_TEST_STORE", ts.name.clone())]);
    assert!(ch.wait().unwrap().success());
    let mut files = ckpt_files();
    // Real programs writing through the preload shim too, when it is built.
    if let Some(lib) = preload_lib() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..2u64 {
            let d = data(500 + i, 2 * CS + 333 * i as usize);
            let src = tmp.path().join(format!("src{i}"));
            std::fs::write(&src, &d).unwrap();
            let st = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "mkdir -p /ckpt/shim && dd if={} of=/ckpt/shim/r{i}.bin bs=64k status=none",
                    src.display()
                ))
                .env("LD_PRELOAD", &lib)
                .env("CKPTFS_STORE", &ts.name)
                .env("CKPTFS_MOUNT", "/ckpt")
                .status()
                .unwrap();
            assert!(st.success());
            files.push((format!("/shim/r{i}.bin"), d));
        }
    } else {
        eprintln!("SKIP shim writers: libckptfs_preload.so not built");
    }
    let dest = tempfile::tempdir().unwrap();
    {
        let agent = Agent::new(&ts.store, cfg(dest.path())).unwrap();
        let sum = agent.run_once().unwrap();
        assert!(sum.failed.is_empty(), "{:?}", sum.failed);
        assert_eq!(sum.drained_files as usize, files.len());
    }
    // The node reboots: the store is gone.
    let name = ts.name.clone();
    drop(ts);
    assert!(Store::attach(&StoreOptions::named(&name)).is_err());
    let ts = store("e2e", |_| {});
    assert_eq!(ts.name, name);
    let targets = ckptfs_agent::config::targets(&[dest.path().to_path_buf()], &[]);
    let rep = restore(&ts.store, &targets, "/").unwrap();
    assert!(rep.failed.is_empty(), "{:?}", rep.failed);
    assert_eq!(rep.restored.len(), files.len());
    for (p, d) in &files {
        assert_eq!(&get(&ts.store, p), d, "{p}");
        if p.starts_with("/ckpt") {
            assert_eq!(ts.store.stat(p).unwrap().mode & 0o777, 0o640);
        }
    }
    assert!(ts
        .store
        .list_all()
        .iter()
        .all(|(p, _)| !p.contains("ckptfs-restore")));
    // Restoring again changes nothing, and the agent sees everything as drained.
    let rep = restore(&ts.store, &targets, "/ckpt/step10").unwrap();
    assert_eq!((rep.restored.len(), rep.present.len()), (0, 3));
    let agent = Agent::new(&ts.store, cfg(dest.path())).unwrap();
    let sum = agent.run_once().unwrap();
    assert_eq!(
        (sum.drained_files, sum.already_drained as usize),
        (0, files.len())
    );
}

#[test]
fn checkpoint_only_in_the_destination_is_enoent_until_restored() {
    let ts = store("enoent", |_| {});
    put(&ts.store, "/ckpt/s1/r0", &data(7, 2 * CS + 5));
    put(&ts.store, "/ckpt/s1/r1", &data(8, 100));
    let dest = tempfile::tempdir().unwrap();
    let mut c = cfg(dest.path());
    c.evict = true; // the memory copy is freed after the drain
    Agent::new(&ts.store, c).unwrap().run_once().unwrap();
    // What the application sees (native API; the preload shim maps the same errno).
    let e = ts.store.open("/ckpt/s1/r0", OpenFlags::READ, 0).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT);
    // Read-through hook: restore exactly that file on demand.
    let dests = [dest.path().to_path_buf()];
    assert!(restore_path(&ts.store, &dests, "/ckpt/s1/r0").unwrap());
    assert_eq!(get(&ts.store, "/ckpt/s1/r0"), data(7, 2 * CS + 5));
    assert!(
        ts.store.stat("/ckpt/s1/r1").is_err(),
        "only the asked file comes back"
    );
    assert!(!restore_path(&ts.store, &dests, "/ckpt/s1/nope").unwrap());
    assert!(
        restore_path(&ts.store, &dests, "/ckpt/s1/r0").unwrap(),
        "already present"
    );

    // Through the preload shim, when it has been built.
    let Some(lib) = preload_lib() else {
        eprintln!("SKIP shim part: libckptfs_preload.so not built");
        return;
    };
    // The shim maps the application path MOUNT/x to the store path /x.
    let run = |store_path: &str| {
        std::process::Command::new("cat")
            .arg(format!("/ckpt{store_path}"))
            .env("LD_PRELOAD", &lib)
            .env("CKPTFS_STORE", &ts.name)
            .env("CKPTFS_MOUNT", "/ckpt")
            .output()
            .unwrap()
    };
    let out = run("/ckpt/s1/r1");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No such file"),
        "{out:?}"
    );
    assert!(restore_path(&ts.store, &dests, "/ckpt/s1/r1").unwrap());
    let out = run("/ckpt/s1/r1");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, data(8, 100));
}

#[test]
fn destination_file_that_does_not_match_its_manifest_is_not_restored() {
    let ts = store("mismatch", |_| {});
    put(&ts.store, "/x/a", &data(1, 3 * CS));
    put(&ts.store, "/x/b", &data(2, 1000));
    let dest = tempfile::tempdir().unwrap();
    let mut c = cfg(dest.path());
    c.evict = true;
    Agent::new(&ts.store, c).unwrap().run_once().unwrap();
    let p = dest.path().join("x/a");
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[CS + 10] ^= 1;
    std::fs::write(&p, bytes).unwrap();
    let targets = ckptfs_agent::config::targets(&[dest.path().to_path_buf()], &[]);
    let rep = restore(&ts.store, &targets, "/x").unwrap();
    assert_eq!(rep.restored.len(), 1);
    assert_eq!(rep.failed.len(), 1);
    assert_eq!(rep.failed[0].path, "/x/a");
    assert_eq!(rep.failed[0].chunk, Some(1));
    assert_eq!(rep.failed[0].errno, libc::EIO);
    assert!(
        ts.store.stat("/x/a").is_err(),
        "no partial or corrupt file in the store"
    );
    assert!(ts
        .store
        .list_all()
        .iter()
        .all(|(p, _)| !p.contains("ckptfs-restore")));
    assert_eq!(get(&ts.store, "/x/b"), data(2, 1000));
    // Truncated destination file: also refused.
    std::fs::write(&p, &data(1, 3 * CS)[..CS]).unwrap();
    assert!(restore_path(&ts.store, &[dest.path().to_path_buf()], "/x/a").is_err());
}
