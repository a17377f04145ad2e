//! `ckptfs cluster init` and `ckptfs cluster plan` end to end.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn ckptfs(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ckptfs"));
    c.env_remove("CKPTFS_CONFIG")
        .env_remove("CKPTFS_CLUSTER")
        .env_remove("CKPTFS_NODES")
        .env_remove("SLURM_JOB_NODELIST")
        .env_remove("SLURM_NODELIST")
        .env_remove("SLURM_JOB_ID")
        .args(args);
    c
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn p(d: &Path, f: &str) -> String {
    d.join(f).to_str().unwrap().to_string()
}

#[test]
fn init_local_writes_a_map_and_a_private_secret_and_plan_shows_nothing_lost() {
    let d = tempfile::tempdir().unwrap();
    let out = p(d.path(), "c.toml");
    ok(ckptfs(&[
        "cluster", "init", "--local", "4", "--out", &out, "--port", "17160", "--job", "hc",
    ])
    .output()
    .unwrap());
    let secret = d.path().join("c.secret");
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("secret_file = \"c.secret\""), "{text}");
    assert!(!text.contains(&std::fs::read_to_string(&secret).unwrap().trim().to_string()));
    let plan = ok(ckptfs(&["cluster", "plan", "--cluster", &out]).output().unwrap());
    assert!(plan.contains("rack=r1") && plan.contains("nothing"), "{plan}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(ckptfs(&["cluster", "plan", "--cluster", &out, "--json"])
            .output()
            .unwrap()))
        .unwrap();
    let nodes = json["plan"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    assert_eq!(nodes[0]["id"], "node1");
    assert_eq!(nodes[0]["partners"][0], "node3");
    assert_eq!(json["survives_every_domain"], true);
    // CKPTFS_CLUSTER works too.
    ok(ckptfs(&["cluster", "plan"])
        .env("CKPTFS_CLUSTER", &out)
        .output()
        .unwrap());
}

#[test]
fn init_never_overwrites_without_force() {
    let d = tempfile::tempdir().unwrap();
    let out = p(d.path(), "c.toml");
    ok(ckptfs(&["cluster", "init", "--local", "2", "--out", &out])
        .output()
        .unwrap());
    let secret = std::fs::read(d.path().join("c.secret")).unwrap();
    let o = ckptfs(&["cluster", "init", "--local", "3", "--out", &out])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(std::fs::read(d.path().join("c.secret")).unwrap(), secret);
    assert!(std::fs::read_to_string(&out).unwrap().matches("[[node]]").count() == 2);
    ok(
        ckptfs(&["cluster", "init", "--local", "3", "--out", &out, "--force"])
            .output()
            .unwrap(),
    );
    assert_ne!(std::fs::read(d.path().join("c.secret")).unwrap(), secret);
    assert!(std::fs::read_to_string(&out).unwrap().matches("[[node]]").count() == 3);
}

#[test]
fn an_impossible_plan_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let out = p(d.path(), "c.toml");
    let o = ckptfs(&["cluster", "init", "--local", "4", "--copies", "4", "--out", &out])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("copies"));
    assert!(!d.path().join("c.toml").exists() && !d.path().join("c.secret").exists());
    let o = ckptfs(&[
        "cluster", "init", "--local", "3", "--scheme", "mirror", "--out", &out,
    ])
    .output()
    .unwrap();
    assert!(!o.status.success(), "mirror pairs need an even node count");
}

#[test]
fn init_from_a_host_list_with_topology_and_from_slurm() {
    let d = tempfile::tempdir().unwrap();
    let topo = d.path().join("topo.toml");
    std::fs::write(
        &topo,
        "levels = [\"rack\"]\n[nodes]\nn1 = { rack = \"a\" }\nn2 = { rack = \"a\" }\nn3 = { rack = \"b\" }\nn4 = { rack = \"b\" }\n",
    )
    .unwrap();
    let out = p(d.path(), "h.toml");
    ok(ckptfs(&[
        "cluster",
        "init",
        "--hosts",
        "n[1-4]",
        "--topology",
        topo.to_str().unwrap(),
        "--scheme",
        "mirror",
        "--out",
        &out,
    ])
    .output()
    .unwrap());
    let json: serde_json::Value =
        serde_json::from_str(&ok(ckptfs(&["cluster", "plan", "--cluster", &out, "--json"])
            .output()
            .unwrap()))
        .unwrap();
    assert_eq!(json["plan"]["nodes"][0]["partners"][0], "n3");
    assert_eq!(json["plan"]["nodes"][2]["partners"][0], "n1");
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("addr = \"n1:7460\""));

    let out = p(d.path(), "s.toml");
    ok(ckptfs(&["cluster", "init", "--out", &out, "--port", "17170"])
        .env("SLURM_JOB_NODELIST", "cn[01-03]")
        .env("SLURM_JOB_ID", "123")
        .output()
        .unwrap());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("job = \"slurm-123\"") && text.contains("cn03:17170"),
        "{text}"
    );

    let out = p(d.path(), "e.toml");
    ok(ckptfs(&["cluster", "init", "--out", &out])
        .env("CKPTFS_NODES", "x y z")
        .output()
        .unwrap());
    assert!(std::fs::read_to_string(&out).unwrap().contains("id = \"z\""));

    let o = ckptfs(&["cluster", "init", "--out", &p(d.path(), "none.toml")])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("CKPTFS_NODES"));
}

