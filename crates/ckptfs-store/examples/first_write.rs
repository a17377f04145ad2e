//! Measures the first and later checkpoints of a freshly attached process: the first one
//! pays for this process's page tables of the chunks it touches.
//! `cargo run --release -p ckptfs-store --example first_write`
use ckptfs_store::*;
use std::time::Instant;

fn write(s: &Store, path: &str, block: &[u8], n: usize) -> f64 {
    let t = Instant::now();
    let mut f = s.open(path, OpenFlags::CREATE, 0o644).unwrap();
    for _ in 0..n {
        f.write_all(block).unwrap();
    }
    f.close().unwrap();
    (n * block.len()) as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let name = format!("first-write-{}", std::process::id());
    let mib = 512;
    let store = Store::create(&StoreOptions {
        name: name.clone(),
        mem_size: Some((mib + 1) << 20),
        ..Default::default()
    })
    .unwrap();
    drop(store);
    let block = vec![7u8; 1 << 20];
    let s = Store::attach(&StoreOptions::named(&name)).unwrap();
    for i in 0..4 {
        println!(
            "checkpoint {i} of a new process: {:.2} GB/s",
            write(&s, "/c", &block, mib as usize)
        );
        s.unlink("/c").unwrap();
    }
    Store::destroy(&name).unwrap();
}
