//! Datasets across nodes, the daemon's side: it answers other nodes' dataset questions
//! ([`Request`], [`Reply`]; the client that asks them, [`ClusterNodes`], is in
//! `ckptfs-partner`, with the set levels it recovers from, `ckptfs_partner::set_levels`)
//! and exchanges id floors with its peers.

pub use ckptfs_partner::cluster::{fill_levels, holds, records, ClusterNodes, Reply, Request};
use ckptfs_partner::peer::Msg;
use ckptfs_store::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Server side: answer one question (JSON in, JSON out; never fails).
pub(crate) fn answer(store: &Store, me: &str, dests: &[PathBuf], body: &str) -> String {
    let reply = match serde_json::from_str::<Request>(body) {
        Err(e) => Reply::Error(format!("not a dataset request: {e}")),
        Ok(Request::Records { job }) => match records(store, &job, dests) {
            Ok(v) => Reply::Records(v),
            Err(e) => Reply::Error(e),
        },
        Ok(Request::Agreed { dataset }) => match ckptfs_datasets::record::save_verdict(store, &dataset) {
            Ok(()) => Reply::Kept,
            Err(e) => Reply::Error(e.to_string()),
        },
        Ok(Request::Restarts { job }) => match ckptfs_datasets::check_component("job", &job) {
            Ok(()) => Reply::Restarts(ckptfs_datasets::restart_round::load_rounds(store, &job)),
            Err(e) => Reply::Error(e.to_string()),
        },
        Ok(Request::Floors) => Reply::Floors(ckptfs_datasets::id_floor::floors(store)),
        Ok(Request::Floor { job, next_id }) => match ckptfs_datasets::id_floor::raise(store, &job, next_id) {
            Ok(_) => Reply::Kept,
            Err(e) => Reply::Error(e.to_string()),
        },
        Ok(Request::Holds { files, .. }) if files.len() > ckptfs_partner::holds::MAX_HOLDS_FILES => {
            Reply::Error(format!(
                "{} files in one holds question, at most {}",
                files.len(),
                ckptfs_partner::holds::MAX_HOLDS_FILES
            ))
        }
        Ok(Request::Holds { owner, files }) => {
            let mut budget = ckptfs_partner::holds::READ_BUDGET;
            Reply::Holds(ckptfs_partner::holds::answer(
                store,
                me,
                &owner,
                &files,
                &mut budget,
            ))
        }
        Ok(Request::Unrecorded { job, root }) => match ckptfs_partner::unrecorded::scan(store, &job, &root) {
            Ok(v) => Reply::Unrecorded(v),
            Err(e) => Reply::Error(e),
        },
    };
    let text = serde_json::to_string(&reply).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    if text.len() > ckptfs_transport::frame::MAX_CONTROL as usize {
        return serde_json::to_string(&Reply::Error(format!(
            "the answer is {} bytes, more than one frame carries",
            text.len()
        )))
        .unwrap_or_default();
    }
    text
}

/// [`answer`] for the daemon's connection handler, off the async threads (a `holds`
/// question reads the files).
pub(crate) async fn answer_async(shared: &crate::shared::Shared, body: String) -> String {
    let store = shared.store.clone();
    let me = shared.cfg.node_id.clone();
    let dests: Vec<PathBuf> = shared
        .cfg
        .drain
        .as_ref()
        .map(|d| d.targets.iter().map(|t| t.dir.clone()).collect())
        .unwrap_or_default();
    tokio::task::spawn_blocking(move || answer(&store, &me, &dests, &body))
        .await
        .unwrap_or_else(|e| {
            serde_json::to_string(&Reply::Error(format!("the answer failed: {e}"))).unwrap_or_default()
        })
}

/// The daemon's id floor exchange (failure case D10): at start and every `every` after,
/// ask every peer for its floors and raise this node's to them, so a replacement knows
/// how far the job's ids went before the nodes it learned it from can be lost too.
pub(crate) async fn floor_loop(shared: Arc<crate::shared::Shared>, every: Duration) {
    loop {
        for n in &shared.cfg.cluster.nodes {
            if n.id == shared.cfg.node_id {
                continue;
            }
            let got = tokio::time::timeout(Duration::from_secs(5), async {
                let mut c = shared.connect(&n.id).await.map_err(|e| e.to_string())?;
                let body = serde_json::to_string(&Request::Floors).map_err(|e| e.to_string())?;
                c.send(Msg::Query(body)).await.map_err(|e| e.to_string())?;
                match c.recv().await.map_err(|e| e.to_string())? {
                    Some(Msg::QueryReply(t)) => serde_json::from_str::<Reply>(&t).map_err(|e| e.to_string()),
                    _ => Err("no answer".to_string()),
                }
            })
            .await;
            let Ok(Ok(Reply::Floors(m))) = got else { continue };
            let store = shared.store.clone();
            let _ = tokio::task::spawn_blocking(move || {
                for (job, f) in m.into_iter().take(ckptfs_datasets::id_floor::MAX_JOBS) {
                    match ckptfs_datasets::id_floor::raise(&store, &job, f) {
                        Ok(true) => tracing::info!("ids of job {job} continue at {f} (a peer's floor)"),
                        Ok(false) => {}
                        Err(e) => tracing::debug!("id floor {f} of job {job}: {e}"),
                    }
                }
            })
            .await;
        }
        tokio::time::sleep(every).await;
    }
}
