//! Helpers of the single-node dataset tests (`datasets.rs`, `retention.rs`).
#![allow(dead_code)]

use ckptfs_datasets::Config;
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::sync::atomic::{AtomicU32, Ordering};

static N: AtomicU32 = AtomicU32::new(0);

pub struct Fx {
    pub store: Store,
    pub name: String,
}

impl Drop for Fx {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
        ckptfs_agent::status::remove_status(&self.name);
        ckptfs_datasets::remove_lock(&self.name);
    }
}

pub fn fixture() -> Fx {
    let name = format!(
        "hd-ds-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(64 << 20);
    o.chunk_size = Some(64 << 10);
    let store = Store::create(&o).expect("create store");
    Fx { store, name }
}

pub fn cfg(rank: &str) -> Config {
    let mut c = Config::for_job("t");
    c.rank = rank.into();
    c.node = "n0".into();
    c
}

pub fn write(store: &Store, path: &str, bytes: &[u8]) {
    if let Some((dir, _)) = path.rsplit_once('/') {
        if !dir.is_empty() {
            let _ = store.mkdir(dir, 0o755);
        }
    }
    let mut f = store.open(path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(bytes).unwrap();
    f.close().unwrap();
}

pub fn read(store: &Store, path: &str) -> Vec<u8> {
    let mut f = store.open(path, OpenFlags::READ, 0).unwrap();
    let mut b = vec![0; f.size() as usize];
    f.read_full(&mut b).unwrap();
    b
}

pub fn content(step: u64, file: usize) -> Vec<u8> {
    (0..(20_000 + file * 777))
        .map(|i| ((i as u64 * 31 + step * 7 + file as u64) % 251) as u8)
        .collect()
}
