//! Where the object level is and how it talks to it: the `s3://bucket/prefix` URL, the
//! endpoint and credentials from the usual places, and the level's own settings.
//!
//! Credentials and endpoint, first found wins (what the AWS command-line tools and SDKs
//! do): the `AWS_*` environment variables (`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` or
//! `AWS_DEFAULT_REGION`), then the profile `AWS_PROFILE` (default `default`) of the shared
//! credentials file (`AWS_SHARED_CREDENTIALS_FILE`, default `~/.aws/credentials`) and of
//! the config file (`AWS_CONFIG_FILE`, default `~/.aws/config`: `region`,
//! `endpoint_url`). The level's settings come from `CKPTFS_S3_*` variables (see
//! [`ObjectConfig::from_url`]); the command line sets the same fields.
//!
//! The secret key and session token are kept in [`Secret`], whose `Debug` and `Display`
//! print `***`: no message, log line or JSON output of this crate contains them.

use crate::error::ObjectError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// S3's smallest part of a multipart upload (every part but the last).
pub const MIN_PART: u64 = 5 << 20;
/// S3's largest number of parts in one upload.
pub const MAX_PARTS: u64 = 10_000;

/// A credential that is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a credential.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    /// The credential itself (only for the request signer).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Optional compression of the drained bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    /// zstd level (1..=19; 1-3 are the fast ones).
    pub level: i32,
    /// Uncompressed bytes per zstd frame (a multiple of the chunk size; rounded up to one
    /// when the level is opened for a store of another chunk size). Each frame is
    /// decompressed on its own, so a restore reads and checks one group at a time.
    pub group: u64,
}

impl Compression {
    /// Parse `off`, `zstd` (level 1) or `zstd:LEVEL`.
    pub fn parse(s: &str) -> Result<Option<Compression>, ObjectError> {
        let s = s.trim();
        match s {
            "" | "off" | "none" | "no" | "0" => Ok(None),
            // Level 1: on checkpoint data level 3 saved little more and ran slower
            // (docs/object.md, "When compression pays").
            "zstd" | "on" => Ok(Some(Compression {
                level: 1,
                group: 8 << 20,
            })),
            _ => {
                let lvl = s
                    .strip_prefix("zstd:")
                    .and_then(|l| l.parse::<i32>().ok())
                    .filter(|l| (1..=19).contains(l))
                    .ok_or_else(|| {
                        ObjectError::Config(format!("compression {s:?}: want off, zstd or zstd:1..19"))
                    })?;
                Ok(Some(Compression {
                    level: lvl,
                    group: 8 << 20,
                }))
            }
        }
    }
}

/// Everything the object level needs to reach its bucket.
#[derive(Debug, Clone)]
pub struct ObjectConfig {
    /// Bucket name.
    pub bucket: String,
    /// Key prefix inside the bucket (no leading or trailing `/`; may be empty).
    pub prefix: String,
    /// Endpoint URL (`http://127.0.0.1:9000`); None for AWS itself.
    pub endpoint: Option<String>,
    /// Region (S3-compatible servers accept any; signatures include it).
    pub region: String,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key (never printed).
    pub secret_access_key: Option<Secret>,
    /// Session token of temporary credentials (never printed).
    pub session_token: Option<Secret>,
    /// Where the credentials came from (`environment`, `~/.aws/credentials [default]`).
    pub credentials_from: String,
    /// Bytes per part of a multipart upload and per ranged read (at least 5 MiB; files
    /// no larger are uploaded with one PUT). `CKPTFS_S3_PART_SIZE`, default 8 MiB.
    pub part_size: u64,
    /// Parts (or ranged reads) of one file in flight at once. `CKPTFS_S3_CONCURRENCY`,
    /// default 4.
    pub concurrency: usize,
    /// Compression. `CKPTFS_S3_COMPRESS=off|zstd|zstd:LEVEL`, default off.
    pub compression: Option<Compression>,
    /// Retries of one request answered 5xx/429 (503 SlowDown included) or cut off, with
    /// exponential backoff. `CKPTFS_S3_MAX_RETRIES`, default 10.
    pub max_retries: usize,
    /// First backoff. `CKPTFS_S3_RETRY_BACKOFF_MS`, default 100 ms (doubling, at most 15 s).
    pub retry_backoff: Duration,
    /// No retry starts after this long since the request's first try.
    /// `CKPTFS_S3_RETRY_TIMEOUT` seconds, default 180.
    pub retry_timeout: Duration,
    /// This drainer's name in manifest and upload-journal keys (sanitized). Default: the
    /// host name.
    pub node: String,
}

fn env_nonempty(env: &dyn Fn(&str) -> Option<String>, k: &str) -> Option<String> {
    env(k).filter(|v| !v.trim().is_empty())
}

