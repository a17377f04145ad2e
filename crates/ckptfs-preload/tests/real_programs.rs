//! Real programs run twice, once with the shim on a fresh store (files under `/ckpt/t`)
//! and once on a plain temporary directory; their output (with the root path replaced by
//! `$ROOT`), exit status and resulting file trees must be identical byte for byte.
//!
//! Needs `libckptfs_preload.so` (built on demand with `cargo build --release -p
//! ckptfs-preload` when `$CKPTFS_BIN_DIR` or `target/release` lack it), gcc, g++, tar,
//! gzip and python3 (Debian's `/usr/bin/python3` when present).

mod common;
use common::*;
use std::process::Command;

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

/// pjdfstest's efault checks crashed the program inside the shim: the path classifier ran
/// strlen on `usize::MAX`. Every call with an unreadable path answers EFAULT as on a
/// plain directory, from a working directory in the store.
#[test]
fn unreadable_path_pointers_are_efault_not_a_crash_in_the_shim() {
    let o = prog("bad_path_pointers.c");
    assert_eq!(o.stdout.matches("EFAULT").count(), 96, "{}", o.stdout);
    assert!(o.stdout.contains("access(\"d\", F_OK)"), "{}", o.stdout);
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
