//! The cluster file: parsing, validation errors naming node and field, secrets.

use ckptfs_cluster::{Cluster, ClusterError, Scheme, Secret};
use std::os::unix::fs::PermissionsExt;

const FOUR: &str = r#"
job = "j"
secret_file = "j.secret"
domains = ["rack", "psu"]
[redundancy]
scheme = "mirror"
copies = 1
[[node]]
id = "a"
addr = "127.0.0.1:7001"
store = "j.a"
domains = { rack = "r1", psu = "p1" }
[[node]]
id = "b"
addr = "127.0.0.1:7002"
store = "j.b"
domains = { rack = "r1", psu = "p2" }
[[node]]
id = "c"
addr = "127.0.0.1:7003"
store = "j.c"
domains = { rack = "r2", psu = "p1" }
[[node]]
id = "d"
addr = "[::1]:7004"
store = "j.d"
domains = { rack = "r2", psu = "p2" }
"#;

fn err_of(text: &str) -> String {
    Cluster::from_toml_str(text, "t").unwrap_err().to_string()
}

#[test]
fn a_full_file_parses_with_defaults_and_round_trips_through_to_toml() {
    let c = Cluster::from_toml_str(FOUR, "t").unwrap();
    assert_eq!(c.redundancy.scheme, Scheme::Mirror);
    assert_eq!(c.heartbeat_ms, ckptfs_cluster::DEFAULT_HEARTBEAT_MS);
    assert_eq!(c.node("d").unwrap().host(), "::1");
    assert_eq!(c.node("d").unwrap().port(), 7004);
    let again = Cluster::from_toml_str(&c.to_toml(), "again").unwrap();
    assert_eq!(again, c);
    assert_eq!(again.plan().unwrap(), c.plan().unwrap());
}

#[test]
fn redundancy_defaults_to_ring_with_one_copy() {
    let text = FOUR.replace("scheme = \"mirror\"\ncopies = 1\n", "");
    let c = Cluster::from_toml_str(&text, "t").unwrap();
    assert_eq!(c.redundancy.scheme, Scheme::Ring);
    assert_eq!(c.redundancy.copies, 1);
}

#[test]
fn validation_errors_name_the_node_and_the_field() {
    let cases = [
        (FOUR.replace("id = \"b\"", "id = \"a\""), "node \"a\": id"),
        (
            FOUR.replace("127.0.0.1:7002", "127.0.0.1:7001"),
            "node \"b\": addr",
        ),
        (FOUR.replace("127.0.0.1:7003", "nohostport"), "node \"c\": addr"),
        (FOUR.replace("127.0.0.1:7003", "h:0"), "node \"c\": addr"),
        (
            FOUR.replace("store = \"j.b\"", "store = \"j.a\""),
            "node \"b\": store",
        ),
        (FOUR.replace("store = \"j.b\"", "store = \"../x\""), "store"),
        (
            FOUR.replace(
                "rack = \"r2\", psu = \"p1\"",
                "rack = \"r2\", psu = \"p1\", row = \"x\"",
            ),
            "node \"c\": domains level \"row\"",
        ),
        (
            FOUR.replace("rack = \"r2\", psu = \"p1\"", "rack = \"r2\""),
            "node \"c\": domains has no value for level \"psu\"",
        ),
        (
            FOUR.replace("copies = 1", "copies = 4"),
            "copies = 4 needs at least 5 nodes",
        ),
        (FOUR.replace("copies = 1", "copies = 0"), "copies must be >= 1"),
        (
            FOUR.replace("domains = [\"rack\", \"psu\"]", "domains = [\"rack\", \"rack\"]"),
            "listed twice",
        ),
        (FOUR.replace("job = \"j\"", "job = \"\""), "job"),
        (FOUR.replace("scheme = \"mirror\"", "scheme = \"star\""), "star"),
        (
            FOUR.replace("[[node]]\nid = \"a\"", "[[node]]\nbogus = 1\nid = \"a\""),
            "bogus",
        ),
    ];
    for (text, want) in cases {
        let e = err_of(&text);
        assert!(e.contains(want), "wanted {want:?} in: {e}");
    }
}

#[test]
fn several_nodes_on_one_host_need_distinct_stores_but_hosts_may_share_names() {
    let text = FOUR
        .replace("127.0.0.1:7003", "10.0.0.3:7003")
        .replace("store = \"j.c\"", "store = \"j.a\"");
    Cluster::from_toml_str(&text, "t").unwrap();
}

#[test]
fn local_map_puts_two_nodes_per_rack_on_distinct_ports_and_stores() {
    let c = Cluster::local(5, "demo", 17160).unwrap();
    let racks: Vec<_> = c.nodes.iter().map(|n| n.domain("rack").unwrap()).collect();
    assert_eq!(racks, ["r1", "r1", "r2", "r2", "r3"]);
    assert_eq!(c.nodes[4].addr, "127.0.0.1:17164");
    assert_eq!(c.nodes[4].store, "demo.node5");
    assert!(Cluster::local(1, "demo", 17160).is_err());
    // Fewer than 4 nodes: each its own rack, and the plan survives any rack's loss.
    for n in [2, 3] {
        let c = Cluster::local(n, "demo", 17160).unwrap();
        let racks: Vec<_> = c
            .nodes
            .iter()
            .map(|x| x.domain("rack").unwrap().to_string())
            .collect();
        let want: Vec<_> = (1..=n).map(|i| format!("r{i}")).collect();
        assert_eq!(racks, want);
        assert!(c.plan().unwrap().survives_every_domain(), "{n} nodes");
    }
    assert!(Cluster::local(3, "demo", 65535).is_err());
}

