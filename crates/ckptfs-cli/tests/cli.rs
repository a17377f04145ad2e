//! The `ckptfs` binary end to end: store commands, settings, crash visibility, errors.

use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ckptfs"))
}

struct Store(String);

impl Store {
    fn new(tag: &str) -> Store {
        let s = Store(format!("cli-{tag}-{}", std::process::id()));
        let _ = s.run(&["destroy"]);
        s
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = bin();
        c.env_remove("CKPTFS_CONFIG")
            .env("CKPTFS_STORE", &self.0)
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "ckptfs {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.run(&["destroy"]);
    }
}

#[test]
fn init_put_get_ls_rm_round_trip() {
    let s = Store::new("rt");
    let out = s.ok(&["init", "--mem-size", "32M", "--chunk-size", "64K"]);
    assert!(out.contains("pre-faulted"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.bin");
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    s.ok(&["put", "--parents", src.to_str().unwrap(), "/run1/rank0.ckpt"]);
    let ls = s.ok(&["ls", "-l", "/run1"]);
    assert!(
        ls.contains("rank0.ckpt") && ls.contains("complete") && ls.contains("1000000"),
        "{ls}"
    );
    let back = dir.path().join("out.bin");
    s.ok(&["get", "/run1/rank0.ckpt", back.to_str().unwrap()]);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    let cat = s.cmd(&["cat", "/run1/rank0.ckpt"]).output().unwrap();
    assert_eq!(cat.stdout, data);
    let st = s.ok(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&st).unwrap();
    assert_eq!(v["files"], 1);
    assert_eq!(v["chunk_size"], 65536);
    let o = s.run(&["rm", "/run1"]);
    assert!(!o.status.success(), "rm of a directory without -r must fail");
    s.ok(&["rm", "-r", "/run1"]);
    assert_eq!(s.ok(&["ls"]).trim(), "");
    assert!(s.ok(&["fsck"]).contains("no problems"));
}

#[test]
fn errors_are_clear_and_nonzero() {
    let s = Store::new("err");
    let o = s.run(&["ls"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no store named"),
        "{:?}",
        o
    );
    s.ok(&["init", "--mem-size", "8M", "--chunk-size", "64K"]);
    let o = s.run(&["init"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    let o = s.run(&["status", "--chunk-size", "1M"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("chunk size"),
        "{:?}",
        o
    );
    let o = s.run(&["get", "/missing", "/tmp/x"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no such file"),
        "{:?}",
        o
    );
    let o = s.run(&["init", "--chunk-size", "3000"]);
    assert!(!o.status.success());
    let o = bin().args(["--mem-size", "12Q", "config"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown size suffix"));
}

#[test]
fn config_reports_sources_with_precedence() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.toml");
    std::fs::write(
        &f,
        "store = \"fromfile\"\nchunk_size = \"256K\"\nmem_size = \"2G\"\n",
    )
    .unwrap();
    let o = bin()
        .env("CKPTFS_CONFIG", &f)
        .env("CKPTFS_MEM_SIZE", "64M")
        .args(["--store", "fromflag", "config", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let get = |k: &str| {
        v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == k)
            .unwrap()
            .clone()
    };
    assert_eq!(get("store")["value"], "fromflag");
    assert_eq!(get("store")["source"], "flag");
    assert_eq!(get("mem_size")["value"], "64M");
    assert_eq!(get("mem_size")["source"], "env");
    assert_eq!(get("chunk_size")["source"], "file");
    assert_eq!(get("max_files")["source"], "default");
}

/// A writer SIGKILLed with a file open: `status` and `ls -l` list it as incomplete, its
/// readable prefix is intact, fsck is clean.
#[test]
fn killed_writer_is_listed_incomplete() {
    let s = Store::new("kill");
    s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    // `put` from a pipe that never closes keeps the file open for writing.
    let mut child = s
        .cmd(&["put", "-", "/open.ckpt"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        stdin.write_all(&vec![b'x'; 8 << 20]).unwrap();
        stdin.flush().unwrap();
    }
    // Wait until the store holds all the bytes sent, then kill.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let ls = s.ok(&["ls", "-l", "/"]);
        if ls.contains(&(8u64 << 20).to_string()) {
            assert!(ls.contains("writing"), "{ls}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "writer made no progress: {ls}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let status = s.ok(&["status"]);
    assert!(status.contains("1 incomplete"), "{status}");
    assert!(s.ok(&["ls", "-l"]).contains("INCOMPLETE"));
    let o = s.cmd(&["cat", "/open.ckpt"]).output().unwrap();
    assert_eq!(o.stdout.len(), 8 << 20);
    assert!(o.stdout.iter().all(|&b| b == b'x'));
    let fsck = s.ok(&["fsck"]);
    assert!(fsck.contains("incomplete file"), "{fsck}");
}

/// `libckptfs_preload.so` next to the `ckptfs` binary under test (where `ckptfs run`
/// looks first), built with the same profile if missing.
fn ensure_preload_lib() {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_ckptfs"));
    let dir = bin.parent().unwrap();
    if dir.join("libckptfs_preload.so").is_file() {
        return;
    }
    let mut c = Command::new(env!("CARGO"));
    c.args(["build", "-p", "ckptfs-preload"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if dir.file_name().is_some_and(|n| n == "release") {
        c.arg("--release");
    }
    assert!(c.status().unwrap().success(), "building ckptfs-preload failed");
}

/// `ckptfs run --restore`: after the store is destroyed, the drained checkpoint is back
/// in memory before the command starts; a second run finds it present; a destination
/// file that no longer matches its manifest is reported and left out, so the program
/// sees ENOENT (never wrong bytes); without a destination it is an error before
/// anything runs.
#[test]
fn run_restore_brings_drained_checkpoints_back_before_the_command_starts() {
    ensure_preload_lib();
    let s = Store::new("runrestore");
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("pfs");
    std::fs::create_dir(&dest).unwrap();
    let src = tmp.path().join("r0.bin");
    let data: Vec<u8> = (0..700_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    let dest_s = dest.to_str().unwrap();
    let src_s = src.to_str().unwrap();
    s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    s.ok(&["mkdir", "/ck"]);
    s.ok(&["put", src_s, "/ck/r0"]);
    s.ok(&["agent", "--once", "--dest", dest_s]);
    s.ok(&["destroy"]);
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--restore", "--dest", dest_s, "--"];
        all.extend_from_slice(args);
        s.cmd(&all).env_remove("CKPTFS_DEST").output().unwrap()
    };
    let o = run(&["cat", "/ckpt/ck/r0"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(o.stdout, data);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("restored 1 files"), "{err}");
    let o = run(&["true"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("1 already in the store"));
    // A damaged destination copy is not restored.
    s.ok(&["destroy"]);
    let mut bad = data.clone();
    bad[1000] ^= 0x40;
    std::fs::write(dest.join("ck/r0"), &bad).unwrap();
    let o = run(&["cat", "/ckpt/ck/r0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("NOT restored /ck/r0"), "{err}");
    assert!(err.contains("No such file or directory"), "{err}");
    assert_eq!(o.status.code(), Some(1), "cat's exit code");
    assert!(o.stdout.is_empty());
    // No destination: refused before the store is even created.
    s.ok(&["destroy"]);
    let o = s
        .cmd(&["run", "--restore", "--", "true"])
        .env_remove("CKPTFS_DEST")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--dest"), "{o:?}");
    assert!(!s.run(&["status"]).status.success(), "the store was not created");
}

/// A store name with a newline cannot forge a line of `ls`, `ls -l`, `ls -R` or an
/// error message: it is printed escaped, as `ls -b` does.
#[test]
fn ls_prints_names_with_newlines_escaped_so_they_cannot_forge_lines() {
    let s = Store::new("lsnl");
    s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    let evil = "/d/evil\nrank0.bin";
    s.ok(&["put", "--parents", src.to_str().unwrap(), evil]);
    s.ok(&["put", src.to_str().unwrap(), "/d/back\\slash"]);
    let ls = s.ok(&["ls", "/d"]);
    assert_eq!(ls, "back\\\\slash\nevil\\nrank0.bin\n");
    let long = s.ok(&["ls", "-l", "/d"]);
    assert_eq!(long.lines().count(), 2, "{long}");
    assert!(long.lines().any(|l| l.ends_with(" evil\\nrank0.bin")), "{long}");
    let rec = s.ok(&["ls", "-R", "/"]);
    assert!(!rec.lines().any(|l| l == "rank0.bin"), "{rec}");
    assert!(rec.contains("evil\\nrank0.bin"), "{rec}");
    let one = s.ok(&["ls", evil]);
    assert_eq!(one, "/d/evil\\nrank0.bin\n");
    let o = s.run(&["cat", "/d/nope\nfake line"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("nope\\nfake line"), "{err}");
}

/// A symbolic link (made through the store API, as the FUSE mount and the shim make them)
/// is listed as `ls -l` lists one: type `l` and ` -> target` after the name.
#[test]
fn ls_long_shows_a_symlink_with_its_target() {
    let s = Store::new("lslink");
    s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    {
        let store = ckptfs_store::Store::attach(&ckptfs_store::StoreOptions::named(&s.0)).unwrap();
        store.mkdir("/d", 0o755).unwrap();
        store.symlink(b"../data/step\n1", "/d/latest").unwrap();
    }
    let long = s.ok(&["ls", "-l", "/d"]);
    let line = long.lines().next().unwrap_or_default();
    assert!(line.starts_with("lrwxrwxrwx "), "{long}");
    assert!(line.ends_with(" latest -> ../data/step\\n1"), "{long}");
    assert_eq!(s.ok(&["ls", "/d"]), "latest\n");
}

/// Hard links and special files (store format 5) in a long listing: the link count
/// after the mode, `p`/`s`/`c`/`b` as the type letter.
#[test]
fn ls_long_shows_link_counts_and_special_file_types() {
    let s = Store::new("lsnlink");
    s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    {
        let store = ckptfs_store::Store::attach(&ckptfs_store::StoreOptions::named(&s.0)).unwrap();
        store.mkdir("/d", 0o755).unwrap();
        store
            .open("/d/a", ckptfs_store::OpenFlags::CREATE, 0o644)
            .unwrap()
            .close()
            .unwrap();
        store.link("/d/a", "/d/b").unwrap();
        store
            .mknod("/d/p", ckptfs_store::FileKind::Fifo, 0o600, 0)
            .unwrap();
        store
            .mknod(
                "/d/c",
                ckptfs_store::FileKind::CharDevice,
                0o600,
                libc::makedev(1, 3),
            )
            .unwrap();
    }
    let long = s.ok(&["ls", "-l", "/d"]);
    let line = |n: &str| {
        long.lines()
            .find(|l| l.ends_with(&format!(" {n}")))
            .unwrap_or_else(|| panic!("{n} not in {long}"))
            .to_string()
    };
    assert!(line("a").starts_with("-rw-r--r--   2 "), "{long}");
    assert!(line("b").starts_with("-rw-r--r--   2 "), "{long}");
    assert!(line("p").starts_with("prw-------   1 "), "{long}");
    assert!(line("c").starts_with("crw-------   1 "), "{long}");
}

/// `ckptfs ... | head -c1`: when the reader is gone, every printing command ends
/// quietly (SIGPIPE, as coreutils), never with a panic message.
#[test]
fn broken_pipe_ends_printing_commands_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let s = Store::new("pipe");
    s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("f");
    std::fs::write(&src, vec![7u8; 300_000]).unwrap();
    for i in 0..20 {
        s.ok(&[
            "put",
            "--parents",
            src.to_str().unwrap(),
            &format!("/d{}/f{i}", i % 3),
        ]);
    }
    let cmds: &[&[&str]] = &[
        &["ls", "-l", "-R", "/"],
        &["ls", "/"],
        &["config"],
        &["config", "--json"],
        &["status"],
        &["status", "--json"],
        &["fsck"],
        &["cat", "/d0/f0"],
        &["get", "/d0/f0", "-"],
        &["agent", "status"],
        &["--help"],
    ];
    for args in cmds {
        // The command's own exit code with a reader (`agent status` is 1 when no agent
        // has run): with the reader gone it must end with that code or SIGPIPE.
        let normal = s.run(args).status.code();
        let mut child = s
            .cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // No reader at all: the first write fails.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "ckptfs {args:?}: {err}");
        assert!(
            o.status.code() == normal || o.status.signal() == Some(libc::SIGPIPE),
            "ckptfs {args:?}: {:?} {err}",
            o.status
        );
    }
}

/// `ckptfs restore` with hostile input: a destination file replaced by one holding a
/// secret (same size, so only the CRC check catches it) is reported by file, chunk and
/// offset without its bytes or their CRC; a truncated manifest in another directory is
/// reported by name; the good files are restored; the exit code is 1.
#[test]
fn restore_reports_bad_input_by_name_without_file_bytes_and_exits_1() {
    let s = Store::new("rstbad");
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("pfs");
    std::fs::create_dir(&dest).unwrap();
    let dest_s = dest.to_str().unwrap();
    s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    let put = |name: &str, bytes: &[u8]| {
        let src = tmp.path().join("src");
        std::fs::write(&src, bytes).unwrap();
        s.ok(&["put", "--parents", src.to_str().unwrap(), name]);
    };
    let a: Vec<u8> = (0..(64 << 10) + 48).map(|i| (i % 251) as u8).collect();
    put("/x/a", &a);
    put("/x/b", b"good bytes");
    put("/y/c", b"other directory");
    s.ok(&["agent", "--once", "--evict", "--node-id", "n0", "--dest", dest_s]);
    let secret = b"SECRET-root-only-0600-content-0123456789abcdefgh";
    assert_eq!(secret.len(), 48);
    let mut planted = a[..64 << 10].to_vec();
    planted.extend_from_slice(secret);
    std::fs::write(dest.join("x/a"), &planted).unwrap();
    let ym = dest.join("y/.ckptfs-manifest.n0.json");
    let m = std::fs::read(&ym).unwrap();
    std::fs::write(&ym, &m[..m.len() - 20]).unwrap();
    let o = s
        .cmd(&["restore", "--dest", dest_s, "--node-id", "n0"])
        .env_remove("CKPTFS_DEST")
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("FAILED /x/a:") && out.contains("chunk 1"), "{out}");
    assert!(out.contains("FAILED /y/.ckptfs-manifest.n0.json:"), "{out}");
    assert!(out.contains("truncated"), "{out}");
    assert!(
        out.contains("1 restored, 0 already in the store, 0 other nodes' skipped, 2 failed"),
        "{out}"
    );
    let crc = crc32c(secret);
    for leak in ["SECRET".to_string(), format!("{crc:x}"), crc.to_string()] {
        assert!(!out.contains(&leak), "output leaks {leak:?}: {out}");
    }
    assert_eq!(s.ok(&["cat", "/x/b"]), "good bytes");
    assert!(!s.run(&["cat", "/x/a"]).status.success());
}

/// Two nodes' stores drain into one shared PFS directory; `ckptfs restore` on node n0
/// brings back n0's files only and names n1's as skipped (they used to fill n0's
/// memory); `--from-node n1` takes them too (issue "Failures in sequence", item 5).
#[test]
fn restore_from_a_shared_pfs_directory_takes_this_nodes_files_unless_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("pfs");
    std::fs::create_dir(&dest).unwrap();
    let dest_s = dest.to_str().unwrap();
    let src = tmp.path().join("src");
    for (node, file) in [("n0", "/c/mine"), ("n1", "/c/theirs")] {
        let s = Store::new(&format!("shr{node}"));
        s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
        std::fs::write(&src, node).unwrap();
        s.ok(&["put", "--parents", src.to_str().unwrap(), file]);
        s.ok(&["agent", "--once", "--node-id", node, "--dest", dest_s]);
    }
    let s = Store::new("shrback");
    s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    let restore = |extra: &[&str]| {
        let mut args = vec!["restore", "--dest", dest_s, "--node-id", "n0"];
        args.extend_from_slice(extra);
        let o = s.cmd(&args).env_remove("CKPTFS_DEST").output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
        out
    };
    let out = restore(&[]);
    assert!(
        out.contains("skipped /c/theirs (drained by node n1; --from-node n1 restores it)"),
        "{out}"
    );
    assert!(
        out.contains("1 restored, 0 already in the store, 1 other nodes' skipped, 0 failed"),
        "{out}"
    );
    assert_eq!(s.ok(&["cat", "/c/mine"]), "n0");
    assert!(
        !s.run(&["cat", "/c/theirs"]).status.success(),
        "n1's file restored on n0"
    );
    let out = restore(&["--from-node", "n1"]);
    assert!(
        out.contains("1 restored, 1 already in the store, 0 other nodes' skipped, 0 failed"),
        "{out}"
    );
    assert_eq!(s.ok(&["cat", "/c/theirs"]), "n1");
}

/// CRC32C (Castagnoli), bit by bit: enough for a 48-byte check.
fn crc32c(b: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &x in b {
        crc ^= x as u32;
        for _ in 0..8 {
            crc = (crc >> 1) ^ if crc & 1 == 1 { 0x82f6_3b78 } else { 0 };
        }
    }
    !crc
}

/// `status` and `fsck` name incomplete files: a newline in the name is escaped there
/// too, so the name cannot add a line to the report.
#[test]
fn status_and_fsck_print_incomplete_names_escaped() {
    let s = Store::new("incnl");
    s.ok(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    let mut child = s
        .cmd(&["put", "-", "/inc\nFORGED line"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        stdin.write_all(b"partial").unwrap();
        stdin.flush().unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !s.ok(&["ls", "-l", "/"]).contains("writing") {
        assert!(
            std::time::Instant::now() < deadline,
            "writer never opened the file"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let status = s.ok(&["status"]);
    assert!(status.contains("incomplete  /inc\\nFORGED line ("), "{status}");
    let fsck = String::from_utf8(s.run(&["fsck"]).stdout).unwrap();
    assert!(fsck.contains("(writer died): /inc\\nFORGED line"), "{fsck}");
    assert!(!fsck.lines().any(|l| l == "FORGED line"), "{fsck}");
}

/// Run `ckptfs args` with a deadline: (exit code, stdout, stderr). A hang fails the test.
fn run_bounded(s: &Store, args: &[&str], secs: u64) -> (Option<i32>, Vec<u8>, String) {
    let mut child = s
        .cmd(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).ok();
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).ok();
        String::from_utf8_lossy(&v).into_owned()
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ckptfs {args:?} hangs on a damaged store");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (status.code(), t_out.join().unwrap(), t_err.join().unwrap())
}

/// With single fields of the segment damaged, no command panics or hangs, and `cat`
/// never prints bytes that were not written.
#[test]
fn damaged_segment_fields_never_crash_hang_or_mislead_the_cli() {
    use ckptfs_store::layout::{ChunkEntry, Inode, Layout, Superblock, CHUNK_ENTRY_SIZE, INODE_SIZE};
    use std::mem::offset_of;
    use std::os::unix::fs::FileExt;
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 + 7) as u8).collect();
    type Target = fn(&Layout, u32, u32, u32) -> (u64, u32);
    let cases: &[(&str, Target)] = &[
        ("hash slot with a huge file id", |l, _, _, _| {
            (l.hash_off + 4 * (l.hash_cap as u64 - 1), 0xffff_fff0)
        }),
        ("chunk length", |l, _, c, _| {
            (
                l.chunk_off + c as u64 * CHUNK_ENTRY_SIZE + offset_of!(ChunkEntry, sum) as u64 + 4,
                0x7fff_ffff,
            )
        }),
        ("chunk owner to another file", |l, _, c, b| {
            (
                l.chunk_off + c as u64 * CHUNK_ENTRY_SIZE + offset_of!(ChunkEntry, owner) as u64,
                b + 1,
            )
        }),
        ("inode name length", |l, a, _, _| {
            (
                l.inode_off + a as u64 * INODE_SIZE + offset_of!(Inode, name_len) as u64,
                60_000,
            )
        }),
        ("inode size", |l, a, _, _| {
            (
                l.inode_off + a as u64 * INODE_SIZE + offset_of!(Inode, size) as u64,
                400_000,
            )
        }),
        ("namespace lock held by no thread", |_, _, _, _| {
            (offset_of!(Superblock, ns_lock) as u64, 0x3fff_fff0)
        }),
        ("free chunk stack top", |_, _, _, _| {
            (offset_of!(Superblock, mem_top) as u64, u32::MAX)
        }),
    ];
    for (k, (what, target)) in cases.iter().enumerate() {
        let s = Store::new(&format!("dmg{k}"));
        s.ok(&[
            "init",
            "--mem-size",
            "4M",
            "--chunk-size",
            "64K",
            "--max-files",
            "64",
        ]);
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("in.bin");
        std::fs::write(&src, &data).unwrap();
        s.ok(&["put", src.to_str().unwrap(), "/a"]);
        s.ok(&["put", src.to_str().unwrap(), "/b"]);
        let store = ckptfs_store::Store::attach(&ckptfs_store::StoreOptions::named(&s.0)).unwrap();
        let a = (store.stat("/a").unwrap().ino - 1) as u32;
        let b = (store.stat("/b").unwrap().ino - 1) as u32;
        let c = store.chunk_list("/a").unwrap()[1].chunk_id;
        drop(store);
        let l = Layout::compute(16, 64, 0, 64);
        let (off, val) = target(&l, a, c, b);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/dev/shm/ckptfs.{}", s.0))
            .unwrap();
        f.write_all_at(&val.to_le_bytes(), off).unwrap();
        let (code, _, err) = run_bounded(&s, &["cat", "/a"], 60);
        if what.starts_with("chunk") || *what == "inode size" {
            assert!(
                code != Some(0) && err.contains("/a"),
                "{what}: cat /a gave {code:?} {err}"
            );
        }
        for args in [
            &["ls", "-l", "-R", "/"][..],
            &["status"],
            &["cat", "/a"],
            &["cat", "/b"],
            &["fsck"],
            &["fsck", "--repair"],
            &["ls", "-l", "-R", "/"],
            &["cat", "/b"],
        ] {
            let (code, out, err) = run_bounded(&s, args, 60);
            assert!(
                code.is_some() && code != Some(101) && !err.contains("panicked"),
                "{what}: ckptfs {args:?} crashed: {code:?} {err}"
            );
            if args[0] == "cat" && code == Some(0) {
                assert!(out == data, "{what}: ckptfs {args:?} printed wrong bytes");
            }
        }
    }
}

#[test]
fn destroy_removes_the_stores_agent_and_dataset_files_from_the_runtime_directory() {
    // A runtime directory of this test's own (XDG_RUNTIME_DIR/ckptfs), so the listing
    // below sees only what these commands left.
    let xdg = tempfile::tempdir().unwrap();
    let s = Store::new("rtfiles");
    let dest = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let o = s.cmd(args).env("XDG_RUNTIME_DIR", xdg.path()).output().unwrap();
        assert!(
            o.status.success(),
            "ckptfs {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run(&["init", "--mem-size", "16M", "--chunk-size", "64K"]);
    run(&["ckpt", "begin", "step1"]);
    run(&["ckpt", "complete"]);
    run(&["agent", "--once", "--dest", dest.path().to_str().unwrap()]);
    let rt = xdg.path().join("ckptfs");
    let left = || -> Vec<String> {
        std::fs::read_dir(&rt)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n.contains(&s.0))
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = left();
    assert!(before.iter().any(|n| n.starts_with("datasets.")), "{before:?}");
    assert!(before.iter().any(|n| n.ends_with(".agent.json")), "{before:?}");
    run(&["destroy"]);
    assert_eq!(left(), Vec::<String>::new(), "left in {}", rt.display());
}

/// `bench erasure --schemes` names only what it can measure: an unknown scheme is
/// refused by name before any simulated node is set up (no root needed to see it).
#[test]
fn bench_erasure_refuses_an_unknown_scheme() {
    for bad in ["xor,rs:x", "partner,mirror", "rs:0"] {
        let o = bin()
            .args([
                "bench",
                "erasure",
                "--no-codec",
                "--links",
                "1gbit",
                "--schemes",
                bad,
            ])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{bad}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("--schemes") && err.contains("is not xor, rs:K or partner"),
            "{bad}: {err}"
        );
    }
}
