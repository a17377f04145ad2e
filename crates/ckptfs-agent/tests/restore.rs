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

// ---------------------------------------------------------------- hostile restore input
//
// Each test plants what an attacker with write access to the destination could, and
// checks that nothing outside the destination is read, nothing hangs or aborts, no file
// content is printed, and the good files are restored anyway.

use ckptfs_agent::manifest;
use ckptfs_agent::RestoreReport;
use std::path::PathBuf;

/// Drain `files` (with --evict: the store then lacks them) into a new destination.
fn drained(tag: &str, files: &[(&str, Vec<u8>)]) -> (TestStore, tempfile::TempDir) {
    let ts = store(tag, |_| {});
    for (p, d) in files {
        put(&ts.store, p, d);
    }
    let dest = tempfile::tempdir().unwrap();
    let mut c = cfg(dest.path());
    c.evict = true;
    let sum = Agent::new(&ts.store, c).unwrap().run_once().unwrap();
    assert!(sum.failed.is_empty(), "{:?}", sum.failed);
    assert_eq!(sum.drained_files as usize, files.len());
    for (p, _) in files {
        assert!(ts.store.stat(p).is_err(), "{p} evicted");
    }
    (ts, dest)
}

fn manifest_of(dir: &Path) -> PathBuf {
    dir.join(manifest::file_name("n0"))
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &serde_json::Value) {
    std::fs::write(p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// A manifest entry that describes `bytes` exactly (chunks of 64 KiB).
fn entry_for(store_path: &str, bytes: &[u8]) -> serde_json::Value {
    let chunks: Vec<u32> = bytes.chunks(CS).map(ckptfs_store::checksum::crc32c).collect();
    serde_json::json!({
        "store_path": store_path,
        "size": bytes.len(),
        "crc32c": ckptfs_store::checksum::crc32c(bytes),
        "chunk_size": CS,
        "chunk_crc32c": chunks,
        "mode": 0o644,
        "mtime_ns": 1,
        "drained_ns": u64::MAX,
    })
}

fn restore_all(ts: &TestStore, dest: &Path, prefix: &str) -> RestoreReport {
    let targets = ckptfs_agent::config::targets(&[dest.to_path_buf()], &[]);
    restore(&ts.store, &targets, prefix).unwrap()
}

fn failed_paths(rep: &RestoreReport) -> Vec<(String, i32)> {
    rep.failed.iter().map(|f| (f.path.clone(), f.errno)).collect()
}

fn store_files(s: &Store) -> Vec<String> {
    let mut v: Vec<String> = s
        .list_all()
        .into_iter()
        .filter(|(_, st)| st.kind == ckptfs_store::FileKind::File)
        .map(|(p, _)| p)
        .collect();
    v.sort();
    v
}

/// A file outside the destination, with content nobody should see.
fn outside_secret(size: usize) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let mut secret = b"TOPSECRET-".repeat(size / 10 + 1);
    secret.truncate(size);
    let p = dir.path().join("secret");
    std::fs::write(&p, &secret).unwrap();
    (dir, p, secret)
}

/// Plant an entry named `key` (with a correct description of the secret) in the
/// manifest of DEST/x and check only the good files come back.
fn planted_key_reads_nothing_outside(tag: &str, key: impl Fn(&Path, &Path) -> String) {
    let a = data(1, 2 * CS + 7);
    let b = data(2, 1000);
    let (ts, dest) = drained(tag, &[("/x/a", a.clone()), ("/x/b", b.clone())]);
    let (_outside, secret_path, secret) = outside_secret(3000);
    let key = key(&dest.path().join("x"), &secret_path);
    let mp = manifest_of(&dest.path().join("x"));
    let mut m = read_json(&mp);
    m["files"][key.as_str()] = entry_for(&format!("/x/{key}"), &secret);
    write_json(&mp, &m);
    let rep = restore_all(&ts, dest.path(), "/");
    assert_eq!(
        failed_paths(&rep),
        vec![(format!("/x/{key}"), libc::EIO)],
        "{rep:?}"
    );
    assert!(rep.failed[0].error.contains("not a single file name"), "{rep:?}");
    assert_eq!(store_files(&ts.store), vec!["/x/a", "/x/b"]);
    assert_eq!(get(&ts.store, "/x/a"), a);
    assert_eq!(get(&ts.store, "/x/b"), b);
}

#[test]
fn dotdot_key_in_a_manifest_reads_nothing_outside_the_destination() {
    planted_key_reads_nothing_outside("dotdot", |dir, secret| {
        let up = "../".repeat(dir.components().count() + 2);
        format!("{up}{}", secret.display().to_string().trim_start_matches('/'))
    });
}

#[test]
fn absolute_path_key_in_a_manifest_reads_nothing_outside_the_destination() {
    planted_key_reads_nothing_outside("abskey", |_, secret| secret.display().to_string());
}

#[test]
fn symlinked_data_file_manifest_or_directory_is_not_followed() {
    let a = data(3, CS + 5);
    let b = data(4, 500);
    let (ts, dest) = drained(
        "symlink",
        &[("/x/a", a.clone()), ("/x/b", b.clone()), ("/y/c", data(5, 10))],
    );
    // x/a becomes a link to a file outside with exactly the drained content: following
    // it would "work", which is the point: nothing outside the destination is read.
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("a");
    std::fs::write(&target, &a).unwrap();
    let xa = dest.path().join("x/a");
    std::fs::remove_file(&xa).unwrap();
    std::os::unix::fs::symlink(&target, &xa).unwrap();
    // y becomes a link to a copy of itself outside (manifest and data intact there).
    let y_out = outside.path().join("y");
    std::fs::rename(dest.path().join("y"), &y_out).unwrap();
    std::os::unix::fs::symlink(&y_out, dest.path().join("y")).unwrap();
    // z holds only a manifest that is a link to y's real manifest outside.
    std::fs::create_dir(dest.path().join("z")).unwrap();
    std::os::unix::fs::symlink(manifest_of(&y_out), manifest_of(&dest.path().join("z"))).unwrap();

    let rep = restore_all(&ts, dest.path(), "/");
    assert_eq!(
        failed_paths(&rep),
        vec![
            ("/x/a".to_string(), libc::ELOOP),
            (format!("/z/{}", manifest::file_name("n0")), libc::ELOOP),
        ],
        "{rep:?}"
    );
    assert_eq!(store_files(&ts.store), vec!["/x/b"]);
    assert_eq!(get(&ts.store, "/x/b"), b);
    // Asking for the linked directory by name does not follow it either.
    let rep = restore_all(&ts, dest.path(), "/y");
    assert!(rep.restored.is_empty(), "{rep:?}");
    assert_eq!(failed_paths(&rep), vec![("/y".to_string(), libc::ELOOP)]);
    assert!(restore_path(&ts.store, &[dest.path().to_path_buf()], "/x/a").is_err());
    assert!(ts.store.stat("/x/a").is_err());
}

#[test]
fn fifo_data_file_or_manifest_is_refused_without_hanging() {
    let b = data(6, 700);
    let (ts, dest) = drained("fifo", &[("/x/a", data(5, CS)), ("/x/b", b.clone())]);
    let mkfifo = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: plain libc call with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    };
    let xa = dest.path().join("x/a");
    std::fs::remove_file(&xa).unwrap();
    mkfifo(&xa);
    std::fs::create_dir(dest.path().join("w")).unwrap();
    let wm = dest.path().join("w").join(manifest::file_name("n1"));
    mkfifo(&wm);
    // A hang would block this thread forever: wait with a generous timeout, and on
    // timeout unblock the FIFOs (open them for writing) before failing.
    let (tx, rx) = std::sync::mpsc::channel();
    let targets = ckptfs_agent::config::targets(&[dest.path().to_path_buf()], &[]);
    let name = ts.name.clone();
    let t = std::thread::spawn(move || {
        let s = Store::attach(&StoreOptions::named(&name)).unwrap();
        let _ = tx.send(restore(&s, &targets, "/").unwrap());
    });
    let rep = match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(r) => r,
        Err(_) => {
            for p in [&xa, &wm] {
                let _ = std::fs::OpenOptions::new().read(true).write(true).open(p);
            }
            panic!("restore hangs on a FIFO");
        }
    };
    t.join().unwrap();
    assert_eq!(
        failed_paths(&rep),
        vec![
            (format!("/w/{}", manifest::file_name("n1")), libc::EINVAL),
            ("/x/a".to_string(), libc::EINVAL),
        ],
        "{rep:?}"
    );
    assert_eq!(store_files(&ts.store), vec!["/x/b"]);
    assert_eq!(get(&ts.store, "/x/b"), b);
}

