//! Every front-end resolves the `CKPTFS_*` settings the same way: the CLI
//! (`ckptfs config --json`, its `resolved` object), the C API (`ckptfs_settings` in
//! libckptfs.so) and the LD_PRELOAD shim (`ckptfs_preload_settings`, both loaded
//! directly and under `ckptfs run`). Valid values must give the same JSON everywhere;
//! invalid ones must be refused everywhere (exit status or -EINVAL) with a message
//! naming the variable. Plus regression tests for the bad-input cases of issue 9.
//!
//! Needs libckptfs.so and libckptfs_preload.so next to the `ckptfs` binary (built on
//! demand with `cargo build --release -p ckptfs-capi -p ckptfs-preload`) and python3
//! (ctypes) to call into them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

fn ckptfs() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ckptfs"))
}

/// The directory of the `ckptfs` binary, with both shared libraries built if missing.
fn libs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = ckptfs().parent().unwrap().to_path_buf();
        let names = ["libckptfs.so", "libckptfs_preload.so"];
        if names.iter().all(|n| dir.join(n).is_file()) {
            return dir;
        }
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let st = Command::new(env!("CARGO"))
            .args(["build", "--release", "-p", "ckptfs-capi", "-p", "ckptfs-preload"])
            .current_dir(ws)
            .status()
            .expect("running cargo build");
        assert!(st.success(), "building the shared libraries failed");
        for n in names {
            assert!(
                dir.join(n).is_file(),
                "{n} missing in {} after the build",
                dir.display()
            );
        }
        dir
    })
}

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Calls one front-end through ctypes and prints `RET` then the text it returned:
/// `capi LIB` (ckptfs_settings), `shim` (ckptfs_preload_settings of the preloaded shim),
/// `mount LIB` (ckptfs_mount("/hs-agree", NULL) and ckptfs_last_error).
const PROBE: &str = r#"
import ctypes, sys
buf = ctypes.create_string_buffer(1 << 16)
if sys.argv[1] == "mount":
    lib = ctypes.CDLL(sys.argv[2])
    lib.ckptfs_last_error.restype = ctypes.c_char_p
    r = lib.ckptfs_mount(b"/hs-agree-mount", None)
    print(r)
    print(lib.ckptfs_last_error().decode())
    sys.exit(0)
if sys.argv[1] == "capi":
    lib = ctypes.CDLL(sys.argv[2])
    f = lib.ckptfs_settings
    lib.ckptfs_last_error.restype = ctypes.c_char_p
else:
    f = ctypes.CDLL(None).ckptfs_preload_settings
f.restype = ctypes.c_ssize_t
r = f(buf, len(buf))
print(r)
if sys.argv[1] == "capi" and r < 0:
    print(lib.ckptfs_last_error().decode())
else:
    print(buf.value.decode())
"#;

/// A command with no `CKPTFS_*` setting or settings file inherited.
fn clean(mut c: Command, home: &Path) -> Command {
    for s in ckptfs_settings::SETTINGS {
        c.env_remove(s.env);
    }
    c.env_remove(ckptfs_settings::CONFIG_ENV)
        .env_remove("CKPTFS_RANK")
        .env_remove("LD_PRELOAD")
        .env("XDG_CONFIG_HOME", home)
        .env("HOME", home);
    c
}

