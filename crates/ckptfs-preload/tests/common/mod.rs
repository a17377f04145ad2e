//! The battery's harness: each program runs under the shim on a fresh store (files under
//! `/ckpt/t`) and on a plain temporary directory, from an empty scratch working
//! directory that must stay empty; outputs, exit status and file trees are compared.
#![allow(dead_code)]

use ckptfs_store::{FileKind, OpenFlags, Store, StoreOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

pub const MOUNT: &str = "/ckpt";

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The shim library, built if missing.
pub fn lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let name = "libckptfs_preload.so";
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(d) = std::env::var_os("CKPTFS_BIN_DIR") {
            dirs.push(d.into());
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or(workspace().join("target"));
        dirs.push(target.join("release"));
        if let Some(p) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
            return p;
        }
        let st = Command::new(env!("CARGO"))
            .args(["build", "--release", "-p", "ckptfs-preload"])
            .current_dir(workspace())
            .status()
            .expect("running cargo build");
        assert!(st.success(), "building ckptfs-preload failed");
        let p = target.join("release").join(name);
        assert!(p.is_file(), "{} missing after the build", p.display());
        p
    })
}

pub fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A store of its own, destroyed on drop.
pub struct TestStore {
    pub name: String,
}

impl TestStore {
    pub fn new() -> TestStore {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "preload-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let _ = Store::destroy(&name);
        TestStore { name }
    }

    pub fn store(&self) -> Store {
        Store::attach(&StoreOptions::named(&self.name)).expect("the store exists after the run")
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
    }
}

/// Output of one run: exit code and normalised stdout+stderr.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(cmd: &[&str], root: &str, envs: &[(&str, String)]) -> Outcome {
    let mut c = Command::new(cmd[0]);
    c.args(&cmd[1..])
        .env("ROOT", root)
        .env("LC_ALL", "C")
        .env("TZ", "UTC");
    for (k, v) in envs {
        c.env(k, v);
    }
    // An empty working directory of its own: a relative path that should have gone to
    // the store's (virtual) cwd but went to the kernel's lands here and is caught.
    let scratch = tempfile::tempdir().unwrap();
    c.current_dir(scratch.path());
    let o = c.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let left: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "{cmd:?} wrote {left:?} into the real working directory"
    );
    let norm = |b: &[u8]| String::from_utf8_lossy(b).replace(root, "$ROOT");
    Outcome {
        code: o.status.code(),
        stdout: norm(&o.stdout),
        stderr: norm(&o.stderr),
    }
}

/// Mode, size and content of every file, directory and symlink (its target) below a root.
pub type Tree = BTreeMap<String, (String, u32, Vec<u8>)>;

pub fn plain_tree(root: &Path) -> Tree {
    fn walk(base: &Path, dir: &Path, out: &mut Tree) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let md = std::fs::symlink_metadata(&p).unwrap();
            use std::os::unix::fs::PermissionsExt;
            let mode = md.permissions().mode() & 0o7777;
            if md.is_dir() {
                out.insert(rel, ("dir".into(), mode, Vec::new()));
                walk(base, &p, out);
            } else if md.file_type().is_symlink() {
                use std::os::unix::ffi::OsStrExt;
                let t = std::fs::read_link(&p).unwrap();
                out.insert(rel, ("symlink".into(), mode, t.as_os_str().as_bytes().to_vec()));
            } else {
                out.insert(rel, ("file".into(), mode, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut t = Tree::new();
    walk(root, root, &mut t);
    t
}

pub fn store_tree(s: &Store, under: &str) -> Tree {
    let mut t = Tree::new();
    let prefix = format!("{under}/");
    for (path, st) in s.list_all() {
        let Some(rel) = path.strip_prefix(&prefix) else {
            continue;
        };
        if st.kind == FileKind::Dir {
            t.insert(rel.to_string(), ("dir".into(), st.mode & 0o7777, Vec::new()));
        } else if st.kind == FileKind::Symlink {
            let target = s.readlink(&path).unwrap();
            t.insert(rel.to_string(), ("symlink".into(), st.mode & 0o7777, target));
        } else {
            let mut f = s.open(&path, OpenFlags::READ, 0).unwrap();
            let mut data = vec![0u8; st.size as usize];
            let n = f.read_full(&mut data).unwrap();
            assert_eq!(n, data.len(), "{path}: short read");
            t.insert(rel.to_string(), ("file".into(), st.mode & 0o7777, data));
        }
    }
    t
}

/// Files every test may read: a deterministic 3 MiB file and a small tree.
pub fn source_dir() -> &'static Path {
    static SRC: OnceLock<tempfile::TempDir> = OnceLock::new();
    SRC.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let big: Vec<u8> = (0..3 * 1024 * 1024 + 123)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        std::fs::write(d.path().join("big.bin"), &big).unwrap();
        let tree = d.path().join("tree");
        std::fs::create_dir_all(tree.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(tree.join("empty")).unwrap();
        std::fs::write(tree.join("a.txt"), "alpha\n").unwrap();
        std::fs::write(tree.join("sub/b.txt"), "beta\n".repeat(1000)).unwrap();
        std::fs::write(tree.join("sub/deeper/c.bin"), &big[..200_000]).unwrap();
        d
    })
    .path()
}

/// Compile a test program from tests/progs once.
pub fn program(src: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap()).path();
    let out = dir.join(src.split('.').next().unwrap());
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap();
    if !out.exists() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/progs")
            .join(src);
        let cc = if src.ends_with(".cpp") {
            "g++"
        } else if src.ends_with(".f90") {
            "gfortran"
        } else {
            "gcc"
        };
        let st = Command::new(cc)
            .args(["-O2", "-Wall", "-pthread", "-o"])
            .arg(&out)
            .arg(&path)
            .status()
            .expect("compiler");
        assert!(st.success(), "compiling {src}");
    }
    out
}

