//! Destroying a store in use (issue "Failures in sequence", item 7): refused with EBUSY
//! naming the processes that use it; `force` marks the segment destroyed first, so they
//! get ESTALE from their next operation instead of reading or writing a deleted segment
//! (whose writes would vanish at their exit), also once a store of the same name exists
//! again.

mod support;

use ckptfs_store::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const HOLD_ENV: &str = "CKPTFS_TEST_HOLD";

#[test]
fn child_entry() {
    support::child_entry();
}

/// Spawned as a child: attach the store named in `CKPTFS_TEST_HOLD` (shm dir default),
/// say "ready", then stat `/f` every 20 ms; print the errno of the first failure.
#[test]
fn holder_entry() {
    let Ok(name) = std::env::var(HOLD_ENV) else { return };
    let s = Store::attach(&StoreOptions::named(&name)).unwrap();
    s.stat("/f").unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        if let Err(e) = s.stat("/f") {
            println!("errno {}", e.errno());
            return;
        }
        let w = s.open("/from-old", OpenFlags::CREATE, 0o644).and_then(|mut f| {
            f.write_all(b"lost?")?;
            f.close()
        });
        if let Err(e) = w {
            println!("errno {}", e.errno());
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("never failed");
}

struct Holder {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Holder {
    fn spawn(name: &str) -> Holder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "holder_entry", "--nocapture", "--test-threads=1", "-q"])
            .env(HOLD_ENV, name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut h = Holder { child, out };
        assert_eq!(h.line(), "ready");
        h
    }
    /// The next line the child printed that is not test-harness noise.
    fn line(&mut self) -> String {
        loop {
            let mut l = String::new();
            if self.out.read_line(&mut l).unwrap() == 0 {
                return String::new();
            }
            let l = l.trim();
            if l == "ready" || l.starts_with("errno") || l == "never failed" {
                return l.to_string();
            }
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn destroying_a_store_in_use_is_ebusy_naming_its_users_and_force_makes_them_fail_cleanly() {
    let t = TempStore::new("destroy-busy", 8 << 20, 64 << 10, 64, None);
    let s = t.attach();
    let mut f = s.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&pattern(1, 0, 100_000)).unwrap();
    f.close().unwrap();
    let mut h = Holder::spawn(&t.name);
    let pid = h.child.id();

    // Refused while the child maps it, naming the child; nothing removed.
    let users = Store::users_in(None, &t.name).unwrap();
    assert!(users.iter().any(|u| u.pid == pid), "{users:?}");
    let e = Store::destroy(&t.name).unwrap_err();
    assert_eq!(e.errno(), libc::EBUSY, "{e}");
    assert!(e.to_string().contains(&format!("pid {pid}")), "{e}");
    assert_file_is(&t.attach(), "/f", 1, 100_000);

    // Forced: the child's next operation is ESTALE; so is this process's old handle.
    let gone = Store::destroy_forced_in(None, &t.name).unwrap();
    assert!(gone.iter().any(|u| u.pid == pid), "{gone:?}");
    assert_eq!(h.line(), format!("errno {}", libc::ESTALE));
    assert_eq!(s.stat("/f").unwrap_err().errno(), libc::ESTALE);
    assert!(s.is_destroyed());

    // A new store of the same name: the old handle never reads or writes it.
    let n = Store::create(&StoreOptions {
        mem_size: Some(8 << 20),
        chunk_size: Some(64 << 10),
        max_files: Some(64),
        ..t.options()
    })
    .unwrap();
    assert_eq!(n.stat("/f").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(s.stat("/f").unwrap_err().errno(), libc::ESTALE);
    assert_eq!(
        s.open("/g", OpenFlags::CREATE, 0o644).unwrap_err().errno(),
        libc::ESTALE
    );
    assert_eq!(n.stat("/g").unwrap_err().errno(), libc::ENOENT);
    // Nobody else uses the new one: destroyed without force.
    drop(h);
    drop(n);
    Store::destroy(&t.name).unwrap();
}
