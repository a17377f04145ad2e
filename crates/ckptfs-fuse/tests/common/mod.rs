//! Shared helpers of the FUSE integration tests: a mount daemon in a child process (the
//! test binary re-executed with `zz_daemon_entry`, which calls the same
//! `ckptfs_fuse::mount::run` as `ckptfs mount --foreground`), and the comparisons of real
//! programs and POSIX calls between a mount and a plain directory.
#![allow(dead_code)]

use ckptfs_fuse::mount::{self, MountConfig};
use ckptfs_fuse::{CrfsConfig, IoMode, Mode};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ENV: &str = "CKPTFS_FUSE_TEST_DAEMON";

/// Make sure fusermount3 and /dev/fuse are there (installing fuse3 if needed).
pub fn require_fuse() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let have = |c: &str| {
            Command::new("sh")
                .args(["-c", &format!("command -v {c}")])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !have("fusermount3") || !have("rsync") {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup-fuse.sh");
            let ok = Command::new("bash")
                .arg(&script)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "scripts/setup-fuse.sh failed: the FUSE tests need Debian's fuse3 and rsync"
            );
        }
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: the FUSE tests need the fuse kernel module (run as root)"
        );
    });
}

/// A running mount daemon.
pub struct Daemon {
    pub child: Option<Child>,
    pub mp: PathBuf,
}

impl Daemon {
    /// Mount store `name` at `mp`.
    pub fn store(name: &str, mp: &Path) -> Daemon {
        Self::store_io(name, mp, "auto")
    }

    /// Mount store `name` at `mp` with an I/O mode.
    pub fn store_io(name: &str, mp: &Path, io: &str) -> Daemon {
        Self::start(format!("store\n{name}\n{}\n{io}", mp.display()), mp)
    }

    /// Mount store `name` at `mp` with kernel caching for `ttl_s` seconds (0 = off).
    pub fn store_cached(name: &str, mp: &Path, ttl_s: u64) -> Daemon {
        Self::start(format!("store\n{name}\n{}\nauto\n{ttl_s}", mp.display()), mp)
    }

    /// Mount store `name` at `mp` asking for FUSE-over-io-uring (granted only when the
    /// kernel's `enable_uring` is set).
    pub fn store_ring(name: &str, mp: &Path) -> Daemon {
        Self::start(format!("store\n{name}\n{}\nauto\n10\nring", mp.display()), mp)
    }

    /// CRFS mode over `backend`.
    pub fn crfs(backend: &Path, mp: &Path, pool: usize, chunk: usize, io_threads: usize) -> Daemon {
        let spec = format!(
            "crfs\n{}\n{}\n{pool}\n{chunk}\n{io_threads}",
            backend.display(),
            mp.display()
        );
        Self::start(spec, mp)
    }

    fn start(spec: String, mp: &Path) -> Daemon {
        require_fuse();
        let exe = std::env::current_exe().unwrap();
        let child = Command::new(exe)
            .args(["zz_daemon_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env(ENV, spec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn daemon");
        let mut d = Daemon {
            child: Some(child),
            mp: mp.to_path_buf(),
        };
        let t0 = Instant::now();
        loop {
            if let Some(st) = d.child.as_mut().unwrap().try_wait().unwrap() {
                d.child = None;
                panic!("mount daemon exited early: {st}");
            }
            // statfs first, the mount table second: after a SIGKILL the stale mount is
            // detached by the new daemon before it mounts, and a statfs between the two
            // reaches the bare directory. Checked the other way round, the table could
            // show the stale mount and statfs the bare directory, and the test would read
            // the directory underneath (ENOENT). With this order a live entry seen after
            // a statfs that was not ENOTCONN is the new mount.
            if !mount::is_stale(mp) && mount::mount_entry(mp).is_some_and(|m| m.is_ckptfs()) {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "mount did not appear");
            std::thread::sleep(Duration::from_millis(10));
        }
        d
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// SIGTERM and wait; returns the exit code.
    pub fn stop(mut self) -> i32 {
        self.signal(libc::SIGTERM);
        self.wait(Duration::from_secs(30))
            .expect("daemon did not exit on SIGTERM")
    }

    /// SIGKILL (the mount is left stale).
    pub fn kill9(mut self) {
        self.signal(libc::SIGKILL);
        self.wait(Duration::from_secs(10))
            .expect("daemon survived SIGKILL");
        self.mp = PathBuf::new(); // leave the stale mount for the test to see
    }

    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: sending a signal to our own child.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// Wait for exit; the exit code (128+signal when killed).
    pub fn wait(&mut self, timeout: Duration) -> Option<i32> {
        let t0 = Instant::now();
        let c = self.child.as_mut()?;
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                self.child = None;
                use std::os::unix::process::ExitStatusExt;
                return Some(st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)));
            }
            if t0.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal(libc::SIGTERM);
            if self.wait(Duration::from_secs(10)).is_none() {
                self.signal(libc::SIGKILL);
                let _ = self.wait(Duration::from_secs(5));
            }
        }
        if !self.mp.as_os_str().is_empty() && mount::mount_entry(&self.mp).is_some_and(|m| m.is_ckptfs()) {
            let _ = mount::unmount(&self.mp, true);
        }
    }
}

