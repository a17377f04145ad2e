//! Real programs run twice, once with the shim on a fresh store (files under `/ckpt/t`)
//! and once on a plain temporary directory; their output (with the root path replaced by
//! `$ROOT`), exit status and resulting file trees must be identical byte for byte.
//!
//! Needs `libckptfs_preload.so` (built on demand with `cargo build --release -p
//! ckptfs-preload` when `$CKPTFS_BIN_DIR` or `target/release` lack it), gcc, g++, tar,
//! gzip and python3 (Debian's `/usr/bin/python3` when present).

use ckptfs_store::{FileKind, OpenFlags, Store, StoreOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

const MOUNT: &str = "/ckpt";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The shim library, built if missing.
fn lib() -> &'static Path {
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

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A store of its own, destroyed on drop.
struct TestStore {
    name: String,
}

impl TestStore {
    fn new() -> TestStore {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "preload-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let _ = Store::destroy(&name);
        TestStore { name }
    }

    fn store(&self) -> Store {
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
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(cmd: &[&str], root: &str, envs: &[(&str, String)]) -> Outcome {
    let mut c = Command::new(cmd[0]);
    c.args(&cmd[1..])
        .env("ROOT", root)
        .env("LC_ALL", "C")
        .env("TZ", "UTC");
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = c.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let norm = |b: &[u8]| String::from_utf8_lossy(b).replace(root, "$ROOT");
    Outcome {
        code: o.status.code(),
        stdout: norm(&o.stdout),
        stderr: norm(&o.stderr),
    }
}

/// Mode, size and content of every file and directory below a root.
type Tree = BTreeMap<String, (String, u32, Vec<u8>)>;

fn plain_tree(root: &Path) -> Tree {
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
            } else {
                out.insert(rel, ("file".into(), mode, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut t = Tree::new();
    walk(root, root, &mut t);
    t
}

fn store_tree(s: &Store, under: &str) -> Tree {
    let mut t = Tree::new();
    let prefix = format!("{under}/");
    for (path, st) in s.list_all() {
        let Some(rel) = path.strip_prefix(&prefix) else {
            continue;
        };
        if st.kind == FileKind::Dir {
            t.insert(rel.to_string(), ("dir".into(), st.mode & 0o7777, Vec::new()));
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
fn source_dir() -> &'static Path {
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
fn program(src: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap()).path();
    let out = dir.join(src.split('.').next().unwrap());
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap();
    if !out.exists() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/progs")
            .join(src);
        let cc = if src.ends_with(".cpp") { "g++" } else { "gcc" };
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

/// Run `cmd` (with `$ROOT` in its environment) on the store and on a plain directory,
/// assert identical outcomes and trees, and return the outcome.
fn compare(cmd: &[&str]) -> Outcome {
    let ts = TestStore::new();
    let env = vec![
        ("LD_PRELOAD", lib().display().to_string()),
        ("CKPTFS_STORE", ts.name.clone()),
        ("CKPTFS_MOUNT", MOUNT.to_string()),
        ("CKPTFS_MEM_SIZE", "256M".to_string()),
        ("CKPTFS_CHUNK_SIZE", "256K".to_string()),
        ("SRC", source_dir().display().to_string()),
    ];
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

fn sh(script: &str) -> Outcome {
    compare(&["sh", "-c", script])
}

#[test]
fn coreutils_cp_dd_cat_mv_rm_mkdir_ls_du_stat() {
    let o = sh(r#"set -e
mkdir -p "$ROOT/a/b/c"
cp "$SRC/big.bin" "$ROOT/a/big.bin"
dd if="$SRC/big.bin" of="$ROOT/a/dd.bin" bs=64k status=none
dd if="$ROOT/a/dd.bin" of="$ROOT/a/b/part.bin" bs=1M skip=1 count=1 status=none
cat "$ROOT/a/big.bin" "$ROOT/a/b/part.bin" | dd of="$ROOT/a/cat.bin" bs=1M iflag=fullblock status=none
cmp "$ROOT/a/cat.bin" "$ROOT/a/cat.bin"
cat "$ROOT/a/b/part.bin" | cksum
cp -r "$SRC/tree" "$ROOT/tree"
cp -a "$ROOT/tree" "$ROOT/tree2"
mv "$ROOT/tree2/a.txt" "$ROOT/tree2/sub/moved.txt"
mv "$ROOT/tree2" "$ROOT/a/b/c/tree3"
rm "$ROOT/a/dd.bin"
rm -r "$ROOT/a/b/c/tree3/empty"
echo "rm missing: $(rm "$ROOT/nope" 2>&1; echo $?)"
touch -d @1000000000 "$ROOT/a/big.bin" "$ROOT/a/cat.bin" "$ROOT/a/b/part.bin" "$ROOT/a/b" "$ROOT/a/b/c" "$ROOT/a"
ls -l "$ROOT/a" | grep -v '^total'
ls -la "$ROOT/tree/sub" | grep -v '^total' | awk '{print $1, $2, $5, $9}'
ls -R "$ROOT/tree"
du -b "$ROOT/a/big.bin" "$ROOT/tree/sub"
du -sb --apparent-size "$ROOT/a"
stat -c '%n %s %F %a %h %U %G %Y' "$ROOT/a/big.bin" "$ROOT/a/b"
test -d "$ROOT/a/b" && test -f "$ROOT/a/big.bin" && test ! -e "$ROOT/zz" && echo tests ok
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
}

#[test]
fn tar_create_and_extract() {
    let o = sh(r#"set -e
tar -cf "$ROOT/src.tar" -C "$SRC" tree
mkdir "$ROOT/x"
tar -xf "$ROOT/src.tar" -C "$ROOT/x"
tar -cf "$ROOT/again.tar" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$ROOT/x" tree
tar -tvf "$ROOT/again.tar"
mkdir "$ROOT/y"
tar -xf "$ROOT/again.tar" -C "$ROOT/y"
tar -czf "$ROOT/z.tgz" --sort=name --mtime=@0 --owner=0 --group=0 -C "$ROOT/y" tree
tar -tzf "$ROOT/z.tgz"
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
}

#[test]
fn gzip_compress_and_decompress() {
    let o = sh(r#"set -e
cp "$SRC/big.bin" "$ROOT/big.bin"
gzip -k -n "$ROOT/big.bin"
gzip -t "$ROOT/big.bin.gz"
gzip -dc "$ROOT/big.bin.gz" | cmp - "$SRC/big.bin"
mv "$ROOT/big.bin" "$ROOT/orig.bin"
gzip -d "$ROOT/big.bin.gz"
cmp "$ROOT/big.bin" "$ROOT/orig.bin"
gzip -l "$ROOT/orig.bin" 2>&1 | head -1 || true
ls "$ROOT"
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
}

#[test]
fn python_files_stat_listdir_copytree() {
    let script = r#"
import os, shutil, errno
r = os.environ["ROOT"]
with open(f"{r}/p.txt", "w") as f:
    f.write("hello\n" * 1000)
with open(f"{r}/p.txt", "a") as f:
    f.write("tail\n")
with open(f"{r}/p.txt", "rb") as f:
    f.seek(-5, 2)
    print(f.read(), f.tell())
st = os.stat(f"{r}/p.txt")
print(st.st_size, oct(st.st_mode), st.st_nlink)
os.makedirs(f"{r}/d1/d2/d3")
shutil.copytree(os.environ["SRC"] + "/tree", f"{r}/copied")
shutil.copyfile(f"{r}/p.txt", f"{r}/d1/p2.txt")
os.rename(f"{r}/d1/p2.txt", f"{r}/d1/d2/p3.txt")
print(sorted(os.listdir(r)), sorted(os.listdir(f"{r}/copied/sub")))
print(sorted((e.name, e.is_dir(), e.is_file()) for e in os.scandir(f"{r}/copied")))
print([(d, sorted(ds), sorted(fs)) for d, ds, fs in sorted(os.walk(f"{r}/copied"))][0][1:])
try:
    open(f"{r}/missing")
except OSError as e:
    print("missing:", errno.errorcode[e.errno])
try:
    os.rmdir(f"{r}/d1")
except OSError as e:
    print("rmdir:", errno.errorcode[e.errno])
os.remove(f"{r}/d1/d2/p3.txt")
shutil.rmtree(f"{r}/d1")
print(os.path.exists(f"{r}/d1"), os.path.isdir(f"{r}/copied"), os.path.getsize(f"{r}/copied/sub/b.txt"))
with open(f"{r}/big.bin", "wb") as f:
    f.write(open(os.environ["SRC"] + "/big.bin", "rb").read())
print(len(open(f"{r}/big.bin", "rb").read()))
"#;
    let o = compare(&[python(), "-c", script]);
    assert_eq!(o.code, Some(0), "{o:?}");
}

fn prog(src: &str) -> Outcome {
    let p = program(src);
    let script = format!("\"{}\" \"$ROOT\"", p.display());
    let o = sh(&script);
    assert_eq!(o.code, Some(0), "{src}: {o:?}");
    o
}

#[test]
fn c_program_posix_stdio_mmap() {
    let o = prog("posix_stdio.c");
    assert!(o.stdout.contains("mmap ok=1"), "{}", o.stdout);
}

#[test]
fn cpp_fstreams() {
    let o = prog("fstreams.cpp");
    assert!(o.stdout.contains("lines=1003"), "{}", o.stdout);
}

#[test]
fn fork_shares_offsets_with_children() {
    let o = prog("forks.c");
    assert!(
        o.stdout.contains("parent1\nchild0\nchild1\nchild2\nparent2\n"),
        "{}",
        o.stdout
    );
}

#[test]
fn threads_write_different_files() {
    let o = prog("threads.c");
    assert!(o.stdout.contains("threads ok: 8/8"), "{}", o.stdout);
}

#[test]
fn errno_matches_the_kernel() {
    let o = prog("errnos.c");
    assert!(o.stdout.contains("ENOENT"), "{}", o.stdout);
}

#[test]
fn descriptor_collisions_and_close_range() {
    let o = prog("fds.c");
    assert!(o.stdout.contains("300 files ok=1"), "{}", o.stdout);
}

#[test]
fn exec_inherits_store_descriptors_shell_redirections() {
    let o = sh(r#"set -e
echo one > "$ROOT/a"
(echo two; cat "$ROOT/a"; /bin/echo three) > "$ROOT/b"
ls "$ROOT" >> "$ROOT/b"
/bin/sh -c 'echo nested' >> "$ROOT/b"
bash -c 'exec 3>>"$ROOT/b"; echo fd3 >&3; /bin/echo fd3-child >&3'
cat "$ROOT/b"
wc -c < "$ROOT/b"
exec 4< "$ROOT/a"
head -c 2 <&4; echo
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(
        o.stdout
            .contains("two\none\nthree\na\nb\nnested\nfd3\nfd3-child\n"),
        "{}",
        o.stdout
    );
}

/// `ckptfs run`: files stay in the store after the command exits, `ckptfs ls` shows
/// them, a second run reads them back, and the exit code is the command's. Needs the
/// `ckptfs` binary next to the library with the `run` subcommand wired.
#[test]
fn ckptfs_run_keeps_files_between_runs() {
    let ckptfs = lib().with_file_name("ckptfs");
    let has_run = ckptfs.is_file()
        && Command::new(&ckptfs)
            .args(["run", "--help"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !has_run {
        eprintln!(
            "SKIPPED: {} has no `run` subcommand in this build",
            ckptfs.display()
        );
        return;
    }
    let ts = TestStore::new();
    let base = |args: &[&str]| {
        let mut c = Command::new(&ckptfs);
        c.args(["--store", &ts.name, "--mem-size", "64M", "--chunk-size", "256K"])
            .args(args);
        c.output().unwrap()
    };
    let o = base(&[
        "run",
        "--",
        "sh",
        "-c",
        "mkdir -p /ckpt/r && echo persisted > /ckpt/r/f && exit 7",
    ]);
    assert_eq!(o.status.code(), Some(7), "{o:?}");
    let ls = base(&["ls", "/r"]);
    assert_eq!(String::from_utf8_lossy(&ls.stdout).trim(), "f", "{ls:?}");
    let o = base(&["run", "--", "cat", "/ckpt/r/f"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "persisted\n", "{o:?}");
    assert!(o.status.success());
}
