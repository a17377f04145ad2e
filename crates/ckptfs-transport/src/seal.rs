//! Per-frame protection after the handshake: every frame is followed by a 16-byte tag
//! that a relay without the pair key cannot compute.
//!
//! Each direction of a connection has its own 32-byte key ([`crate::auth::session_keys`],
//! fresh per connection) and its own frame counter, starting at 0 and counted by both
//! ends, so a frame cannot be changed, dropped, replayed, reordered or reflected
//! without the receiver noticing.
//!
//! ```text
//! integrity (default)   tag = BLAKE3-keyed(key, u64 seq | frame bytes)[..16]
//!                       frame bytes: header | payload, or header | chunk fixed | data
//! encryption            AES-256-GCM(key, nonce = u64 seq | 0u32,
//!                                   aad = header [| chunk fixed]) over the payload or
//!                       the chunk data, encrypted in place; tag = the GCM tag
//! ```
//!
//! Integrity keeps the zero-copy paths (the data is hashed where it lies: the sender
//! through [`crate::ChunkData::visit`], the receiver through
//! [`crate::ChunkSink::visit`] after it landed and before it is published); encryption
//! passes chunk data through a buffer of this process.

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce, Tag};

/// Bytes of the tag that follows every frame after the handshake.
pub const TAG_LEN: usize = 16;

/// How frames are protected after the handshake (both ends must agree: the choice is
/// part of the authenticated transcript).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protection {
    /// A MAC over every frame (keyed BLAKE3); data travels in the clear.
    #[default]
    Integrity,
    /// Every payload and chunk's data encrypted and authenticated (AES-256-GCM).
    Encrypted,
}

impl Protection {
    /// The byte carried in Hello.
    pub fn code(self) -> u8 {
        match self {
            Protection::Integrity => 0,
            Protection::Encrypted => 1,
        }
    }

    /// The protection for a Hello byte.
    pub fn from_code(b: u8) -> Option<Protection> {
        match b {
            0 => Some(Protection::Integrity),
            1 => Some(Protection::Encrypted),
            _ => None,
        }
    }
}

/// One direction's key and frame counter.
pub(crate) struct Dir {
    key: [u8; 32],
    seq: u64,
    aead: Option<Box<Aes256Gcm>>,
}

impl std::fmt::Debug for Dir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dir")
            .field("seq", &self.seq)
            .field("encrypted", &self.aead.is_some())
            .finish()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        for b in self.key.iter_mut() {
            // SAFETY: `b` is a valid, aligned, exclusive reference into our own array;
            // the volatile write keeps the wipe from being optimised away.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// A running MAC over one frame.
pub(crate) struct FrameMac(blake3::Hasher);

impl FrameMac {
    pub fn update(&mut self, b: &[u8]) {
        self.0.update(b);
    }

    pub fn tag(&self) -> [u8; TAG_LEN] {
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&self.0.finalize().as_bytes()[..TAG_LEN]);
        t
    }

    /// Constant-time comparison with a received tag.
    pub fn matches(&self, tag: &[u8; TAG_LEN]) -> bool {
        let mine = self.tag();
        let mut d = 0u8;
        for (a, b) in mine.iter().zip(tag) {
            d |= a ^ b;
        }
        d == 0
    }
}

impl Dir {
    pub fn new(key: [u8; 32], p: Protection) -> Dir {
        let aead = match p {
            Protection::Integrity => None,
            Protection::Encrypted => Some(Box::new(Aes256Gcm::new(&key.into()))),
        };
        Dir { key, seq: 0, aead }
    }

    pub fn encrypted(&self) -> bool {
        self.aead.is_some()
    }

    fn next(&mut self) -> u64 {
        let s = self.seq;
        self.seq = self.seq.wrapping_add(1);
        s
    }

    /// The MAC of the next frame (integrity mode), its counter already fed.
    pub fn mac(&mut self) -> FrameMac {
        let seq = self.next();
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(&seq.to_le_bytes());
        FrameMac(h)
    }

    fn nonce(seq: u64) -> Nonce<aes_gcm::aead::consts::U12> {
        let mut n = [0u8; 12];
        n[..8].copy_from_slice(&seq.to_le_bytes());
        n.into()
    }

    /// Encrypts `buf` in place as the next frame's protected part (encryption mode);
    /// returns the tag.
    pub fn encrypt(&mut self, aad: &[u8], buf: &mut [u8]) -> [u8; TAG_LEN] {
        let seq = self.next();
        let aead = self.aead.as_ref().expect("encryption mode");
        match aead.encrypt_in_place_detached(&Self::nonce(seq), aad, buf) {
            Ok(t) => t.into(),
            // Only for inputs over 64 GiB, which no frame is.
            Err(_) => [0u8; TAG_LEN],
        }
    }

    /// Decrypts `buf` in place as the next frame's protected part and checks its tag.
    pub fn decrypt(&mut self, aad: &[u8], buf: &mut [u8], tag: &[u8; TAG_LEN]) -> bool {
        let seq = self.next();
        let aead = self.aead.as_ref().expect("encryption mode");
        aead.decrypt_in_place_detached(&Self::nonce(seq), aad, buf, Tag::from_slice(tag))
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_binds_key_counter_and_bytes() {
        let mut a = Dir::new([1; 32], Protection::Integrity);
        let mut b = Dir::new([1; 32], Protection::Integrity);
        let mut m = a.mac();
        m.update(b"frame");
        let t = m.tag();
        let mut n = b.mac();
        n.update(b"frame");
        assert!(n.matches(&t));
        // The next frame (counter 1) with the same bytes: another tag (no replay).
        let mut n2 = b.mac();
        n2.update(b"frame");
        assert!(!n2.matches(&t));
        let mut other = Dir::new([2; 32], Protection::Integrity).mac();
        other.update(b"frame");
        assert!(!other.matches(&t));
    }

    #[test]
    fn encryption_round_trips_and_refuses_changes() {
        let mut s = Dir::new([9; 32], Protection::Encrypted);
        let mut r = Dir::new([9; 32], Protection::Encrypted);
        let mut buf = b"checkpoint bytes".to_vec();
        let tag = s.encrypt(b"hdr", &mut buf);
        assert_ne!(&buf[..], b"checkpoint bytes");
        let mut copy = buf.clone();
        assert!(r.decrypt(b"hdr", &mut copy, &tag));
        assert_eq!(&copy[..], b"checkpoint bytes");
        // A flipped byte, another header, or a replay (counter 1 now): refused.
        let mut r2 = Dir::new([9; 32], Protection::Encrypted);
        let mut bad = buf.clone();
        bad[0] ^= 1;
        assert!(!r2.decrypt(b"hdr", &mut bad, &tag));
        let mut r3 = Dir::new([9; 32], Protection::Encrypted);
        let mut c3 = buf.clone();
        assert!(!r3.decrypt(b"hdX", &mut c3, &tag));
        let mut c4 = buf.clone();
        assert!(!r.decrypt(b"hdr", &mut c4, &tag));
    }
}