/// Body of `zz_daemon_entry`: serve a mount when re-executed by [`Daemon`], else nothing.
pub fn daemon_entry() {
    let Ok(spec) = std::env::var(ENV) else { return };
    let f: Vec<&str> = spec.split('\n').collect();
    // An optional last line of a store spec: the cache TTL in seconds (0 = off).
    let mut cache = ckptfs_fuse::CacheConfig::DEFAULT;
    let (mode, mp, io) = match f[0] {
        "store" => {
            if let Some(ttl) = f.get(4) {
                cache.ttl = Duration::from_secs(ttl.parse().unwrap());
            }
            (
                Mode::Store(ckptfs_store::StoreOptions::named(f[1])),
                PathBuf::from(f[2]),
                f[3].parse::<IoMode>().unwrap(),
            )
        }
        "crfs" => {
            let mut c = CrfsConfig::new(f[1]);
            c.pool_size = f[3].parse().unwrap();
            c.chunk_size = f[4].parse().unwrap();
            c.io_threads = f[5].parse().unwrap();
            // SAFETY: umask has no preconditions (the backend gets the modes asked for).
            unsafe { libc::umask(0) };
            (Mode::Crfs(c), PathBuf::from(f[2]), IoMode::Auto)
        }
        m => panic!("unknown daemon mode {m}"),
    };
    let cfg = MountConfig {
        mountpoint: mp,
        mode,
        io,
        // Each mode's default, as `ckptfs mount` without --threads.
        threads: 0,
        cache,
        // Only where asked for (a last line "ring"): the other tests keep /dev/fuse even
        // while a ring test has the kernel's enable_uring set. CKPTFS_FUSE_TEST_RING=1
        // (with enable_uring set) runs every store-mount test over the ring.
        io_uring: f.last() == Some(&"ring")
            || std::env::var_os("CKPTFS_FUSE_TEST_RING").is_some_and(|v| v == "1"),
        io_uring_spin: ckptfs_fuse::RING_SPIN,
    };
    let shutdown =
        ckptfs_runtime::Shutdown::on_signals(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP]).unwrap();
    let code = match mount::run(&cfg, &shutdown, || {}) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("daemon: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// A unique store name for this test process.
pub fn store_name(tag: &str) -> String {
    format!("fusetest-{tag}-{}", std::process::id())
}

/// Run a shell command in `dir`; (exit code, stdout, stderr).
pub fn sh(dir: &Path, cmd: &str) -> (i32, String, String) {
    let o = Command::new("bash")
        .args(["-c", cmd])
        .current_dir(dir)
        .output()
        .expect("run bash");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Deterministic pseudo-random bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    ckptfs_testsupport::seeded_bytes(seed, len)
}

/// A source tree for the real-program tests.
pub fn make_source_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    let files: &[(&str, usize)] = &[
        ("empty", 0),
        ("one", 1),
        ("page-minus", 4095),
        ("sub/mib-plus", (1 << 20) + 3),
        ("sub/deeper/five-mib", 5 << 20),
        ("sub/small.txt", 100),
    ];
    for (i, (name, len)) in files.iter().enumerate() {
        std::fs::write(dir.join(name), pattern(i as u64 + 1, *len)).unwrap();
    }
}

