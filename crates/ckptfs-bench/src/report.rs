//! Measurements, medians and output as a table or JSON.

use serde::Serialize;

/// One measured case.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// What was measured, e.g. `memcpy`, `ckptfs-write`.
    pub case: String,
    /// Processes writing at once.
    pub procs: usize,
    /// Bytes moved in one repetition (all processes together).
    pub bytes: u64,
    /// Seconds of each repetition.
    pub seconds: Vec<f64>,
    /// Further columns (chunk size, spill share, ratios ...).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Measurement {
    /// A measurement without extra columns.
    pub fn new(case: impl Into<String>, procs: usize, bytes: u64, seconds: Vec<f64>) -> Self {
        Measurement {
            case: case.into(),
            procs,
            bytes,
            seconds,
            extra: Default::default(),
        }
    }

    /// Add an extra column.
    pub fn with(mut self, key: &str, v: impl Into<serde_json::Value>) -> Self {
        self.extra.insert(key.into(), v.into());
        self
    }

    /// Median seconds over the repetitions.
    pub fn median_s(&self) -> f64 {
        median(&self.seconds)
    }

    /// Bandwidth in GB/s (10^9 bytes per second) from the median time.
    pub fn gbps(&self) -> f64 {
        let s = self.median_s();
        if s > 0.0 {
            self.bytes as f64 / s / 1e9
        } else {
            0.0
        }
    }
}

/// A benchmark's whole output.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Benchmark name (`store`, `preload`, `fuse`, `drain`).
    pub bench: String,
    /// Settings used (sizes, repetitions, machine).
    pub settings: serde_json::Value,
    /// Measured cases.
    pub results: Vec<Measurement>,
    /// Findings: targets met or missed, explanations.
    pub notes: Vec<String>,
}

#[derive(Serialize)]
struct JsonRow<'a> {
    #[serde(flatten)]
    m: &'a Measurement,
    seconds_median: f64,
    gbps: f64,
}

impl Report {
    /// Print as an aligned table (default) or a JSON document.
    pub fn print(&self, json: bool) {
        if json {
            let rows: Vec<JsonRow> = self
                .results
                .iter()
                .map(|m| JsonRow {
                    m,
                    seconds_median: m.median_s(),
                    gbps: m.gbps(),
                })
                .collect();
            let doc = serde_json::json!({
                "bench": self.bench,
                "settings": self.settings,
                "results": rows,
                "notes": self.notes,
            });
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            return;
        }
        println!("ckptfs bench {}  {}", self.bench, self.settings);
        let mut keys: Vec<String> = Vec::new();
        for m in &self.results {
            for k in m.extra.keys() {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
        }
        let mut header = vec![
            "case".to_string(),
            "procs".into(),
            "GB/s".into(),
            "median s".into(),
        ];
        header.extend(keys.iter().cloned());
        let mut rows = vec![header];
        for m in &self.results {
            let mut r = vec![
                m.case.clone(),
                m.procs.to_string(),
                format!("{:.2}", m.gbps()),
                format!("{:.4}", m.median_s()),
            ];
            for k in &keys {
                r.push(match m.extra.get(k) {
                    Some(serde_json::Value::Number(n)) if n.is_f64() => {
                        format!("{:.3}", n.as_f64().unwrap_or(0.0))
                    }
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => String::new(),
                });
            }
            rows.push(r);
        }
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
            .collect();
        for (n, r) in rows.iter().enumerate() {
            let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
            println!("{}", line.join("  "));
            if n == 0 {
                println!(
                    "{}",
                    widths
                        .iter()
                        .map(|w| "-".repeat(*w))
                        .collect::<Vec<_>>()
                        .join("  ")
                );
            }
        }
        for n in &self.notes {
            println!("note: {n}");
        }
    }
}

/// Median of a slice (0 for an empty one).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// A short description of this machine for the settings block.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    format!("{cpus} CPUs, {model}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn gbps_uses_median() {
        let m = Measurement::new("x", 1, 2_000_000_000, vec![1.0, 100.0, 2.0]);
        assert!((m.gbps() - 1.0).abs() < 1e-9);
    }
}
