//! One member's outgoing pieces to another during an encode, on a connection of its own
//! (the XOR ring's successor, the Reed-Solomon gather's stripe holders) (see [`super`]).

#[allow(unused_imports)]
use super::*;

/// Outgoing pieces to one member, in order, on a connection of their own.
pub(super) struct Outgoing {
    /// Pieces to send, two queued at most.
    pub(super) tx: mpsc::Sender<(Piece, Vec<u8>)>,
    task: tokio::task::JoinHandle<Result<()>>,
}

/// Connect to `to`, announce the encode (`ring`), and start the sender: pieces go out in
/// the order queued, each throttled and counted in the status, then `done`.
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

impl Outgoing {
    /// Send `done` after the pieces queued and wait for the sender: its error, if any.
    pub(super) async fn close(self) -> Result<()> {
        drop(self.tx);
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(err(e.to_string())),
        }
    }
}
