//! A member's place in the ring: its steps of the reduce-scatter, pieces in and out. (see [`super`]).

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------
// A member's place in the ring.

pub(super) fn expect_piece(
    plan: &Header,
    pred: &str,
    got: &PieceIn,
    stripe: usize,
    offset: u64,
    len: u32,
) -> std::result::Result<(), String> {
    let (_, p, data) = got.as_ref().map_err(|e| e.clone())?;
    let ok = p.kind == SegKind::Partial
        && p.stripe as usize == stripe
        && p.row == 0
        && p.offset == offset
        && p.len == len
        && p.seg_size == plan.segment
        && data.len() == len as usize;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{pred} sent a piece out of place (stripe {} at {} of {} bytes, segment {}; expected stripe {stripe} at {offset} of {len}, segment {})",
            p.stripe, p.offset, p.len, p.seg_size, plan.segment
        ))
    }
}

/// Run this member's steps of `plan`'s ring; its parity records, stored and verified.
pub(super) async fn member_role(shared: Arc<Shared>, plan: Header, me: String) -> Result<Vec<ParityRecord>> {
    let cfg = shared
        .cfg
        .erasure
        .clone()
        .ok_or_else(|| err("this node has no erasure set"))?;
    if plan.set != cfg.set.name || plan.members != cfg.set.members || plan.scheme != cfg.scheme {
        return Err(err(format!(
            "the plan of {} is for set {} {:?} ({}), this node is in {} {:?} ({})",
            plan.dataset, plan.set, plan.members, plan.scheme, cfg.set.name, cfg.set.members, cfg.scheme
        )));
    }
    let i = plan
        .index_of(&me)
        .ok_or_else(|| err("not a member of the plan"))?;
    let _one = shared.erasure.running.lock().await;
    let n = plan.members.len();
    // My part in the plan must be exactly what this store holds.
    {
        let want: Vec<WantFile> = plan.parts[i]
            .files
            .iter()
            .map(|f| WantFile {
                path: f.path.clone(),
                size: f.size,
                crc32c: f.crc32c,
            })
            .collect();
        let (store, me2) = (shared.store.clone(), me.clone());
        let mine = tokio::task::spawn_blocking(move || my_part(&store, &me2, &want))
            .await
            .map_err(|e| err(e.to_string()))??;
        if mine != plan.parts[i] {
            return Err(err(format!(
                "the plan's part of {me} is not what its store holds"
            )));
        }
        let level = level_of(&shared.store)?;
        member::mark_encoding(&Mover::default(), &level, &plan.dataset, &plan.set, plan.epoch)
            .map_err(err)?;
    }
    let key = (plan.dataset.clone(), plan.epoch);
    // Unbounded, yet bounded in practice: a neighbour is at most a round of pieces ahead
    // (ring.rs), and the handler must always drain its connection (no cycle of full
    // buffers between members sending to each other).
    let (tx, mut rx) = mpsc::unbounded_channel::<PieceIn>();
    shared.erasure.jobs.lock().expect("jobs").insert(key.clone(), tx);
    shared.erasure.registered.notify_waiters();
    let r = match plan.scheme {
        Scheme::Xor => ring_steps(&shared, &plan, i, n, &mut rx).await,
        Scheme::Rs(_) => gather_steps(&shared, &plan, i, &mut rx).await,
    };
    shared.erasure.jobs.lock().expect("jobs").remove(&key);
    let shards = r?;
    let level = level_of(&shared.store)?;
    let lay = plan.layout();
    let mut recs = Vec::new();
    for ((s, j), b) in lay.held_by(i).into_iter().zip(shards) {
        recs.push(member::store_parity(&Mover::default(), &level, &plan, &me, s, j, &b).map_err(err)?);
    }
    Ok(recs)
}

