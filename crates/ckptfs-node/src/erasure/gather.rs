//! Reed-Solomon across daemons: the per-stripe gather with a window of rounds in flight
//! (docs/erasure.md, "Schedule"; the argument is in [`ckptfs_erasure::ring`]). (see [`super`]).

#[allow(unused_imports)]
use super::*;
use tokio::sync::Semaphore;

/// Close every outgoing connection (its `done` after the pieces queued) and wait for
/// them: the first error, if any.
async fn close_all(out: BTreeMap<usize, Outgoing>) -> Result<()> {
    let mut sent = Ok(());
    for (_, o) in out {
        if let Err(e) = o.close().await {
            sent = Err(e);
        }
    }
    sent
}

/// A piece's place: (sender, kind, stripe, row, offset).
pub(super) type PieceKey = (String, u8, u32, u16, u64);
/// One stream of pieces this member receives: (sender, kind, stripe, row). Each stream
/// travels on one connection, so its pieces arrive in increasing offset order.
type StreamKey = (String, u8, u32, u16);

/// Where one encode's time went on this member (logged, one line per encode: the profile
/// of issue 32's schedule).
#[derive(Default)]
struct Times {
    /// The loop waiting for pieces.
    wait: Duration,
    /// Reed-Solomon encoding.
    encode: Duration,
    /// Handing rows to their connections (waits only when a row's link is behind).
    forward: Duration,
    /// The data sender waiting for the window (the loop a window behind).
    window: Duration,
    /// The data sender reading its own segments and handing them to their connections.
    feed: Duration,
}

