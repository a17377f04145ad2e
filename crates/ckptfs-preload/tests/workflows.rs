//! Workflows of real programs beyond single calls (issue 12): the virtual working
//! directory across exec, spawn, system and popen; deleting with `remove()` from C, C++
//! and Fortran. Each case runs under the shim and on a plain directory and must give the
//! same output and file tree, and must leave the real working directory empty.

mod common;
use common::*;
use std::process::Command;

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn cwd_in_the_store_survives_exec_spawn_system_popen() {
    let o = sh(r#"set -e
bash -c 'mkdir -p "$ROOT/w"; cd "$ROOT/w" && touch x'
cd "$ROOT/w"
mkdir -p d/e
echo hi > d/e/f
find . | sort
bash -c 'pwd; cd d && echo deeper > g && /bin/pwd && ls'
sh -c 'cd d/e && cat f ../g && /bin/cat ../../x'
cd d && /bin/ls -a && cd ..
python3 -c '
import os, subprocess
print(os.getcwd())
subprocess.run(["touch", "by-spawn"], check=True)
os.system("echo by-system > by-system")
print(os.popen("cat by-system").read().strip())
print(sorted(os.listdir(".")))
'
cd /
ls "$ROOT/w"
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(
        o.stdout
            .contains("./d/e/f\n./x\n$ROOT/w\n$ROOT/w/d\ne\ng\nhi\ndeeper\n"),
        "{}",
        o.stdout
    );
}

#[test]
fn cwd_from_a_store_directory_then_back_to_a_real_one() {
    // A child that leaves the store directory for a real one must not keep resolving
    // relative paths in the store (the inherited cwd is tied to the kernel cwd).
    let o = sh(r#"set -e
mkdir "$ROOT/s"
cd "$ROOT/s"
sh -c 'd=$(mktemp -d); cd "$d" && echo real > r && cd - >/dev/null && ls; sh -c "cd \"$d\" && cat r"; rm -r "$d"'
ls
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.ends_with("real\n"), "{}", o.stdout);
}

#[test]
fn make_dash_c_into_a_store_directory() {
    let o = sh(r#"set -e
mkdir -p "$ROOT/m/sub"
printf 'all: out.txt sub/n.txt\nout.txt: in.txt\n\tcat in.txt in.txt > out.txt\nsub/n.txt: in.txt\n\t$(MAKE) -s -C sub -f ../sub.mk\n' > "$ROOT/m/Makefile"
printf 'n.txt:\n\techo nested > n.txt\n' > "$ROOT/m/sub.mk"
echo data > "$ROOT/m/in.txt"
make -s -C "$ROOT/m"
make -C "$ROOT/m" | grep -c 'Nothing to be done'
cat "$ROOT/m/out.txt" "$ROOT/m/sub/n.txt"
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.contains("1\ndata\ndata\nnested\n"), "{}", o.stdout);
}

#[test]
fn mpirun_wdir_in_the_store() {
    if !have("mpirun") {
        eprintln!("SKIPPED: mpirun not installed (Debian openmpi-bin)");
        return;
    }
    let o = sh(r#"set -e
mkdir "$ROOT/wd"
mpirun --allow-run-as-root --oversubscribe -np 2 -wdir "$ROOT/wd" sh -c 'echo "rank $OMPI_COMM_WORLD_RANK" > "out.$OMPI_COMM_WORLD_RANK"'
cat "$ROOT/wd/out.0" "$ROOT/wd/out.1"
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.contains("rank 0\nrank 1\n"), "{}", o.stdout);
}

#[test]
fn remove_from_c_deletes_files_and_empty_directories() {
    let o = prog("removes.c");
    assert!(
        o.stdout.contains("remove ckpt.2 = 0 ok; exists after: 0\n")
            && o.stdout
                .contains("remove d = -1 Directory not empty; exists after: 1\n")
            && o.stdout.contains("remove d/e = 0 ok; exists after: 0\n")
            && o.stdout.contains("remove missing = -1 No such file or directory"),
        "{}",
        o.stdout
    );
}

#[test]
fn cpp_filesystem_remove_all_and_relative() {
    let o = prog("remove_all.cpp");
    assert!(
        o.stdout.contains("removed 12 exists 0\nremove file 1 again 0\n"),
        "{}",
        o.stdout
    );
}

#[test]
fn fortran_unformatted_direct_access_and_close_delete() {
    if !have("gfortran") {
        panic!("gfortran missing: run scripts/setup-preload.sh");
    }
    let o = prog("fortran_io.f90");
    assert!(
        o.stdout
            .contains(" seq ok T\n direct ok T\n scratch deleted T\n missing open fails T\n"),
        "{}",
        o.stdout
    );
}

#[test]
fn realpath_readlink_f_and_python_realpath() {
    let o = sh(r#"set -e
mkdir -p "$ROOT/r/s"
echo x > "$ROOT/r/s/f"
cd "$ROOT/r"
readlink -f s/f
realpath ./s/../s//f
python3 -c 'import os; print(os.path.realpath("s/f"), os.path.abspath("s"))'
realpath missing/f 2>&1 || echo "realpath missing: $?"
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.starts_with("$ROOT/r/s/f\n$ROOT/r/s/f\n"), "{}", o.stdout);
}

#[test]
fn full_file_table_is_enospc_like_a_full_file_system() {
    let ts = TestStore::new();
    let script = r#"
import os, errno
r = os.environ["ROOT"]
n = 0
try:
    for i in range(100):
        open(f"{r}/f{i}", "w").close()
        n += 1
except OSError as e:
    print("open:", errno.errorcode[e.errno], "after", n)
try:
    os.mkdir(f"{r}/d")
except OSError as e:
    print("mkdir:", errno.errorcode[e.errno])
os.remove(f"{r}/f0")
open(f"{r}/again", "w").close()
print("after remove:", os.path.exists(f"{r}/again"))
"#;
    // 8 inodes: the root, /t, and 6 files.
    let o = on_store(
        &ts,
        &["python3", "-c", script],
        &[("CKPTFS_MAX_FILES", "8".into())],
    );
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(
        o.stdout, "open: ENOSPC after 6\nmkdir: ENOSPC\nafter remove: True\n",
        "{o:?}"
    );
}

#[test]
fn sed_in_place_mktemp_and_python_tempfile() {
    let o = sh(r#"set -e
printf 'one\ntwo\nthree\n' > "$ROOT/f"
sed -i 's/two/TWO/' "$ROOT/f"
sed -i.bak -e '1d' "$ROOT/f"
cat "$ROOT/f" "$ROOT/f.bak"
t=$(mktemp "$ROOT/fooXXXXXX"); echo data > "$t"; cat "$t"; rm "$t"
d=$(mktemp -d -p "$ROOT"); test -d "$d" && stat -c %a "$d"; rmdir "$d"
mktemp "$ROOT/bad" 2>/dev/null || echo "too few X: $?"
python3 -c '
import tempfile, os
r = os.environ["ROOT"]
fd, n = tempfile.mkstemp(dir=r, suffix=".x")
os.write(fd, b"tmp"); os.close(fd)
print(os.path.basename(n).startswith("tmp"), n.endswith(".x"), open(n).read(), oct(os.stat(n).st_mode & 0o777))
os.rename(n, r + "/kept")
with tempfile.NamedTemporaryFile(dir=r) as t:
    t.write(b"x"); t.flush(); print(os.path.exists(t.name))
d = tempfile.mkdtemp(dir=r); print(os.path.isdir(d)); os.rmdir(d)
'
ls "$ROOT"
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(
        o.stdout.contains("TWO\nthree\none\nTWO\nthree\ndata\n700\ntoo few X: 1\nTrue True tmp 0o600\nTrue\nTrue\nf\nf.bak\nkept\n"),
        "{}",
        o.stdout
    );
}

#[test]
fn df_and_statvfs_report_the_store_capacity_and_free_space() {
    let ts = TestStore::new();
    let script = r#"set -e
df -B1 --output=size "$ROOT" | tail -1
python3 -c '
import os, shutil
r = os.environ["ROOT"]
s = os.statvfs(r)
print("total", s.f_blocks * s.f_frsize, "bsize", s.f_frsize)
free0 = shutil.disk_usage(r).free
with open(r + "/ten", "wb") as f:
    f.write(b"x" * (10 << 20))
    os.fsync(f.fileno())
    print("fstatvfs free drop", (free0 - os.fstatvfs(f.fileno()).f_bavail * s.f_frsize) >> 20)
print("statvfs free drop", (free0 - shutil.disk_usage(r).free) >> 20)
try:
    os.statvfs(r + "/missing")
except OSError as e:
    print("missing", e.errno == 2)
'
stat -f -c '%T %l' "$ROOT"
"#;
    let o = on_store(&ts, &["sh", "-c", script], &[]);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(
        o.stdout,
        "268435456\ntotal 268435456 bsize 262144\nfstatvfs free drop 10\nstatvfs free drop 10\nmissing True\nUNKNOWN (0x636b7074) 255\n",
        "{o:?}"
    );
}

#[test]
fn scripts_and_programs_stored_in_the_store_execute() {
    let o = compare(&[
        "bash",
        "-c",
        r#"set -e
mkdir "$ROOT/bin"
printf '#!/bin/sh\necho "script $# $1 $2"; echo "$0" | sed "s|$ROOT|R|"\n' > "$ROOT/bin/run.sh"
chmod +x "$ROOT/bin/run.sh"
"$ROOT/bin/run.sh" a b
cd "$ROOT/bin"
./run.sh c
PATH="$ROOT/bin:$PATH" run.sh d
cp /bin/echo "$ROOT/bin/myecho"
"$ROOT/bin/myecho" an ELF program copied into the store
PATH="$ROOT/bin:$PATH" myecho found through PATH
printf '#!/usr/bin/env python3\nimport sys; print("py", sys.argv[1:])\n' > py
chmod 755 py
./py x y
python3 -c 'import subprocess; subprocess.run(["./run.sh", "spawned"], check=True)'
printf 'echo never\n' > noexec
./noexec 2>/dev/null || echo "no x bit: $?"
cd ..
"#,
    ]);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(
        o.stdout,
        "script 2 a b\nR/bin/run.sh\nscript 1 c \n./run.sh\nscript 1 d \nR/bin/run.sh\n\
         an ELF program copied into the store\nfound through PATH\npy ['x', 'y']\n\
         script 1 spawned \n./run.sh\nno x bit: 126\n",
        "{o:?}"
    );
}

#[test]
fn fcntl_ofd_flock_lockf_between_processes_and_after_sigkill() {
    let o = prog("locks.c");
    assert_eq!(
        o.stdout,
        "getlk: ok type=WR holder_is_A=1 start=0 len=100\nsetlk conflict: EAGAIN\n\
         setlk elsewhere: ok\nlockf test: EACCES\nlockf tlock: EAGAIN\nofd conflict: EAGAIN\n\
         flock independent of fcntl: ok\nB got the lock after A was SIGKILLed: y\n\
         setlk after both: ok\nafter closing another fd, lock gone: 1\nflock contended: EAGAIN\n\
         flock shared ok: EAGAIN\nflock after kill: ok\nflock by another open: EAGAIN\n\
         still held through the dup: EAGAIN\nreleased with the last dup: ok\nofd lock: ok\n\
         ofd other description: EAGAIN\nofd same description in child: ok\n\
         write lock on read-only fd: EBADF\nbad whence: EINVAL\n",
        "{o:?}"
    );
}

#[test]
fn sqlite_rollback_journal_with_concurrent_writers() {
    if !have("sqlite3") {
        panic!("sqlite3 missing: run scripts/setup-preload.sh");
    }
    // Four writer processes at once, each inserting 50 rows in its own transactions:
    // without working locks they corrupt the database or lose rows.
    let o = sh(r#"set -e
db="$ROOT/db.sqlite"
sqlite3 "$db" 'create table t(w integer, i integer); pragma journal_mode;'
for w in 1 2 3 4; do
  (for i in $(seq 1 50); do echo "begin immediate; insert into t values($w, $i); commit;"; done) | sqlite3 -cmd '.timeout 600000' "$db" &
done
wait
sqlite3 "$db" 'select w, count(*), sum(i) from t group by w; pragma integrity_check;'
ls "$ROOT"
rm "$db" # row order depends on the interleaving: not compared byte for byte
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(
        o.stdout, "delete\n1|50|1275\n2|50|1275\n3|50|1275\n4|50|1275\nok\ndb.sqlite\n",
        "{o:?}"
    );
}

#[test]
fn rsync_in_and_out_and_a_second_run_changes_nothing() {
    if !have("rsync") {
        panic!("rsync missing: run scripts/setup-preload.sh");
    }
    let o = sh(r#"set -e
rsync -a "$SRC/tree/" "$ROOT/rs/"
echo "second run:"; rsync -ai "$SRC/tree/" "$ROOT/rs/"
o=$(mktemp -d)
rsync -a "$ROOT/rs/" "$o/"
diff -r "$SRC/tree" "$o" && echo out same
echo "second run out:"; rsync -ai "$ROOT/rs/" "$o/"
echo more >> "$ROOT/rs/a.txt"
rsync -ai "$ROOT/rs/" "$o/" | cut -c1-2,12-
cmp "$ROOT/rs/a.txt" "$o/a.txt" && echo updated
rm -r "$o"
cd /
rsync -a "$ROOT/rs/sub" "$ROOT/copy/"
ls -R "$ROOT/copy"
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(
        o.stdout,
        "second run:\nout same\nsecond run out:\n>f a.txt\nupdated\n$ROOT/copy:\nsub\n\n\
         $ROOT/copy/sub:\nb.txt\ndeeper\n\n$ROOT/copy/sub/deeper:\nc.bin\n",
        "{o:?}"
    );
}

#[test]
fn directory_descriptors_at_calls_fchdir_and_o_path() {
    let script = r#"
import os
r = os.environ["ROOT"]
os.makedirs(f"{r}/d/e")
root = os.open("/", os.O_PATH | os.O_DIRECTORY)
# Walk from "/" one component at a time, as rsync does.
fd = root
for c in r.strip("/").split("/") + ["d"]:
    nfd = os.open(c, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    if fd != root:
        os.close(fd)
    fd = nfd
print("walked", os.stat(".", dir_fd=fd).st_mode & 0o170000 == 0o040000)
os.mkdir("m", dir_fd=fd)
w = os.open("m/f", os.O_WRONLY | os.O_CREAT, 0o640, dir_fd=fd)
os.write(w, b"at"); os.close(w)
os.rename("m/f", "e/g", src_dir_fd=fd, dst_dir_fd=fd)
print("stat at", os.stat("e/g", dir_fd=fd).st_size, os.access("e/g", os.R_OK, dir_fd=fd))
d = os.open(f"{r}/d", os.O_RDONLY | os.O_DIRECTORY)
os.fchdir(d)
print("fchdir", os.getcwd() == f"{r}/d", sorted(os.listdir(".")), open("e/g").read())
os.unlink("g", dir_fd=os.open("e", os.O_PATH))
os.rmdir("m", dir_fd=fd)
print("listdir fd", sorted(os.listdir(d)))
os.chdir("/")
print("back", os.getcwd())
"#;
    let o = compare(&["python3", "-c", script]);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(
        o.stdout, "walked True\nstat at 2 True\nfchdir True ['e', 'm'] at\nlistdir fd ['e']\nback /\n",
        "{o:?}"
    );
}

#[test]
fn posix_aio_read_write_signal_lio_listio_fsync() {
    let o = prog("aio.c");
    assert!(
        o.stdout
            .contains("signal: 1 code_asyncio=1 value_is_cb=1\nread: error=0 return=8192 bytes cc ba\n")
            && o.stdout.contains("lio_listio: 0\n")
            && o.stdout
                .contains("negative offset: error=Invalid argument\nsize 12488\n"),
        "{}",
        o.stdout
    );
}

fn debian_python_has(module: &str) -> bool {
    Command::new("/usr/bin/python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn h5py_with_default_locking_and_h5dump() {
    if !debian_python_has("h5py") || !have("h5dump") {
        panic!("python3-h5py or hdf5-tools missing: run scripts/setup-preload.sh");
    }
    let o = sh(r#"set -e
/usr/bin/python3 -c '
import h5py, numpy as np, os
r = os.environ["ROOT"]
with h5py.File(f"{r}/c.h5", "w") as f:
    f.create_dataset("x", data=np.arange(1000.0), chunks=(100,), compression="gzip")
    f.attrs["step"] = 7
with h5py.File(f"{r}/c.h5", "r") as f, h5py.File(f"{r}/c.h5", "r") as g:
    print(f["x"][:].sum(), g.attrs["step"], f["x"].chunks)
with h5py.File(f"{r}/c.h5", "a") as f:
    f["x"][10:20] = -1
    f.create_group("g")["y"] = np.ones((4, 4), dtype="i4")
print(h5py.File(f"{r}/c.h5", "r")["x"][8:12])
'
h5dump -d /g/y "$ROOT/c.h5" | sed "s|$ROOT|R|"
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(
        o.stdout
            .starts_with("499500.0 7 (100,)\n[ 8.  9. -1. -1.]\nHDF5 \"R/c.h5\" {\nDATASET \"/g/y\" {"),
        "{}",
        o.stdout
    );
}

#[test]
fn sqlite_wal_with_concurrent_writers_through_shared_mappings() {
    if !have("sqlite3") {
        panic!("sqlite3 missing: run scripts/setup-preload.sh");
    }
    // WAL's wal-index (-shm) is a shared writable mapping used by all connections at
    // once: it must be the store's own pages for the four writers to agree.
    let o = sh(r#"set -e
db="$ROOT/w.db"
sqlite3 "$db" 'pragma journal_mode=wal; create table t(w integer, i integer);'
for w in 1 2 3 4; do
  (for i in $(seq 1 50); do echo "begin immediate; insert into t values($w, $i); commit;"; done) | sqlite3 -cmd '.timeout 600000' "$db" &
done
wait
sqlite3 "$db" 'select w, count(*), sum(i) from t group by w; pragma integrity_check;'
ls "$ROOT"
rm "$db" # row order depends on the interleaving: not compared byte for byte
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(
        o.stdout, "wal\n1|50|1275\n2|50|1275\n3|50|1275\n4|50|1275\nok\nw.db\n",
        "{o:?}"
    );
}

#[test]
fn numpy_memmap_w_plus_r_plus_r_and_c() {
    if !debian_python_has("numpy") {
        panic!("python3-numpy missing: run scripts/setup-preload.sh");
    }
    let script = r#"
import numpy as np, os, subprocess, sys
r = os.environ["ROOT"]
m = np.memmap(f"{r}/mm", dtype="float64", mode="w+", shape=(300000,))
m[:] = np.arange(300000.0)
m.flush()
# Another process sees the mapping's bytes after flush (msync).
print(subprocess.run([sys.executable, "-c", f"import numpy as np; print(np.fromfile('{r}/mm').sum())"],
                     capture_output=True, text=True).stdout.strip())
del m
w = np.memmap(f"{r}/mm", dtype="float64", mode="r+", shape=(300000,))
w[5] = -1
w[299999] = 7
del w  # unmapped without an explicit flush
ro = np.memmap(f"{r}/mm", dtype="float64", mode="r")
print(ro[4:7], ro[-1])
c = np.memmap(f"{r}/mm", dtype="float64", mode="c")
c[0] = 99  # copy-on-write: not written back
del c
print(np.fromfile(f"{r}/mm")[:2])
"#;
    let o = compare(&["/usr/bin/python3", "-c", script]);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(o.stdout, "44999850000.0\n[ 4. -1.  6.] 7.0\n[0. 1.]\n", "{o:?}");
}

#[test]
fn fio_verify_crc32c_psync_posixaio_mmap_work_libaio_fails_as_documented() {
    if !have("fio") {
        eprintln!("SKIPPED: fio not installed (Debian fio)");
        return;
    }
    let ts = TestStore::new();
    let script = r#"
for e in psync posixaio mmap libaio; do
  fio --name=t --directory="$ROOT" --ioengine=$e --iodepth=4 --rw=randwrite --bs=16k --size=2m \
      --verify=crc32c --do_verify=1 --output-format=terse > out.$e 2>&1
  echo "$e exit $? err $(grep -o 'err=[0-9]*' out.$e | head -1)"
  rm -f out.$e "$ROOT"/t.*
done
"#;
    // out.* files are scratch in the real cwd: run from a directory of our own.
    let o = on_store(
        &ts,
        &[
            "sh",
            "-c",
            &format!("d=$(mktemp -d) && cd \"$d\" && {{ {script} }}; cd / && rmdir \"$d\""),
        ],
        &[],
    );
    assert_eq!(
        o.stdout, "psync exit 0 err \nposixaio exit 0 err \nmmap exit 0 err \nlibaio exit 1 err err=9\n",
        "{o:?}"
    );
}

#[test]
fn shared_mapping_writes_keep_store_checksums_valid() {
    // Bytes stored through a MAP_SHARED mapping bypass the store's checksums; msync,
    // munmap and exit bring them up to date, so fsck verifies every byte afterwards.
    let ts = TestStore::new();
    let script = r#"
import mmap, os
r = os.environ["ROOT"]
for name, how in (("synced", "msync"), ("unmapped", "munmap"), ("exited", "exit")):
    fd = os.open(f"{r}/{name}", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 3 << 20)
    m = mmap.mmap(fd, 3 << 20, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[100:105] = b"hello"
    m[(3 << 20) - 5:] = b"world"
    if how == "msync":
        m.flush()
    if how != "exit":
        m.close()
        os.close(fd)
    else:
        keep = m  # still mapped when the process exits
print(open(f"{r}/synced", "rb").read()[100:105], open(f"{r}/unmapped", "rb").read()[-5:])
# A fork child writes through the inherited mapping and exits; the parent unmaps later.
fd = os.open(f"{r}/forked", os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 1 << 20)
m = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
pid = os.fork()
if pid == 0:
    m[0:5] = b"child"
    os._exit(0)
os.waitpid(pid, 0)
m[10:16] = b"parent"
m.close()
print(open(f"{r}/forked", "rb").read(16))
"#;
    let o = on_store(&ts, &["/usr/bin/python3", "-c", script], &[]);
    assert_eq!(
        o.stdout, "b'hello' b'world'\nb'child\\x00\\x00\\x00\\x00\\x00parent'\n",
        "{o:?}"
    );
    let rep = ts.store().fsck(false);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert!(rep.incomplete.is_empty(), "{:?}", rep.incomplete);
    assert!(rep.bytes_verified >= 10 << 20, "{rep:?}");
}

#[test]
fn symlinks_in_the_store_are_created_read_and_followed_like_on_a_plain_directory() {
    // ln -s, readlink, ls -l / stat -L / test -L, cat and writes through a link to a file,
    // into a directory through a link, a dangling link, rename and rm of a link, a link
    // loop (ELOOP after 40 hops), and a link leading out of the store.
    let o = sh(r#"set -e
cd "$ROOT"
mkdir -p d/sub
echo hello > d/f
ln -s d/f l
ln -s d ld
ln -s ../f d/sub/up
ln -s nowhere dangling
ln -s loop2 loop1
ln -s loop1 loop2
ln -s "$SRC" out
readlink l ld d/sub/up dangling
test -L l && test -f l && test -d ld && test -L ld && ! test -e dangling && test -L dangling
stat -c '%F %s' l
stat -L -c '%F %s' l
cat l ld/f d/sub/up
echo more >> l
cat d/f
echo new > ld/sub/created
cat d/sub/created
ls ld/sub
cat loop1 2>/dev/null || echo "loop: $?"
cat dangling 2>/dev/null || echo "dangling: $?"
ls out | head -2 >/dev/null && echo "out of the store: ok"
cd ld/sub && cat created && cd ../..
mv l l2
readlink l2
rm l2 dangling loop1 loop2 out
ls -1
ln -s d/f l && ln -s d/f l 2>/dev/null || echo "exists: $?"
printf '#!/bin/sh\necho ran\n' > d/prog
chmod +x d/prog
ln -s d/prog lp
./lp
find . -type l | sort
ls -F
"#);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.contains("symbolic link 3"), "{o:?}");
    assert!(o.stdout.contains("regular file 6"), "{o:?}");
    assert!(o.stdout.contains("loop: 1"), "{o:?}");
    assert!(o.stdout.contains("out of the store: ok"), "{o:?}");
    assert!(
        o.stdout
            .contains("ran\n./d/sub/up\n./l\n./ld\n./lp\nd/\nl@\nld@\nlp@\n"),
        "{o:?}"
    );
}

/// A store whose segment is on a huge-page tmpfs (`CKPTFS_SHM_DIR`): programs under the
/// shim write into that store (not a new one in /dev/shm), and what they wrote reads back
/// through the store API. Needs root to mount the tmpfs.
#[test]
fn the_shim_writes_into_a_store_on_a_huge_page_tmpfs_named_by_ckptfs_shm_dir() {
    if !ckptfs_testsupport::is_root() {
        ckptfs_testsupport::skip_root_only("mounting a huge-page tmpfs needs root");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("ckptfs-huge-shim-")
        .tempdir()
        .unwrap();
    let ok = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "huge=within_size,size=128m,mode=1777",
            "ckptfs-huge-test",
        ])
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED: mount -t tmpfs -o huge=within_size failed");
        return;
    }
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _u = Umount(dir.path().to_path_buf());
    let name = format!("preload-huge-{}", std::process::id());
    let opts = ckptfs_store::StoreOptions {
        mem_size: Some(64 << 20),
        shm_dir: Some(dir.path().to_path_buf()),
        ..ckptfs_store::StoreOptions::named(&name)
    };
    let store = ckptfs_store::Store::create(&opts).unwrap();
    assert!(store.info().huge_pages.enabled, "{:?}", store.info().huge_pages);
    let o = Command::new(python())
        .args([
            "-c",
            "import os\nb = bytes((i * 7 + 1) % 251 for i in range(8 << 20))\n\
             with open('/ckpt/huge.bin', 'wb') as f: f.write(b)\n\
             with open('/ckpt/huge.bin', 'rb') as f: assert f.read() == b\nprint('ok')",
        ])
        .env("LD_PRELOAD", lib())
        .env("CKPTFS_STORE", &name)
        .env("CKPTFS_SHM_DIR", dir.path())
        .env("CKPTFS_MOUNT", "/ckpt")
        .output()
        .unwrap();
    assert!(o.status.success() && o.stdout == b"ok\n", "{o:?}");
    assert!(
        !ckptfs_store::segment_path(&name).exists(),
        "the shim created a store of that name in /dev/shm instead"
    );
    let want: Vec<u8> = (0..(8u64 << 20)).map(|i| ((i * 7 + 1) % 251) as u8).collect();
    let mut back = vec![0u8; want.len() + 1];
    let mut f = store.open("/huge.bin", ckptfs_store::OpenFlags::READ, 0).unwrap();
    assert_eq!(f.pread(&mut back, 0).unwrap(), want.len());
    assert!(back[..want.len()] == want[..], "bytes differ");
    drop(f);
    drop(store);
    ckptfs_store::Store::destroy_in(Some(dir.path()), &name).unwrap();
}

/// `CKPTFS_WARM` (the store's `warm` module): the shim attaches at process start and
/// builds the page tables of the free chunks in the background, before the program has
/// touched the store; the program's first checkpoint then reads back intact. Observed
/// through the process's own page-table size (`VmPTE`), against the same program
/// without the variable.
#[test]
fn ckptfs_warm_builds_page_tables_at_process_start_before_any_store_call() {
    let ts = TestStore::new();
    let mut env = shim_env(&ts);
    for (k, v) in env.iter_mut() {
        if *k == "CKPTFS_MEM_SIZE" {
            *v = "512M".into();
        }
    }
    // Create the store first (the shim would create it at its attach too).
    let s = ckptfs_store::Store::open_or_create(&ckptfs_store::StoreOptions {
        mem_size: Some(512 << 20),
        chunk_size: Some(256 << 10),
        ..ckptfs_store::StoreOptions::named(&ts.name)
    })
    .unwrap();
    if s.info().huge_pages.enabled {
        eprintln!("SKIPPED: the store has huge pages (nothing to warm)");
        return;
    }
    drop(s);
    // Wait up to 20 s for the page tables to reach WANT_KB (with warming: 3/4 of the 1 MiB
    // that 512 MiB of 4 KiB pages need, above the size without); print the size reached,
    // then write and read back a checkpoint.
    let script = "import os, time\n\
        def pte():\n\
        \x20   for l in open('/proc/self/status'):\n\
        \x20       if l.startswith('VmPTE:'): return int(l.split()[1])\n\
        want = int(os.environ['WANT_KB'])\n\
        t0 = time.time()\n\
        while pte() < want and time.time() - t0 < 20: time.sleep(0.05)\n\
        print(pte())\n\
        b = bytes((i * 7 + 1) % 251 for i in range(3 << 20))\n\
        with open('/ckpt/warm.bin', 'wb') as f: f.write(b)\n\
        with open('/ckpt/warm.bin', 'rb') as f: assert f.read() == b\n";
    let run = |warm: bool, want: u64| {
        let mut c = Command::new(python());
        c.args(["-c", script])
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .env("WANT_KB", want.to_string());
        if warm {
            c.env("CKPTFS_WARM", "all");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).trim().parse::<u64>().unwrap()
    };
    // Without warming: the program's own size (no wait).
    let cold = run(false, 0);
    let warmed = run(true, cold + 768);
    assert!(
        warmed >= cold + 768,
        "page tables: {warmed} KiB with CKPTFS_WARM=all, {cold} KiB without"
    );
}