pub(super) async fn ring_steps(
    shared: &Arc<Shared>,
    plan: &Header,
    i: usize,
    n: usize,
    rx: &mut mpsc::UnboundedReceiver<PieceIn>,
) -> Result<Vec<Vec<u8>>> {
    let succ = plan.members[ring::successor(n, i)].clone();
    let pred = plan.members[ring::predecessor(n, i)].clone();
    let mut conn = shared.connect(&succ).await?;
    send_era(
        &mut conn,
        &EraMsg::Ring {
            set: plan.set.clone(),
            dataset: plan.dataset.clone(),
            epoch: plan.epoch,
        },
    )
    .await?;
    // The sender: pieces go out in order, two in flight at most (ring.rs: no deadlock).
    let (out_tx, mut out_rx) = mpsc::channel::<(Piece, Vec<u8>)>(2);
    let mut throttle = crate::throttle::Throttle::new(shared.cfg.max_bw);
    let sh = shared.clone();
    let sender = tokio::spawn(async move {
        while let Some((p, data)) = out_rx.recv().await {
            let (off, crc) = (p.offset, ckptfs_transport::crc32c(&data));
            conn.send(Msg::Piece(p)).await?;
            conn.send_chunk_buf(off, crc, &data).await?;
            throttle.sent(data.len()).await;
            sh.erasure.status.lock().expect("erasure status").bytes_sent += data.len() as u64;
        }
        send_era(&mut conn, &EraMsg::Done).await
    });
    let level = level_of(&shared.store)?;
    let steps = ring::steps(n, i);
    let mut parity = vec![0u8; plan.segment as usize];
    let piece = |s: usize, offset: u64, len: u32| Piece {
        set: plan.set.clone(),
        dataset: plan.dataset.clone(),
        epoch: plan.epoch,
        stripe: s as u32,
        row: 0,
        kind: SegKind::Partial,
        offset,
        len,
        seg_size: plan.segment,
    };
    let run = async {
        for (off, len) in ring::pieces(plan.segment) {
            for st in &steps {
                match *st {
                    Step::Send(s) => {
                        let mut b = vec![0u8; len as usize];
                        member::read_segment(&level, plan, i, s, off, &mut b).map_err(err)?;
                        out_tx
                            .send((piece(s, off, len), b))
                            .await
                            .map_err(|_| err(format!("the connection to {succ} ended")))?;
                    }
                    Step::Pass(s) | Step::Keep(s) => {
                        let got = tokio::time::timeout(PIECE_TIMEOUT, rx.recv())
                            .await
                            .map_err(|_| {
                                err(format!("no piece of stripe {s} from {pred} in {PIECE_TIMEOUT:?}"))
                            })?
                            .ok_or_else(|| err(format!("the ring connection from {pred} ended")))?;
                        if let Err(e) = expect_piece(plan, &pred, &got, s, off, len) {
                            shared.erasure.refused();
                            return Err(err(e));
                        }
                        let (_, _, mut b) = got.expect("checked");
                        if let Step::Pass(_) = st {
                            let mut own = vec![0u8; len as usize];
                            member::read_segment(&level, plan, i, s, off, &mut own).map_err(err)?;
                            ckptfs_erasure::codec::xor_into(&mut b, &own);
                            out_tx
                                .send((piece(s, off, len), b))
                                .await
                                .map_err(|_| err(format!("the connection to {succ} ended")))?;
                        } else {
                            parity[off as usize..off as usize + len as usize].copy_from_slice(&b);
                        }
                    }
                }
            }
        }
        Ok::<(), NodeError>(())
    };
    let r = run.await;
    drop(out_tx);
    let sent = sender.await.map_err(|e| err(e.to_string()))?;
    r?;
    sent?;
    Ok(vec![parity])
}

/// Who sends pieces to member `me` during an encode: its predecessor in the XOR ring;
/// with Reed-Solomon, the data members of its stripe (their segments) and the members
/// `me - j` (row `j` of their stripe, `0 < j < k`).
pub(super) fn senders_to(cfg: &ErasureConfig, me: &str) -> Vec<String> {
    let m = &cfg.set.members;
    let n = m.len();
    let Some(i) = m.iter().position(|x| x == me) else {
        return Vec::new();
    };
    match cfg.scheme {
        Scheme::Xor => vec![m[ring::predecessor(n, i)].clone()],
        Scheme::Rs(k) => {
            let lay = Layout {
                n,
                scheme: cfg.scheme,
                segment: 0,
            };
            let mut v: Vec<String> = lay.data_members(i).into_iter().map(|d| m[d].clone()).collect();
            for j in 1..(k as usize).min(n) {
                v.push(m[(i + n - j) % n].clone());
            }
            v
        }
    }
}

