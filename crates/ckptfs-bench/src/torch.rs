//! `ckptfs bench torch`: the training stall of `dcp.save` through `ckptfs.torch.Writer`
//! vs torch's `FileSystemWriter` (/dev/shm, local disk) and a plain memcpy, and load
//! times from the store, a partner node and the PFS directory.
//!
//! The measurement is Python (`scripts/bench-torch.py`, it drives torch); this module
//! finds the checkout's virtual environment and the script, checks that they work, and
//! runs the script with the options given here, its output (table or `--json`) passed
//! through. The `ckptfs` binary running this is handed to the script (`CKPTFS_BIN`) for
//! the partner and PFS cases.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Options of `ckptfs bench torch`.
#[derive(clap::Args, Debug, Clone)]
pub struct TorchBenchArgs {
    /// State-dict sizes (K/M/G, comma separated). The 16G does not fit a
    /// 24 GiB machine (state dict + store + load destination = 3x): docs/benchmarks.md.
    #[arg(long, default_value = "1G,4G")]
    pub sizes: String,
    /// Repetitions per case (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Directory on local disk for FileSystemWriter and the PFS directory.
    #[arg(long, default_value = "/var/tmp")]
    pub disk: PathBuf,
    /// Measure loads from a partner node and from the PFS for sizes up to this (K/M/G;
    /// 0: skip). Two node daemons on 127.0.0.1 (`cluster init --local 2`).
    #[arg(long, default_value = "1G")]
    pub remote_max: String,
    /// First of two free TCP ports on 127.0.0.1 for the partner case's daemons.
    #[arg(long, default_value_t = 47310)]
    pub port: u16,
    /// The Python interpreter with ckptfs and torch installed (default: `.venv/bin/python`
    /// of the checkout this binary was built in, or of the current directory).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// The measuring script (default: `scripts/bench-torch.py` of that checkout).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Prefix of the store, job and temporary directory names (a process id is added).
    #[arg(long, default_value = "bench-torch")]
    pub tag: String,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// 2: the multi-node case (root): two simulated nodes (network namespaces, each its
    /// own /dev/shm, store and node daemon), the stall of dcp.save and dcp.async_save on
    /// node1 and the time until every file is protected on node2, per link rate of
    /// --links (`scripts/bench-torch-nodes.py`). 0: the one-node benchmark.
    #[arg(long, default_value_t = 0)]
    pub nodes: usize,
    /// Link rates of the multi-node case (tc tbf on the veths), comma separated.
    #[arg(long, default_value = "1gbit,10gbit")]
    pub links: String,
}

/// Checkout roots to look in: the one holding this binary (`target/release/ckptfs`)
/// and the current directory.
fn roots() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(root) = exe.ancestors().nth(3) {
            out.push(root.to_path_buf());
        }
    }
    if let Ok(cwd) = std::env::current_dir() {
        out.push(cwd);
    }
    out
}

fn find(given: &Option<PathBuf>, rel: &str, what: &str, hint: &str) -> Result<PathBuf> {
    if let Some(p) = given {
        if p.is_file() {
            return Ok(p.clone());
        }
        bail!("{what} {} does not exist", p.display());
    }
    let tried: Vec<PathBuf> = roots().into_iter().map(|r| r.join(rel)).collect();
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "ckptfs bench torch needs {what}: not found at {} ({hint})",
        list.join(" or ")
    )
}

/// Run the benchmark; returns the script's exit code.
pub fn run(a: TorchBenchArgs) -> Result<i32> {
    let python = find(
        &a.python,
        ".venv/bin/python",
        "the Python environment",
        "run scripts/setup-python.sh in the checkout, or pass --python",
    )?;
    let (rel, name) = match a.nodes {
        0 => ("scripts/bench-torch.py", "the script scripts/bench-torch.py"),
        2 => (
            "scripts/bench-torch-nodes.py",
            "the script scripts/bench-torch-nodes.py",
        ),
        n => bail!("--nodes {n}: the multi-node benchmark runs 2 nodes (or 0: one node)"),
    };
    let script = find(&a.script, rel, name, "run from the checkout, or pass --script")?;
    check_imports(&python)?;
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .args(["--sizes", &a.sizes, "--reps", &a.reps.to_string()])
        .arg("--disk")
        .arg(&a.disk)
        .args(["--port", &a.port.to_string()])
        .args(["--tag", &a.tag]);
    if a.nodes == 0 {
        cmd.args(["--remote-max", &a.remote_max]);
    } else {
        cmd.args(["--links", &a.links]);
    }
    if a.json {
        cmd.arg("--json");
    }
    if let Ok(exe) = std::env::current_exe() {
        cmd.env("CKPTFS_BIN", exe);
    }
    let st = cmd
        .status()
        .with_context(|| format!("running {} {}", python.display(), script.display()))?;
    Ok(st.code().unwrap_or(1))
}

/// `import ckptfs.torch` must work: otherwise say which module is missing.
fn check_imports(python: &Path) -> Result<()> {
    let out = Command::new(python)
        .args(["-c", "import torch, ckptfs, ckptfs.torch"])
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").trim();
        bail!(
            "{} cannot import torch and ckptfs.torch ({last}): run scripts/setup-python.sh",
            python.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interpreter_is_named_in_the_error() {
        let e = find(
            &Some(PathBuf::from("/nonexistent/python")),
            ".venv/bin/python",
            "the Python environment",
            "x",
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/python"), "{e}");
        let e = find(&None, "no/such/file-hpy", "the Python environment", "run setup").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("no/such/file-hpy") && msg.contains("run setup"),
            "{msg}"
        );
    }
}
