//! The arithmetic: XOR parity (one parity shard per stripe) and Reed-Solomon parity
//! (`k` parity shards per stripe, `reed-solomon-simd`), over equal-length shards.
//!
//! A *stripe* is `d` data shards and `p` parity shards of one length; any `p` of the
//! `d + p` shards may be missing and are rebuilt from the others ([`decode`]).

use crate::ErasureError;
use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A redundancy scheme of an erasure set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Scheme {
    /// One parity shard per stripe (bitwise XOR); tolerates one lost member.
    Xor,
    /// Reed-Solomon with `k` parity shards per stripe; tolerates `k` lost members.
    Rs(u16),
}

impl Scheme {
    /// Parity shards per stripe (members that may be lost).
    pub fn parity(&self) -> usize {
        match self {
            Scheme::Xor => 1,
            Scheme::Rs(k) => *k as usize,
        }
    }

    /// Parse `xor` or `rs:K` (`rs` alone is `rs:2`).
    pub fn parse(s: &str) -> Option<Scheme> {
        match s {
            "xor" => Some(Scheme::Xor),
            "rs" => Some(Scheme::Rs(2)),
            _ => {
                let k: u16 = s.strip_prefix("rs:")?.parse().ok()?;
                (1..=255).contains(&k).then_some(Scheme::Rs(k))
            }
        }
    }

    /// The smallest set this scheme works on (`parity + 1`: one data segment per stripe).
    pub fn min_members(&self) -> usize {
        self.parity() + 1
    }
}

impl From<ckptfs_cluster::Erasure> for Scheme {
    fn from(e: ckptfs_cluster::Erasure) -> Scheme {
        match e {
            ckptfs_cluster::Erasure::Xor => Scheme::Xor,
            ckptfs_cluster::Erasure::Rs(k) => Scheme::Rs(k),
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scheme::Xor => f.write_str("xor"),
            Scheme::Rs(k) => write!(f, "rs:{k}"),
        }
    }
}

