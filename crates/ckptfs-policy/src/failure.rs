//! Failure model: per-node Weibull renewal processes or a failure log, and the
//! node-matching strategies that pair each source node with a backup node.

use crate::error::{positive, PolicyError};
use crate::math::gamma;
use crate::rng::Rng;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A Weibull distribution given by its shape `k` and scale `λ`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Weibull {
    /// Shape `k` (< 1: decreasing failure rate, as observed on HPC systems).
    pub shape: f64,
    /// Scale `λ` in seconds.
    pub scale: f64,
}

impl Weibull {
    /// The Weibull distribution with the given mean (the MTBF) and shape:
    /// `λ = mean / Γ(1 + 1/k)`.
    pub fn from_mean(mean: f64, shape: f64) -> Result<Self, PolicyError> {
        positive("mtbf", mean)?;
        positive("shape", shape)?;
        let scale = mean / gamma(1.0 + 1.0 / shape);
        positive("shape", scale).map_err(|_| crate::error::invalid("shape", shape, "too small"))?;
        Ok(Weibull { shape, scale })
    }

    /// Mean `λ·Γ(1 + 1/k)`.
    pub fn mean(&self) -> f64 {
        self.scale * gamma(1.0 + 1.0 / self.shape)
    }

    /// Variance `λ²·[Γ(1 + 2/k) − Γ(1 + 1/k)²]`.
    pub fn variance(&self) -> f64 {
        let g1 = gamma(1.0 + 1.0 / self.shape);
        let g2 = gamma(1.0 + 2.0 / self.shape);
        self.scale * self.scale * (g2 - g1 * g1)
    }

    /// One sample by inversion: `λ·(−ln(1 − U))^{1/k}`.
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        let u = rng.uniform();
        self.scale * (-(1.0 - u).ln()).powf(1.0 / self.shape)
    }
}

/// How the source (job) nodes are paired with backup (partner) nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Matching {
    /// Mutual pairs across the two halves of the machine (node `i` and
    /// `i + N/2`, like REMEM's two rack groups): with a job on at most half the
    /// nodes, no backup node runs the job.
    Mirror,
    /// Each node backs up on the next one (`i → i+1 mod N`): with the job on
    /// consecutive nodes, most backups are job nodes themselves.
    Ring,
}

impl Matching {
    /// The backup node of `node` in a machine of `nodes` nodes (`nodes >= 2`,
    /// even for [`Matching::Mirror`]).
    pub fn backup(self, node: u32, nodes: u32) -> u32 {
        match self {
            Matching::Mirror => {
                // Callers check that `nodes` is even (see `SimConfig::validate`).
                let half = nodes / 2;
                if node < half {
                    node + half
                } else {
                    node - half
                }
            }
            Matching::Ring => (node + 1) % nodes,
        }
    }
}

/// One failure of one node.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FailureEvent {
    /// Time in seconds since the job started.
    pub time: f64,
    /// The node.
    pub node: u32,
    /// Hard failure (node lost, its memory with it) or soft (the job's
    /// processes die, node memory survives).
    pub hard: bool,
    /// Uniform number in `[0, 1)` that decides whether a predictor of recall
    /// `r` foresaw this failure (`mark < r`): the same failure is then
    /// predicted by every predictor whose recall is high enough.
    pub mark: f64,
}

/// Per-node Weibull failures, generated lazily up to a horizon; the events of
/// node `i` depend only on the seed, the run and `i`, so a longer horizon
/// extends the same history.
pub(crate) fn weibull_events(
    dist: &Weibull,
    soft_fraction: f64,
    nodes: &[u32],
    seed: u64,
    run: u64,
    horizon: f64,
) -> Vec<FailureEvent> {
    let mut out = Vec::new();
    for &node in nodes {
        let mut rng = Rng::stream(seed, &[run, u64::from(node), 1]);
        let mut t = 0.0;
        loop {
            t += dist.sample(&mut rng);
            let mark = rng.uniform();
            let kind = rng.uniform();
            if t > horizon {
                break;
            }
            out.push(FailureEvent {
                time: t,
                node,
                hard: kind >= soft_fraction,
                mark,
            });
        }
    }
    out.sort_by(|a, b| a.time.total_cmp(&b.time).then(a.node.cmp(&b.node)));
    out
}

/// A failure log read from a file.
///
/// Format: one failure per line, `node time [kind]`, separated by spaces,
/// tabs or commas; `node` is an index `0..N`, `time` a duration since the job
/// start (`3600`, `1.5h`, `90m`, `2d`; a bare number is seconds), `kind` is
/// `hard` (default) or `soft`. Blank lines and lines starting with `#` are
/// ignored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureLog {
    /// Where it was read from.
    pub path: PathBuf,
    /// The failures, sorted by time.
    pub events: Vec<FailureEvent>,
}

