//! `ckptfs bench preload` runs its small-file rows next to their /dev/shm baseline and
//! reports what the files took in the store (a smoke run with tiny sizes: no time is
//! asserted, only that every row is there and the accounting is right).

use ckptfs_bench::preload::{run, PreloadBenchArgs};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The shim library of this workspace's release build, built if missing.
fn lib() -> PathBuf {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or(ws.join("target"));
    let p = target.join("release/libckptfs_preload.so");
    if !p.is_file() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "--release", "-p", "ckptfs-preload"])
            .current_dir(&ws)
            .status()
            .unwrap();
        assert!(st.success(), "building ckptfs-preload failed");
    }
    p
}

#[test]
fn bench_preload_reports_small_file_rows_against_dev_shm() {
    let files = 300;
    let rep = run(PreloadBenchArgs {
        procs: Some(1),
        file_size: 1 << 20,
        block: 1 << 20,
        reps: 1,
        passthrough_ops: 10,
        small_files: files,
        small_size: 4096,
        preload_lib: Some(lib()),
        no_huge: false,
        json: true,
    })
    .unwrap();
    // As root the bench mounts a huge-page tmpfs for the fresh-process rows on huge pages.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        for case in [
            "i shim write, fresh process, huge pages",
            "j shim read, fresh process, huge pages",
        ] {
            let m = rep
                .results
                .iter()
                .find(|m| m.case == case)
                .unwrap_or_else(|| panic!("no row {case}: {:?}", rep.notes));
            assert!(m.gbps() > 0.0, "{case}");
        }
        assert!(
            !rep.notes.iter().any(|n| n.contains("huge-page store:")),
            "the bench's huge-page store did not get huge pages: {:?}",
            rep.notes
        );
    }
    for phase in ["create+write+close", "stat", "open+read+close", "unlink"] {
        for side in [", shim", " /dev/shm"] {
            let case = format!("s {phase}{side}");
            let m = rep
                .results
                .iter()
                .find(|m| m.case == case)
                .unwrap_or_else(|| panic!("no row {case}"));
            assert_eq!(m.extra["files"], files);
            assert_eq!(m.bytes, files as u64 * 4096);
            assert!(m.extra["files_per_s"].as_f64().unwrap() > 0.0, "{case}");
        }
    }
    let create = rep
        .results
        .iter()
        .find(|m| m.case == "s create+write+close, shim")
        .unwrap();
    // 300 files of 4 KiB are 1.2 MiB: two chunks of 1 MiB, not 300.
    assert_eq!(create.extra["store_bytes_used"], 2 << 20);
    assert!(create.extra.contains_key("vs /dev/shm"));
    assert!(rep
        .notes
        .iter()
        .any(|n| n.starts_with("small files through the shim")));
}
