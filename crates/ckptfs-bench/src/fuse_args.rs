//! The options of `ckptfs bench fuse` (apart from its parts, which all read them).

use crate::store::parse_size;
use std::path::PathBuf;

/// Options of `ckptfs bench fuse`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Parts to run (comma-separated): a = raw aggregation, b = checkpoint profile,
    /// c = 1 MiB writes into the store, d = store mount vs tmpfs (sequential 1 MiB
    /// I/O, metadata rates).
    #[arg(long, default_value = "a,b,c,d", value_delimiter = ',')]
    pub parts: Vec<String>,
    /// (a) Writer threads.
    #[arg(long, default_value_t = 8)]
    pub raw_writers: usize,
    /// (a) Bytes per writer (CRFS used 1G; scaled down to keep the run short).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub raw_per_writer: u64,
    /// (a) Size of each write() call.
    #[arg(long, default_value = "128K", value_parser = parse_size)]
    pub raw_write: u64,
    /// (a) Buffer pool sizes.
    #[arg(long, default_value = "8M,16M,32M,64M", value_delimiter = ',', value_parser = parse_size)]
    pub pools: Vec<u64>,
    /// (a) Chunk sizes.
    #[arg(long, default_value = "128K,256K,1M,4M", value_delimiter = ',', value_parser = parse_size)]
    pub chunks: Vec<u64>,
    /// (b) Process counts.
    #[arg(long, default_value = "1,2,4,8", value_delimiter = ',')]
    pub procs: Vec<usize>,
    /// (b) Backend directory (on the local disk).
    #[arg(long, default_value = "/var/tmp")]
    pub backend_dir: PathBuf,
    /// (c) Bytes written per case.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub store_bytes: u64,
    /// (d) Bytes of the sequential write/read file.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub seq_bytes: u64,
    /// (d) Files per process of the metadata rates (mdtest-like create, stat, remove).
    #[arg(long, default_value_t = 2000)]
    pub md_files: usize,
    /// (d) Process counts of the metadata rates (each process in its own directory, as
    /// mdtest -u; the rate counts the files of all processes).
    #[arg(long, default_value = "1,2", value_delimiter = ',')]
    pub md_procs: Vec<usize>,
    /// (d) Over io_uring: microseconds each queue thread polls after answering, as
    /// `ckptfs mount --io-uring-spin-us` (0: sleep at once).
    #[arg(long, default_value_t = 50)]
    pub io_uring_spin_us: u64,
    /// Repetitions of each case (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Print a JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}