fn run(mut c: Command) -> Output {
    c.output().expect("starting a front-end")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// (return value, text) printed by [`PROBE`].
fn probe_out(o: &Output) -> (i64, String) {
    let out = text(&o.stdout);
    let mut lines = out.splitn(2, '\n');
    let ret = lines.next().unwrap_or("").trim().parse().unwrap_or_else(|_| {
        panic!("probe printed no return value: {o:?}");
    });
    (ret, lines.next().unwrap_or("").trim().to_string())
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// What each front-end made of one environment.
struct Results {
    cli: Result<serde_json::Value, String>,
    capi: Result<serde_json::Value, String>,
    shim: Result<serde_json::Value, String>,
}

struct Scratch {
    dir: tempfile::TempDir,
    probe: PathBuf,
}

fn scratch() -> Scratch {
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe.py");
    std::fs::write(&probe, PROBE).unwrap();
    Scratch { dir, probe }
}

fn resolve_everywhere(sc: &Scratch, env: &[(&str, &str)]) -> Results {
    let home = sc.dir.path();
    let mut c = clean(Command::new(ckptfs()), home);
    c.args(["config", "--json"]).envs(env.iter().copied());
    let o = run(c);
    let cli = if o.status.success() {
        Ok(json(&text(&o.stdout))["resolved"].clone())
    } else {
        Err(text(&o.stderr))
    };
    let lib = libs();
    let mut c = clean(Command::new(python()), home);
    c.arg(&sc.probe)
        .arg("capi")
        .arg(lib.join("libckptfs.so"))
        .envs(env.iter().copied());
    let (r, t) = probe_out(&run(c));
    let capi = if r >= 0 {
        Ok(json(&t))
    } else {
        Err(format!("{r} {t}"))
    };
    let mut c = clean(Command::new(python()), home);
    c.arg(&sc.probe)
        .arg("shim")
        .env("LD_PRELOAD", lib.join("libckptfs_preload.so"))
        .envs(env.iter().copied());
    let (r, t) = probe_out(&run(c));
    let shim = if r >= 0 {
        Ok(json(&t))
    } else {
        Err(format!("{r} {t}"))
    };
    Results { cli, capi, shim }
}

fn unique_store() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "hs-agree-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Destroys a store on drop (and its private `NAME.*` segments never get created: the
/// probes touch no file under the mount).
struct Destroy(String);
impl Drop for Destroy {
    fn drop(&mut self) {
        let _ = Command::new(ckptfs())
            .args(["destroy", "--store", &self.0])
            .output();
    }
}

/// Valid values of every setting, written the ways users write them. Sizes stay small:
/// `ckptfs run` creates the store with them.
const VALID: &[(&str, &str)] = &[
    ("CKPTFS_MEM_SIZE", "8M"),
    ("CKPTFS_MEM_SIZE", "8m"),
    ("CKPTFS_MEM_SIZE", "8MiB"),
    ("CKPTFS_MEM_SIZE", "8192kb"),
    ("CKPTFS_MEM_SIZE", " 8388608 "),
    ("CKPTFS_MEM_SIZE", "0.0078125G"),
    ("CKPTFS_MEM_SIZE", "8.4e6"),
    ("CKPTFS_CHUNK_SIZE", "64K"),
    ("CKPTFS_CHUNK_SIZE", "256k"),
    ("CKPTFS_CHUNK_SIZE", "1M"),
    ("CKPTFS_MAX_FILES", "100"),
    ("CKPTFS_MAX_FILES", "2"),
    ("CKPTFS_SPILL_SIZE", "0"),
    ("CKPTFS_SPILL_SIZE", "2m"),
    ("CKPTFS_SPILL_DIR", "/var/tmp"),
    ("CKPTFS_SHM_DIR", "/dev/shm"),
    ("CKPTFS_SHM_DIR", "/dev/shm/"),
    ("CKPTFS_PRIVATE", "1"),
    ("CKPTFS_PRIVATE", "true"),
    ("CKPTFS_PRIVATE", "TRUE"),
    ("CKPTFS_PRIVATE", "yes"),
    ("CKPTFS_PRIVATE", "Yes"),
    ("CKPTFS_PRIVATE", "on"),
    ("CKPTFS_PRIVATE", "0"),
    ("CKPTFS_PRIVATE", "false"),
    ("CKPTFS_PRIVATE", "no"),
    ("CKPTFS_PRIVATE", "off"),
    ("CKPTFS_PRIVATE", "OFF"),
    ("CKPTFS_MOUNT", "/ckpt"),
    ("CKPTFS_MOUNT", "/hs/a:/hs/b/"),
    ("CKPTFS_MOUNT", "/hs//x/./y"),
    ("CKPTFS_LEVELS", "local,partner,s3:ckptfs/run1,pfs"),
    ("CKPTFS_LEVELS", " local , pfs:/scratch/ckpt "),
];

/// Invalid values: every front-end refuses them, naming the variable.
const INVALID: &[(&str, &str)] = &[
    ("CKPTFS_MEM_SIZE", "lots"),
    ("CKPTFS_MEM_SIZE", "1e30"),
    ("CKPTFS_MEM_SIZE", "-1M"),
    ("CKPTFS_MEM_SIZE", "12X"),
    ("CKPTFS_MEM_SIZE", "65T"),
    ("CKPTFS_CHUNK_SIZE", "100K"),
    ("CKPTFS_CHUNK_SIZE", "128M"),
    ("CKPTFS_CHUNK_SIZE", "abc"),
    ("CKPTFS_MAX_FILES", "abc"),
    ("CKPTFS_MAX_FILES", "1"),
    ("CKPTFS_MAX_FILES", "-3"),
    ("CKPTFS_MAX_FILES", "1e3"),
    ("CKPTFS_MAX_FILES", "4194305"),
    ("CKPTFS_SPILL_SIZE", "x"),
    ("CKPTFS_SHM_DIR", "relative/dir"),
    ("CKPTFS_PRIVATE", "maybe"),
    ("CKPTFS_PRIVATE", "2"),
    ("CKPTFS_PRIVATE", "y"),
    ("CKPTFS_STORE", "."),
    ("CKPTFS_STORE", ".."),
    // The [daemon] section: every front-end resolves the whole table, so each refuses
    // these too (not only `ckptfs node`).
    ("CKPTFS_NODE_WRITER_YIELD", "-1"),
    ("CKPTFS_NODE_WRITER_YIELD", "3601"),
    ("CKPTFS_NODE_SCAN_INTERVAL", "soon"),
    ("CKPTFS_NODE_MAX_BW", "-5"),
    ("CKPTFS_NODE_PARTNER_MAX", "150%"),
    ("CKPTFS_NODE_PARTNER_MAX", "lots"),
    ("CKPTFS_STORE", "a/b"),
    ("CKPTFS_STORE", "a b"),
    (
        "CKPTFS_STORE",
        "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn",
    ),
    ("CKPTFS_MOUNT", "rel/path"),
    ("CKPTFS_MOUNT", "/"),
    // The [levels] section: resolved and checked by every front-end alike.
    ("CKPTFS_LEVELS", "pfs,local"),
    ("CKPTFS_LEVELS", "local,s3:X"),
    ("CKPTFS_LEVELS", "local,,pfs"),
];

#[test]
fn every_front_end_resolves_valid_settings_alike() {
    let sc = scratch();
    for &(var, val) in VALID {
        let store = unique_store();
        let _d = Destroy(store.clone());
        let mut env = vec![("CKPTFS_STORE", store.as_str())];
        if var != "CKPTFS_MEM_SIZE" {
            env.push(("CKPTFS_MEM_SIZE", "8M"));
        }
        // The store wants a spill directory and a size together.
        match var {
            "CKPTFS_SPILL_DIR" => env.push(("CKPTFS_SPILL_SIZE", "1M")),
            "CKPTFS_SPILL_SIZE" if val != "0" => env.push(("CKPTFS_SPILL_DIR", "/var/tmp")),
            _ => {}
        }
        env.push((var, val));
        let r = resolve_everywhere(&sc, &env);
        let cli = r
            .cli
            .unwrap_or_else(|e| panic!("{var}={val:?}: the CLI refused it: {e}"));
        assert_eq!(r.capi.as_ref(), Ok(&cli), "{var}={val:?}: C API and CLI differ");
        assert_eq!(r.shim.as_ref(), Ok(&cli), "{var}={val:?}: shim and CLI differ");
        // Under `ckptfs run` the shim sees what the CLI passes on.
        let mut c = clean(Command::new(ckptfs()), sc.dir.path());
        c.args(["run", "--"])
            .arg(python())
            .arg(&sc.probe)
            .arg("shim")
            .envs(env.iter().copied());
        let o = run(c);
        assert!(o.status.success(), "{var}={val:?}: ckptfs run failed: {o:?}");
        let (ret, t) = probe_out(&o);
        assert!(ret > 0, "{var}={val:?}: shim under ckptfs run: {t}");
        assert_eq!(
            json(&t),
            cli,
            "{var}={val:?}: shim under ckptfs run and CLI differ"
        );
    }
}

#[test]
fn private_yes_means_private_in_every_front_end() {
    let sc = scratch();
    for val in ["yes", "on", "YES"] {
        let r = resolve_everywhere(&sc, &[("CKPTFS_PRIVATE", val)]);
        for (who, v) in [("cli", &r.cli), ("capi", &r.capi), ("shim", &r.shim)] {
            let v = v.as_ref().unwrap_or_else(|e| panic!("{who}: {e}"));
            assert_eq!(v["private"], true, "{who} with CKPTFS_PRIVATE={val}: {v}");
        }
    }
    // The live bug: under `ckptfs run`, the shim attached the shared segment although
    // the CLI had resolved a private one. A file written must land in NAME.RANK only.
    let store = unique_store();
    let private = format!("{store}.3");
    let (_d, _p) = (Destroy(store.clone()), Destroy(private.clone()));
    let mut c = clean(Command::new(ckptfs()), sc.dir.path());
    c.args(["run", "--", "sh", "-c", "echo x > /ckpt/f && cat /ckpt/f"])
        .env("CKPTFS_STORE", &store)
        .env("CKPTFS_MEM_SIZE", "8M")
        .env("CKPTFS_PRIVATE", "yes")
        .env("CKPTFS_RANK", "3");
    let o = run(c);
    assert_eq!(text(&o.stdout), "x\n", "{o:?}");
    assert!(
        Path::new(&format!("/dev/shm/ckptfs.{private}")).exists(),
        "no private segment"
    );
    assert!(
        !Path::new(&format!("/dev/shm/ckptfs.{store}")).exists(),
        "shared segment attached"
    );
}

#[test]
fn every_front_end_refuses_invalid_settings_naming_the_variable() {
    let sc = scratch();
    for &(var, val) in INVALID {
        let r = resolve_everywhere(&sc, &[(var, val)]);
        let cli = r
            .cli
            .err()
            .unwrap_or_else(|| panic!("{var}={val:?}: the CLI accepted it"));
        assert!(cli.contains(var), "{var}={val:?}: CLI message: {cli}");
        for (who, v) in [("capi", r.capi), ("shim", r.shim)] {
            let e = v
                .err()
                .unwrap_or_else(|| panic!("{var}={val:?}: {who} accepted it"));
            assert!(e.starts_with(&format!("-{} ", libc::EINVAL)), "{who}: {e}");
            assert!(e.contains(var), "{var}={val:?}: {who} message: {e}");
        }
    }
}

#[test]
fn mem_size_1e30_is_out_of_range_naming_the_setting() {
    let sc = scratch();
    let store = unique_store();
    let _d = Destroy(store.clone());
    for args in [
        vec!["--mem-size", "1e30", "init"],
        vec!["--mem-size", "100T", "init"],
        vec!["--spill-size", "1e30", "config"],
    ] {
        let mut c = clean(Command::new(ckptfs()), sc.dir.path());
        c.args(["--store", &store]).args(&args);
        let o = run(c);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{args:?} accepted");
        assert!(
            err.contains("out of range") && err.contains(&args[0][2..]),
            "{args:?}: {err}"
        );
        assert!(!err.contains("at least one chunk"), "{args:?}: {err}");
    }
    let mut c = clean(Command::new(ckptfs()), sc.dir.path());
    c.args(["--store", &store, "init"]).env("CKPTFS_MEM_SIZE", "1e30");
    let err = text(&run(c).stderr);
    assert!(
        err.contains("out of range") && err.contains("CKPTFS_MEM_SIZE"),
        "{err}"
    );
    assert!(!Path::new(&format!("/dev/shm/ckptfs.{store}")).exists());
}

#[test]
fn store_named_dot_or_dotdot_is_refused_and_creates_nothing() {
    let sc = scratch();
    for name in [".", "..", "", "a/b", "../x"] {
        for cmd in [["init", "--mem-size"], ["run", "--mem-size"]] {
            let mut c = clean(Command::new(ckptfs()), sc.dir.path());
            c.args(["--store", name]).args(cmd).arg("8M");
            if cmd[0] == "run" {
                c.args(["--", "true"]);
            }
            let o = run(c);
            assert!(!o.status.success(), "store {name:?} accepted by {}", cmd[0]);
            assert!(text(&o.stderr).contains("store name"), "{name:?}: {o:?}");
        }
        let mut c = clean(Command::new(ckptfs()), sc.dir.path());
        let o = run({
            c.args(["destroy", "--store", name]);
            c
        });
        assert!(!o.status.success(), "destroy of store {name:?} accepted");
    }
    assert!(!Path::new("/dev/shm/ckptfs..").exists());
    assert!(!Path::new("/dev/shm/ckptfs...").exists());
}

#[test]
fn shim_with_invalid_max_files_says_so_once_and_fails_mount_calls_with_einval() {
    let sc = scratch();
    let store = unique_store();
    let _d = Destroy(store.clone());
    let prog = "import os\n\
                for p in ['/ckpt/a', '/ckpt/b', '/ckpt']:\n\
                \x20   try:\n\
                \x20       os.stat(p)\n\
                \x20       print('ok', p)\n\
                \x20   except OSError as e:\n\
                \x20       print(e.errno, p)\n\
                print('outside', os.path.isdir('/tmp'))\n";
    let mut c = clean(Command::new(python()), sc.dir.path());
    c.args(["-c", prog])
        .env("LD_PRELOAD", libs().join("libckptfs_preload.so"))
        .env("CKPTFS_STORE", &store)
        .env("CKPTFS_MAX_FILES", "abc");
    let o = run(c);
    let out = text(&o.stdout);
    let e = libc::EINVAL;
    assert_eq!(
        out,
        format!("{e} /ckpt/a\n{e} /ckpt/b\n{e} /ckpt\noutside True\n"),
        "{o:?}"
    );
    let err = text(&o.stderr);
    assert_eq!(err.matches("CKPTFS_MAX_FILES").count(), 1, "one message: {err}");
    assert!(err.contains("\"abc\" is not a number"), "{err}");
    assert!(
        !Path::new(&format!("/dev/shm/ckptfs.{store}")).exists(),
        "nothing attached"
    );
}

#[test]
fn capi_mount_from_env_with_invalid_variable_is_einval() {
    let sc = scratch();
    let store = unique_store();
    let _d = Destroy(store.clone());
    for (var, val) in [
        ("CKPTFS_MAX_FILES", "abc"),
        ("CKPTFS_STORE", "."),
        ("CKPTFS_PRIVATE", "maybe"),
    ] {
        let mut c = clean(Command::new(python()), sc.dir.path());
        c.arg(&sc.probe)
            .arg("mount")
            .arg(libs().join("libckptfs.so"))
            .env("CKPTFS_STORE", &store)
            .env(var, val);
        let (ret, msg) = probe_out(&run(c));
        assert_eq!(ret, -(libc::EINVAL as i64), "{var}={val}: {msg}");
        assert!(msg.contains(var), "{var}={val}: {msg}");
    }
    assert!(!Path::new(&format!("/dev/shm/ckptfs.{store}")).exists());
}

/// The `[daemon]` section (issue 30): the settings file's section, the variables and
/// `ckptfs node`'s flags resolve with the precedence of every setting (flags > env >
/// file > defaults); `ckptfs config` and `ckptfs node` agree, and both refuse a bad value
/// naming where it came from.
#[test]
fn daemon_section_resolves_with_the_same_precedence_in_config_and_node() {
    let sc = scratch();
    let home = sc.dir.path();
    let file = home.join("c.toml");
    std::fs::write(
        &file,
        "store = \"hs-daemon\"\n[daemon]\nwriter_yield = 0.5\nscan_interval = 0.3\npartner_max = \"8M\"\n",
    )
    .unwrap();
    let config = |env: &[(&str, &str)]| {
        let mut c = clean(Command::new(ckptfs()), home);
        c.arg("--config")
            .arg(&file)
            .args(["config", "--json"])
            .envs(env.iter().copied());
        run(c)
    };
    let o = config(&[("CKPTFS_NODE_SCAN_INTERVAL", "0.4")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = json(&text(&o.stdout));
    let row = |k: &str| {
        let r = v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == k)
            .unwrap_or_else(|| panic!("no row {k}: {v}"))
            .clone();
        (
            r["value"].as_str().unwrap().to_string(),
            r["source"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(row("daemon.writer_yield"), ("0.5".into(), "file".into()));
    assert_eq!(
        row("daemon.scan_interval"),
        ("0.4".into(), "env".into()),
        "env beats the file"
    );
    assert_eq!(row("daemon.partner_max"), ("8M".into(), "file".into()));
    assert_eq!(row("daemon.max_bw"), ("0".into(), "default".into()));

    // A bad value, from each source: config and node both refuse it, naming the source.
    let node = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = clean(Command::new(ckptfs()), home);
        c.arg("--config")
            .arg(&file)
            .arg("node")
            .args(args)
            .envs(env.iter().copied());
        run(c)
    };
    let bad_env = [("CKPTFS_NODE_WRITER_YIELD", "-1")];
    for o in [config(&bad_env), node(&[], &bad_env)] {
        assert!(!o.status.success());
        assert!(
            text(&o.stderr).contains("CKPTFS_NODE_WRITER_YIELD"),
            "{}",
            text(&o.stderr)
        );
    }
    // node's flag beats the variable and the file (both valid): its bad value is the one
    // refused, named as the flag.
    let o = node(
        &["--writer-yield", "5000"],
        &[("CKPTFS_NODE_WRITER_YIELD", "0.25")],
    );
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("flag --writer-yield"),
        "{}",
        text(&o.stderr)
    );
    // A good flag with good other sources: node gets past its settings (and stops at the
    // missing cluster instead).
    let o = node(
        &["--writer-yield", "0.1"],
        &[("CKPTFS_NODE_WRITER_YIELD", "0.25")],
    );
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(!e.contains("writer_yield") && !e.contains("WRITER_YIELD"), "{e}");
    // An unknown key in the section is an error naming it.
    std::fs::write(&file, "[daemon]\nwriter_yeild = 1\n").unwrap();
    let o = config(&[]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("daemon.writer_yeild"),
        "{}",
        text(&o.stderr)
    );
}

/// The `[levels]` section as the drain's target (issue 33): the settings file's
/// `levels.order`, `CKPTFS_LEVELS` and the `--levels` flag each name a different PFS
/// directory; `ckptfs config --json` and `ckptfs agent --once` (no `--dest`) agree on
/// which wins (flag > env > file), and the drain goes there.
#[test]
fn levels_section_picks_the_drain_target_with_the_same_precedence_in_config_and_agent() {
    let sc = scratch();
    let home = sc.dir.path();
    let store = unique_store();
    let _d = Destroy(store.clone());
    let dirs: Vec<PathBuf> = ["file", "env", "flag"].iter().map(|n| home.join(n)).collect();
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    let file = home.join("c.toml");
    std::fs::write(
        &file,
        format!("[levels]\norder = [\"local\", \"pfs:{}\"]\n", dirs[0].display()),
    )
    .unwrap();
    let env_order = format!("local,partner,pfs:{}", dirs[1].display());
    let flag_order = format!("local,pfs:{}", dirs[2].display());
    let cmd = |args: &[&str], env: bool, flag: bool| {
        let mut c = clean(Command::new(ckptfs()), home);
        c.arg("--config").arg(&file).args(["--store", &store]);
        if flag {
            c.args(["--levels", &flag_order]);
        }
        if env {
            c.env("CKPTFS_LEVELS", &env_order);
        }
        c.args(args)
            .env("CKPTFS_MEM_SIZE", "16M")
            .env("CKPTFS_NODE_ID", "n0");
        run(c)
    };
    let src = home.join("src");
    for (i, (env, flag, source)) in [(false, false, "file"), (true, false, "env"), (true, true, "flag")]
        .into_iter()
        .enumerate()
    {
        let o = cmd(&["config", "--json"], env, flag);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let v = json(&text(&o.stdout));
        let row = v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == "levels.order")
            .unwrap()
            .clone();
        assert_eq!(row["source"], source, "{row}");
        assert!(
            row["value"]
                .as_str()
                .unwrap()
                .contains(&dirs[i].display().to_string()),
            "{row}"
        );
        let body = format!("drained by the {source} order");
        std::fs::write(&src, &body).unwrap();
        let path = format!("/ck/{source}");
        let o = cmd(&["put", "-p", src.to_str().unwrap(), &path], env, flag);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let o = cmd(&["agent", "--once"], env, flag);
        assert!(o.status.success(), "{source}: {}", text(&o.stderr));
        assert_eq!(
            std::fs::read_to_string(dirs[i].join("ck").join(source)).unwrap(),
            body,
            "{source}: {}",
            text(&o.stderr)
        );
        for (j, d) in dirs.iter().enumerate() {
            if j != i {
                assert!(
                    !d.join("ck").join(source).exists(),
                    "{source} drained to {}",
                    d.display()
                );
            }
        }
    }
}
