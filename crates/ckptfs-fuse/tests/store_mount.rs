//! Store mode through a real FUSE mount: real programs and POSIX calls compared with a
//! plain directory, the same files seen through the store API, concurrent writers,
//! SIGTERM and SIGKILL of the daemon.

mod common;

use ckptfs_store::{OpenFlags, Store, StoreOptions};
use common::*;
use std::io::{Read, Write};
use std::path::Path;
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
    o.mem_size = Some(256 << 20);
    o.max_files = Some(1024);
    let s = Store::create(&o).unwrap();
    (StoreGuard(name), s)
}

#[test]
fn store_real_programs_match_plain_dir() {
    let (g, _s) = small_store("progs");
    let tmp = tempfile::tempdir().unwrap();
    let (mp, plain, src) = (
        tmp.path().join("mnt"),
        tmp.path().join("plain"),
        tmp.path().join("src"),
    );
    for d in [&mp, &plain] {
        std::fs::create_dir(d).unwrap();
    }
    make_source_tree(&src);
    let d = Daemon::store(&g.0, &mp);
    let a = run_programs(&mp, &src);
    let b = run_programs(&plain, &src);
    assert_eq!(a, b, "output differs between the mount and a plain directory");
    assert!(a.contains("gzip-ok"));
    assert_eq!(d.stop(), 0);
}

#[test]
fn store_posix_errno_matches_plain_dir() {
    let (g, _s) = small_store("posix");
    let tmp = tempfile::tempdir().unwrap();
    let (mp, plain) = (tmp.path().join("mnt"), tmp.path().join("plain"));
    for d in [&mp, &plain] {
        std::fs::create_dir(d).unwrap();
    }
    let d = Daemon::store(&g.0, &mp);
    let a = posix_suite(&mp);
    let b = posix_suite(&plain);
    let diff = diff_suites(&a, &b);
    assert!(diff.is_empty(), "differences:\n{}", diff.join("\n"));
    drop(d);
}

/// The mount and the store API (what the preload shim uses) see the same files, both
/// ways; with the preload library built, a program under it too.
#[test]
fn store_mount_and_store_api_share_files() {
    let (g, s) = small_store("cross");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let d = Daemon::store(&g.0, &mp);

    // Store API -> mount.
    s.mkdir("/ckpt", 0o755).unwrap();
    let data = pattern(7, (3 << 20) + 17);
    let mut f = s.open("/ckpt/from-api", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&data).unwrap();
    f.close().unwrap();
    assert_eq!(std::fs::read(mp.join("ckpt/from-api")).unwrap(), data);

    // Overwrite a file the kernel has already seen: no stale size or data.
    let mut f = s.open("/ckpt/from-api", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(b"short").unwrap();
    f.close().unwrap();
    assert_eq!(std::fs::read(mp.join("ckpt/from-api")).unwrap(), b"short");

    // Mount -> store API.
    let data2 = pattern(8, (2 << 20) + 5);
    std::fs::write(mp.join("ckpt/from-mount"), &data2).unwrap();
    let mut f = s.open("/ckpt/from-mount", OpenFlags::READ, 0).unwrap();
    let mut back = vec![0u8; data2.len() + 10];
    let n = f.read_full(&mut back).unwrap();
    assert_eq!(&back[..n], &data2[..]);
    let names: Vec<String> = s.read_dir("/ckpt").unwrap().into_iter().map(|e| e.name).collect();
    assert!(names.contains(&"from-mount".to_string()));

    // A file still open for writing through the mount is visible through the API.
    let mut w = std::fs::File::create(mp.join("ckpt/open")).unwrap();
    w.write_all(b"partial").unwrap();
    assert_eq!(s.stat("/ckpt/open").unwrap().size, 7);
    drop(w);

    // With the preload shim built: a program under it writes, the mount reads, and back.
    let bin = std::env::var_os("CKPTFS_BIN_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release"));
    let shim = bin.join("libckptfs_preload.so");
    if shim.exists() {
        let prefix = tmp.path().join("ckpt-prefix");
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!(
                    "printf shim-data > {p}/shim-file && cat {p}/from-mount | wc -c",
                    p = prefix.join("ckpt").display()
                ),
            ])
            .env("LD_PRELOAD", &shim)
            .env("CKPTFS_STORE", &g.0)
            .env("CKPTFS_MOUNT", &prefix)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            data2.len().to_string()
        );
        assert_eq!(std::fs::read(mp.join("ckpt/shim-file")).unwrap(), b"shim-data");
    } else {
        eprintln!(
            "note: {} not built; cross test ran through the store API only",
            shim.display()
        );
    }
    drop(d);
}

