//! Helpers shared by the crash and concurrency tests: temporary stores, writer child
//! processes (the `store_writer` example run inside the test executable), watchdogs.
//!
//! Why the writer runs inside the test executable: an example binary is not rebuilt by
//! `cargo test --test crash` and could be missing or stale there. Instead each test file
//! includes `examples/store_writer.rs` as a module and has a `child_entry` test that runs
//! it when `CKPTFS_TEST_CHILD` is set; [`Proc::spawn`] re-executes the test binary with
//! `--exact child_entry`. So the child is always built from the same sources as the test.
#![allow(dead_code)]

#[path = "../../examples/store_writer.rs"]
pub mod writer;

use ckptfs_store::{FileKind, OpenFlags, Store, StoreError, StoreOptions, WriteState};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
pub use writer::{first_mismatch, pattern, Spec};

/// Environment variable carrying the writer's arguments into the child.
pub const CHILD_ENV: &str = "CKPTFS_TEST_CHILD";

/// Body of the `child_entry` test of every test file that spawns writers: runs the writer
/// (and exits) when spawned as a child, does nothing otherwise.
pub fn child_entry() {
    if let Ok(args) = std::env::var(CHILD_ENV) {
        let args: Vec<&str> = args.split('\x1f').collect();
        writer::main_with_args(&args);
    }
}

/// A store with a unique name, destroyed when dropped.
pub struct TempStore {
    /// Store name.
    pub name: String,
    /// Directory of its segment (`None`: /dev/shm).
    pub shm_dir: Option<std::path::PathBuf>,
}

impl TempStore {
    /// Create store `t-TAG-PID` (destroying a leftover of that name first).
    pub fn new(
        tag: &str,
        mem: u64,
        chunk: u64,
        max_files: u32,
        spill: Option<(&std::path::Path, u64)>,
    ) -> Self {
        Self::new_in(None, tag, mem, chunk, max_files, spill)
    }

    /// [`TempStore::new`] with the segment in `shm_dir`.
    pub fn new_in(
        shm_dir: Option<&std::path::Path>,
        tag: &str,
        mem: u64,
        chunk: u64,
        max_files: u32,
        spill: Option<(&std::path::Path, u64)>,
    ) -> Self {
        let name = format!("t-{tag}-{}", std::process::id());
        let _ = Store::destroy_in(shm_dir, &name);
        let opts = StoreOptions {
            name: name.clone(),
            shm_dir: shm_dir.map(|d| d.to_path_buf()),
            mem_size: Some(mem),
            chunk_size: Some(chunk),
            max_files: Some(max_files),
            spill_dir: spill.map(|s| s.0.to_path_buf()),
            spill_size: spill.map(|s| s.1),
            private: false,
            ..Default::default()
        };
        Store::create(&opts).unwrap();
        TempStore {
            name,
            shm_dir: shm_dir.map(|d| d.to_path_buf()),
        }
    }

    /// Options naming this store (and its segment directory).
    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            shm_dir: self.shm_dir.clone(),
            ..StoreOptions::named(&self.name)
        }
    }

    /// Environment a writer child needs to find this store.
    pub fn child_env(&self) -> Vec<(&'static str, String)> {
        self.shm_dir
            .iter()
            .map(|d| ("CKPTFS_SHM_DIR", d.display().to_string()))
            .collect()
    }

    /// Attach a new handle (a fresh mapping, as a new process would).
    pub fn attach(&self) -> Store {
        Store::attach(&self.options()).unwrap()
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        let _ = Store::destroy_in(self.shm_dir.as_deref(), &self.name);
    }
}

type Lines = Arc<(Mutex<Vec<String>>, Condvar)>;

