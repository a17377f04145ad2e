//! Parsing of setting values: sizes, booleans, counts, path prefixes and store names.
//! Every function returns the problem as text that quotes the value; the caller adds
//! which setting and source it came from.

/// The largest memory or spill size a setting accepts: 64 TiB (the store counts chunks
/// in 31 bits, and no node has more).
pub const MAX_SIZE: u64 = 64 << 40;

/// Longest store name (the segment is `/dev/shm/ckptfs.NAME`).
pub const MAX_STORE_NAME: usize = 64;

/// Parse a size: a decimal number, optionally with a fraction or an exponent (`1.5G`,
/// `1e6`), and an optional binary suffix K, M, G or T, also written KB/KiB etc., any
/// case (`1G` = 2^30). Fractions of a byte are dropped. Values that do not fit in 64
/// bits are "out of range".
pub fn parse_size(s: &str) -> Result<u64, String> {
    let lower = s.trim().to_ascii_lowercase();
    let t = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() && c != 'e' => {
            let shift = match c {
                'k' => 10,
                'm' => 20,
                'g' => 30,
                't' => 40,
                _ => return Err(format!("{s:?}: unknown size suffix {c:?} (use K, M, G or T)")),
            };
            (t[..i].trim(), shift)
        }
        _ => (t.trim(), 0u32),
    };
    let not_a_size = || format!("{s:?} is not a size (e.g. 4096, 64K, 512M, 1G)");
    if num.starts_with('-') {
        return Err(format!("{s:?}: a size cannot be negative"));
    }
    if num.is_empty() || !num.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err(not_a_size());
    }
    let out_of_range = || format!("{s:?} is out of range (a size is at most 2^64-1 bytes)");
    if num.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = num.parse().map_err(|_| out_of_range())?;
        return n.checked_mul(1u64 << shift).ok_or_else(out_of_range);
    }
    if !num.bytes().all(|b| b.is_ascii_digit() || b".e+-".contains(&b)) {
        return Err(not_a_size());
    }
    let n: f64 = num.parse().map_err(|_| not_a_size())?;
    let v = n * (1u64 << shift) as f64;
    // 2^64 as f64 is exact; anything at or above it does not fit.
    if !v.is_finite() || v >= 18_446_744_073_709_551_616.0 {
        return Err(out_of_range());
    }
    Ok(v as u64)
}

/// Parse a memory or spill size: [`parse_size`], at most [`MAX_SIZE`] (64 TiB).
pub fn parse_store_size(s: &str) -> Result<u64, String> {
    let too_big = || format!("{s:?} is out of range (at most 64T = {MAX_SIZE} bytes)");
    match parse_size(s) {
        Ok(n) if n <= MAX_SIZE => Ok(n),
        Ok(_) => Err(too_big()),
        Err(e) if e.contains("out of range") => Err(too_big()),
        Err(e) => Err(e),
    }
}

/// Parse a boolean: `1`, `true`, `yes`, `on` and `0`, `false`, `no`, `off`, any case.
/// Anything else (including the empty string) is an error.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!(
            "{s:?} is not a boolean (use 1/0, true/false, yes/no or on/off)"
        )),
    }
}

/// Parse a count: decimal digits only, within `min..=max`.
pub fn parse_count(s: &str, min: u64, max: u64) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a number"));
    }
    match t.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is out of range ({min} to {max})")),
    }
}

/// Parse mount prefixes: colon-separated absolute paths, each normalised (see
/// [`crate::path::normalize`]); empty parts are skipped and duplicates dropped. An empty
/// list means the default `/ckpt`. A relative prefix or `/` itself is an error.
pub fn parse_prefixes(s: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for p in s.split(':').filter(|p| !p.is_empty()) {
        if !p.starts_with('/') {
            return Err(format!("prefix {p:?} must be an absolute path"));
        }
        let n = crate::path::normalize(p);
        if n == "/" {
            return Err(format!("prefix {p:?}: the root cannot be a mount prefix"));
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    if out.is_empty() {
        out.push("/ckpt".to_string());
    }
    Ok(out)
}

/// Check a store name: 1 to 64 characters from `A-Z a-z 0-9 . _ -`, and not `.` or `..`
/// (the segment is `/dev/shm/ckptfs.NAME`, and the name also names runtime files).
pub fn check_store_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if name.is_empty() || name.len() > MAX_STORE_NAME || !ok_chars || name == "." || name == ".." {
        return Err(format!(
            "store name {name:?}: use 1-{MAX_STORE_NAME} characters from A-Z a-z 0-9 . _ - (not \".\" or \"..\")"
        ));
    }
    Ok(())
}

/// `s` as a JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes_fractions_and_exponents() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("64kb"), Ok(64 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size(" 1 T "), Ok(1 << 40));
        assert_eq!(parse_size("12b"), Ok(12));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1e6"), Ok(1_000_000));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        for bad in [
            "", "G", "12X", "12Q", "-1", "-1M", "abc", "1e", "inf", "nan", "1..2",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn huge_sizes_are_out_of_range_not_wrapped() {
        for big in [
            "1e30",
            "99999999999T",
            "18446744073709551616",
            "16777216T",
            "1e19K",
        ] {
            let e = parse_size(big).unwrap_err();
            assert!(e.contains("out of range"), "{big}: {e}");
        }
    }

    #[test]
    fn store_sizes_stop_at_64t() {
        assert_eq!(parse_store_size("64T"), Ok(64 << 40));
        assert!(parse_store_size("65T").unwrap_err().contains("at most 64T"));
        assert!(parse_store_size("1e30").unwrap_err().contains("out of range"));
    }

    #[test]
    fn booleans_have_one_rule() {
        for t in ["1", "true", "TRUE", "yes", "Yes", "on", "ON"] {
            assert_eq!(parse_bool(t), Ok(true), "{t}");
        }
        for f in ["0", "false", "False", "no", "NO", "off", "Off"] {
            assert_eq!(parse_bool(f), Ok(false), "{f}");
        }
        for bad in ["", "2", "y", "maybe", "truee"] {
            assert!(parse_bool(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn counts_are_digits_in_range() {
        assert_eq!(
            parse_count("100", 2, 10),
            Err("\"100\" is out of range (2 to 10)".into())
        );
        assert_eq!(parse_count(" 7 ", 2, 10), Ok(7));
        assert!(parse_count("abc", 2, 10).unwrap_err().contains("not a number"));
        assert!(parse_count("-3", 2, 10).unwrap_err().contains("not a number"));
        assert!(parse_count("99999999999999999999999", 2, 10)
            .unwrap_err()
            .contains("out of range"));
    }

    #[test]
    fn prefixes_are_absolute_normalised_and_deduplicated() {
        assert_eq!(
            parse_prefixes("/ckpt:/scratch/ck/").unwrap(),
            ["/ckpt", "/scratch/ck"]
        );
        assert_eq!(parse_prefixes("").unwrap(), ["/ckpt"]);
        assert_eq!(parse_prefixes("/a//b/.:/a/b").unwrap(), ["/a/b"]);
        assert!(parse_prefixes("rel/path").unwrap_err().contains("absolute"));
        assert!(parse_prefixes("/x/..").is_err());
    }

    #[test]
    fn store_names_dot_dotdot_slash_nul_empty_and_long_are_rejected() {
        for bad in [".", "..", "", "a/b", "a\0b", "../x", &"n".repeat(65), "a b"] {
            assert!(check_store_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["u0", "job.7", "a-b_c", "...", ".x", &"n".repeat(64)] {
            assert!(check_store_name(good).is_ok(), "{good:?} rejected");
        }
    }
}