#[test]
fn secret_file_is_created_exclusively_and_read_back() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("s");
    let s = Secret::generate().unwrap();
    s.create(&p, false).unwrap();
    let mode = std::fs::metadata(&p).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(Secret::load(&p).unwrap(), s);
    let e = Secret::generate().unwrap().create(&p, false).unwrap_err();
    assert!(e.to_string().contains("--force"), "{e}");
    assert_eq!(Secret::load(&p).unwrap(), s, "not overwritten");
    let s2 = Secret::generate().unwrap();
    s2.create(&p, true).unwrap();
    assert_eq!(Secret::load(&p).unwrap(), s2);
    assert_ne!(s, s2);
    assert!(
        !format!("{s:?}").contains(&format!("{:02x}", s.expose()[0]).repeat(1))
            || format!("{s:?}").starts_with("Secret(<")
    );
}

#[test]
fn secret_readable_by_others_or_behind_a_symlink_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("s");
    Secret::generate().unwrap().create(&p, false).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = Secret::load(&p).unwrap_err();
    assert!(
        matches!(e, ClusterError::Secret { .. }) && e.to_string().contains("chmod 600"),
        "{e}"
    );
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&p, &link).unwrap();
    assert!(Secret::load(&link).is_err(), "symlink followed");
    // create() never writes through a planted symlink.
    let target = d.path().join("target");
    std::fs::write(&target, b"keep").unwrap();
    let planted = d.path().join("planted");
    std::os::unix::fs::symlink(&target, &planted).unwrap();
    assert!(Secret::generate().unwrap().create(&planted, false).is_err());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    std::fs::write(d.path().join("short"), "abcd\n").unwrap();
    std::fs::set_permissions(d.path().join("short"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(Secret::load(&d.path().join("short")).is_err(), "2-byte secret");
}

#[test]
fn relative_secret_file_resolves_beside_the_cluster_file() {
    let d = tempfile::tempdir().unwrap();
    let s = Secret::generate().unwrap();
    s.create(&d.path().join("j.secret"), false).unwrap();
    let p = d.path().join("c.toml");
    std::fs::write(&p, FOUR).unwrap();
    let c = Cluster::load(&p).unwrap();
    assert_eq!(c.secret().unwrap(), s);
}

#[test]
fn inline_secret_is_refused_unless_the_cluster_file_is_mode_0600() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("c.toml");
    let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    std::fs::write(
        &p,
        FOUR.replace("secret_file = \"j.secret\"", &format!("secret = \"{hex}\"")),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Cluster::load(&p).unwrap_err();
    assert!(e.to_string().contains("mode 0600"), "{e}");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Cluster::load(&p).unwrap();
    assert_eq!(c.secret().unwrap(), Secret::from_hex(hex).unwrap());
}

#[test]
fn a_pool_section_round_trips_and_is_checked() {
    let mut c = Cluster::local(4, "demo", 17160).unwrap();
    let mut p = ckptfs_cluster::PoolMap::new("node1", "127.0.0.1:17260");
    p.drain_dir = Some("drain".into());
    c.pool = Some(p.clone());
    let back = Cluster::from_toml_str(&c.to_toml(), "t").unwrap();
    assert_eq!(back.pool, Some(p.clone()));
    for bad in [
        ckptfs_cluster::PoolMap::new("node9", "127.0.0.1:1"),
        ckptfs_cluster::PoolMap::new("node1", "nowhere"),
        ckptfs_cluster::PoolMap {
            death_ms: 10,
            refresh_ms: 10,
            ..p.clone()
        },
        ckptfs_cluster::PoolMap {
            chunk_size: 100,
            ..p.clone()
        },
    ] {
        c.pool = Some(bad.clone());
        assert!(c.validate().is_err(), "{bad:?}");
    }
}

#[test]
fn store_mem_size_round_trips_and_zero_is_refused() {
    let mut c = Cluster::local(2, "m", 17300).unwrap();
    assert_eq!(c.mem_size, None);
    assert!(!c.to_toml().contains("mem_size"), "absent unless given");
    c.mem_size = Some(48 << 20);
    let text = c.to_toml();
    assert!(text.contains("mem_size = 50331648"), "{text}");
    let back = Cluster::from_toml_str(&text, "t").unwrap();
    assert_eq!(back.mem_size, Some(48 << 20));
    assert_eq!(back, c);
    let zero = text.replace("mem_size = 50331648", "mem_size = 0");
    assert!(
        err_of(&zero).contains("mem_size must be > 0"),
        "{}",
        err_of(&zero)
    );
}
