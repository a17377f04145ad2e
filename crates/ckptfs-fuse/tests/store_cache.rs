//! Kernel attribute/entry caching of the store mount and its invalidation: another
//! process writing the store directly (this test process, through the store API the
//! preload shim uses) and a reader through the mount see each other's changes, although
//! the kernel may keep attributes and names for 60 s; and the cache really saves
//! requests.

mod common;

use ckptfs_fuse::mount;
use ckptfs_fuse::{CacheConfig, IoMode, StoreFs};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use common::*;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

#[test]
fn zz_daemon_entry() {
    daemon_entry();
}

struct StoreGuard(String);
impl Drop for StoreGuard {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.0);
    }
}

fn small_store(tag: &str) -> (StoreGuard, Store) {
    let name = store_name(tag);
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(128 << 20);
    o.max_files = Some(1024);
    let s = Store::create(&o).unwrap();
    (StoreGuard(name), s)
}

/// Wait until `f` holds. The bound (5 s) is far below the mount's cache TTL (60 s): a
/// change that shows only because the kernel's cache expired fails the test.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{what}: not visible through the mount after 5 s (cache TTL 60 s)"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn put(s: &Store, path: &str, data: &[u8]) {
    let mut f = s.open(path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(data).unwrap();
    f.close().unwrap();
}

fn size_of(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.len())
}

#[test]
fn store_changes_outside_the_mount_invalidate_its_caches() {
    let (g, s) = small_store("inval");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let d = Daemon::store_cached(&g.0, &mp, 60);
    s.mkdir("/d", 0o755).unwrap();

    // Size and content: the kernel has the file's attributes and pages cached.
    let v1 = pattern(1, 100_000);
    put(&s, "/d/f", &v1);
    let f = mp.join("d/f");
    assert_eq!(std::fs::read(&f).unwrap(), v1);
    assert_eq!(size_of(&f), Some(100_000));
    let v2 = pattern(2, 300_000);
    put(&s, "/d/f", &v2);
    eventually("new size", || size_of(&f) == Some(300_000));
    assert_eq!(std::fs::read(&f).unwrap(), v2);

    // Same size, new bytes, read through a descriptor opened before the change
    // (read-write: such opens use the page cache, whose pages must be dropped).
    let mut open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f)
        .unwrap();
    let mut buf = vec![0u8; v2.len()];
    open.read_exact(&mut buf).unwrap();
    assert_eq!(buf, v2);
    let v3 = pattern(3, 300_000);
    put(&s, "/d/f", &v3);
    eventually("new bytes in cached pages", || {
        open.seek(SeekFrom::Start(0)).unwrap();
        open.read_exact(&mut buf).unwrap();
        buf == v3
    });
    // A new open sees them too.
    assert_eq!(std::fs::read(&f).unwrap(), v3);
    drop(open);

    // A new name (the kernel looked it up and got ENOENT).
    let g2 = mp.join("d/g");
    assert!(size_of(&g2).is_none());
    put(&s, "/d/g", b"hello");
    eventually("new name", || size_of(&g2) == Some(5));
    assert_eq!(std::fs::read(&g2).unwrap(), b"hello");
    let names = |dir: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&mp.join("d")), ["f", "g"]);

    // A removed name the kernel has cached.
    s.unlink("/d/g").unwrap();
    eventually("removed name", || size_of(&g2).is_none());
    assert_eq!(names(&mp.join("d")), ["f"]);

    // A rename over a name the kernel has cached: the old name goes, the new one shows
    // the moved file's bytes.
    put(&s, "/d/h", b"old h");
    let h = mp.join("d/h");
    eventually("h", || size_of(&h) == Some(5));
    s.rename("/d/f", "/d/h").unwrap();
    eventually("rename", || size_of(&f).is_none() && size_of(&h) == Some(300_000));
    assert_eq!(std::fs::read(&h).unwrap(), v3);

    // Mode and a new directory's contents.
    s.chmod("/d/h", 0o600).unwrap();
    eventually("chmod", || {
        std::fs::metadata(&h).unwrap().permissions().mode() & 0o7777 == 0o600
    });
    s.mkdir("/d/sub", 0o755).unwrap();
    put(&s, "/d/sub/x", b"x");
    eventually("new directory", || size_of(&mp.join("d/sub/x")) == Some(1));
    // The parent's link count follows its new subdirectory.
    eventually("nlink", || {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(mp.join("d")).unwrap().nlink() == 3
    });
    // And back when it goes (its inode is freed: the link count must not stay 3).
    s.unlink("/d/sub/x").unwrap();
    s.rmdir("/d/sub").unwrap();
    eventually("nlink after rmdir", || {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(mp.join("d")).unwrap().nlink() == 2
    });
    assert!(size_of(&mp.join("d/sub")).is_none());

    // The other way: what the mount writes, the store API reads at once.
    std::fs::write(mp.join("d/from-mount"), b"through the mount").unwrap();
    let mut r = s.open("/d/from-mount", OpenFlags::READ, 0).unwrap();
    let mut back = vec![0u8; 64];
    let n = r.read_full(&mut back).unwrap();
    assert_eq!(&back[..n], b"through the mount");
    drop(r);
    assert_eq!(d.stop(), 0);
}

/// With caching on, repeated stats of known paths are answered by the kernel (no
/// request reaches the daemon); with it off, each one is a request.
#[test]
fn store_mount_cache_saves_requests() {
    require_fuse();
    let (_g, s) = small_store("reqs");
    for i in 0..20 {
        put(&s, &format!("/f{i}"), b"data");
    }
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mut counts = Vec::new();
    for cache in [CacheConfig::DEFAULT, CacheConfig::OFF] {
        let fs = StoreFs::with_cache(s.clone(), IoMode::Auto, cache);
        let counters = fs.counters();
        let session = mount::spawn_store(fs, &mp, "ckptfs:cache-test", 2).unwrap();
        for i in 0..20 {
            assert_eq!(size_of(&mp.join(format!("f{i}"))), Some(4));
        }
        let before = counters.meta.load(Relaxed);
        for _ in 0..50 {
            for i in 0..20 {
                assert_eq!(size_of(&mp.join(format!("f{i}"))), Some(4));
            }
        }
        counts.push(counters.meta.load(Relaxed) - before);
        session.unmount(&mp).unwrap();
    }
    // 1,000 stats: cached, a few requests at most (an invalidation, the root's
    // attributes); uncached, at least one per stat.
    assert!(
        counts[0] < 50,
        "cached mount made {} metadata requests",
        counts[0]
    );
    assert!(
        counts[1] >= 1000,
        "uncached mount made {} metadata requests",
        counts[1]
    );
}
