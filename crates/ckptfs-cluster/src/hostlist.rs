//! Slurm's compressed host lists: `n[1-3,7],m01` -> `n1 n2 n3 n7 m01`.
//!
//! A list is a comma-separated sequence of items; an item is a host name in which each
//! `[...]` holds comma-separated numbers or ranges `a-b`. Zero padding is kept (`n[08-10]`
//! gives `n08 n09 n10`), several bracket groups multiply (`a[1-2]b[1-2]`). Plain host
//! lists (`CKPTFS_NODES`) may also separate items with spaces.

use crate::{ClusterError, Result};

/// Largest number of hosts one list may expand to.
pub const MAX_HOSTS: usize = 65536;

/// Expands a Slurm host list (commas or whitespace between items).
pub fn expand(list: &str) -> Result<Vec<String>> {
    let err = |why: String| ClusterError::HostList {
        list: list.to_string(),
        why,
    };
    let mut out = Vec::new();
    for item in split_items(list).map_err(&err)? {
        expand_item(item, &mut out).map_err(&err)?;
        if out.len() > MAX_HOSTS {
            return Err(err(format!("more than {MAX_HOSTS} hosts")));
        }
    }
    if out.is_empty() {
        return Err(err("no hosts".into()));
    }
    Ok(out)
}

/// Splits at commas and whitespace outside brackets.
fn split_items(list: &str) -> std::result::Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err("nested '['".into()),
            ']' if depth == 1 => depth = 0,
            ']' => return Err("']' without '['".into()),
            ',' | ' ' | '\t' | '\n' if depth == 0 => {
                if i > start {
                    items.push(&list[start..i]);
                }
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("'[' without ']'".into());
    }
    if list.len() > start {
        items.push(&list[start..]);
    }
    Ok(items)
}

fn expand_item(item: &str, out: &mut Vec<String>) -> std::result::Result<(), String> {
    let Some(open) = item.find('[') else {
        check_host(item)?;
        out.push(item.to_string());
        return Ok(());
    };
    let close = item[open..]
        .find(']')
        .map(|c| c + open)
        .ok_or("'[' without ']'")?;
    let (prefix, body, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    for part in body.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let bad = || format!("{part:?} in [{body}] is not a number or range a-b");
        if lo.is_empty() || !lo.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if hi.is_empty() || !hi.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
        if a > b {
            return Err(format!("range {part:?} goes down"));
        }
        if b - a >= MAX_HOSTS as u64 {
            return Err(format!("range {part:?} has more than {MAX_HOSTS} hosts"));
        }
        let width = lo.len();
        for v in a..=b {
            let mut expanded = Vec::new();
            expand_item(&format!("{prefix}{v:0width$}{rest}"), &mut expanded)?;
            out.extend(expanded);
            if out.len() > MAX_HOSTS {
                return Err(format!("more than {MAX_HOSTS} hosts"));
            }
        }
    }
    Ok(())
}

fn check_host(h: &str) -> std::result::Result<(), String> {
    let ok = !h.is_empty()
        && h.len() <= 253
        && !h.starts_with(['-', '.'])
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(format!("{h:?} is not a host name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_brackets_ranges_padding_and_plain_names() {
        assert_eq!(expand("n[1-3,7],m01").unwrap(), ["n1", "n2", "n3", "n7", "m01"]);
        assert_eq!(expand("n[08-10]").unwrap(), ["n08", "n09", "n10"]);
        assert_eq!(expand("a[1-2]b[3-4]").unwrap(), ["a1b3", "a1b4", "a2b3", "a2b4"]);
        assert_eq!(expand("x y,z").unwrap(), ["x", "y", "z"]);
    }

    #[test]
    fn malformed_lists_are_refused() {
        for bad in [
            "",
            "n[1-",
            "n[3-1]",
            "n[a]",
            "n]",
            "n[[1]]",
            "n[1-99999999]",
            "-x",
        ] {
            assert!(expand(bad).is_err(), "{bad:?} accepted");
        }
    }
}
