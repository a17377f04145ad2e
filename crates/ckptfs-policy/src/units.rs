//! Parsing and printing of durations for the CLI and the files it reads. Sizes are
//! parsed by the one size parser of the settings, [`ckptfs_settings::parse_size`]
//! (binary suffixes: `4GB` = `4GiB` = 4 * 2^30 bytes).

/// Parses a duration: a non-negative number with an optional unit `s`, `m`
/// (or `min`), `h`, `d`; a bare number is seconds. Returns seconds.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = split_unit(
        t,
        &[
            ("min", 60.0),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
            ("d", 86_400.0),
        ],
    );
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (examples: 90, 90s, 30m, 2h, 1.5d)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("`{s}` must be a finite duration >= 0"));
    }
    Ok(v * mult)
}

fn split_unit<'a>(t: &'a str, units: &[(&str, f64)]) -> (&'a str, f64) {
    for (u, m) in units {
        if let Some(n) = t.strip_suffix(u) {
            // Avoid treating the exponent of "1e5" or a bare number as a unit.
            if !n.is_empty() && !n.ends_with(['e', 'E']) {
                return (n, *m);
            }
        }
    }
    (t, 1.0)
}

/// Prints seconds in a readable unit (`8.0 s`, `2.17 min`, `2.00 h`, `319.5 d`).
pub fn fmt_duration(secs: f64) -> String {
    if !secs.is_finite() {
        return format!("{secs}");
    }
    let a = secs.abs();
    if a < 120.0 {
        format!("{secs:.1} s")
    } else if a < 2.0 * 3600.0 {
        format!("{:.2} min", secs / 60.0)
    } else if a < 2.0 * 86_400.0 {
        format!("{:.2} h", secs / 3600.0)
    } else {
        format!("{:.1} d", secs / 86_400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), 90.0);
        assert_eq!(parse_duration("2h").unwrap(), 7200.0);
        assert_eq!(parse_duration("30m").unwrap(), 1800.0);
        assert_eq!(parse_duration("30min").unwrap(), 1800.0);
        assert_eq!(parse_duration("1.5d").unwrap(), 129_600.0);
        assert_eq!(parse_duration("7668h").unwrap(), 7668.0 * 3600.0);
        assert_eq!(parse_duration("1e3").unwrap(), 1000.0);
        assert!(parse_duration("-1h").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("2 weeks").is_err());
    }
}
