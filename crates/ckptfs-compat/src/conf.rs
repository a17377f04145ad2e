//! Configuration files of the original libraries, read as key/value pairs.
//!
//! SCR (`SCR_CONF_FILE`, else `PREFIX/.scrconf`): one parameter per line, `KEY=VALUE`
//! (also `KEY VALUE`); a multi-item line (`STORE=/dev/shm COUNT=1`) is read as its first
//! pair; `#` starts a comment. VeloC (the file given to `VELOC_Init`): `key = value`
//! lines, `#` or `;` comments, `[section]` headers skipped. Keys are kept as written;
//! the libraries compare them case-insensitively (SCR's are upper case, VeloC's lower).

use crate::error::{CompatError, Result};
use std::path::Path;

/// The pairs of a configuration text, in order (a later pair overrides an earlier one
/// when looked up with [`lookup`]).
pub fn parse(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = match line.find(['#', ';']) {
            Some(i) => &line[..i],
            None => line,
        }
        .trim();
        if line.is_empty() || line.starts_with('[') {
            continue;
        }
        let (k, v) = match line.split_once('=') {
            Some((k, v)) if !k.trim().contains(char::is_whitespace) => {
                // A multi-item line: the value ends at the next KEY=.
                let v = v.trim();
                let is_pair = |w: &str| {
                    w.split_once('=').is_some_and(|(k, _)| {
                        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    })
                };
                let v = match v.split_whitespace().position(is_pair) {
                    Some(n) if n > 0 => v.split_whitespace().take(n).collect::<Vec<_>>().join(" "),
                    _ => v.to_string(),
                };
                (k.trim(), v)
            }
            _ => match line.split_once(char::is_whitespace) {
                Some((k, v)) => (k.trim(), v.trim().to_string()),
                None => continue,
            },
        };
        let v = v.trim_matches('"').to_string();
        out.push((k.to_string(), v));
    }
    out
}

/// Read and parse a configuration file; a missing file is an error naming it.
pub fn read(path: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CompatError::io(format!("config file {}", path.display()), e))?;
    Ok(parse(&text))
}

/// The last value of `key` (case-insensitive) in `pairs`.
pub fn lookup<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.as_str())
}

/// A count (non-negative integer) setting; a bad value is an error naming the key.
pub fn count(key: &str, v: &str) -> Result<u32> {
    v.trim()
        .parse::<u32>()
        .map_err(|_| CompatError::Invalid(format!("{key}={v}: not a non-negative integer")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scr_and_veloc_lines() {
        let p = parse("# c\nSCR_FLUSH=4\nSCR_PREFIX /pfs/x # tail\nSTORE=/dev/shm COUNT=1\n\n[sec]\nscratch = /tmp/s\nmode=async ; c\n");
        assert_eq!(lookup(&p, "scr_flush"), Some("4"));
        assert_eq!(lookup(&p, "SCR_PREFIX"), Some("/pfs/x"));
        assert_eq!(lookup(&p, "STORE"), Some("/dev/shm"));
        assert_eq!(lookup(&p, "scratch"), Some("/tmp/s"));
        assert_eq!(lookup(&p, "mode"), Some("async"));
        assert_eq!(lookup(&p, "COUNT"), None);
        assert_eq!(
            lookup(&parse("SCR_PREFIX=\"/a/=/b\""), "SCR_PREFIX"),
            Some("/a/=/b")
        );
        assert!(count("K", "x").is_err());
        assert_eq!(count("K", " 3 ").unwrap(), 3);
    }
}