impl FailureLog {
    /// Reads and parses a failure log for a machine of `nodes` nodes. Marks for
    /// the predictor are drawn from `seed`.
    pub fn read(path: &Path, nodes: u32, seed: u64) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path, nodes, seed)
    }

    /// Parses failure-log text (see the type docs).
    pub fn parse(text: &str, path: &Path, nodes: u32, seed: u64) -> Result<Self, PolicyError> {
        let err = |line: usize, message: String| PolicyError::FailureLog {
            path: path.to_path_buf(),
            line,
            message,
        };
        let mut rng = Rng::stream(seed, &[u64::MAX, 2]);
        let mut events = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|f| !f.is_empty())
                .collect();
            if fields.len() < 2 || fields.len() > 3 {
                return Err(err(
                    i + 1,
                    format!("expected `node time [hard|soft]`, got `{line}`"),
                ));
            }
            let node: u32 = fields[0]
                .parse()
                .map_err(|_| err(i + 1, format!("node `{}` is not an index", fields[0])))?;
            if node >= nodes {
                return Err(err(
                    i + 1,
                    format!("node {node} is out of range for --nodes {nodes}"),
                ));
            }
            let time =
                crate::units::parse_duration(fields[1]).map_err(|m| err(i + 1, format!("time: {m}")))?;
            let hard = match fields.get(2).map(|s| s.to_ascii_lowercase()) {
                None => true,
                Some(k) if k == "hard" => true,
                Some(k) if k == "soft" => false,
                Some(k) => return Err(err(i + 1, format!("kind `{k}` is not hard or soft"))),
            };
            events.push(FailureEvent {
                time,
                node,
                hard,
                mark: rng.uniform(),
            });
        }
        events.sort_by(|a, b| a.time.total_cmp(&b.time).then(a.node.cmp(&b.node)));
        Ok(FailureLog {
            path: path.to_path_buf(),
            events,
        })
    }

    /// Time of the last failure (0 for an empty log).
    pub fn span(&self) -> f64 {
        self.events.last().map_or(0.0, |e| e.time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weibull_scale_from_mean() {
        let w = Weibull::from_mean(7668.0 * 3600.0, 0.7).unwrap();
        assert!((w.mean() / 3600.0 - 7668.0).abs() < 1e-6);
        // Γ(1 + 1/0.7) = 1.2658235…
        assert!((w.scale / 3600.0 - 7668.0 / 1.265_823_506_057_283).abs() < 1e-3);
    }

    #[test]
    fn weibull_sample_mean_and_variance_match_theory() {
        // 400k samples; the variance of a Weibull with k = 0.7 has heavy
        // tails, so its tolerance is wider than the mean's.
        for &(shape, tol_mean, tol_var) in &[(0.7, 0.01, 0.06), (1.0, 0.01, 0.03), (2.0, 0.01, 0.02)] {
            let w = Weibull::from_mean(100.0, shape).unwrap();
            let mut rng = Rng::new(12345);
            let n = 400_000;
            let xs: Vec<f64> = (0..n).map(|_| w.sample(&mut rng)).collect();
            let mean = xs.iter().sum::<f64>() / n as f64;
            let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64;
            assert!(
                (mean / w.mean() - 1.0).abs() < tol_mean,
                "shape {shape}: mean {mean} vs {}",
                w.mean()
            );
            assert!(
                (var / w.variance() - 1.0).abs() < tol_var,
                "shape {shape}: var {var} vs {}",
                w.variance()
            );
        }
        // Shape 1 is the exponential: variance = mean².
        let e = Weibull::from_mean(100.0, 1.0).unwrap();
        assert!((e.variance() - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn longer_horizon_extends_the_same_history() {
        let w = Weibull::from_mean(1000.0, 0.7).unwrap();
        let a = weibull_events(&w, 0.2, &[0, 1, 5], 9, 0, 5_000.0);
        let b = weibull_events(&w, 0.2, &[0, 1, 5], 9, 0, 50_000.0);
        assert!(!a.is_empty());
        assert_eq!(a[..], b[..a.len()]);
    }

    #[test]
    fn matching_pairs() {
        assert_eq!(Matching::Mirror.backup(3, 8), 7);
        assert_eq!(Matching::Mirror.backup(7, 8), 3);
        assert_eq!(Matching::Ring.backup(7, 8), 0);
        assert_eq!(Matching::Ring.backup(2, 8), 3);
    }

    #[test]
    fn failure_log_parses_and_rejects_with_line_numbers() {
        let p = Path::new("log.txt");
        let log = FailureLog::parse("# node time kind\n3 2h soft\n1,3600\n\n", p, 4, 1).unwrap();
        assert_eq!(log.events.len(), 2);
        assert_eq!((log.events[0].node, log.events[0].hard), (1, true));
        assert_eq!(log.events[1].time, 7200.0);
        assert!(!log.events[1].hard);
        let e = FailureLog::parse("1 10\n9 20\n", p, 4, 1).unwrap_err();
        assert_eq!(e.to_string(), "log.txt:2: node 9 is out of range for --nodes 4");
        let e = FailureLog::parse("1 -5\n", p, 4, 1).unwrap_err();
        assert!(e.to_string().starts_with("log.txt:1: time"), "{e}");
        let e = FailureLog::parse("1 5 maybe\n", p, 4, 1).unwrap_err();
        assert!(e.to_string().contains("maybe"), "{e}");
    }
}
