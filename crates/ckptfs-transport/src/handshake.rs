//! The handshake of a connection (see [`crate::auth`] for the proofs): the client's
//! side ([`connect`]) and the server's ([`accept`]), which hand over a [`Conn`] whose
//! frames are tagged (or encrypted) under the session keys.

use crate::auth::{self, Role, Transcript};
use crate::config::{ConnConfig, Identity};
use crate::conn::Conn;
use crate::frame::{self, Msg};
use crate::proto::{ClientHandshake, Refused};
use crate::seal::Dir;
pub use crate::REFUSAL;
use crate::{Result, TransportError};
use ckptfs_cluster::{NodeKeys, PairKey};
use tokio::net::TcpStream;

/// Connects to the daemon of node `peer` at `addr` as `identity` and authenticates both
/// ways with the key of the pair; a server that is not `peer` (or cannot prove it) is
/// refused before anything but the handshake is sent.
pub async fn connect(
    addr: &str,
    identity: &Identity,
    peer: &str,
    keys: &NodeKeys,
    cfg: &ConnConfig,
) -> Result<Conn> {
    let (hs, hello) = ClientHandshake::start(identity, peer, keys, cfg)?;
    let fut = async {
        let stream = TcpStream::connect(addr).await?;
        client_handshake(Conn::raw(stream, cfg), hs, hello, peer, cfg).await
    };
    match tokio::time::timeout(cfg.handshake_timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(TransportError::Timeout {
            what: "connect and handshake",
        }),
    }
}

/// Authenticates an accepted stream (the server side of the handshake).
pub async fn accept(
    stream: TcpStream,
    identity: &Identity,
    keys: &NodeKeys,
    cfg: &ConnConfig,
) -> Result<Conn> {
    let fut = server_handshake(Conn::raw(stream, cfg), identity, keys, cfg);
    match tokio::time::timeout(cfg.handshake_timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(TransportError::Timeout { what: "handshake" }),
    }
}

fn unexpected(m: &Msg, wanted: &str) -> TransportError {
    TransportError::Auth(format!("expected {wanted}, got {:?}", m.kind()))
}

/// Drives [`ClientHandshake`] over the tokio connection.
async fn client_handshake(
    mut c: Conn,
    mut hs: ClientHandshake<'_>,
    hello: Msg,
    peer: &str,
    cfg: &ConnConfig,
) -> Result<Conn> {
    c.send(&hello).await?;
    let got = c.recv().await;
    let response = match hs.challenge(got) {
        Ok(m) => m,
        Err(r) => return Err(tell(&mut c, r).await),
    };
    c.send(&response).await?;
    let got = c.recv().await;
    match hs.auth_ok(got, cfg) {
        Ok((open, seal)) => Ok(c.authenticated(peer, cfg, open, seal)),
        Err(r) => Err(tell(&mut c, r).await),
    }
}

/// Tells the peer why the handshake ends (when there is something to tell).
async fn tell(c: &mut Conn, r: Refused) -> TransportError {
    match r.tell {
        Some(errno) => {
            let why = match &r.err {
                TransportError::Auth(w) => w.clone(),
                e => e.to_string(),
            };
            c.refuse(errno, why).await
        }
        None => r.err,
    }
}

async fn server_handshake(mut c: Conn, me: &Identity, keys: &NodeKeys, cfg: &ConnConfig) -> Result<Conn> {
    let hello = match c.recv().await {
        Ok(Msg::Hello(h)) => h,
        Ok(m) => {
            let why = unexpected(&m, "Hello").to_string();
            let _ = c.refuse(libc::EACCES, REFUSAL.into()).await;
            return Err(TransportError::Auth(why));
        }
        Err(e @ (TransportError::Frame(_) | TransportError::Protocol(_))) => {
            let _ = c.refuse(libc::EACCES, REFUSAL.into()).await;
            return Err(TransportError::Auth(format!("not a ckptfs peer: {e}")));
        }
        Err(e) => return Err(e),
    };
    // Every cause is found now, but told (the same way) only after the Response, so a
    // stranger learns nothing from which step refused it.
    let mode = cfg.protection.code();
    let problem = if hello.job != me.job {
        Some(format!("job {:?} is not this job", hello.job))
    } else if hello.server_id != me.node_id {
        Some(format!(
            "it dialled node {:?}, this is {:?}",
            hello.server_id, me.node_id
        ))
    } else if hello.node_id == me.node_id {
        Some("it claims this node's own id".to_string())
    } else if cfg
        .allowed_peers
        .as_ref()
        .is_some_and(|a| !a.contains(&hello.node_id))
    {
        Some("not in the cluster map".to_string())
    } else if hello.mode != mode {
        Some(format!(
            "frame protection {} asked, this node uses {mode}",
            hello.mode
        ))
    } else if keys.pair(&hello.node_id).is_none() {
        Some("no key for it".to_string())
    } else {
        None
    };
    let decoy;
    let key = match keys.pair(&hello.node_id) {
        Some(k) if problem.is_none() => k,
        _ => {
            decoy = PairKey::from_bytes(auth::nonce()?);
            &decoy
        }
    };
    let ns = auth::nonce()?;
    c.send(&Msg::Challenge(frame::Challenge {
        node_id: me.node_id.clone(),
        nonce: ns,
    }))
    .await?;
    let t = Transcript {
        job: &me.job,
        client_nonce: &hello.nonce,
        server_nonce: &ns,
        client_id: &hello.node_id,
        server_id: &me.node_id,
        mode,
    };
    let mac = match c.recv().await {
        Ok(Msg::Response { mac }) => mac,
        Ok(m) => {
            let why = format!("node {:?}: {}", hello.node_id, unexpected(&m, "Response"));
            let _ = c.refuse(libc::EACCES, REFUSAL.into()).await;
            return Err(TransportError::Auth(why));
        }
        Err(TransportError::Peer { reason, .. }) => {
            return Err(TransportError::Auth(format!(
                "client {:?} gave up: {reason}",
                hello.node_id
            )))
        }
        Err(e @ (TransportError::Frame(_) | TransportError::Protocol(_))) => {
            let _ = c.refuse(libc::EACCES, REFUSAL.into()).await;
            return Err(TransportError::Auth(format!(
                "bad handshake from {:?}: {e}",
                hello.node_id
            )));
        }
        Err(e) => return Err(e),
    };
    let proved = auth::verify(key.expose(), Role::Client, &t, &mac);
    if let Some(why) = problem.or_else(|| (!proved).then(|| "bad proof".to_string())) {
        let _ = c.refuse(libc::EACCES, REFUSAL.into()).await;
        return Err(TransportError::Auth(format!("node {:?}: {why}", hello.node_id)));
    }
    c.send(&Msg::AuthOk {
        mac: auth::prove(key.expose(), Role::Server, &t),
    })
    .await?;
    let (c2s, s2c) = auth::session_keys(key.expose(), &t);
    let p = cfg.protection;
    Ok(c.authenticated(&hello.node_id, cfg, Dir::new(c2s, p), Dir::new(s2c, p)))
}
