//! Helpers shared by the agent's integration tests.
#![allow(dead_code)]

use ckptfs_agent::dest::{CreateOpts, DestEntry, DestFile, DestIo, IoPart, PosixDest};
use ckptfs_agent::manifest;
use ckptfs_agent::AgentConfig;
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A store destroyed (with the agent's status files) when dropped.
pub struct TestStore {
    pub store: Store,
    pub name: String,
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
        ckptfs_agent::status::remove_status(&self.name);
    }
}

pub fn store(tag: &str, opts: impl FnOnce(&mut StoreOptions)) -> TestStore {
    let name = format!("agt-{tag}-{}", std::process::id());
    let _ = Store::destroy(&name);
    ckptfs_agent::status::remove_status(&name);
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(64 << 20);
    o.chunk_size = Some(64 << 10);
    opts(&mut o);
    TestStore {
        store: Store::create(&o).expect("create store"),
        name,
    }
}

/// Deterministic content for (seed, size).
pub fn data(seed: u64, size: usize) -> Vec<u8> {
    ckptfs_testsupport::seeded_bytes(seed, size)
}

pub fn mkdirs(s: &Store, path: &str) {
    let mut cur = String::new();
    let dir = path.rsplit_once('/').map(|x| x.0).unwrap_or("");
    for c in dir.split('/').filter(|c| !c.is_empty()) {
        cur.push('/');
        cur.push_str(c);
        let _ = s.mkdir(&cur, 0o755);
    }
}

pub fn put(s: &Store, path: &str, bytes: &[u8]) {
    mkdirs(s, path);
    let mut f = s.open(path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(bytes).unwrap();
    f.close().unwrap();
}

pub fn get(s: &Store, path: &str) -> Vec<u8> {
    let mut f = s.open(path, OpenFlags::READ, 0).unwrap();
    let mut v = vec![0; f.size() as usize];
    let n = f.read_full(&mut v).unwrap();
    v.truncate(n);
    v
}

pub fn cfg(dest: &Path) -> AgentConfig {
    let mut c = AgentConfig::new(&[dest.to_path_buf()]);
    c.node_id = "n0".into();
    c.interval = std::time::Duration::from_millis(50);
    c.retry_max = std::time::Duration::from_millis(200);
    c
}

/// Regular files under `root` (relative paths), manifests and temporaries included.
pub fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

pub fn is_hidden(p: &Path) -> bool {
    p.file_name().unwrap().to_string_lossy().starts_with('.')
}

/// The invariant after any crash: every file under its final name is byte-identical to
/// one of the versions `expected(store path)` the store ever had, and every manifest
/// entry describes its file exactly.
pub fn check_dest_invariants(root: &Path, expected: &dyn Fn(&str) -> Vec<Vec<u8>>) {
    for rel in walk(root) {
        let full = root.join(&rel);
        let name = rel.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(node) = manifest::node_of(&name) {
            let m: manifest::Manifest = serde_json::from_slice(&std::fs::read(&full).unwrap())
                .unwrap_or_else(|e| panic!("manifest {} unreadable: {e}", full.display()));
            assert_eq!(m.node, node);
            for (fname, e) in &m.files {
                let f = full.parent().unwrap().join(fname);
                let bytes =
                    std::fs::read(&f).unwrap_or_else(|e| panic!("{} in manifest but {e}", f.display()));
                assert_eq!(bytes.len() as u64, e.size, "{} size", f.display());
                assert_eq!(
                    ckptfs_store::checksum::crc32c(&bytes),
                    e.crc32c,
                    "{} crc",
                    f.display()
                );
            }
            continue;
        }
        if is_hidden(&rel) {
            continue; // temporary files are never taken for checkpoints
        }
        let store_path = format!("/{}", rel.display());
        let got = std::fs::read(&full).unwrap();
        assert!(
            expected(&store_path).contains(&got),
            "{store_path}: visible under its final name but not a complete version"
        );
    }
}

/// A destination with a capacity: data writes beyond it fail with ENOSPC.
pub struct SmallDest {
    pub inner: PosixDest,
    pub cap: AtomicU64,
    pub used: Arc<AtomicU64>,
    /// (nice, io class, io level) seen by the thread that created the last file.
    pub prio: std::sync::Mutex<Option<(i32, i32, i32)>>,
}

impl SmallDest {
    pub fn new(cap: u64) -> Arc<SmallDest> {
        Arc::new(SmallDest {
            inner: PosixDest::default(),
            cap: AtomicU64::new(cap),
            used: Arc::new(AtomicU64::new(0)),
            prio: std::sync::Mutex::new(None),
        })
    }
}

struct SmallFile {
    inner: Box<dyn DestFile>,
    cap: u64,
    used: Arc<AtomicU64>,
}

impl DestFile for SmallFile {
    fn write_at(&self, bufs: &[IoPart<'_>], off: u64) -> io::Result<()> {
        let n: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if self.used.fetch_add(n, Ordering::SeqCst) + n > self.cap {
            self.used.fetch_sub(n, Ordering::SeqCst);
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.inner.write_at(bufs, off)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn is_direct(&self) -> bool {
        false
    }
}

impl DestIo for SmallDest {
    fn create(&self, path: &Path, opts: &CreateOpts) -> io::Result<Box<dyn DestFile>> {
        *self.prio.lock().unwrap() = Some(ckptfs_agent::sys::current_priority());
        Ok(Box::new(SmallFile {
            inner: self.inner.create(path, opts)?,
            cap: self.cap.load(Ordering::SeqCst),
            used: self.used.clone(),
        }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        self.inner.open_read(path)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        self.inner.len(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        // A removed temporary file gives its space back.
        if let Ok(n) = self.inner.len(path) {
            let _ = self
                .used
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| Some(u.saturating_sub(n)));
        }
        self.inner.remove(path)
    }
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        self.inner.mkdir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn list(&self, path: &Path) -> io::Result<Vec<DestEntry>> {
        self.inner.list(path)
    }
}

/// Run the named test of this test binary in a child process with extra environment.
pub fn child(test: &str, env: &[(&str, String)]) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads", "1"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::null());
    cmd.spawn().unwrap()
}