/// `dst ^= src` over the common length: eight bytes at a time (the compiler turns the
/// loop into SIMD on every target; no unsafe code), then the tail byte by byte.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let mut d8 = dst.chunks_exact_mut(64);
    let mut s8 = src.chunks_exact(64);
    for (d, s) in (&mut d8).zip(&mut s8) {
        for i in 0..8 {
            let a = u64::from_ne_bytes(d[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            let b = u64::from_ne_bytes(s[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            d[i * 8..i * 8 + 8].copy_from_slice(&(a ^ b).to_ne_bytes());
        }
    }
    for (d, s) in d8.into_remainder().iter_mut().zip(s8.remainder()) {
        *d ^= *s;
    }
}

/// Bytes of each shard that one Reed-Solomon call works on. The crate copies every data
/// shard into its work space and makes several passes over it; with a whole segment
/// (megabytes) per call every pass goes to memory, with this much the work space of the
/// sets used here (6 x 64 KiB for `rs:2` over 8, 8 x 64 KiB for `rs:3` over 8) stays in
/// a core's L2 cache. A multiple of 64: the crate encodes every 64 bytes of a shard on
/// their own (32 GF(2^16) elements, low bytes then high bytes; only a last piece
/// shorter than 64 bytes is laid out differently, and it stays last), so cutting shards
/// at multiples of 64 gives the same parity bytes as encoding them whole.
pub const RS_BLOCK: usize = 64 << 10;

/// Bytes of each shard that one Reed-Solomon *decode* call works on. Larger than
/// [`RS_BLOCK`]: every decode call of the crate first evaluates the erasure locator
/// over the whole field (65 536 elements, `eval_poly`), a fixed cost of its own that
/// pieces of 64 KiB pay 256 times per 16 MiB shard (it then took most of a decode's
/// time, in the profile of `bench erasure`); whole shards of megabytes instead stream
/// the decoder's work space (a power of two of shards) through memory on each of its
/// passes. 512 KiB: the work space of `rs:2` over 6 (8 shards) is 4 MiB, in L3. A
/// multiple of 64, for the same reason as [`RS_BLOCK`].
pub const RS_DECODE_BLOCK: usize = 512 << 10;

/// A reusable encoder for one scheme and shard shape.
pub struct Encoder {
    scheme: Scheme,
    data: usize,
    len: usize,
    /// Reed-Solomon's encoder, set up for pieces of `block` bytes.
    rs: Option<ReedSolomonEncoder>,
    /// The piece length `rs` is set up for (0: set it up again before use).
    block: usize,
}

fn rs_err(e: reed_solomon_simd::Error) -> ErasureError {
    ErasureError::Codec(e.to_string())
}

impl Encoder {
    /// An encoder of stripes of `data` data shards of `len` bytes (`len` even for
    /// Reed-Solomon: the layout rounds segment lengths up to 64 bytes).
    pub fn new(scheme: Scheme, data: usize, len: usize) -> Result<Encoder, ErasureError> {
        if data == 0 {
            return Err(ErasureError::Codec(
                "a stripe needs at least one data shard".into(),
            ));
        }
        let (rs, block) = match scheme {
            Scheme::Rs(k) if len > 0 => {
                if !len.is_multiple_of(2) {
                    return Err(ErasureError::Codec(format!(
                        "Reed-Solomon shards must have an even length, not {len}"
                    )));
                }
                let block = len.min(RS_BLOCK);
                let rs = ReedSolomonEncoder::new(data, k as usize, block).map_err(rs_err)?;
                (Some(rs), block)
            }
            _ => (None, 0),
        };
        Ok(Encoder {
            scheme,
            data,
            len,
            rs,
            block,
        })
    }

    /// Parity of one stripe: `data` shards in, `parity` shards (each `len` bytes) out.
    /// The parity vectors are overwritten (their allocations kept).
    pub fn encode(&mut self, data: &[&[u8]], parity: &mut [Vec<u8>]) -> Result<(), ErasureError> {
        if data.len() != self.data || parity.len() != self.scheme.parity() {
            return Err(ErasureError::Codec(format!(
                "stripe shape {}+{} is not {}+{}",
                data.len(),
                parity.len(),
                self.data,
                self.scheme.parity()
            )));
        }
        if data.iter().any(|d| d.len() != self.len) {
            return Err(ErasureError::Codec("data shards of unequal length".into()));
        }
        // Every parity byte is written exactly once below (appended), none zeroed first.
        for p in parity.iter_mut() {
            p.clear();
            p.reserve(self.len);
        }
        if self.len == 0 {
            return Ok(());
        }
        match self.scheme {
            Scheme::Xor => {
                let p = &mut parity[0];
                p.extend_from_slice(data[0]);
                for d in &data[1..] {
                    xor_into(p, d);
                }
            }
            Scheme::Rs(k) => {
                let r = self.encode_rs(k as usize, data, parity);
                if r.is_err() {
                    // Shards may have been added: set the encoder up again next time.
                    self.block = 0;
                    for p in parity.iter_mut() {
                        p.clear();
                    }
                }
                r?;
            }
        }
        Ok(())
    }

    /// Reed-Solomon parity of one stripe, [`RS_BLOCK`] bytes of every shard at a time
    /// (the last piece shorter), appended to `parity`.
    fn encode_rs(&mut self, k: usize, data: &[&[u8]], parity: &mut [Vec<u8>]) -> Result<(), ErasureError> {
        let Some(rs) = self.rs.as_mut() else {
            return Err(ErasureError::Codec("no Reed-Solomon encoder".into()));
        };
        let mut off = 0;
        while off < self.len {
            let n = RS_BLOCK.min(self.len - off);
            if n != self.block {
                rs.reset(self.data, k, n).map_err(rs_err)?;
                self.block = n;
            }
            for d in data {
                rs.add_original_shard(&d[off..off + n]).map_err(rs_err)?;
            }
            let out = rs.encode().map_err(rs_err)?;
            for (p, r) in parity.iter_mut().zip(out.recovery_iter()) {
                p.extend_from_slice(r);
            }
            off += n;
        }
        Ok(())
    }
}

/// Rebuild the missing shards of one stripe in place (see [`Decoder::decode`]); a
/// one-off [`Decoder`].
pub fn decode(
    scheme: Scheme,
    data: usize,
    len: usize,
    shards: &mut [Option<Vec<u8>>],
) -> Result<(), ErasureError> {
    Decoder::new(scheme, data, len).decode(shards)
}

/// A reusable decoder for one scheme and stripe shape: Reed-Solomon's work buffers are
/// allocated once, for pieces of [`RS_DECODE_BLOCK`] bytes, and kept across stripes
/// (making them costs more than decoding a stripe of a few MiB; whole shards of
/// megabytes per call made every pass of the decoder go to memory, pieces keep its
/// work space in cache, as for [`Encoder`]).
pub struct Decoder {
    scheme: Scheme,
    data: usize,
    len: usize,
    rs: Option<ReedSolomonDecoder>,
    /// The piece length `rs` is set up for (0: set it up again before use).
    block: usize,
    enc: Option<Encoder>,
}

impl Decoder {
    /// A decoder of stripes of `data` data shards of `len` bytes.
    pub fn new(scheme: Scheme, data: usize, len: usize) -> Decoder {
        Decoder {
            scheme,
            data,
            len,
            rs: None,
            block: 0,
            enc: None,
        }
    }

    /// Rebuild the missing shards of one stripe in place. `shards` holds the `data`
    /// data shards then the parity shards; `None` for a missing one (each present shard
    /// is `len` bytes). Every missing data shard is filled; missing parity shards are
    /// recomputed. Fails when more shards are missing than the scheme has parity.
    pub fn decode(&mut self, shards: &mut [Option<Vec<u8>>]) -> Result<(), ErasureError> {
        let (scheme, data, len) = (self.scheme, self.data, self.len);
        let p = scheme.parity();
        if shards.len() != data + p {
            return Err(ErasureError::Codec(
                "stripe has the wrong number of shards".into(),
            ));
        }
        if shards.iter().flatten().any(|s| s.len() != len) {
            return Err(ErasureError::Codec("shards of unequal length".into()));
        }
        let missing = shards.iter().filter(|s| s.is_none()).count();
        if missing > p {
            return Err(ErasureError::Codec(format!(
                "{missing} shards of a stripe are missing; the scheme rebuilds at most {p}"
            )));
        }
        if missing == 0 {
            return Ok(());
        }
        let data_missing = shards[..data].iter().any(|s| s.is_none());
        if data_missing && len == 0 {
            for s in shards[..data].iter_mut() {
                s.get_or_insert_with(Vec::new);
            }
        } else if data_missing {
            match scheme {
                Scheme::Xor => {
                    let gone = shards[..data]
                        .iter()
                        .position(|s| s.is_none())
                        .expect("one missing");
                    let mut acc = shards[data]
                        .clone()
                        .expect("parity present when a data shard is missing");
                    for (i, s) in shards[..data].iter().enumerate() {
                        if i != gone {
                            xor_into(&mut acc, s.as_ref().expect("present"));
                        }
                    }
                    shards[gone] = Some(acc);
                }
                Scheme::Rs(k) => {
                    let gone: Vec<usize> = (0..data).filter(|&i| shards[i].is_none()).collect();
                    // Every restored byte is appended once, nothing zero-filled first.
                    let mut out: Vec<Vec<u8>> = gone.iter().map(|_| Vec::with_capacity(len)).collect();
                    let r = self.decode_rs(k as usize, shards, &gone, &mut out);
                    if r.is_err() {
                        // Shards may have been added: set the decoder up again next time.
                        self.block = 0;
                    }
                    r?;
                    for (i, b) in gone.into_iter().zip(out) {
                        shards[i] = Some(b);
                    }
                    if shards[..data].iter().any(|s| s.is_none()) {
                        return Err(ErasureError::Codec(
                            "decoder did not restore every data shard".into(),
                        ));
                    }
                }
            }
        }
        if shards[data..].iter().any(|s| s.is_none()) {
            let enc = match &mut self.enc {
                Some(e) => e,
                slot => slot.insert(Encoder::new(scheme, data, len)?),
            };
            let d: Vec<&[u8]> = shards[..data]
                .iter()
                .map(|s| s.as_deref().expect("restored"))
                .collect();
            let mut par = vec![Vec::new(); p];
            enc.encode(&d, &mut par)?;
            for (slot, new) in shards[data..].iter_mut().zip(par) {
                slot.get_or_insert(new);
            }
        }
        Ok(())
    }
}

impl Decoder {
    /// Reed-Solomon: the missing data shards `gone` of one stripe, [`RS_DECODE_BLOCK`]
    /// bytes of every shard at a time (the last piece shorter), appended to `out` (one
    /// vector per index of `gone`). Cut at multiples of 64 bytes like the encoder's
    /// pieces, so each piece decodes as the whole shards would.
    fn decode_rs(
        &mut self,
        k: usize,
        shards: &[Option<Vec<u8>>],
        gone: &[usize],
        out: &mut [Vec<u8>],
    ) -> Result<(), ErasureError> {
        let (data, len) = (self.data, self.len);
        let mut off = 0;
        while off < len {
            let n = RS_DECODE_BLOCK.min(len - off);
            let dec = match &mut self.rs {
                Some(d) => {
                    if n != self.block {
                        d.reset(data, k, n).map_err(rs_err)?;
                    }
                    d
                }
                slot => slot.insert(ReedSolomonDecoder::new(data, k, n).map_err(rs_err)?),
            };
            self.block = n;
            for (i, s) in shards[..data].iter().enumerate() {
                if let Some(s) = s {
                    dec.add_original_shard(i, &s[off..off + n]).map_err(rs_err)?;
                }
            }
            for (j, s) in shards[data..].iter().enumerate() {
                if let Some(s) = s {
                    dec.add_recovery_shard(j, &s[off..off + n]).map_err(rs_err)?;
                }
            }
            let res = dec.decode().map_err(rs_err)?;
            for (i, b) in res.restored_original_iter() {
                let at = gone.iter().position(|&g| g == i).ok_or_else(|| {
                    ErasureError::Codec(format!("decoder restored shard {i}, which is present"))
                })?;
                out[at].extend_from_slice(b);
            }
            off += n;
        }
        if out.iter().any(|b| b.len() != len) {
            return Err(ErasureError::Codec(
                "decoder did not restore every data shard".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn xor_into_matches_bytewise_xor() {
        for n in [0, 1, 63, 64, 65, 1000] {
            let (a, b) = (bytes(n, 1), bytes(n, 2));
            let mut d = a.clone();
            xor_into(&mut d, &b);
            assert!(d.iter().zip(a.iter().zip(&b)).all(|(d, (a, b))| *d == a ^ b));
        }
    }

    #[test]
    fn every_loss_up_to_parity_is_rebuilt() {
        for scheme in [Scheme::Xor, Scheme::Rs(1), Scheme::Rs(2), Scheme::Rs(3)] {
            for data in 1..6 {
                let len = 128;
                let d: Vec<Vec<u8>> = (0..data).map(|i| bytes(len, i as u32)).collect();
                let refs: Vec<&[u8]> = d.iter().map(|v| v.as_slice()).collect();
                let mut par = vec![Vec::new(); scheme.parity()];
                Encoder::new(scheme, data, len)
                    .unwrap()
                    .encode(&refs, &mut par)
                    .unwrap();
                let all: Vec<Vec<u8>> = d.iter().cloned().chain(par.iter().cloned()).collect();
                let total = all.len();
                for mask in 0u32..(1 << total) {
                    let lost = mask.count_ones() as usize;
                    let mut shards: Vec<Option<Vec<u8>>> = all
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (mask & (1 << i) == 0).then(|| s.clone()))
                        .collect();
                    let r = decode(scheme, data, len, &mut shards);
                    if lost <= scheme.parity() {
                        r.unwrap();
                        let got: Vec<Vec<u8>> = shards.into_iter().map(|s| s.unwrap()).collect();
                        assert_eq!(got, all, "{scheme} data {data} mask {mask:b}");
                    } else {
                        assert!(r.is_err());
                    }
                }
            }
        }
    }

    /// Parity of a stripe from one `reed-solomon-simd` call over whole shards: what the
    /// codec computed before it cut shards into pieces (what stores written then hold).
    fn whole_shard_parity(data: &[Vec<u8>], k: usize) -> Vec<Vec<u8>> {
        let mut rs = ReedSolomonEncoder::new(data.len(), k, data[0].len()).unwrap();
        for d in data {
            rs.add_original_shard(d).unwrap();
        }
        let out = rs.encode().unwrap();
        out.recovery_iter().map(|r| r.to_vec()).collect()
    }

    #[test]
    fn shards_cut_into_pieces_encode_as_whole_shards() {
        let lens = [
            2,
            62,
            64,
            66,
            4096,
            RS_BLOCK - 64,
            RS_BLOCK - 2,
            RS_BLOCK,
            RS_BLOCK + 2,
            RS_BLOCK + 64,
            RS_BLOCK + 126,
            2 * RS_BLOCK,
            2 * RS_BLOCK + 70,
        ];
        // High and low rate (more parity than data), one and several chunks of the crate.
        for (data, k) in [(1, 1), (1, 3), (2, 3), (3, 2), (6, 2), (5, 3), (7, 1)] {
            for len in lens {
                let mut enc = Encoder::new(Scheme::Rs(k as u16), data, len).unwrap();
                // Parity buffers of another length holding other bytes, and the same
                // encoder twice: nothing of an earlier call may show.
                let mut par = vec![vec![0xa5u8; len + 7]; k];
                for round in 0..2u32 {
                    let d: Vec<Vec<u8>> = (0..data).map(|i| bytes(len, round * 100 + i as u32)).collect();
                    let refs: Vec<&[u8]> = d.iter().map(|v| v.as_slice()).collect();
                    enc.encode(&refs, &mut par).unwrap();
                    assert!(
                        par == whole_shard_parity(&d, k),
                        "{data}+{k}, shards of {len} bytes, round {round}"
                    );
                }
            }
        }
    }

    /// Shards longer than one decoder piece (several [`RS_DECODE_BLOCK`]s and a shorter
    /// last piece), one decoder reused across stripes with different losses: every
    /// lost data shard comes back byte-identical, parity recomputed too.
    #[test]
    fn one_decoder_rebuilds_long_shards_piece_by_piece() {
        for (data, k) in [(4usize, 2usize), (6, 2), (5, 3), (1, 2)] {
            for len in [
                RS_BLOCK + 2,
                RS_DECODE_BLOCK - 64,
                RS_DECODE_BLOCK + 2,
                2 * RS_DECODE_BLOCK + 70,
            ] {
                let scheme = Scheme::Rs(k as u16);
                let mut dec = Decoder::new(scheme, data, len);
                for round in 0..3u32 {
                    let d: Vec<Vec<u8>> = (0..data).map(|i| bytes(len, round * 31 + i as u32)).collect();
                    let par = whole_shard_parity(&d, k);
                    let all: Vec<Vec<u8>> = d.iter().cloned().chain(par).collect();
                    // Lose up to k shards, data first, another choice each round.
                    let lost: Vec<usize> = (0..k).map(|j| (round as usize + j * 2) % (data + k)).collect();
                    let mut shards: Vec<Option<Vec<u8>>> = all
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (!lost.contains(&i)).then(|| s.clone()))
                        .collect();
                    dec.decode(&mut shards).unwrap();
                    let got: Vec<Vec<u8>> = shards.into_iter().map(|s| s.unwrap()).collect();
                    assert!(
                        got == all,
                        "{data}+{k}, {len} bytes, round {round}, lost {lost:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn odd_reed_solomon_shards_are_refused() {
        for len in [1, 63, RS_BLOCK + 1, 2 * RS_BLOCK + 3] {
            assert!(Encoder::new(Scheme::Rs(2), 3, len).is_err(), "{len}");
        }
        assert!(Encoder::new(Scheme::Xor, 3, 63).is_ok());
    }

    #[test]
    fn schemes_parse_and_print() {
        assert_eq!(Scheme::parse("xor"), Some(Scheme::Xor));
        assert_eq!(Scheme::parse("rs:3"), Some(Scheme::Rs(3)));
        assert_eq!(Scheme::parse("rs:0"), None);
        assert_eq!(Scheme::parse("rs:x"), None);
        assert_eq!(Scheme::Rs(2).to_string(), "rs:2");
    }
}