/// Parse an INI file of the AWS kind into `section -> key -> value`.
fn parse_ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut cur = String::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            cur = s.trim().to_string();
            continue;
        }
        if let Some((k, v)) = l.split_once('=') {
            out.entry(cur.clone())
                .or_default()
                .insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

fn home_file(env: &dyn Fn(&str) -> Option<String>, var: &str, rel: &str) -> Option<PathBuf> {
    env_nonempty(env, var)
        .map(PathBuf::from)
        .or_else(|| env_nonempty(env, "HOME").map(|h| PathBuf::from(h).join(rel)))
}

/// Keys and file names allow these only (node names become part of keys).
pub fn sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        "node".into()
    } else {
        out
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

impl ObjectConfig {
    /// Is this a destination of the object level (`s3://...`)?
    pub fn is_url(s: &str) -> bool {
        s.starts_with("s3://")
    }

    /// The level at `url` (`s3://bucket/prefix`) with endpoint, credentials and settings
    /// from `env` (the process environment in production) and the AWS files it names.
    pub fn from_url(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<ObjectConfig, ObjectError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| ObjectError::Config(format!("{url:?} is not an s3://bucket/prefix URL")))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !valid_bucket {
            return Err(ObjectError::Config(format!(
                "{url:?}: bucket name must be 3-63 characters of a-z, 0-9, '-' and '.'"
            )));
        }
        let prefix = prefix.trim_matches('/').to_string();
        if prefix
            .split('/')
            .any(|c| c == "." || c == ".." || (c.is_empty() && !prefix.is_empty()))
            || prefix.contains('\0')
        {
            return Err(ObjectError::Config(format!(
                "{url:?}: prefix has an empty, '.' or '..' component"
            )));
        }
        let profile = env_nonempty(env, "AWS_PROFILE").unwrap_or_else(|| "default".into());
        let read = |p: Option<PathBuf>| -> HashMap<String, HashMap<String, String>> {
            p.and_then(|p| std::fs::read_to_string(p).ok())
                .map(|t| parse_ini(&t))
                .unwrap_or_default()
        };
        let creds_path = home_file(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
        let creds = read(creds_path.clone());
        let conf = read(home_file(env, "AWS_CONFIG_FILE", ".aws/config"));
        let cred_sec = creds.get(&profile);
        let conf_sec = conf
            .get(&format!("profile {profile}"))
            .or_else(|| conf.get(&profile));
        let from_file = |k: &str| {
            cred_sec
                .and_then(|s| s.get(k))
                .or_else(|| conf_sec.and_then(|s| s.get(k)))
                .filter(|v| !v.is_empty())
                .cloned()
        };

        let (access_key_id, secret_access_key, session_token, credentials_from) = match (
            env_nonempty(env, "AWS_ACCESS_KEY_ID"),
            env_nonempty(env, "AWS_SECRET_ACCESS_KEY"),
        ) {
            (Some(k), Some(s)) => (
                Some(k),
                Some(Secret(s)),
                env_nonempty(env, "AWS_SESSION_TOKEN").map(Secret),
                "environment (AWS_ACCESS_KEY_ID)".to_string(),
            ),
            _ => match (from_file("aws_access_key_id"), from_file("aws_secret_access_key")) {
                (Some(k), Some(s)) => (
                    Some(k),
                    Some(Secret(s)),
                    from_file("aws_session_token").map(Secret),
                    format!(
                        "{} [{profile}]",
                        creds_path.map(|p| p.display().to_string()).unwrap_or_default()
                    ),
                ),
                _ => (None, None, None, "none".to_string()),
            },
        };
        let endpoint = env_nonempty(env, "AWS_ENDPOINT_URL_S3")
            .or_else(|| env_nonempty(env, "AWS_ENDPOINT_URL"))
            .or_else(|| from_file("endpoint_url"))
            .map(|e| e.trim_end_matches('/').to_string());
        let region = env_nonempty(env, "AWS_REGION")
            .or_else(|| env_nonempty(env, "AWS_DEFAULT_REGION"))
            .or_else(|| from_file("region"))
            .unwrap_or_else(|| "us-east-1".into());

        let num = |k: &str| -> Result<Option<u64>, ObjectError> {
            env_nonempty(env, k)
                .map(|v| {
                    parse_size(&v).ok_or_else(|| ObjectError::Config(format!("{k}={v:?} is not a number")))
                })
                .transpose()
        };
        let part_size = num("CKPTFS_S3_PART_SIZE")?.unwrap_or(8 << 20);
        let concurrency = num("CKPTFS_S3_CONCURRENCY")?.unwrap_or(4);
        let compression = match env_nonempty(env, "CKPTFS_S3_COMPRESS") {
            Some(c) => Compression::parse(&c)?,
            None => None,
        };
        let node = env_nonempty(env, "CKPTFS_NODE_ID")
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .map(|h| sanitize(h.trim()))
            .unwrap_or_else(|| "node".into());
        let c = ObjectConfig {
            bucket: bucket.to_string(),
            prefix,
            endpoint,
            region,
            access_key_id,
            secret_access_key,
            session_token,
            credentials_from,
            part_size,
            concurrency: concurrency as usize,
            compression,
            max_retries: num("CKPTFS_S3_MAX_RETRIES")?.unwrap_or(10) as usize,
            retry_backoff: Duration::from_millis(num("CKPTFS_S3_RETRY_BACKOFF_MS")?.unwrap_or(100)),
            retry_timeout: Duration::from_secs(num("CKPTFS_S3_RETRY_TIMEOUT")?.unwrap_or(180)),
            node,
        };
        c.check()?;
        Ok(c)
    }

    /// The level at `url` with the process environment.
    pub fn from_env(url: &str) -> Result<ObjectConfig, ObjectError> {
        ObjectConfig::from_url(url, &|k| std::env::var(k).ok())
    }

    /// Check the settings' ranges.
    pub fn check(&self) -> Result<(), ObjectError> {
        if self.part_size < MIN_PART || self.part_size > (5 << 30) {
            return Err(ObjectError::Config(format!(
                "part size {} out of range (5 MiB .. 5 GiB: S3's limits)",
                self.part_size
            )));
        }
        if !(1..=64).contains(&self.concurrency) {
            return Err(ObjectError::Config(format!(
                "concurrency {} out of range (1..64)",
                self.concurrency
            )));
        }
        if let Some(c) = &self.compression {
            if !(1..=19).contains(&c.level) || c.group == 0 || c.group > (256 << 20) {
                return Err(ObjectError::Config(format!(
                    "compression level {} / group {} out of range",
                    c.level, c.group
                )));
            }
        }
        if self.access_key_id.is_none() || self.secret_access_key.is_none() {
            return Err(ObjectError::Config(format!(
                "no credentials for s3://{}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a \
                 profile in ~/.aws/credentials (AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE)",
                self.bucket
            )));
        }
        Ok(())
    }

    /// `s3:BUCKET/PREFIX`: the level's name in messages and listings.
    pub fn name(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3:{}", self.bucket)
        } else {
            format!("s3:{}/{}", self.bucket, self.prefix)
        }
    }

    /// The endpoint as printed in messages (`https://s3.REGION.amazonaws.com` for AWS).
    pub fn endpoint_display(&self) -> String {
        self.endpoint
            .clone()
            .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", self.region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn url_env_and_secret_never_printed() {
        let e = env_of(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t-value"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9/"),
            ("AWS_REGION", "eu-west-1"),
            ("HOME", "/nonexistent"),
            ("CKPTFS_S3_COMPRESS", "zstd:5"),
        ]);
        let c = ObjectConfig::from_url("s3://ckptfs/run1/", &e).unwrap();
        assert_eq!(c.bucket, "ckptfs");
        assert_eq!(c.prefix, "run1");
        assert_eq!(c.name(), "s3:ckptfs/run1");
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(c.region, "eu-west-1");
        assert_eq!(c.compression.unwrap().level, 5);
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("s3cr3t-value"), "{dbg}");
    }

    #[test]
    fn credentials_file_profile() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("credentials");
        std::fs::write(
            &f,
            "[default]\naws_access_key_id = A\naws_secret_access_key = B\n[obj]\naws_access_key_id=K2\naws_secret_access_key=S2\n",
        )
        .unwrap();
        let fs = f.to_str().unwrap();
        let e = env_of(&[("AWS_SHARED_CREDENTIALS_FILE", fs), ("AWS_PROFILE", "obj")]);
        let c = ObjectConfig::from_url("s3://bkt", &e).unwrap();
        assert_eq!(c.access_key_id.as_deref(), Some("K2"));
        assert_eq!(c.secret_access_key.as_ref().unwrap().expose(), "S2");
        assert!(c.credentials_from.contains("[obj]"));
        assert_eq!(c.name(), "s3:bkt");
    }

    #[test]
    fn bad_urls_and_missing_credentials() {
        let e = env_of(&[("HOME", "/nonexistent")]);
        assert!(ObjectConfig::from_url("s3://Bad_Bucket/x", &e).is_err());
        assert!(ObjectConfig::from_url("s3://ok-bucket/a/../b", &e).is_err());
        let err = ObjectConfig::from_url("s3://ok-bucket/a", &e)
            .unwrap_err()
            .to_string();
        assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");
    }
}
