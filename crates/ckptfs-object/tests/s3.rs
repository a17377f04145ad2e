//! The object level against a real S3 server (versitygw, started by
//! scripts/s3-local.sh on a private port with generated keys; built by
//! scripts/setup-s3.sh). No mocks: every test drains a real node store into the
//! server and restores from it. Without the server binary the tests print SKIPPED.

use ckptfs_level::{copy, IoPart, Level, LevelError};
use ckptfs_object::drain::{drain_once, restore, DrainOptions};
use ckptfs_object::{ObjectConfig, ObjectError, ObjectLevel};
use ckptfs_store::level::StoreLevel;
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

const CS: u64 = 256 << 10;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A versitygw server of its own (data under a temporary directory).
struct Server {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
}

impl Server {
    fn start() -> Option<Server> {
        if !root().join(".tools/s3/bin/versitygw").exists() {
            // CI (.ci/run) requires the real server: a missing one fails, never skips.
            assert!(
                std::env::var_os("CKPTFS_REQUIRE_SERVICES").is_none(),
                "no S3 server (.tools/s3/bin/versitygw): scripts/setup-s3.sh did not build it"
            );
            eprintln!("SKIPPED: no S3 server (.tools/s3/bin/versitygw): run scripts/setup-s3.sh");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("obj-s3-")
            .tempdir_in("/tmp")
            .unwrap();
        let mut s = Server {
            dir,
            env: HashMap::new(),
        };
        s.run("start");
        Some(s)
    }

    fn run(&mut self, cmd: &str) {
        let out = Command::new("bash")
            .arg(root().join("scripts/s3-local.sh"))
            .arg(cmd)
            .arg(self.dir.path())
            .env("S3_LOCAL_PORTS", "25000-25999")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "s3-local.sh {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((k, v)) = l.strip_prefix("export ").and_then(|l| l.split_once('=')) {
                self.env.insert(k.into(), v.into());
            }
        }
    }

    fn kill9(&self) {
        let pid = std::fs::read_to_string(self.dir.path().join("server.pid")).unwrap();
        Command::new("kill").args(["-9", pid.trim()]).status().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    fn endpoint(&self) -> String {
        self.env["AWS_ENDPOINT_URL"].clone()
    }

    /// The level at `s3://ckptfs/PREFIX` with `extra` settings on top of the server's.
    fn level(&self, prefix: &str, extra: &[(&str, &str)]) -> Result<ObjectLevel, ObjectError> {
        let mut env = self.env.clone();
        env.insert("HOME".into(), self.dir.path().display().to_string());
        env.insert("CKPTFS_NODE_ID".into(), "objtest".into());
        env.insert("CKPTFS_S3_PART_SIZE".into(), "5M".into());
        for (k, v) in extra {
            env.insert(k.to_string(), v.to_string());
        }
        let cfg = ObjectConfig::from_url(&format!("s3://ckptfs/{prefix}"), &|k| env.get(k).cloned())?;
        ObjectLevel::new(cfg)
    }

    /// The server's file of object `key` in bucket ckptfs.
    fn object_file(&self, key: &str) -> PathBuf {
        self.dir.path().join("data/ckptfs").join(key)
    }

    /// Multipart uploads the server holds parts of (any bucket).
    fn open_uploads(&self) -> usize {
        let mp = self.dir.path().join("data/ckptfs/.sgwtmp/multipart");
        let Ok(objs) = std::fs::read_dir(&mp) else {
            return 0;
        };
        objs.flatten()
            .map(|o| std::fs::read_dir(o.path()).map(|u| u.count()).unwrap_or(0))
            .sum()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.run("stop");
    }
}

struct TestStore {
    store: Store,
    name: String,
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
    }
}

fn store(tag: &str) -> TestStore {
    let name = format!("obj-{tag}-{}", std::process::id());
    let _ = Store::destroy(&name);
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(192 << 20);
    o.chunk_size = Some(CS);
    TestStore {
        store: Store::create(&o).expect("create store"),
        name,
    }
}

