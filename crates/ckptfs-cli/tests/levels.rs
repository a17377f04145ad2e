//! The settings' `[levels]` read order end to end: `ckptfs config` shows it, bad entries
//! are refused by name, and `ckptfs run --restore`, `ckptfs ckpt list` and the dataset
//! restart (`ckptfs run --restart`) find and read checkpoints that exist only on a level
//! of the registry: a PFS directory named `pfs:/DIR`, and object storage
//! (`s3:BUCKET/PREFIX`) on a real S3 server (versitygw started by scripts/s3-local.sh on
//! a private port, data in a temporary directory; built by scripts/setup-s3.sh). Without
//! the server binary the S3 tests print SKIPPED, unless CKPTFS_REQUIRE_SERVICES is set
//! (CI), where they fail.
//!
//! The server's ports come from S3_LOCAL_PORTS (default 25000-25999), its bucket name
//! from S3_LOCAL_BUCKET (default ckptfs), its binary from VERSITYGW (default
//! .tools/s3/bin/versitygw).

use std::path::PathBuf;
use std::process::{Command, Output};

mod s3_support;
use s3_support::{data, flip, Server};

/// `libckptfs_preload.so` next to the `ckptfs` binary under test (where `ckptfs run`
/// looks first), built with the same profile if missing.
fn ensure_preload_lib() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ckptfs"));
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

