//! `ckptfs bench fuse` without the CLI: `cargo run --release -p ckptfs-bench --example
//! bench_fuse -- [OPTIONS]`.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ckptfs_bench::fuse::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let json = cli.args.json;
    ckptfs_bench::fuse::run(cli.args)?.print(json);
    Ok(())
}