#[test]
fn crc_mismatch_message_names_file_chunk_and_offset_never_bytes() {
    // The drained file ends in a 48-byte chunk: the CRC of so few bytes would give
    // them away, so the message must carry neither the bytes nor their CRC.
    let a = data(7, CS + 48);
    let (ts, dest) = drained("leak", &[("/x/a", a.clone())]);
    let (_o, _p, secret) = outside_secret(48);
    let mut planted = a[..CS].to_vec();
    planted.extend_from_slice(&secret);
    std::fs::write(dest.path().join("x/a"), &planted).unwrap();
    let rep = restore_all(&ts, dest.path(), "/");
    assert_eq!(rep.failed.len(), 1, "{rep:?}");
    let f = &rep.failed[0];
    assert_eq!((f.path.as_str(), f.errno, f.chunk), ("/x/a", libc::EIO, Some(1)));
    let msg = &f.error;
    assert!(msg.contains("x/a") && msg.contains("chunk 1"), "{msg}");
    assert!(msg.contains(&format!("{CS}..{}", CS + 48)), "offset: {msg}");
    let crc = ckptfs_store::checksum::crc32c(&secret);
    for leak in [
        String::from_utf8_lossy(&secret[..9]).into_owned(),
        format!("{crc:x}"),
        format!("{crc:X}"),
        crc.to_string(),
    ] {
        assert!(!msg.contains(&leak), "{msg:?} leaks {leak:?}");
    }
    assert!(ts.store.stat("/x/a").is_err());
}