/// The environment that runs a program under the shim on store `ts`.
pub fn shim_env(ts: &TestStore) -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", lib().display().to_string()),
        ("CKPTFS_STORE", ts.name.clone()),
        ("CKPTFS_MOUNT", MOUNT.to_string()),
        ("CKPTFS_MEM_SIZE", "256M".to_string()),
        ("CKPTFS_CHUNK_SIZE", "256K".to_string()),
        ("SRC", source_dir().display().to_string()),
    ]
}

/// Run `cmd` under the shim only (cases without a plain-directory twin), with `extra`
/// settings added to the environment; `$ROOT` is `/ckpt/t`, created first.
pub fn on_store(ts: &TestStore, cmd: &[&str], extra: &[(&'static str, String)]) -> Outcome {
    let mut env = shim_env(ts);
    env.extend(extra.iter().cloned());
    let sroot = format!("{MOUNT}/t");
    let pre = Command::new("mkdir")
        .arg(&sroot)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .status()
        .unwrap();
    assert!(pre.success(), "mkdir {sroot} under the shim");
    run(cmd, &sroot, &env)
}

/// Run `cmd` (with `$ROOT` in its environment) on the store and on a plain directory,
/// assert identical outcomes and trees, and return the outcome.
pub fn compare(cmd: &[&str]) -> Outcome {
    let ts = TestStore::new();
    let env = shim_env(&ts);
    let sroot = format!("{MOUNT}/t");
    let pre = Command::new("mkdir")
        .arg(&sroot)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .status()
        .unwrap();
    assert!(pre.success(), "mkdir {sroot} under the shim");
    let on_store = run(cmd, &sroot, &env);

    let tmp = tempfile::tempdir().unwrap();
    let proot = tmp.path().join("t");
    std::fs::create_dir(&proot).unwrap();
    let plain_env = vec![("SRC", source_dir().display().to_string())];
    let on_plain = run(cmd, proot.to_str().unwrap(), &plain_env);

    assert_eq!(
        on_store, on_plain,
        "{cmd:?}: store run (left) differs from plain run (right)"
    );
    let st = store_tree(&ts.store(), "/t");
    let pt = plain_tree(&proot);
    let names = |t: &Tree| {
        t.iter()
            .map(|(k, v)| format!("{k} {} {:o} {}", v.0, v.1, v.2.len()))
            .collect::<Vec<_>>()
    };
    let (sn, pn) = (names(&st), names(&pt));
    let only_store: Vec<_> = sn.iter().filter(|n| !pn.contains(n)).collect();
    let only_plain: Vec<_> = pn.iter().filter(|n| !sn.contains(n)).collect();
    assert!(
        sn == pn,
        "{cmd:?}: file trees differ: only on the store {only_store:?}, only plain {only_plain:?}"
    );
    for (k, v) in &st {
        assert!(v.2 == pt[k].2, "{cmd:?}: content of {k} differs");
    }
    assert_eq!(ts.store().info().incomplete, 0, "files left incomplete");
    on_store
}

pub fn sh(script: &str) -> Outcome {
    compare(&["sh", "-c", script])
}

pub fn prog(src: &str) -> Outcome {
    let p = program(src);
    let script = format!("\"{}\" \"$ROOT\"", p.display());
    let o = sh(&script);
    assert_eq!(o.code, Some(0), "{src}: {o:?}");
    o
}
