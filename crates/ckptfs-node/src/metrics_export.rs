//! The daemon's metrics exposition (docs/metrics.md): the server started when
//! [`NodeConfig::metrics`](crate::NodeConfig::metrics) names an address, and what a
//! scrape renders from the daemon's state ([`crate::metrics`] has the settings and the
//! per-peer counters).

use crate::metrics::ErrorKind;
use crate::shared::Shared;
use ckptfs_metrics::{collect, Exposition, Kind};
use ckptfs_partner::{NodeError, Result};
use std::sync::{Arc, Weak};

/// Start the metrics server if configured; it stops when the returned value is dropped.
pub(crate) fn start(shared: &Arc<Shared>) -> Result<Option<ckptfs_metrics::Server>> {
    let Some(m) = &shared.cfg.metrics else {
        return Ok(None);
    };
    let weak: Weak<Shared> = Arc::downgrade(shared);
    let server = ckptfs_metrics::Server::start(
        &m.addr,
        Arc::new(move || match weak.upgrade() {
            Some(s) => render(&s),
            None => Err(ckptfs_metrics::MetricsError::Collect(
                "the daemon is stopping".into(),
            )),
        }),
    )
    .map_err(|e| NodeError::Invalid(format!("--metrics: {e}")))?;
    tracing::info!("metrics on http://{}/metrics", server.local_addr());
    Ok(Some(server))
}

/// The exposition of this daemon now.
pub(crate) fn render(shared: &Shared) -> ckptfs_metrics::Result<String> {
    let mut e = Exposition::new();
    let st = shared.status();
    let job = shared.cfg.metrics.as_ref().and_then(|m| m.job.clone());
    e.family(
        "ckptfs_node_info",
        Kind::Gauge,
        "The node daemon: its node id, store and cluster job (value 1).",
    )?
    .sample(
        &[
            ("node", &st.node),
            ("store", &st.store),
            ("cluster", &shared.cfg.cluster.job),
        ],
        1.0,
    )?;
    e.single(
        "ckptfs_node_uptime_seconds",
        Kind::Gauge,
        "Seconds since the node daemon started.",
        shared.started.elapsed().as_secs_f64(),
    )?;
    collect::store(&mut e, &shared.store)?;
    let policy = shared.cfg.datasets.clone();
    let sum = collect::levels(&mut e, &shared.store, &|path, size, mtime| match &policy {
        Some(p) => p.verdict(path, size, mtime) != ckptfs_datasets::CopyVerdict::Skip,
        None => true,
    })?;
    if let Some(job) = &job {
        collect::datasets(&mut e, &shared.store, job)?;
    }
    collect::drain(&mut e, shared.store.name())?;

    // Peers.
    let counts = shared.peer_metrics.snapshot();
    let mut f = e.family(
        "ckptfs_peer_up",
        Kind::Gauge,
        "1 while the peer answers heartbeats, else 0.",
    )?;
    for (id, p) in &st.peers {
        f.sample(&[("peer", id)], if p.up { 1.0 } else { 0.0 })?;
    }
    let mut f = e.family(
        "ckptfs_peer_partner",
        Kind::Gauge,
        "1 when the peer is one of this node's partners now (the plan's, a dead one replaced), else 0.",
    )?;
    for (id, p) in &st.peers {
        f.sample(&[("peer", id)], if p.partner { 1.0 } else { 0.0 })?;
    }
    let mut f = e.family(
        "ckptfs_peer_last_heartbeat_age_seconds",
        Kind::Gauge,
        "Seconds since the peer last answered a heartbeat (absent: never).",
    )?;
    for (id, p) in &st.peers {
        if let Some(ms) = p.last_seen_ms {
            f.sample(&[("peer", id)], ms as f64 / 1e3)?;
        }
    }
    let mut f = e.family(
        "ckptfs_heartbeats_missed_total",
        Kind::Counter,
        "Heartbeats to the peer that were not answered in time (or found no connection).",
    )?;
    for id in st.peers.keys() {
        let n = counts.get(id).map_or(0, |c| c.heartbeats_missed);
        f.sample(&[("peer", id)], n as f64)?;
    }
    let mut f = e.family(
        "ckptfs_partner_transfer_errors_total",
        Kind::Counter,
        "Partner-copy errors by peer and kind (connect, transfer, refused, crc).",
    )?;
    for id in st.peers.keys() {
        for k in [
            ErrorKind::Connect,
            ErrorKind::Transfer,
            ErrorKind::Refused,
            ErrorKind::Crc,
        ] {
            let n = counts
                .get(id)
                .and_then(|c| c.errors.get(&k))
                .copied()
                .unwrap_or(0);
            f.sample(&[("peer", id), ("kind", k.name())], n as f64)?;
        }
    }

    // Partner copies.
    for (name, help, v) in [
        (
            "ckptfs_partner_copies_sent_total",
            "Partner copies sent and acknowledged by the partner.",
            st.copies_sent as f64,
        ),
        (
            "ckptfs_partner_sent_bytes_total",
            "Bytes of the partner copies sent and acknowledged.",
            st.bytes_sent as f64,
        ),
        (
            "ckptfs_partner_copies_received_total",
            "Partner copies received from other nodes and stored.",
            st.copies_received as f64,
        ),
        (
            "ckptfs_partner_copies_refused_total",
            "Partner copies refused by a partner.",
            st.copies_refused as f64,
        ),
        (
            "ckptfs_partner_copies_abandoned_total",
            "Partner copies abandoned because the file changed during the copy.",
            st.changed_during_copy as f64,
        ),
        (
            "ckptfs_partner_chunks_refused_total",
            "Chunks received whose CRC32C did not match (asked for again).",
            st.chunks_refused as f64,
        ),
        (
            "ckptfs_partner_yield_seconds_total",
            "Seconds partner copies stepped back for the application's writes.",
            st.yielded_s,
        ),
    ] {
        e.single(name, Kind::Counter, help, v)?;
    }
    e.single(
        "ckptfs_partner_copies_pending",
        Kind::Gauge,
        "Complete files of this node that should have a partner copy and have none yet.",
        sum.pending.len() as f64,
    )?;
    e.single(
        "ckptfs_partner_copies_pending_bytes",
        Kind::Gauge,
        "Bytes of those files.",
        sum.pending.iter().map(|p| p.0).sum::<u64>() as f64,
    )?;
    let now = collect::now_ns();
    e.single(
        "ckptfs_partner_copy_pending_oldest_age_seconds",
        Kind::Gauge,
        "Seconds since the oldest file still waiting for a partner copy was last modified (0: none waits).",
        sum.pending
            .iter()
            .map(|p| now.saturating_sub(p.1) as f64 / 1e9)
            .fold(0.0, f64::max),
    )?;
    e.single(
        "ckptfs_partner_copy_in_flight_bytes",
        Kind::Gauge,
        "Bytes of the partner copy in flight still to send.",
        st.in_flight
            .iter()
            .map(|c| c.size.saturating_sub(c.done))
            .sum::<u64>() as f64,
    )?;
    let mut f = e.family(
        "ckptfs_partner_held_files",
        Kind::Gauge,
        "Files this node holds in its memory for another node, by source node.",
    )?;
    for (src, n) in &st.holding {
        f.sample(&[("source", src)], *n as f64)?;
    }
    Ok(e.finish())
}