#[test]
fn plan_reports_what_a_rack_loss_destroys_when_the_map_forces_it() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("c.toml");
    std::fs::write(
        &out,
        r#"job = "hc"
domains = ["rack"]
[[node]]
id = "a"
addr = "127.0.0.1:17180"
store = "hc.a"
domains = { rack = "r1" }
[[node]]
id = "b"
addr = "127.0.0.1:17181"
store = "hc.b"
domains = { rack = "r1" }
"#,
    )
    .unwrap();
    let text = ok(ckptfs(&["cluster", "plan", "--cluster", out.to_str().unwrap()])
        .output()
        .unwrap());
    assert!(text.contains("warning: node \"a\""), "{text}");
    let line = text.lines().find(|l| l.starts_with("rack=r1")).unwrap();
    assert!(line.ends_with(" a,b"), "{text}");
    assert!(text.contains("some failure domain's loss destroys checkpoints"));
}

#[test]
fn init_with_erasure_sets_and_plan_prints_the_sets_and_domain_losses() {
    let d = tempfile::Builder::new().prefix("ers-").tempdir().unwrap();
    let out = p(d.path(), "c.toml");
    let said = ok(ckptfs(&[
        "cluster",
        "init",
        "--local",
        "6",
        "--out",
        &out,
        "--port",
        "46200",
        "--redundancy",
        "rs:2",
    ])
    .output()
    .unwrap());
    assert!(said.contains("erasure sets: rs:2, 1 set(s)"), "{said}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("erasure = \"rs:2\"") && text.contains("set_size = 8"),
        "{text}"
    );
    let plan = ok(ckptfs(&["cluster", "plan", "--cluster", &out]).output().unwrap());
    assert!(
        plan.contains("erasure:set0") && plan.contains("node1,node2,node3,node4,node5,node6"),
        "{plan}"
    );
    assert!(
        plan.contains("every part survives the loss of any one failure domain"),
        "{plan}"
    );
    // XOR over sets of 3: each set holds one node per rack.
    let x = p(d.path(), "x.toml");
    ok(ckptfs(&[
        "cluster",
        "init",
        "--local",
        "6",
        "--out",
        &x,
        "--port",
        "46200",
        "--redundancy",
        "xor",
        "--set-size",
        "3",
    ])
    .output()
    .unwrap());
    let json: serde_json::Value =
        serde_json::from_str(&ok(ckptfs(&["cluster", "plan", "--cluster", &x, "--json"])
            .output()
            .unwrap()))
        .unwrap();
    let sets = json["erasure"]["sets"].as_array().unwrap();
    assert_eq!(sets.len(), 2);
    assert_eq!(sets[0]["members"], serde_json::json!(["node1", "node3", "node5"]));
    // partner:K is --copies K; too few nodes for rs:2 is refused before anything is written.
    let k = p(d.path(), "k.toml");
    ok(ckptfs(&[
        "cluster",
        "init",
        "--local",
        "4",
        "--out",
        &k,
        "--port",
        "46200",
        "--redundancy",
        "partner:2",
    ])
    .output()
    .unwrap());
    assert!(std::fs::read_to_string(&k).unwrap().contains("copies = 2"));
    let bad = p(d.path(), "bad.toml");
    let o = ckptfs(&[
        "cluster",
        "init",
        "--local",
        "2",
        "--out",
        &bad,
        "--port",
        "46200",
        "--redundancy",
        "rs:2",
    ])
    .output()
    .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs sets of at least 3 members"));
    assert!(!Path::new(&bad).exists());
}

#[test]
fn a_new_allocation_keeps_the_previous_node_ids_and_a_new_host_replaces_a_lost_one() {
    let d = tempfile::tempdir().unwrap();
    let old = p(d.path(), "old.toml");
    let new = p(d.path(), "c.toml");
    let map = p(d.path(), "nodes.map");
    ok(ckptfs(&[
        "cluster",
        "init",
        "--hosts",
        "c[1-4]",
        "--out",
        &old,
        "--one-host",
        "127.0.0.1",
        "--port",
        "17200",
        "--job",
        "rq",
        "--node-map",
        &map,
    ])
    .output()
    .unwrap());
    assert_eq!(
        std::fs::read_to_string(&map).unwrap(),
        "c1 c1\nc2 c2\nc3 c3\nc4 c4\n"
    );
    // c3 lost; the new allocation is c1, c2, c4, c5.
    let o = ckptfs(&[
        "cluster",
        "init",
        "--hosts",
        "c[1-2,4-5]",
        "--out",
        &new,
        "--one-host",
        "127.0.0.1",
        "--port",
        "17300",
        "--job",
        "rq",
        "--previous",
        &old,
        "--node-map",
        &map,
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    ok(o);
    assert!(err.contains("host c5 takes the place of node c3"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&map).unwrap(),
        "c1 c1\nc2 c2\nc5 c3\nc4 c4\n"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(ckptfs(&["cluster", "plan", "--cluster", &new, "--json"])
            .output()
            .unwrap()))
        .unwrap();
    let ids: Vec<&str> = json["plan"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4"]);
    // Node c3 (on host c5) has the store of node c3 and the third port of this file.
    let text = std::fs::read_to_string(&new).unwrap();
    assert!(text.contains("store = \"rq.c3\""), "{text}");
    assert!(text.contains("127.0.0.1:17302"), "{text}");
    assert!(!text.contains("c5"), "{text}");
}