fn put(s: &Store, path: &str, bytes: &[u8]) {
    let mut cur = String::new();
    for c in path
        .rsplit_once('/')
        .unwrap()
        .0
        .split('/')
        .filter(|c| !c.is_empty())
    {
        cur.push('/');
        cur.push_str(c);
        let _ = s.mkdir(&cur, 0o755);
    }
    let mut f = s.open(path, OpenFlags::CREATE, 0o640).unwrap();
    f.write_all(bytes).unwrap();
    f.close().unwrap();
}

fn read(s: &Store, path: &str) -> Vec<u8> {
    let mut f = s.open(path, OpenFlags::READ, 0).unwrap();
    let mut v = vec![0u8; f.size() as usize];
    assert_eq!(f.read_full(&mut v).unwrap(), v.len());
    v
}

/// Compressible bytes shaped like a simulation field (smooth doubles).
fn field(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    let mut i = 0u64;
    while v.len() < n {
        let x = ((i / 64) as f64 * 0.001).sin().round() * 0.5;
        v.extend_from_slice(&x.to_le_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

fn files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("/run1/empty", Vec::new()),
        ("/run1/small", ckptfs_testsupport::seeded_bytes(1, 1000)),
        ("/run1/one-put", ckptfs_testsupport::seeded_bytes(2, 3 << 20)),
        (
            "/run1/ckpt/multipart",
            ckptfs_testsupport::seeded_bytes(3, (17 << 20) + 12345),
        ),
        ("/run1/ckpt/field", field(12 << 20)),
    ]
}

fn roundtrip(extra: &[(&str, &str)], tag: &str) {
    let Some(srv) = Server::start() else { return };
    let src = store(&format!("{tag}a"));
    for (p, b) in files() {
        put(&src.store, p, &b);
    }
    let obj = srv.level(tag, extra).unwrap();
    let rep = drain_once(&src.store, &obj, &DrainOptions::default()).unwrap();
    assert_eq!(rep.drained_files, 5, "{rep:?}");
    assert!(rep.failed.is_empty(), "{rep:?}");
    let m = rep.manifest.clone().expect("a manifest");
    assert!(m.starts_with(&format!("{tag}/manifests/")), "{m}");
    // The multipart file went up in parts; the small ones in one PUT.
    let e = obj.entry("/run1/ckpt/multipart").unwrap().unwrap();
    let compressed = extra
        .iter()
        .any(|(k, v)| *k == "CKPTFS_S3_COMPRESS" && *v != "off");
    if !compressed {
        assert_eq!(e.parts, 4, "{e:?}");
        assert!(e.zstd.is_none());
    } else {
        let f = obj.entry("/run1/ckpt/field").unwrap().unwrap();
        assert!(f.zstd.is_some());
        assert!(f.object_size * 4 < f.size, "field compresses: {f:?}");
    }
    assert_eq!(obj.entry("/run1/small").unwrap().unwrap().parts, 0);
    // Nothing left half-done on the server; the upload journal is empty.
    assert_eq!(srv.open_uploads(), 0);
    assert!(obj.list_keys("uploads").unwrap().is_empty());

    // A second drain finds everything published.
    let again = drain_once(&src.store, &obj, &DrainOptions::default()).unwrap();
    assert_eq!((again.drained_files, again.already_drained), (0, 5), "{again:?}");
    assert!(again.manifest.is_none());

    // A fresh level (another process's view: manifests only) restores into a new store.
    let dst = store(&format!("{tag}b"));
    let fresh = srv.level(tag, extra).unwrap();
    let r = restore(&dst.store, &fresh, "/").unwrap();
    assert_eq!(r.restored_files, 5, "{r:?}");
    assert!(r.failed.is_empty(), "{r:?}");
    for (p, b) in files() {
        assert_eq!(read(&dst.store, p), b, "{p}");
    }
    let st = fresh.stat("/run1/ckpt/field").unwrap().unwrap();
    fresh.verify("/run1/ckpt/field", &st.version).unwrap();
}

#[test]
fn drain_and_restore_uncompressed() {
    roundtrip(&[], "plain");
}

#[test]
fn drain_and_restore_compressed() {
    roundtrip(&[("CKPTFS_S3_COMPRESS", "zstd")], "zstd");
}

#[test]
fn manifest_is_written_last_so_a_set_in_progress_is_invisible() {
    let Some(srv) = Server::start() else { return };
    let src = store("set");
    put(&src.store, "/s/a", &ckptfs_testsupport::seeded_bytes(4, 100_000));
    put(&src.store, "/s/b", &ckptfs_testsupport::seeded_bytes(5, 200_000));
    let local = StoreLevel::new(&src.store).unwrap();
    let obj = srv.level("set", &[]).unwrap();
    obj.begin_set();
    copy(&local, &obj, "/s/a").unwrap();
    // The data object exists, but another view of the bucket lists nothing yet.
    let other = srv.level("set", &[]).unwrap();
    assert!(other.list("/").unwrap().is_empty());
    copy(&local, &obj, "/s/b").unwrap();
    assert!(other.list("/").unwrap().is_empty());
    obj.publish_set().unwrap().unwrap();
    assert_eq!(other.list("/").unwrap().len(), 2);
}

#[test]
fn corrupted_object_is_detected_and_never_served() {
    for compress in ["off", "zstd"] {
        let Some(srv) = Server::start() else { return };
        let prefix = format!("bad{compress}");
        let src = store(&format!("c{compress}"));
        let data = field(6 << 20);
        put(&src.store, "/c/f", &data);
        put(&src.store, "/c/ok", b"fine");
        let extra = [("CKPTFS_S3_COMPRESS", compress)];
        let obj = srv.level(&prefix, &extra).unwrap();
        drain_once(&src.store, &obj, &DrainOptions::default()).unwrap();
        // Flip one byte in the middle of the object in the server's data directory.
        let f = srv.object_file(&format!("{prefix}/data/c/f"));
        let mut bytes = std::fs::read(&f).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(&f, &bytes).unwrap();

        let dst = store(&format!("d{compress}"));
        let r = restore(&dst.store, &srv.level(&prefix, &extra).unwrap(), "/").unwrap();
        assert_eq!(r.restored_files, 1, "{r:?}");
        assert_eq!(r.failed.len(), 1, "{r:?}");
        assert!(r.failed[0].error.contains("CRC32C"), "{r:?}");
        // Nothing of the bad file is in the store; the good one is.
        assert!(dst.store.stat("/c/f").is_err());
        assert_eq!(read(&dst.store, "/c/ok"), b"fine");
        let st = obj.stat("/c/f").unwrap().unwrap();
        let err = obj.verify("/c/f", &st.version).unwrap_err();
        assert!(matches!(err, LevelError::Corrupt { .. }), "{err}");
    }
}

#[test]
fn wrong_key_is_a_clear_error_naming_the_endpoint() {
    let Some(srv) = Server::start() else { return };
    let src = store("key");
    put(&src.store, "/k/f", b"data");
    let obj = srv
        .level("key", &[("AWS_SECRET_ACCESS_KEY", "not-the-secret-xyz123")])
        .unwrap();
    let err = drain_once(&src.store, &obj, &DrainOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ObjectError::Denied { .. }), "{msg}");
    assert!(msg.contains(&srv.endpoint()), "{msg}");
    assert!(msg.contains("access denied"), "{msg}");
    // The service's XML body is reduced to its code and message.
    assert!(
        msg.contains("SignatureDoesNotMatch") && !msg.contains("StringToSign"),
        "{msg}"
    );
    assert!(!msg.contains("not-the-secret-xyz123"), "{msg}");
    assert!(!msg.contains(&srv.env["AWS_SECRET_ACCESS_KEY"]), "{msg}");
    assert_eq!(err.errno(), libc::EACCES);
    // Nothing drained, nothing lost.
    let good = srv.level("key", &[]).unwrap();
    assert!(good.list("/").unwrap().is_empty());
    assert_eq!(read(&src.store, "/k/f"), b"data");
}

