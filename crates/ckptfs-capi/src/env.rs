//! Store options from the `CKPTFS_*` environment (used by `ckptfs_mount(prefix, NULL)`).
//!
//! The same variables as the `ckptfs` command line: CKPTFS_STORE, CKPTFS_MEM_SIZE,
//! CKPTFS_CHUNK_SIZE, CKPTFS_MAX_FILES, CKPTFS_SPILL_DIR, CKPTFS_SPILL_SIZE and
//! CKPTFS_PRIVATE. An unset or empty variable leaves the setting to the existing segment
//! (or the default when creating). The TOML configuration file is not read here.

use crate::error::{CapiError, Result};
use ckptfs_store::StoreOptions;
use std::path::PathBuf;

/// Parse a size: a decimal number with an optional binary suffix K, M, G or T (also
/// KB/KiB etc., any case). `1G` = 2^30.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits);
    if num.is_empty() {
        return Err(format!(
            "size {s:?}: expected a number with an optional K/M/G/T suffix"
        ));
    }
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "size {s:?}: unknown suffix {suffix:?} (use K, M, G or T)"
            ))
        }
    };
    let n: u64 = num.parse().map_err(|_| format!("size {s:?}: number too large"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {s:?}: too large"))
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "" | "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{s:?}: expected 1/0, true/false, yes/no or on/off")),
    }
}

/// Store options from the process environment.
pub fn options_from_env() -> Result<StoreOptions> {
    options_from(|k| std::env::var(k).ok())
}

/// Store options from a variable lookup (the environment, or a map in tests).
pub fn options_from(get: impl Fn(&str) -> Option<String>) -> Result<StoreOptions> {
    let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let bad = |k: &str, msg: String| CapiError::new(libc::EINVAL, format!("{k}: {msg}"));
    let size = |k: &str| -> Result<Option<u64>> {
        var(k).map(|v| parse_size(&v).map_err(|m| bad(k, m))).transpose()
    };
    let max_files = var("CKPTFS_MAX_FILES")
        .map(|v| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| bad("CKPTFS_MAX_FILES", format!("{v:?}: expected a file count")))
        })
        .transpose()?;
    Ok(StoreOptions {
        name: var("CKPTFS_STORE").unwrap_or_default(),
        mem_size: size("CKPTFS_MEM_SIZE")?,
        chunk_size: size("CKPTFS_CHUNK_SIZE")?,
        max_files,
        spill_dir: var("CKPTFS_SPILL_DIR").map(PathBuf::from),
        spill_size: size("CKPTFS_SPILL_SIZE")?,
        private: var("CKPTFS_PRIVATE")
            .map(|v| parse_bool(&v).map_err(|m| bad("CKPTFS_PRIVATE", m)))
            .transpose()?
            .unwrap_or(false),
        allow_foreign_owner: var("CKPTFS_ALLOW_FOREIGN_OWNER")
            .map(|v| parse_bool(&v).map_err(|m| bad("CKPTFS_ALLOW_FOREIGN_OWNER", m)))
            .transpose()?
            .unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size(" 1 T "), Ok(1 << 40));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn options_from_variables() {
        let m: HashMap<&str, &str> = [
            ("CKPTFS_STORE", "job7"),
            ("CKPTFS_MEM_SIZE", "8M"),
            ("CKPTFS_CHUNK_SIZE", "64K"),
            ("CKPTFS_MAX_FILES", "100"),
            ("CKPTFS_SPILL_DIR", "/tmp"),
            ("CKPTFS_SPILL_SIZE", "1G"),
            ("CKPTFS_PRIVATE", "yes"),
        ]
        .into_iter()
        .collect();
        let o = options_from(|k| m.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(o.name, "job7");
        assert_eq!(o.mem_size, Some(8 << 20));
        assert_eq!(o.chunk_size, Some(64 << 10));
        assert_eq!(o.max_files, Some(100));
        assert_eq!(o.spill_dir, Some(PathBuf::from("/tmp")));
        assert_eq!(o.spill_size, Some(1 << 30));
        assert!(o.private);
        let empty = options_from(|_| None).unwrap();
        assert!(empty.name.is_empty() && empty.mem_size.is_none() && !empty.private);
    }

    #[test]
    fn bad_variables_are_einval_naming_the_variable() {
        for (k, v) in [
            ("CKPTFS_MEM_SIZE", "lots"),
            ("CKPTFS_MAX_FILES", "-3"),
            ("CKPTFS_PRIVATE", "maybe"),
        ] {
            let e = options_from(|q| (q == k).then(|| v.to_string())).unwrap_err();
            assert_eq!(e.errno, libc::EINVAL);
            assert!(e.msg.contains(k), "{}", e.msg);
        }
    }
}
