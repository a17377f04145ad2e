//! The store mount over FUSE-over-io-uring (docs/fuse.md, "Requests over io_uring"):
//! with the kernel's `enable_uring` on, requests are answered by one thread per CPU,
//! bound to that CPU, and every kind of call gives the same bytes and errors as through
//! /dev/fuse; with it off, the same mount falls back to /dev/fuse.
//!
//! Needs root (the module parameter) and a kernel with the parameter (6.14+); skipped
//! with a message otherwise. Both cases run in one test: the parameter is global.

mod common;

use ckptfs_store::Store;
use common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

#[test]
fn zz_daemon_entry() {
    daemon_entry();
}

/// The lock the Slurm node prolog (examples/slurm/prolog.sh) holds while it sets the
/// parameter: held here while the parameter is changed, so that a job of the Slurm
/// suite starting meanwhile (scripts/test.sh runs the suites side by side) waits
/// instead of turning the ring back on under the test.
const PROLOG_LOCK: &str = "/run/ckptfs-prolog.lock";

/// Sets the kernel parameter and puts the old value back on drop (the prolog's lock
/// held until then).
struct Param {
    old: String,
    _lock: std::fs::File,
}
impl Param {
    fn set(on: bool) -> Param {
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(PROLOG_LOCK)
            .unwrap();
        lock.lock().unwrap();
        let old = std::fs::read_to_string(PARAM).unwrap().trim().to_string();
        std::fs::write(PARAM, if on { "Y" } else { "N" }).unwrap();
        Param { old, _lock: lock }
    }
}
impl Drop for Param {
    fn drop(&mut self) {
        // Before the lock is let go (fields drop after this).
        let _ = std::fs::write(PARAM, &self.old);
    }
}

struct StoreGuard(String);
impl Drop for StoreGuard {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.0);
    }
}

/// (name, nanoseconds on a CPU, allowed CPUs) of every thread of `pid`.
fn threads(pid: i32) -> Vec<(String, u64, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let p = t.path();
        let comm = std::fs::read_to_string(p.join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let cpus = std::fs::read_to_string(p.join("status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|v| v.trim().to_string()))
            .unwrap_or_default();
        out.push((comm, ns, cpus));
    }
    out
}

fn ring_ns(pid: i32) -> u64 {
    threads(pid)
        .iter()
        .filter(|t| t.0.starts_with("fuser-ring-"))
        .map(|t| t.1)
        .sum()
}

/// Every kind of call, with its bytes and errors checked.
fn workload(mp: &Path) {
    let d = mp.join("w");
    std::fs::create_dir(&d).unwrap();
    for i in 0..200u64 {
        std::fs::write(d.join(format!("f{i}")), pattern(i, (i as usize * 37) % 5000)).unwrap();
    }
    for i in 0..200u64 {
        assert_eq!(
            std::fs::read(d.join(format!("f{i}"))).unwrap(),
            pattern(i, (i as usize * 37) % 5000)
        );
    }
    // Large writes and reads (the payload buffer), at an unaligned offset too.
    let big = pattern(7, (3 << 20) + 5);
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(d.join("big"))
        .unwrap();
    f.write_all(&big).unwrap();
    f.write_all_at(b"xyz", 1_000_001).unwrap();
    let mut want = big.clone();
    want[1_000_001..1_000_004].copy_from_slice(b"xyz");
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    assert!(got == want, "big file read back differs");
    drop(f);
    assert_eq!(std::fs::read(d.join("big")).unwrap().len(), want.len());
    // Names, attributes, errors.
    std::fs::rename(d.join("f1"), d.join("renamed")).unwrap();
    assert_eq!(std::fs::read(d.join("renamed")).unwrap(), pattern(1, 37));
    let e = std::fs::metadata(d.join("f1")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    let e = std::fs::create_dir(d.join("f2")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    std::fs::set_permissions(d.join("f3"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        std::fs::metadata(d.join("f3")).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let f4 = std::ffi::CString::new(d.join("f4").as_os_str().as_encoded_bytes()).unwrap();
    let key = c"user.k";
    // SAFETY: valid C strings and a buffer of the length passed.
    let rc = unsafe { libc::setxattr(f4.as_ptr(), key.as_ptr(), b"vee".as_ptr().cast(), 3, 0) };
    assert_eq!(rc, 0, "setxattr: {}", std::io::Error::last_os_error());
    let mut v = [0u8; 16];
    // SAFETY: as above.
    let n = unsafe { libc::getxattr(f4.as_ptr(), key.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
    assert_eq!(&v[..n.max(0) as usize], b"vee");
    let (rc, _, err) = sh(
        &d,
        "ln -s f5 link && test \"$(readlink link)\" = f5 && ln f5 hard && test $(stat -c %h f5) = 2",
    );
    assert_eq!(rc, 0, "links: {err}");
    let mut names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names.len(), 203, "readdir: {names:?}");
    std::fs::remove_dir_all(&d).unwrap();
    assert!(!d.exists());
}

#[test]
fn the_store_mount_answers_over_io_uring_on_each_cpu_and_falls_back_to_dev_fuse() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("the kernel's enable_uring parameter needs root");
        return;
    }
    if !Path::new(PARAM).exists() {
        eprintln!("skipped: this kernel has no FUSE-over-io-uring ({PARAM} missing)");
        return;
    }
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let name = store_name("ring");
    let _g = StoreGuard(name.clone());

    // On: a thread per possible CPU, each bound to its CPU, answering the requests.
    {
        let _p = Param::set(true);
        let d = Daemon::store_ring(&name, &mp);
        let ring: Vec<_> = threads(d.pid())
            .into_iter()
            .filter(|t| t.0.starts_with("fuser-ring-"))
            .collect();
        let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
        let ncpu: usize = possible
            .trim()
            .rsplit(['-', ','])
            .next()
            .unwrap()
            .parse::<usize>()
            .unwrap()
            + 1;
        assert_eq!(ring.len(), ncpu, "ring threads: {ring:?}");
        for (comm, _, cpus) in &ring {
            let qid = comm.trim_start_matches("fuser-ring-");
            assert_eq!(cpus, qid, "{comm} must be bound to CPU {qid}");
        }
        let before = ring_ns(d.pid());
        workload(&mp);
        let busy = ring_ns(d.pid()) - before;
        // Hundreds of requests were answered there (a thread that only waited would
        // show microseconds).
        assert!(
            busy > 2_000_000,
            "the ring threads ran {busy} ns during the workload"
        );
        // They poll only briefly after each answer (RING_SPIN), then sleep: an idle
        // mount costs no CPU.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let before = ring_ns(d.pid());
        std::thread::sleep(std::time::Duration::from_secs(1));
        let idle = ring_ns(d.pid()) - before;
        assert!(
            idle < 50_000_000,
            "the ring threads ran {idle} ns in an idle second"
        );
        assert_eq!(d.stop(), 0);
    }

    // Off: the same mount asks, the kernel does not grant; /dev/fuse serves it all.
    {
        let _p = Param::set(false);
        let d = Daemon::store_ring(&name, &mp);
        assert!(
            !threads(d.pid()).iter().any(|t| t.0.starts_with("fuser-ring-")),
            "no ring without the kernel's consent"
        );
        workload(&mp);
        assert_eq!(d.stop(), 0);
    }
}