#[test]
fn missing_bucket_is_a_clear_error() {
    let Some(srv) = Server::start() else { return };
    let mut env = srv.env.clone();
    env.insert("HOME".into(), "/nonexistent".into());
    let cfg = ObjectConfig::from_url("s3://obj-no-such-bucket/x", &|k| env.get(k).cloned()).unwrap();
    let obj = ObjectLevel::new(cfg).unwrap();
    let err = obj.check().unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ObjectError::NoBucket { .. }), "{msg}");
    assert!(
        msg.contains("obj-no-such-bucket") && msg.contains(&srv.endpoint()),
        "{msg}"
    );
}

#[test]
fn a_crashed_drain_leaves_no_orphaned_parts() {
    let Some(srv) = Server::start() else { return };
    let src = store("crash");
    let data = ckptfs_testsupport::seeded_bytes(9, 24 << 20);
    put(&src.store, "/x/big", &data);
    let local = StoreLevel::new(&src.store).unwrap();
    {
        let obj = srv.level("crash", &[]).unwrap();
        // A drain that dies in the middle of the upload: parts sent, never completed,
        // never aborted (no destructor runs in a killed process).
        let r = local.get("/x/big").unwrap();
        let mut w = obj.put(r.stored()).unwrap();
        let mut r = r;
        for i in 0..(12 << 20) / CS {
            r.read_chunk_to(i, i * CS, &mut *w).unwrap();
        }
        std::mem::forget(w);
        std::mem::forget(r);
        assert!(srv.open_uploads() >= 1, "parts are on the server");
        assert!(obj.list("/").unwrap().is_empty(), "nothing published");
    }
    // The next drain aborts the stale upload first, then drains the file whole.
    let obj = srv.level("crash", &[]).unwrap();
    let rep = drain_once(&src.store, &obj, &DrainOptions::default()).unwrap();
    assert_eq!(rep.aborted_uploads, 1, "{rep:?}");
    assert_eq!(rep.drained_files, 1, "{rep:?}");
    assert_eq!(srv.open_uploads(), 0);
    let dst = store("crash2");
    restore(&dst.store, &obj, "/").unwrap();
    assert_eq!(read(&dst.store, "/x/big"), data);
}

