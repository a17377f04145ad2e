//! The runtime policy's measured inputs: the drain agent's published PFS bandwidths
//! (its status file's `levels[]`) replace the setting, and each decision records what
//! it used and where it came from; Algorithm 1's counters as the simulator keeps them.

use ckptfs_agent::status::{AgentStatus, LevelCost};
use ckptfs_datasets::{policy, Config, Datasets};
use ckptfs_store::{OpenFlags, Store, StoreOptions};

struct Fx {
    store: Store,
    name: String,
}

impl Drop for Fx {
    fn drop(&mut self) {
        let _ = Store::destroy(&self.name);
        ckptfs_agent::status::remove_status(&self.name);
        ckptfs_datasets::remove_lock(&self.name);
        if let Ok(d) = ckptfs_runtime::RuntimeDir::for_caller() {
            let _ = d.remove(&format!("{}.agent.json", self.name));
        }
    }
}

fn fixture(tag: &str) -> Fx {
    let name = format!("hdf-ms-{tag}-{}", std::process::id());
    let mut o = StoreOptions::named(&name);
    o.mem_size = Some(16 << 20);
    o.chunk_size = Some(64 << 10);
    Fx {
        store: Store::create(&o).expect("create store"),
        name,
    }
}

fn dataset(ds: &Datasets, store: &Store, s: u64, bytes: usize) -> ckptfs_datasets::Dataset {
    ds.begin(&format!("s{s}"), None).unwrap();
    let mut f = store.open(&format!("/f{s}"), OpenFlags::CREATE, 0o644).unwrap();
    f.write_all(&vec![s as u8; bytes]).unwrap();
    f.close().unwrap();
    ds.complete(None, true).unwrap()
}

#[test]
fn the_agents_published_pfs_bandwidth_replaces_the_setting_and_is_recorded() {
    let fx = fixture("ag");
    let mut cfg = Config::for_job("t");
    cfg.node = "n0".into();
    cfg.pfs_bandwidth = 1000.0;
    let ds = Datasets::single_node(fx.store.clone(), cfg);
    // No agent yet: the setting stands in.
    let d1 = dataset(&ds, &fx.store, 1, 100_000);
    let m = d1.decision.as_ref().unwrap().measured.clone().unwrap();
    assert_eq!((m.pfs_put_source.as_str(), m.pfs_put_bps), ("setting", 1000.0));
    assert!(!m.partner && m.partner_reason.contains("no node daemon"), "{m:?}");
    // An agent published its measured PFS bandwidths.
    let st = AgentStatus {
        store: fx.name.clone(),
        levels: vec![LevelCost {
            level: "pfs".into(),
            name: "pfs:/x".into(),
            put_bps: Some(2e6),
            get_bps: Some(4e6),
            puts: 3,
            gets: 1,
        }],
        ..Default::default()
    };
    ckptfs_runtime::RuntimeDir::for_caller()
        .unwrap()
        .write_atomic(
            &format!("{}.agent.json", fx.name),
            &serde_json::to_vec(&st).unwrap(),
        )
        .unwrap();
    let d2 = dataset(&ds, &fx.store, 2, 100_000);
    let dec = d2.decision.as_ref().unwrap();
    let m = dec.measured.clone().unwrap();
    assert_eq!((m.pfs_put_source.as_str(), m.pfs_put_bps), ("agent", 2e6));
    assert_eq!((m.pfs_get_source.as_str(), m.pfs_get_bps), ("agent", 4e6));
    let c = &dec.input["costs"];
    let local = c["local"]["checkpoint_s"].as_f64().unwrap();
    let pfs = c["pfs"]["checkpoint_s"].as_f64().unwrap();
    assert!((pfs - (local + 100_000.0 / 2e6)).abs() < 1e-9, "{c}");
    assert!(
        (c["pfs"]["restart_s"].as_f64().unwrap() - 100_000.0 / 4e6).abs() < 1e-9,
        "{c}"
    );
    assert!(dec.reason.contains("PFS bandwidth from agent"), "{}", dec.reason);
    // And `ckpt show --json` carries it: the record round-trips.
    let shown = ds.show(2).unwrap();
    assert_eq!(shown.decision.unwrap().measured.unwrap(), m);
}

#[test]
fn counters_follow_the_simulators_definition() {
    let fx = fixture("ct");
    let mut cfg = Config::for_job("t");
    cfg.node = "n0".into();
    let ds = Datasets::single_node(fx.store.clone(), cfg);
    let mut all = Vec::new();
    for s in 1..=4 {
        all.push(dataset(&ds, &fx.store, s, 10));
    }
    let set = |d: &mut ckptfs_datasets::Dataset, level: &str, flush: bool| {
        d.decision.as_mut().unwrap().level = level.into();
        d.flush = flush;
    };
    // pfs, partner, local, local: 3 since the PFS one, 2 since the partner one.
    set(&mut all[0], "pfs", true);
    set(&mut all[1], "partner", false);
    set(&mut all[2], "local", false);
    set(&mut all[3], "local", false);
    assert_eq!(policy::counters(&all), (3, Some(2)));
    // A partner checkpoint older than the newest PFS one does not count.
    set(&mut all[2], "pfs", true);
    assert_eq!(policy::counters(&all), (1, None));
    // No PFS checkpoint at all.
    set(&mut all[0], "local", false);
    set(&mut all[2], "partner", false);
    assert_eq!(policy::counters(&all), (4, Some(1)));
}
