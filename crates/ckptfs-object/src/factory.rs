//! The object level in a level registry: [`ObjectFactory`] opens `s3:bucket/prefix`
//! from the settings' `[levels]` options.
//!
//! Options (all optional; each overrides the environment variable named):
//! `endpoint` (`AWS_ENDPOINT_URL`), `region` (`AWS_REGION`), `profile` (`AWS_PROFILE`),
//! `part_size` (`CKPTFS_S3_PART_SIZE`), `concurrency` (`CKPTFS_S3_CONCURRENCY`),
//! `compress` (`CKPTFS_S3_COMPRESS`), `max_retries` (`CKPTFS_S3_MAX_RETRIES`),
//! `node` (`CKPTFS_NODE_ID`). Keys are refused as options: credentials come from the
//! environment or the AWS credentials file only, so a settings file never holds a secret.

use crate::{ObjectConfig, ObjectError, ObjectLevel};
use ckptfs_level::{Level, LevelError, LevelFactory, LevelId};
use std::collections::BTreeMap;
use std::sync::Arc;

const OPTIONS: [(&str, &str); 8] = [
    ("endpoint", "AWS_ENDPOINT_URL"),
    ("region", "AWS_REGION"),
    ("profile", "AWS_PROFILE"),
    ("part_size", "CKPTFS_S3_PART_SIZE"),
    ("concurrency", "CKPTFS_S3_CONCURRENCY"),
    ("compress", "CKPTFS_S3_COMPRESS"),
    ("max_retries", "CKPTFS_S3_MAX_RETRIES"),
    ("node", "CKPTFS_NODE_ID"),
];

/// Opens `s3:bucket/prefix` levels.
#[derive(Debug, Default, Clone, Copy)]
pub struct ObjectFactory;

impl ObjectFactory {
    /// The configuration of `id` with `options` over `env`.
    pub fn config(
        id: &LevelId,
        options: &BTreeMap<String, String>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ObjectConfig, ObjectError> {
        for k in options.keys() {
            if !OPTIONS.iter().any(|(o, _)| o == k) {
                let known: Vec<&str> = OPTIONS.iter().map(|(o, _)| *o).collect();
                return Err(ObjectError::Config(format!(
                    "level {id}: unknown option {k:?} (known: {}; keys come from AWS_* or ~/.aws/credentials)",
                    known.join(", ")
                )));
            }
        }
        let over = |k: &str| {
            OPTIONS
                .iter()
                .find(|(_, var)| *var == k)
                .and_then(|(o, _)| options.get(*o).cloned())
                .or_else(|| env(k))
        };
        ObjectConfig::from_url(&format!("s3://{}", id.instance), &over)
    }
}

impl LevelFactory for ObjectFactory {
    fn kind(&self) -> &'static str {
        "s3"
    }

    fn open(&self, id: &LevelId, options: &BTreeMap<String, String>) -> Result<Arc<dyn Level>, LevelError> {
        let cfg = ObjectFactory::config(id, options, &|k| std::env::var(k).ok())?;
        Ok(Arc::new(ObjectLevel::new(cfg)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_override_the_environment_and_keys_are_refused() {
        let env = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("K".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("S".to_string()),
            "AWS_ENDPOINT_URL" => Some("http://127.0.0.1:1".to_string()),
            "HOME" => Some("/nonexistent".to_string()),
            _ => None,
        };
        let id = LevelId::parse("s3:ckptfs/run1").unwrap();
        let mut o = BTreeMap::new();
        o.insert("endpoint".to_string(), "http://127.0.0.1:2".to_string());
        o.insert("compress".to_string(), "zstd".to_string());
        let c = ObjectFactory::config(&id, &o, &env).unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:2"));
        assert_eq!((c.bucket.as_str(), c.prefix.as_str()), ("ckptfs", "run1"));
        assert!(c.compression.is_some());
        o.insert("secret_access_key".to_string(), "x".to_string());
        let e = ObjectFactory::config(&id, &o, &env).unwrap_err().to_string();
        assert!(e.contains("unknown option") && !e.contains("\"x\""), "{e}");
    }
}
