//! `ckptfs bench erasure --links`: one erasure set of node daemons on simulated nodes
//! whose links `tc` limits, against the same nodes with partner copies, for each link
//! rate (docs/erasure.md, "Benchmark on limited links"). Figures only, never asserted.

use super::nodes::{args, Bed};
use anyhow::{Context, Result};
use ckptfs_bench::report::median;
use serde::Serialize;

/// One scheme's figures on one link.
#[derive(Debug, Clone, Serialize)]
pub struct SchemeRow {
    /// `xor`, `rs:2` or `partner` (one partner copy per part: the baseline).
    pub scheme: String,
    /// Median seconds from the dataset complete (every part written) until every
    /// member's parity is stored and verified (the leader holds the committed header);
    /// partner: from the daemons continuing until every part's copy is verified.
    pub protect_s: f64,
    /// Every repetition's seconds.
    pub protect_all_s: Vec<f64>,
    /// The leader's own encode time (its status; erasure only), median.
    pub leader_encode_s: Option<f64>,
    /// `protect_s` over the partner copies' (same link).
    pub protect_vs_partner: f64,
    /// Bytes sent per node per protection (the daemons' counters: erasure pieces, or
    /// partner-copy bytes), over the part.
    pub sent_per_part: f64,
    /// `sent_per_part` over the partner copies'.
    pub sent_vs_partner: f64,
    /// Erasure rows: partner-copy bytes the daemons sent meanwhile, per node per
    /// protection, over the part (0 expected: the open dataset holds the parts).
    pub copies_sent_per_part: f64,
    /// Bytes each node keeps for the others (parity shards and header of one dataset,
    /// or partner copies), mean over the nodes, over the part.
    pub memory_per_part: f64,
    /// `memory_per_part` over the partner copies'.
    pub memory_vs_partner: f64,
    /// Median seconds to bring one lost node's part back into its emptied store:
    /// rebuilt from the set, or restored from its partner's copy.
    pub restore_s: f64,
    /// Every repetition's seconds.
    pub restore_all_s: Vec<f64>,
    /// `restore_s` over the restore from the partner copy.
    pub restore_vs_partner: f64,
}

/// Everything measured on one link setting.
#[derive(Debug, Clone, Serialize)]
pub struct LinkRun {
    /// As given (`none`, `10gbit`, ...).
    pub link: String,
    /// The `tc` rate in bit/s (None: no limit).
    pub rate_bit_s: Option<u64>,
    /// Bytes of each node's part.
    pub part_bytes: u64,
    /// Median seconds of one TCP stream of a part from node1 to node2 on the link.
    pub wire_s: f64,
    /// Every repetition's seconds.
    pub wire_all_s: Vec<f64>,
    /// xor, rs:2, partner.
    pub rows: Vec<SchemeRow>,
    /// Median seconds to restore the lost node's part from its drained copy (a
    /// directory on this machine's local disk: no link crossed).
    pub pfs_restore_s: f64,
    /// Every repetition's seconds.
    pub pfs_restore_all_s: Vec<f64>,
}

/// What one scheme measured before the ratios.
struct Raw {
    scheme: String,
    protect: Vec<f64>,
    encode: Vec<f64>,
    sent_per_part: f64,
    copies_sent_per_part: f64,
    memory_per_part: f64,
    restore: Vec<f64>,
}

fn progress(link: &str, what: &str) {
    eprintln!("bench erasure [{link}]: {what}");
}

fn sum(v: &[serde_json::Value], key: &str) -> u64 {
    v.iter().filter_map(|x| x[key].as_u64()).sum()
}