/// Outgoing pieces to one member, in order, on a connection of their own.
pub(super) struct Outgoing {
    tx: mpsc::Sender<(Piece, Vec<u8>)>,
    task: tokio::task::JoinHandle<Result<()>>,
}

pub(super) async fn open_outgoing(shared: &Arc<Shared>, plan: &Header, to: &str) -> Result<Outgoing> {
    let mut conn = shared.connect(to).await?;
    send_era(
        &mut conn,
        &EraMsg::Ring {
            set: plan.set.clone(),
            dataset: plan.dataset.clone(),
            epoch: plan.epoch,
        },
    )
    .await?;
    let (tx, mut rx) = mpsc::channel::<(Piece, Vec<u8>)>(2);
    let mut throttle = crate::throttle::Throttle::new(shared.cfg.max_bw);
    let sh = shared.clone();
    let task = tokio::spawn(async move {
        while let Some((p, data)) = rx.recv().await {
            let (off, crc) = (p.offset, ckptfs_transport::crc32c(&data));
            conn.send(Msg::Piece(p)).await?;
            conn.send_chunk_buf(off, crc, &data).await?;
            throttle.sent(data.len()).await;
            sh.erasure.status.lock().expect("erasure status").bytes_sent += data.len() as u64;
        }
        send_era(&mut conn, &EraMsg::Done).await
    });
    Ok(Outgoing { tx, task })
}

/// A piece's place: (sender, kind, stripe, row, offset).
pub(super) type PieceKey = (String, u8, u32, u16, u64);