/// A store of its own, driven through the `ckptfs` binary with a clean environment.
struct Store {
    name: String,
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Store {
    fn new(tag: &str) -> Store {
        Store {
            name: format!("lv3-{tag}-{}", std::process::id()),
            home: tempfile::tempdir().unwrap(),
            env: Vec::new(),
        }
    }

    fn with_server(mut self, s: &Server) -> Store {
        self.env.extend(s.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        self
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ckptfs"));
        for s in ckptfs_settings::SETTINGS {
            c.env_remove(s.env);
        }
        for v in [
            "CKPTFS_CONFIG",
            "CKPTFS_RESTART",
            "CKPTFS_DEST",
            "CKPTFS_RANK",
            "CKPTFS_JOB",
            "CKPTFS_CLUSTER",
            "CKPTFS_S3_COMPRESS",
            "AWS_PROFILE",
        ] {
            c.env_remove(v);
        }
        c.env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path())
            .env("CKPTFS_STORE", &self.name)
            .env("CKPTFS_MEM_SIZE", "32M")
            .env("CKPTFS_CHUNK_SIZE", "64K")
            .env("CKPTFS_NODE_ID", "n0");
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c.args(args);
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

    fn put(&self, path: &str, bytes: &[u8]) {
        let src = self.home.path().join("src");
        std::fs::write(&src, bytes).unwrap();
        self.ok(&["put", "-p", src.to_str().unwrap(), path]);
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.run(&["destroy", "--force"]);
    }
}

/// `ckptfs config` shows the `[levels]` order and its options (never a credential),
/// the variable beats the file, and a bad entry or a credential among the options is
/// refused naming the entry, before anything runs.
#[test]
fn levels_setting_is_shown_by_config_and_bad_entries_are_named() {
    let s = Store::new("cfg");
    let file = s.home.path().join("c.toml");
    std::fs::write(
        &file,
        "[levels]\norder = [\"local\", \"partner\", \"s3:lv3-bkt/run1\", \"pfs\"]\n\n[levels.\"s3:lv3-bkt/run1\"]\nendpoint = \"http://127.0.0.1:46399\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let v: serde_json::Value = serde_json::from_str(&s.ok(&["--config", f, "config", "--json"])).unwrap();
    let ids: Vec<&str> = v["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["local", "partner", "s3:lv3-bkt/run1", "pfs"]);
    assert_eq!(v["levels"][2]["options"]["endpoint"], "http://127.0.0.1:46399");
    let row = v["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "levels.order")
        .unwrap();
    assert_eq!(row["source"], "file");
    // The default is the order before the section existed.
    let v: serde_json::Value = serde_json::from_str(&s.ok(&["config", "--json"])).unwrap();
    let ids: Vec<&str> = v["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["local", "partner", "pfs"]);
    // The variable beats the file, the flag beats the variable.
    let o = s
        .cmd(&["--config", f, "config", "--json"])
        .env("CKPTFS_LEVELS", "local,pfs")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["levels"].as_array().unwrap().len(), 2, "{v}");
    let o = s
        .cmd(&["--config", f, "--levels", "local", "config", "--json"])
        .env("CKPTFS_LEVELS", "local,pfs")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["levels"].as_array().unwrap().len(), 1, "{v}");
    // Bad entries are named, with where they came from.
    let o = s
        .cmd(&["run", "--restore", "--", "true"])
        .env("CKPTFS_LEVELS", "local,s3:X")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains("CKPTFS_LEVELS") && e.contains("\"s3:X\"") && e.contains("bucket"),
        "{e}"
    );
    let o = s
        .cmd(&["config"])
        .env("CKPTFS_LEVELS", "pfs,local")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("put local first"),
        "{o:?}"
    );
    // A kind no factory opens is named with the kinds known, when the levels are opened.
    let o = s
        .cmd(&["restore"])
        .env("CKPTFS_LEVELS", "local,tape:lib1")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("tape:lib1") && e.contains("no level of kind") && e.contains("s3"),
        "{e}"
    );
    // A credential in the file is refused without echoing it.
    std::fs::write(
        &file,
        "[levels]\norder = [\"local\", \"s3:lv3-bkt/run1\"]\n[levels.\"s3:lv3-bkt/run1\"]\nsecret_access_key = \"TOPSECRETVALUE\"\n",
    )
    .unwrap();
    let o = s.run(&["--config", f, "config", "--json"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("credential") && !e.contains("TOPSECRETVALUE"),
        "{e}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("TOPSECRETVALUE"));
}

/// A level of the registry that is a PFS directory (`pfs:/DIR` in the order, no
/// `--dest`): `run --restore` reads a drained checkpoint from it through the level
/// interface; a damaged copy is refused (the program sees ENOENT, never wrong bytes).
#[test]
fn run_restore_reads_a_pfs_directory_named_in_the_levels_order() {
    ensure_preload_lib();
    let s = Store::new("pfsdir");
    let tmp = tempfile::tempdir().unwrap();
    let pfs = tmp.path().join("pfs");
    std::fs::create_dir(&pfs).unwrap();
    let bytes = data(1, 300_000);
    s.ok(&["init"]);
    s.put("/ck/r0", &bytes);
    s.ok(&["agent", "--once", "--dest", pfs.to_str().unwrap()]);
    s.ok(&["destroy"]);
    let levels = format!("local,pfs:{}", pfs.display());
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--restore", "--"];
        all.extend_from_slice(args);
        s.cmd(&all).env("CKPTFS_LEVELS", &levels).output().unwrap()
    };
    let o = run(&["cat", "/ckpt/ck/r0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(o.stdout, bytes);
    assert!(
        err.contains("restored 1 files") && err.contains(&format!("pfs:{}", pfs.display())),
        "{err}"
    );
    // Damaged on the level: not restored, the program finds no file.
    s.ok(&["destroy"]);
    flip(&pfs.join("ck/r0"), 100_000);
    let o = run(&["cat", "/ckpt/ck/r0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("NOT restored /ck/r0"), "{err}");
    assert!(o.stdout.is_empty());
    assert_eq!(o.status.code(), Some(1), "cat's exit code: {err}");
}

/// `ckptfs run --restore` with the object level in the `[levels]` order and no PFS:
/// after the store is destroyed, the checkpoint drained to S3 is back in memory before
/// the command starts, every chunk checked; an object damaged in the server's data
/// directory is refused (never served), the other files still come back.
#[test]
fn run_restore_reads_a_checkpoint_only_in_s3_through_the_levels_order() {
    let Some(srv) = Server::start() else { return };
    ensure_preload_lib();
    let s = Store::new("s3run").with_server(&srv);
    let small = data(2, 1000);
    let big = data(3, 3 << 20);
    s.ok(&["init"]);
    s.put("/ck/small", &small);
    s.put("/ck/big", &big);
    let url = format!("s3://{}/run1", srv.bucket);
    s.ok(&["agent", "--once", "--dest", &url]);
    s.ok(&["destroy"]);
    let id = format!("s3:{}/run1", srv.bucket);
    let levels = format!("local,partner,{id},pfs");
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--restore", "/ck", "--"];
        all.extend_from_slice(args);
        s.cmd(&all).env("CKPTFS_LEVELS", &levels).output().unwrap()
    };
    let o = run(&["cat", "/ckpt/ck/big", "/ckpt/ck/small"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(o.stdout, [big.clone(), small.clone()].concat());
    assert!(
        err.contains("restored 2 files") && err.contains(&format!("from {id}")),
        "{err}"
    );
    // Present now: nothing read again.
    let o = run(&["true"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("2 already in the store"),
        "{o:?}"
    );
    // Without the level in the order there is nothing to read: refused.
    s.ok(&["destroy"]);
    let o = s
        .cmd(&["run", "--restore", "--", "true"])
        .env("CKPTFS_LEVELS", "local,partner,pfs")
        .output()
        .unwrap();
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--dest"),
        "{o:?}"
    );
    // A damaged object: refused, never served; the other file comes back.
    flip(&srv.object_file("run1/data/ck/big"), (1 << 20) + 17);
    let o = run(&["cat", "/ckpt/ck/small", "/ckpt/ck/big"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("NOT restored /ck/big"), "{err}");
    assert!(err.contains("restored 1 files"), "{err}");
    assert_eq!(o.stdout, small, "only the intact file is read: {err}");
    assert_eq!(
        o.status.code(),
        Some(1),
        "cat's exit code for the missing file: {err}"
    );
}

/// The dataset restart and `ckpt list` through the `[levels]` order: the datasets'
/// files exist only in S3 (memory lost: removed from the store; no PFS destination).
/// `ckpt list` shows the S3 level holding them, `run --restart` brings the newest back
/// from S3 and the program reads it; with one of its objects damaged in the server's
/// data directory, the restart skips it, saying why, and takes the older one.
#[test]
fn dataset_restart_and_ckpt_list_find_datasets_only_in_s3() {
    let Some(srv) = Server::start() else { return };
    ensure_preload_lib();
    let s = Store::new("s3ds").with_server(&srv);
    s.ok(&["init"]);
    let files = [
        ("step1", "/ck/1/rank0", data(10, 200_000)),
        ("step1", "/ck/1/rank1", data(11, 1000)),
        ("step2", "/ck/2/rank0", data(20, 700_000)),
        ("step2", "/ck/2/rank1", data(21, 5000)),
    ];
    for step in ["step1", "step2"] {
        s.ok(&["ckpt", "begin", step]);
        for (_, p, b) in files.iter().filter(|f| f.0 == step) {
            s.put(p, b);
        }
        s.ok(&["ckpt", "complete"]);
    }
    let url = format!("s3://{}/run1", srv.bucket);
    s.ok(&["agent", "--once", "--dest", &url]);
    let id = format!("s3:{}/run1", srv.bucket);
    let levels = format!("local,{id}");
    let lose_memory = || {
        for (_, p, _) in &files {
            let _ = s.run(&["rm", p]);
        }
    };
    lose_memory();
    let list = s
        .cmd(&["ckpt", "list", "--json"])
        .env("CKPTFS_LEVELS", &levels)
        .output()
        .unwrap();
    assert!(list.status.success(), "{list:?}");
    let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let ds = v["datasets"].as_array().unwrap();
    assert_eq!(ds.len(), 2);
    for d in ds {
        assert_eq!(d["complete"], true);
        assert_eq!(d["levels"], serde_json::json!([id.clone()]), "{d}");
    }
    // The text listing names the level too (not "lost").
    let text = String::from_utf8(
        s.cmd(&["ckpt", "list"])
            .env("CKPTFS_LEVELS", &levels)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(text.contains(&id) && !text.contains("lost"), "{text}");
    // Without the level the same datasets are on no level.
    let v: serde_json::Value = serde_json::from_str(&s.ok(&["ckpt", "list", "--json"])).unwrap();
    assert_eq!(v["datasets"][1]["levels"], serde_json::json!([]));
    // Restart: the newest comes back from S3 and the program reads it.
    let restart = |n: &str| {
        s.cmd(&[
            "run",
            "--restart",
            "--",
            "sh",
            "-c",
            "echo R=$CKPTFS_RESTART; cat /ckpt/ck/$N/rank0",
        ])
        .env("CKPTFS_LEVELS", &levels)
        .env("N", n)
        .output()
        .unwrap()
    };
    let o = restart("2");
    let (so, se) = (o.stdout.clone(), String::from_utf8_lossy(&o.stderr).to_string());
    assert!(so.starts_with(b"R=step2\n"), "{se}");
    assert_eq!(
        &so[8..],
        &files[2].2[..],
        "the restarted program reads step2's bytes: {se}"
    );
    assert!(se.contains(&format!("/ck/2/rank0 from {id}")), "{se}");
    // Damage one object of step2: the restart refuses it and takes step1.
    lose_memory();
    flip(&srv.object_file("run1/data/ck/2/rank0"), 300_000);
    let o = restart("1");
    let (so, se) = (o.stdout.clone(), String::from_utf8_lossy(&o.stderr).to_string());
    assert!(so.starts_with(b"R=step1\n"), "{se}");
    assert_eq!(&so[8..], &files[0].2[..], "{se}");
    assert!(
        se.contains("skipping dataset 2 (step2)") && se.contains("/ck/2/rank0") && se.contains(&id),
        "{se}"
    );
    // Nothing of the damaged copy was published under the file's name.
    assert!(!s.run(&["cat", "/ck/2/rank0"]).status.success());
}

/// The options of a `[levels]` entry reach the object level wherever it is opened: with
/// the endpoint only in the settings file's `[levels."s3:B/P"]` table (no
/// AWS_ENDPOINT_URL), `agent --dest s3://B/P` drains to the server and `run --restore`
/// reads the checkpoint back through the registry.
#[test]
fn the_endpoint_in_the_levels_options_reaches_the_drain_and_the_restore() {
    let Some(srv) = Server::start() else { return };
    ensure_preload_lib();
    let mut s = Store::new("s3opt").with_server(&srv);
    let endpoint = s
        .env
        .iter()
        .find(|(k, _)| k == "AWS_ENDPOINT_URL")
        .map(|(_, v)| v.clone())
        .unwrap();
    s.env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
    let id = format!("s3:{}/run2", srv.bucket);
    let file = s.home.path().join("c.toml");
    std::fs::write(
        &file,
        format!("[levels]\norder = [\"local\", \"{id}\"]\n\n[levels.\"{id}\"]\nendpoint = \"{endpoint}\"\n"),
    )
    .unwrap();
    s.env.push(("CKPTFS_CONFIG".into(), file.display().to_string()));
    let bytes = data(7, 400_000);
    s.ok(&["init"]);
    s.put("/ck/opt", &bytes);
    let url = format!("s3://{}/run2", srv.bucket);
    let o = s.run(&["agent", "--once", "--dest", &url]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(srv.object_file("run2/data/ck/opt").is_file());
    s.ok(&["destroy"]);
    let o = s.run(&["run", "--restore", "--", "cat", "/ckpt/ck/opt"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(o.stdout, bytes);
    assert!(err.contains(&format!("from {id}")), "{err}");
}

/// The drain's target from the settings: without `--dest` (and `CKPTFS_DEST`), `ckptfs
/// agent --once` drains to the first persistent level of the `[levels]` order, here a
/// `pfs:/DIR` given in the settings file; `--dest` still wins; with no persistent level
/// listed the agent refuses, naming the section.
#[test]
fn agent_without_dest_drains_to_the_pfs_directory_of_the_levels_order() {
    let mut s = Store::new("drainpfs");
    let pfs = s.home.path().join("pfs");
    let other = s.home.path().join("other");
    std::fs::create_dir_all(&pfs).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let file = s.home.path().join("c.toml");
    std::fs::write(
        &file,
        format!(
            "[levels]\norder = [\"local\", \"partner\", \"pfs:{}\"]\n",
            pfs.display()
        ),
    )
    .unwrap();
    s.env.push(("CKPTFS_CONFIG".into(), file.display().to_string()));
    s.ok(&["init"]);
    let a = data(30, 300_000);
    s.put("/ck/a", &a);
    let o = s.run(&["agent", "--once"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "destination pfs:{} from the settings' [levels] section",
            pfs.display()
        )),
        "{err}"
    );
    assert_eq!(std::fs::read(pfs.join("ck/a")).unwrap(), a);
    // `--dest` wins over the section.
    let b = data(31, 1000);
    s.put("/ck/b", &b);
    s.ok(&["agent", "--once", "--dest", other.to_str().unwrap()]);
    assert_eq!(std::fs::read(other.join("ck/b")).unwrap(), b);
    assert!(!pfs.join("ck/b").exists());
    // No persistent level listed (the variable beats the file): a clear error.
    let o = s
        .cmd(&["agent", "--once"])
        .env("CKPTFS_LEVELS", "local,partner,pfs")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("no drain destination") && err.contains("[levels]") && err.contains("--dest"),
        "{err}"
    );
}

/// `CKPTFS_LEVELS=local,partner,s3:BUCKET/run3 ckptfs agent --once` drains to the bucket
/// (no `--dest`), `ckptfs ls -l` lists the level, and `--dest s3://...` still wins. With
/// datasets configured (`dataset_flush_every = 2`) the flush policy's target is the
/// bucket: only the dataset marked for flush goes there.
#[test]
fn agent_without_dest_drains_to_the_s3_level_of_the_levels_order() {
    let Some(srv) = Server::start() else { return };
    let s = Store::new("drains3").with_server(&srv);
    let id = format!("s3:{}/run3", srv.bucket);
    let levels = format!("local,partner,{id}");
    let agent = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["agent", "--once"];
        args.extend_from_slice(extra);
        let mut c = s.cmd(&args);
        c.env("CKPTFS_LEVELS", &levels);
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{err}");
        err
    };
    s.ok(&["init"]);
    let a = data(40, 2 << 20);
    s.put("/ck/a", &a);
    let err = agent(&[], &[]);
    assert!(
        err.contains(&format!("destination {id} from the settings' [levels] section"))
            && err.contains("drained 1 files"),
        "{err}"
    );
    assert_eq!(std::fs::read(srv.object_file("run3/data/ck/a")).unwrap(), a);
    let ls = s.ok(&["ls", "-l", "/ck"]);
    assert!(ls.contains(&id), "{ls}");
    // `--dest` wins.
    s.put("/ck/b", b"bee");
    agent(&["--dest", &format!("s3://{}/run4", srv.bucket)], &[]);
    assert!(srv.object_file("run4/data/ck/b").is_file());
    assert!(!srv.object_file("run3/data/ck/b").exists());
    // The dataset flush policy drains to the level too: every 2nd dataset only.
    let flush = [("CKPTFS_DATASET_FLUSH_EVERY", "2"), ("CKPTFS_PFS_BANDWIDTH", "1")];
    for step in 1..=2 {
        let mut c = s.cmd(&["ckpt", "begin", &format!("step{step}")]);
        assert!(c.envs(flush).output().unwrap().status.success());
        s.put(&format!("/ds/{step}/rank0"), format!("state {step}").as_bytes());
        let mut c = s.cmd(&["ckpt", "complete"]);
        assert!(c.envs(flush).output().unwrap().status.success());
    }
    let err = agent(&[], &flush);
    assert!(err.contains("only datasets marked for flush"), "{err}");
    assert!(!srv.object_file("run3/data/ds/1/rank0").exists(), "{err}");
    assert_eq!(
        std::fs::read(srv.object_file("run3/data/ds/2/rank0")).unwrap(),
        b"state 2"
    );
}