#[test]
fn server_killed_mid_upload_then_restarted() {
    let Some(mut srv) = Server::start() else { return };
    let src = store("kill");
    let data = ckptfs_testsupport::seeded_bytes(10, 40 << 20);
    put(&src.store, "/k/big", &data);
    let local = StoreLevel::new(&src.store).unwrap();
    let extra = [
        ("CKPTFS_S3_MAX_RETRIES", "2"),
        ("CKPTFS_S3_RETRY_BACKOFF_MS", "20"),
        ("CKPTFS_S3_RETRY_TIMEOUT", "3"),
        ("CKPTFS_S3_CONCURRENCY", "1"),
    ];
    let obj = srv.level("kill", &extra).unwrap();
    let r = local.get("/k/big").unwrap();
    let mut w = obj.put(r.stored()).unwrap();
    let mut r = r;
    let mut killed = false;
    let mut failed = None;
    for i in 0..(40 << 20) / CS {
        if !killed && srv.open_uploads() >= 1 && i * CS >= 16 << 20 {
            srv.kill9();
            killed = true;
        }
        if let Err(e) = r.read_chunk_to(i, i * CS, &mut *w) {
            failed = Some(e);
            break;
        }
    }
    assert!(killed);
    let e = failed.expect("the upload fails once the server is gone");
    assert!(e.to_string().contains(&srv.endpoint()), "{e}");
    drop(w); // tries to abort: the server is down, the journal keeps the upload
    drop(r);
    assert!(obj.list("/").unwrap_err().to_string().contains(&srv.endpoint()));
    srv.run("start");
    assert!(srv.open_uploads() >= 1, "the dead server kept the parts");
    let obj = srv.level("kill", &[]).unwrap();
    let rep = drain_once(&src.store, &obj, &DrainOptions::default()).unwrap();
    assert_eq!((rep.aborted_uploads, rep.drained_files), (1, 1), "{rep:?}");
    assert_eq!(srv.open_uploads(), 0);
    let dst = store("kill2");
    restore(&dst.store, &obj, "/").unwrap();
    assert_eq!(read(&dst.store, "/k/big"), data);
}