/// A writer child process whose stdout lines are collected as they arrive.
pub struct Proc {
    child: Child,
    lines: Lines,
    reader: Option<std::thread::JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Spawn a writer running `spec`, with extra environment variables.
    pub fn spawn(spec: &Spec, env: &[(&str, &str)]) -> Proc {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1", "-q"])
            .env(CHILD_ENV, spec.to_args().join("\x1f"))
            .env_remove("CKPTFS_CRASH_AT")
            .env_remove("CKPTFS_RANK")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn writer child");
        let out = child.stdout.take().unwrap();
        let lines: Lines = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let l2 = lines.clone();
        // Read continuously so that a full pipe never blocks the child at a print.
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let (m, cv) = &*l2;
                m.lock().unwrap().push(line);
                cv.notify_all();
            }
        });
        Proc {
            child,
            lines,
            reader: Some(reader),
            status: None,
        }
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until a line satisfies `pred`; false on timeout or if the child exited first.
    pub fn wait_for(&self, pred: impl Fn(&str) -> bool, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.lines;
        let mut g = m.lock().unwrap();
        loop {
            if g.iter().any(|l| pred(l)) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = cv
                .wait_timeout(g, (deadline - now).min(Duration::from_millis(50)))
                .unwrap()
                .0;
        }
    }

    /// Lines printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.0.lock().unwrap().clone()
    }

    /// SIGKILL the child (if still running), reap it and collect all its output.
    pub fn kill(&mut self) -> ExitStatus {
        if self.status.is_none() {
            let _ = self.child.kill();
        }
        self.finish()
    }

    fn finish(&mut self) -> ExitStatus {
        let st = match self.status {
            Some(s) => s,
            None => self.child.wait().unwrap(),
        };
        self.status = Some(st);
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        st
    }

    /// Wait for the child to exit by itself; None (and the child is killed) on timeout.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                self.status = Some(st);
                return Some(self.finish());
            }
            if Instant::now() >= deadline {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Fail the test if the child reported an unexpected error.
    pub fn assert_no_error(&self) {
        if let Some(e) = self.lines().iter().find(|l| l.starts_with("error")) {
            panic!("writer child {} failed: {e}", self.pid());
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Run `f` on another thread and fail if it does not finish within `secs`: a store lock
/// held by a dead process must never make a later process wait forever.
pub fn with_timeout<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let v = f();
        let _ = tx.send(());
        v
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => h.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still blocked after {secs} s (a lock held by a dead process was not recovered?)")
        }
    }
}

/// Whole content of a file, read through a fresh read-only handle (which verifies
/// checksums when another process wrote the file).
pub fn read_all(store: &Store, path: &str) -> Result<Vec<u8>, StoreError> {
    let mut f = store.open(path, OpenFlags::READ, 0)?;
    let mut buf = vec![0u8; f.size() as usize];
    let n = f.read_full(&mut buf)?;
    buf.truncate(n);
    f.close()?;
    Ok(buf)
}

