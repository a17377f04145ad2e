//! The simulator's unit and property tests.

mod unit {
    use super::super::*;
    use crate::decide::LevelCost;

    pub(crate) fn base() -> SimConfig {
        SimConfig {
            nodes: 256,
            procs: 64,
            failures: FailureSource::Weibull {
                mtbf_s: 2000.0 * 3600.0,
                shape: 0.7,
            },
            soft_fraction: 0.0,
            matching: Matching::Mirror,
            remote_only: true,
            predictor: Predictor {
                precision: 0.7,
                recall: 0.7,
            },
            segments: 2000,
            tau: 3600.0,
            costs: LevelCosts {
                local: None,
                partner: Some(LevelCost {
                    checkpoint_s: 8.0,
                    restart_s: 8.0,
                }),
                pfs: LevelCost {
                    checkpoint_s: 120.0,
                    restart_s: 120.0,
                },
            },
            rollback: RollbackCount::Paper,
            reprotect: false,
            runs: 2,
            seed: 1,
        }
    }

    #[test]
    fn no_failures_gives_checkpoint_cost_only() {
        let mut c = base();
        c.failures = FailureSource::Log(FailureLog {
            path: "empty".into(),
            events: vec![],
        });
        let r = Simulator::new(c).unwrap().run().unwrap();
        let disk = &r.results[1];
        assert_eq!(disk.strategy, "disk-only");
        assert_eq!(disk.ratios.rework, 0.0);
        assert_eq!(disk.ratios.restart, 0.0);
        // One checkpoint after each of the S segments: the ratio is C / τ.
        assert!((disk.ratios.checkpoint - 120.0 / 3600.0).abs() < 1e-12);
        assert_eq!(disk.checkpoints.pfs, 2000.0);
    }

    #[test]
    fn one_logged_failure_by_hand() {
        // Disk-only: segment 3 (from state 2) starts at 2τ + 2·120 s; a hard
        // failure of source 3 half-way through it loses τ/2 of compute.
        let mut c = base();
        c.segments = 10;
        c.runs = 1;
        let t_fail = 2.0 * 3600.0 + 2.0 * 120.0 + 1800.0; // mid segment 3
        c.failures = FailureSource::Log(FailureLog {
            path: "one".into(),
            events: vec![FailureEvent {
                time: t_fail,
                node: 3,
                hard: true,
                mark: 0.9,
            }],
        });
        let sim = Simulator::new(c).unwrap();
        let r = sim
            .run_strategies(&[Strategy::Fixed(Level::Pfs), Strategy::Fixed(Level::Partner)])
            .unwrap();
        let budget = 10.0 * 3600.0;
        let d = &r.results[0];
        assert!((d.ratios.rework - 1800.0 / budget).abs() < 1e-12, "{d:?}");
        assert!((d.ratios.restart - 120.0 / budget).abs() < 1e-12);
        assert_eq!(d.failures, 1.0);
        assert_eq!(d.fallbacks, 0.0);
        // Memory-only: cheaper checkpoints, so segment 3 started at
        // 2τ + 2·8 s; the failure is still inside it.
        let m = &r.results[1];
        let rework = t_fail - (2.0 * 3600.0 + 2.0 * 8.0);
        assert!((m.ratios.rework - rework / budget).abs() < 1e-12, "{m:?}");
        assert!((m.ratios.restart - 8.0 / budget).abs() < 1e-12);
    }

