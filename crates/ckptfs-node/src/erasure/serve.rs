//! The server side: questions, ring connections, commits and reads from the set. (see [`super`]).

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------
// The server side.

pub(super) fn set_of_shared(shared: &Shared) -> std::result::Result<ErasureConfig, Box<EraMsg>> {
    shared.cfg.erasure.clone().ok_or_else(|| {
        Box::new(fail(
            libc::ENOENT,
            format!("{} has no erasure set", shared.cfg.node_id),
        ))
    })
}

/// A ring connection refused: the encoding it feeds stops with `why` (counted as a
/// refused piece when `counted`), and the connection ends with the same reason.
fn stop_ring(
    shared: &Shared,
    tx: &mpsc::UnboundedSender<PieceIn>,
    peer: &str,
    why: String,
    counted: bool,
) -> Result<()> {
    if counted {
        shared.erasure.refused();
    }
    let _ = tx.send(Err(why.clone()));
    Err(proto_err(peer, why))
}

/// Serve one erasure message (the first `Erasure` frame of a request) on `conn`.
pub(crate) async fn serve(shared: &Arc<Shared>, conn: &mut Conn, body: String) -> Result<()> {
    let peer = conn.peer().to_string();
    let msg = match proto::parse(&body) {
        Ok(m) => m,
        Err(e) => {
            shared.erasure.refused();
            return Err(proto_err(&peer, e));
        }
    };
    let cfg = match set_of_shared(shared) {
        Ok(c) => c,
        Err(f) => return send_era(conn, &f).await,
    };
    let me = shared.cfg.node_id.clone();
    let leader = cfg.set.members.first().cloned().unwrap_or_default();
    let member_of = |n: &str| cfg.set.members.iter().any(|m| m == n);
    let refuse = |what: &str| {
        fail(
            libc::EACCES,
            format!("{peer} may not {what} (set {})", cfg.set.name),
        )
    };
    match msg {
        EraMsg::PartOf { set, dataset, files } => {
            if set != cfg.set.name || peer != leader {
                return send_era(conn, &refuse("ask for parts")).await;
            }
            let (store, me2) = (shared.store.clone(), me.clone());
            let ans = match tokio::task::spawn_blocking(move || my_part(&store, &me2, &files)).await {
                Ok(Ok(part)) => EraMsg::Part { part },
                Ok(Err(e)) => fail(e.errno(), format!("{dataset}: {e}")),
                Err(e) => fail(libc::EIO, e),
            };
            send_era(conn, &ans).await?;
            // The plan and the commit follow on the same connection.
            loop {
                let next = match tokio::time::timeout(Duration::from_secs(120), conn.recv()).await {
                    Ok(r) => r?,
                    Err(_) => return Ok(()),
                };
                match next {
                    Some(Msg::Erasure(b)) => match proto::parse(&b).map_err(|e| proto_err(&peer, e))? {
                        EraMsg::Encode { plan } => {
                            let ans = match member_role(shared.clone(), plan, me.clone()).await {
                                Ok(parity) => EraMsg::Stored { parity },
                                Err(e) => fail(e.errno(), e),
                            };
                            send_era(conn, &ans).await?;
                        }
                        EraMsg::Commit { header } => {
                            let ans = match commit_local(shared, &header).await {
                                Ok(()) => EraMsg::Done,
                                Err(e) => fail(e.errno(), e),
                            };
                            send_era(conn, &ans).await?;
                            return Ok(());
                        }
                        other => return Err(proto_err(&peer, format!("unexpected {other:?}"))),
                    },
                    Some(other) => return Err(proto_err(&peer, format!("unexpected {}", other.name()))),
                    None => return Ok(()),
                }
            }
        }
        EraMsg::Ring { set, dataset, epoch } => {
            if set != cfg.set.name || !senders_to(&cfg, &me).contains(&peer) {
                shared.erasure.refused();
                return Err(proto_err(
                    &peer,
                    "sends pieces of an encoding but is not a member that sends to this one",
                ));
            }
            serve_ring(shared, conn, &dataset, epoch).await
        }
        EraMsg::Headers { set } => {
            if set != cfg.set.name || !member_of(&peer) {
                return send_era(conn, &refuse("list the set's encodings")).await;
            }
            let (store, me2, set2) = (shared.store.clone(), me.clone(), set.clone());
            let datasets = tokio::task::spawn_blocking(move || whole_shares(&store, &set2, &me2))
                .await
                .unwrap_or_default();
            send_era(conn, &EraMsg::Listed { datasets }).await
        }
        EraMsg::HeaderOf { set, dataset } => {
            if set != cfg.set.name || !member_of(&peer) {
                return send_era(conn, &refuse("read the set's headers")).await;
            }
            let level = level_of(&shared.store)?;
            match member::header(&level, &dataset, &set) {
                Some(header) => send_era(conn, &EraMsg::Head { header }).await,
                None => {
                    send_era(
                        conn,
                        &fail(libc::ENOENT, format!("no header of {dataset} on {me}")),
                    )
                    .await
                }
            }
        }
        EraMsg::Read {
            set,
            dataset,
            epoch,
            stripe,
            row,
            parity,
        } => {
            if set != cfg.set.name || !member_of(&peer) {
                return send_era(conn, &refuse("read the set's segments")).await;
            }
            serve_read(
                shared,
                conn,
                &set,
                &dataset,
                epoch,
                stripe as usize,
                row as usize,
                parity,
            )
            .await
        }
        EraMsg::Encode { .. } | EraMsg::Commit { .. } => {
            // Only after the part question, from the leader, on the same connection.
            send_era(conn, &refuse("send a plan or a commit here")).await
        }
        other => Err(proto_err(&peer, format!("unexpected {other:?}"))),
    }
}

