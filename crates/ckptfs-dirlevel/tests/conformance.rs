//! The directory level passes the level conformance suite, damage included.

use ckptfs_dirlevel::DirLevel;
use ckptfs_level::conformance::{run, Harness};
use std::os::unix::fs::FileExt;

#[test]
fn the_directory_level_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let level = DirLevel::new(dir.path()).unwrap();
    let damage = |path: &str| -> std::io::Result<()> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(level.file_of(path).unwrap())?;
        let len = f.metadata()?.len();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, len - 3)?;
        f.write_all_at(&[b[0] ^ 0x40], len - 3)
    };
    let mut h = Harness::new(&level, 4096, "/conf");
    h.damage = Some(&damage);
    run(&h).unwrap();
}

#[test]
fn paths_that_would_leave_the_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let level = DirLevel::new(dir.path()).unwrap();
    for bad in ["relative", "/../x", "/a/../../x", "/a//b", "/", "/.ckdl-tmp.1.2"] {
        assert!(level.file_of(bad).is_none(), "{bad}");
        assert_eq!(
            ckptfs_level::Level::stat(&level, bad).unwrap_err().errno(),
            libc::EINVAL,
            "{bad}"
        );
    }
}
