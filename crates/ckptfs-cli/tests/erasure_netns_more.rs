//! Issue 32 on simulated nodes, continued (`erasure_netns.rs` has the first cases; the
//! simulated cluster is `erasure_support`):
//!
//! - a set of eight (`rs:2`) with parts of unequal sizes, an empty file and a member
//!   with no files: two members of different racks lost at once and rebuilt
//!   byte-identical (the empty file too), the set encoded again; then three lost at
//!   once (`k + 1`): named, and every rank falls back to the older dataset on the PFS
//!   (failure cases E25-E26 in docs/erasure.md);
//! - a corrupted data chunk of a survivor's part (XOR over four): detected by its
//!   CRC32C, never served (not by `get`, not into a rebuild), the rebuild that needs it
//!   fails naming the lost member and the unreadable one, and the restart falls back to
//!   the older dataset (E27);
//! - `rs:2` over six: a member SIGKILLed during the encode (the gather schedule), then a
//!   survivor SIGKILLed during a replacement's rebuild, which still completes (E28-E29).
//!
//! Needs root and iproute2: SKIPPED otherwise (a failure under
//! `CKPTFS_REQUIRE_ROOT_TESTS=1`). Ports 47300-47301 inside the namespaces.

mod erasure_support;
mod nodes_support;

use erasure_support::*;

const PORT: u16 = 47300;

/// Failure cases E25-E26 (docs/erasure.md): Reed-Solomon k = 2 over eight nodes (two
/// per rack), parts from 0 to ~170 KB: node3 with an empty file beside its checkpoint,
/// node6 with no file at all (an empty part, all padding), node8 the largest part
/// (two files). node3 (r2) and node8 (r4) lost at once: both rebuilt byte-identical by
/// the restart, the set encoded again. Then node1, node4 and node6 (r1, r2, r3) lost
/// at once: `k + 1`, named; every rank falls back to v0, whose lost parts the PFS holds.
#[test]
fn rs2_set_of_eight_rebuilds_two_lost_racks_apart_and_falls_back_when_three_are_lost() {
    let Some(mut c) = Cluster::new("er4w", 8, "rs:2", PORT) else {
        return;
    };
    assert_eq!(c.n, 8);
    // v0 (small) is drained to the PFS by every node.
    let (pfs_s, v0) = v0_on_pfs(&c, 3_000);
    // v1: unequal parts, an empty file, a member with no files.
    let seeded = ckptfs_testsupport::seeded_bytes;
    let mut v1: Vec<Vec<(String, Vec<u8>)>> = (0..c.n)
        .map(|i| {
            vec![(
                format!("/ckpt/v1/rank{i}"),
                seeded(100 + i as u64, 20_000 * (i + 1) + 77),
            )]
        })
        .collect();
    v1[2].push(("/ckpt/v1/empty2".into(), Vec::new()));
    v1[4][0].1.truncate(100);
    v1[5].clear();
    v1[7].push(("/ckpt/v1/meta".into(), seeded(99, 1234)));
    write_files(&c, "v1", 2, &v1);
    let key = format!("{}.2", c.job);
    let epoch = wait_protected(&c, &key);
    for i in 0..c.n {
        assert_eq!(c.status(i)["copies_sent"], 0, "{} made partner copies", node(i));
    }
    let list = c.ok(5, &["ckpt", "list"]);
    assert!(list.contains("local,erasure"), "{list}");

    // E25. node3 and node8 lost at once (racks r2 and r4), replaced empty.
    c.lose(2);
    c.lose(7);
    c.replace(2);
    c.replace(7);
    all_restart(&c, &[2, 7, 0, 1, 3, 4, 5, 6], None, "v1", &[2, 7]);
    all_back(&c, &v1, &(0..c.n).collect::<Vec<_>>());
    let ls = c.ok(2, &["ls", "-l", "/ckpt/v1"]);
    assert!(ls.contains("empty2"), "the empty file is not back: {ls}");
    // Neither replacement could compute its parity again (the other was lost with it):
    // the leader encodes the set again, every member holds its share of a newer epoch.
    let e = settled(&c, &key, epoch + 1);
    assert!(e > epoch);

    // E26. node1 (the leader), node4 and node6 lost at once: one more than rs:2
    // tolerates. Named by `restore --from-peers`; nothing of v1 is made up, and every
    // rank's restart falls back to v0 (the lost parts from the PFS).
    for i in [0, 3, 5] {
        c.lose(i);
    }
    for i in [0, 3, 5] {
        c.replace(i);
    }
    let out = failed_restore(&c, 0, "a restore without enough members succeeded");
    assert!(
        out.contains("3 member(s) lost (node1, node4, node6), the scheme tolerates 2"),
        "{out}"
    );
    assert!(!c.has(0, "/ckpt/v1/rank0"), "{out}");
    all_restart(&c, &[0, 3, 5, 1, 2, 4, 6, 7], Some(&pfs_s), "v0", &[]);
    all_back(&c, &v0, &(0..c.n).collect::<Vec<_>>());
    for i in [0, 3] {
        assert!(!c.has(i, &format!("/ckpt/v1/rank{i}")), "{} made up v1", node(i));
    }
}