/// Reed-Solomon across daemons: each data member sends its segment of stripe `s` to the
/// stripe's row-0 holder (member `s`), which encodes each piece once its data pieces are
/// in and forwards rows `1..k` to their holders (members `s + j`).
///
/// Two concurrent parts (ckptfs_erasure::ring, "Reed-Solomon"): the data sender hands
/// this member's data pieces of round `r` to their connections as soon as the loop has
/// finished round `r - RS_WINDOW` (a window of rounds in flight, so the links never
/// idle while the loop waits and encodes); the loop, round by round, waits for the
/// pieces `r` of its own stripe, encodes and forwards each row at once (rows on
/// connections of their own, never queued behind data of later rounds), then waits for
/// the rows it holds of the stripes before it. Returns the member's shards in `held_by`
/// order.
pub(super) async fn gather_steps(
    shared: &Arc<Shared>,
    plan: &Header,
    i: usize,
    rx: &mut mpsc::UnboundedReceiver<PieceIn>,
) -> Result<Vec<Vec<u8>>> {
    let started = Instant::now();
    let lay = plan.layout();
    let (n, p) = (lay.n, plan.scheme.parity());
    let members = &plan.members;
    // Data pieces to the stripes' row-0 holders; rows to their holders, apart.
    let data_stripes: Vec<usize> = (0..n).filter(|&s| lay.segment_of(i, s).is_some()).collect();
    let mut data_out: BTreeMap<usize, Outgoing> = BTreeMap::new();
    for &s in &data_stripes {
        data_out.insert(s, open_outgoing(shared, plan, &members[s]).await?);
    }
    let mut row_out: BTreeMap<usize, Outgoing> = BTreeMap::new();
    for j in 1..p {
        let to = (i + j) % n;
        row_out.insert(to, open_outgoing(shared, plan, &members[to]).await?);
    }
    let level = level_of(&shared.store)?;
    let held = lay.held_by(i);
    let mut shards: Vec<Vec<u8>> = held.iter().map(|_| vec![0u8; plan.segment as usize]).collect();
    let data_of_mine = lay.data_members(i);
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
    let window = Semaphore::new(ring::RS_WINDOW);
    let (mut times, mut feed_times) = (Times::default(), Times::default());
    // The data sender: this member's pieces, round after round, at most RS_WINDOW
    // rounds ahead of the loop.
    let feeder = async {
        for &(off, len) in &pieces {
            let t = Instant::now();
            window
                .acquire()
                .await
                .map_err(|_| err("the encoding stopped"))?
                .forget();
            let t2 = Instant::now();
            feed_times.window += t2 - t;
            for &s in &data_stripes {
                let mut b = vec![0u8; len as usize];
                member::read_segment(&level, plan, i, s, off, &mut b).map_err(err)?;
                data_out[&s]
                    .tx
                    .send((piece(s, 0, SegKind::Data, off, len), b))
                    .await
                    .map_err(|_| err(format!("the connection to {} ended", members[s])))?;
            }
            feed_times.feed += t2.elapsed();
        }
        Ok::<(), NodeError>(())
    };
    let run = async {
        // Every stream this member receives, with the offset of the next piece it must
        // bring: the data of its stripe from each data member, and row `j` of stripe
        // `i - j` from its row-0 holder.
        let mut next: HashMap<StreamKey, u64> = HashMap::new();
        for &d in &data_of_mine {
            next.insert((members[d].clone(), SegKind::Data as u8, i as u32, 0), 0);
        }
        for j in 1..p {
            let s = (i + n - j) % n;
            next.insert((members[s].clone(), SegKind::Parity as u8, s as u32, j as u16), 0);
        }
        let mut enc: Option<(u32, ckptfs_erasure::codec::Encoder)> = None;
        // Pieces that arrived before their round (at most a few rounds: the window).
        let mut early: HashMap<PieceKey, Vec<u8>> = HashMap::new();
        for &(off, len) in &pieces {
            // What this member waits for in the round: the data of its stripe, and the
            // rows it holds of the stripes before it.
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
                    // Encode this piece of the stripe, keep row 0, forward the others.
                    let t = Instant::now();
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
                    let t2 = Instant::now();
                    times.encode += t2 - t;
                    for (j, row) in par.into_iter().enumerate() {
                        if j == 0 {
                            let k = held.iter().position(|&h| h == (i, 0)).expect("row 0");
                            shards[k][off as usize..(off + len as u64) as usize].copy_from_slice(&row);
                        } else {
                            let to = (i + j) % n;
                            row_out[&to]
                                .tx
                                .send((piece(i, j, SegKind::Parity, off, len), row))
                                .await
                                .map_err(|_| err(format!("the connection to {} ended", members[to])))?;
                        }
                    }
                    times.forward += t2.elapsed();
                    encoded = true;
                }
                if encoded && row_keys.iter().all(|k| got.contains_key(k)) {
                    break;
                }
                // The next piece from any sender: it must be of a stream this member
                // receives, exactly the next piece of that stream (in this round or a
                // later one, never one seen before).
                let t = Instant::now();
                let next_piece = tokio::time::timeout(PIECE_TIMEOUT, rx.recv())
                    .await
                    .map_err(|_| err(format!("no piece at {off} in {PIECE_TIMEOUT:?}")))?
                    .ok_or_else(|| err("the encoding's connections ended"))?;
                times.wait += t.elapsed();
                let (from, pc, b) = next_piece.map_err(err)?;
                let sk: StreamKey = (from.clone(), pc.kind as u8, pc.stripe, pc.row);
                let expected_len = pieces.iter().find(|(o, _)| *o == pc.offset).map(|(_, l)| *l);
                let ok = pc.seg_size == plan.segment
                    && expected_len == Some(pc.len)
                    && b.len() == pc.len as usize
                    && next.get(&sk) == Some(&pc.offset);
                if !ok {
                    shared.erasure.refused();
                    return Err(err(format!(
                        "{from} sent a piece out of place (stripe {} row {} at {} of {} bytes, segment {})",
                        pc.stripe, pc.row, pc.offset, pc.len, pc.seg_size
                    )));
                }
                next.insert(sk, pc.offset + pc.len as u64);
                let k: PieceKey = (from, pc.kind as u8, pc.stripe, pc.row, pc.offset);
                if pc.offset == off {
                    got.insert(k, b);
                } else {
                    early.insert(k, b);
                }
            }
            // The rows of the stripes before it that this member holds.
            for (jm1, k) in row_keys.iter().enumerate() {
                let s = (i + n - (jm1 + 1)) % n;
                let at = held.iter().position(|&h| h == (s, jm1 + 1)).expect("held row");
                shards[at][off as usize..(off + len as u64) as usize].copy_from_slice(&got[k]);
            }
            // Round done: the data sender may go one round further.
            window.add_permits(1);
        }
        Ok::<(), NodeError>(())
    };
    // The first error drops the other part (a data sender waiting for the window, or a
    // loop waiting for pieces), then every connection is closed.
    let r = tokio::try_join!(feeder, run);
    let sent_data = close_all(data_out).await;
    let sent_rows = close_all(row_out).await;
    tracing::info!(
        "rs encode of {} on member {i}: {:.3} s; loop: waited for pieces {:.3} s, encoded {:.3} s, forwarded rows {:.3} s; data sender: waited for the window {:.3} s, fed its pieces {:.3} s",
        plan.dataset,
        started.elapsed().as_secs_f64(),
        times.wait.as_secs_f64(),
        times.encode.as_secs_f64(),
        times.forward.as_secs_f64(),
        feed_times.window.as_secs_f64(),
        feed_times.feed.as_secs_f64(),
    );
    r?;
    sent_data?;
    sent_rows?;
    Ok(shards)
}
