//! The S3 server the `[levels]` tests use (versitygw started by scripts/s3-local.sh on a
//! private port, data in a temporary directory), and their data helpers.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A real S3 server of its own (data under a temporary directory).
pub struct Server {
    pub dir: tempfile::TempDir,
    pub env: HashMap<String, String>,
    pub bucket: String,
}

impl Server {
    pub fn start() -> Option<Server> {
        let bin = std::env::var_os("VERSITYGW")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join(".tools/s3/bin/versitygw"));
        if !bin.exists() {
            // CI (.ci/run) requires the real server: a missing one fails, never skips.
            assert!(
                std::env::var_os("CKPTFS_REQUIRE_SERVICES").is_none(),
                "no S3 server ({}): scripts/setup-s3.sh did not build it",
                bin.display()
            );
            eprintln!(
                "SKIPPED: no S3 server ({}): run scripts/setup-s3.sh",
                bin.display()
            );
            return None;
        }
        let dir = tempfile::Builder::new().prefix("levels-s3-").tempdir().unwrap();
        let bucket = std::env::var("S3_LOCAL_BUCKET").unwrap_or_else(|_| "ckptfs".into());
        let out = Command::new("bash")
            .arg(root().join("scripts/s3-local.sh"))
            .arg("start")
            .arg(dir.path())
            .env("VERSITYGW", &bin)
            .env("S3_LOCAL_BUCKET", &bucket)
            .env(
                "S3_LOCAL_PORTS",
                std::env::var("S3_LOCAL_PORTS").unwrap_or_else(|_| "25000-25999".into()),
            )
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "s3-local.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut env = HashMap::new();
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((k, v)) = l.strip_prefix("export ").and_then(|l| l.split_once('=')) {
                env.insert(k.to_string(), v.to_string());
            }
        }
        Some(Server { dir, env, bucket })
    }

    /// The server's file of object `key` (plain files under DIR/data/BUCKET).
    pub fn object_file(&self, key: &str) -> PathBuf {
        self.dir.path().join("data").join(&self.bucket).join(key)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(root().join("scripts/s3-local.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

pub fn data(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect()
}

pub fn flip(file: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).unwrap();
}
