//! `ckptfs bench fuse` without the CLI: `cargo run --release -p ckptfs-fuse --example
//! bench_fuse -- [OPTIONS]`.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ckptfs_fuse::bench::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let json = cli.args.json;
    ckptfs_fuse::bench::run(cli.args)?.print(json);
    Ok(())
}
