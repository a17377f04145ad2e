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
    // The sender: pieces go out in order, two in flight at most (ring.rs: no deadlock).
    let out = open_outgoing(shared, plan, &succ).await?;
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
                        out.tx
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
                            out.tx
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
    let sent = out.close().await;
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