/// Reed-Solomon across daemons: each data member sends its segment of stripe `s` to the
/// stripe's row-0 holder (member `s`), which encodes each piece once its data pieces are
/// in and forwards rows `1..k` to their holders (members `s + j`). Piece by piece: in
/// round `r` a member first sends its pieces `r` (no waiting), then waits for the pieces
/// `r` of its own stripe, encodes and forwards, then waits for the rows it holds of the
/// stripes before it: no member waits for one that waits for it. Returns the member's
/// shards in `held_by` order.
pub(super) async fn gather_steps(
    shared: &Arc<Shared>,
    plan: &Header,
    i: usize,
    rx: &mut mpsc::UnboundedReceiver<PieceIn>,
) -> Result<Vec<Vec<u8>>> {
    let lay = plan.layout();
    let (n, p) = (lay.n, plan.scheme.parity());
    let members = &plan.members;
    let mut dests: Vec<usize> = (0..n).filter(|&s| lay.segment_of(i, s).is_some()).collect();
    dests.extend((1..p).map(|j| (i + j) % n));
    dests.sort_unstable();
    dests.dedup();
    let mut out: BTreeMap<usize, Outgoing> = BTreeMap::new();
    for d in dests {
        out.insert(d, open_outgoing(shared, plan, &members[d]).await?);
    }
    let level = level_of(&shared.store)?;
    let held = lay.held_by(i);
    let mut shards: Vec<Vec<u8>> = held.iter().map(|_| vec![0u8; plan.segment as usize]).collect();
    let data_of_mine = lay.data_members(i);
    let mut enc: Option<(u32, ckptfs_erasure::codec::Encoder)> = None;
    // Pieces that arrived before their round.
    let mut early: HashMap<PieceKey, Vec<u8>> = HashMap::new();
    let piece = |s: usize, j: usize, kind: SegKind, offset: u64, len: u32| Piece {
        set: plan.set.clone(),
        dataset: plan.dataset.clone(),
        epoch: plan.epoch,
        stripe: s as u32,
        row: j as u16,
        kind,
        offset,
        len,
        seg_size: plan.segment,
    };
    let pieces = ring::pieces(plan.segment);
    let run = async {
        for &(off, len) in &pieces {
            // 1. This member's data pieces of the round, to their stripes' holders.
            for s in 0..n {
                if lay.segment_of(i, s).is_none() {
                    continue;
                }
                let mut b = vec![0u8; len as usize];
                member::read_segment(&level, plan, i, s, off, &mut b).map_err(err)?;
                out[&s]
                    .tx
                    .send((piece(s, 0, SegKind::Data, off, len), b))
                    .await
                    .map_err(|_| err(format!("the connection to {} ended", members[s])))?;
            }
            // 2. What this member waits for in the round: the data of its stripe, and
            // the rows it holds of the stripes before it.
            let data_keys: Vec<PieceKey> = data_of_mine
                .iter()
                .map(|&d| (members[d].clone(), SegKind::Data as u8, i as u32, 0u16, off))
                .collect();
            let row_keys: Vec<PieceKey> = (1..p)
                .map(|j| {
                    let s = (i + n - j) % n;
                    (members[s].clone(), SegKind::Parity as u8, s as u32, j as u16, off)
                })
                .collect();
            let mut got: HashMap<PieceKey, Vec<u8>> = HashMap::new();
            for k in data_keys.iter().chain(&row_keys) {
                if let Some(b) = early.remove(k) {
                    got.insert(k.clone(), b);
                }
            }
            let mut encoded = false;
            loop {
                if !encoded && data_keys.iter().all(|k| got.contains_key(k)) {
                    // 3. Encode this piece of the stripe, keep row 0, forward the others.
                    let refs: Vec<&[u8]> = data_keys.iter().map(|k| got[k].as_slice()).collect();
                    if enc.as_ref().is_none_or(|(l, _)| *l != len) {
                        let e = ckptfs_erasure::codec::Encoder::new(plan.scheme, lay.data(), len as usize)
                            .map_err(err)?;
                        enc = Some((len, e));
                    }
                    let mut par = vec![Vec::new(); p];
                    enc.as_mut()
                        .expect("set")
                        .1
                        .encode(&refs, &mut par)
                        .map_err(err)?;
                    for (j, row) in par.into_iter().enumerate() {
                        if j == 0 {
                            let k = held.iter().position(|&h| h == (i, 0)).expect("row 0");
                            shards[k][off as usize..(off + len as u64) as usize].copy_from_slice(&row);
                        } else {
                            let to = (i + j) % n;
                            out[&to]
                                .tx
                                .send((piece(i, j, SegKind::Parity, off, len), row))
                                .await
                                .map_err(|_| err(format!("the connection to {} ended", members[to])))?;
                        }
                    }
                    encoded = true;
                }
                if encoded && row_keys.iter().all(|k| got.contains_key(k)) {
                    break;
                }
                // 4. The next piece from any sender: it must be one this member waits
                // for, in this round or a later one, and not seen before.
                let next = tokio::time::timeout(PIECE_TIMEOUT, rx.recv())
                    .await
                    .map_err(|_| err(format!("no piece at {off} in {PIECE_TIMEOUT:?}")))?
                    .ok_or_else(|| err("the encoding's connections ended"))?;
                let (from, pc, b) = next.map_err(err)?;
                let k: PieceKey = (from.clone(), pc.kind as u8, pc.stripe, pc.row, pc.offset);
                let expected_len = pieces.iter().find(|(o, _)| *o == pc.offset).map(|(_, l)| *l);
                let same_place = |w: &PieceKey| (&w.0, w.1, w.2, w.3) == (&k.0, k.1, k.2, k.3);
                let ok = pc.seg_size == plan.segment
                    && expected_len == Some(pc.len)
                    && b.len() == pc.len as usize
                    && pc.offset >= off
                    && data_keys.iter().chain(&row_keys).any(same_place)
                    && !got.contains_key(&k)
                    && !early.contains_key(&k);
                if !ok {
                    shared.erasure.refused();
                    return Err(err(format!(
                        "{from} sent a piece out of place (stripe {} row {} at {} of {} bytes, segment {})",
                        pc.stripe, pc.row, pc.offset, pc.len, pc.seg_size
                    )));
                }
                if pc.offset == off {
                    got.insert(k, b);
                } else {
                    early.insert(k, b);
                }
            }
            // 5. The rows of the stripes before it that this member holds.
            for (jm1, k) in row_keys.iter().enumerate() {
                let s = (i + n - (jm1 + 1)) % n;
                let at = held.iter().position(|&h| h == (s, jm1 + 1)).expect("held row");
                shards[at][off as usize..(off + len as u64) as usize].copy_from_slice(&got[k]);
            }
        }
        Ok::<(), NodeError>(())
    };
    let r = run.await;
    let mut sent = Ok(());
    for (_, o) in out {
        drop(o.tx);
        match o.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => sent = Err(e),
            Err(e) => sent = Err(err(e.to_string())),
        }
    }
    r?;
    sent?;
    Ok(shards)
}
