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