    #[test]
    fn lost_partner_copy_falls_back_to_pfs() {
        // Backup of source 0 is node 128 (mirror, 256 nodes). It fails hard,
        // then source 0 fails: REMEM's remote-only copy is gone, so the job
        // falls back to the input (state 0).
        let mut c = base();
        c.segments = 10;
        c.runs = 1;
        let t1 = 3.0 * (3600.0 + 8.0) + 100.0;
        c.failures = FailureSource::Log(FailureLog {
            path: "two".into(),
            events: vec![
                FailureEvent {
                    time: t1,
                    node: 128,
                    hard: true,
                    mark: 0.9,
                },
                FailureEvent {
                    time: t1 + 200.0,
                    node: 0,
                    hard: true,
                    mark: 0.9,
                },
            ],
        });
        let r = Simulator::new(c.clone())
            .unwrap()
            .run_strategies(&[Strategy::Fixed(Level::Partner)])
            .unwrap();
        let m = &r.results[0];
        assert_eq!(m.fallbacks, 1.0);
        // Lost: 3 segments of progress + 300 s of segment 4; restart from PFS.
        let budget = 10.0 * 3600.0;
        assert!((m.ratios.rework - (3.0 * 3600.0 + 300.0) / budget).abs() < 1e-12);
        assert!((m.ratios.restart - 120.0 / budget).abs() < 1e-12);
        // With a local copy the partner checkpoint survives (only node 0's
        // own copy and its backup's differ: node 0 lost its local copy, the
        // backup lost the remote one — both copies of image 0 are gone).
        c.remote_only = false;
        let r = Simulator::new(c.clone())
            .unwrap()
            .run_strategies(&[Strategy::Fixed(Level::Partner)])
            .unwrap();
        assert_eq!(r.results[0].fallbacks, 1.0);
        // A failure of an unrelated backup (node 129, backup of source 1)
        // does not lose image 0 when local copies exist.
        if let FailureSource::Log(l) = &mut c.failures {
            l.events[0].node = 129;
        }
        let r = Simulator::new(c)
            .unwrap()
            .run_strategies(&[Strategy::Fixed(Level::Partner)])
            .unwrap();
        assert_eq!(r.results[0].fallbacks, 0.0);
    }
}

mod property {
    use super::super::*;
    use super::unit::base;
    use crate::decide::LevelCost;
    use proptest::prelude::*;

    fn perfect_setup(seed: u64, remote_only: bool) -> SimConfig {
        let mut c = base();
        c.nodes = 512;
        c.procs = 256;
        c.segments = 4000;
        c.runs = 3;
        c.seed = seed;
        c.remote_only = remote_only;
        c.failures = FailureSource::Weibull {
            mtbf_s: 3000.0 * 3600.0,
            shape: 0.7,
        };
        c.predictor = Predictor::PERFECT;
        c.rollback = RollbackCount::Distance;
        c.reprotect = true;
        c
    }

    /// A perfect predictor lets the adaptive policy do at least as well as
    /// both fixed strategies (with the distance count and re-protection after
    /// restarts; docs/policy.md explains why REMEM's own count and its
    /// decide-only-at-checkpoints rule can lose to disk-only).
    #[test]
    fn perfect_predictor_adaptive_is_no_worse_than_fixed() {
        for seed in 1..=3 {
            for remote_only in [true, false] {
                let r = Simulator::new(perfect_setup(seed, remote_only))
                    .unwrap()
                    .run()
                    .unwrap();
                let total = |name: &str| {
                    r.results
                        .iter()
                        .find(|x| x.strategy.starts_with(name))
                        .unwrap()
                        .ratios
                        .total
                };
                let (mem, disk, adaptive) = (total("memory-only"), total("disk-only"), total("adaptive"));
                assert!(
                    adaptive <= disk && adaptive <= mem,
                    "seed {seed} remote_only {remote_only}: adaptive {adaptive} disk {disk} mem {mem}"
                );
            }
        }
    }

    #[test]
    fn same_seed_same_report_other_seed_differs() {
        let c = perfect_setup(7, true);
        let a = Simulator::new(c.clone()).unwrap().run().unwrap();
        let b = Simulator::new(c.clone()).unwrap().run().unwrap();
        assert_eq!(a, b);
        let mut c2 = c;
        c2.seed = 8;
        let d = Simulator::new(c2).unwrap().run().unwrap();
        assert_ne!(a.results, d.results);
    }

