//! Helpers shared by the ckptfs crates' tests (reference data, the unprivileged test user,
//! tests that need root). Used only as a dev-dependency, so test code never pulls
//! benchmark or CLI crates into a library's dependencies.
//!
//! ## Tests that need root
//!
//! A test that needs root (network namespaces, mounts, another user) and cannot run
//! here calls [`skip_root_only`] (or [`require_root`]) and returns: it prints
//! `SKIPPED: <why>` and passes. Under `CKPTFS_REQUIRE_ROOT_TESTS=1` (exported by
//! `.ci/run`) the same call panics instead, so a CI machine that lost root (or
//! iproute2, /dev/fuse, `useradd`) fails rather than passing those tests silently.
#![deny(missing_docs)]

/// Deterministic pseudo-random bytes for `seed` (xorshift; the tests' reference data).
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The unprivileged user the other-user tests act as (created with `useradd`).
pub const TEST_USER: &str = "ckptfs-test1";

/// Is this process root (effective uid 0)?
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The uid of `user`, if it exists.
pub fn uid_of(user: &str) -> Option<u32> {
    let o = std::process::Command::new("id")
        .args(["-u", user])
        .output()
        .ok()?;
    String::from_utf8_lossy(&o.stdout).trim().parse().ok()
}

/// The environment variable that turns a root-only test that cannot run into a failure.
pub const REQUIRE_ROOT_TESTS: &str = "CKPTFS_REQUIRE_ROOT_TESTS";

/// Is `CKPTFS_REQUIRE_ROOT_TESTS=1` set (root-only tests must run)?
pub fn root_tests_required() -> bool {
    std::env::var(REQUIRE_ROOT_TESTS).is_ok_and(|v| v == "1")
}

/// A root-only test cannot run here, because of `why`: prints `SKIPPED: why` (the
/// caller then returns and the test passes), or panics under
/// `CKPTFS_REQUIRE_ROOT_TESTS=1`.
#[track_caller]
pub fn skip_root_only(why: impl std::fmt::Display) {
    if root_tests_required() {
        panic!("{REQUIRE_ROOT_TESTS}=1 and this root-only test cannot run: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// `true` when this process is root; otherwise [`skip_root_only`] with "needs root
/// (`what`)" and `false`: `if !require_root("mount a tmpfs") { return; }`.
#[track_caller]
pub fn require_root(what: &str) -> bool {
    if is_root() {
        return true;
    }
    skip_root_only(format_args!("needs root ({what})"));
    false
}

/// The uid of [`TEST_USER`], creating the user if needed; `None`, through
/// [`skip_root_only`], when not root or when `useradd` cannot create it.
#[track_caller]
pub fn test_user() -> Option<u32> {
    if !require_root(&format!("to create and run as the user {TEST_USER}")) {
        return None;
    }
    if uid_of(TEST_USER).is_none() {
        let _ = std::process::Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/bin/sh", TEST_USER])
            .status();
    }
    let u = uid_of(TEST_USER);
    if u.is_none() {
        skip_root_only(format_args!("cannot create the user {TEST_USER} with useradd"));
    }
    u
}

/// The first of `n` consecutive TCP ports on 127.0.0.1, each free now, at a multiple of
/// `n` from `range.start` within `range` (the daemons a test starts bind them a moment
/// later). Give each test its own range below Linux's ephemeral ports (32768-60999), so
/// that neither another test nor an outgoing connection takes one between this check
/// and the daemon's bind.
pub fn free_ports(range: std::ops::Range<u16>, n: u16) -> u16 {
    let (start, end) = (range.start, range.end);
    range
        .step_by(n.max(1) as usize)
        .filter(|&b| b.checked_add(n).is_some_and(|e| e <= end))
        .find(|&b| (b..b + n).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()))
        .unwrap_or_else(|| panic!("no {n} consecutive free ports in {start}-{}", end - 1))
}

/// Cluster map `c` with a fresh shared secret, written to a `cluster.toml` of mode 0600 in
/// a new temporary directory and loaded back from it, as a daemon loads its map: the map
/// and the directory (keep it while the file is used).
pub fn secret_cluster(mut c: ckptfs_cluster::Cluster) -> (ckptfs_cluster::Cluster, tempfile::TempDir) {
    let secret = ckptfs_cluster::Secret::generate().expect("a random secret");
    c.secret = Some(secret.expose().iter().map(|b| format!("{b:02x}")).collect());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, c.to_toml()).expect("write the cluster file");
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("make the cluster file 0600");
    let c = ckptfs_cluster::Cluster::load(&file).expect("load the cluster file");
    (c, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_only_test_that_cannot_run_fails_under_ckptfs_require_root_tests() {
        // Run in a child process: the variable is process-wide.
        if std::env::var("HYG_SKIP_CHILD").is_ok() {
            skip_root_only("the child's reason");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let run = |require: &str| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "tests::a_root_only_test_that_cannot_run_fails_under_ckptfs_require_root_tests",
                    "--nocapture",
                ])
                .env("HYG_SKIP_CHILD", "1")
                .env(REQUIRE_ROOT_TESTS, require)
                .output()
                .unwrap()
        };
        let skipped = run("0");
        assert!(skipped.status.success());
        assert!(String::from_utf8_lossy(&skipped.stderr).contains("SKIPPED: the child's reason"));
        let failed = run("1");
        assert!(!failed.status.success());
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&failed.stdout),
            String::from_utf8_lossy(&failed.stderr)
        );
        assert!(out.contains("cannot run: the child's reason"), "{out}");
    }

    #[test]
    fn seeded_bytes_are_reproducible_and_differ_by_seed() {
        assert_eq!(seeded_bytes(7, 1000), seeded_bytes(7, 1000));
        assert_ne!(seeded_bytes(7, 1000), seeded_bytes(8, 1000));
        assert_eq!(seeded_bytes(7, 10), seeded_bytes(7, 1000)[..10]);
    }
}
