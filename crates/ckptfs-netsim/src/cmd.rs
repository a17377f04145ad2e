//! Running the system tools (`ip`, `tc`, `unshare`, `nsenter`, `mount`) with errors that
//! name the command and carry its stderr.

use crate::{NetsimError, Result};
use std::process::{Command, Output, Stdio};

/// The full command line, for messages.
pub(crate) fn describe(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Run `c` to completion; an exit status other than 0 is an error with its stderr.
pub(crate) fn run(c: &mut Command) -> Result<Output> {
    let out = c.stdin(Stdio::null()).output().map_err(|e| NetsimError::Io {
        what: format!("run {}", describe(c)),
        source: e,
    })?;
    if !out.status.success() {
        return Err(NetsimError::Command {
            cmd: describe(c),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// `prog args...` to completion.
pub(crate) fn sh(prog: &str, args: &[&str]) -> Result<Output> {
    run(Command::new(prog).args(args))
}

/// Best effort (teardown): errors are ignored.
pub(crate) fn quiet(prog: &str, args: &[&str]) {
    let _ = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Is `prog` on the PATH (or an existing absolute path)?
pub(crate) fn have(prog: &str) -> bool {
    if prog.contains('/') {
        return std::path::Path::new(prog).exists();
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}