#[test]
fn store_concurrent_writers() {
    let (g, _s) = small_store("conc");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let d = Daemon::store(&g.0, &mp);
    std::fs::create_dir(mp.join("w")).unwrap();
    // Threads writing their own files with mixed write sizes...
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let p = mp.join(format!("w/t{t}"));
            std::thread::spawn(move || {
                let data = pattern(100 + t, (4 << 20) + t as usize * 1000);
                let mut f = std::fs::File::create(&p).unwrap();
                let mut off = 0;
                let sizes = [1usize, 63, 4096, 10000, 1 << 20, 65536];
                let mut i = 0;
                while off < data.len() {
                    let k = sizes[i % sizes.len()].min(data.len() - off);
                    f.write_all(&data[off..off + k]).unwrap();
                    off += k;
                    i += 1;
                }
                f.sync_all().unwrap();
                drop(f);
                assert_eq!(std::fs::read(&p).unwrap(), data, "thread {t}");
            })
        })
        .collect();
    // ... while processes (dd) write others.
    let procs: Vec<_> = (0..3)
        .map(|i| {
            std::process::Command::new("dd")
                .args([
                    "if=/dev/zero",
                    &format!("of={}", mp.join(format!("w/dd{i}")).display()),
                    "bs=256K",
                    "count=12",
                    "status=none",
                ])
                .spawn()
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for mut p in procs {
        assert!(p.wait().unwrap().success());
    }
    for i in 0..3 {
        assert_eq!(
            std::fs::metadata(mp.join(format!("w/dd{i}"))).unwrap().len(),
            12 * 256 * 1024
        );
    }
    // Two writers into disjoint halves of one file (pwrite).
    let shared = mp.join("w/shared");
    std::fs::File::create(&shared).unwrap().set_len(2 << 20).unwrap();
    let hs: Vec<_> = (0..2u64)
        .map(|h| {
            let p = shared.clone();
            std::thread::spawn(move || {
                use std::os::unix::fs::FileExt;
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                let data = pattern(200 + h, 1 << 20);
                for k in 0..16 {
                    let off = (k * 65536) as usize;
                    f.write_all_at(&data[off..off + 65536], h * (1 << 20) + off as u64)
                        .unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let all = std::fs::read(&shared).unwrap();
    assert_eq!(&all[..1 << 20], &pattern(200, 1 << 20)[..]);
    assert_eq!(&all[1 << 20..], &pattern(201, 1 << 20)[..]);
    drop(d);
}

#[test]
fn store_daemon_sigkilled_then_remounted_loses_nothing() {
    let (g, _s) = small_store("kill");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let _guard = UnmountGuard(mp.clone());
    let d = Daemon::store(&g.0, &mp);
    std::fs::create_dir_all(mp.join("run/step1")).unwrap();
    let data = pattern(9, (6 << 20) + 123);
    std::fs::write(mp.join("run/step1/rank0"), &data).unwrap();
    // A file open for writing when the daemon dies keeps its completed writes.
    let mut open = std::fs::File::create(mp.join("run/step1/rank1")).unwrap();
    open.write_all(&data[..1 << 20]).unwrap();
    d.kill9();
    // The old mount is stale now.
    assert!(
        ckptfs_fuse::mount::is_stale(&mp),
        "mount should be stale after SIGKILL"
    );
    let err = std::fs::read_dir(&mp).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN));
    drop(open);
    // A new daemon cleans the stale mount and shows everything.
    let d2 = Daemon::store(&g.0, &mp);
    assert_eq!(std::fs::read(mp.join("run/step1/rank0")).unwrap(), data);
    let part = std::fs::read(mp.join("run/step1/rank1")).unwrap();
    assert_eq!(part, &data[..1 << 20]);
    let mut names: Vec<_> = std::fs::read_dir(mp.join("run/step1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["rank0", "rank1"]);
    assert_eq!(d2.stop(), 0);
    assert!(ckptfs_fuse::mount::mount_entry(&mp).is_none_or(|m| !m.is_ckptfs()));
}

#[test]
fn store_sigterm_unmounts_and_exits_zero_even_when_busy() {
    let (g, _s) = small_store("term");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mut d = Daemon::store(&g.0, &mp);
    std::fs::write(mp.join("x"), b"kept").unwrap();
    // A file held open keeps the mount busy: SIGTERM detaches it lazily and the daemon
    // exits when the file is closed.
    let mut held = std::fs::File::open(mp.join("x")).unwrap();
    d.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    let mut s = String::new();
    held.read_to_string(&mut s).unwrap();
    assert_eq!(s, "kept");
    drop(held);
    assert_eq!(d.wait(Duration::from_secs(20)), Some(0));
    assert!(ckptfs_fuse::mount::mount_entry(&mp).is_none_or(|m| !m.is_ckptfs()));
}

#[test]
fn store_direct_and_cached_io_modes_read_back() {
    let (g, _s) = small_store("io");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    for io in ["cached", "direct"] {
        let d = Daemon::store_io(&g.0, &mp, io);
        let data = pattern(11, (1 << 20) + 999);
        std::fs::write(mp.join(io), &data).unwrap();
        assert_eq!(std::fs::read(mp.join(io)).unwrap(), data, "{io}");
        let (rc, out, err) = sh(
            &mp,
            &format!(
                "python3 -c \"import mmap;f=open('{io}','r+b');m=mmap.mmap(f.fileno(),0);m[0:3]=b'abc';m.flush();print(open('{io}','rb').read(3))\""
            ),
        );
        assert_eq!(rc, 0, "{io}: {err}");
        assert_eq!(out.trim(), "b'abc'", "{io}");
        assert_eq!(d.stop(), 0);
    }
}

/// The daemon is the last writer of everything written through the mount: reads through
/// the mount must still verify each chunk's CRC, so a byte flipped in the segment after
/// close is EIO, not silently returned.
#[test]
fn store_mount_read_of_file_written_through_mount_verifies_checksums() {
    let (g, s) = small_store("verify");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let d = Daemon::store_io(&g.0, &mp, "direct");
    let data = pattern(5, (3 << 20) + 123);
    std::fs::write(mp.join("ck"), &data).unwrap();
    assert_eq!(std::fs::read(mp.join("ck")).unwrap(), data);
    let chunks = s.chunk_list("/ck").unwrap();
    let ckptfs_store::ChunkLocation::Memory(off) = chunks[1].location else {
        panic!("expected a memory chunk")
    };
    let r = s.data_region();
    // SAFETY: the offset lies inside the mapped data region; the file is closed.
    unsafe {
        let p = (r.base as *mut u8).add(off as usize + 77);
        p.write_volatile(p.read_volatile() ^ 0x01);
    }
    let err = std::fs::read(mp.join("ck")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(d.stop(), 0);
}

/// A process unshares its mount namespace while the store is mounted (its copy of the
/// mount keeps the FUSE connection alive), then the mount is unmounted here: SIGTERM
/// used to leave the daemon hanging on its session thread. It now aborts its
/// connection and exits within a few seconds; the process in the other namespace
/// gets an error, not a hang.
#[test]
fn store_sigterm_after_umount_exits_although_another_namespace_holds_the_mount() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("needs root (unshare of the mount namespace, umount2)");
        return;
    }
    let (g, _s) = small_store("unshare");
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mut d = Daemon::store(&g.0, &mp);
    std::fs::write(mp.join("x"), b"kept").unwrap();
    // A holder in a private copy of this mount namespace, the mount included.
    let ready = tmp.path().join("ready");
    let mut holder = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("touch {} && exec sleep 60", ready.display()))
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "unshare did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    // `ckptfs umount` as root: umount2 in this namespace (the other copy stays).
    ckptfs_fuse::mount::unmount(&mp, false).unwrap();
    assert!(ckptfs_fuse::mount::mount_entry(&mp).is_none_or(|m| !m.is_ckptfs()));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        d.wait(Duration::from_millis(1)),
        None,
        "the connection was expected to live on"
    );
    d.signal(libc::SIGTERM);
    let t0 = Instant::now();
    let code = d.wait(Duration::from_secs(8));
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(code.is_some(), "the daemon still runs 8 s after SIGTERM");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "exited only after {:?}",
        t0.elapsed()
    );
    assert_eq!(code, Some(0));
}