/// An HTTP proxy in front of the server that answers the first `fail` requests with
/// 503 SlowDown (after reading them whole), then passes everything through.
struct Throttle {
    addr: SocketAddr,
    answered_503: Arc<AtomicU64>,
}

fn throttle(upstream: &str, fail: i64) -> Throttle {
    let up: SocketAddr = upstream.trim_start_matches("http://").parse().unwrap();
    let listener = (0..200)
        .find_map(|i| {
            TcpListener::bind((
                "127.0.0.1",
                25000 + ((std::process::id() as u16 * 7 + i * 13) % 1000),
            ))
            .ok()
        })
        .expect("a free port in 25000-25999");
    let addr = listener.local_addr().unwrap();
    let left = Arc::new(AtomicI64::new(fail));
    let answered_503 = Arc::new(AtomicU64::new(0));
    let n503 = answered_503.clone();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { continue };
            let (left, n503) = (left.clone(), n503.clone());
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if c.read(&mut b).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let len: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; len];
                if c.read_exact(&mut body).is_err() {
                    return;
                }
                if left.fetch_sub(1, Ordering::SeqCst) > 0 {
                    n503.fetch_add(1, Ordering::SeqCst);
                    let msg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                    let _ = write!(
                        c,
                        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{msg}",
                        msg.len()
                    );
                    return;
                }
                let Ok(mut u) = TcpStream::connect(up) else { return };
                if u.write_all(&head).and_then(|_| u.write_all(&body)).is_err() {
                    return;
                }
                let (mut c2, mut u2) = (c.try_clone().unwrap(), u.try_clone().unwrap());
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut u2, &mut c2);
                    let _ = c2.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut c, &mut u);
                let _ = u.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    Throttle { addr, answered_503 }
}

#[test]
fn throttling_503_is_retried_with_backoff_then_a_bounded_error() {
    let Some(srv) = Server::start() else { return };
    let src = store("slow");
    let data = ckptfs_testsupport::seeded_bytes(11, 12 << 20);
    put(&src.store, "/t/f", &data);

    // A few 503s: retried, the drain succeeds.
    let t = throttle(&srv.endpoint(), 6);
    let ep = format!("http://{}", t.addr);
    let extra = [
        ("AWS_ENDPOINT_URL", ep.as_str()),
        ("CKPTFS_S3_RETRY_BACKOFF_MS", "10"),
        ("CKPTFS_S3_MAX_RETRIES", "10"),
    ];
    let obj = srv.level("slow", &extra).unwrap();
    let rep = drain_once(&src.store, &obj, &DrainOptions::default()).unwrap();
    assert_eq!(rep.drained_files, 1, "{rep:?}");
    assert_eq!(t.answered_503.load(Ordering::SeqCst), 6);
    let dst = store("slow2");
    restore(&dst.store, &srv.level("slow", &[]).unwrap(), "/").unwrap();
    assert_eq!(read(&dst.store, "/t/f"), data);

    // Throttled for good: a clear error after the bounded number of retries.
    let t = throttle(&srv.endpoint(), i64::MAX);
    let ep = format!("http://{}", t.addr);
    let extra = [
        ("AWS_ENDPOINT_URL", ep.as_str()),
        ("CKPTFS_S3_RETRY_BACKOFF_MS", "10"),
        ("CKPTFS_S3_MAX_RETRIES", "3"),
    ];
    let obj = srv.level("slow-fail", &extra).unwrap();
    let t0 = std::time::Instant::now();
    let err = drain_once(&src.store, &obj, &DrainOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ObjectError::Unavailable { retries: 3, .. }),
        "{msg}"
    );
    assert!(
        msg.contains(&ep) && msg.contains("gave up after 3 retries"),
        "{msg}"
    );
    assert_eq!(
        t.answered_503.load(Ordering::SeqCst),
        4,
        "one try and three retries"
    );
    assert!(t0.elapsed().as_secs() < 30);
}

