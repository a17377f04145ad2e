//! The C API over the pool: tests/c/capi_pool_test.c, compiled with `cc` against
//! libckptfs.so (beside the ckptfs binary, or in CKPTFS_BIN_DIR: build it first with
//! `cargo build -p ckptfs-capi`, in the same profile), writes a file through
//! `ckptfs_pool_*` into a pool of processes (manager, three benefactors) and reads it
//! back; the file is then listed by `ckptfs pool ls` and read byte-identical by
//! `ckptfs pool get`. Ports 26288-26291 (below the
//! ephemeral ports, which other suites' processes take meanwhile).

mod pool_support;

use pool_support::{pattern, Pool, BIN};
use std::path::{Path, PathBuf};
use std::process::Command;

fn lib_dir() -> PathBuf {
    let dir = std::env::var_os("CKPTFS_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(BIN).parent().unwrap().to_path_buf());
    assert!(
        dir.join("libckptfs.so").exists(),
        "{}/libckptfs.so missing: cargo build -p ckptfs-capi (same profile) first",
        dir.display()
    );
    dir
}

#[test]
fn a_c_program_writes_a_pool_file_through_the_c_api_and_the_pool_tools_read_it() {
    let lib = lib_dir();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let pool = Pool::start("pl3-pool-capi", 26288, "replicas = 2\n");
    let prog = pool.path().join("capi_pool_test");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("include"))
        .arg(root.join("tests/c/capi_pool_test.c"))
        .arg("-L")
        .arg(&lib)
        .args(["-lckptfs", "-o"])
        .arg(&prog)
        .output()
        .expect("a C compiler (cc)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let size: u64 = 3 * (1 << 20) + 12345;
    let out = Command::new(&prog)
        .arg(pool.cluster_file())
        .args(["node4", "/capi/ckpt.0", &size.to_string()])
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    assert!(pool.listed().contains(&"/capi/ckpt.0".to_string()));
    assert_eq!(pool.get("/capi/ckpt.0"), pattern(size));
    // Two copies of each chunk (replicas = 2), on distinct benefactors.
    let ls = pool.json(&["pool", "ls", "--cluster", "c.toml", "--json", "/capi"]);
    for c in ls[0]["chunks"].as_array().unwrap() {
        let r = c["replicas"].as_array().unwrap();
        assert_eq!(r.len(), 1, "{c}");
        assert_ne!(r[0]["node"], c["node"]);
    }
}