/// The script run in both the mount and the plain directory. Every line's output is
/// compared; it avoids owners, link counts of directories, block counts and times.
pub const PROGRAM_SCRIPT: &str = r#"
set -e
SRC="$1"
mkdir -p a/b/c
mkdir -p a/b/c
cp -r "$SRC" a/src
cp "$SRC/sub/deeper/five-mib" a/b/c/copy
dd if="$SRC/sub/mib-plus" of=a/dd.bin bs=64K status=none
dd if=/dev/zero of=a/zeros bs=1M count=3 status=none
dd if="$SRC/sub/mib-plus" of=a/dd.bin bs=4096 seek=10 conv=notrunc status=none
cat "$SRC/one" "$SRC/page-minus" "$SRC/sub/small.txt" > a/cat.out
cat a/cat.out >> a/cat.out.2; cat a/cat.out >> a/cat.out.2
mv a/b/c/copy a/b/moved
mv a/src/sub a/sub-moved
echo "== ls"; ls -l a | awk '{print $1, $5, $NF}' | grep -v '^total' | sed 's/^d[^ ]* [0-9]* /d /'
ls -l a/b a/sub-moved/deeper | awk '/^-/{print $1, $5, $NF}'
echo "== stat"; stat -c '%n %s %F %a' a/dd.bin a/zeros a/b/moved a/cat.out.2
tar cf t.tar a
mkdir x && tar xf t.tar -C x
gzip -k a/dd.bin && gunzip -c a/dd.bin.gz | cmp - a/dd.bin && echo gzip-ok
rsync -a a/ r/
rsync -a --delete a/ r/
echo "== find"; find . -path ./t.tar -prune -o -print | sort
echo "== find-f"; find a x r -type f -size +1k | sort
echo "== du"; du -ab a | awk '$2 ~ /\/(dd\.bin|zeros|b\/moved)$/' | sort -k2
du -s a > /dev/null
rm -r x/a/sub-moved
rm -rf r
echo "== sums"; find . -type f ! -name '*.gz' ! -name '*.tar' -print0 | sort -z | xargs -0 sha256sum
echo "== python"
python3 - <<'PY'
import os, mmap
os.makedirs("py/d1/d2", exist_ok=True)
with open("py/f", "wb") as f:
    f.write(b"hello world\n" * 1000)
    f.seek(5); f.write(b"XXXXX")
    f.truncate(9000)
with open("py/f", "r+b") as f:
    f.seek(-10, 2); print(f.read())
    print(os.fstat(f.fileno()).st_size)
os.replace("py/f", "py/d1/g")
print(sorted(os.listdir("py/d1")), os.path.getsize("py/d1/g"))
with open("py/d1/g", "rb") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    print(m[:12], m.find(b"XXXXX"), len(m)); m.close()
with open("py/shared", "wb") as f:
    f.write(b"\0" * 3 * 4096 + b"tail")
