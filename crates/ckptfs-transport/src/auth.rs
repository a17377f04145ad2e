//! Mutual challenge-response authentication with HMAC-SHA256 over the key of the pair
//! of nodes ([`ckptfs_cluster::NodeKeys`]: only the two nodes and the launcher hold it).
//!
//! ```text
//! client                                              server
//!   Hello{client_id, server_id, job, Nc, mode} ---->
//!                                             <----   Challenge{server_id, Ns}
//!   checks server_id is the node it dialled
//!   Response{MAC(K, "client", T)}              ---->
//!                                                     checks job, ids, mode, the MAC
//!                                             <----   AuthOk{MAC(K, "server", T)}
//!   checks the server's MAC                           (or one refusal for every cause)
//! T = "ckptfs-peer-auth-v2" | role | len-prefixed job | Nc | Ns
//!     | len-prefixed client_id | len-prefixed server_id | mode
//! ```
//! The key never crosses the wire. The client proves itself first, so the server gives
//! no proof to anyone who has not given one, and the server answers every failed
//! Hello/Response (wrong job, unknown node, its own id, other mode, bad proof) with the
//! same refusal after the Response, so a stranger learns nothing about the map. Both
//! nonces are fresh per connection (32 bytes from the OS), so a recorded Response is
//! worthless on a new connection; the role label keeps a server's proof from being
//! reflected as a client's. Comparisons are constant-time (`Mac::verify_slice`).
//!
//! Each direction then has its own key for the frame tags ([`crate::seal`]), derived
//! from the pair key and the whole transcript ([`session_keys`]): a relay that passes
//! the handshake through cannot change, add or drop a frame afterwards.

use crate::frame::{MAC_LEN, NONCE_LEN};
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Which side a proof comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The connecting side.
    Client,
    /// The accepting side.
    Server,
}

/// Everything both sides have seen by the time they prove themselves.
#[derive(Debug, Clone)]
pub struct Transcript<'a> {
    /// Job name.
    pub job: &'a str,
    /// Client nonce.
    pub client_nonce: &'a [u8; NONCE_LEN],
    /// Server nonce.
    pub server_nonce: &'a [u8; NONCE_LEN],
    /// Client node id.
    pub client_id: &'a str,
    /// Server node id.
    pub server_id: &'a str,
    /// Frame protection asked for ([`crate::Protection::code`]).
    pub mode: u8,
}

fn mac_for(key: &[u8], role: Role, t: &Transcript<'_>) -> HmacSha256 {
    let mut m = hmac(key);
    m.update(b"ckptfs-peer-auth-v2");
    m.update(match role {
        Role::Client => b"C",
        Role::Server => b"S",
    });
    transcript(&mut m, t);
    m
}

fn transcript(m: &mut HmacSha256, t: &Transcript<'_>) {
    m.update(&(t.job.len() as u32).to_le_bytes());
    m.update(t.job.as_bytes());
    m.update(t.client_nonce);
    m.update(t.server_nonce);
    for part in [t.client_id.as_bytes(), t.server_id.as_bytes()] {
        m.update(&(part.len() as u32).to_le_bytes());
        m.update(part);
    }
    m.update(&[t.mode]);
}

fn hmac(key: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length; new_from_slice cannot fail for HMAC.
    match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => HmacSha256::new(&Default::default()),
    }
}

/// The two directions' frame keys of a connection (client to server, server to
/// client): HMAC-SHA256 of the pair key over a label and the whole transcript, so they
/// are fresh per connection and known only to the two nodes.
pub fn session_keys(key: &[u8], t: &Transcript<'_>) -> ([u8; 32], [u8; 32]) {
    let dir = |label: &[u8]| {
        let mut m = hmac(key);
        m.update(b"ckptfs-session-v2");
        m.update(label);
        transcript(&mut m, t);
        let mut k = [0u8; 32];
        k.copy_from_slice(&m.finalize().into_bytes());
        k
    };
    (dir(b"c2s"), dir(b"s2c"))
}

/// The proof of `role` over transcript `t` with secret `key`.
pub fn prove(key: &[u8], role: Role, t: &Transcript<'_>) -> [u8; MAC_LEN] {
    let out = mac_for(key, role, t).finalize().into_bytes();
    let mut a = [0u8; MAC_LEN];
    a.copy_from_slice(&out);
    a
}

/// Checks `role`'s proof in constant time.
pub fn verify(key: &[u8], role: Role, t: &Transcript<'_>, mac: &[u8; MAC_LEN]) -> bool {
    mac_for(key, role, t).verify_slice(mac).is_ok()
}

/// A fresh nonce from the OS.
pub fn nonce() -> std::io::Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| std::io::Error::other(format!("getrandom: {e}")))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_role_secret_nonces_and_ids() {
        let (nc, ns) = ([1u8; 32], [2u8; 32]);
        let t = Transcript {
            job: "j",
            client_nonce: &nc,
            server_nonce: &ns,
            client_id: "a",
            server_id: "b",
            mode: 0,
        };
        let m = prove(b"k1", Role::Client, &t);
        assert!(verify(b"k1", Role::Client, &t, &m));
        assert!(!verify(b"k2", Role::Client, &t, &m), "other secret");
        assert!(!verify(b"k1", Role::Server, &t, &m), "reflected role");
        let ns2 = [3u8; 32];
        let t2 = Transcript {
            server_nonce: &ns2,
            ..t.clone()
        };
        assert!(!verify(b"k1", Role::Client, &t2, &m), "replayed on a new nonce");
        let t3 = Transcript {
            client_id: "ab",
            server_id: "",
            ..t.clone()
        };
        assert!(!verify(b"k1", Role::Client, &t3, &m), "ids shifted");
        let t4 = Transcript { mode: 1, ..t.clone() };
        assert!(!verify(b"k1", Role::Client, &t4, &m), "other frame protection");
        let (c2s, s2c) = session_keys(b"k1", &t);
        assert_ne!(c2s, s2c);
        assert_ne!(session_keys(b"k1", &t2).0, c2s, "fresh per connection");
        assert_ne!(session_keys(b"k2", &t).0, c2s, "bound to the pair key");
    }
}
