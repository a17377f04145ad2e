//! Issue 14's mdtest-style test: 100,000 files of 4 KiB created, stat-ed, read back
//! (content checked) and removed through the shim by an unmodified C program
//! (`progs/mdtest_small.c`), each phase in a fresh process, on a store whose file count
//! comes from its memory size (1 GiB: 131,072 files, one per 8 KiB; no `max_files` given).
//! Between the phases the store itself is asked what the files cost: one 4 KiB block each.

mod common;

use common::*;
use std::process::Command;
use std::time::Instant;

const FILES: u64 = 100_000;
const DIRS: u64 = 10;
const SIZE: u64 = 4096;

/// Run one phase of the program under the shim; returns its phase lines.
fn phase(ts: &TestStore, prog: &std::path::Path, name: &str) -> String {
    let env = [
        ("LD_PRELOAD", lib().display().to_string()),
        ("CKPTFS_STORE", ts.name.clone()),
        ("CKPTFS_MOUNT", MOUNT.to_string()),
        ("CKPTFS_MEM_SIZE", "1G".to_string()),
    ];
    let t = Instant::now();
    let o = Command::new(prog)
        .args([
            &format!("{MOUNT}/md"),
            &FILES.to_string(),
            &DIRS.to_string(),
            &SIZE.to_string(),
            name,
        ])
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{name}: {}\nstdout: {out}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("{name} ({:.1} s in all):\n{out}", t.elapsed().as_secs_f64());
    out
}

#[test]
fn mdtest_style_100000_small_files_through_the_shim() {
    let prog = program("mdtest_small.c");
    let ts = TestStore::new();
    let out = phase(&ts, &prog, "create");
    assert!(out.starts_with(&format!("create {FILES} ")), "{out}");

    // What the files cost, asked of the store between the phases.
    let info = ts.store().info();
    assert_eq!(
        info.max_files,
        (1u32 << 30) / 8192,
        "file count not derived from 1 GiB"
    );
    assert_eq!(info.files as u64, FILES, "{info:?}");
    assert_eq!(
        info.dirs as u64,
        DIRS + 2,
        "root, /md and its directories: {info:?}"
    );
    assert_eq!(info.incomplete + info.writing + info.failed, 0, "{info:?}");
    assert_eq!(
        info.small_blocks_used, FILES,
        "one 4 KiB block per file: {info:?}"
    );
    let data_chunks = (FILES * SIZE).div_ceil(info.chunk_size) as u32;
    assert_eq!(
        info.small_chunks, data_chunks,
        "small-file chunks packed full: {info:?}"
    );
    assert_eq!(
        info.mem_chunks - info.mem_free_chunks,
        data_chunks,
        "no chunk beyond the small-file chunks in use: {info:?}"
    );

    let out = phase(&ts, &prog, "check");
    for p in ["stat", "read"] {
        assert!(out.contains(&format!("{p} {FILES} ")), "{out}");
    }
    let out = phase(&ts, &prog, "remove");
    assert!(out.starts_with(&format!("remove {FILES} ")), "{out}");

    let s = ts.store();
    let info = s.info();
    assert_eq!((info.files, info.dirs), (0, 1), "{info:?}");
    assert_eq!(info.small_blocks_used, 0, "{info:?}");
    assert_eq!(
        info.small_chunks, 0,
        "emptied small-file chunks go back: {info:?}"
    );
    assert_eq!(info.mem_free_chunks, info.mem_chunks, "{info:?}");
    let rep = s.fsck(false);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
}
