//! Runs `ckptfs policy ...` before the CLI is wired:
//! `cargo run --release -p ckptfs-policy --example policy -- simulate --reproduce remem-fig5`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "ckptfs policy", about = "ckptfs checkpoint level policy")]
struct Cli {
    #[command(subcommand)]
    cmd: ckptfs_policy::cli::PolicyCommand,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = ckptfs_policy::cli::run(cli.cmd) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
