//! Store options from the `CKPTFS_*` environment (used by `ckptfs_mount(prefix, NULL)`),
//! resolved by `ckptfs-settings` with the same rules as the `ckptfs` command line and the
//! shim: CKPTFS_STORE, CKPTFS_MEM_SIZE, CKPTFS_CHUNK_SIZE, CKPTFS_MAX_FILES,
//! CKPTFS_SPILL_DIR, CKPTFS_SPILL_SIZE and CKPTFS_PRIVATE. An unset or blank variable
//! leaves the setting to the existing segment (or the default when creating); an invalid
//! one is EINVAL naming the variable. The TOML configuration file is not read here.

use crate::error::{CapiError, Result};
use ckptfs_settings::{Settings, Source};
use ckptfs_store::StoreOptions;

pub use ckptfs_settings::parse_size;

/// The settings from a variable lookup; EINVAL naming the variable when one is invalid.
pub fn settings_from(get: &dyn Fn(&str) -> Option<String>) -> Result<Settings> {
    ckptfs_settings::from_env(get).map_err(|e| CapiError::new(e.errno().get(), e.to_string()))
}

/// Store options from the process environment.
pub fn options_from_env() -> Result<StoreOptions> {
    options_from(|k| std::env::var(k).ok())
}

/// Store options from a variable lookup (the environment, or a map in tests).
pub fn options_from(get: impl Fn(&str) -> Option<String>) -> Result<StoreOptions> {
    let s = settings_from(&get)?;
    let default_name = s.row("store").is_some_and(|r| r.source == Source::Default);
    let mut o = StoreOptions::from(s.store);
    if default_name {
        // Left to the store (which uses the same default).
        o.name.clear();
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;

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