/// Pieces of running sums from the predecessor, handed to the encoding they belong to.
pub(super) async fn serve_ring(
    shared: &Arc<Shared>,
    conn: &mut Conn,
    dataset: &str,
    epoch: u64,
) -> Result<()> {
    let peer = conn.peer().to_string();
    let key = (dataset.to_string(), epoch);
    // The predecessor may have got the plan first: wait for this member's encoding.
    let deadline = Instant::now() + PIECE_TIMEOUT;
    let tx: mpsc::UnboundedSender<PieceIn> = loop {
        let registered = shared.erasure.registered.notified();
        if let Some(tx) = shared.erasure.jobs.lock().expect("jobs").get(&key).cloned() {
            break tx;
        }
        if Instant::now() >= deadline {
            return Err(proto_err(
                &peer,
                format!(
                    "sends running sums of {dataset} epoch {epoch:016x}, which is not being encoded here"
                ),
            ));
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), registered).await;
    };
    loop {
        let m = match conn.recv().await? {
            Some(m) => m,
            None => {
                // Closed before its `done`: the sender is gone (lost, killed, or it gave
                // up); the encoding here stops at once instead of waiting for pieces.
                let _ = tx.send(Err(format!(
                    "{peer} closed its connection in the middle of the encoding"
                )));
                return Ok(());
            }
        };
        let p = match m {
            Msg::Piece(p) => p,
            Msg::Erasure(b) if matches!(proto::parse(&b), Ok(EraMsg::Done)) => return Ok(()),
            other => {
                let e = format!("{peer} sent {} inside the ring", other.name());
                return stop_ring(shared, &tx, &peer, e, false);
            }
        };
        if p.dataset != dataset || p.epoch != epoch || p.len as u64 > PIECE {
            let e = format!(
                "{peer} sent a piece of another encoding or too long ({} bytes)",
                p.len
            );
            return stop_ring(shared, &tx, &peer, e, true);
        }
        let (offset, len) = match conn.recv().await? {
            Some(Msg::Chunk { offset, len, .. }) => (offset, len),
            other => {
                let e = format!(
                    "{peer} announced a piece and sent {}",
                    other.as_ref().map(|m| m.name()).unwrap_or("nothing")
                );
                return stop_ring(shared, &tx, &peer, e, false);
            }
        };
        if offset != p.offset || len != p.len {
            let e = format!("{peer}'s chunk (at {offset}, {len} bytes) is not the piece it announced");
            return stop_ring(shared, &tx, &peer, e, true);
        }
        let mut b = vec![0u8; len as usize];
        if !conn.chunk_data(&mut b).await? {
            let e = format!(
                "{peer}'s piece of stripe {} at {offset} failed its CRC32C check: the encoding stops",
                p.stripe
            );
            return stop_ring(shared, &tx, &peer, e, true);
        }
        if tx.send(Ok((peer.clone(), p, b))).is_err() {
            return Ok(());
        }
    }
}

