//! The drain with [`FlushPolicy`]: only datasets marked for flush reach the PFS; files
//! of open datasets stay, files outside datasets drain as without datasets.

use ckptfs_agent::{Agent, AgentConfig, DrainPolicy};
use ckptfs_datasets::{Config, Datasets, FlushPolicy};
use ckptfs_store::{OpenFlags, Store, StoreOptions};
use std::sync::Arc;

struct Fx {
    store: Store,
    opts: StoreOptions,
}

impl Drop for Fx {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.opts.name);
        ckptfs_agent::status::remove_status(&self.opts.name);
        ckptfs_datasets::remove_lock(&self.opts.name);
    }
}

fn fixture(tag: &str) -> Fx {
    let mut o = StoreOptions::named(format!("hdf-fp-{tag}-{}", std::process::id()));
    o.mem_size = Some(16 << 20);
    o.chunk_size = Some(64 << 10);
    let store = Store::create(&o).expect("create store");
    Fx { store, opts: o }
}

fn write(store: &Store, path: &str, bytes: &[u8]) {
    let mut dir = String::new();
    for c in path
        .trim_start_matches('/')
        .split('/')
        .collect::<Vec<_>>()
        .split_last()
        .unwrap()
        .1
    {
        dir.push('/');
        dir.push_str(c);
        let _ = store.mkdir(&dir, 0o755);
    }
    let mut f = store.open(path, OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(bytes).unwrap();
    f.close().unwrap();
}

fn agent(fx: &Fx, dest: &std::path::Path, cfg: &Config) -> Agent {
    let mut a = AgentConfig::new(&[dest.to_path_buf()]);
    a.node_id = "n0".into();
    a.policy = Some(Arc::new(FlushPolicy::new(
        fx.opts.clone(),
        &cfg.job,
        cfg.pattern.clone(),
        DrainPolicy::from_config(&a),
    )));
    Agent::new(&fx.store, a).unwrap()
}

#[test]
fn flush_every_second_dataset_drains_2_and_4_only() {
    let fx = fixture("n2");
    let dest = tempfile::tempdir().unwrap();
    let mut cfg = Config::for_job("t");
    cfg.node = "n0".into();
    cfg.flush_every = 2;
    cfg.pfs_bandwidth = 1.0; // the runtime policy keeps every dataset local
    let ds = Datasets::single_node(fx.store.clone(), cfg.clone());
    let ag = agent(&fx, dest.path(), &cfg);
    for s in 1..=4u64 {
        ds.begin(&format!("step{s}"), None).unwrap();
        write(&fx.store, &format!("/ck/{s}/r0"), format!("state {s}").as_bytes());
        // Open: nothing of it goes.
        ag.run_once().unwrap();
        assert!(
            !dest.path().join(format!("ck/{s}/r0")).exists(),
            "open dataset {s} drained"
        );
        let d = ds.complete(None, true).unwrap();
        assert_eq!(d.flush, s % 2 == 0, "dataset {s}");
        assert_eq!(d.decision.as_ref().unwrap().level, "local");
        ag.run_once().unwrap();
    }
    write(&fx.store, "/free/log", b"outside every dataset");
    ag.run_once().unwrap();
    for s in 1..=4 {
        let there = dest.path().join(format!("ck/{s}/r0")).exists();
        assert_eq!(there, s % 2 == 0, "dataset {s} on the PFS: {there}");
    }
    assert_eq!(
        std::fs::read(dest.path().join("free/log")).unwrap(),
        b"outside every dataset"
    );
    // The dataset records themselves never go to the PFS.
    assert!(!dest.path().join(".ckptfs").exists());
}

#[test]
fn transparent_dataset_directories_wait_for_their_record() {
    let fx = fixture("tr");
    let dest = tempfile::tempdir().unwrap();
    let mut cfg = Config::for_job("t");
    cfg.node = "n0".into();
    cfg.flush_every = 1;
    cfg.pfs_bandwidth = 1.0;
    cfg.pattern = Some("/run/step.*".into());
    cfg.complete_rule = Some(ckptfs_datasets::CompleteRule::Files(1));
    let ds = Datasets::single_node(fx.store.clone(), cfg.clone());
    let ag = agent(&fx, dest.path(), &cfg);
    write(&fx.store, "/run/step.1/a", b"aaaa");
    ag.run_once().unwrap();
    assert!(
        !dest.path().join("run/step.1/a").exists(),
        "drained before its dataset was judged"
    );
    // A look at the datasets judges it complete (files:1), flush every 1st.
    let (l, _) = ds.list().unwrap();
    assert!(
        l.iter()
            .any(|d| d.flush && d.dir.as_deref() == Some("/run/step.1")),
        "{l:?}"
    );
    ag.run_once().unwrap();
    assert_eq!(std::fs::read(dest.path().join("run/step.1/a")).unwrap(), b"aaaa");
}
