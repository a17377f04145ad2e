//! The Prometheus text exposition format, version 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>).
//!
//! ```text
//! # HELP ckptfs_store_used_bytes Bytes of the node store in use, per tier.
//! # TYPE ckptfs_store_used_bytes gauge
//! ckptfs_store_used_bytes{tier="memory"} 1048576
//! ckptfs_store_used_bytes{tier="spill"} 0
//! ```
//!
//! Every family is written once, with its HELP and TYPE lines before its samples; a
//! counter's name ends in `_total`. Label values are escaped (`\\`, `\"`, `\n`), HELP
//! text too (`\\`, `\n`), so a peer or file name cannot forge a line.

use crate::{MetricsError, Result};
use std::collections::BTreeSet;
use std::fmt::Write;

/// The type of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (resets when the process restarts); name ends in `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// One exposition: the text of a `/metrics` answer, built family by family.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
    families: BTreeSet<String>,
}

/// A family being written: add its samples.
#[derive(Debug)]
pub struct Family<'a> {
    exp: &'a mut Exposition,
    name: String,
}

/// Whether `s` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub fn valid_metric_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// Whether `s` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*`, not starting `__`).
pub fn valid_label_name(s: &str) -> bool {
    let mut b = s.bytes();
    !s.starts_with("__")
        && matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A sample value as the format writes it: integers without a fraction, `NaN`, `+Inf`,
/// `-Inf`.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Start the family `name` of `kind` with its HELP text. Refused: an invalid name, a
    /// counter not ending in `_total`, a family already written.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> Result<Family<'_>> {
        if !valid_metric_name(name) {
            return Err(MetricsError::InvalidName(name.to_string()));
        }
        if kind == Kind::Counter && !name.ends_with("_total") {
            return Err(MetricsError::CounterName(name.to_string()));
        }
        if !self.families.insert(name.to_string()) {
            return Err(MetricsError::Duplicate(name.to_string()));
        }
        let _ = write!(self.out, "# HELP {name} ");
        escape_help(&mut self.out, help);
        let _ = writeln!(self.out, "\n# TYPE {name} {}", kind.name());
        Ok(Family {
            exp: self,
            name: name.to_string(),
        })
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) -> Result<()> {
        self.family(name, kind, help)?.sample(&[], value)?;
        Ok(())
    }

    /// The text so far.
    pub fn as_str(&self) -> &str {
        &self.out
    }

    /// The finished text.
    pub fn finish(self) -> String {
        self.out
    }
}

impl Family<'_> {
    /// One sample with these labels (label names checked, values escaped).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) -> Result<&mut Self> {
        for (k, _) in labels {
            if !valid_label_name(k) {
                return Err(MetricsError::InvalidName((*k).to_string()));
            }
        }
        let out = &mut self.exp.out;
        out.push_str(&self.name);
        if !labels.is_empty() {
            out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(k);
                out.push_str("=\"");
                escape_label_value(out, v);
                out.push('"');
            }
            out.push('}');
        }
        out.push(' ');
        out.push_str(&format_value(value));
        out.push('\n');
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_has_help_type_and_escaped_samples() {
        let mut e = Exposition::new();
        e.family("ckptfs_x_bytes", Kind::Gauge, "Some \\ help\nsecond line")
            .unwrap()
            .sample(&[("peer", "a\"b\\c\nd")], 1.5)
            .unwrap()
            .sample(&[], 3.0)
            .unwrap();
        assert_eq!(
            e.finish(),
            "# HELP ckptfs_x_bytes Some \\\\ help\\nsecond line\n# TYPE ckptfs_x_bytes gauge\n\
             ckptfs_x_bytes{peer=\"a\\\"b\\\\c\\nd\"} 1.5\nckptfs_x_bytes 3\n"
        );
    }

    #[test]
    fn bad_names_duplicates_and_counters_without_total_are_refused() {
        let mut e = Exposition::new();
        assert!(matches!(
            e.family("1abc", Kind::Gauge, ""),
            Err(MetricsError::InvalidName(_))
        ));
        assert!(matches!(
            e.family("a-b", Kind::Gauge, ""),
            Err(MetricsError::InvalidName(_))
        ));
        assert!(matches!(
            e.family("ckptfs_x", Kind::Counter, ""),
            Err(MetricsError::CounterName(_))
        ));
        e.family("ckptfs_x_total", Kind::Counter, "").unwrap();
        assert!(matches!(
            e.family("ckptfs_x_total", Kind::Counter, ""),
            Err(MetricsError::Duplicate(_))
        ));
        let mut f = e.family("ckptfs_y", Kind::Gauge, "").unwrap();
        assert!(matches!(
            f.sample(&[("__x", "v")], 1.0),
            Err(MetricsError::InvalidName(_))
        ));
        assert!(matches!(
            f.sample(&[("a b", "v")], 1.0),
            Err(MetricsError::InvalidName(_))
        ));
    }

    #[test]
    fn values_are_formatted_as_the_format_wants() {
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(1e12), "1000000000000");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(1e300).parse::<f64>().unwrap(), 1e300);
    }
}