/// Failure case E27 (docs/erasure.md): XOR over four, a byte of node2's checkpoint file
/// (its data part, stripe 0's segment) flipped beneath its CRC32C after the encode.
/// `get` of it fails naming the file; node4 lost: its rebuild needs that segment, the
/// survivor's checked reader refuses it, and the rebuild fails naming node4 (lost) and
/// node2 (unreadable, the file named): nothing of node4's part is written, served or
/// listed. The restart falls back to v0 on the PFS, byte-identical; node1's and node3's
/// files of v1 are still served as they were.
#[test]
fn a_corrupted_data_chunk_of_a_survivor_is_never_served_and_the_rebuild_falls_back() {
    let Some(mut c) = Cluster::new("er4d", 4, "xor", PORT) else {
        return;
    };
    let (pfs_s, v0) = v0_on_pfs(&c, 5_000);
    let v1 = write_named(&c, "v1", 2, 100_000);
    let key = format!("{}.2", c.job);
    wait_protected(&c, &key);
    let rank1 = "/ckpt/v1/rank1";
    c.flip_at(1, rank1, 9);

    // Never served by node2's store.
    let dst = c.dir.path().join("rank1.out");
    let o = c.run(1, &["get", rank1, dst.to_str().unwrap()]);
    let out = text(&o);
    assert!(!o.status.success(), "a corrupted chunk was served: {out}");
    assert!(out.contains("checksum mismatch in /ckpt/v1/rank1"), "{out}");
    assert!(!dst.exists(), "{} left behind", dst.display());

    // node4 lost: the rebuild cannot use node2's segment and fails, naming both.
    c.lose(3);
    c.replace(3);
    let out = failed_restore(&c, 3, "a rebuild used a corrupted data chunk");
    assert!(
        out.contains("1 member(s) lost (node4), the scheme tolerates 1; unreadable: node2"),
        "{out}"
    );
    assert!(
        out.contains("node2 refused: /ckpt/v1/rank1: chunk 0 does not match its CRC32C"),
        "the unreadable file is not named: {out}"
    );
    for (p, _) in &v1[3] {
        assert!(!c.has(3, p), "{p} half-rebuilt is served or listed: {out}");
    }

    // The restart of every rank: v1 cannot be had whole, v0 can.
    let o = c.restart_from(3, Some(&pfs_s));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}\n{}", c.logs());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "v0", "{err}");
    assert!(
        err.contains("unreadable: node2"),
        "the reason is not given: {err}"
    );
    all_restart(&c, &[0, 1, 2], Some(&pfs_s), "v0", &[]);
    all_back(&c, &v0, &(0..c.n).collect::<Vec<_>>());
    // What is served of v1 is what was written; node2's damaged file still is not.
    for i in [0, 2] {
        assert!(c.get(i, &v1[i][0].0) == v1[i][0].1, "{} differs", v1[i][0].0);
    }
    assert!(!c.run(1, &["get", rank1, dst.to_str().unwrap()]).status.success());
}

/// Failure cases E28-E29 (docs/erasure.md), Reed-Solomon k = 2 over six nodes (its
/// gather schedule, not the XOR ring of E24): node3's daemon SIGKILLed in the middle of
/// the encode (its link slowed to 8 Mbit/s): nobody says the dataset is protected while
/// it is down, and once it is back the set is encoded. Then node5 lost and replaced, its
/// `restore --from-peers` slowed by its link, and a survivor's daemon (node2) SIGKILLed
/// in its middle: `rs:2` has a shard to spare in every stripe, so the rebuild still
/// completes, byte-identical; with node2 back the set is whole again.
#[test]
fn rs2_set_of_six_survives_a_member_killed_during_the_encode_and_one_during_a_rebuild() {
    let Some(mut c) = Cluster::new("er4k", 6, "rs:2", PORT) else {
        return;
    };
    // E28.
    let (files, key) = encode_with_node3_killed(&mut c, 1_000_000);
    let epoch = wait_protected(&c, &key);

    // E29.
    let o = rebuild_with_a_survivor_killed(&mut c, 4, 1);
    let out = text(&o);
    assert!(
        o.status.success(),
        "rs:2 lost a rebuild to one killed survivor: {out}\n{}",
        c.logs()
    );
    // It could not compute its own parity shards again (node2's segments are in their
    // stripes): the part is back, the leader encodes the set again.
    assert!(
        out.contains("its parity shards not: stripe") && out.contains("node2"),
        "{out}"
    );
    c.sim.limit(4, None).unwrap();
    for (p, b) in &files[4] {
        assert!(c.get(4, p) == *b, "{p} on node5 differs after the rebuild: {out}");
    }
    // node2 back (its store kept): every member holds its share of one encoding again.
    c.replace(1);
    settled(&c, &key, epoch);
    all_back(&c, &files, &(0..c.n).collect::<Vec<_>>());
}
