//! Helpers shared by the ckptfs crates' tests (reference data, the unprivileged test user). Used only as a dev-dependency, so test
//! code never pulls benchmark or CLI crates into a library's dependencies.
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

/// The uid of [`TEST_USER`], creating the user if needed; `None`, with the reason
/// printed (`SKIPPED: ...`), when not root or when `useradd` cannot create it.
pub fn test_user() -> Option<u32> {
    if !is_root() {
        eprintln!("SKIPPED: needs root (to create and run as the user {TEST_USER})");
        return None;
    }
    if uid_of(TEST_USER).is_none() {
        let _ = std::process::Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/bin/sh", TEST_USER])
            .status();
    }
    let u = uid_of(TEST_USER);
    if u.is_none() {
        eprintln!("SKIPPED: cannot create the user {TEST_USER} with useradd");
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_bytes_are_reproducible_and_differ_by_seed() {
        assert_eq!(seeded_bytes(7, 1000), seeded_bytes(7, 1000));
        assert_ne!(seeded_bytes(7, 1000), seeded_bytes(8, 1000));
        assert_eq!(seeded_bytes(7, 10), seeded_bytes(7, 1000)[..10]);
    }
}
