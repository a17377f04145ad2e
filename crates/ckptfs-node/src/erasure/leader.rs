//! The leader: which datasets to encode, and their encoding. (see [`super`]).

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------
// The leader.

/// A dataset key and every member's files of it as the agreed record lists them.
pub(super) type Wants = (String, BTreeMap<String, Vec<WantFile>>);

/// Complete datasets of the job newer than the newest one this set already protects
/// (key, every member's files as the agreed record lists them), newest first; and that
/// newest protected one with its epoch (the leader checks that every member still holds
/// its share of it, and encodes it again when one does not: a member rebuilt without
/// its parity, after more than one loss).
pub(super) fn to_encode(store: &Store, cfg: &ErasureConfig, me: &str) -> (Vec<Wants>, Option<(Wants, u64)>) {
    let Ok((all, _)) = ckptfs_datasets::record::load_all(store, &cfg.job) else {
        return (Vec::new(), None);
    };
    let all =
        ckptfs_datasets::record::with_verdicts(all, ckptfs_datasets::record::load_verdicts(store, &cfg.job));
    let level = match level_of(store) {
        Ok(l) => l,
        Err(_) => return (Vec::new(), None),
    };
    let mut out = Vec::new();
    let mut protected = None;
    for d in all.iter().rev() {
        if d.state != ckptfs_datasets::State::Complete || d.nodes.is_empty() {
            continue;
        }
        let key = dataset_key(&cfg.job, d.id);
        let wants: BTreeMap<String, Vec<WantFile>> = cfg
            .set
            .members
            .iter()
            .map(|m| {
                let files = d
                    .nodes
                    .get(m)
                    .map(|p| {
                        p.files
                            .iter()
                            .map(|(path, f)| WantFile {
                                path: path.clone(),
                                size: f.size,
                                crc32c: f.crc32c,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (m.clone(), files)
            })
            .collect();
        if let Some(h) = member::header(&level, &key, &cfg.set.name) {
            if h.members == cfg.set.members
                && h.index_of(me).is_some_and(|i| member::holds_share(&level, &h, i))
            {
                protected = Some(((key, wants), h.epoch));
                break;
            }
        }
        out.push((key, wants));
    }
    (out, protected)
}

/// The leader's loop: encode every complete dataset not yet protected (newest first),
/// when every member answers heartbeats. Runs on the partner-copy threads (low
/// priority): the application never waits for it.
pub(crate) async fn leader_loop(shared: Arc<Shared>) {
    let Some(cfg) = shared.cfg.erasure.clone() else {
        return;
    };
    let me = shared.cfg.node_id.clone();
    if cfg.set.members.first() != Some(&me) {
        return;
    }
    let mut failed: HashMap<String, Instant> = HashMap::new();
    let mut checked: Option<Instant> = None;
    // Protected datasets found short of a member's share, being encoded again.
    let mut degraded: std::collections::HashSet<String> = Default::default();
    loop {
        tokio::time::sleep(cfg.every).await;
        let (mut todo, protected) = {
            let (store, cfg, me) = (shared.store.clone(), cfg.clone(), me.clone());
            tokio::task::spawn_blocking(move || to_encode(&store, &cfg, &me))
                .await
                .unwrap_or_default()
        };
        // Every few seconds: does every member still hold its share of the newest
        // protected dataset? One that does not (rebuilt without its parity) and answers
        // again gets a new encoding of the set.
        if let Some(((key, wants), epoch)) = protected {
            if checked.is_none_or(|t| t.elapsed() >= RECHECK_EVERY)
                && cfg.set.members.iter().all(|m| *m == me || shared.is_up(m))
            {
                checked = Some(Instant::now());
                let short = members_without_share(&shared, &cfg, &key, epoch).await;
                if !short.is_empty() {
                    tracing::info!(
                        "erasure: {} no longer hold their share of {key}: encoding the set again",
                        short.join(", ")
                    );
                    shared.erasure.set_state(
                        &key,
                        DatasetErasure {
                            state: "degraded".into(),
                            epoch,
                            detail: Some(format!("no share on {}", short.join(", "))),
                            ..Default::default()
                        },
                    );
                    degraded.insert(key.clone());
                    todo.push((key, wants));
                }
            }
        }
        for (key, wants) in todo {
            if failed.get(&key).is_some_and(|t| t.elapsed() < RETRY_AFTER) {
                continue;
            }
            let down: Vec<&String> = cfg
                .set
                .members
                .iter()
                .filter(|m| **m != me && !shared.is_up(m))
                .collect();
            if !down.is_empty() {
                shared.erasure.set_state(
                    &key,
                    DatasetErasure {
                        state: "waiting".into(),
                        detail: Some(format!(
                            "member(s) not answering: {}",
                            down.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                        )),
                        ..Default::default()
                    },
                );
                continue;
            }
            let t0 = Instant::now();
            match encode_dataset(&shared, &cfg, &key, &wants).await {
                Ok(epoch) => {
                    tracing::info!(
                        "erasure: dataset {key} protected by {} (epoch {epoch:016x}) in {:.3} s",
                        cfg.level_id(),
                        t0.elapsed().as_secs_f64()
                    );
                    shared.erasure.set_state(
                        &key,
                        DatasetErasure {
                            state: "protected".into(),
                            epoch,
                            detail: None,
                            seconds: Some(t0.elapsed().as_secs_f64()),
                        },
                    );
                    failed.remove(&key);
                    degraded.remove(&key);
                }
                Err(e) if degraded.contains(&key) => {
                    // The older encoding still protects what it can: degraded, not failed.
                    tracing::debug!("erasure: dataset {key} not encoded again yet: {e}");
                    failed.insert(key, Instant::now());
                }
                Err(e) => {
                    tracing::warn!("erasure: dataset {key} not encoded: {e}");
                    shared.erasure.set_state(
                        &key,
                        DatasetErasure {
                            state: "failed".into(),
                            detail: Some(e.to_string()),
                            ..Default::default()
                        },
                    );
                    failed.insert(key, Instant::now());
                }
            }
        }
    }
}

/// How often the leader checks that every member still holds its share.
pub const RECHECK_EVERY: Duration = Duration::from_secs(3);

/// The members (other than this one) that do not list `key`'s encoding `epoch` as a
/// share they hold whole; a member that cannot be asked is not counted (it is down).
pub(super) async fn members_without_share(
    shared: &Arc<Shared>,
    cfg: &ErasureConfig,
    key: &str,
    epoch: u64,
) -> Vec<String> {
    let mut short = Vec::new();
    for m in cfg.set.members.iter().filter(|m| **m != shared.cfg.node_id) {
        let Ok(mut c) = shared.connect(m).await else {
            continue;
        };
        match ask(
            &mut c,
            &EraMsg::Headers {
                set: cfg.set.name.clone(),
            },
            Duration::from_secs(10),
        )
        .await
        {
            Ok(EraMsg::Listed { datasets }) if !datasets.iter().any(|(d, e)| d == key && *e == epoch) => {
                short.push(m.clone())
            }
            _ => {}
        }
    }
    short
}

/// The time an encode of parts of up to `largest` bytes may take before it is given up.
pub(super) fn encode_timeout(largest: u64) -> Duration {
    Duration::from_secs(60) + Duration::from_secs(largest / (4 << 20))
}

/// Encode `key` across the set; the epoch, once every member keeps the header.
pub(super) async fn encode_dataset(
    shared: &Arc<Shared>,
    cfg: &ErasureConfig,
    key: &str,
    wants: &BTreeMap<String, Vec<WantFile>>,
) -> Result<u64> {
    let me = shared.cfg.node_id.clone();
    // 1. Every member's part (its files as the agreed record lists them, chunk CRCs).
    let mut parts = Vec::with_capacity(cfg.set.members.len());
    let mut conns: BTreeMap<String, Conn> = BTreeMap::new();
    for m in &cfg.set.members {
        let want = wants.get(m).cloned().unwrap_or_default();
        let part = if *m == me {
            let (store, me2) = (shared.store.clone(), me.clone());
            tokio::task::spawn_blocking(move || my_part(&store, &me2, &want))
                .await
                .map_err(|e| err(e.to_string()))??
        } else {
            let mut c = shared.connect(m).await?;
            let ans = ask(
                &mut c,
                &EraMsg::PartOf {
                    set: cfg.set.name.clone(),
                    dataset: key.to_string(),
                    files: want,
                },
                Duration::from_secs(60),
            )
            .await?;
            conns.insert(m.clone(), c);
            match ans {
                EraMsg::Part { part } if part.member == *m => part,
                EraMsg::Part { part } => {
                    return Err(proto_err(m, format!("answered the part of {:?}", part.member)));
                }
                other => return Err(proto_err(m, format!("answered {other:?} to a part question"))),
            }
        };
        parts.push(part);
    }
    // 2. The plan.
    let largest = parts.iter().map(|p| p.size).max().unwrap_or(0);
    let lay = Layout::new(cfg.scheme, cfg.set.members.len(), largest).map_err(err)?;
    let plan = Header {
        format: FORMAT,
        dataset: key.to_string(),
        set: cfg.set.name.clone(),
        epoch: (ckptfs_settings::now_ns()).max(1),
        scheme: cfg.scheme,
        members: cfg.set.members.clone(),
        parts,
        segment: lay.segment,
        chunk_size: PARITY_CHUNK,
        parity: Vec::new(),
    };
    plan.check_plan().map_err(err)?;
    shared.erasure.set_state(
        key,
        DatasetErasure {
            state: "encoding".into(),
            epoch: plan.epoch,
            ..Default::default()
        },
    );
    // 3. Every member takes its place in the ring at once; each answers with its
    // parity records once stored and verified.
    let timeout = encode_timeout(largest);
    let mut tasks = tokio::task::JoinSet::new();
    for (m, mut c) in std::mem::take(&mut conns) {
        let plan = plan.clone();
        tasks.spawn(async move {
            let r = ask(&mut c, &EraMsg::Encode { plan }, timeout).await;
            (m, r, c)
        });
    }
    let mine = member_role(shared.clone(), plan.clone(), me.clone());
    let mine = tokio::time::timeout(timeout, mine).await;
    let mut parity: Vec<ParityRecord> = Vec::new();
    let mut problems = Vec::new();
    match mine {
        Ok(Ok(v)) => parity.extend(v),
        Ok(Err(e)) => problems.push(format!("{me}: {e}")),
        Err(_) => problems.push(format!("{me}: no parity in {timeout:?}")),
    }
    while let Some(r) = tasks.join_next().await {
        let Ok((m, r, c)) = r else { continue };
        match r {
            Ok(EraMsg::Stored { parity: v }) => {
                let i = plan.index_of(&m).expect("member");
                let held = plan.layout().held_by(i);
                if v.len() != held.len()
                    || v.iter()
                        .any(|p| p.holder != m || !held.contains(&(p.stripe, p.row)))
                {
                    problems.push(format!("{m}: answered parity records that are not its own"));
                } else {
                    parity.extend(v);
                }
                conns.insert(m, c);
            }
            Ok(other) => problems.push(format!("{m}: answered {other:?}")),
            Err(e) => problems.push(format!("{m}: {e}")),
        }
    }
    if !problems.is_empty() {
        return Err(err(format!(
            "encoding {key} by {} stopped, nothing committed: {}",
            cfg.level_id(),
            problems.join("; ")
        )));
    }
    parity.sort_by_key(|p| (p.stripe, p.row));
    let header = Header { parity, ..plan };
    header.check().map_err(err)?;
    // 4. Commit: the header on every member (then this one).
    for m in &cfg.set.members {
        if *m == me {
            continue;
        }
        let c = match conns.get_mut(m) {
            Some(c) => c,
            None => return Err(err(format!("{m}: no connection for the commit"))),
        };
        match ask(
            c,
            &EraMsg::Commit {
                header: header.clone(),
            },
            Duration::from_secs(60),
        )
        .await?
        {
            EraMsg::Done => {}
            other => return Err(proto_err(m, format!("answered {other:?} to the commit"))),
        }
    }
    commit_local(shared, &header).await?;
    Ok(header.epoch)
}