/// One link setting: the wire, then the erasure schemes of `schemes` (`xor`, `rs:K`) in
/// their order, then partner copies (and the PFS restore) when `schemes` names `partner`.
pub fn one_link(
    bed: &mut Bed,
    link: &str,
    rate: Option<u64>,
    part: u64,
    reps: usize,
    schemes: &[String],
) -> Result<LinkRun> {
    bed.limit(rate)?;
    let n = bed.n as f64;
    let mut wire = Vec::new();
    for r in 0..reps {
        let s = bed.tcp_stream(0, 1, part)?;
        progress(
            link,
            &format!("TCP stream node1 -> node2 {}/{reps}: {s:.3} s", r + 1),
        );
        wire.push(s);
    }
    let mut raws = Vec::new();
    for scheme in schemes.iter().map(String::as_str).filter(|s| *s != "partner") {
        progress(link, &format!("{scheme}: starting {} daemons", bed.n));
        bed.configure(scheme)?;
        // Files of no dataset get partner copies even with erasure sets: an open
        // dataset on every node first keeps the parts from being copied.
        bed.on_all("open", &|_| Vec::new())?;
        let parts = bed.on_all("write", &|i| args(&[("--size", part), ("--seed", i as u64 + 1)]))?;
        let map: serde_json::Map<String, serde_json::Value> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| (super::nodes::id(i), p.clone()))
            .collect();
        let map = serde_json::Value::Object(map).to_string();
        // Heartbeats first: the leader encodes only when every member answers.
        std::thread::sleep(std::time::Duration::from_millis(800));
        let before = bed.on_all("counters", &|_| args(&[("--id", 0)]))?;
        let (mut protect, mut encode) = (Vec::new(), Vec::new());
        for r in 0..reps {
            let mut extra = args(&[("--id", r as u64 + 1)]);
            extra.extend(["--parts".to_string(), map.clone()]);
            let v = bed.worker(0, "protect", &extra)?;
            let s = v["protect_s"].as_f64().context("protect_s")?;
            progress(link, &format!("{scheme}: protect {}/{reps}: {s:.3} s", r + 1));
            protect.push(s);
            if let Some(e) = v["encode_s"].as_f64() {
                encode.push(e);
            }
        }
        // The members' counters reach their status files within 0.5 s.
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let after = bed.on_all("counters", &|_| args(&[("--id", reps as u64)]))?;
        let sent = sum(&after, "erasure_sent").saturating_sub(sum(&before, "erasure_sent"));
        let copies = sum(&after, "copy_sent").saturating_sub(sum(&before, "copy_sent"));
        let memory = sum(&after, "parity_bytes");
        // One node lost, rebuilt from the set (the survivors' daemons serve it).
        let mut restore = Vec::new();
        for r in 0..reps {
            bed.lose(1)?;
            let v = bed.worker(1, "rebuild", &args(&[("--id", reps as u64)]))?;
            let s = v["seconds"].as_f64().context("seconds")?;
            progress(
                link,
                &format!("{scheme}: node2 lost, rebuilt {}/{reps}: {s:.3} s", r + 1),
            );
            restore.push(s);
        }
        raws.push(Raw {
            scheme: scheme.into(),
            protect,
            encode,
            sent_per_part: sent as f64 / (reps as f64 * n) / part as f64,
            copies_sent_per_part: copies as f64 / (reps as f64 * n) / part as f64,
            memory_per_part: memory as f64 / n / part as f64,
            restore,
        });
    }
    let mut pfs_restore = Vec::new();
    if schemes.iter().any(|s| s == "partner") {
        let (raw, pfs) = partner(bed, link, part, reps)?;
        raws.push(raw);
        pfs_restore = pfs;
    }
    // The baseline of the ratios: the partner copies (none measured: ratios 0).
    let base = raws.last().filter(|r| r.scheme == "partner").map(|r| {
        (
            median(&r.protect),
            r.sent_per_part,
            r.memory_per_part,
            median(&r.restore),
        )
    });
    let (bp, bs, bm, br) = base.unwrap_or((0.0, 0.0, 0.0, 0.0));
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let rows = raws
        .into_iter()
        .map(|r| {
            let (p, s) = (median(&r.protect), median(&r.restore));
            SchemeRow {
                scheme: r.scheme,
                protect_s: p,
                protect_vs_partner: ratio(p, bp),
                leader_encode_s: (!r.encode.is_empty()).then(|| median(&r.encode)),
                protect_all_s: r.protect,
                sent_per_part: r.sent_per_part,
                sent_vs_partner: ratio(r.sent_per_part, bs),
                copies_sent_per_part: r.copies_sent_per_part,
                memory_per_part: r.memory_per_part,
                memory_vs_partner: ratio(r.memory_per_part, bm),
                restore_s: s,
                restore_vs_partner: ratio(s, br),
                restore_all_s: r.restore,
            }
        })
        .collect();
    Ok(LinkRun {
        link: link.into(),
        rate_bit_s: rate,
        part_bytes: part,
        wire_s: median(&wire),
        wire_all_s: wire,
        rows,
        pfs_restore_s: median(&pfs_restore),
        pfs_restore_all_s: pfs_restore,
    })
}

