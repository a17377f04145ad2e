//! The crate's typed error.

use std::path::PathBuf;

/// Everything that can go wrong in the policy crate.
///
/// Every variant names what was wrong (the parameter, the file and line, the
/// plot) so that the CLI can print the error as is.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A parameter is out of its valid range.
    #[error("invalid parameter `{name}` = {value}: {reason}")]
    InvalidParameter {
        /// The parameter, spelled as the CLI flag without dashes.
        name: &'static str,
        /// The offending value as given.
        value: String,
        /// What the valid range is.
        reason: &'static str,
    },
    /// A parameter combination cannot work (e.g. a strategy using a level whose
    /// costs were not given).
    #[error("invalid setup: {0}")]
    InvalidSetup(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A failure-log line could not be parsed.
    #[error("{}:{line}: {message}", path.display())]
    FailureLog {
        /// The failure log.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// A costs file (own schema or `ckptfs bench --json` output) could not be used.
    #[error("costs file {}: {message}", path.display())]
    CostsFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// No TrueType font was found for the text in PNG plots.
    #[error(
        "no TrueType font for plot labels (tried {tried}); install Debian's fonts-dejavu-core, \
         set CKPTFS_FONT=/path/to/font.ttf, or pass --no-plot"
    )]
    NoFont {
        /// The paths that were tried.
        tried: String,
    },
    /// Drawing or encoding a PNG failed.
    #[error("plot {}: {message}", path.display())]
    Plot {
        /// The PNG file.
        path: PathBuf,
        /// The drawing backend's message.
        message: String,
    },
    /// The simulated job cannot make progress (e.g. restarts take longer than
    /// the time between failures).
    #[error("simulation does not terminate: {0}")]
    Diverged(String),
    /// JSON output could not be produced.
    #[error("JSON output: {0}")]
    Json(#[from] serde_json::Error),
}

/// Checks that `value` is a finite number `>= 0`.
pub(crate) fn non_negative(name: &'static str, value: f64) -> Result<(), PolicyError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(invalid(name, value, "must be a finite number >= 0"))
    }
}

/// Checks that `value` is a finite number `> 0`.
pub(crate) fn positive(name: &'static str, value: f64) -> Result<(), PolicyError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(invalid(name, value, "must be a finite number > 0"))
    }
}

/// Checks that `value` is a probability in `[0, 1]`.
pub(crate) fn probability(name: &'static str, value: f64) -> Result<(), PolicyError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(invalid(name, value, "must be between 0 and 1"))
    }
}

/// Builds an [`PolicyError::InvalidParameter`].
pub(crate) fn invalid(
    name: &'static str,
    value: impl std::fmt::Display,
    reason: &'static str,
) -> PolicyError {
    PolicyError::InvalidParameter {
        name,
        value: value.to_string(),
        reason,
    }
}