    #[test]
    fn bad_configurations_name_the_parameter() {
        type Mutate = Box<dyn Fn(&mut SimConfig)>;
        let cases: Vec<(&str, Mutate)> = vec![
            ("nodes", Box::new(|c| c.nodes = 0)),
            ("nodes", Box::new(|c| c.nodes = 255)),
            ("procs", Box::new(|c| c.procs = 0)),
            ("procs", Box::new(|c| c.procs = 1000)),
            ("precision", Box::new(|c| c.predictor.precision = 1.1)),
            ("recall", Box::new(|c| c.predictor.recall = -0.1)),
            (
                "mtbf",
                Box::new(|c| {
                    c.failures = FailureSource::Weibull {
                        mtbf_s: -1.0,
                        shape: 0.7,
                    }
                }),
            ),
            (
                "shape",
                Box::new(|c| {
                    c.failures = FailureSource::Weibull {
                        mtbf_s: 1.0,
                        shape: 0.0,
                    }
                }),
            ),
            ("ckpt-pfs", Box::new(|c| c.costs.pfs.checkpoint_s = -5.0)),
            (
                "restart-partner",
                Box::new(|c| {
                    c.costs.partner = Some(LevelCost {
                        checkpoint_s: 1.0,
                        restart_s: f64::NAN,
                    })
                }),
            ),
            ("tau", Box::new(|c| c.tau = 0.0)),
            ("segments", Box::new(|c| c.segments = 0)),
            ("soft-fraction", Box::new(|c| c.soft_fraction = 2.0)),
            ("runs", Box::new(|c| c.runs = 0)),
        ];
        for (name, f) in cases {
            let mut c = base();
            f(&mut c);
            let e = Simulator::new(c).unwrap_err().to_string();
            assert!(e.contains(&format!("`{name}`")), "{name}: {e}");
        }
    }

    #[test]
    fn restarts_slower_than_failures_are_reported_not_hung() {
        let mut c = base();
        c.procs = 128;
        c.segments = 50;
        c.runs = 1;
        c.nodes = 64;
        c.procs = 16;
        c.failures = FailureSource::Weibull {
            mtbf_s: 3600.0,
            shape: 1.0,
        };
        c.costs.pfs = LevelCost {
            checkpoint_s: 1e5,
            restart_s: 1e5,
        };
        let e = Simulator::new(c).unwrap().run().unwrap_err();
        assert!(matches!(e, PolicyError::Diverged(_)), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Any valid small setup runs, and the ratios add up and are sane.
        #[test]
        fn ratios_are_consistent(
            procs in 1u32..32, mtbf_h in 50.0..5000.0f64, shape in 0.5..2.0f64,
            soft in 0.0..=1.0f64, ring: bool, remote_only: bool, reprotect: bool,
            precision in 0.05..=1.0f64, recall in 0.0..=1.0f64, local: bool,
            seed in 0u64..1000,
        ) {
            let mut c = base();
            c.nodes = 64;
            c.procs = procs;
            c.segments = 300;
            c.runs = 1;
            c.seed = seed;
            c.soft_fraction = soft;
            c.matching = if ring { Matching::Ring } else { Matching::Mirror };
            c.remote_only = remote_only;
            c.reprotect = reprotect;
            c.predictor = Predictor { precision, recall };
            c.failures = FailureSource::Weibull { mtbf_s: mtbf_h * 3600.0, shape };
            if local {
                c.costs.local = Some(LevelCost { checkpoint_s: 1.0, restart_s: 1.0 });
            }
            let r = Simulator::new(c).unwrap().run().unwrap();
            for x in &r.results {
                let q = &x.ratios;
                prop_assert!(q.rework >= 0.0 && q.rework <= 1.0 + 1e-9, "{x:?}");
                prop_assert!(q.checkpoint >= 0.0 && q.restart >= 0.0);
                prop_assert!((q.total - (q.rework + q.checkpoint + q.restart)).abs() < 1e-12);
            }
            // Disk-only never falls back: the PFS keeps everything.
            let disk = r.results.iter().find(|x| x.strategy == "disk-only").unwrap();
            prop_assert_eq!(disk.fallbacks, 0.0);
        }
    }
}