#[test]
fn writes_must_be_sequential_and_a_dropped_writer_aborts_its_upload() {
    let Some(srv) = Server::start() else { return };
    let src = store("drop");
    let data = ckptfs_testsupport::seeded_bytes(12, 12 << 20);
    put(&src.store, "/d/f", &data);
    let local = StoreLevel::new(&src.store).unwrap();
    let obj = srv.level("drop", &[]).unwrap();
    let st = local.stat("/d/f").unwrap().unwrap();
    let mut w = obj.put(&st).unwrap();
    let e = w.write_at(&[IoPart::Buf(&data[..10])], 5).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    w.write_at(&[IoPart::Buf(&data[..8 << 20])], 0).unwrap();
    assert_eq!(srv.open_uploads(), 1);
    drop(w);
    assert_eq!(srv.open_uploads(), 0);
    assert!(obj.list_keys("uploads").unwrap().is_empty());
    assert!(obj.list("/").unwrap().is_empty());
}

#[test]
fn the_object_level_passes_the_conformance_suite() {
    for compress in ["off", "zstd"] {
        let Some(srv) = Server::start() else { return };
        let prefix = format!("conf{compress}");
        let obj = srv.level(&prefix, &[("CKPTFS_S3_COMPRESS", compress)]).unwrap();
        assert_eq!(obj.id().to_string(), format!("s3:ckptfs/{prefix}"));
        // Flip a byte of the object in the server's data directory.
        let damage = |path: &str| -> std::io::Result<()> {
            let f = srv.object_file(&format!("{prefix}/data{path}"));
            let mut b = std::fs::read(&f)?;
            let at = b.len().saturating_sub(3);
            b[at] ^= 0x40;
            std::fs::write(&f, &b)
        };
        let mut h = ckptfs_level::conformance::Harness::new(&obj, 4096, "/conf");
        h.damage = Some(&damage);
        ckptfs_level::conformance::run(&h).unwrap();
    }
}

#[test]
fn chunks_can_be_read_again_out_of_order() {
    let Some(srv) = Server::start() else { return };
    let src = store("reread");
    let data = ckptfs_testsupport::seeded_bytes(13, (23 << 20) + 77);
    put(&src.store, "/r/f", &data);
    let local = StoreLevel::new(&src.store).unwrap();
    let obj = srv.level("reread", &[]).unwrap();
    copy(&local, &obj, "/r/f").unwrap();
    let mut r = obj.get("/r/f").unwrap();
    assert!(r.rereadable());
    let n = r.stored().chunks();
    // Forward, back into an earlier segment, the same chunk twice, a skip to the end.
    for i in [0, 1, 30, 2, 2, 60, n - 1, 3] {
        let mut got = Vec::new();
        r.read_chunk(i, &mut |parts| {
            for p in parts {
                p.extend_vec(&mut got);
            }
            Ok(())
        })
        .unwrap();
        let at = (i * CS) as usize;
        assert_eq!(got, &data[at..(at + CS as usize).min(data.len())], "chunk {i}");
    }
    r.finish().unwrap();
}