with open("py/shared", "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[4096:4101] = b"abcde"; m[-4:] = b"TAIL"; m.flush(); m.close()
with open("py/shared", "rb") as f:
    d = f.read(); print(len(d), d[4096:4101], d[-4:])
os.rename("py/d1", "py/d3")
os.remove("py/d3/g")
os.rmdir("py/d3/d2")
print(sorted(os.listdir("py")))
PY
"#;

/// Run [`PROGRAM_SCRIPT`] in `dir`; its output (the test compares mount vs plain dir).
pub fn run_programs(dir: &Path, src: &Path) -> String {
    let script = std::env::temp_dir().join(format!("ckptfs-fuse-script-{}.sh", std::process::id()));
    std::fs::write(&script, PROGRAM_SCRIPT).unwrap();
    let o = Command::new("bash")
        .arg(&script)
        .arg(src)
        .current_dir(dir)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "script failed in {}: {}\nstdout:\n{}",
        dir.display(),
        String::from_utf8_lossy(&o.stderr),
        out
    );
    out
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn r(ret: isize) -> Result<isize, i32> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// The POSIX semantics suite: each call's outcome (value or errno), run in `root`.
pub fn posix_suite(root: &Path) -> Vec<(String, Result<isize, i32>)> {
    let mut out = Vec::new();
    let p = |s: &str| root.join(s);
    let mut rec = |name: &str, v: Result<isize, i32>| out.push((name.to_string(), v));
    let open = |path: &Path, flags: i32| -> Result<isize, i32> {
        // SAFETY: valid NUL-terminated path.
        let fd = unsafe { libc::open(c(path).as_ptr(), flags, 0o644) };
        if fd >= 0 {
            // SAFETY: closing the descriptor just opened.
            unsafe { libc::close(fd) };
        }
        r(fd as isize).map(|_| 0)
    };
    let file = p("f");
    std::fs::write(&file, b"0123456789").unwrap();
    std::fs::create_dir_all(p("d/e")).unwrap();
    std::fs::create_dir_all(p("empty")).unwrap();
    std::fs::write(p("d/e/x"), b"x").unwrap();
    let long = "n".repeat(300);
    rec("open missing", open(&p("nope"), libc::O_RDONLY));
    rec("open missing dir component", open(&p("nope/f"), libc::O_RDONLY));
    rec("open through a file", open(&p("f/x"), libc::O_RDONLY));
    rec(
        "creat excl existing",
        open(&file, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY),
    );
    rec("open dir for write", open(&p("d"), libc::O_WRONLY));
    rec(
        "O_DIRECTORY on a file",
        open(&file, libc::O_RDONLY | libc::O_DIRECTORY),
    );
    rec("name too long", open(&p(&long), libc::O_CREAT | libc::O_WRONLY));
    // SAFETY: (whole block) plain libc calls on valid NUL-terminated paths and buffers
    // that outlive each call; descriptors are closed at the end.
    unsafe {
        rec(
            "mkdir existing",
            r(libc::mkdir(c(&p("d")).as_ptr(), 0o755) as isize),
        );
        rec(
            "mkdir over file",
            r(libc::mkdir(c(&file).as_ptr(), 0o755) as isize),
        );
        rec(
            "mkdir missing parent",
            r(libc::mkdir(c(&p("nope/x")).as_ptr(), 0o755) as isize),
        );
        rec("rmdir non-empty", r(libc::rmdir(c(&p("d")).as_ptr()) as isize));
        rec("rmdir file", r(libc::rmdir(c(&file).as_ptr()) as isize));
        rec("rmdir missing", r(libc::rmdir(c(&p("nope")).as_ptr()) as isize));
        rec("unlink dir", r(libc::unlink(c(&p("d")).as_ptr()) as isize));
        rec("unlink missing", r(libc::unlink(c(&p("nope")).as_ptr()) as isize));
        rec(
            "rename missing",
            r(libc::rename(c(&p("nope")).as_ptr(), c(&p("z")).as_ptr()) as isize),
        );
        rec(
            "rename dir into itself",
            r(libc::rename(c(&p("d")).as_ptr(), c(&p("d/e/in")).as_ptr()) as isize),
        );
        rec(
            "rename file over dir",
            r(libc::rename(c(&file).as_ptr(), c(&p("empty")).as_ptr()) as isize),
        );
        rec(
            "rename dir over file",
            r(libc::rename(c(&p("empty")).as_ptr(), c(&file).as_ptr()) as isize),
        );
        rec(
            "rename dir over non-empty dir",
            r(libc::rename(c(&p("empty")).as_ptr(), c(&p("d")).as_ptr()) as isize),
        );
        std::fs::create_dir_all(p("empty2")).unwrap();
        rec(
            "rename dir over empty dir",
            r(libc::rename(c(&p("empty2")).as_ptr(), c(&p("empty")).as_ptr()) as isize),
        );
        std::fs::write(p("g"), b"g").unwrap();
        rec(
            "rename file over file",
            r(libc::rename(c(&p("g")).as_ptr(), c(&p("h")).as_ptr()) as isize),
        );
        let mut st: libc::stat = std::mem::zeroed();
        rec(
            "stat missing",
            r(libc::stat(c(&p("nope")).as_ptr(), &mut st) as isize),
        );
        let ro = libc::open(c(&file).as_ptr(), libc::O_RDONLY);
        let wo = libc::open(c(&file).as_ptr(), libc::O_WRONLY);
        let mut buf = [0u8; 4];
        rec("write on O_RDONLY", r(libc::write(ro, buf.as_ptr().cast(), 4)));
        rec("read on O_WRONLY", r(libc::read(wo, buf.as_mut_ptr().cast(), 4)));
        rec("ftruncate on O_RDONLY", r(libc::ftruncate(ro, 0) as isize));
        rec(
            "pread past end",
            r(libc::pread(ro, buf.as_mut_ptr().cast(), 4, 100)),
        );
        rec("pread", r(libc::pread(ro, buf.as_mut_ptr().cast(), 4, 3)));
        rec(
            "pwrite extends",
            r(libc::pwrite(wo, b"ab".as_ptr().cast(), 2, 20)),
        );
        rec("fsync", r(libc::fsync(wo) as isize));
        rec(
            "size after hole",
            r(libc::fstat(ro, &mut st) as isize).map(|_| st.st_size as isize),
        );
        rec(
            "read hole is zeros",
            r(libc::pread(ro, buf.as_mut_ptr().cast(), 4, 12))
                .map(|n| n * 1000 + buf.iter().map(|&b| b as isize).sum::<isize>()),
        );
        rec("lseek negative", r(libc::lseek(ro, -5, libc::SEEK_SET) as isize));
        rec("lseek end", r(libc::lseek(ro, 0, libc::SEEK_END) as isize));
        rec("ftruncate shrink", r(libc::ftruncate(wo, 5) as isize));
        rec(
            "read after shrink",
            r(libc::pread(ro, buf.as_mut_ptr().cast(), 4, 3)),
        );
        let d = libc::open(c(&p("d")).as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
        rec(
            "read on a directory",
            r(libc::read(d, buf.as_mut_ptr().cast(), 4)),
        );
        libc::close(d);
        rec(
            "truncate missing",
            r(libc::truncate(c(&p("nope")).as_ptr(), 0) as isize),
        );
        rec(
            "chmod",
            r(libc::chmod(c(&file).as_ptr(), 0o600) as isize).map(|_| {
                libc::stat(c(&file).as_ptr(), &mut st);
                (st.st_mode & 0o7777) as isize
            }),
        );
        std::fs::write(p("u"), b"still here").unwrap();
        let fd = libc::open(c(&p("u")).as_ptr(), libc::O_RDONLY);
        libc::unlink(c(&p("u")).as_ptr());
        rec(
            "unlink open file then read",
            r(libc::pread(fd, buf.as_mut_ptr().cast(), 4, 6)).map(|n| n * 1000 + buf[0] as isize),
        );
        libc::close(fd);
        let fd = libc::open(
            c(&p("ap")).as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND,
            0o644,
        );
        libc::write(fd, b"abc".as_ptr().cast(), 3);
        libc::lseek(fd, 0, libc::SEEK_SET);
        libc::write(fd, b"de".as_ptr().cast(), 2);
        libc::close(fd);
        rec(
            "append",
            Ok(std::fs::read(p("ap")).map(|v| v.len() as isize).unwrap_or(-1)),
        );
        let fd = libc::open(
            c(&p("ap")).as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            0o644,
        );
        libc::close(fd);
        rec(
            "creat trunc",
            Ok(std::fs::metadata(p("ap")).map(|m| m.len() as isize).unwrap_or(-1)),
        );
        rec("close", r(libc::close(ro) as isize));
        rec("close w", r(libc::close(wo) as isize));
    }
    let mut v: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    out.push((format!("listing {v:?}"), Ok(0)));
    out
}

/// Compare two suite results and describe every difference.
pub fn diff_suites(a: &[(String, Result<isize, i32>)], b: &[(String, Result<isize, i32>)]) -> Vec<String> {
    a.iter()
        .zip(b)
        .filter(|(x, y)| x != y)
        .map(|(x, y)| format!("{}: mount {:?} vs plain {:?}", x.0, x.1, y.1))
        .collect()
}

/// Detaches a (possibly stale) ckptfs mount at `0` when dropped, so a failing test does
/// not leave a dead mount behind.
pub struct UnmountGuard(pub PathBuf);

impl Drop for UnmountGuard {
    fn drop(&mut self) {
        if mount::mount_entry(&self.0).is_some_and(|m| m.is_ckptfs()) {
            let _ = mount::unmount(&self.0, true);
        }
    }
}
