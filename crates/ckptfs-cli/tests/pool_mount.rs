//! `ckptfs mount --pool`: the aggregate memory pool as a FUSE file system over a pool of
//! processes on 127.0.0.1 (manager, three benefactors; ports 26292-26295). Files written
//! through the mount by ordinary file calls are listed by `ckptfs pool ls` and read
//! byte-identical by `ckptfs pool get` and through the mount; a second version sends
//! only its changed chunk; unlink removes; unsupported calls answer their documented
//! errno. Needs root and /dev/fuse: SKIPPED otherwise (fails under
//! CKPTFS_REQUIRE_ROOT_TESTS=1).

mod pool_support;

use pool_support::{Pool, BIN};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Mounted(PathBuf, PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new(BIN)
            .arg("umount")
            .arg(&self.0)
            .current_dir(&self.1)
            .output();
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

fn bytes(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

#[test]
fn files_written_through_a_pool_mount_are_pool_files() {
    if !ckptfs_testsupport::require_root("mount a FUSE file system") {
        return;
    }
    if !Path::new("/dev/fuse").exists() {
        ckptfs_testsupport::skip_root_only("no /dev/fuse");
        return;
    }
    let pool = Pool::start("pl3-pool-mount", 26292, "");
    let mp = pool.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let log = pool.path().join("mount.log");
    pool.run(&[
        "mount",
        "--cluster",
        "c.toml",
        "--node-id",
        "node4",
        "--pool",
        "node1",
        "--pool-buffer",
        "1M",
        "--log-file",
        log.to_str().unwrap(),
        mp.to_str().unwrap(),
    ]);
    let _m = Mounted(mp.clone(), pool.path().to_path_buf());

    // Ordinary file calls: mkdir, write in pieces, close.
    std::fs::create_dir(mp.join("run1")).unwrap();
    let a = bytes((5 << 20) + 4321, 1);
    let b = bytes(100_000, 2);
    {
        let mut f = std::fs::File::create(mp.join("run1/rank0.ckpt")).unwrap();
        for piece in a.chunks(300_000) {
            f.write_all(piece).unwrap();
        }
    }
    std::fs::write(mp.join("run1/rank1.ckpt"), &b).unwrap();
    std::fs::write(mp.join("top.txt"), b"hello pool").unwrap();

    // The pool's own tools see them.
    let mut listed = pool.listed();
    listed.sort();
    assert_eq!(listed, ["/run1/rank0.ckpt", "/run1/rank1.ckpt", "/top.txt"]);
    assert_eq!(pool.get("/run1/rank0.ckpt"), a);
    assert_eq!(pool.get("/run1/rank1.ckpt"), b);
    // And the mount reads them back, lists them, stats them.
    assert_eq!(std::fs::read(mp.join("run1/rank0.ckpt")).unwrap(), a);
    assert_eq!(std::fs::read(mp.join("top.txt")).unwrap(), b"hello pool");
    let mut names: Vec<String> = std::fs::read_dir(mp.join("run1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["rank0.ckpt", "rank1.ckpt"]);
    assert_eq!(
        std::fs::metadata(mp.join("run1/rank0.ckpt")).unwrap().len(),
        a.len() as u64
    );
    assert!(std::fs::metadata(mp.join("run1")).unwrap().is_dir());

    // A second version through the mount (O_TRUNC): one changed chunk crosses the wire.
    let mut a2 = a.clone();
    a2[(3 << 20) + 5] ^= 0xff;
    std::fs::write(mp.join("run1/rank0.ckpt"), &a2).unwrap();
    assert_eq!(pool.get("/run1/rank0.ckpt"), a2);
    let ls = pool.json(&["pool", "ls", "--cluster", "c.toml", "--json", "/run1/rank0.ckpt"]);
    assert_eq!(ls[0]["version"], 2);
    assert_eq!(ls[0]["older"], serde_json::json!([1]));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("version=2") && text.contains("committed"), "{text}");

    // Unsupported: rename (EXDEV), writes elsewhere than the end (EINVAL).
    let e = std::fs::rename(mp.join("top.txt"), mp.join("moved.txt")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EXDEV));
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(mp.join("sparse")).unwrap();
        let e = f.write_at(b"x", 4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    // unlink removes the pool file.
    std::fs::remove_file(mp.join("top.txt")).unwrap();
    assert!(!pool.listed().contains(&"/top.txt".to_string()));
    assert!(!mp.join("top.txt").exists());
}