#[test]
fn manifest_cannot_substitute_a_file_of_another_directory() {
    let r0 = data(8, 3 * CS);
    let (ts, dest) = drained("subst", &[("/ckpt/s1/r0", r0.clone())]);
    // Another directory's manifest claims /ckpt/s1/r0, newer than the real one, and
    // describes its own file exactly.
    let evil = dest.path().join("evil");
    std::fs::create_dir(&evil).unwrap();
    let fake = data(9, 2 * CS);
    std::fs::write(evil.join("f"), &fake).unwrap();
    let m = serde_json::json!({
        "format": manifest::FORMAT, "node": "n9", "store": "x",
        "files": { "f": entry_for("/ckpt/s1/r0", &fake) },
    });
    write_json(&evil.join(manifest::file_name("n9")), &m);
    let rep = restore_all(&ts, dest.path(), "/");
    assert_eq!(
        failed_paths(&rep),
        vec![("/evil/f".to_string(), libc::EIO)],
        "{rep:?}"
    );
    assert!(
        rep.failed[0].error.contains("does not belong to this directory"),
        "{rep:?}"
    );
    assert_eq!(store_files(&ts.store), vec!["/ckpt/s1/r0"]);
    assert_eq!(get(&ts.store, "/ckpt/s1/r0"), r0);
    // The read-through hook too.
    ts.store.unlink("/ckpt/s1/r0").unwrap();
    assert!(restore_path(&ts.store, &[dest.path().to_path_buf()], "/ckpt/s1/r0").unwrap());
    assert_eq!(get(&ts.store, "/ckpt/s1/r0"), r0);
}

#[test]
fn truncated_manifest_does_not_block_the_other_files() {
    let (a, b, c) = (data(10, 2 * CS + 1), data(11, 99), data(12, CS));
    let (ts, dest) = drained("trunc", &[("/x/a", a), ("/x/b", b), ("/y/c", c.clone())]);
    let x = dest.path().join("x");
    // Another node's manifest in the same directory, intact.
    let d = data(13, 4000);
    std::fs::write(x.join("d"), &d).unwrap();
    let m = serde_json::json!({
        "format": manifest::FORMAT, "node": "n1", "store": "x",
        "files": { "d": entry_for("/x/d", &d) },
    });
    write_json(&x.join(manifest::file_name("n1")), &m);
    let mp = manifest_of(&x);
    let bytes = std::fs::read(&mp).unwrap();
    std::fs::write(&mp, &bytes[..bytes.len() / 2]).unwrap();
    let rep = restore_all(&ts, dest.path(), "/");
    assert_eq!(
        failed_paths(&rep),
        vec![(format!("/x/{}", manifest::file_name("n0")), libc::EIO)],
        "{rep:?}"
    );
    assert!(rep.failed[0].error.contains("truncated"), "{rep:?}");
    assert_eq!(store_files(&ts.store), vec!["/x/d", "/y/c"]);
    assert_eq!(get(&ts.store, "/x/d"), d);
    assert_eq!(get(&ts.store, "/y/c"), c);
}

#[test]
fn enormous_chunk_size_or_size_is_an_error_not_an_abort() {
    let files: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("/x/f{i}"), data(20 + i, CS + 3)))
        .collect();
    let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
    let (ts, dest) = drained("huge", &refs);
    let mp = manifest_of(&dest.path().join("x"));
    let mut m = read_json(&mp);
    m["files"]["f0"]["chunk_size"] = u64::MAX.into();
    m["files"]["f1"]["chunk_size"] = (1u64 << 62).into();
    m["files"]["f2"]["chunk_size"] = 0.into();
    m["files"]["f3"]["size"] = u64::MAX.into();
    m["files"]["f4"]["chunk_crc32c"] = serde_json::Value::Array(vec![0.into(); 100_000]);
    write_json(&mp, &m);
    let rep = restore_all(&ts, dest.path(), "/");
    let want: Vec<(String, i32)> = (0..5).map(|i| (format!("/x/f{i}"), libc::EIO)).collect();
    assert_eq!(failed_paths(&rep), want, "{rep:?}");
    assert!(rep.failed[0].error.contains("chunk size"), "{rep:?}");
    assert_eq!(store_files(&ts.store), vec!["/x/f5"]);
    assert_eq!(get(&ts.store, "/x/f5"), files[5].1);
}

#[test]
fn data_file_of_another_owner_than_its_manifest_is_refused() {
    // SAFETY: plain libc call.
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root (chown)");
        return;
    }
    let b = data(31, 10);
    let (ts, dest) = drained("owner", &[("/x/a", data(30, 100)), ("/x/b", b.clone())]);
    // What a hard link to someone else's file looks like: right name, other owner.
    std::os::unix::fs::chown(dest.path().join("x/a"), Some(65534), None).unwrap();
    let rep = restore_all(&ts, dest.path(), "/");
    assert_eq!(
        failed_paths(&rep),
        vec![("/x/a".to_string(), libc::EPERM)],
        "{rep:?}"
    );
    assert_eq!(store_files(&ts.store), vec!["/x/b"]);
}