/// Assert that `path` holds exactly the pattern of `seed` with `size` bytes, is complete
/// and passes `verify_all`.
pub fn assert_file_is(store: &Store, path: &str, seed: u64, size: u64) {
    let st = store.stat(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(st.kind, FileKind::File, "{path}");
    assert_eq!(st.state, WriteState::Complete, "{path} should be complete");
    assert_eq!(st.size, size, "{path} size");
    let data = read_all(store, path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    assert_eq!(data.len() as u64, size, "{path} bytes read");
    if let Some(off) = first_mismatch(seed, 0, &data) {
        panic!("{path}: content differs from what was written at offset {off}");
    }
    let mut f = store.open(path, OpenFlags::READ, 0).unwrap();
    f.verify_all()
        .unwrap_or_else(|e| panic!("{path}: verify_all: {e}"));
}

/// Assert that every byte of `path` (whatever its size, at most `max`) matches the
/// pattern of `seed`; returns the size.
pub fn assert_prefix_is(store: &Store, path: &str, seed: u64, max: u64) -> u64 {
    let data = read_all(store, path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    assert!(
        data.len() as u64 <= max,
        "{path}: {} bytes, at most {max} were written",
        data.len()
    );
    if let Some(off) = first_mismatch(seed, 0, &data) {
        panic!("{path}: content differs from what was written at offset {off}");
    }
    let mut f = store.open(path, OpenFlags::READ, 0).unwrap();
    f.verify_all()
        .unwrap_or_else(|e| panic!("{path}: verify_all: {e}"));
    data.len() as u64
}

/// Chunks owned according to the files' stats, plus the chunks divided into small-file
/// blocks, must equal the chunks missing from the free stacks (memory and spill); the
/// small files' runs must be the blocks in use.
pub fn assert_chunk_accounting(store: &Store) {
    let info = store.info();
    let used = (info.mem_chunks - info.mem_free_chunks) + (info.spill_chunks - info.spill_free_chunks);
    // Files and symlinks, each inode once (a hard-linked file is listed under each name).
    let mut seen = std::collections::HashSet::new();
    let files: Vec<_> = store
        .list_all_system()
        .into_iter()
        .chain(store.list_all())
        .filter(|(_, st)| st.kind != FileKind::Dir && seen.insert(st.ino))
        .collect();
    let owned: u32 = files.iter().map(|(_, st)| st.chunks).sum();
    assert_eq!(
        owned + info.small_chunks,
        used,
        "files own {owned} chunks and {} chunks hold small files, but {used} are missing from the free stacks ({info:?})",
        info.small_chunks
    );
    let chunk = info.chunk_size;
    let run_bytes: u64 = files
        .iter()
        .map(|(_, st)| st.allocated - ((st.chunks as u64) * chunk))
        .sum();
    assert_eq!(
        run_bytes,
        info.small_blocks_used * 4096,
        "small-file blocks in use ({info:?})"
    );
    if info.small_chunks > 0 {
        assert!(
            info.small_blocks_used > 0,
            "a small-file chunk holds no blocks ({info:?})"
        );
    }
}

/// Remove a directory tree.
pub fn remove_tree(store: &Store, dir: &str) {
    let Ok(entries) = store.read_dir(dir) else { return };
    for e in entries {
        let p = format!("{dir}/{}", e.name);
        match e.kind {
            FileKind::Dir => remove_tree(store, &p),
            _ => store.unlink(&p).unwrap(),
        }
    }
    store.rmdir(dir).unwrap();
}

/// SplitMix64 random numbers from a seed (reproducible runs).
pub struct Rng(pub u64);

impl Rng {
    /// Seed from `CKPTFS_TEST_SEED` if set, else `default`; prints it for reproduction.
    pub fn from_env(default: u64) -> Rng {
        let seed = std::env::var("CKPTFS_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default);
        eprintln!("random seed {seed} (set CKPTFS_TEST_SEED to repeat)");
        Rng(seed)
    }

    /// Next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        writer::mix(self.0, 0x1234_5678)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// Is there a published segment of that name?
pub fn segment_exists(name: &str) -> bool {
    ckptfs_store::segment_path(name).exists()
}

/// A tmpfs mounted with `huge=always` on a temporary directory (root only: returns `None`
/// with a message otherwise), unmounted when dropped. Stores created in it get huge pages
/// for their data region.
pub struct HugeTmpfs {
    dir: tempfile::TempDir,
}

impl HugeTmpfs {
    /// Mount one of `size` bytes.
    pub fn mount(size: u64) -> Option<HugeTmpfs> {
        if !ckptfs_testsupport::is_root() {
            ckptfs_testsupport::skip_root_only("mounting a huge-page tmpfs needs root");
            return None;
        }
        let dir = tempfile::Builder::new().prefix("ckptfs-huge-").tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("huge=always,size={size},mode=1777"))
            .arg("ckptfs-huge-test")
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: mount -t tmpfs -o huge=always failed (no THP for tmpfs in this kernel?)");
            return None;
        }
        Some(HugeTmpfs { dir })
    }

    /// Its mount point.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for HugeTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Kilobytes of `path`'s mappings in this process that are mapped with PMD (2 MiB) page
/// table entries (`ShmemPmdMapped` + `FilePmdMapped` in /proc/self/smaps).
pub fn pmd_mapped_kb(path: &std::path::Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let want = path.display().to_string();
    let mut inside = false;
    let mut kb = 0;
    for l in smaps.lines() {
        let first = l.split_ascii_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            inside = l.trim_end().ends_with(&want);
        } else if inside && (l.starts_with("ShmemPmdMapped:") || l.starts_with("FilePmdMapped:")) {
            kb += l
                .split_ascii_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    kb
}