/// Keep `header` (the leader's commit, or a rebuild's): it must be this set's, and this
/// member's files and parity shards must be exactly what it records. Older epochs'
/// parity is removed.
pub(super) async fn commit_local(shared: &Arc<Shared>, header: &Header) -> Result<()> {
    let cfg = shared.cfg.erasure.clone().ok_or_else(|| err("no erasure set"))?;
    let me = shared.cfg.node_id.clone();
    if header.set != cfg.set.name || header.members != cfg.set.members {
        return Err(err(format!(
            "a header of set {} {:?}, this node is in {}",
            header.set, header.members, cfg.set.name
        )));
    }
    let (store, header2) = (shared.store.clone(), header.clone());
    let r = tokio::task::spawn_blocking(move || -> Result<()> {
        let level = level_of(&store)?;
        let i = header2.index_of(&me).ok_or_else(|| err("not a member"))?;
        if !member::holds_share(&level, &header2, i) {
            return Err(err(format!(
                "{me} does not hold what the header of {} records for it",
                header2.dataset
            )));
        }
        let mut old: Vec<u64> = Vec::new();
        if let Some(h) = member::header(&level, &header2.dataset, &header2.set) {
            old.push(h.epoch);
        }
        if let Some(e) = member::marked(&level, &header2.dataset, &header2.set) {
            old.push(e);
        }
        member::store_header(&Mover::default(), &level, &header2).map_err(err)?;
        for e in old.into_iter().filter(|e| *e != header2.epoch) {
            member::drop_epoch(&level, &header2, i, e);
        }
        record_levels(&store, &cfg, &me);
        Ok(())
    })
    .await
    .map_err(|e| err(e.to_string()))?;
    if r.is_ok() {
        shared.erasure.set_state(
            &header.dataset,
            DatasetErasure {
                state: "protected".into(),
                epoch: header.epoch,
                ..Default::default()
            },
        );
    }
    r
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn serve_read(
    shared: &Arc<Shared>,
    conn: &mut Conn,
    set: &str,
    dataset: &str,
    epoch: u64,
    s: usize,
    j: usize,
    parity: bool,
) -> Result<()> {
    let me = shared.cfg.node_id.clone();
    let (store, set2, ds2, me2) = (
        shared.store.clone(),
        set.to_string(),
        dataset.to_string(),
        me.clone(),
    );
    // Read the whole segment or shard (checked as it is read) on a blocking thread.
    let got = tokio::task::spawn_blocking(move || -> std::result::Result<(Header, Vec<u8>), Box<EraMsg>> {
        let level = level_of(&store).map_err(|e| bfail(e.errno(), e))?;
        let h = member::header(&level, &ds2, &set2)
            .filter(|h| h.epoch == epoch)
            .ok_or_else(|| {
                bfail(
                    libc::ENOENT,
                    format!("{me2} holds no encoding {epoch:016x} of {ds2}"),
                )
            })?;
        let i = h
            .index_of(&me2)
            .ok_or_else(|| bfail(libc::ENOENT, "not a member"))?;
        let lay = h.layout();
        if s >= lay.n {
            return Err(bfail(libc::EINVAL, format!("no stripe {s}")));
        }
        let b = if parity {
            if !lay.held_by(i).contains(&(s, j)) {
                return Err(bfail(
                    libc::ENOENT,
                    format!("{me2} holds no parity shard {s}.{j}"),
                ));
            }
            let b = member::read_parity(&level, &h, s, j).map_err(|e| bfail(e.errno(), e))?;
            if !ckptfs_erasure::parity_matches(&h, s, j, &b) {
                return Err(bfail(
                    libc::EIO,
                    format!("parity shard {s}.{j} on {me2} fails its CRC32C check"),
                ));
            }
            b
        } else {
            let mut b = vec![0u8; h.segment as usize];
            member::read_segment(&level, &h, i, s, 0, &mut b).map_err(|e| bfail(e.errno(), e))?;
            b
        };
        Ok((h, b))
    })
    .await
    .map_err(|e| err(e.to_string()))?;
    let (h, b) = match got {
        Ok(x) => x,
        Err(f) => return send_era(conn, &f).await,
    };
    for (off, len) in ring::pieces(h.segment) {
        let data = &b[off as usize..off as usize + len as usize];
        conn.send(Msg::Piece(Piece {
            set: set.to_string(),
            dataset: dataset.to_string(),
            epoch,
            stripe: s as u32,
            row: j as u16,
            kind: if parity { SegKind::Parity } else { SegKind::Data },
            offset: off,
            len,
            seg_size: h.segment,
        }))
        .await?;
        conn.send_chunk_buf(off, ckptfs_transport::crc32c(data), data)
            .await?;
    }
    send_era(conn, &EraMsg::Done).await
}