/// Partner copies on the link (the baseline), then the PFS restore: their row, and the
/// PFS restore's seconds.
fn partner(bed: &mut Bed, link: &str, part: u64, reps: usize) -> Result<(Raw, Vec<f64>)> {
    let n = bed.n as f64;
    progress(link, &format!("partner copies: starting {} daemons", bed.n));
    bed.configure("partner:1")?;
    std::thread::sleep(std::time::Duration::from_millis(800));
    // The parts are held while written (an open dataset), then copied when their
    // complete dataset is saved, as the erasure sets encode one.
    bed.on_all("open", &|_| Vec::new())?;
    let before = bed.on_all("counters", &|_| Vec::new())?;
    let mut protect = Vec::new();
    for r in 0..reps {
        let s = bed.partner_round(part, 100 + (r * bed.n) as u64, r as u64 + 1)?;
        progress(
            link,
            &format!("partner copies: protect {}/{reps}: {s:.3} s", r + 1),
        );
        protect.push(s);
    }
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let after = bed.on_all("counters", &|_| Vec::new())?;
    let sent = sum(&after, "copy_sent").saturating_sub(sum(&before, "copy_sent"));
    let memory = sum(&after, "partner_bytes");
    // node2's part drained to a directory on local disk while it is whole.
    let pfs = bed.dir.path().join("pfs");
    std::fs::create_dir_all(&pfs)?;
    let pfs_arg = ["--dir".to_string(), pfs.display().to_string()];
    bed.worker(1, "drain", &pfs_arg)?;
    let mut restore = Vec::new();
    for r in 0..reps {
        bed.lose(1)?;
        let v = bed.worker(1, "restore-peers", &[])?;
        let s = v["seconds"].as_f64().context("seconds")?;
        progress(
            link,
            &format!(
                "partner copies: node2 lost, restored from its partner {}/{reps}: {s:.3} s",
                r + 1
            ),
        );
        restore.push(s);
    }
    let mut pfs_restore = Vec::new();
    for r in 0..reps {
        bed.lose(1)?;
        let v = bed.worker(1, "restore-pfs", &pfs_arg)?;
        let s = v["seconds"].as_f64().context("seconds")?;
        progress(
            link,
            &format!(
                "node2 lost, restored from the PFS copy {}/{reps}: {s:.3} s",
                r + 1
            ),
        );
        pfs_restore.push(s);
    }
    let raw = Raw {
        scheme: "partner".into(),
        protect,
        encode: Vec::new(),
        sent_per_part: sent as f64 / (reps as f64 * n) / part as f64,
        copies_sent_per_part: 0.0,
        memory_per_part: memory as f64 / n / part as f64,
        restore,
    };
    Ok((raw, pfs_restore))
}

/// The table of one link.
pub fn print(r: &LinkRun, nodes: usize) {
    let mib = r.part_bytes >> 20;
    println!(
        "\n{nodes} simulated nodes, link {} (tc, both directions), parts of {mib} MiB; \
         wire: one TCP stream node1 -> node2 of a part {:.3} s ({:.0} MB/s):",
        r.link,
        r.wire_s,
        r.part_bytes as f64 / r.wire_s.max(1e-9) / 1e6
    );
    println!(
        "scheme    protect s  /partner  /wire  leader s  sent/part  /partner  memory/part  /partner  restore s  /partner"
    );
    for x in &r.rows {
        let leader = x
            .leader_encode_s
            .map(|s| format!("{s:8.3}"))
            .unwrap_or_else(|| format!("{:>8}", "-"));
        println!(
            "{:<8} {:>10.3} {:>9.2} {:>6.2}  {leader} {:>10.2} {:>9.2} {:>12.2} {:>9.2} {:>10.3} {:>9.2}",
            x.scheme,
            x.protect_s,
            x.protect_vs_partner,
            x.protect_s / r.wire_s.max(1e-9),
            x.sent_per_part,
            x.sent_vs_partner,
            x.memory_per_part,
            x.memory_vs_partner,
            x.restore_s,
            x.restore_vs_partner
        );
    }
    println!(
        "pfs      restore of the lost node's part from its drained copy (local disk, no link): {:.3} s",
        r.pfs_restore_s
    );
}
